/// \file
/// \brief glass/chat/model_template.hpp — where a model keeps its chat template, and the token ids
/// a rendered conversation becomes.
/// ```text
/// In:  -m MODEL (a GGUF file, a Hugging Face folder, a llama2.c checkpoint), or a template file.
/// Out: ModelChatTemplate: the template's source, where it came from, and the BOS/EOS texts
///      Hugging Face hands the template as bos_token / eos_token; none for a llama2.c
///      checkpoint (it carries no template: glass chat and the server keep their plain layout).
///      chat_prompt_ids: the rendered text tokenized with special tokens recognised and no BOS
///      added, as transformers' apply_chat_template(tokenize=True) does: a template that wants
///      BOS writes {{ bos_token }} itself (Llama 3, Gemma, Mistral), so adding one would double it.
///
/// Where the template lives:
///   GGUF        metadata tokenizer.chat_template (llama.cpp's converter copies the model's own);
///               bos/eos texts: tokenizer.ggml.tokens at tokenizer.ggml.bos/eos_token_id
///   HF folder   chat_template.jinja (transformers >= 4.43 saves it apart), else tokenizer_config.json
///               "chat_template": a string, or a list of {"name", "template"} (the one named
///               "default"); bos/eos texts: tokenizer_config.json "bos_token" / "eos_token"
///               (a string or {"content": ...})
/// ```
#pragma once

#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/errors.hpp"
#include "glass/formats/gguf.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/json_input.hpp"
#include "glass/formats/model_files.hpp"
#include "glass/formats/read_file.hpp"
#include "glass/tokenizer.hpp"

namespace glass::chat {

struct ModelChatTemplate {
    std::string source;     ///< the Jinja text
    std::string origin;     ///< where it was read: "GGUF tokenizer.chat_template of 'm.gguf'", ...
    std::string bos_token;  ///< the text of BOS ("" when the model has none: Qwen)
    std::string eos_token;  ///< the text of EOS
};

namespace detail {

/// tokenizer.ggml.tokens[key's id], or "" when the key is absent or the id is out of range.
inline std::string gguf_token_text(const GgufFile& f, const char* key) {
    if (!f.has(key) || !f.has("tokenizer.ggml.tokens")) return "";
    const auto& tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    const std::int64_t id = f.get_int(key, -1);
    return id >= 0 && id < static_cast<std::int64_t>(tokens.size()) ? tokens[static_cast<size_t>(id)] : "";
}

// A GGUF: the template (if any) and the BOS/EOS texts, which every GGUF vocabulary names.
inline ModelChatTemplate gguf_chat_template(const std::string& path) {
    const GgufFile f = read_gguf_metadata(path);
    return ModelChatTemplate{.source = f.get_string("tokenizer.chat_template", ""),
                             .origin = f.has("tokenizer.chat_template") ? "GGUF tokenizer.chat_template of '" + path + "'" : "",
                             .bos_token = gguf_token_text(f, "tokenizer.ggml.bos_token_id"),
                             .eos_token = gguf_token_text(f, "tokenizer.ggml.eos_token_id")};
}

/// tokenizer_config.json's "chat_template": a string, or named templates (the "default" one).
inline std::optional<std::string> config_chat_template(const nlohmann::json& config, const std::string& file) {
    if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
        return std::nullopt;
    const nlohmann::json& t = config["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {
        for (const nlohmann::json& named : t)
            if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
                named["template"].is_string())
                return named["template"].get<std::string>();
        fail("'", file, "': chat_template is a list of named templates without one named \"default\"");
    }
    fail("'", file, "': chat_template must be a string or a list of {\"name\", \"template\"}, got ", t.dump());
}

// A folder: the template (if any) and the BOS/EOS texts of tokenizer_config.json.
inline ModelChatTemplate folder_chat_template(const std::string& dir) {
    const std::string config_path = dir + "/tokenizer_config.json";
    nlohmann::json config;
    if (std::ifstream(config_path).good())
        config = parse_untrusted_json(read_file_bytes(config_path, "tokenizer_config.json"), "'" + config_path + "'");
    ModelChatTemplate t{.source = "",
                        .origin = "",
                        .bos_token = hf_detail::config_token(config, "bos_token"),
                        .eos_token = hf_detail::config_token(config, "eos_token")};
    const std::string jinja_path = dir + "/chat_template.jinja";
    if (std::ifstream(jinja_path).good()) {
        t.source = read_file_bytes(jinja_path, "chat template");
        t.origin = "'" + jinja_path + "'";
        return t;
    }
    const std::optional<std::string> in_config = config_chat_template(config, config_path);
    if (!in_config) return t;
    t.source = *in_config;
    t.origin = "chat_template of '" + config_path + "'";
    return t;
}

// The template and BOS/EOS texts of any model file; origin "" when it carries no template.
inline ModelChatTemplate model_chat_template_or_texts(const std::string& model_path) {
    switch (model_file_kind(model_path)) {
        case ModelFileKind::gguf: return gguf_chat_template(model_path);
        case ModelFileKind::hf_folder: return folder_chat_template(model_path);
        case ModelFileKind::llama2c: break;  // no template, no special texts inside
    }
    return {.source = "", .origin = "", .bos_token = "", .eos_token = ""};
}

}  // namespace detail

/// The chat template `model_path` carries (GGUF metadata, or the folder's files), with the BOS
/// and EOS texts it is rendered with; nullopt when it has none (every llama2.c checkpoint).
inline std::optional<ModelChatTemplate> find_model_chat_template(const std::string& model_path) {
    ModelChatTemplate t = detail::model_chat_template_or_texts(model_path);
    if (t.origin.empty()) return std::nullopt;
    return t;
}

/// The BOS and EOS texts `model_path` names (GGUF vocabulary, tokenizer_config.json), template
/// or not; "" for a llama2.c checkpoint. A template given apart (--chat-template) gets these.
inline std::pair<std::string, std::string> model_special_texts(const std::string& model_path) {
    ModelChatTemplate t = detail::model_chat_template_or_texts(model_path);
    return {t.bos_token, t.eos_token};
}

/// A template from a file of its own (--chat-template FILE): its text; the BOS/EOS texts are the
/// caller's (the model's, when there is one: model_special_texts).
inline ModelChatTemplate chat_template_from_file(const std::string& path, std::string bos_token = "",
                                                 std::string eos_token = "") {
    return ModelChatTemplate{.source = read_file_bytes(path, "chat template"),
                             .origin = "'" + path + "'",
                             .bos_token = std::move(bos_token),
                             .eos_token = std::move(eos_token)};
}

/// The ids of a rendered conversation: special-token text becomes the special token (the
/// template wrote it, so it is trusted), and nothing is added: BOS comes from the template.
inline std::vector<int> chat_prompt_ids(const Tokenizer& tok, std::string_view rendered) {
    return tok.encode_with_specials(rendered);
}

}  // namespace glass::chat
