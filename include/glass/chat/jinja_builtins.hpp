/// \file
/// \brief glass/chat/jinja_builtins.hpp — chat template step 3d: tests (x is name) and global functions.
/// ```text
/// In:  a value and call arguments:  x is name(args)    name(args)
/// Out: what Jinja2's builtin test of that name answers (defined, none, string, mapping,
///      iterable, equalto, odd, divisibleby, in, ...), and the globals a chat template can call:
///      range (at most 100000 items, as the sandbox allows), dict, namespace, and Hugging Face's
///      raise_exception (-> TemplateRaised) and strftime_now (UTC, on the render's clock).
/// Python's number test counts True as a number (bool is an int); iterable and sequence are true
/// for undefined (Jinja2's Undefined can be iterated and has a length). A test or global glass
/// does not implement is a TemplateError naming it.
/// ```
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "glass/chat/jinja_filters.hpp"

namespace glass::chat::jinja {

// ---- tests (x is name) -----------------------------------------------------------------------

inline bool apply_test(RenderState& state, const std::string& name, const Value& v, const CallArgs& args) {
    const int line = args.line;
    const auto one_argument = [&]() -> const Value& {
        if (args.positional.size() != 1 || !args.keyword.empty()) fail("test '" + name + "' takes one argument", line);
        return args.positional[0];
    };
    const auto no_argument = [&]() { if (!args.positional.empty() || !args.keyword.empty()) fail("test '" + name + "' takes no argument", line); };
    using K = Value::Kind;
    if (name == "defined") { no_argument(); return !v.is_undefined(); }
    if (name == "undefined") { no_argument(); return v.is_undefined(); }
    if (name == "none") { no_argument(); return v.is_none(); }
    if (name == "string") { no_argument(); return v.is_string(); }
    if (name == "number") { no_argument(); return v.is_number(); }
    if (name == "integer") { no_argument(); return v.kind == K::integer; }
    if (name == "float") { no_argument(); return v.kind == K::floating; }
    if (name == "boolean") { no_argument(); return v.kind == K::boolean; }
    if (name == "true") { no_argument(); return v.kind == K::boolean && v.boolean; }
    if (name == "false") { no_argument(); return v.kind == K::boolean && !v.boolean; }
    if (name == "mapping") { no_argument(); return v.is_dict(); }
    if (name == "iterable") { no_argument(); return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }
    if (name == "sequence") { no_argument(); return v.is_undefined() || v.is_string() || is_sequence(v) || v.is_dict(); }
    if (name == "callable") { no_argument(); return v.kind == K::callable; }
    if (name == "escaped") { no_argument(); return v.is_string() && v.markup; }
    if (name == "odd" || name == "even") {
        no_argument();
        const Value r = binary_operator(state, "%", v, make_int(2), line);
        return name == "odd" ? equal(r, make_int(1)) : equal(r, make_int(0));
    }
    if (name == "divisibleby") return equal(binary_operator(state, "%", v, one_argument(), line), make_int(0));
    if (name == "lower") { no_argument(); return python_is(python_str(v), CharClass::lower); }
    if (name == "upper") { no_argument(); return python_is(python_str(v), CharClass::upper); }
    if (name == "eq" || name == "equalto" || name == "==") return compare("==", v, one_argument(), line);
    if (name == "ne" || name == "!=") return compare("!=", v, one_argument(), line);
    if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, one_argument(), line);
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, one_argument(), line);
    if (name == "le" || name == "<=") return compare("<=", v, one_argument(), line);
    if (name == "ge" || name == ">=") return compare(">=", v, one_argument(), line);
    if (name == "in") return contains(one_argument(), v, line);
    if (name == "sameas") {
        const Value& other = one_argument();
        if ((v.is_none() || v.kind == K::boolean || v.is_undefined()) || (other.is_none() || other.kind == K::boolean))
            return v.kind == other.kind && equal(v, other);
        fail("unsupported: 'sameas' test on " + type_name(v), line);
    }
    fail("unsupported test '" + name + "'", line);
}

// ---- globals -----------------------------------------------------------------------------------

/// strftime on the render's clock (UTC): HF's strftime_now. %Z is "UTC" and %z "+0000".
inline std::string strftime_utc(const std::string& format, std::int64_t unix_seconds) {
    std::string f;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] == '%' && i + 1 < format.size()) {
            const char c = format[++i];
            if (c == 'Z') f += "UTC";
            else if (c == 'z') f += "+0000";
            else { f += '%'; f += c; }
        } else {
            f += format[i];
        }
    }
    const std::time_t t = static_cast<std::time_t>(unix_seconds);
    std::tm parts{};
    gmtime_r(&t, &parts);
    std::vector<char> buffer(f.size() * 64 + 64);
    const size_t n = f.empty() ? 0 : std::strftime(buffer.data(), buffer.size(), f.c_str(), &parts);
    return std::string(buffer.data(), n);
}

/// dict(**kwargs) / namespace(**kwargs), optionally from one dict given positionally.
inline std::vector<std::pair<Value, Value>> entries_from_args(const CallArgs& args, const char* what) {
    std::vector<std::pair<Value, Value>> entries;
    if (args.positional.size() > 1) fail(std::string(what) + " takes at most one positional argument", args.line);
    if (args.positional.size() == 1) {
        if (!args.positional[0].is_dict()) fail(std::string("unsupported: ") + what + "() from a " + type_name(args.positional[0]), args.line);
        entries = args.positional[0].dict->entries;
    }
    for (const auto& [key, value] : args.keyword) {
        bool replaced = false;
        for (auto& entry : entries) if (entry.first.is_string() && *entry.first.text == key) { entry.second = value; replaced = true; }
        if (!replaced) entries.emplace_back(make_string(key), value);
    }
    return entries;
}

inline Value global_range(RenderState& state, const CallArgs& args) {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) fail("range expects 1 to 3 integer arguments", args.line);
    std::int64_t start = 0, stop = 0, step = 1;
    if (args.positional.size() == 1) stop = int_arg(args.positional[0], "range argument", args.line);
    else {
        start = int_arg(args.positional[0], "range argument", args.line);
        stop = int_arg(args.positional[1], "range argument", args.line);
        if (args.positional.size() == 3) step = int_arg(args.positional[2], "range argument", args.line);
    }
    if (step == 0) fail("range() arg 3 must not be zero", args.line);
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).", args.line);
        out.push_back(make_int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    state.charge(out.size() * sizeof(Value), args.line);
    return make_list(std::move(out));
}

inline std::vector<std::pair<std::string, Value>> global_functions() {
    std::vector<std::pair<std::string, Value>> globals;
    globals.emplace_back("range", make_callable("range", global_range));
    globals.emplace_back("dict", make_callable("dict", [](RenderState&, const CallArgs& args) {
        Dict d;
        d.entries = entries_from_args(args, "dict");
        return make_dict(std::move(d));
    }));
    globals.emplace_back("namespace", make_callable("namespace", [](RenderState&, const CallArgs& args) {
        auto ns = std::make_shared<Namespace>();
        for (auto& [key, value] : entries_from_args(args, "namespace")) ns->set(python_str(key), value);
        return make_namespace(ns);
    }));
    globals.emplace_back("raise_exception", make_callable("raise_exception", [](RenderState&, const CallArgs& args) -> Value {
        if (args.positional.size() != 1 || !args.keyword.empty()) fail("raise_exception takes one argument", args.line);
        throw TemplateRaised(python_str(args.positional[0]));
    }));
    globals.emplace_back("strftime_now", make_callable("strftime_now", [](RenderState& state, const CallArgs& args) {
        if (args.positional.size() != 1 || !args.keyword.empty()) fail("strftime_now takes one argument", args.line);
        const std::int64_t now = state.now_unix_seconds ? *state.now_unix_seconds : static_cast<std::int64_t>(std::time(nullptr));
        return make_string(strftime_utc(string_arg(args.positional[0], "strftime_now's format", args.line), now));
    }));
    for (const char* unsupported : {"lipsum", "cycler", "joiner"}) {
        const std::string name = unsupported;
        globals.emplace_back(name, make_callable(name, [name](RenderState&, const CallArgs& args) -> Value {
            fail("unsupported global function '" + name + "'", args.line);
        }));
    }
    return globals;
}

}  // namespace glass::chat::jinja
