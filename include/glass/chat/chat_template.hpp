/// \file
/// \brief glass/chat/chat_template.hpp — a conversation -> the exact prompt text the model was trained on.
/// ```text
/// In:  the model's chat template (Jinja source, from tokenizer_config.json or GGUF metadata);
///      a conversation: messages [{role, content, ...}], optional tools, add_generation_prompt,
///      the special tokens, and any extra variables (enable_thinking, date_string, ...).
/// Out: the prompt text, byte for byte what Hugging Face's apply_chat_template renders.
///
/// The journey of a template, one header per step:
///   jinja_lexer.hpp    text -> tokens (with trim_blocks / lstrip_blocks, as HF sets them)
///   jinja_parser.hpp   tokens -> a tree of statements ...
///   jinja_expressions.hpp  ... and the expressions inside their tags
///   jinja_value.hpp    the values it computes with (Python's: None, True, 1.0, [...], {...})
///   jinja_ops.hpp      operators, attribute and item lookup, iteration, the render's limits
///   jinja_methods.hpp  str / dict / list methods ("a b".split(), d.items())
///   jinja_filters.hpp  filters (|tojson, |trim, ...)
///   jinja_builtins.hpp tests (is defined, ...) and globals (range, namespace, raise_exception, ...)
///   jinja_eval.hpp     tree + variables -> text
/// ChatTemplate parses once (constructor) and renders many times (render is const).
///
///     glass::chat::ChatTemplate t(source);
///     std::string prompt = t.render({.messages = messages, .bos_token = "<s>"});
/// ```
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "glass/chat/jinja_eval.hpp"
#include "glass/chat/template_errors.hpp"

namespace glass::chat {

struct ChatInputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    std::optional<nlohmann::ordered_json> tools{};                    // nullopt: `tools` is undefined in the template
    bool add_generation_prompt = true;
    std::string bos_token{}, eos_token{};
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables: enable_thinking, date_string, ...
    std::optional<std::int64_t> now_unix_seconds{};                   // strftime_now's clock; nullopt = the real clock (UTC)
};

class ChatTemplate {
public:
    /// Parses `source` (throws TemplateError). `name` starts error messages ("chat template").
    explicit ChatTemplate(std::string source, std::string name = "chat template")
        : source_(std::move(source)), name_(std::move(name)) {
        try {
            body_ = std::make_shared<const jinja::Body>(jinja::parse_template(source_));
        } catch (const TemplateError& e) {
            throw TemplateError(e.message(), e.line(), name_);
        }
    }

    /// HF's variables from `in` (messages, tools if any, add_generation_prompt, bos_token,
    /// eos_token, then `extra`), then render_variables.
    std::string render(const ChatInputs& in) const {
        nlohmann::ordered_json variables = nlohmann::ordered_json::object();
        variables["messages"] = in.messages;
        if (in.tools) variables["tools"] = *in.tools;
        variables["add_generation_prompt"] = in.add_generation_prompt;
        variables["bos_token"] = in.bos_token;
        variables["eos_token"] = in.eos_token;
        if (!in.extra.is_object()) throw TemplateError("extra variables must be a JSON object", 0, name_);
        for (const auto& [key, value] : in.extra.items()) variables[key] = value;
        return render_variables(variables, in.now_unix_seconds);
    }

    /// Any variables (an object, or null for none); throws TemplateRaised, TemplateError.
    std::string render_variables(const nlohmann::ordered_json& variables, std::optional<std::int64_t> now_unix_seconds = {}) const {
        if (!variables.is_object() && !variables.is_null()) throw TemplateError("template variables must be a JSON object", 0, name_);
        try {
            // 1. Scopes: the globals, then the caller's variables (the template's own sets land here too).
            auto globals = std::make_shared<jinja::Scope>();
            for (auto& [name, value] : jinja::global_functions()) globals->variables[name] = value;
            auto scope = std::make_shared<jinja::Scope>();
            scope->parent = globals;
            if (variables.is_object())
                for (const auto& [key, value] : variables.items()) scope->variables[key] = jinja::from_json(value);
            // 2. The statements, in order, into the prompt.
            jinja::RenderState state;
            state.now_unix_seconds = now_unix_seconds;
            std::string prompt;
            jinja::exec_body(state, *body_, scope, prompt);
            scope->variables.clear();  // macros hold their scope weakly; nothing outlives the render
            return prompt;
        } catch (const TemplateError& e) {
            throw TemplateError(e.message(), e.line(), name_);
        }
    }

    const std::string& source() const { return source_; }

private:
    std::string source_;
    std::string name_;
    std::shared_ptr<const jinja::Body> body_;
};

}  // namespace glass::chat
