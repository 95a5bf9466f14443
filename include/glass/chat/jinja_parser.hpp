/// \file
/// \brief glass/chat/jinja_parser.hpp — chat template step 2: tokens -> a tree.
/// ```text
/// In:  the lexer's tokens.
/// Out: a Body: a list of statements (Stmt), each holding expressions (Expr, from
///      jinja_expressions.hpp) — plain structs, every node with its line.
///
/// Statements: text, {{ output }}, if/elif/else, for (else, filter `if`, tuple targets), set
/// (x = ..., a, b = ..., ns.x = ..., and the block form {% set x %}...{% endset %}), macro, call,
/// filter blocks, break, continue. Anything else ({% include %}, {% generation %}, ...) is a
/// TemplateError naming the tag and its line.
///
/// Parser reads the statements and hands every expression inside them to the ExpressionParser
/// it is built on (jinja_expressions.hpp), which shares its token stream.
/// ```
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "glass/chat/jinja_expressions.hpp"
#include "glass/chat/jinja_lexer.hpp"

namespace glass::chat::jinja {

struct Stmt;
using Body = std::vector<Stmt>;

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null: none given
};

struct Stmt {
    enum class Kind { text, output, if_, for_, set, set_block, macro, call_block, filter_block, break_, continue_ };
    Kind kind = Kind::text;
    int line = 0;
    std::string text;                                  // text
    ExprPtr expr;                                      // output, set's value, for's iterable, call's call, filter chain
    std::vector<std::pair<ExprPtr, Body>> branches;    // if / elif / else (else: null condition)
    std::vector<std::string> targets;                  // for / set names (a, b = ...), macro name
    std::string target_attribute;                      // set ns.attr = ...: targets[0] is ns
    ExprPtr loop_filter;                               // for x in xs if cond
    Body body, else_body;                              // for, macro, call, set block, filter block
    std::vector<MacroParam> params;                    // macro / call(params)
};

class Parser : public ExpressionParser {
public:
    explicit Parser(std::vector<Token> tokens) : ExpressionParser(std::move(tokens)) {}

    Body parse_template() {
        Body body = parse_body({});
        if (current().kind != TokenKind::end) fail("unexpected '" + current().value + "'");
        return body;
    }

private:
    int loop_depth_ = 0;  // for break / continue

    // ---- statements ----

    /// Statements up to a {% tag %} named in `end_tags` (left unread: the caller reads it), or the end.
    Body parse_body(const std::vector<std::string>& end_tags) {
        DepthGuard guard(*this);
        Body body;
        while (current().kind != TokenKind::end) {
            const Token t = current();
            if (t.kind == TokenKind::text) { Stmt s; s.kind = Stmt::Kind::text; s.line = t.line; s.text = t.value; body.push_back(std::move(s)); next(); continue; }
            if (t.kind == TokenKind::variable_begin) {
                next();
                Stmt s;
                s.kind = Stmt::Kind::output;
                s.line = t.line;
                s.expr = parse_tuple(true, {});
                expect(TokenKind::variable_end, {}, "'}}'");
                body.push_back(std::move(s));
                continue;
            }
            if (t.kind != TokenKind::block_begin) fail("unexpected '" + t.value + "'");
            const Token& tag = peek();
            for (const std::string& end : end_tags) if (tag.kind == TokenKind::name && tag.value == end) return body;
            next();
            body.push_back(parse_statement());
        }
        if (!end_tags.empty()) fail("unexpected end of template, expected '" + end_tags.front() + "'");
        return body;
    }

    /// After `{%`: one statement, through its end tag.
    Stmt parse_statement() {
        const Token tag = current();
        if (tag.kind != TokenKind::name) fail("expected a tag name after '{%'");
        next();
        Stmt s;
        s.line = tag.line;
        if (tag.value == "if") parse_if(s);
        else if (tag.value == "for") parse_for(s);
        else if (tag.value == "set") parse_set(s);
        else if (tag.value == "macro") parse_macro(s);
        else if (tag.value == "call") parse_call_block(s);
        else if (tag.value == "filter") parse_filter_block(s);
        else if (tag.value == "break" || tag.value == "continue") {
            if (loop_depth_ == 0) fail("'" + tag.value + "' outside a loop");
            s.kind = tag.value == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
            end_tag();
        } else {
            throw TemplateError("unsupported tag '" + tag.value + "'", tag.line);
        }
        return s;
    }

    void end_tag() { expect(TokenKind::block_end, {}, "'%}'"); }

    /// `{% name %}` that closes a block.
    void close(const char* name) { expect(TokenKind::block_begin, {}, "'{%'"); expect(TokenKind::name, name, name); end_tag(); }

    void parse_if(Stmt& s) {
        s.kind = Stmt::Kind::if_;
        ExprPtr condition = parse_tuple(true, {});
        while (true) {
            end_tag();
            Body body = parse_body({"elif", "else", "endif"});
            s.branches.emplace_back(std::move(condition), std::move(body));
            expect(TokenKind::block_begin, {}, "'{%'");
            const std::string tag = next().value;
            if (tag == "endif") { end_tag(); return; }
            if (tag == "else") {
                end_tag();
                s.branches.emplace_back(nullptr, parse_body({"endif"}));
                close("endif");
                return;
            }
            condition = parse_tuple(true, {});  // elif
        }
    }

    void parse_for(Stmt& s) {
        s.kind = Stmt::Kind::for_;
        s.targets = parse_target_names();
        expect(TokenKind::name, "in", "'in'");
        s.expr = parse_tuple(false, {"recursive"});
        if (skip_if(TokenKind::name, "if")) s.loop_filter = parse_expression(true);
        if (is_name("recursive")) fail("unsupported recursive for loop");
        end_tag();
        ++loop_depth_;
        s.body = parse_body({"endfor", "else"});
        --loop_depth_;
        expect(TokenKind::block_begin, {}, "'{%'");
        if (next().value == "else") {
            end_tag();
            s.else_body = parse_body({"endfor"});
            close("endfor");
        } else {
            end_tag();
        }
    }

    /// `a` or `a, b` or `(a, b)` — the names a for loop or a set assigns.
    std::vector<std::string> parse_target_names() {
        std::vector<std::string> names;
        const bool parenthesized = skip_if(TokenKind::op, "(");
        do {
            if (parenthesized && is_op(")")) break;
            names.push_back(expect_name());
        } while (skip_if(TokenKind::op, ","));
        if (parenthesized) expect(TokenKind::op, ")", "')'");
        if (names.empty()) fail("expected a name to assign to");
        return names;
    }

    void parse_set(Stmt& s) {
        s.kind = Stmt::Kind::set;
        if (current().kind == TokenKind::name && peek().kind == TokenKind::op && peek().value == ".") {
            s.targets.push_back(next().value);
            next();
            s.target_attribute = expect_name();
        } else {
            s.targets = parse_target_names();
        }
        if (skip_if(TokenKind::op, "=")) {
            s.expr = parse_tuple(true, {});
            end_tag();
            return;
        }
        s.kind = Stmt::Kind::set_block;
        if (!s.target_attribute.empty() || s.targets.size() != 1) fail("a block set assigns one name");
        if (is_op("|")) s.expr = parse_filters(nullptr, false);
        end_tag();
        s.body = parse_body({"endset"});
        close("endset");
    }

    /// `(a, b=default, ...)` of a macro or a call block.
    std::vector<MacroParam> parse_params() {
        std::vector<MacroParam> params;
        expect(TokenKind::op, "(", "'('");
        while (!is_op(")")) {
            if (!params.empty()) expect(TokenKind::op, ",", "','");
            if (is_op(")")) break;
            MacroParam p{expect_name(), nullptr};
            if (skip_if(TokenKind::op, "=")) p.default_value = parse_expression(true);
            else if (!params.empty() && params.back().default_value) fail("non-default argument follows default argument");
            params.push_back(std::move(p));
        }
        next();
        return params;
    }

    void parse_macro(Stmt& s) {
        s.kind = Stmt::Kind::macro;
        s.targets.push_back(expect_name());
        s.params = parse_params();
        end_tag();
        const int saved_loops = loop_depth_;
        loop_depth_ = 0;
        s.body = parse_body({"endmacro"});
        loop_depth_ = saved_loops;
        close("endmacro");
    }

    void parse_call_block(Stmt& s) {
        s.kind = Stmt::Kind::call_block;
        if (is_op("(")) s.params = parse_params();
        s.expr = parse_expression(true);
        if (s.expr->kind != Expr::Kind::call) fail("expected a call after {% call %}");
        end_tag();
        const int saved_loops = loop_depth_;
        loop_depth_ = 0;
        s.body = parse_body({"endcall"});
        loop_depth_ = saved_loops;
        close("endcall");
    }

    void parse_filter_block(Stmt& s) {
        s.kind = Stmt::Kind::filter_block;
        s.expr = parse_filters(nullptr, true);
        end_tag();
        s.body = parse_body({"endfilter"});
        close("endfilter");
    }
};


inline Body parse_template(std::string_view source) { return Parser(lex_template(source)).parse_template(); }

}  // namespace glass::chat::jinja
