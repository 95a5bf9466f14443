/// \file
/// \brief glass/chat/jinja_filters.hpp — chat template step 3c: filters (x | name(args)).
/// ```text
/// In:  a value and call arguments:  x | name(args)
/// Out: what Jinja2's builtin filter of that name returns, with Hugging Face's own tojson
///      (json.dumps, ensure_ascii=False, keys in insertion order).
///
/// Jinja2 quirks kept: map/select/reject/selectattr/rejectattr/unique/items/reverse return
/// generators (true even when empty; |list or |join to use them), |title capitalizes after
/// - ( [ { < and whitespace, |int("3.7") is 3, |default only replaces undefined (unless
/// boolean=true). A filter glass does not implement is a TemplateError naming it.
/// (Tests and global functions: jinja_builtins.hpp.)
/// ```
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "glass/chat/jinja_methods.hpp"

namespace glass::chat::jinja {

Value apply_filter(RenderState& state, const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(RenderState& state, const std::string& name, const Value& input, const CallArgs& args);

inline Value generator(List items) { return make_list(std::move(items), Value::Seq::generator); }

/// len(x).
inline std::int64_t python_len(const Value& v, int line) {
    if (v.is_undefined()) return 0;
    if (v.is_string()) return static_cast<std::int64_t>(code_point_count(*v.text));
    if (v.is_list() && v.seq != Value::Seq::generator) return static_cast<std::int64_t>(v.items->size());
    if (v.is_dict()) return static_cast<std::int64_t>(v.dict->entries.size());
    fail("object of type '" + type_name(v) + "' has no len()", line);
}

/// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0 (each as obj[part]).
inline Value get_path(const Value& item, const Value& attribute, int line) {
    if (is_integral(attribute)) return get_item(item, attribute, line);
    Value current = item;
    const std::string& path = string_arg(attribute, "attribute", line);
    for (const std::string& part : python_split(path, std::string("."), -1)) {
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        current = get_item(current, digits ? make_int(std::stoll(part)) : make_string(part), line);
    }
    return current;
}

inline Value ignore_case(const Value& v) { return v.is_string() ? make_string(python_case(*v.text, CaseMapping::lower)) : v; }

/// The sort key of sort/unique/min/max/dictsort: the attribute, lower-cased unless case_sensitive.
inline Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive, int line) {
    Value key = attribute && !attribute->is_none() ? get_path(item, *attribute, line) : item;
    return case_sensitive ? key : ignore_case(key);
}

inline std::string text_of(const Value& v) { return python_str(v); }  // Jinja2's soft_str

inline bool flag(const std::optional<Value>& v, bool fallback) { return v ? truthy(*v) : fallback; }

// ---- filters ---------------------------------------------------------------------------------

inline Value filter_tojson(RenderState& state, const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
    JsonLayout layout;
    layout.ensure_ascii = flag(a[0], false);
    if (a[1] && !a[1]->is_none()) {
        if (a[1]->is_string()) layout.indent = *a[1]->text;
        else layout.indent = std::string(static_cast<size_t>(std::max<std::int64_t>(0, std::min<std::int64_t>(int_arg(*a[1], "indent", args.line), 1000))), ' ');
        layout.item_separator = ",";
    }
    if (a[2] && !a[2]->is_none()) {
        if (!is_sequence(*a[2]) || a[2]->items->size() != 2) fail("tojson: separators must be a pair of strings", args.line);
        layout.item_separator = string_arg((*a[2]->items)[0], "separator", args.line);
        layout.key_separator = string_arg((*a[2]->items)[1], "separator", args.line);
    }
    layout.sort_keys = flag(a[3], false);
    std::string out;
    try {
        to_json(input, layout, out);
    } catch (const TemplateError& e) {
        fail(e.message(), args.line);
    }
    state.charge(out.size(), args.line);
    return make_string(std::move(out));
}

inline Value filter_join(RenderState& state, const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"d", "attribute"}, "join");
    const std::string separator = a[0] ? text_of(*a[0]) : "";
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input, args.line)) {
        const Value piece = a[1] && !a[1]->is_none() ? get_path(item, *a[1], args.line) : item;
        if (!first) out += separator;
        out += text_of(piece);
        first = false;
        state.charge(separator.size() + 16, args.line);
    }
    state.charge(out.size(), args.line);
    return make_string(std::move(out));
}

/// map(attribute="x", default=...) or map("filter", args...).
inline Value filter_map(RenderState& state, const Value& input, const CallArgs& args) {
    List out;
    const List items = iterate(input, args.line);
    if (args.positional.empty()) {
        const BoundArgs a = bind_args(args, {"attribute", "default"}, "map");
        if (!a[0]) fail("map requires a filter argument", args.line);
        for (const Value& item : items) {
            Value v = get_path(item, *a[0], args.line);
            out.push_back(v.is_undefined() && a[1] && !a[1]->is_none() ? *a[1] : v);
        }
        return generator(std::move(out));
    }
    const std::string& filter = string_arg(args.positional[0], "map's filter name", args.line);
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword, args.line};
    for (const Value& item : items) out.push_back(apply_filter(state, filter, item, rest));
    return generator(std::move(out));
}

/// select / reject (test on the item) and selectattr / rejectattr (test on an attribute).
inline Value filter_select(RenderState& state, const Value& input, const CallArgs& args, bool on_attribute, bool keep_when) {
    size_t first_arg = 0;
    Value attribute;
    if (on_attribute) {
        if (args.positional.empty()) fail("selectattr/rejectattr need an attribute", args.line);
        attribute = args.positional[first_arg++];
    }
    const bool has_test = args.positional.size() > first_arg;
    const std::string test = has_test ? string_arg(args.positional[first_arg], "test name", args.line) : "";
    CallArgs rest{{args.positional.begin() + static_cast<long>(std::min(args.positional.size(), first_arg + 1)), args.positional.end()}, args.keyword, args.line};
    List out;
    for (const Value& item : iterate(input, args.line)) {
        const Value subject = on_attribute ? get_path(item, attribute, args.line) : item;
        const bool passed = has_test ? apply_test(state, test, subject, rest) : truthy(subject);
        if (passed == keep_when) out.push_back(item);
    }
    return generator(std::move(out));
}

/// sorted(items, key=sort_key) with Python's < (a TypeError on mixed types), stable.
inline List sorted_by_key(List items, const std::optional<Value>& attribute, bool case_sensitive, bool reverse, int line) {
    std::vector<std::pair<Value, Value>> keyed;
    for (Value& item : items) keyed.emplace_back(sort_key(item, attribute, case_sensitive, line), std::move(item));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) { return reverse ? less(y.first, x.first, line) : less(x.first, y.first, line); });
    List out;
    for (auto& entry : keyed) out.push_back(std::move(entry.second));
    return out;
}

inline Value filter_min_max(const Value& input, const CallArgs& args, bool want_max) {
    const BoundArgs a = bind_args(args, {"case_sensitive", "attribute"}, want_max ? "max" : "min");
    const List items = iterate(input, args.line);
    if (items.empty()) return make_undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    Value best_key = sort_key(items[0], a[1], flag(a[0], false), args.line);
    for (size_t i = 1; i < items.size(); ++i) {
        Value key = sort_key(items[i], a[1], flag(a[0], false), args.line);
        if (want_max ? less(best_key, key, args.line) : less(key, best_key, args.line)) { best = i; best_key = key; }
    }
    return items[best];
}

inline Value filter_indent(RenderState& state, const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"width", "first", "blank"}, "indent");
    require_defined(input, args.line);
    if (!input.is_string()) fail("indent: can only indent a string, not " + type_name(input), args.line);
    std::string indentation = "    ";
    if (a[0]) indentation = a[0]->is_string() ? *a[0]->text : std::string(static_cast<size_t>(std::clamp<std::int64_t>(int_arg(*a[0], "width", args.line), 0, 1000)), ' ');
    const std::vector<std::string> lines = python_splitlines(*input.text + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += "\n";
        const bool indent_line = i > 0 && (flag(a[2], false) || !lines[i].empty());
        out += (indent_line ? indentation : "") + lines[i];
    }
    if (flag(a[1], false)) out = indentation + out;
    state.charge(out.size(), args.line);
    return make_string(std::move(out));
}

/// Python's int(text): optional sign and whitespace, digits with single underscores between.
inline std::optional<std::int64_t> parse_python_int(const std::string& text) {
    const std::string t = python_strip(text, std::nullopt, true, true);
    size_t i = (t.size() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
    std::string digits = t.substr(0, i);
    for (; i < t.size(); ++i) {
        if (std::isdigit(static_cast<unsigned char>(t[i]))) digits += t[i];
        else if (t[i] == '_' && i + 1 < t.size() && i > 0 && std::isdigit(static_cast<unsigned char>(t[i - 1])) && std::isdigit(static_cast<unsigned char>(t[i + 1]))) continue;
        else return std::nullopt;
    }
    if (digits.empty() || digits == "+" || digits == "-") return std::nullopt;
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), nullptr, 10);
    if (errno == ERANGE) return std::nullopt;
    return v;
}

/// Python's float(text): decimal or exponent notation, inf / infinity / nan, underscores between digits.
inline std::optional<double> parse_python_float(const std::string& text) {
    std::string t = python_strip(text, std::nullopt, true, true);
    std::string lower = python_case(t, CaseMapping::lower);
    const std::string unsigned_part = (lower.size() && (lower[0] == '+' || lower[0] == '-')) ? lower.substr(1) : lower;
    if (unsigned_part == "inf" || unsigned_part == "infinity" || unsigned_part == "nan") return std::strtod(lower.c_str(), nullptr);
    std::string cleaned;
    for (size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == '_' && i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) && std::isdigit(static_cast<unsigned char>(t[i + 1]))) continue;
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::nullopt;
        cleaned += c;
    }
    if (cleaned.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(cleaned.c_str(), &end);
    if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
    return v;
}

inline Value filter_int(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"default", "base"}, "int");
    if (a[1] && !(is_integral(*a[1]) && as_int(*a[1]) == 10)) fail("unsupported: int filter with a base other than 10", args.line);
    const Value fallback = a[0] ? *a[0] : make_int(0);
    require_defined(input, args.line);
    if (is_integral(input)) return make_int(as_int(input));
    if (input.kind == Value::Kind::floating) {
        if (std::isnan(input.floating)) return fallback;
        if (std::isinf(input.floating) || std::fabs(input.floating) >= 9.2e18) fail("cannot convert float " + python_float_repr(input.floating) + " to a 64-bit integer", args.line);
        return make_int(static_cast<std::int64_t>(input.floating));
    }
    if (!input.is_string()) return fallback;
    if (std::optional<std::int64_t> v = parse_python_int(*input.text)) return make_int(*v);
    const std::optional<double> f = parse_python_float(*input.text);
    if (!f || std::isnan(*f)) return fallback;
    if (std::isinf(*f) || std::fabs(*f) >= 9.2e18) fail("cannot convert float " + python_float_repr(*f) + " to a 64-bit integer", args.line);
    return make_int(static_cast<std::int64_t>(*f));
}

inline Value filter_float(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"default"}, "float");
    const Value fallback = a[0] ? *a[0] : make_float(0.0);
    require_defined(input, args.line);
    if (input.is_number()) return make_float(as_double(input));
    if (!input.is_string()) return fallback;
    const std::optional<double> f = parse_python_float(*input.text);
    return f ? make_float(*f) : fallback;
}

inline Value filter_round(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"precision", "method"}, "round");
    const std::int64_t precision = a[0] ? int_arg(*a[0], "precision", args.line) : 0;
    const std::string method = a[1] ? string_arg(*a[1], "method", args.line) : "common";
    if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor", args.line);
    require_defined(input, args.line);
    if (!input.is_number()) fail("type " + type_name(input) + " doesn't define __round__ method", args.line);
    if (precision < 0 || precision > 300) fail("unsupported: round with precision " + std::to_string(precision), args.line);
    if (method == "common") {
        if (is_integral(input)) return make_int(as_int(input));
        if (!std::isfinite(input.floating)) return input;
        std::vector<char> buffer(400);
        std::snprintf(buffer.data(), buffer.size(), "%.*f", static_cast<int>(precision), input.floating);  // correctly rounded, ties to even
        return make_float(std::strtod(buffer.data(), nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double scaled = as_double(input) * scale;
    return make_float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

inline Value filter_title(const Value& input) {  // Jinja2's own title: a word starts after - ( [ { < or whitespace
    const std::string s = text_of(input);
    std::string out;
    bool word_start = true;
    char32_t c = 0;
    for (size_t at = 0; at < s.size();) {
        const size_t n = decode_code_point(s, at, c);
        const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
        if (separator) { out += s.substr(at, n); word_start = true; }
        else if (n == 1 && c >= 0x80) { out += s[at]; word_start = false; }
        else { append_utf8(out, word_start ? to_upper(c) : to_lower(c)); word_start = false; }
        at += n;
    }
    return make_string(std::move(out));
}

inline Value filter_wordcount(const Value& input) {
    const std::string s = text_of(input);
    std::int64_t words = 0;
    bool in_word = false;
    char32_t c = 0;
    for (size_t at = 0; at < s.size(); at += decode_code_point(s, at, c)) {
        decode_code_point(s, at, c);
        const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool word_char = c == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_NO);
        if (word_char && !in_word) ++words;
        in_word = word_char;
    }
    return make_int(words);
}

inline Value filter_sum(RenderState& state, const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"attribute", "start"}, "sum");
    Value total = a[1] ? *a[1] : make_int(0);
    for (const Value& item : iterate(input, args.line))
        total = binary_operator(state, "+", total, a[0] && !a[0]->is_none() ? get_path(item, *a[0], args.line) : item, args.line);
    return total;
}

inline Value filter_unique(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"case_sensitive", "attribute"}, "unique");
    List out, seen;
    for (const Value& item : iterate(input, args.line)) {
        const Value key = sort_key(item, a[1], flag(a[0], false), args.line);
        if (key.is_list() || key.is_dict()) fail("unhashable type: '" + type_name(key) + "'", args.line);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return generator(std::move(out));
}

inline Value filter_dictsort(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"case_sensitive", "by", "reverse"}, "dictsort");
    require_defined(input, args.line);
    if (!input.is_dict()) fail("dictsort: can only sort a dict", args.line);
    const std::string by = a[1] ? string_arg(*a[1], "by", args.line) : "key";
    if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'", args.line);
    List pairs;
    for (const auto& [key, value] : input.dict->entries) pairs.push_back(make_list({key, value}, Value::Seq::tuple));
    return make_list(sorted_by_key(std::move(pairs), make_int(by == "key" ? 0 : 1), flag(a[0], false), flag(a[2], false), args.line));
}

inline Value filter_first_last(const Value& input, int line, bool first) {
    if (input.is_list() && input.seq == Value::Seq::generator && !first) fail("'generator' object is not reversible", line);
    const List items = iterate(input, line);
    if (items.empty()) return make_undefined(first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    return first ? items.front() : items.back();
}

inline Value filter_reverse(const Value& input, int line) {
    if (input.is_string()) {
        const std::vector<size_t> at = code_point_offsets(*input.text);
        std::string out;
        for (size_t i = at.size() - 1; i > 0; --i) out += input.text->substr(at[i - 1], at[i] - at[i - 1]);
        return make_string(std::move(out), input.markup);
    }
    List items = iterate(input, line);
    std::reverse(items.begin(), items.end());
    if (input.is_list() && input.seq == Value::Seq::generator) return make_list(std::move(items));  // list(value), reversed
    return generator(std::move(items));
}

inline Value filter_list(const Value& input, int line) {
    if (input.is_none() || input.is_number()) fail("'" + type_name(input) + "' object is not iterable", line);
    return make_list(iterate(input, line));
}

inline Value filter_default(const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"default_value", "boolean"}, "default");
    if (input.is_undefined() || (flag(a[1], false) && !truthy(input))) return a[0] ? *a[0] : make_string("");
    return input;
}

inline Value filter_replace(RenderState& state, const Value& input, const CallArgs& args) {
    const BoundArgs a = bind_args(args, {"old", "new", "count"}, "replace");
    if (!a[0] || !a[1]) fail("replace needs old and new", args.line);
    const long count = a[2] && !a[2]->is_none() ? static_cast<long>(int_arg(*a[2], "count", args.line)) : -1;
    std::string out = python_replace(text_of(input), text_of(*a[0]), text_of(*a[1]), count);
    state.charge(out.size(), args.line);
    return make_string(std::move(out));
}

inline Value filter_case(const Value& input, const CallArgs& args, CaseMapping mapping, const char* name) {
    bind_args(args, {}, name);
    return make_string(python_case(text_of(input), mapping));
}

inline Value filter_abs(const Value& input, int line) {
    if (!input.is_number()) fail("bad operand type for abs(): '" + type_name(input) + "'", line);
    if (input.kind == Value::Kind::floating) return make_float(std::fabs(input.floating));
    if (as_int(input) == INT64_MIN) fail("integer overflow", line);
    return make_int(std::llabs(as_int(input)));
}

inline Value apply_filter(RenderState& state, const std::string& name, const Value& input, const CallArgs& args) {
    const int line = args.line;
    if (input.is_string() && input.markup && !one_of(name, {"length", "count", "safe", "escape", "e", "string", "default", "d"}))
        fail("unsupported: filter '" + name + "' on a Markup string (from |safe or |escape)", line);
    if (name == "tojson") return filter_tojson(state, input, args);
    if (name == "trim") { const BoundArgs a = bind_args(args, {"chars"}, "trim"); return make_string(python_strip(text_of(input), optional_string(a[0], "chars", line), true, true)); }
    if (name == "length" || name == "count") { bind_args(args, {}, name); return make_int(python_len(input, line)); }
    if (name == "items") {
        bind_args(args, {}, name);
        if (input.is_undefined()) return generator({});
        if (!input.is_dict()) fail("Can only get item pairs from a mapping.", line);
        List pairs;
        for (const auto& [key, value] : input.dict->entries) pairs.push_back(make_list({key, value}, Value::Seq::tuple));
        return generator(std::move(pairs));
    }
    if (name == "join") return filter_join(state, input, args);
    if (name == "map") return filter_map(state, input, args);
    if (name == "select" || name == "reject") return filter_select(state, input, args, false, name == "select");
    if (name == "selectattr" || name == "rejectattr") return filter_select(state, input, args, true, name == "selectattr");
    if (name == "first" || name == "last") { bind_args(args, {}, name); return filter_first_last(input, line, name == "first"); }
    if (name == "upper") return filter_case(input, args, CaseMapping::upper, "upper");
    if (name == "lower") return filter_case(input, args, CaseMapping::lower, "lower");
    if (name == "capitalize") return filter_case(input, args, CaseMapping::capitalize, "capitalize");
    if (name == "title") { bind_args(args, {}, name); return filter_title(input); }
    if (name == "replace") return filter_replace(state, input, args);
    if (name == "default" || name == "d") return filter_default(input, args);
    if (name == "list") { bind_args(args, {}, name); return filter_list(input, line); }
    if (name == "string") { bind_args(args, {}, name); return input.is_string() ? input : make_string(python_str(input)); }
    if (name == "int") return filter_int(input, args);
    if (name == "float") return filter_float(input, args);
    if (name == "round") return filter_round(input, args);
    if (name == "abs") { bind_args(args, {}, name); return filter_abs(input, line); }
    if (name == "sort") {
        const BoundArgs a = bind_args(args, {"reverse", "case_sensitive", "attribute"}, "sort");
        return make_list(sorted_by_key(iterate(input, line), a[2], flag(a[1], false), flag(a[0], false), line));
    }
    if (name == "unique") return filter_unique(input, args);
    if (name == "dictsort") return filter_dictsort(input, args);
    if (name == "max" || name == "min") return filter_min_max(input, args, name == "max");
    if (name == "sum") return filter_sum(state, input, args);
    if (name == "reverse") { bind_args(args, {}, name); return filter_reverse(input, line); }
    if (name == "indent") return filter_indent(state, input, args);
    if (name == "wordcount") { bind_args(args, {}, name); return filter_wordcount(input); }
    if (name == "safe") { bind_args(args, {}, name); return make_string(python_str(input), true); }
    if (name == "escape" || name == "e") {
        bind_args(args, {}, name);
        if (input.is_string() && input.markup) return input;
        return make_string(escape_html(python_str(input)), true);
    }
    fail("unsupported filter '" + name + "'", line);
}

}  // namespace glass::chat::jinja
