// glass/tokenizer.hpp — journey step 1: text -> pieces -> integer ids, and back.
//
// In:  UTF-8 text (any bytes, really).
// Out: token ids, BOS first. Decoding maps ids back to bytes.
//
// This is the SentencePiece-style BPE that llama2.c (and Llama 2) use. The vocabulary file
// (llama2.c format) holds, for every id, a piece of text and a score:
//   int32 max_token_length; then per piece: float32 score, int32 length, `length` bytes.
// Conventions of this family of vocabularies:
//   id 0 <unk>, id 1 BOS, id 2 EOS; ids 3..258 are byte-fallback pieces "<0x00>".."<0xFF>".
// Encoding, in order:
//   1. BOS (if asked for).
//   2. A "dummy prefix" space piece before non-empty text, so the first word is encoded like
//      every other word (" Once", not "Once").
//   3. Each UTF-8 character becomes its own piece, or — if the vocabulary lacks it — one
//      byte-fallback piece per byte.
//   4. Neighbouring pieces merge, highest score first (bpe_merge.hpp), while the merged text is
//      itself a piece.
// Decoding: the piece's text; "<0xNN>" pieces are the raw byte NN; right after BOS the leading
// space of the first piece (the dummy prefix) is dropped.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "glass/bpe_merge.hpp"
#include "glass/errors.hpp"

namespace glass {

// What the generate loop needs from any tokenizer.
class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    virtual int vocab_size() const = 0;
    virtual int bos_id() const = 0;  // -1 when the vocabulary has none
    virtual int eos_id() const = 0;
    virtual std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos) const = 0;
    // The bytes token `id` contributes to the text when it follows `prev_id`.
    virtual std::string decode(int prev_id, int id) const = 0;
    // The piece as stored in the vocabulary (for display).
    virtual std::string piece(int id) const = 0;
};

class Llama2cTokenizer : public Tokenizer {
public:
    // expected_vocab_size < 0: the vocabulary is every entry in the file. Otherwise the file
    // must hold exactly that many pieces (the model's vocabulary).
    static Llama2cTokenizer load(const std::string& path, int expected_vocab_size = -1) {
        std::ifstream in(path, std::ios::binary);
        if (!in) fail("cannot open tokenizer file '", path, "': ", std::strerror(errno));
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        try {
            return parse(bytes, expected_vocab_size);
        } catch (const Error& e) {
            fail("tokenizer file '", path, "': ", e.what());
        }
    }

    static Llama2cTokenizer parse(const std::vector<char>& bytes, int expected_vocab_size = -1) {
        Llama2cTokenizer t;
        size_t at = 0;
        auto read_i32 = [&](std::int32_t& v) {
            if (bytes.size() - at < 4) return false;
            std::memcpy(&v, bytes.data() + at, 4);
            at += 4;
            return true;
        };
        std::int32_t max_len = 0;
        if (!read_i32(max_len)) fail("file is ", bytes.size(), " bytes: too short for the 4-byte header");
        if (max_len < 1 || max_len > (1 << 16))
            fail("bad max_token_length header ", max_len, " (expected 1..65536)");
        while (at < bytes.size()) {
            const int id = static_cast<int>(t.pieces_.size());
            float score = 0;
            std::int32_t len = 0;
            if (bytes.size() - at < 8) fail("truncated entry for piece ", id, " at byte ", at);
            std::memcpy(&score, bytes.data() + at, 4);
            at += 4;
            read_i32(len);
            if (len < 0 || len > max_len)
                fail("piece ", id, " has length ", len, " outside [0, max_token_length=", max_len, "]");
            if (bytes.size() - at < static_cast<size_t>(len))
                fail("piece ", id, " (", len, " bytes) runs past the end of the file");
            if (std::isnan(score)) fail("piece ", id, " has a NaN score");
            t.pieces_.emplace_back(bytes.data() + at, static_cast<size_t>(len));
            t.scores_.push_back(score);
            at += static_cast<size_t>(len);
            if (t.pieces_.size() > (1u << 22)) fail("more than 4M pieces: not a tokenizer file");
        }
        if (t.pieces_.size() < 3) fail("only ", t.pieces_.size(), " pieces; need <unk>, BOS, EOS");
        if (expected_vocab_size >= 0 && static_cast<int>(t.pieces_.size()) != expected_vocab_size)
            fail("has ", t.pieces_.size(), " pieces but the model's vocabulary has ",
                 expected_vocab_size, ": this tokenizer does not belong to this model");
        t.build_indexes();
        return t;
    }

    int vocab_size() const override { return static_cast<int>(pieces_.size()); }
    int bos_id() const override { return 1; }
    int eos_id() const override { return 2; }
    float score(int id) const { return scores_.at(check_id(id)); }
    std::string piece(int id) const override { return pieces_[check_id(id)]; }

    // The id of a piece of text, or -1.
    int find(std::string_view text) const {
        auto it = piece_to_id_.find(std::string(text));
        return it == piece_to_id_.end() ? -1 : it->second;
    }

    // The byte-fallback id for a raw byte ("<0xNN>"), or -1 if the vocabulary lacks it.
    int byte_id(unsigned char b) const { return byte_to_id_[b]; }

    std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos) const override {
        std::vector<int> ids;
        if (add_bos) ids.push_back(bos_id());
        std::vector<int> body;
        if (!text.empty()) {
            const int space = find(" ");
            if (space >= 0) body.push_back(space);  // the dummy prefix
        }
        // One piece per UTF-8 character. A character is a lead byte plus up to 3 continuation
        // bytes (10xxxxxx); invalid sequences simply become several byte pieces.
        size_t i = 0;
        while (i < text.size()) {
            size_t n = 1;
            while (i + n < text.size() && n < 4 && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80)
                ++n;
            const std::string_view ch = text.substr(i, n);
            const int id = find(ch);
            if (id >= 0) {
                body.push_back(id);
            } else {
                for (unsigned char b : ch) body.push_back(byte_id(b) >= 0 ? byte_id(b) : 0 /*<unk>*/);
            }
            i += n;
        }
        bpe_merge(body, [this](int left, int right) -> std::optional<Merge> {
            const int id = find(pieces_[left] + pieces_[right]);
            if (id < 0) return std::nullopt;
            return Merge{id, -static_cast<double>(scores_[id])};
        });
        ids.insert(ids.end(), body.begin(), body.end());
        if (add_eos) ids.push_back(eos_id());
        return ids;
    }

    std::string decode(int prev_id, int id) const override {
        check_id(id);
        if (id_to_byte_[id] >= 0) return std::string(1, static_cast<char>(id_to_byte_[id]));
        std::string_view p = pieces_[id];
        if (prev_id == bos_id() && !p.empty() && p[0] == ' ') p.remove_prefix(1);
        return std::string(p);
    }

    // Whole-sequence decode (BOS/EOS contribute nothing).
    std::string decode_all(const std::vector<int>& ids) const {
        std::string out;
        int prev = -1;
        for (int id : ids) {
            if (id != bos_id() && id != eos_id()) out += decode(prev, id);
            prev = id;
        }
        return out;
    }

private:
    int check_id(int id) const {
        if (id < 0 || id >= vocab_size())
            fail("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
        return id;
    }

    void build_indexes() {
        piece_to_id_.reserve(pieces_.size());
        for (int id = 0; id < vocab_size(); ++id) piece_to_id_.emplace(pieces_[id], id);  // first wins
        byte_to_id_.assign(256, -1);
        id_to_byte_.assign(pieces_.size(), -1);
        for (int id = 0; id < vocab_size(); ++id) {
            const std::string& p = pieces_[id];
            unsigned value = 0;
            char tail = 0;
            if (p.size() == 6 && std::sscanf(p.c_str(), "<0x%2X%c", &value, &tail) == 2 && tail == '>') {
                if (byte_to_id_[value] < 0) byte_to_id_[value] = id;
                id_to_byte_[id] = static_cast<int>(value);
            }
        }
    }

    std::vector<std::string> pieces_;
    std::vector<float> scores_;
    std::unordered_map<std::string, int> piece_to_id_;
    std::vector<int> byte_to_id_;  // [256]
    std::vector<int> id_to_byte_;  // [vocab] -1 unless a byte-fallback piece
};

}  // namespace glass
