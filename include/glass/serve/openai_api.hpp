/// \file
/// \brief glass/serve/openai_api.hpp — the OpenAI HTTP API, requests in: a JSON body checked and parsed into what the engine needs.
/// ```text
/// In:  the JSON body of POST /v1/completions or POST /v1/chat/completions, the served model
///      (its name and how many positions a request may use), its tokenizer.
/// Out: a CompletionRequest (prompt ids, GenerateOptions, streaming flags) for the engine, or an
///      ApiError (HTTP status and a message naming the parameter and the value at fault). The
///      answers (completions, stream chunks, logprobs) are built in openai_response.hpp. No HTTP
///      here: the server (tools/cmd_serve.cpp) moves these objects over the wire.
///
///   POST /v1/completions {"model", "prompt", "max_tokens", "temperature", "top_p", "seed",
///                         "stop", "stream", "stream_options": {"include_usage"}, "n" (only 1),
///                         "user" (ignored), "presence_penalty" and "frequency_penalty" (only 0),
///                         "logprobs" (0..5), extensions "top_k", "min_p", "ignore_eos"}
///     "prompt": a string (BOS is put first, as generate() does), a list of one string, or a
///     list of token ids (taken as they are)
///   POST /v1/chat/completions  the same, with "messages" instead of "prompt",
///     "max_completion_tokens" as another name for "max_tokens", and "logprobs": true with
///     "top_logprobs" (0..20) instead of "logprobs": N
///
/// Defaults as OpenAI's: temperature 1, top_p 1, a new seed per request, max_tokens 16 for a
/// completion (or what is left of the context), the rest of the context for a chat.
///
/// The chat: the messages become the prompt through the model's own chat template, or a plain
/// layout for models without one (openai_chat.hpp).
///
/// Errors have OpenAI's shape, {"error": {"message", "type", "param", "code"}}: 400 for malformed
/// JSON, an unknown parameter, a value of the wrong type or out of range, n > 1, a prompt longer
/// than the context, max_tokens past the context; 404 for a model this server does not serve.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/formats/json_input.hpp"
#include "glass/generate.hpp"
#include "glass/serve/api_error.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/openai_chat.hpp"
#include "glass/tokenizer.hpp"

namespace glass::serve::openai {

using json = nlohmann::json;

/// JSON text for any value, invalid UTF-8 replaced (text from a model may hold any bytes).
inline std::string to_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// `{"error": {"message", "type", "param", "code"}}`; empty param or code become null.
inline json error_body(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
}
inline json error_body(const ApiError& e) { return error_body(e.what(), e.type, e.param, e.code); }

/// What the server serves: the model's name (the file name without .bin), how many positions
/// one request may use (prompt + generated), the vocabulary size, when it was loaded.
struct ServedModel {
    std::string name;
    int context = 0;
    int vocab_size = 0;
    std::int64_t created = 0;  ///< Unix time
    ChatFormat chat;           ///< how a chat's messages become the prompt (openai_chat.hpp)
};

/// One request, parsed and checked: what the engine needs, and how to answer.
struct CompletionRequest {
    bool chat = false;
    std::string prompt;            ///< the text the model reads (a chat's rendered template); "" for token ids
    std::vector<int> prompt_ids;   ///< what the engine computes (BOS first for a text prompt)
    GenerateOptions options;
    bool stream = false;
    bool include_usage = false;    ///< stream_options.include_usage
    bool logprobs = false;         ///< answer with logprobs (then options.logprobs is set too)
    int top_logprobs = 0;          ///< alternatives per token: "logprobs": N (completion), "top_logprobs": N (chat)
};

namespace detail {

using ordered_json = nlohmann::ordered_json;  // a body keeps its keys in the client's order

// A bound as a reader writes it: 2, 0.5.
inline std::string bound(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

inline double number_in(const ordered_json& v, const std::string& name, double lo, double hi, bool lo_open = false) {
    if (!v.is_number()) throw invalid(name, name + " must be a number, got " + shown(v));
    const double x = v.get<double>();
    if (x < lo || x > hi || (lo_open && x == lo))
        throw invalid(name, name + " must be in " + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) + "], got " + shown(v));
    return x;
}

inline std::int64_t integer_at_least(const ordered_json& v, const std::string& name, std::int64_t lo) {
    if (!v.is_number_integer()) throw invalid(name, name + " must be an integer, got " + shown(v));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw invalid(name, name + " is too large: " + shown(v));
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo) throw invalid(name, name + " must be >= " + std::to_string(lo) + ", got " + shown(v));
    return x;
}

inline std::int64_t integer_in(const ordered_json& v, const std::string& name, std::int64_t lo, std::int64_t hi) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) ||
        v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
        throw invalid(name, name + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + shown(v));
    return v.get<std::int64_t>();
}

inline bool boolean(const ordered_json& v, const std::string& name) {
    if (!v.is_boolean()) throw invalid(name, name + " must be true or false, got " + shown(v));
    return v.get<bool>();
}

// null means "not given", as OpenAI's SDKs send it.
inline bool given(const ordered_json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// The body as JSON: an object, its nesting checked before parsing, as for every untrusted JSON
// (formats/json_input.hpp): printing a value for an error message recurses once per level (a 1 MiB
// body of '[' would overflow the stack). Any parse error, a number too large for a double (1e400)
// included, is the client's.
inline ordered_json parse_body(const std::string& body) {
    try {
        check_json_depth(body, "the body");
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "", "invalid_json");
    }
    ordered_json j;
    try {
        j = ordered_json::parse(body);
    } catch (const nlohmann::json::exception& e) {
        throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
    if (!j.is_object()) throw ApiError(400, "the body must be a JSON object, got " + shown(j), "", "invalid_json");
    return j;
}

// Every key must be a parameter of this route.
inline void check_known_parameters(const ordered_json& j, bool chat) {
    static const std::set<std::string> common = {
        "model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "n",
        "user", "presence_penalty", "frequency_penalty", "top_k", "min_p", "ignore_eos"};
    for (const auto& [key, value] : j.items()) {
        const bool known = common.count(key) > 0 || key == "logprobs" ||
                           (chat ? key == "messages" || key == "max_completion_tokens" || key == "top_logprobs" ||
                                       key == "tools" || key == "chat_template_kwargs"
                                 : key == "prompt");
        if (!known)
            throw ApiError(400, "unknown parameter '" + key + "' (this server takes: model, " +
                                    (chat ? "messages" : "prompt") + ", max_tokens, temperature, top_p, seed, stop, stream, "
                                    "stream_options, n, user, " + (chat ? "logprobs, top_logprobs, tools, chat_template_kwargs" : "logprobs") +
                                    ", top_k, min_p, ignore_eos)",
                           key, "unknown_parameter");
    }
}

// The parameters that must name this server's model or ask for nothing it lacks: model, n,
// presence_penalty, frequency_penalty, user.
inline void check_served(const ordered_json& j, const ServedModel& model) {
    if (given(j, "model")) {
        if (!j["model"].is_string()) throw invalid("model", "model must be a string, got " + shown(j["model"]));
        if (j["model"].get<std::string>() != model.name)
            throw ApiError(404, "the model '" + j["model"].get<std::string>() + "' does not exist here (this server serves '" +
                                    model.name + "')",
                           "model", "model_not_found");
    }
    if (given(j, "n") && integer_at_least(j["n"], "n", 1) != 1)
        throw invalid("n", "n must be 1 (one choice per request; send more requests for more), got " + shown(j["n"]));
    for (const char* penalty : {"presence_penalty", "frequency_penalty"})
        if (given(j, penalty) && number_in(j[penalty], penalty, -2, 2) != 0)
            throw invalid(penalty, std::string(penalty) + " is not supported (only 0), got " + shown(j[penalty]));
    if (given(j, "user") && !j["user"].is_string()) throw invalid("user", "user must be a string, got " + shown(j["user"]));
}

// Sampling and stop strings: temperature, top_p, top_k, min_p, seed, stop (OpenAI's defaults:
// temperature 1, top_p 1; `seed` when the request gives none).
inline void sampling_from(const ordered_json& j, const ServedModel& model, std::uint64_t seed, GenerateOptions& o) {
    o.sampling.temperature = 1.0f;
    o.sampling.top_p = 1.0f;
    o.seed = seed;
    if (given(j, "temperature")) o.sampling.temperature = static_cast<float>(number_in(j["temperature"], "temperature", 0, 2));
    if (given(j, "top_p")) o.sampling.top_p = static_cast<float>(number_in(j["top_p"], "top_p", 0, 1, /*lo_open=*/true));
    if (given(j, "top_k")) o.sampling.top_k = static_cast<int>(std::min<std::int64_t>(integer_at_least(j["top_k"], "top_k", 0), model.vocab_size));
    if (given(j, "min_p")) o.sampling.min_p = static_cast<float>(number_in(j["min_p"], "min_p", 0, 1));
    if (given(j, "seed")) {
        if (!j["seed"].is_number_integer()) throw invalid("seed", "seed must be an integer, got " + shown(j["seed"]));
        o.seed = j["seed"].is_number_unsigned() ? j["seed"].get<std::uint64_t>()
                                                : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());  // two's complement
    }
    if (given(j, "stop")) {
        const ordered_json& s = j["stop"];
        const ordered_json list = s.is_string() ? ordered_json::array({s}) : s;
        if (!list.is_array() || list.empty() || list.size() > 4)
            throw invalid("stop", "stop must be a string or a list of 1 to 4 strings, got " + shown(s));
        for (const ordered_json& x : list) {
            if (!x.is_string() || x.get<std::string>().empty())
                throw invalid("stop", "each stop string must be a non-empty string, got " + shown(x));
            o.stop_strings.push_back(x.get<std::string>());
        }
    }
}

// Logprobs: a completion's "logprobs": N (0..5, OpenAI's legacy limit); a chat's "logprobs":
// true, with "top_logprobs": N (0..20) alternatives per token.
inline void logprobs_from(const ordered_json& j, CompletionRequest& r) {
    if (!r.chat && given(j, "logprobs")) {
        r.logprobs = true;
        r.top_logprobs = static_cast<int>(integer_in(j["logprobs"], "logprobs", 0, 5));
    }
    if (r.chat && given(j, "logprobs")) r.logprobs = boolean(j["logprobs"], "logprobs");
    if (r.chat && given(j, "top_logprobs")) {
        r.top_logprobs = static_cast<int>(integer_in(j["top_logprobs"], "top_logprobs", 0, kMaxTopLogprobs));
        if (!r.logprobs)
            throw invalid("top_logprobs", "top_logprobs needs \"logprobs\": true, got top_logprobs " +
                                              shown(j["top_logprobs"]) + " without it");
    }
    r.options.logprobs = r.logprobs;
    r.options.top_logprobs = r.top_logprobs;
}

// ignore_eos, stream, stream_options.
inline void streaming_from(const ordered_json& j, CompletionRequest& r) {
    if (given(j, "ignore_eos")) r.options.stop_on_bos = r.options.stop_on_eos = !boolean(j["ignore_eos"], "ignore_eos");
    if (given(j, "stream")) r.stream = boolean(j["stream"], "stream");
    if (!given(j, "stream_options")) return;
    const ordered_json& so = j["stream_options"];
    if (!r.stream) throw invalid("stream_options", "stream_options is only allowed with \"stream\": true");
    if (!so.is_object()) throw invalid("stream_options", "stream_options must be an object, got " + shown(so));
    for (const auto& [key, value] : so.items()) {
        if (key != "include_usage")
            throw ApiError(400, "unknown parameter 'stream_options." + key + "' (only include_usage)", "stream_options." + key,
                           "unknown_parameter");
        r.include_usage = boolean(value, "stream_options.include_usage");
    }
}

// A completion's "prompt": a string, a list of one string (both kept as text for the tokenizer),
// or a list of token ids (taken as they are).
inline void completion_prompt_from(const ordered_json& j, const ServedModel& model, CompletionRequest& r) {
    if (!given(j, "prompt")) throw invalid("prompt", "prompt is required");
    const ordered_json& p = j["prompt"];
    if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        r.prompt = p[0].get<std::string>();
    } else if (p.is_string()) {
        r.prompt = p.get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        for (size_t i = 0; i < p.size(); ++i) {
            const ordered_json& id = p[i];
            if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= model.vocab_size)
                throw invalid("prompt", "prompt[" + std::to_string(i) + "] = " + shown(id) +
                                            " is not a token id of this model's vocabulary [0, " +
                                            std::to_string(model.vocab_size) + ")");
            r.prompt_ids.push_back(id.get<int>());
        }
    } else {
        throw invalid("prompt", "prompt must be a string, a list of one string, or a list of token ids, got " + shown(p));
    }
}

// The prompt as token ids: a chat's messages through its template (openai_chat.hpp), which may
// add stop strings; a completion's prompt, tokenized with BOS first when it is text.
inline void prompt_from(const ordered_json& j, const ServedModel& model, const Tokenizer& tokenizer, CompletionRequest& r) {
    if (r.chat) {
        ChatPrompt p = render_chat_request(model.chat, j, tokenizer);
        r.prompt = std::move(p.text);
        r.prompt_ids = std::move(p.ids);
        r.options.stop_strings.insert(r.options.stop_strings.begin(), p.stop_strings.begin(), p.stop_strings.end());
    } else {
        completion_prompt_from(j, model, r);
        if (r.prompt_ids.empty()) r.prompt_ids = tokenizer.encode(r.prompt, /*add_bos=*/true, /*add_eos=*/false);
    }
    if (r.prompt_ids.empty())
        throw invalid(r.chat ? "messages" : "prompt", r.chat ? "the chat template rendered these messages as no text at all"
                                                             : "the prompt is empty (no tokens; this model adds no BOS)");
}

// Room in the context: prompt + generated tokens must fit the positions a request may use.
// max_tokens (a chat's max_completion_tokens) defaults to 16 for a completion, the rest of the
// context for a chat.
inline void max_tokens_from(const ordered_json& j, const ServedModel& model, CompletionRequest& r) {
    const int n_prompt = static_cast<int>(r.prompt_ids.size());
    if (n_prompt >= model.context)
        throw ApiError(400, "the prompt is " + std::to_string(n_prompt) + " tokens, " +
                                (n_prompt > model.context ? "longer than" : "which fills") + " this model's context of " +
                                std::to_string(model.context) + " positions (no room to generate)",
                       r.chat ? "messages" : "prompt", "context_length_exceeded");
    const int room = model.context - n_prompt;
    const char* max_name = r.chat && given(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (given(j, "max_tokens") && r.chat && given(j, "max_completion_tokens"))
        throw invalid("max_tokens", "give max_tokens or max_completion_tokens, not both");
    if (!given(j, max_name)) {
        r.options.max_new_tokens = r.chat ? room : std::min(16, room);
        return;
    }
    const std::int64_t max_tokens = integer_at_least(j[max_name], max_name, 1);
    if (max_tokens > room)
        throw ApiError(400, std::string(max_name) + " " + shown(j[max_name]) + " plus the prompt's " +
                                std::to_string(n_prompt) + " tokens is more than this model's context of " +
                                std::to_string(model.context) + " positions (at most " + std::to_string(room) + " here)",
                       max_name, "context_length_exceeded");
    r.options.max_new_tokens = static_cast<int>(max_tokens);
}

}  // namespace detail

/// Parses and checks one request body (JSON text) for POST /v1/completions (`chat` false) or
/// POST /v1/chat/completions (`chat` true). `seed` is used when the request gives none.
inline CompletionRequest parse_request(const std::string& body, bool chat, const ServedModel& model,
                                       const Tokenizer& tokenizer, std::uint64_t seed) {
    const detail::ordered_json j = detail::parse_body(body);  // once, keys in order: a template prints them so
    detail::check_known_parameters(j, chat);
    detail::check_served(j, model);
    CompletionRequest r;
    r.chat = chat;
    detail::sampling_from(j, model, seed, r.options);
    detail::logprobs_from(j, r);
    detail::streaming_from(j, r);
    detail::prompt_from(j, model, tokenizer, r);
    detail::max_tokens_from(j, model, r);
    validate(r.options.sampling);  // cannot fail after the checks above; a guard against a missed one
    return r;
}

}  // namespace glass::serve::openai
