/// \file
/// \brief glass/chat/jinja_strings.hpp — Python's `str`, on UTF-8 bytes.
/// ```text
/// In:  UTF-8 text (std::string / std::string_view).
/// Out: what Python's str methods give for the same text: strip, split, find, replace, upper,
///      lower, title, repr, ... — chat templates are Python code in disguise, so their string
///      operations must count and cut code points exactly as Python does.
///
/// A std::string holds bytes; Python counts code points. "é" is 2 bytes but len("é") == 1, and
/// "héllo"[1:3] == "él". So every index here is a code point index, and `code_point_offsets`
/// turns it into byte offsets. Bytes that are not valid UTF-8 (only a fuzzed template can hold
/// them) count as one code point each and are copied through unchanged.
///
/// Whitespace is Python's str.isspace() (also what Jinja2's lexer strips with `\s`): ASCII
/// \t \n \v \f \r and space, \x1c-\x1f, and the Unicode spaces (U+0085, U+00A0, U+2000..., U+3000).
/// Case mapping uses utf8proc's simple mappings (Python's full mappings differ only for a few
/// letters such as "ß".upper() == "SS").
/// ```
#pragma once

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glass::chat::jinja {

/// Decodes the code point that starts at s[at]; returns its length in bytes (1 for a stray byte,
/// which decodes as itself).
inline size_t decode_code_point(std::string_view s, size_t at, char32_t& code_point) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(at);
    size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || at + length > s.size()) { code_point = lead; return 1; }
    char32_t value = length == 1 ? lead : length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (size_t k = 1; k < length; ++k) {
        if ((byte(at + k) & 0xC0) != 0x80) { code_point = lead; return 1; }
        value = (value << 6) | (byte(at + k) & 0x3F);
    }
    code_point = value;
    return length;
}

inline void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) { out += static_cast<char>(c); return; }
    if (c < 0x800) { out += static_cast<char>(0xC0 | (c >> 6)); }
    else if (c < 0x10000) { out += static_cast<char>(0xE0 | (c >> 12)); out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)); }
    else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    }
    out += static_cast<char>(0x80 | (c & 0x3F));
}

/// Byte offset of every code point, plus s.size() at the end (so there are length + 1 entries).
inline std::vector<size_t> code_point_offsets(std::string_view s) {
    std::vector<size_t> offsets;
    char32_t c = 0;
    for (size_t at = 0; at < s.size(); at += decode_code_point(s, at, c)) offsets.push_back(at);
    offsets.push_back(s.size());
    return offsets;
}

inline std::vector<char32_t> code_points(std::string_view s) {
    std::vector<char32_t> out;
    char32_t c = 0;
    for (size_t at = 0; at < s.size();) {
        at += decode_code_point(s, at, c);
        out.push_back(c);
    }
    return out;
}

inline size_t code_point_count(std::string_view s) { return code_point_offsets(s).size() - 1; }

/// Python's str.isspace() for one code point.
inline bool is_python_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---- strip / split / find / replace ----------------------------------------------------------

/// str.strip / lstrip / rstrip: `chars` nullopt strips whitespace, else any of its code points.
inline std::string python_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    const std::vector<char32_t> strip_set = chars ? code_points(*chars) : std::vector<char32_t>{};
    const auto strips = [&](char32_t c) {
        if (!chars) return is_python_space(c);
        for (char32_t k : strip_set) if (k == c) return true;
        return false;
    };
    const std::vector<size_t> at = code_point_offsets(s);
    size_t first = 0, last = at.size() - 1;  // code point range [first, last)
    char32_t c = 0;
    while (left && first < last && (decode_code_point(s, at[first], c), strips(c))) ++first;
    while (right && last > first && (decode_code_point(s, at[last - 1], c), strips(c))) --last;
    return std::string(s.substr(at[first], at[last] - at[first]));
}

/// str.split(sep, maxsplit): sep nullopt splits on runs of whitespace and drops empty pieces.
inline std::vector<std::string> python_split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
    std::vector<std::string> pieces;
    if (sep) {
        size_t start = 0;
        while (maxsplit < 0 || static_cast<long>(pieces.size()) < maxsplit) {
            const size_t found = s.find(*sep, start);
            if (found == std::string_view::npos) break;
            pieces.emplace_back(s.substr(start, found - start));
            start = found + sep->size();
        }
        pieces.emplace_back(s.substr(start));
        return pieces;
    }
    size_t at = 0;
    char32_t c = 0;
    while (true) {
        while (at < s.size()) { size_t n = decode_code_point(s, at, c); if (!is_python_space(c)) break; at += n; }
        if (at >= s.size()) break;
        if (maxsplit >= 0 && static_cast<long>(pieces.size()) == maxsplit) {  // the rest, right-stripped
            pieces.push_back(python_strip(s.substr(at), std::nullopt, false, true));
            break;
        }
        size_t end = at;
        while (end < s.size()) { size_t n = decode_code_point(s, end, c); if (is_python_space(c)) break; end += n; }
        pieces.emplace_back(s.substr(at, end - at));
        at = end;
    }
    return pieces;
}

/// str.rsplit(sep, maxsplit) with a separator (splitting from the right).
inline std::vector<std::string> python_rsplit(std::string_view s, const std::string& sep, long maxsplit) {
    std::vector<std::string> reversed_pieces;
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<long>(reversed_pieces.size()) < maxsplit) {
        if (end < sep.size()) break;
        const size_t found = s.rfind(sep, end - sep.size());
        if (found == std::string_view::npos) break;
        reversed_pieces.emplace_back(s.substr(found + sep.size(), end - found - sep.size()));
        end = found;
    }
    reversed_pieces.emplace_back(s.substr(0, end));
    return {reversed_pieces.rbegin(), reversed_pieces.rend()};
}

/// str.splitlines(): every line boundary Python knows (`\n`, `\r\n`, `\r`, `\v`, `\f`, `\x1c`-`\x1e`, U+0085,
/// U+2028, U+2029), boundaries dropped.
inline std::vector<std::string> python_splitlines(std::string_view s) {
    std::vector<std::string> lines;
    size_t start = 0, at = 0;
    char32_t c = 0;
    while (at < s.size()) {
        const size_t n = decode_code_point(s, at, c);
        const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                              c == 0x2028 || c == 0x2029;
        if (!boundary) { at += n; continue; }
        lines.emplace_back(s.substr(start, at - start));
        at += n;
        if (c == '\r' && at < s.size() && s[at] == '\n') ++at;
        start = at;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return lines;
}

/// str.replace(old, new, count): count < 0 replaces all; an empty `old` inserts `new` between code points.
inline std::string python_replace(std::string_view s, std::string_view old, std::string_view replacement, long count) {
    std::string out;
    long done = 0;
    if (old.empty()) {
        const std::vector<size_t> at = code_point_offsets(s);
        for (size_t i = 0; i + 1 < at.size() + 1; ++i) {
            if (count < 0 || done < count) { out += replacement; ++done; }
            if (i + 1 < at.size()) out += s.substr(at[i], at[i + 1] - at[i]);
        }
        return out;
    }
    size_t start = 0;
    while (count < 0 || done < count) {
        const size_t found = s.find(old, start);
        if (found == std::string_view::npos) break;
        out += s.substr(start, found - start);
        out += replacement;
        start = found + old.size();
        ++done;
    }
    out += s.substr(start);
    return out;
}

/// Code point index of a byte offset (for str.find's answer).
inline long code_point_index(std::string_view s, size_t byte_offset) {
    return static_cast<long>(code_point_count(s.substr(0, byte_offset)));
}

/// str.count(sub): non-overlapping occurrences; an empty `sub` counts len + 1.
inline long python_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<long>(code_point_count(s)) + 1;
    long n = 0;
    for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
    return n;
}

// ---- case ------------------------------------------------------------------------------------

inline bool is_cased(char32_t c) {
    const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
inline bool is_lower_letter(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LL; }
inline bool is_upper_letter(char32_t c) {
    const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT;
}
inline char32_t to_upper(char32_t c) { return c > 0x10FFFF ? c : static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
inline char32_t to_lower(char32_t c) { return c > 0x10FFFF ? c : static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
inline char32_t to_title(char32_t c) { return c > 0x10FFFF ? c : static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

enum class CaseMapping { upper, lower, title, capitalize, swapcase };

/// The few letters whose Python case mapping is more than one code point (SpecialCasing.txt):
/// "ß".upper() == "SS", "ﬁ".upper() == "FI", "İ".lower() == "i̇". nullptr when none applies.
inline const char* special_case(char32_t c, bool upper, bool title) {
    if (upper || title) {
        switch (c) {
            case 0xDF: return title ? "Ss" : "SS";
            case 0x149: return title ? "\xCA\xBCN" : "\xCA\xBCN";
            case 0xFB00: return title ? "Ff" : "FF";
            case 0xFB01: return title ? "Fi" : "FI";
            case 0xFB02: return title ? "Fl" : "FL";
            case 0xFB03: return title ? "Ffi" : "FFI";
            case 0xFB04: return title ? "Ffl" : "FFL";
            case 0xFB05: case 0xFB06: return title ? "St" : "ST";
            default: return nullptr;
        }
    }
    return c == 0x130 ? "i\xCC\x87" : nullptr;
}

/// str.upper / lower / title / capitalize / swapcase. Stray bytes are copied through.
inline std::string python_case(std::string_view s, CaseMapping mapping) {
    std::string out;
    bool previous_cased = false;  // title(): was the previous code point a cased letter?
    bool first = true;
    char32_t c = 0;
    for (size_t at = 0; at < s.size();) {
        const size_t n = decode_code_point(s, at, c);
        if (n == 1 && c >= 0x80) { out += s[at]; at += n; first = false; previous_cased = false; continue; }
        const bool wants_upper = mapping == CaseMapping::upper || (mapping == CaseMapping::swapcase && is_lower_letter(c));
        const bool wants_title = (mapping == CaseMapping::capitalize && first) || (mapping == CaseMapping::title && !previous_cased);
        const bool wants_lower = !wants_upper && !wants_title && mapping != CaseMapping::swapcase;
        if (const char* special = special_case(c, wants_upper, wants_title); special && (wants_upper || wants_title || wants_lower)) {
            out += special;
            if (mapping == CaseMapping::title) previous_cased = is_cased(c);
            at += n;
            first = false;
            continue;
        }
        char32_t mapped = c;
        switch (mapping) {
            case CaseMapping::upper: mapped = to_upper(c); break;
            case CaseMapping::lower: mapped = to_lower(c); break;
            case CaseMapping::capitalize: mapped = first ? to_title(c) : to_lower(c); break;
            case CaseMapping::swapcase: mapped = is_upper_letter(c) ? to_lower(c) : is_lower_letter(c) ? to_upper(c) : c; break;
            case CaseMapping::title: mapped = previous_cased ? to_lower(c) : to_title(c); previous_cased = is_cased(c); break;
        }
        append_utf8(out, mapped);
        at += n;
        first = false;
    }
    return out;
}

// ---- predicates (str.isdigit, ...) -------------------------------------------------------------

enum class CharClass { digit, alpha, alnum, space, lower, upper };

inline bool python_is(std::string_view s, CharClass which) {
    bool any_cased = false;
    std::vector<char32_t> cps = code_points(s);
    if (cps.empty()) return false;
    for (char32_t c : cps) {
        const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        const bool digit = k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NO;
        const bool numeric = k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
        switch (which) {
            case CharClass::digit: if (!digit) return false; break;
            case CharClass::alpha: if (!letter) return false; break;
            case CharClass::alnum: if (!letter && !numeric) return false; break;
            case CharClass::space: if (!is_python_space(c)) return false; break;
            case CharClass::lower: if (is_upper_letter(c)) return false; any_cased |= is_lower_letter(c); break;
            case CharClass::upper: if (is_lower_letter(c)) return false; any_cased |= is_upper_letter(c); break;
        }
    }
    return (which == CharClass::lower || which == CharClass::upper) ? any_cased : true;
}

// ---- repr and HTML escaping --------------------------------------------------------------------

/// Python's repr(str): single quotes unless the text has ' and no ", escapes for `\\ \n \r \t`, the
/// quote, and `\xNN` / `\uNNNN` / `\UNNNNNNNN` for code points Python does not print.
inline std::string python_string_repr(std::string_view s) {
    const bool use_double = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
    const char quote = use_double ? '"' : '\'';
    std::string out(1, quote);
    char32_t c = 0;
    for (size_t at = 0; at < s.size();) {
        const size_t n = decode_code_point(s, at, c);
        const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool printable = c == ' ' || !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
                                              k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZS ||
                                              k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP);
        char buffer[16];
        if (c == '\\' || c == static_cast<char32_t>(quote)) { out += '\\'; out += static_cast<char>(c); }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (n == 1 && c >= 0x80) { std::snprintf(buffer, sizeof buffer, "\\udc%02x", static_cast<unsigned>(c)); out += buffer; }
        else if (printable) out += s.substr(at, n);
        else {
            if (c < 0x100) std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(c));
            else if (c < 0x10000) std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
            else std::snprintf(buffer, sizeof buffer, "\\U%08x", static_cast<unsigned>(c));
            out += buffer;
        }
        at += n;
    }
    out += quote;
    return out;
}

/// markupsafe.escape: & < > " ' become entities (Jinja2's `escape` / `e` filter).
inline std::string escape_html(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

// ---- numbers as Python prints them ------------------------------------------------------------

/// Python's repr(float): the shortest digits that read back the same, written "1.0", "0.1",
/// "1e-05", "1e+16", "inf", "nan". Exponent form when the decimal exponent is < -4 or >= 16.
inline std::string python_float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::scientific);
    const std::string scientific(buffer, result.ptr);  // "-1.2345e+02"
    const size_t e = scientific.find('e');
    std::string mantissa = scientific.substr(0, e);
    const int exponent = std::stoi(scientific.substr(e + 1));
    const bool negative = mantissa[0] == '-';
    if (negative) mantissa.erase(0, 1);
    std::string digits;
    for (char c : mantissa) if (c != '.') digits += c;
    std::string out = negative ? "-" : "";
    if (exponent < -4 || exponent >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char exp_text[16];
        std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
        return out + exp_text;
    }
    if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    const size_t integer_digits = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= integer_digits) return out + digits + std::string(integer_digits - digits.size(), '0') + ".0";
    return out + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

}  // namespace glass::chat::jinja
