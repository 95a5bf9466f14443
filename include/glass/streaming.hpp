/// \file
/// \brief glass/streaming.hpp — journey step 8, the visible part: text appears token by token.
/// ```text
/// In:  the bytes each new token decodes to (a token may end in the middle of a UTF-8 character:
///      byte-fallback tokens carry one byte each, so "é" can arrive as two tokens).
/// Out: text that is always whole, valid UTF-8 — never half a character.
///
/// Utf8Stream holds back an incomplete trailing character until its remaining bytes arrive.
/// Bytes that can never form a character (a stray continuation byte, an invalid lead byte, a
/// sequence cut short by something else) become U+FFFD "�", as browsers and Python do.
/// StopStringFilter holds back text that might be the beginning of a stop string, so a stop
/// string is never shown, not even partly.
/// ```
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace glass {

namespace utf8 {

inline constexpr std::string_view replacement = "\xEF\xBF\xBD";  // U+FFFD

/// Length of the character starting at s[i]: > 0 complete and valid; 0 valid so far but
/// incomplete (more bytes needed); -1 invalid.
inline int char_length_at(std::string_view s, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char lead = byte(i);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) n = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) {
        n = 3;
        if (lead == 0xE0) lo = 0xA0;  // no overlong forms
        if (lead == 0xED) hi = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        n = 4;
        if (lead == 0xF0) lo = 0x90;
        if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
        return -1;
    }
    for (int k = 1; k < n; ++k) {
        if (i + k >= s.size()) return 0;
        const unsigned char b = byte(i + k);
        const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
        if (b < min || b > max) return -1;
    }
    return n;
}

/// Any bytes -> valid UTF-8 (invalid bytes become U+FFFD).
inline std::string sanitize(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const int n = char_length_at(s, i);
        if (n > 0) {
            out.append(s.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {
            out.append(replacement);
            ++i;
        }
    }
    return out;
}

}  // namespace utf8

class Utf8Stream {
public:
    // Appends bytes; returns the text that is now complete.
    std::string push(std::string_view bytes) {
        pending_.append(bytes);
        std::string out;
        size_t i = 0;
        while (i < pending_.size()) {
            const int n = utf8::char_length_at(pending_, i);
            if (n == 0) break;  // an incomplete character at the end: wait for more bytes
            if (n > 0) {
                out.append(pending_, i, static_cast<size_t>(n));
                i += static_cast<size_t>(n);
            } else {
                out.append(utf8::replacement);
                ++i;
            }
        }
        pending_.erase(0, i);
        return out;
    }
    // End of stream: whatever is still held can never complete.
    std::string finish() {
        std::string out = utf8::sanitize(pending_);
        pending_.clear();
        return out;
    }
    size_t held_bytes() const { return pending_.size(); }

private:
    std::string pending_;
};

class StopStringFilter {
public:
    explicit StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
        std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
    }

    // Appends text; returns what may be shown now. After a stop string appears, stopped()
    // is true and nothing from the stop string onward is ever returned.
    std::string push(std::string_view text) {
        if (stopped_) return {};
        held_.append(text);
        size_t first = std::string::npos;
        for (const std::string& s : stops_) first = std::min(first, held_.find(s));
        if (first != std::string::npos) {
            stopped_ = true;
            std::string out = held_.substr(0, first);
            held_.clear();
            return out;
        }
        // Hold back the longest tail that is the start of some stop string.
        size_t hold = 0;
        for (const std::string& s : stops_)
            for (size_t n = std::min(s.size() - 1, held_.size()); n > hold; --n)
                if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                    hold = n;
                    break;
                }
        std::string out = held_.substr(0, held_.size() - hold);
        held_.erase(0, held_.size() - hold);
        return out;
    }
    std::string finish() {
        std::string out = stopped_ ? std::string() : held_;
        held_.clear();
        return out;
    }
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace glass
