/// \file
/// \brief glass/chat/jinja_eval.hpp — chat template step 4: the tree + variables -> text.
/// ```text
/// In:  the parsed template (Body), the variables (messages, tools, ...), the render's limits.
/// Out: the rendered text.
///
/// Walks the statements in order, appending text to the output. Names live in scopes, as in
/// Jinja2:
///   globals (range, namespace, raise_exception, ...) < the caller's variables < the template's
///   own {% set %}s < one scope per for-loop iteration < one scope per macro call.
/// A {% set %} writes the innermost scope, so a set inside a for loop is gone after the
/// iteration (templates use namespace() to carry values out); `if` makes no scope.
/// break / continue travel back up as a Flow value. Every iteration, call and nested
/// evaluation is counted against RenderLimits.
/// ```
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "glass/chat/jinja_builtins.hpp"
#include "glass/chat/jinja_parser.hpp"

namespace glass::chat::jinja {

struct Scope {
    std::map<std::string, Value> variables;
    std::shared_ptr<Scope> parent;

    const Value* find(const std::string& name) const {
        for (const Scope* s = this; s; s = s->parent.get()) {
            auto it = s->variables.find(name);
            if (it != s->variables.end()) return &it->second;
        }
        return nullptr;
    }
};

enum class Flow { normal, break_loop, continue_loop };

Value eval(RenderState& state, const Expr& e, const std::shared_ptr<Scope>& scope);
Flow exec_body(RenderState& state, const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);

/// Counts one level of nesting (expression, statement or call) for as long as it lives.
struct DepthCount {
    int& depth;
    DepthCount(int& counter, int limit, const char* what, int line) : depth(counter) {
        if (++depth > limit) { --depth; fail(std::string(what) + " nested deeper than " + std::to_string(limit) + " levels", line); }
    }
    ~DepthCount() { --depth; }
};

// ---- does a body mention a name? (a macro takes varargs / kwargs / caller only if it does) ------

inline bool mentions(const Expr* e, const std::string& name) {
    if (!e) return false;
    if (e->kind == Expr::Kind::name && e->name == name) return true;
    for (const ExprPtr& child : e->children) if (mentions(child.get(), name)) return true;
    for (const auto& kw : e->keyword_args) if (mentions(kw.second.get(), name)) return true;
    return false;
}

inline bool mentions(const Body& body, const std::string& name) {
    for (const Stmt& s : body) {
        if (mentions(s.expr.get(), name) || mentions(s.loop_filter.get(), name)) return true;
        for (const auto& [condition, branch] : s.branches) if (mentions(condition.get(), name) || mentions(branch, name)) return true;
        for (const MacroParam& p : s.params) if (mentions(p.default_value.get(), name)) return true;
        if (mentions(s.body, name) || mentions(s.else_body, name)) return true;
    }
    return false;
}

// ---- macros --------------------------------------------------------------------------------

/// Calls a macro: binds arguments to parameters (defaults evaluated in the macro's scope, missing
/// ones undefined), renders the body in a fresh scope, returns the text.
inline Value call_macro(RenderState& state, const Stmt& macro, const std::string& name, const std::shared_ptr<Scope>& defined_in,
                        const CallArgs& args) {
    DepthCount depth(state.call_depth, state.limits.max_call_depth, "macro calls", args.line);
    auto scope = std::make_shared<Scope>();
    scope->parent = defined_in;
    // 1. Positional arguments fill the parameters in order; the rest go to varargs.
    List extra_positional;
    for (size_t i = 0; i < args.positional.size(); ++i) {
        if (i < macro.params.size()) scope->variables[macro.params[i].name] = args.positional[i];
        else extra_positional.push_back(args.positional[i]);
    }
    // 2. Keyword arguments by name; `caller` and unknown names go to kwargs.
    Dict extra_keyword;
    for (const auto& [key, value] : args.keyword) {
        const bool is_param = std::any_of(macro.params.begin(), macro.params.end(), [&](const MacroParam& p) { return p.name == key; });
        if (is_param && scope->variables.count(key)) fail("macro '" + name + "' got multiple values for argument '" + key + "'", args.line);
        if (is_param || key == "caller") scope->variables[key] = value;
        else extra_keyword.entries.emplace_back(make_string(key), value);
    }
    if (scope->variables.count("caller") && !mentions(macro.body, "caller"))
        fail("macro '" + name + "' was invoked with a caller but does not use it", args.line);
    if (!extra_positional.empty() && !mentions(macro.body, "varargs"))
        fail("macro '" + name + "' takes not more than " + std::to_string(macro.params.size()) + " argument(s)", args.line);
    if (!extra_keyword.entries.empty() && !mentions(macro.body, "kwargs"))
        fail("macro '" + name + "' takes no keyword argument '" + python_str(extra_keyword.entries[0].first) + "'", args.line);
    // 3. Defaults for what was not given (they may use earlier parameters).
    for (const MacroParam& p : macro.params) {
        if (scope->variables.count(p.name)) continue;
        scope->variables[p.name] = p.default_value ? eval(state, *p.default_value, scope) : make_undefined("parameter '" + p.name + "' was not provided");
    }
    scope->variables["varargs"] = make_list(std::move(extra_positional), Value::Seq::tuple);
    scope->variables["kwargs"] = make_dict(std::move(extra_keyword));
    // 4. The body, into its own text.
    std::string text;
    exec_body(state, macro.body, scope, text);
    return make_string(std::move(text));
}

inline Value make_macro(RenderState&, const Stmt& macro, const std::string& name, const std::shared_ptr<Scope>& scope) {
    const Stmt* definition = &macro;
    std::weak_ptr<Scope> defined_in = scope;  // weak: the macro lives in that scope (no cycle)
    return make_callable(name, [definition, name, defined_in](RenderState& state, const CallArgs& args) {
        std::shared_ptr<Scope> s = defined_in.lock();
        if (!s) fail("macro '" + name + "' called after its scope ended", args.line);
        return call_macro(state, *definition, name, s, args);
    });
}

// ---- expressions -----------------------------------------------------------------------------

inline CallArgs eval_args(RenderState& state, const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
    CallArgs args;
    args.line = e.line;
    for (size_t i = first; i < e.children.size(); ++i) args.positional.push_back(eval(state, *e.children[i], scope));
    for (const auto& [key, value] : e.keyword_args) args.keyword.emplace_back(key, eval(state, *value, scope));
    return args;
}

inline Value call_value(RenderState& state, const Value& callee, const CallArgs& args) {
    if (callee.kind == Value::Kind::callable) return callee.callable->call(state, args);
    require_defined(callee, args.line);
    fail("'" + type_name(callee) + "' object is not callable", args.line);
}

inline Value eval_compare(RenderState& state, const Expr& e, const std::shared_ptr<Scope>& scope) {
    Value left = eval(state, *e.children[0], scope);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(state, *e.children[i + 1], scope);
        if (!compare(e.ops[i], left, right, e.line)) return make_bool(false);
        left = std::move(right);
    }
    return make_bool(true);
}

inline Value eval_collection(RenderState& state, const Expr& e, const std::shared_ptr<Scope>& scope) {
    if (e.kind == Expr::Kind::dict) {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
            Value key = eval(state, *e.children[i], scope);
            if (key.is_list() || key.is_dict() || key.is_undefined()) fail("unhashable type: '" + type_name(key) + "'", e.line);
            Value value = eval(state, *e.children[i + 1], scope);
            bool replaced = false;
            for (auto& entry : d.entries) if (equal(entry.first, key)) { entry.second = value; replaced = true; }
            if (!replaced) d.entries.emplace_back(std::move(key), std::move(value));
        }
        return make_dict(std::move(d));
    }
    List items;
    for (const ExprPtr& child : e.children) items.push_back(eval(state, *child, scope));
    state.charge(items.size() * sizeof(Value), e.line);
    return make_list(std::move(items), e.kind == Expr::Kind::tuple ? Value::Seq::tuple : Value::Seq::list);
}

inline Value eval(RenderState& state, const Expr& e, const std::shared_ptr<Scope>& scope) {
    DepthCount depth(state.eval_depth, state.limits.max_eval_depth, "evaluation", e.line);
    const auto child = [&](size_t i) { return eval(state, *e.children[i], scope); };
    switch (e.kind) {
        case Expr::Kind::literal: return e.literal;
        case Expr::Kind::name: {
            const Value* v = scope->find(e.name);
            return v ? *v : make_undefined("'" + e.name + "' is undefined");
        }
        case Expr::Kind::list: case Expr::Kind::tuple: case Expr::Kind::dict: return eval_collection(state, e, scope);
        case Expr::Kind::attribute: return get_attribute(child(0), e.name, e.line);
        case Expr::Kind::subscript: {
            Value object = child(0);
            const Expr& index = *e.children[1];
            if (index.kind != Expr::Kind::slice) return get_item(object, eval(state, index, scope), e.line);
            const auto part = [&](size_t i) { return index.children[i] ? eval(state, *index.children[i], scope) : make_none(); };
            return slice(state, object, part(0), part(1), part(2), e.line);
        }
        case Expr::Kind::slice: fail("a slice outside [ ]", e.line);
        case Expr::Kind::call: return call_value(state, child(0), eval_args(state, e, 1, scope));
        case Expr::Kind::filter: return apply_filter(state, e.name, child(0), eval_args(state, e, 1, scope));
        case Expr::Kind::test: return make_bool(apply_test(state, e.name, child(0), eval_args(state, e, 1, scope)));
        case Expr::Kind::unary: return unary_operator(e.name, child(0), e.line);
        case Expr::Kind::not_: return make_bool(!truthy(child(0)));
        case Expr::Kind::binary: {
            if (e.name == "and") { Value left = child(0); return truthy(left) ? child(1) : left; }
            if (e.name == "or") { Value left = child(0); return truthy(left) ? left : child(1); }
            return binary_operator(state, e.name, child(0), child(1), e.line);
        }
        case Expr::Kind::compare: return eval_compare(state, e, scope);
        case Expr::Kind::conditional: {
            if (truthy(child(1))) return child(0);
            if (e.children[2]) return child(2);
            return make_undefined("the inline if-expression on line " + std::to_string(e.line) + " evaluated to false and no else section was defined.");
        }
    }
    fail("unknown expression", e.line);
}

// ---- statements ------------------------------------------------------------------------------

inline void append_output(RenderState& state, std::string& out, const std::string& text, int line) {
    if (out.size() + text.size() > state.limits.max_output_bytes)
        fail("output over " + std::to_string(state.limits.max_output_bytes >> 20) + " MiB", line);
    state.charge(text.size(), line);
    out += text;
}

/// Assigns `value` to the names of a for loop or set: one name, or unpacks into several.
inline void assign_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope, int line) {
    if (targets.size() == 1) { scope.variables[targets[0]] = value; return; }
    const List items = iterate(value, line);
    if (items.size() != targets.size())
        fail(std::string(items.size() > targets.size() ? "too many" : "not enough") + " values to unpack (expected " + std::to_string(targets.size()) + ", got " +
             std::to_string(items.size()) + ")", line);
    for (size_t i = 0; i < targets.size(); ++i) scope.variables[targets[i]] = items[i];
}

/// The `loop` object of one iteration.
inline Value make_loop_object(const List& items, size_t i, const Value& cycle) {
    auto loop = std::make_shared<Namespace>();
    loop->is_loop = true;
    const auto n = static_cast<std::int64_t>(items.size());
    const auto k = static_cast<std::int64_t>(i);
    loop->set("index", make_int(k + 1));
    loop->set("index0", make_int(k));
    loop->set("revindex", make_int(n - k));
    loop->set("revindex0", make_int(n - k - 1));
    loop->set("first", make_bool(k == 0));
    loop->set("last", make_bool(k == n - 1));
    loop->set("length", make_int(n));
    loop->set("depth", make_int(1));
    loop->set("depth0", make_int(0));
    loop->set("previtem", i > 0 ? items[i - 1] : make_undefined("there is no previous item"));
    loop->set("nextitem", i + 1 < items.size() ? items[i + 1] : make_undefined("there is no next item"));
    loop->set("cycle", cycle);
    return make_namespace(loop);
}

inline void count_iteration(RenderState& state, int line) {
    if (++state.loop_iterations > state.limits.max_loop_iterations)
        fail("loops ran over " + std::to_string(state.limits.max_loop_iterations) + " iterations", line);
}

inline void exec_for(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
    // 1. The items, after the loop's own `if` filter.
    List items;
    for (Value& item : iterate(eval(state, *s.expr, scope), s.line)) {
        count_iteration(state, s.line);
        if (s.loop_filter) {
            auto test_scope = std::make_shared<Scope>();
            test_scope->parent = scope;
            assign_targets(s.targets, item, *test_scope, s.line);
            if (!truthy(eval(state, *s.loop_filter, test_scope))) continue;
        }
        items.push_back(std::move(item));
    }
    if (items.empty()) { exec_body(state, s.else_body, scope, out); return; }
    // 2. Each iteration in a fresh scope holding the targets and `loop`.
    for (size_t i = 0; i < items.size(); ++i) {
        count_iteration(state, s.line);
        auto iteration = std::make_shared<Scope>();
        iteration->parent = scope;
        assign_targets(s.targets, items[i], *iteration, s.line);
        const Value cycle = make_callable("loop.cycle", [i](RenderState&, const CallArgs& args) {
            if (args.positional.empty()) fail("no items for cycling given", args.line);
            return args.positional[i % args.positional.size()];
        });
        iteration->variables["loop"] = make_loop_object(items, i, cycle);
        const Flow flow = exec_body(state, s.body, iteration, out);
        if (flow == Flow::break_loop) break;
    }
}

inline void exec_set(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope, const Value& value) {
    if (s.target_attribute.empty()) { assign_targets(s.targets, value, *scope, s.line); return; }
    const Value* target = scope->find(s.targets[0]);
    if (!target || target->kind != Value::Kind::namespace_ || target->ns->is_loop)
        fail("cannot assign attribute on non-namespace object", s.line);
    (void)state;
    target->ns->set(s.target_attribute, value);
}

/// `{% call(params) macro(args) %}body{% endcall %}`: macro(args, caller = the body as a macro).
inline Value exec_call_block(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope) {
    const Value caller = make_macro(state, s, "caller", scope);
    CallArgs args = eval_args(state, *s.expr, 1, scope);
    args.keyword.emplace_back("caller", caller);
    return call_value(state, eval(state, *s.expr->children[0], scope), args);
}

/// A filter chain parsed with a null input at its innermost end, applied to `text`.
inline Value apply_filter_chain(RenderState& state, const Expr& chain, Value text, const std::shared_ptr<Scope>& scope) {
    if (chain.children[0]) text = apply_filter_chain(state, *chain.children[0], std::move(text), scope);
    return apply_filter(state, chain.name, text, eval_args(state, chain, 1, scope));
}

Flow exec_statement_at_line(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);

/// One statement; an error raised without a line (deep inside a value: printing, tojson) gets the statement's.
inline Flow exec_statement(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
    try {
        return exec_statement_at_line(state, s, scope, out);
    } catch (const TemplateError& e) {
        if (e.line() != 0) throw;
        throw TemplateError(e.message(), s.line);
    }
}

inline Flow exec_statement_at_line(RenderState& state, const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out) {
    DepthCount depth(state.eval_depth, state.limits.max_eval_depth, "evaluation", s.line);
    switch (s.kind) {
        case Stmt::Kind::text: append_output(state, out, s.text, s.line); break;
        case Stmt::Kind::output: append_output(state, out, python_str(eval(state, *s.expr, scope)), s.line); break;
        case Stmt::Kind::if_:
            for (const auto& [condition, body] : s.branches)
                if (!condition || truthy(eval(state, *condition, scope))) return exec_body(state, body, scope, out);
            break;
        case Stmt::Kind::for_: exec_for(state, s, scope, out); break;
        case Stmt::Kind::set: exec_set(state, s, scope, eval(state, *s.expr, scope)); break;
        case Stmt::Kind::set_block: {
            std::string text;
            exec_body(state, s.body, scope, text);
            exec_set(state, s, scope, s.expr ? apply_filter_chain(state, *s.expr, make_string(std::move(text)), scope) : make_string(std::move(text)));
            break;
        }
        case Stmt::Kind::macro: scope->variables[s.targets[0]] = make_macro(state, s, s.targets[0], scope); break;
        case Stmt::Kind::call_block: append_output(state, out, python_str(exec_call_block(state, s, scope)), s.line); break;
        case Stmt::Kind::filter_block: {
            std::string text;
            exec_body(state, s.body, scope, text);
            append_output(state, out, python_str(apply_filter_chain(state, *s.expr, make_string(std::move(text)), scope)), s.line);
            break;
        }
        case Stmt::Kind::break_: return Flow::break_loop;
        case Stmt::Kind::continue_: return Flow::continue_loop;
    }
    return Flow::normal;
}

inline Flow exec_body(RenderState& state, const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
    for (const Stmt& s : body) {
        const Flow flow = exec_statement(state, s, scope, out);
        if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
}

}  // namespace glass::chat::jinja
