/// \file
/// \brief glass/serve/openai_response.hpp — the OpenAI HTTP API, answers out: completions, stream chunks, logprobs, usage.
/// ```text
/// In:  a CompletionRequest (openai_api.hpp) and the engine's RequestResult (or, streamed, the
///      text and logprobs as they come). Out: the JSON objects OpenAI's clients expect.
///
///   completion  {"id": "cmpl-N", "object": "text_completion", "created", "model",
///       "choices": [{"index": 0, "text", "logprobs", "finish_reason"}],
///       "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
///                 "prompt_tokens_details": {"cached_tokens"}}}
///   chat        "object": "chat.completion", each choice has "message": {"role": "assistant", "content"}
///
///   "stream": true -> server-sent events: one `data: CHUNK` line and a blank line per piece of
///     text, the last chunk with the finish_reason, then with include_usage one chunk whose
///     "choices" is [] and which carries the usage, then `data: [DONE]`. Completion chunks have
///     "text"; chat chunks a "delta" ({"role": "assistant", "content": ""} first, then
///     {"content"}, the last one {}).
///
/// finish_reason: "stop" for a stop string, BOS or EOS; "length" for max_tokens or a full context.
///
/// Logprobs (null unless asked for): the engine's (generate.hpp: ln softmax of the raw logits, in
/// double, whatever the sampling settings), one entry per generated token, usage's
/// completion_tokens of them: a final BOS/EOS and the token that completed a stop string are
/// included although their text is not shown. A token's "token" is the text its id adds after
/// the token before it (the tokenizer's decode(prev, id), as `glass generate --json` reports it);
/// "bytes" its UTF-8 bytes (a byte-fallback piece is one byte, shown in "token" as U+FFFD).
///   completion, "logprobs": N   {"tokens": [TOKEN], "token_logprobs": [LP],
///                                "top_logprobs": [{TOKEN: LP}] (the N most likely, and the chosen
///                                one if it is not among them), "text_offset": [characters of the
///                                completion before the token, from 0]}
///   chat, "top_logprobs": N     {"content": [{"token", "logprob", "bytes",
///                                "top_logprobs": [{"token", "logprob", "bytes"}] (N, most likely
///                                first)}], "refusal": null}
/// Streamed, a chunk carries the entries of the tokens whose text lies wholly in the text sent so
/// far (counted in the tokens' bytes); the last chunk, with the finish_reason, carries the rest:
/// tokens whose text is never shown (BOS/EOS, a stop string), and the last token's when its text
/// went out before the engine thread handed over the finished result (its last step comes with
/// the result). The concatenation of a stream's entries is the plain response's list.
/// usage.prompt_tokens_details.cached_tokens: prompt tokens the prefix cache supplied.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/generate.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/openai_api.hpp"
#include "glass/tokenizer.hpp"

namespace glass::serve::openai {

/// OpenAI's finish_reason for why generation stopped.
inline const char* finish_reason(StopReason r) {
    switch (r) {
        case StopReason::length:
        case StopReason::context_full: return "length";
        case StopReason::bos:
        case StopReason::eos:
        case StopReason::stop_string: return "stop";
        case StopReason::cancelled: return "cancelled";  // never answered as a completion: see the server
    }
    return "stop";
}

inline json usage(const RequestResult& r) {
    const int prompt = static_cast<int>(r.prompt_ids.size());
    const int completion = static_cast<int>(r.generated_ids.size());
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

/// Logprobs as OpenAI shapes them (see the top of this file), for generated tokens in order.
/// `prev`: the id before the first of `steps` (the prompt's last, or the last generated one);
/// `offset`: characters of the completion before the first of them (legacy text_offset).
inline json logprobs_object(bool chat, int top_n, const Tokenizer& tokenizer, int prev, std::span<const StepLogprobs> steps,
                            int offset = 0) {
    const auto bytes = [](const std::string& piece) {
        json b = json::array();
        for (char c : piece) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
        return b;
    };
    json out;
    if (chat) {
        json content = json::array();
        for (const StepLogprobs& step : steps) {
            const std::string piece = tokenizer.decode(prev, step.chosen.id);
            json top = json::array();
            for (size_t k = 0; k < step.top.size() && k < static_cast<size_t>(top_n); ++k) {
                const std::string alt = tokenizer.decode(prev, step.top[k].id);
                top.push_back({{"token", alt}, {"logprob", step.top[k].logprob}, {"bytes", bytes(alt)}});
            }
            content.push_back({{"token", piece}, {"logprob", step.chosen.logprob}, {"bytes", bytes(piece)}, {"top_logprobs", top}});
            prev = step.chosen.id;
        }
        out = {{"content", content}, {"refusal", nullptr}};
    } else {
        json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
        for (const StepLogprobs& step : steps) {
            const std::string piece = tokenizer.decode(prev, step.chosen.id);
            json top = json::object();  // {TOKEN: LP}; two ids with the same text keep the likelier
            for (size_t k = 0; k < step.top.size() && k < static_cast<size_t>(top_n); ++k) {
                const std::string alt = tokenizer.decode(prev, step.top[k].id);
                if (!top.contains(alt)) top[alt] = step.top[k].logprob;
            }
            if (!top.contains(piece)) top[piece] = step.chosen.logprob;  // the chosen token is always there
            tokens.push_back(piece);
            token_logprobs.push_back(step.chosen.logprob);
            top_logprobs.push_back(top);
            text_offset.push_back(offset);
            for (char c : piece) offset += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // characters: count lead bytes
            prev = step.chosen.id;
        }
        out = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
    }
    return out;
}

/// Hands a stream's logprobs out beside its text: each chunk carries the steps whose text lies
/// wholly in the text sent so far (counted in the bytes of the tokens' pieces); rest() gives the
/// last chunk every step not sent yet. Does nothing for a request that did not ask.
class LogprobsStream {
public:
    LogprobsStream(const CompletionRequest& req, const Tokenizer& tokenizer)
        : chat_(req.chat), wanted_(req.logprobs), top_n_(req.top_logprobs), tokenizer_(&tokenizer),
          prev_(req.prompt_ids.empty() ? 0 : req.prompt_ids.back()) {}

    /// Steps that arrived from the engine while the request runs, in order.
    void add(const std::vector<StepLogprobs>& steps) { pending_.insert(pending_.end(), steps.begin(), steps.end()); }
    /// The finished request's steps that have not arrived yet (its last ones come in the result only).
    void add_rest(const RequestResult& result) {
        for (size_t i = sent_ + pending_.size(); i < result.logprobs.size(); ++i) pending_.push_back(result.logprobs[i]);
    }

    /// The "logprobs" of a chunk that carries `text`: null when no step's text is complete yet.
    json for_text(const std::string& text) {
        if (!wanted_) return nullptr;
        text_bytes_ += text.size();
        size_t n = 0;
        for (int prev = prev_; n < pending_.size(); ++n) {
            const size_t piece = tokenizer_->decode(prev, pending_[n].chosen.id).size();
            if (covered_bytes_ + piece > text_bytes_) break;
            covered_bytes_ += piece;
            prev = pending_[n].chosen.id;
        }
        return take(n);
    }

    /// The last chunk's "logprobs": every step not sent yet (null when none).
    json rest() { return wanted_ ? take(pending_.size()) : json(nullptr); }

private:
    json take(size_t n) {
        if (n == 0) return nullptr;
        const std::span<const StepLogprobs> steps(pending_.data(), n);
        json j = logprobs_object(chat_, top_n_, *tokenizer_, prev_, steps, offset_);
        for (const StepLogprobs& s : steps) {  // the next chunk's text_offset starts after these
            for (char c : tokenizer_->decode(prev_, s.chosen.id)) offset_ += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
            prev_ = s.chosen.id;
        }
        sent_ += n;
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
        return j;
    }

    bool chat_;
    bool wanted_;
    int top_n_;
    const Tokenizer* tokenizer_;
    int prev_;                   // the id before the first pending step
    std::vector<StepLogprobs> pending_;
    size_t sent_ = 0;            // steps sent so far
    size_t text_bytes_ = 0;      // text sent so far
    size_t covered_bytes_ = 0;   // bytes of the pieces of the steps sent
    int offset_ = 0;             // characters of the pieces of the steps sent (text_offset)
};

/// The fields every response object and chunk of one request share.
struct ResponseHeader {
    std::string id;        ///< "cmpl-N" or "chatcmpl-N"
    std::int64_t created;  ///< Unix time
    std::string model;
};

/// The whole answer of a request that is not streamed.
inline json completion_response(const CompletionRequest& req, const ResponseHeader& h, const RequestResult& r,
                                const Tokenizer& tokenizer) {
    const json logprobs = req.logprobs ? logprobs_object(req.chat, req.top_logprobs, tokenizer, req.prompt_ids.back(), r.logprobs)
                                       : json(nullptr);
    json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason(r.stop_reason)}};
    if (req.chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    else choice["text"] = r.text;
    return {{"id", h.id},
            {"object", req.chat ? "chat.completion" : "text_completion"},
            {"created", h.created},
            {"model", h.model},
            {"choices", json::array({choice})},
            {"usage", usage(r)}};
}

/// One chunk of a stream: new text, or (finish != nullptr) the last one with the finish_reason.
/// A chat's first chunk (`first`) carries the role; `logprobs` those of the chunk's tokens
/// (LogprobsStream), or null.
inline json stream_chunk(const CompletionRequest& req, const ResponseHeader& h, const std::string& text,
                         const char* finish = nullptr, bool first = false, const json& logprobs = nullptr) {
    json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    if (req.chat) {
        json delta = json::object();
        if (first) delta = {{"role", "assistant"}, {"content", ""}};
        else if (!finish) delta["content"] = text;
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    json chunk = {{"id", h.id},
                  {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", h.created},
                  {"model", h.model},
                  {"choices", json::array({choice})}};
    if (req.include_usage) chunk["usage"] = nullptr;
    return chunk;
}

/// The chunk after the last one when stream_options.include_usage: no choices, the usage.
inline json usage_chunk(const CompletionRequest& req, const ResponseHeader& h, const RequestResult& r) {
    return {{"id", h.id},
            {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", h.created},
            {"model", h.model},
            {"choices", json::array()},
            {"usage", usage(r)}};
}

/// One server-sent event: `data: JSON`, then a blank line.
inline std::string sse(const json& j) { return "data: " + to_text(j) + "\n\n"; }
/// The event that ends a stream.
inline const char* const kSseDone = "data: [DONE]\n\n";

/// GET /v1/models/NAME's object; GET /v1/models lists it.
inline json model_object(const ServedModel& m) {
    return {{"id", m.name}, {"object", "model"}, {"created", m.created}, {"owned_by", "glass"}, {"max_model_len", m.context}};
}
inline json model_list(const ServedModel& m) { return {{"object", "list"}, {"data", json::array({model_object(m)})}}; }

}  // namespace glass::serve::openai
