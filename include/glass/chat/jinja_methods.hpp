/// \file
/// \brief glass/chat/jinja_methods.hpp — chat template step 3b: methods of str, dict and list.
/// ```text
/// In:  a receiver ("abc", a dict, a list), a method name, call arguments.
/// Out: what Python's method returns: "a,b".split(","), d.items(), d.get("k", 0), ...
///
/// Templates call Python methods directly: message.content.split('</think>')[-1].lstrip('\n'),
/// tool.function.items(), "{} {}".format(a, b). Each one glass implements is here; a Python
/// method it does not implement is a TemplateError naming it, never a silently different prompt.
/// ImmutableSandboxedEnvironment refuses methods that mutate (list.append, dict.update): they
/// are an undefined that raises "access to attribute 'append' of 'list' object is unsafe." when
/// called, as in Jinja2.
/// ```
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "glass/chat/jinja_ops.hpp"

namespace glass::chat::jinja {

/// Arguments matched to a Python signature: one slot per parameter name, nullopt when not given.
using BoundArgs = std::vector<std::optional<Value>>;

inline BoundArgs bind_args(const CallArgs& args, std::initializer_list<std::string_view> names, const std::string& what) {
    BoundArgs bound(names.size());
    if (args.positional.size() > names.size())
        fail(what + " takes at most " + std::to_string(names.size()) + " argument(s), got " + std::to_string(args.positional.size()), args.line);
    for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
    for (const auto& [key, value] : args.keyword) {
        const auto it = std::find(names.begin(), names.end(), key);
        if (it == names.end()) fail(what + " got an unexpected keyword argument '" + key + "'", args.line);
        const size_t slot = static_cast<size_t>(it - names.begin());
        if (bound[slot]) fail(what + " got multiple values for argument '" + key + "'", args.line);
        bound[slot] = value;
    }
    return bound;
}

inline const std::string& string_arg(const Value& v, const std::string& what, int line) {
    if (!v.is_string()) fail(what + " must be str, not " + type_name(v), line);
    return *v.text;
}

inline std::int64_t int_arg(const Value& v, const std::string& what, int line) {
    if (!is_integral(v)) fail(what + " must be an integer, not " + type_name(v), line);
    return as_int(v);
}

/// A str argument, or None meaning "not given" (strip(None), split(None)).
inline std::optional<std::string> optional_string(const std::optional<Value>& v, const std::string& what, int line) {
    if (!v || v->is_none()) return std::nullopt;
    return string_arg(*v, what, line);
}

inline Value string_list(const std::vector<std::string>& pieces) {
    List items;
    for (const std::string& p : pieces) items.push_back(make_string(p));
    return make_list(std::move(items));
}

/// "{} and {0} and {name}".format(...): auto and explicit numbering, keyword fields, {{ }}, !s !r.
inline std::string python_format(const std::string& pattern, const CallArgs& args) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '}') {
            if (i + 1 < pattern.size() && pattern[i + 1] == '}') { out += '}'; ++i; continue; }
            fail("format: single '}' encountered in format string", args.line);
        }
        if (c != '{') { out += c; continue; }
        if (i + 1 < pattern.size() && pattern[i + 1] == '{') { out += '{'; ++i; continue; }
        const size_t close = pattern.find('}', i);
        if (close == std::string::npos) fail("format: single '{' encountered in format string", args.line);
        std::string field = pattern.substr(i + 1, close - i - 1);
        i = close;
        char conversion = 0;
        if (const size_t bang = field.find('!'); bang != std::string::npos) {
            conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
            field.resize(bang);
        }
        if (field.find_first_of(":.[") != std::string::npos) fail("unsupported format field '{" + field + "}'", args.line);
        const Value* value = nullptr;
        if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
            const size_t index = field.empty() ? auto_index++ : std::stoul(field);
            if (index >= args.positional.size()) fail("format: replacement index " + std::to_string(index) + " out of range", args.line);
            value = &args.positional[index];
        } else {
            for (const auto& [key, v] : args.keyword) if (key == field) value = &v;
            if (!value) fail("format: no argument named '" + field + "'", args.line);
        }
        if (conversion && conversion != 's' && conversion != 'r') fail("unsupported format conversion", args.line);
        out += conversion == 'r' ? python_repr(*value) : python_str(*value);
    }
    return out;
}

inline Value call_string_method(RenderState& state, const std::string& s, const std::string& name, const CallArgs& args) {
    const int line = args.line;
    const std::string what = "str." + name + "()";
    if (name == "format") { std::string out = python_format(s, args); state.charge(out.size(), line); return make_string(std::move(out)); }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" || name == "casefold") {
        bind_args(args, {}, what);
        const CaseMapping m = name == "upper" ? CaseMapping::upper : name == "title" ? CaseMapping::title : name == "capitalize" ? CaseMapping::capitalize
                            : name == "swapcase" ? CaseMapping::swapcase : CaseMapping::lower;
        return make_string(python_case(s, m));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const BoundArgs a = bind_args(args, {"chars"}, what);
        return make_string(python_strip(s, optional_string(a[0], "strip chars", line), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        const BoundArgs a = bind_args(args, {"sep", "maxsplit"}, what);
        const std::optional<std::string> sep = optional_string(a[0], "separator", line);
        if (sep && sep->empty()) fail("empty separator", line);
        const long maxsplit = a[1] ? static_cast<long>(int_arg(*a[1], "maxsplit", line)) : -1;
        if (name == "rsplit" && maxsplit >= 0) {
            if (!sep) fail("unsupported: rsplit() on whitespace with maxsplit", line);
            return string_list(python_rsplit(s, *sep, maxsplit));
        }
        return string_list(python_split(s, sep, maxsplit));
    }
    if (name == "splitlines") { bind_args(args, {}, what); return string_list(python_splitlines(s)); }
    if (name == "startswith" || name == "endswith") {
        const BoundArgs a = bind_args(args, {"prefix"}, what);
        if (!a[0]) fail(what + " takes exactly one argument", line);
        List candidates = a[0]->is_list() && a[0]->seq == Value::Seq::tuple ? *a[0]->items : List{*a[0]};
        for (const Value& c : candidates) {
            const std::string& p = string_arg(c, what + " argument", line);
            if (name == "startswith" ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                                     : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
                return make_bool(true);
        }
        return make_bool(false);
    }
    if (name == "replace") {
        const BoundArgs a = bind_args(args, {"old", "new", "count"}, what);
        if (!a[0] || !a[1]) fail(what + " takes at least 2 arguments", line);
        std::string out = python_replace(s, string_arg(*a[0], "old", line), string_arg(*a[1], "new", line), a[2] ? static_cast<long>(int_arg(*a[2], "count", line)) : -1);
        state.charge(out.size(), line);
        return make_string(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
        const BoundArgs a = bind_args(args, {"sub"}, what + " (start/end are not supported)");
        if (!a[0]) fail(what + " takes exactly one argument", line);
        const std::string& sub = string_arg(*a[0], "substring", line);
        if (name == "count") return make_int(python_count(s, sub));
        const size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
        if (at == std::string::npos && (name == "index" || name == "rindex")) fail("substring not found", line);
        return make_int(at == std::string::npos ? -1 : code_point_index(s, at));
    }
    if (name == "join") {
        const BoundArgs a = bind_args(args, {"iterable"}, what);
        if (!a[0]) fail(what + " takes exactly one argument", line);
        std::string out;
        size_t i = 0;
        for (const Value& piece : iterate(*a[0], line)) {
            if (!piece.is_string()) fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(piece) + " found", line);
            if (i++) out += s;
            out += *piece.text;
            state.charge(piece.text->size() + s.size(), line);
        }
        return make_string(std::move(out));
    }
    if (name == "removeprefix" || name == "removesuffix") {
        const BoundArgs a = bind_args(args, {"affix"}, what);
        const std::string& p = a[0] ? string_arg(*a[0], "argument", line) : (fail(what + " takes exactly one argument", line), s);
        if (name == "removeprefix") return make_string(s.compare(0, p.size(), p) == 0 && s.size() >= p.size() ? s.substr(p.size()) : s);
        return make_string(s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0 ? s.substr(0, s.size() - p.size()) : s);
    }
    if (name == "partition" || name == "rpartition") {
        const BoundArgs a = bind_args(args, {"sep"}, what);
        const std::string& sep = a[0] ? string_arg(*a[0], "separator", line) : (fail(what + " takes exactly one argument", line), s);
        if (sep.empty()) fail("empty separator", line);
        const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (at == std::string::npos)
            return make_list(name == "partition" ? List{make_string(s), make_string(""), make_string("")} : List{make_string(""), make_string(""), make_string(s)}, Value::Seq::tuple);
        return make_list({make_string(s.substr(0, at)), make_string(sep), make_string(s.substr(at + sep.size()))}, Value::Seq::tuple);
    }
    static const std::pair<const char*, CharClass> predicates[] = {{"isdigit", CharClass::digit}, {"isdecimal", CharClass::digit}, {"isnumeric", CharClass::digit},
                                                                   {"isalpha", CharClass::alpha}, {"isalnum", CharClass::alnum}, {"isspace", CharClass::space},
                                                                   {"islower", CharClass::lower}, {"isupper", CharClass::upper}};
    for (const auto& [predicate, char_class] : predicates) {
        if (name == predicate) { bind_args(args, {}, what); return make_bool(python_is(s, char_class)); }
    }
    fail("unsupported string method '" + name + "'", line);
}

inline Value call_dict_method(const Value& d, const std::string& name, const CallArgs& args) {
    const std::string what = "dict." + name + "()";
    if (name == "items" || name == "keys" || name == "values") {
        bind_args(args, {}, what);
        List out;
        for (const auto& [key, value] : d.dict->entries)
            out.push_back(name == "items" ? make_list({key, value}, Value::Seq::tuple) : name == "keys" ? key : value);
        return make_list(std::move(out), name == "items" ? Value::Seq::dict_items : name == "keys" ? Value::Seq::dict_keys : Value::Seq::dict_values);
    }
    if (name == "get") {
        const BoundArgs a = bind_args(args, {"key", "default"}, what);
        if (!a[0]) fail(what + " takes at least 1 argument", args.line);
        if (a[0]->is_list() || a[0]->is_dict()) fail("unhashable type: '" + type_name(*a[0]) + "'", args.line);
        const Value* found = d.dict->find(*a[0]);
        return found ? *found : a[1] ? *a[1] : make_none();
    }
    if (name == "copy") { bind_args(args, {}, what); return d; }
    fail("unsupported dict method '" + name + "'", args.line);
}

inline Value call_list_method(const Value& l, const std::string& name, const CallArgs& args) {
    const std::string what = type_name(l) + "." + name + "()";
    if (name == "count" || name == "index") {
        const BoundArgs a = bind_args(args, {"value"}, what + " (start/stop are not supported)");
        if (!a[0]) fail(what + " takes exactly one argument", args.line);
        std::int64_t count = 0;
        for (size_t i = 0; i < l.items->size(); ++i) {
            if (!equal((*l.items)[i], *a[0])) continue;
            if (name == "index") return make_int(static_cast<std::int64_t>(i));
            ++count;
        }
        if (name == "index") fail(python_repr(*a[0]) + " is not in list", args.line);
        return make_int(count);
    }
    if (name == "copy") { bind_args(args, {}, what); return make_list(*l.items); }
    fail("unsupported list method '" + name + "'", args.line);
}

inline bool one_of(const std::string& name, std::initializer_list<const char*> names) {
    for (const char* n : names) if (name == n) return true;
    return false;
}

inline std::optional<Value> get_method(const Value& receiver, const std::string& name, int line) {
    // 1. Does Python's type have this attribute, and is it one the sandbox allows?
    bool exists = false, mutates = false;
    std::string type = type_name(receiver);
    if (receiver.is_string()) {
        exists = one_of(name, {"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
                               "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
                               "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
                               "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
                               "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"});
        if (exists && receiver.markup) fail("unsupported: method '" + name + "' of a Markup string (from |safe or |escape)", line);
    } else if (receiver.is_dict()) {
        exists = one_of(name, {"items", "keys", "values", "get", "copy", "fromkeys", "clear", "pop", "popitem", "setdefault", "update"});
        mutates = one_of(name, {"clear", "pop", "popitem", "setdefault", "update"});
    } else if (receiver.is_list() && receiver.seq == Value::Seq::list) {
        exists = one_of(name, {"append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove", "reverse", "sort"});
        mutates = one_of(name, {"append", "extend", "insert", "remove", "reverse", "sort"});
    } else if (receiver.is_list() && receiver.seq == Value::Seq::tuple) {
        exists = one_of(name, {"count", "index"});
    } else if (receiver.kind == Value::Kind::integer || receiver.kind == Value::Kind::boolean || receiver.kind == Value::Kind::floating) {
        if (one_of(name, {"real", "imag", "numerator", "denominator", "conjugate", "bit_length", "bit_count", "to_bytes", "from_bytes",
                          "as_integer_ratio", "is_integer", "hex", "fromhex"}))
            fail("unsupported attribute '" + name + "' of a number", line);
    }
    if (!exists) return std::nullopt;
    if (mutates) return make_undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
    // 2. The method, bound to its receiver.
    return make_callable(type + "." + name, [receiver, name](RenderState& state, const CallArgs& args) -> Value {
        if (receiver.is_string()) return call_string_method(state, *receiver.text, name, args);
        if (receiver.is_dict()) return call_dict_method(receiver, name, args);
        return call_list_method(receiver, name, args);
    });
}

}  // namespace glass::chat::jinja
