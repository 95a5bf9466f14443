/// \file
/// \brief glass/tokenize/sentencepiece_bpe.hpp — journey step 1 for Llama 2, llama2.c and TinyLlama: SentencePiece-style BPE.
/// ```text
/// SentencePiece-style BPE: merges over characters, with byte fallback for anything else.
///
/// In:  UTF-8 text (any bytes, really).
/// Out: token ids [n_tokens] (BOS first if asked). Decoding maps ids back to bytes.
///
/// Conventions of this family of vocabularies (llama2.c, Llama 2, GGUF "llama" vocabularies):
///   id 0 <unk>, id 1 BOS, id 2 EOS (by default); pieces "<0x00>".."<0xFF>" stand for raw bytes;
///   a space is written "▁" inside pieces (llama2.c's files store a plain " " instead).
/// Encoding, in order:
///   1. BOS (if asked for).
///   2. A "dummy prefix" space before non-empty text, so the first word is encoded like every
///      other word (" Once", not "Once"); every space becomes the space mark.
///   3. Each UTF-8 character becomes its own piece, or — if the vocabulary lacks it — one
///      byte-fallback piece per byte (<unk> if even that is missing).
///   4. Neighbouring pieces merge (bpe_merge.hpp, the same engine byte-level BPE uses):
///        - with scores (llama2.c, SentencePiece, GGUF): two pieces merge when their joined text
///          is a piece; the best score goes first, i.e. rank = -score of the merged piece;
///        - with a merges list (Hugging Face tokenizer.json): pair i has rank i.
/// Decoding: the piece's text with the space mark turned back into " "; "<0xNN>" pieces are the
/// raw byte NN; right after BOS the leading space of the first piece (the dummy prefix) is dropped.
/// ```
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "glass/tokenize/bpe_merge.hpp"
#include "glass/errors.hpp"
#include "glass/tokenize/special_tokens.hpp"
#include "glass/tokenizer.hpp"

namespace glass {

/// The byte a byte-fallback piece stands for: exactly `<0x` + two hex digits + `>` (`<0x0A>` is
/// 10), else -1. The one parser of these pieces for every loader (llama2.c, GGUF, tokenizer.json):
/// no sign, no space, no third digit (`<0x-2>` is an ordinary piece, not byte -2).
inline int byte_piece_value(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    int value = 0;
    for (char c : piece.substr(3, 2)) {
        int digit = -1;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;  // 0..255
}

// Everything a SentencePiece-style vocabulary is made of, whatever file it came from.
struct SentencePieceVocab {
    std::string name;                         // for messages: the file, usually
    std::vector<std::string> pieces;          // [vocab] text of each piece (spaces as space_mark)
    std::vector<float> scores;                // [vocab] higher merges first; used when merges is empty
    std::vector<std::pair<int, int>> merges;  // [n_merges] (left id, right id), rank = index
    std::vector<SpecialToken> specials;       // matched only by encode_with_specials
    std::string space_mark = "\xE2\x96\x81";  // "▁"; " " for llama2.c files
    bool add_dummy_prefix = true;
    // encode_with_specials: Hugging Face puts the dummy prefix before the text's first stretch
    // only; llama.cpp (GGUF files) before every stretch that follows a special token too.
    bool dummy_prefix_after_specials = false;
    bool byte_fallback = true;                // use <0xNN> pieces for characters not in the vocab
    int unk_id = 0, bos_id = 1, eos_id = 2;   // -1: none
    bool add_bos = true;                      // a prompt starts with BOS
};

class SentencePieceBpe : public Tokenizer {
public:
    explicit SentencePieceBpe(SentencePieceVocab vocab) : v_(std::move(vocab)) {
        const int n = static_cast<int>(v_.pieces.size());
        if (n == 0) fail(v_.name, ": the vocabulary is empty");
        if (v_.merges.empty() && v_.scores.size() != v_.pieces.size())
            fail(v_.name, ": ", v_.pieces.size(), " pieces but ", v_.scores.size(), " scores");
        for (int id : {v_.unk_id, v_.bos_id, v_.eos_id})
            if (id < -1 || id >= n) fail(v_.name, ": special id ", id, " is outside the vocabulary of ", n);
        for (const SpecialToken& s : v_.specials)
            if (s.id < 0 || s.id >= n) fail(v_.name, ": special token '", s.text, "' has id ", s.id, " outside [0, ", n, ")");
        specials_ = SpecialMatcher(v_.specials);
        build_indexes();
        if (v_.merges.empty()) build_merges_from_scores();
        else build_merges_from_list();
    }

    int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
    int bos_id() const override { return v_.bos_id; }
    int eos_id() const override { return v_.eos_id; }
    bool adds_bos() const override { return v_.add_bos && v_.bos_id >= 0; }
    const SentencePieceVocab& vocab() const { return v_; }
    float score(int id) const { return v_.scores.at(check_id(id)); }
    std::string piece(int id) const override { return v_.pieces[check_id(id)]; }

    // The id of a piece of text (as stored, space mark included), or -1. First id wins.
    int find(std::string_view text) const {
        auto it = piece_to_id_.find(std::string(text));
        return it == piece_to_id_.end() ? -1 : it->second;
    }

    // The byte-fallback id for a raw byte ("<0xNN>"), or -1 if the vocabulary lacks it.
    int byte_id(unsigned char b) const { return byte_to_id_[b]; }

    std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos) const override {
        std::vector<int> ids;
        if (add_bos) ids.push_back(require(v_.bos_id, "BOS"));
        encode_ordinary(text, /*at_start=*/true, ids);
        if (add_eos) ids.push_back(require(v_.eos_id, "EOS"));
        return ids;
    }

    std::vector<int> encode_with_specials(std::string_view text) const override {
        std::vector<int> ids;
        bool at_start = true;  // whether the next stretch gets the dummy prefix
        specials_.split(
            text,
            [&](std::string_view ordinary) {
                if (ordinary.empty()) return;
                encode_ordinary(ordinary, at_start, ids);
                at_start = false;
            },
            [&](int id) {
                ids.push_back(id);
                at_start = v_.dummy_prefix_after_specials;
            });
        return ids;
    }

    // Steps 2-4; appends to `ids`.
    void encode_ordinary(std::string_view text, bool at_start, std::vector<int>& ids) const {
        if (text.empty()) return;
        std::vector<int> body;
        const int space = find(v_.space_mark);
        if (at_start && v_.add_dummy_prefix && space >= 0) body.push_back(space);  // the dummy prefix
        // One piece per UTF-8 character. A character is a lead byte plus up to 3 continuation
        // bytes (10xxxxxx); invalid sequences simply become several byte pieces.
        size_t i = 0;
        while (i < text.size()) {
            size_t n = 1;
            while (i + n < text.size() && n < 4 && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80)
                ++n;
            const std::string_view ch = text.substr(i, n);
            const int id = ch == " " ? space : find(ch);
            if (id >= 0) {
                body.push_back(id);
            } else {
                for (unsigned char b : ch) {
                    const int fallback = byte_id(b) >= 0 ? byte_id(b) : v_.unk_id;
                    if (fallback < 0) fail(v_.name, ": cannot encode ", describe_character(ch),
                                           ": the vocabulary has no piece for it, no <0x",
                                           hex_byte(b), "> byte piece and no unknown token");
                    body.push_back(fallback);
                }
            }
            i += n;
        }
        bpe_merge(body, [this](int left, int right) { return merges_.find(left, right); });
        ids.insert(ids.end(), body.begin(), body.end());
    }

    std::string decode(int prev_id, int id) const override {
        check_id(id);
        if (id_to_byte_[id] >= 0) return std::string(1, static_cast<char>(id_to_byte_[id]));
        std::string text = decoded_text_[id];
        if (prev_id == v_.bos_id && prev_id >= 0 && !text.empty() && text[0] == ' ') text.erase(0, 1);
        return text;
    }

    // Whole-sequence decode (BOS/EOS contribute nothing).
    std::string decode_all(const std::vector<int>& ids) const {
        std::string out;
        int prev = -1;
        for (int id : ids) {
            if (id != v_.bos_id && id != v_.eos_id) out += decode(prev, id);
            prev = id;
        }
        return out;
    }

private:
    static std::string hex_byte(unsigned char b) {
        const char* digits = "0123456789ABCDEF";
        return {digits[b >> 4], digits[b & 15]};
    }
    // 'é' (bytes C3 A9) — the character as text when it is printable ASCII or UTF-8, and its bytes.
    static std::string describe_character(std::string_view ch) {
        std::string bytes;  // "C3 A9" (appended piece by piece: GCC 12 warns falsely on a + chain)
        for (unsigned char b : ch) {
            if (!bytes.empty()) bytes += ' ';
            bytes += hex_byte(b);
        }
        const bool printable = ch.size() > 1 || (ch[0] >= 0x20 && ch[0] < 0x7F);
        std::string text;
        if (printable) {
            text.append("'").append(ch).append("' (bytes ").append(bytes).append(")");
        } else {
            text.append("byte 0x").append(bytes);
        }
        return text;
    }
    int check_id(int id) const {
        if (id < 0 || id >= vocab_size())
            fail("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
        return id;
    }
    int require(int id, const char* what) const {
        if (id < 0) fail(v_.name, ": this vocabulary has no ", what, " token");
        return id;
    }

    void build_indexes() {
        const int n = vocab_size();
        piece_to_id_.reserve(v_.pieces.size());
        for (int id = 0; id < n; ++id) piece_to_id_.emplace(v_.pieces[id], id);  // first wins
        byte_to_id_.assign(256, -1);
        id_to_byte_.assign(v_.pieces.size(), -1);
        decoded_text_.resize(v_.pieces.size());
        for (int id = 0; id < n; ++id) {
            const std::string& p = v_.pieces[id];
            const int value = v_.byte_fallback ? byte_piece_value(p) : -1;  // 0..255 or -1
            if (value >= 0) {
                if (byte_to_id_[value] < 0) byte_to_id_[value] = id;
                id_to_byte_[id] = value;
            }
            std::string& text = decoded_text_[id];  // the piece with the space mark as " "
            for (size_t i = 0; i < p.size();) {
                if (v_.space_mark != " " && p.compare(i, v_.space_mark.size(), v_.space_mark) == 0) {
                    text += ' ';
                    i += v_.space_mark.size();
                } else {
                    text += p[i++];
                }
            }
        }
    }

    // Every cut of piece T into two pieces (left, right) merges into T with rank -score(T):
    // the same answer as looking up the joined text of each neighbour pair (llama2.c's way).
    void build_merges_from_scores() {
        for (int id = 0; id < vocab_size(); ++id) {
            const std::string_view t = v_.pieces[id];
            if (t.size() < 2 || find(t) != id || std::isnan(v_.scores[id])) continue;
            for (size_t cut = 1; cut < t.size(); ++cut) {
                const int left = find(t.substr(0, cut)), right = find(t.substr(cut));
                if (left >= 0 && right >= 0) merges_.add(left, right, Merge{id, -static_cast<double>(v_.scores[id])});
            }
        }
    }

    void build_merges_from_list() {
        for (size_t rank = 0; rank < v_.merges.size(); ++rank) {
            const auto [left, right] = v_.merges[rank];
            if (left < 0 || left >= vocab_size() || right < 0 || right >= vocab_size())
                fail(v_.name, ": merge ", rank, " names ids (", left, ", ", right, ") outside the vocabulary");
            const int merged = find(v_.pieces[left] + v_.pieces[right]);
            if (merged < 0)
                fail(v_.name, ": merge ", rank, " '", v_.pieces[left], "' + '", v_.pieces[right],
                     "' makes a piece that is not in the vocabulary");
            merges_.add(left, right, Merge{merged, static_cast<double>(rank)});
        }
    }

    SentencePieceVocab v_;
    SpecialMatcher specials_;
    std::unordered_map<std::string, int> piece_to_id_;
    std::vector<int> byte_to_id_;           // [256]
    std::vector<int> id_to_byte_;           // [vocab] -1 unless a byte-fallback piece
    std::vector<std::string> decoded_text_; // [vocab] piece text with the space mark as " "
    PairMerges merges_;
};

}  // namespace glass
