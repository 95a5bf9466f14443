/// \file
/// \brief glass/tokenize/byte_level_bpe.hpp — journey step 1 for GPT-2, GPT-4, GPT-4o, Llama 3 and Qwen: byte-level BPE.
/// ```text
/// Vocabularies: GPT-2 (r50k), GPT-4 (cl100k), GPT-4o (o200k), Llama 3, Qwen.
///
/// In:  text (any bytes).
/// Out: token ids [n_tokens]; decode(id) gives back that token's raw bytes.
///
/// Encoding, in order:
///   1. (optional) special tokens: text spelling "<|endoftext|>" etc. becomes that token — only
///      when the caller asks (encode_with_specials); otherwise it is ordinary text.
///   2. (optional) NFC normalization (normalize.hpp), Qwen only.
///   3. Pre-tokenization (pretokenize.hpp): the split regex cuts the text into words.
///   4. Each word becomes one token per BYTE (so every input is encodable: no <unk>, ever) and
///      neighbours merge by rank (bpe_merge.hpp) — unless the whole word is a token already and
///      the vocabulary says to take it as is (tiktoken, Llama 3's "ignore_merges").
/// Decoding: the concatenated bytes of the tokens. A token may end in the middle of a UTF-8
/// character; Utf8Stream (streaming.hpp) holds such bytes back when streaming.
///
/// Where the merge ranks come from (ByteLevelVocab::merges):
///  - empty (tiktoken): a token's rank is its id; two neighbouring tokens merge when their
///    concatenated bytes are a token, with that token's rank.
///  - a list (GPT-2 vocab.bpe, tokenizer.json "merges"): pair i merges with rank i into the token
///    spelled by the two joined; pairs not on the list never merge.
/// ```
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "glass/tokenize/bpe_merge.hpp"
#include "glass/errors.hpp"
#include "glass/tokenize/normalize.hpp"
#include "glass/tokenize/pretokenize.hpp"
#include "glass/tokenize/special_tokens.hpp"
#include "glass/tokenizer.hpp"

namespace glass {

// Everything a byte-level vocabulary is made of, independent of the file it came from. Loaders
// (tiktoken_loader.hpp, hf_loader.hpp) fill it; so can anyone with the data in memory.
struct ByteLevelVocab {
    std::string name;                          // for messages: the file, usually
    std::vector<std::string> tokens;           // [vocab] raw bytes of each id; "" = id unused
    std::vector<std::pair<int, int>> merges;   // [n_merges] (left id, right id), rank = index;
                                               // empty: tiktoken ranks (rank = id, see above)
    std::vector<std::string> split_patterns;   // applied in order (pretokenize.hpp)
    std::vector<SpecialToken> specials;        // ids may lie beyond `tokens`
    std::vector<SpecialToken> always_split;    // matched in ALL text, before the split: Hugging
                                               // Face added tokens that are not special,
                                               // llama.cpp user-defined tokens (MPT's space runs)
    bool whole_word_first = true;  // a word that is itself a token is used as is (tiktoken,
                                   // HF ignore_merges); false: always merge from bytes (GPT-2, HF)
    bool nfc = false;              // NFC-normalize before splitting (Qwen)
    int bos_id = -1;               // -1: none
    bool add_bos = true;           // a prompt starts with BOS (when there is one)
    int eos_id = -1;
};

class ByteLevelBpe : public Tokenizer {
public:
    static constexpr int kMaxSpecialId = 1 << 24;  // far above any vocabulary (o200k: 200,019)

    explicit ByteLevelBpe(ByteLevelVocab vocab)
        : vocab_(std::move(vocab)), pretokenizer_(vocab_.split_patterns) {
        const std::string& name = vocab_.name;
        vocab_size_ = static_cast<int>(vocab_.tokens.size());
        is_special_.assign(vocab_.tokens.size(), 0);
        for (const SpecialToken& s : vocab_.specials) {
            // Bounded before `s.id + 1` (2147483647 + 1 overflows) and before it sizes a table.
            if (s.id < 0 || s.id >= kMaxSpecialId || s.text.empty())
                fail(name, ": special token '", s.text.substr(0, 40), "' has id ", s.id, " (need a text and an id in [0, ",
                     kMaxSpecialId, "))");
            vocab_size_ = std::max(vocab_size_, s.id + 1);
            if (is_special_.size() < static_cast<size_t>(vocab_size_)) is_special_.resize(vocab_size_, 0);
            is_special_[s.id] = 1;
            special_text_[s.id] = s.text;
        }
        specials_ = SpecialMatcher(vocab_.specials);
        always_split_ = SpecialMatcher(vocab_.always_split);
        for (const SpecialToken& s : vocab_.always_split)
            if (s.id < 0 || s.id >= vocab_size_) fail(name, ": added token '", s.text, "' has id ", s.id, " outside the vocabulary");
        if (vocab_.bos_id >= vocab_size_ || vocab_.eos_id >= vocab_size_)
            fail(name, ": BOS ", vocab_.bos_id, " / EOS ", vocab_.eos_id, " outside the vocabulary of ", vocab_size_);
        // Ordinary tokens only: a special token is never reached from ordinary text.
        bytes_to_id_.reserve(vocab_.tokens.size());
        for (int id = 0; id < static_cast<int>(vocab_.tokens.size()); ++id)
            if (!vocab_.tokens[id].empty() && !is_special_[id]) bytes_to_id_.emplace(vocab_.tokens[id], id);
        // Byte-level BPE starts every word from single-byte tokens. A few vocabularies
        // (DeepSeek's) leave out bytes that never occur in valid UTF-8 (0xC0, 0xC1, 0xF5..0xFF);
        // text containing one of those cannot be encoded and is refused in encode_ordinary.
        int missing = 0;
        for (int b = 0; b < 256; ++b) {
            byte_ids_[b] = find(std::string(1, static_cast<char>(b)));
            missing += byte_ids_[b] < 0;
        }
        if (missing > 64) fail(name, ": has a token for only ", 256 - missing, " of the 256 single bytes; not byte-level BPE");
        if (vocab_.merges.empty()) build_merges_from_ranks();
        else build_merges_from_list();
    }

    int vocab_size() const override { return vocab_size_; }
    int bos_id() const override { return vocab_.bos_id; }
    int eos_id() const override { return vocab_.eos_id; }
    bool adds_bos() const override { return vocab_.add_bos && vocab_.bos_id >= 0; }
    const ByteLevelVocab& vocab() const { return vocab_; }
    const PairMerges& pair_merges() const { return merges_; }
    bool is_special(int id) const { return id >= 0 && id < static_cast<int>(is_special_.size()) && is_special_[id]; }

    // The ordinary token whose bytes are exactly `bytes`, or -1.
    int find(std::string_view bytes) const {
        auto it = bytes_to_id_.find(bytes);
        return it == bytes_to_id_.end() ? -1 : it->second;
    }

    // Special-token text is ordinary text here (tiktoken's encode_ordinary).
    std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos) const override {
        std::vector<int> ids;
        if (add_bos) ids.push_back(require(vocab_.bos_id, "BOS"));
        always_split_.split(
            text, [&](std::string_view ordinary) { encode_ordinary(ordinary, ids); },
            [&](int id) { ids.push_back(id); });
        if (add_eos) ids.push_back(require(vocab_.eos_id, "EOS"));
        return ids;
    }

    // Special-token text becomes the special token (Hugging Face's encode; special_tokens.hpp).
    std::vector<int> encode_with_specials(std::string_view text) const override {
        std::vector<int> ids;
        specials_.split(
            text, [&](std::string_view ordinary) { encode_ordinary(ordinary, ids); },
            [&](int id) { ids.push_back(id); });
        return ids;
    }

    // Steps 2-4 for text without special tokens; appends to `ids`.
    void encode_ordinary(std::string_view text, std::vector<int>& ids) const {
        std::string normalized;
        if (vocab_.nfc) {
            normalized = nfc(text);
            text = normalized;
        }
        std::vector<int> word;
        pretokenizer_.for_each_piece(text, [&](std::string_view piece) {
            if (vocab_.whole_word_first) {
                const int id = find(piece);
                if (id >= 0) {
                    ids.push_back(id);
                    return;
                }
            }
            word.clear();
            for (unsigned char b : piece) {
                if (byte_ids_[b] < 0)
                    fail(vocab_.name, ": cannot encode byte 0x", hex(b), ": the vocabulary has no token for it");
                word.push_back(byte_ids_[b]);
            }
            bpe_merge(word, [this](int left, int right) { return merges_.find(left, right); });
            ids.insert(ids.end(), word.begin(), word.end());
        });
    }

    // The bytes of token `id` (special tokens: their text). `prev_id` plays no part here.
    std::string decode(int /*prev_id*/, int id) const override {
        check_id(id);
        if (is_special(id)) return special_text_.at(id);
        if (id >= static_cast<int>(vocab_.tokens.size()) || vocab_.tokens[id].empty())
            fail(vocab_.name, ": token id ", id, " is not used by this vocabulary");
        return vocab_.tokens[id];
    }

    std::string decode_all(const std::vector<int>& ids) const {
        std::string out;
        for (int id : ids) out += decode(-1, id);
        return out;
    }

    std::string piece(int id) const override { return decode(-1, id); }

private:
    static std::string hex(int b) {
        const char* digits = "0123456789ABCDEF";
        return {digits[(b >> 4) & 15], digits[b & 15]};
    }
    int check_id(int id) const {
        if (id < 0 || id >= vocab_size_)
            fail(vocab_.name, ": token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
        return id;
    }
    int require(int id, const char* what) const {
        if (id < 0) fail(vocab_.name, ": this vocabulary has no ", what, " token");
        return id;
    }

    // tiktoken: every cut of token T into two tokens (left, right) merges into T, rank = T's id.
    void build_merges_from_ranks() {
        merges_.reserve(vocab_.tokens.size() * 4);
        for (int id = 0; id < static_cast<int>(vocab_.tokens.size()); ++id) {
            const std::string_view t = vocab_.tokens[id];
            if (t.size() < 2 || is_special_[id] || find(t) != id) continue;
            for (size_t cut = 1; cut < t.size(); ++cut) {
                const int left = find(t.substr(0, cut)), right = find(t.substr(cut));
                if (left >= 0 && right >= 0) merges_.add(left, right, Merge{id, static_cast<double>(id)});
            }
        }
    }

    // GPT-2 / Hugging Face: the listed pairs, in order.
    void build_merges_from_list() {
        merges_.reserve(vocab_.merges.size());
        for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
            const auto [left, right] = vocab_.merges[rank];
            const int n = static_cast<int>(vocab_.tokens.size());
            if (left < 0 || left >= n || right < 0 || right >= n || vocab_.tokens[left].empty() ||
                vocab_.tokens[right].empty())
                fail(vocab_.name, ": merge ", rank, " names token ids (", left, ", ", right, ") outside the vocabulary");
            const int merged = find(vocab_.tokens[left] + vocab_.tokens[right]);
            if (merged < 0)
                fail(vocab_.name, ": merge ", rank, " (ids ", left, " + ", right,
                     ") makes a token that is not in the vocabulary");
            merges_.add(left, right, Merge{merged, static_cast<double>(rank)});
        }
    }

    struct StringHash {  // lets the map be searched with a string_view (no copy per lookup)
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };

    ByteLevelVocab vocab_;
    Pretokenizer pretokenizer_;
    int vocab_size_ = 0;
    std::vector<char> is_special_;                       // [vocab_size]
    std::unordered_map<int, std::string> special_text_;
    SpecialMatcher specials_;
    SpecialMatcher always_split_;
    std::unordered_map<std::string, int, StringHash, std::equal_to<>> bytes_to_id_;
    int byte_ids_[256] = {};                             // byte -> its single-byte token
    PairMerges merges_;
};

}  // namespace glass
