/// \file
/// \brief glass/tokenize/byte_level.hpp — GPT-2's trick for writing raw bytes as printable characters.
/// ```text
/// In:  raw bytes (any of the 256 values).
/// Out: a printable string with one Unicode character per byte, and back.
///
/// Byte-level BPE works on bytes, but GPT-2's vocabulary files (encoder.json, vocab.bpe) and every
/// Hugging Face tokenizer.json after them store tokens as text. So each byte gets a stand-in
/// character: the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' (188 of them) stand for
/// themselves; the other 68 (control bytes, space, DEL, NBSP, soft hyphen, ...) take the
/// characters U+0100, U+0101, ... in byte order. That is why a space shows up as "Ġ" (U+0120)
/// and a newline as "Ċ" (U+010A) in those files.
/// tiktoken files skip the trick (they store base64 of the raw bytes).
/// ```
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace glass {

namespace byte_level {

// UTF-8 encoding of a code point below U+0800 (all this mapping needs).
inline std::string utf8_of(unsigned cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

// The code point standing for byte b.
inline unsigned code_point_of_byte(unsigned char b) {
    const auto prints_as_itself = [](unsigned c) {
        return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    };
    if (prints_as_itself(b)) return b;
    unsigned next = 256;  // the bytes that do not print, in order, take 256, 257, ...
    for (unsigned c = 0; c < b; ++c)
        if (!prints_as_itself(c)) ++next;
    return next;
}

// [256] byte -> its stand-in character (UTF-8).
inline const std::array<std::string, 256>& byte_to_char() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        for (unsigned b = 0; b < 256; ++b) t[b] = utf8_of(code_point_of_byte(static_cast<unsigned char>(b)));
        return t;
    }();
    return table;
}

// Stand-in character (UTF-8) -> byte.
inline const std::unordered_map<std::string, unsigned char>& char_to_byte() {
    static const std::unordered_map<std::string, unsigned char> table = [] {
        std::unordered_map<std::string, unsigned char> t;
        for (unsigned b = 0; b < 256; ++b) t.emplace(byte_to_char()[b], static_cast<unsigned char>(b));
        return t;
    }();
    return table;
}

// Raw bytes -> printable form ("hello world" -> "helloĠworld").
inline std::string encode(std::string_view bytes) {
    std::string out;
    for (unsigned char b : bytes) out += byte_to_char()[b];
    return out;
}

// Printable form -> raw bytes; nullopt if some character is not a stand-in for a byte.
inline std::optional<std::string> decode(std::string_view text) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        const unsigned char lead = static_cast<unsigned char>(text[i]);
        const size_t n = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : 0;  // stand-ins are 1-2 bytes
        if (n == 0 || i + n > text.size()) return std::nullopt;
        auto it = char_to_byte().find(std::string(text.substr(i, n)));
        if (it == char_to_byte().end()) return std::nullopt;
        out += static_cast<char>(it->second);
        i += n;
    }
    return out;
}

}  // namespace byte_level

}  // namespace glass
