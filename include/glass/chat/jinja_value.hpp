/// \file
/// \brief glass/chat/jinja_value.hpp — the values a chat template computes with (Python's).
/// ```text
/// In:  JSON (the conversation), literals in the template, results of operators and filters.
/// Out: one Value type with Python's meaning: truthiness, ==, <, str() and repr(), json.dumps.
///
/// A Value is one of
///   undefined   a name or key that does not exist. Prints as '', is false, iterates as empty;
///               most other uses raise (Jinja2's default Undefined). Carries why it is undefined.
///   none bool integer (int64) floating (double) string (UTF-8)
///   list        also a tuple ("(1, 2)"), a generator (what map/select return: true even when empty,
///               no len, no printing) and dict views (d.items(): prints "dict_items([...])")
///   dict        insertion-ordered (key, value) pairs, keys any value (JSON gives strings)
///   callable    a macro, a global function or a bound method ("abc".upper)
///   namespace   namespace(...): the one mutable object ({% set ns.x = 1 %}); also the `loop` object
/// Lists, dicts and strings are immutable once made (the sandbox refuses list.append) and
/// shared by pointer, so copying a Value is cheap.
/// ```
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "glass/chat/jinja_strings.hpp"
#include "glass/chat/template_errors.hpp"

namespace glass::chat::jinja {

struct Value;
struct Dict;
struct Callable;
struct Namespace;
struct RenderState;  // the evaluator's state (jinja_eval.hpp); callables receive it

using List = std::vector<Value>;

struct Value {
    enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, callable, namespace_ };
    Kind kind = Kind::undefined;
    bool boolean = false;
    std::int64_t integer = 0;
    double floating = 0;
    std::shared_ptr<const std::string> text;        // string; for undefined: why (the error to raise if used)
    bool markup = false;                            // string made by `safe` / `escape` (markupsafe.Markup)
    enum class Seq { list, tuple, generator, dict_items, dict_keys, dict_values };
    std::shared_ptr<const List> items;              // list, tuple, or what Python would give as an iterator
    Seq seq = Seq::list;                            // generator: map/select/... results (print refused, always true)
    std::shared_ptr<const Dict> dict;
    std::shared_ptr<const Callable> callable;
    std::shared_ptr<Namespace> ns;

    bool is_undefined() const { return kind == Kind::undefined; }
    bool is_none() const { return kind == Kind::none; }
    bool is_string() const { return kind == Kind::string; }
    bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
    bool is_list() const { return kind == Kind::list; }
    bool is_dict() const { return kind == Kind::dict; }
    const std::string& str() const { return *text; }
};

struct Dict {
    std::vector<std::pair<Value, Value>> entries;  // in insertion order
    const Value* find(const Value& key) const;
};

/// Arguments of a call: positional, then keyword (name=value), and the line of the call.
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    int line = 0;
};

struct Callable {
    std::string name;
    std::function<Value(RenderState&, const CallArgs&)> call;
};

/// namespace(...) and the loop object: named attributes that {% set ns.x = ... %} may change.
struct Namespace {
    std::vector<std::pair<std::string, Value>> attributes;
    bool is_loop = false;  // prints as <LoopContext i/n>
    Value* find(const std::string& name) {
        for (auto& [key, value] : attributes) if (key == name) return &value;
        return nullptr;
    }
    void set(const std::string& name, Value value) {
        if (Value* existing = find(name)) *existing = std::move(value);
        else attributes.emplace_back(name, std::move(value));
    }
};

// ---- making values ---------------------------------------------------------------------------

inline Value make_undefined(std::string why) {
    Value v;
    v.text = std::make_shared<const std::string>(std::move(why));
    return v;
}
inline Value make_none() { Value v; v.kind = Value::Kind::none; return v; }
inline Value make_bool(bool b) { Value v; v.kind = Value::Kind::boolean; v.boolean = b; return v; }
inline Value make_int(std::int64_t i) { Value v; v.kind = Value::Kind::integer; v.integer = i; return v; }
inline Value make_float(double f) { Value v; v.kind = Value::Kind::floating; v.floating = f; return v; }
inline Value make_string(std::string s, bool markup = false) {
    Value v;
    v.kind = Value::Kind::string;
    v.text = std::make_shared<const std::string>(std::move(s));
    v.markup = markup;
    return v;
}
inline Value make_list(List items, Value::Seq seq = Value::Seq::list) {
    Value v;
    v.kind = Value::Kind::list;
    v.items = std::make_shared<const List>(std::move(items));
    v.seq = seq;
    return v;
}
inline Value make_dict(Dict d) { Value v; v.kind = Value::Kind::dict; v.dict = std::make_shared<const Dict>(std::move(d)); return v; }
inline Value make_callable(std::string name, std::function<Value(RenderState&, const CallArgs&)> fn) {
    Value v;
    v.kind = Value::Kind::callable;
    v.callable = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
    return v;
}
inline Value make_namespace(std::shared_ptr<Namespace> ns) { Value v; v.kind = Value::Kind::namespace_; v.ns = std::move(ns); return v; }

// ---- Python's view of a value ------------------------------------------------------------------

/// type(x).__name__, for error messages ("'int' object has no attribute ...").
inline std::string type_name(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined: return "Undefined";
        case Value::Kind::none: return "NoneType";
        case Value::Kind::boolean: return "bool";
        case Value::Kind::integer: return "int";
        case Value::Kind::floating: return "float";
        case Value::Kind::string: return "str";
        case Value::Kind::list:
            switch (v.seq) {
                case Value::Seq::list: return "list";
                case Value::Seq::tuple: return "tuple";
                case Value::Seq::generator: return "generator";
                case Value::Seq::dict_items: return "dict_items";
                case Value::Seq::dict_keys: return "dict_keys";
                case Value::Seq::dict_values: return "dict_values";
            }
            return "list";
        case Value::Kind::dict: return "dict";
        case Value::Kind::callable: return "function";
        case Value::Kind::namespace_: return v.ns->is_loop ? "LoopContext" : "Namespace";
    }
    return "object";
}

/// bool(x).
inline bool truthy(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined: case Value::Kind::none: return false;
        case Value::Kind::boolean: return v.boolean;
        case Value::Kind::integer: return v.integer != 0;
        case Value::Kind::floating: return v.floating != 0.0;
        case Value::Kind::string: return !v.text->empty();
        case Value::Kind::list: return v.seq == Value::Seq::generator || !v.items->empty();
        case Value::Kind::dict: return !v.dict->entries.empty();
        default: return true;
    }
}

/// Deep structures (a list that holds itself 100000 times over) must not overflow the stack.
constexpr int kMaxValueDepth = 500;
inline void check_value_depth(int depth) {
    if (depth > kMaxValueDepth) throw TemplateError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels", 0);
}

/// x == y: numbers across int/float/bool, deep for lists and dicts (dict order ignored), and
/// undefined == undefined.
inline bool equal(const Value& a, const Value& b, int depth = 0) {
    check_value_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.kind == Value::Kind::floating || b.kind == Value::Kind::floating) {
            const double x = a.kind == Value::Kind::floating ? a.floating : static_cast<double>(a.kind == Value::Kind::boolean ? a.boolean : a.integer);
            const double y = b.kind == Value::Kind::floating ? b.floating : static_cast<double>(b.kind == Value::Kind::boolean ? b.boolean : b.integer);
            return x == y;
        }
        const std::int64_t x = a.kind == Value::Kind::boolean ? a.boolean : a.integer;
        const std::int64_t y = b.kind == Value::Kind::boolean ? b.boolean : b.integer;
        return x == y;
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Value::Kind::undefined: case Value::Kind::none: return true;
        case Value::Kind::string: return *a.text == *b.text;
        case Value::Kind::list: {
            if (a.seq != b.seq || a.seq == Value::Seq::generator || a.items->size() != b.items->size()) return false;
            for (size_t i = 0; i < a.items->size(); ++i) if (!equal((*a.items)[i], (*b.items)[i], depth + 1)) return false;
            return true;
        }
        case Value::Kind::dict: {
            if (a.dict->entries.size() != b.dict->entries.size()) return false;
            for (const auto& [key, value] : a.dict->entries) {
                const Value* other = b.dict->find(key);
                if (!other || !equal(value, *other, depth + 1)) return false;
            }
            return true;
        }
        case Value::Kind::callable: return a.callable == b.callable;
        case Value::Kind::namespace_: return a.ns == b.ns;
        default: return false;
    }
}

inline const Value* Dict::find(const Value& key) const {
    for (const auto& [k, v] : entries) if (equal(k, key)) return &v;
    return nullptr;
}

/// Looks a string key up in a dict (the common case: JSON objects).
inline const Value* find_key(const Dict& d, const std::string& key) {
    for (const auto& [k, v] : d.entries) if (k.is_string() && *k.text == key) return &v;
    return nullptr;
}

std::string python_repr(const Value& v, int depth = 0);

/// str(x) — what {{ x }} prints: '' for undefined, None/True/False, 1.0, repr() inside containers.
inline std::string python_str(const Value& v) {
    switch (v.kind) {
        case Value::Kind::undefined: return "";
        case Value::Kind::string: return *v.text;
        default: return python_repr(v);
    }
}

inline std::string python_repr(const Value& v, int depth) {
    check_value_depth(depth);
    switch (v.kind) {
        case Value::Kind::undefined: return "Undefined";
        case Value::Kind::none: return "None";
        case Value::Kind::boolean: return v.boolean ? "True" : "False";
        case Value::Kind::integer: return std::to_string(v.integer);
        case Value::Kind::floating: return python_float_repr(v.floating);
        case Value::Kind::string: return python_string_repr(*v.text);
        case Value::Kind::list: {
            if (v.seq == Value::Seq::generator) throw TemplateError("unsupported: printing a generator (add |list)", 0);
            const bool tuple = v.seq == Value::Seq::tuple;
            std::string out = tuple ? "(" : "[";
            for (size_t i = 0; i < v.items->size(); ++i) out += (i ? ", " : "") + python_repr((*v.items)[i], depth + 1);
            if (tuple && v.items->size() == 1) out += ",";
            out += tuple ? ")" : "]";
            if (v.seq == Value::Seq::list || tuple) return out;
            return type_name(v) + "(" + out + ")";
        }
        case Value::Kind::dict: {
            std::string out = "{";
            bool first = true;
            for (const auto& [key, value] : v.dict->entries) {
                out += (first ? "" : ", ") + python_repr(key, depth + 1) + ": " + python_repr(value, depth + 1);
                first = false;
            }
            return out + "}";
        }
        case Value::Kind::callable: return "<function " + v.callable->name + ">";
        case Value::Kind::namespace_: {
            if (v.ns->is_loop) {
                const Value* index = v.ns->find("index");
                const Value* length = v.ns->find("length");
                return "<LoopContext " + python_repr(*index) + "/" + python_repr(*length) + ">";
            }
            Dict d;
            for (const auto& [key, value] : v.ns->attributes) d.entries.emplace_back(make_string(key), value);
            return "<Namespace " + python_repr(make_dict(std::move(d)), depth + 1) + ">";
        }
    }
    return "";
}

// ---- JSON in and out ---------------------------------------------------------------------------

/// The conversation as Python would see it after json.loads.
inline Value from_json(const nlohmann::ordered_json& j, int depth = 0) {
    check_value_depth(depth);
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return make_none();
        case nlohmann::ordered_json::value_t::boolean: return make_bool(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return make_int(j.get<std::int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            const std::uint64_t u = j.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) throw TemplateError("integer " + std::to_string(u) + " is too large", 0);
            return make_int(static_cast<std::int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return make_float(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return make_string(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            List items;
            for (const auto& element : j) items.push_back(from_json(element, depth + 1));
            return make_list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Dict d;
            for (const auto& [key, element] : j.items()) d.entries.emplace_back(make_string(key), from_json(element, depth + 1));
            return make_dict(std::move(d));
        }
        default: throw TemplateError("JSON value of an unsupported type", 0);
    }
}

/// json.dumps's string: `\" \\ \n \r \t \b \f`, other control characters as `\u00XX`, the rest
/// (non-ASCII included: ensure_ascii=False) as is.
inline std::string json_quote(std::string_view s, bool ensure_ascii) {
    std::string out = "\"";
    char32_t c = 0;
    for (size_t at = 0; at < s.size();) {
        const size_t n = decode_code_point(s, at, c);
        char buffer[16];
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
                    if (c >= 0x10000) {
                        const char32_t v = c - 0x10000;
                        std::snprintf(buffer, sizeof buffer, "\\u%04x\\u%04x", 0xD800 + (unsigned)(v >> 10), 0xDC00 + (unsigned)(v & 0x3FF));
                    } else {
                        std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
                    }
                    out += buffer;
                } else {
                    out += s.substr(at, n);
                }
        }
        at += n;
    }
    return out + "\"";
}

/// How json.dumps lays out: indent (nullopt: one line), the item and key separators, sort_keys.
struct JsonLayout {
    std::optional<std::string> indent;
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};

/// HF's tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
inline void to_json(const Value& v, const JsonLayout& layout, std::string& out, int depth = 0) {
    check_value_depth(depth);
    const auto newline = [&](int level) {
        if (!layout.indent) return;
        out += '\n';
        for (int i = 0; i < level; ++i) out += *layout.indent;
    };
    switch (v.kind) {
        case Value::Kind::none: out += "null"; return;
        case Value::Kind::boolean: out += v.boolean ? "true" : "false"; return;
        case Value::Kind::integer: out += std::to_string(v.integer); return;
        case Value::Kind::floating:
            out += std::isnan(v.floating) ? "NaN" : std::isinf(v.floating) ? (v.floating < 0 ? "-Infinity" : "Infinity") : python_float_repr(v.floating);
            return;
        case Value::Kind::string: out += json_quote(*v.text, layout.ensure_ascii); return;
        case Value::Kind::list: {
            if (v.seq != Value::Seq::list && v.seq != Value::Seq::tuple) break;
            if (v.items->empty()) { out += "[]"; return; }
            out += '[';
            for (size_t i = 0; i < v.items->size(); ++i) {
                if (i) out += layout.item_separator;
                newline(depth + 1);
                to_json((*v.items)[i], layout, out, depth + 1);
            }
            newline(depth);
            out += ']';
            return;
        }
        case Value::Kind::dict: {
            if (v.dict->entries.empty()) { out += "{}"; return; }
            std::vector<const std::pair<Value, Value>*> entries;
            for (const auto& entry : v.dict->entries) entries.push_back(&entry);
            const auto key_text = [](const Value& key) -> std::string {
                if (key.is_string()) return *key.text;
                if (key.kind == Value::Kind::none) return "null";
                if (key.kind == Value::Kind::boolean) return key.boolean ? "true" : "false";
                if (key.kind == Value::Kind::integer || key.kind == Value::Kind::floating) return python_repr(key);
                throw TemplateError("tojson: keys must be str, int, float, bool or None, not " + type_name(key), 0);
            };
            if (layout.sort_keys) {
                for (const auto* e : entries)
                    if (!e->first.is_string()) throw TemplateError("tojson(sort_keys=true) with a key that is not a string", 0);
                std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return *x->first.text < *y->first.text; });
            }
            out += '{';
            for (size_t i = 0; i < entries.size(); ++i) {
                if (i) out += layout.item_separator;
                newline(depth + 1);
                out += json_quote(key_text(entries[i]->first), layout.ensure_ascii) + layout.key_separator;
                to_json(entries[i]->second, layout, out, depth + 1);
            }
            newline(depth);
            out += '}';
            return;
        }
        default: break;
    }
    throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable", 0);
}

}  // namespace glass::chat::jinja
