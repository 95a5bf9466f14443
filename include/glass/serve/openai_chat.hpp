/// \file
/// \brief glass/serve/openai_chat.hpp — a chat request's messages become the prompt: the model's
/// own chat template, or glass's plain layout for models without one.
/// ```text
/// In:  the body of POST /v1/chat/completions (its "messages", "tools", "chat_template_kwargs"),
///      the served model (its template, if it has one), its tokenizer.
/// Out: ChatPrompt: the rendered text, its token ids, and the stop strings the layout needs.
///
/// With a template (the model's own: GGUF tokenizer.chat_template, tokenizer_config.json, or
/// --chat-template FILE), as vLLM prepares messages for Hugging Face templates:
///   messages       passed as written (role, content, name, tool_calls, tool_call_id, ...), keys
///                  in the order the client wrote them; a content given as text parts is joined
///                  into one string; a tool call's "arguments", a JSON string in OpenAI's API, is
///                  parsed into the object templates expect ({{ tool_call.arguments | tojson }})
///   tools          the request's list, as written
///   chat_template_kwargs  more variables: {"enable_thinking": false}
///   prompt ids     the text tokenized with special tokens recognised, no BOS added (the template
///                  writes it); the reply ends at the model's end-of-generation ids (<|im_end|>, ...)
///   raise_exception in the template: 400 with the template's own message
///
/// Without one (llama2.c checkpoints, the shipped stories260K, a story model trained on no chat
/// format), the plain text glass chat uses (tools/cmd_chat.cpp):
///
///   system or developer   CONTENT\n
///   user                  User: CONTENT\n
///   assistant             Assistant:CONTENT\n     (a reply keeps the leading space it came with)
///   at the end            Assistant:               the model continues from here
///
/// with BOS first and "\n" as a stop string (the layout's end of turn). A client that sends the
/// reply back renders its next prompt as the last prompt + reply + "\n" + the new turn, so the full
/// KV blocks of the earlier turn come from the prefix cache (with a template, the same holds as long
/// as the template renders earlier turns the same way each time, as the real ones do).
/// ```
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/chat/chat_template.hpp"
#include "glass/chat/model_template.hpp"
#include "glass/serve/api_error.hpp"
#include "glass/tokenizer.hpp"

namespace glass::serve::openai {

/// How the served model lays out a conversation: its chat template, or none (the plain layout).
struct ChatFormat {
    std::shared_ptr<const chat::ChatTemplate> chat_template;  ///< null: the plain layout
    std::string bos_token, eos_token;                         ///< the texts the template is given
};

/// A chat's prompt: the text, its ids, and the stop strings its layout needs.
struct ChatPrompt {
    std::string text;
    std::vector<int> ids;
    std::vector<std::string> stop_strings;
};

namespace chat_detail {

using ordered_json = nlohmann::ordered_json;
using detail::invalid;  // api_error.hpp
using detail::shown;

// A content given as a list of {"type": "text", "text": ...} parts, joined; any other content as is.
inline ordered_json content_for_template(const ordered_json& v, const std::string& at) {
    if (!v.is_array()) {
        if (!v.is_string() && !v.is_null())
            throw invalid(at, at + " must be a string, null or a list of text parts, got " + shown(v));
        return v;
    }
    std::string text;
    for (size_t i = 0; i < v.size(); ++i) {
        const ordered_json& part = v[i];
        const std::string part_at = at + "[" + std::to_string(i) + "]";
        if (!part.is_object() || part.value("type", ordered_json()) != "text" || !part.contains("text") || !part["text"].is_string())
            throw invalid(part_at, part_at + " must be {\"type\": \"text\", \"text\": STRING} (only text parts), got " + shown(part));
        text += part["text"].get<std::string>();
    }
    return text;
}

// tool_calls[i].function.arguments: OpenAI sends a JSON string, templates print an object.
inline void parse_tool_call_arguments(ordered_json& calls, const std::string& at) {
    if (!calls.is_array()) throw invalid(at, at + " must be a list of tool calls, got " + shown(calls));
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string call_at = at + "[" + std::to_string(i) + "]";
        ordered_json& call = calls[i];
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
            throw invalid(call_at, call_at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}, "
                                   "got " + shown(call));
        ordered_json& arguments = call["function"]["arguments"];
        if (!arguments.is_string()) continue;
        try {
            arguments = ordered_json::parse(arguments.get<std::string>());
        } catch (const nlohmann::json::exception&) {
            throw invalid(call_at + ".function.arguments", call_at + ".function.arguments is not JSON: " + shown(arguments));
        }
    }
}

// The messages as the template sees them (see the top of this file).
inline ordered_json messages_for_template(const ordered_json& messages) {
    if (!messages.is_array() || messages.empty())
        throw invalid("messages", "messages must be a non-empty list of {\"role\", \"content\", ...}, got " + shown(messages));
    ordered_json out = messages;
    for (size_t i = 0; i < out.size(); ++i) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        ordered_json& m = out[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw invalid(at, at + " must be an object with a string \"role\", got " + shown(m));
        if (m.contains("content")) m["content"] = content_for_template(m["content"], at + ".content");
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) parse_tool_call_arguments(m["tool_calls"], at + ".tool_calls");
    }
    return out;
}

inline ChatPrompt render_with_template(const ChatFormat& format, const ordered_json& body, const Tokenizer& tokenizer) {
    chat::ChatInputs in{.messages = messages_for_template(body["messages"]),
                        .tools = std::nullopt,
                        .add_generation_prompt = true,
                        .bos_token = format.bos_token,
                        .eos_token = format.eos_token,
                        .extra = ordered_json::object(),
                        .now_unix_seconds = std::nullopt};
    if (body.contains("tools") && !body["tools"].is_null()) {
        if (!body["tools"].is_array()) throw invalid("tools", "tools must be a list of tools, got " + shown(body["tools"]));
        in.tools = body["tools"];
    }
    if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
        if (!body["chat_template_kwargs"].is_object())
            throw invalid("chat_template_kwargs",
                          "chat_template_kwargs must be an object, got " + shown(body["chat_template_kwargs"]));
        in.extra = body["chat_template_kwargs"];
    }
    ChatPrompt p;
    try {
        p.text = format.chat_template->render(in);
    } catch (const chat::TemplateRaised& e) {
        throw ApiError(400, std::string("the model's chat template refused these messages: ") + e.what(), "messages",
                       "chat_template_refused");
    } catch (const chat::TemplateError& e) {
        throw ApiError(400, std::string("the model's chat template failed on these messages: ") + e.what(), "messages",
                       "chat_template_error");
    }
    p.ids = chat::chat_prompt_ids(tokenizer, p.text);
    return p;
}

// The plain layout (see the top of this file).
inline ChatPrompt render_plain(const ordered_json& messages, const Tokenizer& tokenizer) {
    if (!messages.is_array() || messages.empty())
        throw invalid("messages", "messages must be a non-empty list of {\"role\", \"content\"}, got " + shown(messages));
    ChatPrompt p;
    for (size_t i = 0; i < messages.size(); ++i) {
        const ordered_json& m = messages[i];
        const std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw invalid(at, at + " must be an object {\"role\", \"content\"}, got " + shown(m));
        for (const auto& [key, value] : m.items())
            if (key != "role" && key != "content" && key != "name")
                throw invalid(at + "." + key, "unknown field '" + key + "' in " + at + " (this model has no chat template: only "
                                              "role, content and name)");
        const ordered_json role = m.value("role", ordered_json());
        const ordered_json content = content_for_template(m.value("content", ordered_json()), at + ".content");
        const std::string text = content.is_string() ? content.get<std::string>() : "";
        if (role == "system" || role == "developer") p.text += text + "\n";
        else if (role == "user") p.text += "User: " + text + "\n";
        else if (role == "assistant") p.text += "Assistant:" + text + "\n";
        else throw invalid(at + ".role", at + ".role must be system, developer, user or assistant, got " + shown(role));
    }
    p.text += "Assistant:";
    p.ids = tokenizer.encode(p.text, /*add_bos=*/true, /*add_eos=*/false);
    p.stop_strings = {"\n"};  // the layout's end of turn
    return p;
}

}  // namespace chat_detail

/// The prompt of a chat request `body` (parsed with its keys in order) for a model laid out by
/// `format`. Throws ApiError 400 naming the field at fault or the template's refusal.
inline ChatPrompt render_chat_request(const ChatFormat& format, const nlohmann::ordered_json& body, const Tokenizer& tokenizer) {
    if (!body.contains("messages") || body["messages"].is_null()) throw detail::invalid("messages", "messages is required");
    if (format.chat_template) return chat_detail::render_with_template(format, body, tokenizer);
    for (const char* needs_template : {"tools", "chat_template_kwargs"})
        if (body.contains(needs_template) && !body[needs_template].is_null())
            throw detail::invalid(needs_template, std::string(needs_template) +
                                                      " needs a model with a chat template; this one has none (glass "
                                                      "serve --chat-template FILE gives it one)");
    return chat_detail::render_plain(body["messages"], tokenizer);
}

}  // namespace glass::serve::openai
