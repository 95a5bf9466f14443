// fuzz/tokenizer_checks.hpp — the properties the tokenizer harnesses check on any vocabulary.
//
//   every tokenizer      encode gives ids in [0, vocab_size) (BOS/EOS where asked), and decode
//                        takes each of them (no glass::Error: encode never gives an unused id)
//   byte-level BPE       decode(encode(t)) == t for ANY bytes t: tokens are byte strings and a merge
//                        joins two of them (NFC vocabularies (Qwen): == nfc(t)). Refusing a byte
//                        the vocabulary lacks (glass::Error) is allowed.
//   SentencePiece BPE    with byte fallback for all 256 bytes and no "<unk>" reached:
//                        decode(encode(t, BOS)) == t for any bytes t; up to its one normalisation
//                        in vocabularies that write spaces as "▁": a "▁" in valid UTF-8 text
//                        comes back as " " (checked for valid UTF-8 text there).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/tokenize/normalize.hpp"
#include "glass/tokenize/sentencepiece_bpe.hpp"

namespace glass_fuzz {

inline std::string show_ids(const std::vector<int>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size() && i < 40; ++i) s += std::to_string(ids[i]) + " ";
    return s;
}

// Ids in range; each decodes. Returns the decoded text (with `skip_bos_eos`, as SentencePiece's
// decode_all, BOS/EOS contribute nothing; byte-level BPE decodes a special token to its text).
inline std::string check_ids_and_decode(const glass::Tokenizer& t, const std::vector<int>& ids, bool skip_bos_eos) {
    std::string out;
    int prev = -1;
    for (int id : ids) {
        FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id %d outside [0, %d); ids: %s", id, t.vocab_size(), show_ids(ids).c_str());
        std::string piece;
        try {
            piece = t.decode(prev, id);
        } catch (const glass::Error& e) {
            FUZZ_CHECK(false, "encode gave id %d, which decode refuses: %s", id, e.what());
        }
        if (!skip_bos_eos || (id != t.bos_id() && id != t.eos_id())) out += piece;
        (void)t.piece(id);
        prev = id;
    }
    return out;
}

inline bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

inline std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        if (text.substr(i, from.size()) == from) { out += to; i += from.size(); }
        else out += text[i++];
    }
    return out;
}

// Byte-level BPE: the round trip, for any bytes.
inline void check_byte_level(const glass::ByteLevelBpe& t, std::string_view text) {
    std::vector<int> ids;
    try {
        ids = t.encode(text, false, false);
    } catch (const glass::Error&) {
        return;  // a byte the vocabulary has no token for
    }
    const std::string back = check_ids_and_decode(t, ids, false);
    const std::string expected = t.vocab().nfc ? glass::nfc(text) : std::string(text);
    FUZZ_CHECK(back == expected, "byte-level round trip: %zu bytes in, %zu out; ids: %s", text.size(), back.size(),
               show_ids(ids).c_str());
    std::vector<int> with_specials;
    try {
        with_specials = t.encode_with_specials(text);
    } catch (const glass::Error&) {
        return;
    }
    const std::string back2 = check_ids_and_decode(t, with_specials, false);
    if (!t.vocab().nfc)  // (NFC runs on each stretch between special tokens: not simply nfc(text))
        FUZZ_CHECK(back2 == text, "byte-level round trip with specials: %zu bytes in, %zu out", text.size(), back2.size());
}

// True when every byte has its fallback piece (then nothing needs <unk>).
inline bool full_byte_fallback(const glass::SentencePieceBpe& t) {
    if (!t.vocab().byte_fallback) return false;
    for (int b = 0; b < 256; ++b)
        if (t.byte_id(static_cast<unsigned char>(b)) < 0) return false;
    return true;
}

// SentencePiece BPE: ids in range always; the round trip where the vocabulary promises it
// (`promise_roundtrip`: a real vocabulary with full byte fallback).
inline void check_sentencepiece(const glass::SentencePieceBpe& t, std::string_view text, bool promise_roundtrip) {
    const bool has_bos = t.bos_id() >= 0;
    const std::vector<int> ids = t.encode(text, has_bos, false);
    const std::string back = check_ids_and_decode(t, ids, true);
    (void)check_ids_and_decode(t, t.encode_with_specials(text), true);
    if (!promise_roundtrip || !has_bos) return;
    const std::string& mark = t.vocab().space_mark;
    if (mark != " " && contains(text, mark)) {
        if (!valid_utf8(text)) return;
        const std::string expected = replace_all(text, mark, " ");
        FUZZ_CHECK(back == expected, "SentencePiece round trip (space mark -> space): %zu bytes in, %zu out; ids: %s",
                   text.size(), back.size(), show_ids(ids).c_str());
        return;
    }
    FUZZ_CHECK(back == text, "SentencePiece round trip: %zu bytes in, %zu out; ids: %s", text.size(), back.size(),
               show_ids(ids).c_str());
}

// Any tokenizer from a fuzzed file: the checks for its family (no round-trip promise for a
// fuzzed SentencePiece vocabulary: it may lack byte pieces and map text to <unk>).
inline void check_any(const glass::Tokenizer& t, std::string_view text) {
    if (auto* b = dynamic_cast<const glass::ByteLevelBpe*>(&t)) check_byte_level(*b, text);
    else if (auto* s = dynamic_cast<const glass::SentencePieceBpe*>(&t)) check_sentencepiece(*s, text, false);
    else (void)check_ids_and_decode(t, t.encode(text, false, false), true);
}

}  // namespace glass_fuzz
