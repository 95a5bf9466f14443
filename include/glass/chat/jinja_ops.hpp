/// \file
/// \brief glass/chat/jinja_ops.hpp — chat template step 3a: Python's operators on Values.
/// ```text
/// In:  Values (from jinja_value.hpp).
/// Out: what Python + Jinja2's ImmutableSandboxedEnvironment give for
///        a + b, a - b, a * b, a / b, a // b, a % b, a ** b, a ~ b, -a
///        a == b, a < b, ..., a in b
///        a.name and a[key] (a dict key, else an attribute; a miss is undefined), a[i:j:k]
///        iterating a value (a dict gives its keys, a string its characters)
///      and the limits that keep a render bounded (RenderState).
/// Where Python raises (1 + "a", undefined.x, 1 < "a") glass throws TemplateError; where
/// Python would quietly grow a big integer glass refuses too (int64 overflow).
/// ```
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "glass/chat/jinja_value.hpp"

namespace glass::chat::jinja {

/// What a render may use; past any of these it stops with TemplateError.
struct RenderLimits {
    int max_call_depth = 200;                       // nested macro / caller calls
    int max_eval_depth = 1000;                      // nested expressions + statements while evaluating
    std::int64_t max_loop_iterations = 1000000;     // all for-loop iterations together
    std::size_t max_output_bytes = 64u << 20;       // the prompt (and any one string)
    std::size_t max_allocated_bytes = 1024u << 20;  // all strings and lists made, together
};

/// The state one render carries: its limits and how much of them it has used, and the clock.
struct RenderState {
    RenderLimits limits;
    std::optional<std::int64_t> now_unix_seconds;
    int call_depth = 0;
    int eval_depth = 0;
    std::int64_t loop_iterations = 0;
    std::size_t allocated_bytes = 0;

    /// Counts `bytes` of new strings or list slots against the limits.
    void charge(std::size_t bytes, int line) {
        if (bytes > limits.max_output_bytes) throw TemplateError("string or list over " + std::to_string(limits.max_output_bytes >> 20) + " MiB", line);
        allocated_bytes += bytes;
        if (allocated_bytes > limits.max_allocated_bytes)
            throw TemplateError("render allocated over " + std::to_string(limits.max_allocated_bytes >> 20) + " MiB", line);
    }
};

[[noreturn]] inline void fail(const std::string& what, int line) { throw TemplateError(what, line); }

/// Using an undefined value where Jinja2 raises: the message says what was undefined.
[[noreturn]] inline void fail_undefined(const Value& v, int line) { fail(v.text ? *v.text : "undefined value", line); }

inline void require_defined(const Value& v, int line) { if (v.is_undefined()) fail_undefined(v, line); }

// ---- numbers ---------------------------------------------------------------------------------

inline bool is_integral(const Value& v) { return v.kind == Value::Kind::integer || v.kind == Value::Kind::boolean; }
inline std::int64_t as_int(const Value& v) { return v.kind == Value::Kind::boolean ? v.boolean : v.integer; }
inline double as_double(const Value& v) { return v.kind == Value::Kind::floating ? v.floating : static_cast<double>(as_int(v)); }

[[noreturn]] inline void fail_operands(const std::string& op, const Value& a, const Value& b, int line) {
    fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'", line);
}

[[noreturn]] inline void fail_overflow(int line) { fail("integer overflow (Python would make a big integer)", line); }

/// Python's a // b and a % b on integers: the quotient rounds toward minus infinity.
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) { std::int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) --q; return q; }
inline std::int64_t floor_mod(std::int64_t a, std::int64_t b) { std::int64_t r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }

inline Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    if (is_integral(a) && is_integral(b)) {
        const std::int64_t x = as_int(a), y = as_int(b);
        std::int64_t r = 0;
        if (op == "+") { if (__builtin_add_overflow(x, y, &r)) fail_overflow(line); return make_int(r); }
        if (op == "-") { if (__builtin_sub_overflow(x, y, &r)) fail_overflow(line); return make_int(r); }
        if (op == "*") { if (__builtin_mul_overflow(x, y, &r)) fail_overflow(line); return make_int(r); }
        if (y == 0 && (op == "/" || op == "//" || op == "%")) fail("division by zero", line);
        if (op == "/") return make_float(static_cast<double>(x) / static_cast<double>(y));
        if (x == INT64_MIN && y == -1) fail_overflow(line);
        if (op == "//") return make_int(floor_div(x, y));
        if (op == "%") return make_int(floor_mod(x, y));
        if (op == "**") {
            if (y < 0) {
                if (x == 0) fail("0 cannot be raised to a negative power", line);
                return make_float(std::pow(static_cast<double>(x), static_cast<double>(y)));
            }
            std::int64_t result = 1;
            for (std::int64_t i = 0; i < y && result != 0; ++i) {
                if (__builtin_mul_overflow(result, x, &result)) fail_overflow(line);
                if (x == 1 || x == -1) { result = (x == -1 && (y % 2)) ? -1 : 1; break; }
            }
            return make_int(result);
        }
    }
    const double x = as_double(a), y = as_double(b);
    if (op == "+") return make_float(x + y);
    if (op == "-") return make_float(x - y);
    if (op == "*") return make_float(x * y);
    if (y == 0 && (op == "/" || op == "//" || op == "%")) fail("float division by zero", line);
    if (op == "/") return make_float(x / y);
    if (op == "//") return make_float(std::floor(x / y));
    if (op == "%") { double r = std::fmod(x, y); if (r != 0 && ((r < 0) != (y < 0))) r += y; return make_float(r); }
    if (op == "**") {
        if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power", line);
        return make_float(std::pow(x, y));
    }
    fail("unknown operator " + op, line);
}

// ---- + - * / // % ** ~ ------------------------------------------------------------------------

inline bool is_sequence(const Value& v) { return v.is_list() && (v.seq == Value::Seq::list || v.seq == Value::Seq::tuple); }

/// Repeats a string or a list n times (Python's "ab" * 3, [1] * 3).
inline Value repeat(RenderState& state, const Value& what, std::int64_t n, int line) {
    if (n <= 0) return what.is_string() ? make_string("") : make_list({}, what.seq);
    const std::size_t unit = what.is_string() ? what.text->size() : what.items->size() * sizeof(Value);
    if (unit != 0 && static_cast<std::size_t>(n) > state.limits.max_output_bytes / unit + 1) state.charge(state.limits.max_output_bytes + 1, line);
    state.charge(unit * static_cast<std::size_t>(n), line);
    if (what.is_string()) {
        std::string out;
        for (std::int64_t i = 0; i < n; ++i) out += *what.text;
        return make_string(std::move(out));
    }
    List out;
    for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), what.items->begin(), what.items->end());
    return make_list(std::move(out), what.seq);
}

inline Value binary_operator(RenderState& state, const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") {
        std::string out = python_str(a) + python_str(b);
        state.charge(out.size(), line);
        return make_string(std::move(out));
    }
    require_defined(a, line);
    require_defined(b, line);
    if (a.is_number() && b.is_number()) return arithmetic(op, a, b, line);
    if (op == "+" && a.is_string() && b.is_string()) {
        // markupsafe: Markup + str escapes the str (either side), and the result is Markup.
        const bool markup = a.markup || b.markup;
        std::string out = (markup && !a.markup ? escape_html(*a.text) : *a.text) + (markup && !b.markup ? escape_html(*b.text) : *b.text);
        state.charge(out.size(), line);
        return make_string(std::move(out), markup);
    }
    if (op == "+" && is_sequence(a) && is_sequence(b) && a.seq == b.seq) {
        state.charge((a.items->size() + b.items->size()) * sizeof(Value), line);
        List out(*a.items);
        out.insert(out.end(), b.items->begin(), b.items->end());
        return make_list(std::move(out), a.seq);
    }
    if (op == "*" && (a.is_string() || is_sequence(a)) && is_integral(b) && !a.markup) return repeat(state, a, as_int(b), line);
    if (op == "*" && (b.is_string() || is_sequence(b)) && is_integral(a) && !b.markup) return repeat(state, b, as_int(a), line);
    if (op == "%" && a.is_string()) fail("unsupported: printf-style string formatting with %", line);
    fail_operands(op, a, b, line);
}

inline Value unary_operator(const std::string& op, const Value& a, int line) {
    require_defined(a, line);
    if (!a.is_number()) fail("bad operand type for unary " + op + ": '" + type_name(a) + "'", line);
    if (op == "+") return a.kind == Value::Kind::boolean ? make_int(a.boolean) : a;
    if (a.kind == Value::Kind::floating) return make_float(-a.floating);
    if (as_int(a) == INT64_MIN) fail_overflow(line);
    return make_int(-as_int(a));
}

// ---- comparisons --------------------------------------------------------------------------------

/// a < b, where Python allows it: numbers, strings (code point order), lists/tuples of such.
inline bool less(const Value& a, const Value& b, int line, int depth = 0) {
    require_defined(a, line);
    require_defined(b, line);
    check_value_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (is_integral(a) && is_integral(b)) return as_int(a) < as_int(b);
        return as_double(a) < as_double(b);
    }
    if (a.is_string() && b.is_string()) return *a.text < *b.text;  // UTF-8 byte order is code point order
    if (is_sequence(a) && is_sequence(b) && a.seq == b.seq) {
        const List& x = *a.items;
        const List& y = *b.items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equal(x[i], y[i])) continue;
            return less(x[i], y[i], line, depth + 1);
        }
        return x.size() < y.size();
    }
    fail("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'", line);
}

/// item in container.
inline bool contains(const Value& container, const Value& item, int line) {
    switch (container.kind) {
        case Value::Kind::undefined: return false;  // iterates as empty
        case Value::Kind::string:
            if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + type_name(item), line);
            return container.text->find(*item.text) != std::string::npos;
        case Value::Kind::list:
            if (container.seq == Value::Seq::dict_items || container.seq == Value::Seq::dict_keys || container.seq == Value::Seq::dict_values ||
                container.seq == Value::Seq::generator)
                fail("unsupported: 'in' on a " + type_name(container), line);
            for (const Value& x : *container.items) if (equal(x, item)) return true;
            return false;
        case Value::Kind::dict:
            if (item.is_list() || item.is_dict()) fail("unhashable type: '" + type_name(item) + "'", line);
            return container.dict->find(item) != nullptr;
        default: fail("argument of type '" + type_name(container) + "' is not iterable", line);
    }
}

inline bool compare(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "<") return less(a, b, line);
    if (op == ">") return less(b, a, line);
    if (op == "<=") return less(a, b, line) || equal(a, b);
    if (op == ">=") return less(b, a, line) || equal(a, b);
    if (op == "in") return contains(b, a, line);
    if (op == "not in") return !contains(b, a, line);
    fail("unknown comparison " + op, line);
}

// ---- iteration, indexing, slicing --------------------------------------------------------------

/// for x in v: a list's items, a dict's keys, a string's characters; undefined gives nothing.
inline List iterate(const Value& v, int line) {
    switch (v.kind) {
        case Value::Kind::undefined: return {};
        case Value::Kind::list: return *v.items;
        case Value::Kind::dict: {
            List keys;
            for (const auto& entry : v.dict->entries) keys.push_back(entry.first);
            return keys;
        }
        case Value::Kind::string: {
            List chars;
            const std::vector<size_t> at = code_point_offsets(*v.text);
            for (size_t i = 0; i + 1 < at.size(); ++i) chars.push_back(make_string(v.text->substr(at[i], at[i + 1] - at[i])));
            return chars;
        }
        default: fail("'" + type_name(v) + "' object is not iterable", line);
    }
}

/// Python's slice.indices: the positions a[start:stop:step] visits, for a length n.
inline std::vector<std::int64_t> slice_positions(std::int64_t n, const Value& start, const Value& stop, const Value& step, int line) {
    const auto integer_or_none = [&](const Value& v) -> std::optional<std::int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (!is_integral(v)) fail("slice indices must be integers or None", line);
        return as_int(v);
    };
    const std::int64_t by = integer_or_none(step).value_or(1);
    if (by == 0) fail("slice step cannot be zero", line);
    const auto clamp = [&](std::optional<std::int64_t> i, std::int64_t fallback) {
        if (!i) return fallback;
        std::int64_t k = *i < 0 ? *i + n : *i;
        if (k < 0) k = by < 0 ? -1 : 0;
        if (k >= n) k = by < 0 ? n - 1 : n;
        return k;
    };
    const std::int64_t from = clamp(integer_or_none(start), by < 0 ? n - 1 : 0);
    const std::int64_t to = clamp(integer_or_none(stop), by < 0 ? -1 : n);
    std::vector<std::int64_t> positions;
    for (std::int64_t i = from; by > 0 ? i < to : i > to; i += by) positions.push_back(i);
    return positions;
}

inline Value slice(RenderState& state, const Value& v, const Value& start, const Value& stop, const Value& step, int line) {
    require_defined(v, line);
    if (v.is_string()) {
        const std::vector<size_t> at = code_point_offsets(*v.text);
        std::string out;
        for (std::int64_t i : slice_positions(static_cast<std::int64_t>(at.size() - 1), start, stop, step, line))
            out += v.text->substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]);
        state.charge(out.size(), line);
        return make_string(std::move(out));
    }
    if (is_sequence(v)) {
        List out;
        for (std::int64_t i : slice_positions(static_cast<std::int64_t>(v.items->size()), start, stop, step, line))
            out.push_back((*v.items)[static_cast<size_t>(i)]);
        state.charge(out.size() * sizeof(Value), line);
        return make_list(std::move(out), v.seq);
    }
    fail("'" + type_name(v) + "' object is not subscriptable", line);
}

/// The message of Jinja2's undefined for a missing attribute or key.
inline Value missing_member(const Value& object, const Value& key) {
    if (key.is_string()) return make_undefined("'" + type_name(object) + " object' has no attribute '" + *key.text + "'");
    return make_undefined("'" + type_name(object) + " object' has no element " + python_repr(key));
}

/// The method `name` of a str, dict or list ("abc".upper), bound to it; an undefined that raises
/// SecurityError when used for a method that would mutate (list.append); nullopt when Python's
/// type has no such attribute. Defined in jinja_methods.hpp.
std::optional<Value> get_method(const Value& receiver, const std::string& name, int line);

/// obj.name — the sandbox's getattr: an attribute (a method of str/dict/list, a namespace's
/// member), else obj["name"], else undefined. On undefined it raises.
inline Value get_attribute(const Value& object, const std::string& name, int line) {
    require_defined(object, line);
    if (object.kind == Value::Kind::namespace_) {
        if (Value* member = object.ns->find(name)) return *member;
        return missing_member(object, make_string(name));
    }
    if (std::optional<Value> method = get_method(object, name, line)) return *method;
    if (object.is_dict()) {
        if (const Value* found = find_key(*object.dict, name)) return *found;
    }
    return missing_member(object, make_string(name));
}

/// obj[key] — the sandbox's getitem: a key or index, else the attribute named key, else undefined.
inline Value get_item(const Value& object, const Value& key, int line) {
    require_defined(object, line);
    if (object.is_dict()) {
        if (key.is_list() || key.is_dict()) fail("unhashable type: '" + type_name(key) + "'", line);
        if (const Value* found = object.dict->find(key)) return *found;
    } else if ((object.is_list() || object.is_string()) && is_integral(key)) {
        if (object.is_list() && !is_sequence(object)) fail("'" + type_name(object) + "' object is not subscriptable", line);
        const std::int64_t n = object.is_list() ? static_cast<std::int64_t>(object.items->size()) : static_cast<std::int64_t>(code_point_count(*object.text));
        std::int64_t i = as_int(key);
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            if (object.is_list()) return (*object.items)[static_cast<size_t>(i)];
            const std::vector<size_t> at = code_point_offsets(*object.text);
            return make_string(object.text->substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
        }
        return missing_member(object, key);
    }
    if (key.is_string()) {
        if (object.kind == Value::Kind::namespace_) return get_attribute(object, *key.text, line);
        if (std::optional<Value> method = get_method(object, *key.text, line)) return *method;
    }
    return missing_member(object, key);
}

}  // namespace glass::chat::jinja
