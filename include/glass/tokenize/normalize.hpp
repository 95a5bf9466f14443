/// \file
/// \brief glass/tokenize/normalize.hpp — journey step 1 (first of all): make equal-looking text equal bytes.
/// ```text
/// In:  text (any bytes).
/// Out: the text in Unicode Normalization Form C (NFC), invalid UTF-8 bytes left as they are.
///
/// "é" can be one code point (U+00E9) or two ("e" + combining U+0301). NFC turns the second into
/// the first, so both spell the same tokens. Qwen2/Qwen3's tokenizer.json asks for it; GPT-2,
/// tiktoken and Llama 3 do not normalize.
/// NFC needs the Unicode composition tables, so glass uses utf8proc (Debian libutf8proc-dev): a
/// small, widely used C library (Julia's strings are built on it) that works on UTF-8 directly,
/// unlike ICU, which would mean converting to UTF-16 and back and a much larger dependency.
/// ```
#pragma once

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "glass/errors.hpp"
#include "glass/streaming.hpp"  // utf8::char_length_at

namespace glass {

// NFC of a valid UTF-8 string.
inline std::string nfc_valid(std::string_view valid) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                     static_cast<utf8proc_ssize_t>(valid.size()), &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
    if (n < 0) fail("NFC normalization failed: ", utf8proc_errmsg(n));
    return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

// NFC of any bytes: each maximal run of valid UTF-8 is normalized; invalid bytes pass through.
inline std::string nfc(std::string_view text) {
    bool ascii = true;  // ASCII is already NFC: the common case costs one scan
    for (unsigned char c : text)
        if (c >= 0x80) { ascii = false; break; }
    if (ascii) return std::string(text);

    std::string out;
    size_t run_start = 0, i = 0;
    while (i < text.size()) {
        const int n = utf8::char_length_at(text, i);
        if (n > 0) {
            i += static_cast<size_t>(n);
            continue;
        }
        out += nfc_valid(text.substr(run_start, i - run_start));  // the valid run so far
        out += text[i];                                            // one invalid byte, as is
        run_start = ++i;
    }
    out += nfc_valid(text.substr(run_start));
    return out;
}

}  // namespace glass
