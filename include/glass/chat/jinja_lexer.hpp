/// \file
/// \brief glass/chat/jinja_lexer.hpp — chat template step 1: template text -> tokens.
/// ```text
/// In:  the template's source text.
/// Out: tokens, each with its 1-based line:
///        text            raw text to copy to the output (whitespace control already applied)
///        variable_begin  {{      variable_end  }}
///        block_begin     {%      block_end     %}
///        name string integer floating operator   (inside {{ }} and {% %})
///        end             after the last token
///      Comments {# ... #} leave no token; {% raw %}...{% endraw %} becomes one text token.
///
/// Whitespace control, as Jinja2 does it with trim_blocks=True and lstrip_blocks=True:
///   {%- {{- {#-   strip all whitespace (newlines too) before the tag
///   -%} -}} -#}   strip all whitespace after the tag
///   trim_blocks   after %} or #} (not }}), drop one newline right after the tag
///   lstrip_blocks before {% or {# (not {{), drop spaces and tabs from the start of the line up
///                 to the tag, when nothing else is on the line before it; {%+ turns it off
///   +%}           turns trim_blocks off for that tag
/// Newlines are normalized first (\r\n and \r become \n) and one trailing newline is dropped
/// (keep_trailing_newline=False).
/// ```
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "glass/chat/jinja_strings.hpp"
#include "glass/chat/template_errors.hpp"

namespace glass::chat::jinja {

enum class TokenKind { text, variable_begin, variable_end, block_begin, block_end, name, string, integer, floating, op, end };

struct Token {
    TokenKind kind;
    std::string value;  // text, name, operator, the string's decoded value, the number's digits
    int line;
};

/// The lexer walks the source once; `at` is the byte position, `line` the line there.
struct Lexer {
    std::string source;
    size_t at = 0;
    int line = 1;
    bool line_starting = true;  // did the last thing consumed end with a newline? (lstrip_blocks)
    std::vector<Token> tokens;

    [[noreturn]] void fail(const std::string& what) const { throw TemplateError(what, line); }
    bool starts_with(std::string_view s, size_t pos) const { return source.compare(pos, s.size(), s) == 0; }
    void advance_to(size_t end) {  // consume source[at, end), counting newlines
        for (size_t i = at; i < end; ++i) line += source[i] == '\n';
        line_starting = end > at && source[end - 1] == '\n';
        at = end;
    }
    size_t skip_whitespace(size_t pos) const {
        char32_t c = 0;
        while (pos < source.size()) {
            const size_t n = decode_code_point(source, pos, c);
            if (!is_python_space(c)) break;
            pos += n;
        }
        return pos;
    }
};

/// `\r\n` and `\r` become `\n`; one trailing newline is dropped.
inline std::string normalize_newlines(std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\r') {
            out += '\n';
            if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
        } else {
            out += text[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

/// Text before a tag, with the tag's whitespace control applied: `sign` is '-', '+' or 0.
inline void emit_text_before_tag(Lexer& lx, size_t text_end, char sign, bool is_variable_tag) {
    std::string text = lx.source.substr(lx.at, text_end - lx.at);
    if (sign == '-') {
        text = python_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && !is_variable_tag) {  // lstrip_blocks
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || lx.line_starting) && line_start < text.size()) {
            bool only_spaces = true;
            char32_t c = 0;
            for (size_t i = line_start; i < text.size(); i += decode_code_point(text, i, c))
                if ((decode_code_point(text, i, c), !is_python_space(c))) { only_spaces = false; break; }
            if (only_spaces) text.resize(line_start);
        }
    }
    if (!text.empty()) lx.tokens.push_back({TokenKind::text, text, lx.line});
}

/// After a block or comment: "+%}" keeps what follows, "-%}" strips whitespace, "%}" drops one
/// newline (trim_blocks). `close` is "%}" or "#}"; `pos` is where the closing sign/tag starts.
inline size_t end_of_block_tag(const Lexer& lx, size_t pos, std::string_view close) {
    if (lx.source[pos] == '+') return pos + 1 + close.size();
    if (lx.source[pos] == '-') return lx.skip_whitespace(pos + 1 + close.size());
    size_t end = pos + close.size();
    if (end < lx.source.size() && lx.source[end] == '\n') ++end;
    return end;
}

inline void lex_comment(Lexer& lx) {
    for (size_t pos = lx.at; pos < lx.source.size(); ++pos) {
        const bool signed_close = (lx.source[pos] == '+' || lx.source[pos] == '-') && lx.starts_with("#}", pos + 1);
        if (signed_close || lx.starts_with("#}", pos)) { lx.advance_to(end_of_block_tag(lx, pos, "#}")); return; }
    }
    lx.fail("missing end of comment tag");
}

/// The text of a string literal with Python's escapes decoded (a backslash before n, t, a quote,
/// a backslash, xNN, uNNNN, ...).
inline std::string decode_string_literal(const Lexer& lx, std::string_view body) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) { out += body[i]; continue; }
        const char e = body[++i];
        const auto hex = [&](int digits) {
            if (i + static_cast<size_t>(digits) >= body.size()) lx.fail("truncated \\x/\\u escape in a string");
            char32_t value = 0;
            for (int k = 1; k <= digits; ++k) {
                const char h = body[i + k];
                if (!std::isxdigit(static_cast<unsigned char>(h))) lx.fail("bad \\x/\\u escape in a string");
                value = value * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
            }
            i += static_cast<size_t>(digits);
            if (value > 0x10FFFF) lx.fail("escape outside Unicode in a string");
            append_utf8(out, value);
        };
        switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'v': out += '\v'; break;
            case '\n': break;  // backslash-newline joins lines
            case 'x': hex(2); break;
            case 'u': hex(4); break;
            case 'U': hex(8); break;
            case 'N': lx.fail("unsupported \\N{...} escape in a string");
            default:
                if (e >= '0' && e <= '7') {  // octal, up to 3 digits
                    char32_t value = static_cast<char32_t>(e - '0');
                    for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
                        value = value * 8 + static_cast<char32_t>(body[++i] - '0');
                    append_utf8(out, value);
                } else {
                    out += '\\';  // unknown escapes stay as written
                    out += e;
                }
        }
    }
    return out;
}

/// One token inside {{ }} or {% %} at lx.at: a number, a name, a string or an operator.
inline void lex_expression_token(Lexer& lx) {
    const std::string& s = lx.source;
    const size_t start = lx.at;
    const auto digit = [&](size_t p) { return p < s.size() && std::isdigit(static_cast<unsigned char>(s[p])); };
    const auto digits = [&](size_t p) {  // \d+(_\d+)* ; returns the end
        while (digit(p) || (p < s.size() && s[p] == '_' && digit(p + 1) && p > 0 && digit(p - 1))) ++p;
        return p;
    };
    if (digit(start)) {
        size_t end = digits(start);
        bool is_float = false;
        if (end < s.size() && s[end] == '.' && digit(end + 1)) { end = digits(end + 1); is_float = true; }
        if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
            size_t p = end + 1;
            if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
            if (digit(p)) { end = digits(p); is_float = true; }
        }
        std::string number;
        for (size_t i = start; i < end; ++i) if (s[i] != '_') number += s[i];
        if (!is_float && number.size() > 1 && number[0] == '0' && number.find_first_not_of('0') != std::string::npos)
            lx.fail("unsupported integer literal '" + number + "'");
        lx.tokens.push_back({is_float ? TokenKind::floating : TokenKind::integer, number, lx.line});
        lx.advance_to(end);
        return;
    }
    const auto name_char = [&](size_t p, bool first) {
        const unsigned char c = static_cast<unsigned char>(s[p]);
        return c == '_' || std::isalpha(c) || (!first && std::isdigit(c)) || c >= 0x80;
    };
    if (name_char(start, true)) {
        size_t end = start;
        while (end < s.size() && name_char(end, false)) ++end;
        lx.tokens.push_back({TokenKind::name, s.substr(start, end - start), lx.line});
        lx.advance_to(end);
        return;
    }
    if (s[start] == '\'' || s[start] == '"') {
        size_t end = start + 1;
        while (end < s.size() && s[end] != s[start]) end += s[end] == '\\' ? 2 : 1;
        if (end >= s.size()) lx.fail("unterminated string");
        lx.tokens.push_back({TokenKind::string, decode_string_literal(lx, std::string_view(s).substr(start + 1, end - start - 1)), lx.line});
        lx.advance_to(end + 1);
        return;
    }
    static const char* const operators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                            ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : operators) {
        if (lx.starts_with(op, start)) {
            lx.tokens.push_back({TokenKind::op, op, lx.line});
            lx.advance_to(start + std::string_view(op).size());
            return;
        }
    }
    lx.fail(std::string("unexpected character '") + s[start] + "'");
}

/// Inside {{ ... }} or {% ... %} up to its end; brackets must balance before the end counts.
inline void lex_tag(Lexer& lx, bool is_block) {
    const std::string_view close = is_block ? "%}" : "}}";
    std::vector<char> brackets;
    while (true) {
        if (lx.at >= lx.source.size()) lx.fail(is_block ? "unexpected end of template inside {% %}" : "unexpected end of template inside {{ }}");
        const char c = lx.source[lx.at];
        if (brackets.empty()) {
            const bool signed_close = (c == '-' || (is_block && c == '+')) && lx.starts_with(close, lx.at + 1);
            if (signed_close || lx.starts_with(close, lx.at)) {
                const int line = lx.line;
                lx.advance_to(is_block ? end_of_block_tag(lx, lx.at, close)
                                       : c == '-' ? lx.skip_whitespace(lx.at + 3) : lx.at + 2);
                lx.tokens.push_back({is_block ? TokenKind::block_end : TokenKind::variable_end, std::string(close), line});
                return;
            }
        }
        char32_t cp = 0;
        const size_t n = decode_code_point(lx.source, lx.at, cp);
        if (is_python_space(cp)) { lx.advance_to(lx.at + n); continue; }
        lex_expression_token(lx);
        const Token& t = lx.tokens.back();
        if (t.kind != TokenKind::op) continue;
        if (t.value == "(" || t.value == "[" || t.value == "{") brackets.push_back(t.value == "(" ? ')' : t.value == "[" ? ']' : '}');
        if (t.value == ")" || t.value == "]" || t.value == "}") {
            if (brackets.empty() || brackets.back() != t.value[0]) lx.fail("unexpected '" + t.value + "'");
            brackets.pop_back();
        }
    }
}

/// {% raw %} was just consumed: everything up to {% endraw %} is text.
inline void lex_raw(Lexer& lx) {
    for (size_t pos = lx.at; pos + 1 < lx.source.size(); ++pos) {
        if (!lx.starts_with("{%", pos)) continue;
        size_t p = pos + 2;
        const char sign = (p < lx.source.size() && (lx.source[p] == '-' || lx.source[p] == '+')) ? lx.source[p] : 0;
        if (sign) ++p;
        p = lx.skip_whitespace(p);
        if (!lx.starts_with("endraw", p)) continue;
        p = lx.skip_whitespace(p + 6);
        const bool signed_close = (p < lx.source.size() && (lx.source[p] == '-' || lx.source[p] == '+')) && lx.starts_with("%}", p + 1);
        if (!signed_close && !lx.starts_with("%}", p)) continue;
        emit_text_before_tag(lx, pos, sign, false);
        lx.advance_to(end_of_block_tag(lx, p, "%}"));
        return;
    }
    lx.fail("missing end of raw directive");
}

/// If a {% raw %} tag starts at `pos`, its end (after "%}" or "-%}" and whitespace); else 0.
inline size_t raw_tag_end(const Lexer& lx, size_t pos) {
    size_t p = pos + 2;
    if (p < lx.source.size() && (lx.source[p] == '-' || lx.source[p] == '+')) ++p;
    p = lx.skip_whitespace(p);
    if (!lx.starts_with("raw", p)) return 0;
    p = lx.skip_whitespace(p + 3);
    if (lx.starts_with("-%}", p)) return lx.skip_whitespace(p + 3);
    if (lx.starts_with("%}", p)) return p + 2;
    return 0;
}

inline std::vector<Token> lex_template(std::string_view template_source) {
    Lexer lx;
    lx.source = normalize_newlines(template_source);
    while (lx.at < lx.source.size()) {
        // 1. The next tag opener: {{ {% or {#.
        size_t open = lx.at;
        while (open + 1 < lx.source.size() && !(lx.source[open] == '{' && (lx.source[open + 1] == '{' || lx.source[open + 1] == '%' || lx.source[open + 1] == '#'))) ++open;
        if (open + 1 >= lx.source.size()) {  // no more tags: the rest is text
            lx.tokens.push_back({TokenKind::text, lx.source.substr(lx.at), lx.line});
            lx.advance_to(lx.source.size());
            break;
        }
        const char kind = lx.source[open + 1];
        const char sign = (open + 2 < lx.source.size() && (lx.source[open + 2] == '-' || lx.source[open + 2] == '+')) ? lx.source[open + 2] : 0;
        // 2. The text before it, with whitespace control.
        emit_text_before_tag(lx, open, sign, kind == '{');
        // 3. The tag itself.
        if (kind == '%') {
            if (const size_t raw_end = raw_tag_end(lx, open)) { lx.advance_to(raw_end); lex_raw(lx); continue; }
        }
        lx.advance_to(open + 2 + (sign ? 1 : 0));
        if (kind == '#') { lex_comment(lx); continue; }
        lx.tokens.push_back({kind == '%' ? TokenKind::block_begin : TokenKind::variable_begin, kind == '%' ? "{%" : "{{", lx.line});
        lex_tag(lx, kind == '%');
    }
    lx.tokens.push_back({TokenKind::end, "", lx.line});
    return lx.tokens;
}

}  // namespace glass::chat::jinja
