// tools/chat_setup.hpp — which chat template a command renders conversations with (glass chat,
// serve, explain --chat): --chat-template FILE, else the model's own, else none (the plain layout).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cli.hpp"
#include "glass/chat/chat_template.hpp"
#include "glass/chat/model_template.hpp"
#include "glass/serve/openai_chat.hpp"
#include "glass/tokenizer.hpp"

namespace cli {

// `model_path` is "" when there is no model file (serve --shape). With --chat-template FILE, the
// BOS/EOS texts are still the model's (its files name them; a llama2.c checkpoint's tokenizer
// pieces otherwise).
inline std::optional<glass::chat::ModelChatTemplate> chat_template_from_flags(const Flags& flags, const std::string& model_path,
                                                                              const glass::Tokenizer& tok) {
    if (!flags.has("--chat-template"))
        return model_path.empty() ? std::nullopt : glass::chat::find_model_chat_template(model_path);
    auto [bos, eos] = model_path.empty() ? std::pair<std::string, std::string>() : glass::chat::model_special_texts(model_path);
    if (bos.empty() && tok.bos_id() >= 0) bos = tok.piece(tok.bos_id());
    if (eos.empty() && tok.eos_id() >= 0) eos = tok.piece(tok.eos_id());
    return glass::chat::chat_template_from_file(flags.get("--chat-template", ""), bos, eos);
}

// --set NAME=JSON, each a template variable: enable_thinking=false, date_string="26 Jul 2024".
inline nlohmann::ordered_json template_variables_from_flags(const Flags& flags) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (const std::string& assignment : flags.all("--set")) {
        const size_t eq = assignment.find('=');
        if (eq == std::string::npos || eq == 0)
            throw UsageError("--set takes NAME=JSON (enable_thinking=false), got '" + assignment + "'");
        const std::string name = assignment.substr(0, eq), value = assignment.substr(eq + 1);
        try {
            extra[name] = nlohmann::ordered_json::parse(value);
        } catch (const nlohmann::json::exception&) {
            throw UsageError("--set " + name + ": '" + value + "' is not JSON (a string needs quotes: " + name +
                             "='\"text\"')");
        }
    }
    return extra;
}

// The same as the server's ChatFormat: the template parsed once (a bad one fails here, at start).
inline glass::serve::openai::ChatFormat chat_format_from_flags(const Flags& flags, const std::string& model_path,
                                                              const glass::Tokenizer& tok) {
    const std::optional<glass::chat::ModelChatTemplate> t = chat_template_from_flags(flags, model_path, tok);
    if (!t) return {};
    return {.chat_template = std::make_shared<const glass::chat::ChatTemplate>(t->source, "chat template " + t->origin),
            .bos_token = t->bos_token,
            .eos_token = t->eos_token};
}

}  // namespace cli
