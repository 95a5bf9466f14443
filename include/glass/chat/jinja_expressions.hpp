/// \file
/// \brief glass/chat/jinja_expressions.hpp — chat template step 2, inside the tags: tokens ->
/// an expression tree.
/// ```text
/// In:  the lexer's tokens, at the start of an expression.
/// Out: an Expr: a plain struct holding its children, every node with its line.
///
/// Expressions, loosest binding first (Jinja2's grammar):
///   a if cond else b  >  or  >  and  >  not  >  == != < > <= >= in, not in (chained)
///   >  + -  >  ~  >  * / // %  >  **  >  unary - +  >  |filter, is test, (call), .attr, [index]
/// Note Jinja2's quirks kept here: ** is left-associative, and `-x|abs` is abs(-x).
/// Nesting deeper than kMaxParseDepth is refused, so no input can overflow the stack.
/// The statement parser (jinja_parser.hpp) is built on ExpressionParser: it shares the token
/// stream and calls parse_tuple, parse_expression and parse_filters for what its tags hold.
/// ```
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "glass/chat/jinja_lexer.hpp"
#include "glass/chat/jinja_value.hpp"

namespace glass::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        literal,      // literal
        name,         // name
        list, tuple,  // children: the items
        dict,         // children: key, value, key, value, ...
        attribute,    // children[0].name
        subscript,    // children[0][children[1]]
        slice,        // children: start, stop, step (each may be null)
        call,         // children[0](children[1...], keyword_args)
        filter,       // children[0] | name(children[1...], keyword_args); children[0] null in a filter block
        test,         // children[0] is name(children[1...], keyword_args)
        unary,        // name ("-" or "+") children[0]
        not_,         // not children[0]
        binary,       // children[0] name children[1]: + - * / // % ** ~ and or
        compare,      // children[0] ops[0] children[1] ops[1] children[2] ...
        conditional,  // children: value, condition, otherwise (may be null)
    };
    Kind kind = Kind::literal;
    int line = 0;
    Value literal;
    std::string name;
    std::vector<ExprPtr> children;
    std::vector<std::pair<std::string, ExprPtr>> keyword_args;
    std::vector<std::string> ops;
};

constexpr int kMaxParseDepth = 256;

/// The token stream and the expression grammar; jinja_parser.hpp's Parser adds the statements.
class ExpressionParser {
public:
    explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

protected:
    std::vector<Token> tokens_;
    size_t at_ = 0;
    int depth_ = 0;

    // ---- the token stream ----
    const Token& current() const { return tokens_[at_]; }
    const Token& peek(size_t ahead = 1) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
    Token next() { Token t = tokens_[at_]; if (at_ + 1 < tokens_.size()) ++at_; return t; }
    bool is(TokenKind kind, std::string_view value = {}) const {
        return current().kind == kind && (value.empty() || current().value == value);
    }
    bool is_op(std::string_view op) const { return is(TokenKind::op, op); }
    bool is_name(std::string_view name) const { return is(TokenKind::name, name); }
    bool skip_if(TokenKind kind, std::string_view value) { if (!is(kind, value)) return false; next(); return true; }
    [[noreturn]] void fail(const std::string& what) const { throw TemplateError(what, current().line); }
    Token expect(TokenKind kind, std::string_view value, const char* what) {
        if (!is(kind, value)) fail(std::string("expected ") + what + ", got '" + current().value + "'");
        return next();
    }
    std::string expect_name() { return expect(TokenKind::name, {}, "a name").value; }
    struct DepthGuard {
        ExpressionParser& p;
        explicit DepthGuard(ExpressionParser& parser) : p(parser) {
            if (++p.depth_ > kMaxParseDepth) p.fail("template nested deeper than " + std::to_string(kMaxParseDepth) + " levels");
        }
        ~DepthGuard() { --p.depth_; }
    };
    static ExprPtr node(Expr::Kind kind, int line) { auto e = std::make_unique<Expr>(); e->kind = kind; e->line = line; return e; }

    // ---- expressions ----

    bool is_tuple_end(const std::vector<std::string>& extra_end_names) const {
        if (current().kind == TokenKind::variable_end || current().kind == TokenKind::block_end || is_op(")")) return true;
        for (const std::string& n : extra_end_names) if (is_name(n)) return true;
        return false;
    }

    /// `a`, or `a, b, ...` (a tuple) — what {{ }} and {% set x = %} take.
    ExprPtr parse_tuple(bool with_conditional, const std::vector<std::string>& extra_end_names, bool explicit_parentheses = false) {
        const int line = current().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect(TokenKind::op, ",", "','");
            if (is_tuple_end(extra_end_names)) break;
            items.push_back(parse_expression(with_conditional));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple && items.size() == 1) return std::move(items[0]);
        if (items.empty() && !explicit_parentheses) fail("expected an expression, got '" + current().value + "'");
        ExprPtr t = node(Expr::Kind::tuple, line);
        t->children = std::move(items);
        return t;
    }

    ExprPtr parse_expression(bool with_conditional) {
        DepthGuard guard(*this);
        return with_conditional ? parse_conditional() : parse_or();
    }

    ExprPtr parse_conditional() {
        ExprPtr value = parse_or();
        while (is_name("if")) {
            const int line = next().line;
            ExprPtr condition = parse_or();
            ExprPtr otherwise = skip_if(TokenKind::name, "else") ? parse_conditional() : nullptr;
            ExprPtr c = node(Expr::Kind::conditional, line);
            c->children.push_back(std::move(value));
            c->children.push_back(std::move(condition));
            c->children.push_back(std::move(otherwise));
            value = std::move(c);
        }
        return value;
    }

    ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
        ExprPtr b = node(Expr::Kind::binary, line);
        b->name = std::move(op);
        b->children.push_back(std::move(left));
        b->children.push_back(std::move(right));
        return b;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (is_name("or")) { const int line = next().line; left = binary("or", std::move(left), parse_and(), line); }
        return left;
    }
    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (is_name("and")) { const int line = next().line; left = binary("and", std::move(left), parse_not(), line); }
        return left;
    }
    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            ExprPtr n = node(Expr::Kind::not_, next().line);
            n->children.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = current().line;
        ExprPtr first = parse_math1();
        ExprPtr c = node(Expr::Kind::compare, line);
        while (true) {
            std::string op;
            if (current().kind == TokenKind::op && (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) op = next().value;
            else if (is_name("in")) { next(); op = "in"; }
            else if (is_name("not") && peek().kind == TokenKind::name && peek().value == "in") { next(); next(); op = "not in"; }
            else break;
            c->ops.push_back(op);
            c->children.push_back(parse_math1());
        }
        if (c->ops.empty()) return first;
        c->children.insert(c->children.begin(), std::move(first));
        return c;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) { const Token op = next(); left = binary(op.value, std::move(left), parse_concat(), op.line); }
        return left;
    }
    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (is_op("~")) { const int line = next().line; left = binary("~", std::move(left), parse_math2(), line); }
        return left;
    }
    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) { const Token op = next(); left = binary(op.value, std::move(left), parse_pow(), op.line); }
        return left;
    }
    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (is_op("**")) { const int line = next().line; left = binary("**", std::move(left), parse_unary(true), line); }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            const Token op = next();
            e = node(Expr::Kind::unary, op.line);
            e->name = op.value;
            e->children.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_chain(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token t = current();
        if (t.kind == TokenKind::name) {
            next();
            ExprPtr e = node(Expr::Kind::literal, t.line);
            if (t.value == "true" || t.value == "True") e->literal = make_bool(true);
            else if (t.value == "false" || t.value == "False") e->literal = make_bool(false);
            else if (t.value == "none" || t.value == "None") e->literal = make_none();
            else { e->kind = Expr::Kind::name; e->name = t.value; }
            return e;
        }
        if (t.kind == TokenKind::string) {
            std::string text;
            while (is(TokenKind::string)) text += next().value;  // "a" "b" is "ab"
            ExprPtr e = node(Expr::Kind::literal, t.line);
            e->literal = make_string(std::move(text));
            return e;
        }
        if (t.kind == TokenKind::integer || t.kind == TokenKind::floating) {
            next();
            ExprPtr e = node(Expr::Kind::literal, t.line);
            if (t.kind == TokenKind::floating) e->literal = make_float(std::strtod(t.value.c_str(), nullptr));
            else {
                errno = 0;
                const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
                if (errno == ERANGE) fail("integer literal " + t.value + " is too large");
                e->literal = make_int(v);
            }
            return e;
        }
        if (is_op("(")) {
            next();
            ExprPtr e = parse_tuple(true, {}, true);
            expect(TokenKind::op, ")", "')'");
            return e;
        }
        if (is_op("[")) return parse_list_literal();
        if (is_op("{")) return parse_dict_literal();
        fail("unexpected '" + t.value + "'");
    }

    ExprPtr parse_list_literal() {
        ExprPtr e = node(Expr::Kind::list, next().line);
        while (!is_op("]")) {
            if (!e->children.empty()) expect(TokenKind::op, ",", "','");
            if (is_op("]")) break;
            e->children.push_back(parse_expression(true));
        }
        next();
        return e;
    }

    ExprPtr parse_dict_literal() {
        ExprPtr e = node(Expr::Kind::dict, next().line);
        while (!is_op("}")) {
            if (!e->children.empty()) expect(TokenKind::op, ",", "','");
            if (is_op("}")) break;
            e->children.push_back(parse_expression(true));
            expect(TokenKind::op, ":", "':'");
            e->children.push_back(parse_expression(true));
        }
        next();
        return e;
    }

    /// .attr  [index]  [a:b:c]  (args) — any number, left to right.
    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (is_op(".")) {
                const int line = next().line;
                ExprPtr a = node(Expr::Kind::attribute, line);
                a->children.push_back(std::move(e));
                if (is(TokenKind::integer)) {  // x.0 is x[0]
                    a->kind = Expr::Kind::subscript;
                    ExprPtr index = node(Expr::Kind::literal, line);
                    index->literal = make_int(std::stoll(next().value));
                    a->children.push_back(std::move(index));
                } else {
                    a->name = expect_name();
                }
                e = std::move(a);
            } else if (is_op("[")) {
                const int line = next().line;
                ExprPtr s = node(Expr::Kind::subscript, line);
                s->children.push_back(std::move(e));
                s->children.push_back(parse_subscript_index());
                expect(TokenKind::op, "]", "']'");
                e = std::move(s);
            } else if (is_op("(")) {
                ExprPtr c = node(Expr::Kind::call, current().line);
                c->children.push_back(std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }

    /// Inside [ ]: an index, or a slice a:b:c with any part left out.
    ExprPtr parse_subscript_index() {
        const int line = current().line;
        ExprPtr start = is_op(":") ? nullptr : parse_expression(true);
        if (!is_op(":")) {
            if (is_op(",")) fail("unsupported tuple index");
            return start;
        }
        next();
        ExprPtr s = node(Expr::Kind::slice, line);
        s->children.push_back(std::move(start));
        s->children.push_back(is_op("]") || is_op(":") ? nullptr : parse_expression(true));
        if (skip_if(TokenKind::op, ":")) s->children.push_back(is_op("]") ? nullptr : parse_expression(true));
        else s->children.push_back(nullptr);
        return s;
    }

    /// `(a, b, key=value)` appended to e->children / e->keyword_args.
    void parse_call_args(Expr& e) {
        expect(TokenKind::op, "(", "'('");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect(TokenKind::op, ",", "','");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail("unsupported *args / **kwargs in a call");
            if (current().kind == TokenKind::name && peek().kind == TokenKind::op && peek().value == "=") {
                std::string key = next().value;
                next();
                e.keyword_args.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!e.keyword_args.empty()) fail("positional argument after a keyword argument");
                e.children.push_back(parse_expression(true));
            }
        }
        next();
    }

    /// `| filter(args)` and `is [not] test args`, repeated.
    ExprPtr parse_filter_chain(ExprPtr e) {
        while (true) {
            if (is_op("|")) e = parse_filters(std::move(e), false);
            else if (is_name("is")) e = parse_test(std::move(e));
            else if (is_op("(")) {
                ExprPtr c = node(Expr::Kind::call, current().line);
                c->children.push_back(std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else return e;
        }
    }

    /// One or more `| name(args)`; `start_inline`: the first filter has no `|` (filter blocks).
    ExprPtr parse_filters(ExprPtr input, bool start_inline) {
        while (is_op("|") || start_inline) {
            if (!start_inline) next();
            start_inline = false;
            ExprPtr f = node(Expr::Kind::filter, current().line);
            f->name = expect_name();
            while (skip_if(TokenKind::op, ".")) { f->name += '.'; f->name += expect_name(); }
            f->children.push_back(std::move(input));
            if (is_op("(")) parse_call_args(*f);
            input = std::move(f);
        }
        return input;
    }

    ExprPtr parse_test(ExprPtr input) {
        const int line = next().line;  // `is`
        const bool negated = skip_if(TokenKind::name, "not");
        ExprPtr t = node(Expr::Kind::test, line);
        t->name = expect_name();
        while (skip_if(TokenKind::op, ".")) { t->name += '.'; t->name += expect_name(); }
        t->children.push_back(std::move(input));
        const bool argument_follows = is(TokenKind::name) || is(TokenKind::string) || is(TokenKind::integer) ||
                                      is(TokenKind::floating) || is_op("[") || is_op("{");
        if (is_op("(")) {
            parse_call_args(*t);
        } else if (argument_follows && !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail("you cannot chain multiple tests with is");
            t->children.push_back(parse_postfix(parse_primary()));
        }
        if (!negated) return t;
        ExprPtr n = node(Expr::Kind::not_, line);
        n->children.push_back(std::move(t));
        return n;
    }
};

}  // namespace glass::chat::jinja
