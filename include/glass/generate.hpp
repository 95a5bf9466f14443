/// \file
/// \brief glass/generate.hpp — journey steps 6–8 as one loop: prefill once, then decode until done.
/// ```text
/// In:  a Session (model + KV cache on some backend), its tokenizer, a prompt, options.
/// Out: the generated ids and text, why generation stopped, timings (when each token was chosen)
///      and, if asked, log-probabilities. Text is handed to `on_text` as soon as it is complete
///      (whole UTF-8 characters, never part of a stop string).
///
///   prompt_ids = encode(prompt)             BOS first
///   logits = prefill(prompt_ids)             every prompt position at once; cache = n_prompt rows
///   loop:
///     next = sample(logits)                  the first pass ends TTFT; next has no K/V yet
///     stop if next is BOS (llama2.c's rule) or EOS, or a stop string appeared, or enough tokens
///     logits = decode(next)                  writes next's K/V at position n_prompt + i
///
/// Log-probabilities (options.logprobs, options.top_logprobs): at each step, ln p of the chosen
/// token and of the top_logprobs most likely tokens, where p = softmax(raw logits), temperature 1,
/// before any truncation: what the model predicted, whatever the sampling settings. So a token
/// top-p would drop still shows its logprob, and a greedy pick's is not 0. (OpenAI-style
/// logprobs / top_logprobs.)
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glass/metrics.hpp"
#include "glass/sampling.hpp"
#include "glass/session.hpp"
#include "glass/streaming.hpp"
#include "glass/tokenizer.hpp"

namespace glass {

struct GenerateOptions {
    int max_new_tokens = 256;        ///< generated tokens at most (a stop token counts)
    SamplingParams sampling;
    std::uint64_t seed = 42;
    std::vector<std::string> stop_strings;
    bool stop_on_bos = true;         ///< llama2.c ends a story when the model emits BOS
    bool stop_on_eos = true;
    bool logprobs = false;           ///< record each generated token's log-probability
    int top_logprobs = 0;            ///< 0..20: also the this-many most likely tokens per step (implies logprobs)
    /// The session's KV cache already holds the first this-many prompt positions (a chat's
    /// earlier turns, glass chat): the cache is rewound to them and only the rest is prefilled.
    /// 0: the session starts afresh.
    int cached_prompt_tokens = 0;
};

/// The most alternatives a step can report (OpenAI's limit for top_logprobs).
constexpr int kMaxTopLogprobs = 20;

enum class StopReason { length, context_full, bos, eos, stop_string, cancelled };

inline const char* to_string(StopReason r) {
    switch (r) {
        case StopReason::length: return "length";
        case StopReason::context_full: return "context_full";
        case StopReason::bos: return "bos";
        case StopReason::eos: return "eos";
        case StopReason::stop_string: return "stop_string";
        case StopReason::cancelled: return "cancelled";
    }
    return "?";
}

/// A token and its log-probability ln p, p = softmax(raw logits) at temperature 1.
struct TokenLogprob {
    int id = 0;
    double logprob = 0;
};

/// What the model predicted at one generated position.
struct StepLogprobs {
    TokenLogprob chosen;            ///< the token generated here
    std::vector<TokenLogprob> top;  ///< the top_logprobs most likely, most likely first (ties: lower id)
};

struct GenerateResult {
    std::vector<int> prompt_ids;
    std::vector<int> generated_ids;  ///< after the prompt; includes a final BOS/EOS that stopped it
    std::string text;                ///< generated text only, as streamed (stop string excluded)
    StopReason stop_reason = StopReason::length;
    GenerationMetrics metrics;
    std::vector<StepLogprobs> logprobs;  ///< one per generated id, if asked for; else empty
};

/// log-softmax of the raw logits [vocab], in double: `ln p_i = l_i - max - ln sum_j exp(l_j - max)`.
inline std::vector<double> log_probabilities(std::span<const float> logits) {
    if (logits.empty()) fail("log-probabilities of an empty vocabulary");
    double max_value = logits[0];
    for (float l : logits) max_value = std::max(max_value, static_cast<double>(l));
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_value);
    const double log_sum = max_value + std::log(sum);
    std::vector<double> logprobs(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) logprobs[i] = static_cast<double>(logits[i]) - log_sum;
    return logprobs;
}

/// One step's report: the chosen token's logprob and the k most likely tokens, descending.
inline StepLogprobs step_logprobs(std::span<const float> logits, int chosen, int k) {
    const std::vector<double> logprobs = log_probabilities(logits);
    StepLogprobs step{{chosen, logprobs.at(static_cast<size_t>(chosen))}, {}};
    std::vector<int> ids(logprobs.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    const auto more_likely = [&](int a, int b) {
        const double la = logprobs[static_cast<size_t>(a)], lb = logprobs[static_cast<size_t>(b)];
        return la > lb || (la == lb && a < b);
    };
    const size_t n = std::min(ids.size(), static_cast<size_t>(std::max(k, 0)));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), more_likely);
    for (size_t i = 0; i < n; ++i) step.top.push_back({ids[i], logprobs[static_cast<size_t>(ids[i])]});
    return step;
}

/// What happens to each token once it is chosen, for one request: the stop rules and the text
/// that streams out. generate() below and the serving engine (serve/engine.hpp) both feed their
/// tokens through one of these, so they stop and stream identically.
///   push(id) records id, then stops on BOS (llama2.c's rule) or EOS without showing it (or on
///   any end-of-generation id the model names: `<|eot_id|>`, `<|im_end|>`, `<end_of_turn>`); else
///   decodes it after the previous token, lets out only whole UTF-8 characters and nothing that
///   could still become a stop string, and stops on a stop string, on max_new_tokens, or when the
///   cache is full (`positions_cached` >= `context`). On stopping (but not on a stop string) the
///   held-back text is let out too.
class TokenOutput {
public:
    TokenOutput(const Tokenizer& tokenizer, const GenerateOptions& options, int last_prompt_id)
        : tokenizer_(&tokenizer), options_(&options), prev_(last_prompt_id), stop_filter_(options.stop_strings) {}

    /// Takes the token just chosen; returns the text that may be shown now (often empty).
    std::string push(int id, int positions_cached, int context) {
        if (done_) fail("token ", id, " pushed after the output stopped (", to_string(reason_), ")");
        generated_.push_back(id);
        std::string out;
        if (options_->stop_on_bos && id == tokenizer_->bos_id()) stop(StopReason::bos);
        else if (options_->stop_on_eos && tokenizer_->ends_generation(id)) stop(StopReason::eos);  // EOS, <|im_end|> ...
        else {
            out = stop_filter_.push(utf8_.push(tokenizer_->decode(prev_, id)));
            prev_ = id;
            if (stop_filter_.stopped()) stop(StopReason::stop_string);
            else if (static_cast<int>(generated_.size()) >= options_->max_new_tokens) stop(StopReason::length);
            else if (positions_cached >= context) stop(StopReason::context_full);
        }
        if (done_ && reason_ != StopReason::stop_string) out += stop_filter_.push(utf8_.finish()) + stop_filter_.finish();
        text_ += out;
        return out;
    }

    /// Ends the output early (a cancelled request); nothing more is shown.
    void cancel() {
        if (!done_) stop(StopReason::cancelled);
    }

    bool done() const { return done_; }
    StopReason stop_reason() const { return reason_; }
    const std::vector<int>& generated_ids() const { return generated_; }
    const std::string& text() const { return text_; }  ///< everything push() returned so far

private:
    void stop(StopReason r) {
        done_ = true;
        reason_ = r;
    }

    const Tokenizer* tokenizer_;
    const GenerateOptions* options_;
    int prev_;
    Utf8Stream utf8_;
    StopStringFilter stop_filter_;
    std::vector<int> generated_;
    std::string text_;
    bool done_ = false;
    StopReason reason_ = StopReason::length;
};

/// TTFT, TPOT and rates from the times each token was chosen (m.token_ms, from the request's
/// start): TTFT is the first; TPOT the mean gap between the later ones, (last - first) / (n - 1).
inline void finish_metrics(GenerationMetrics& m, int n_prompt) {
    m.prompt_tokens = n_prompt;
    m.generated_tokens = static_cast<int>(m.token_ms.size());
    if (m.token_ms.empty()) return;
    m.ttft_ms = m.token_ms.front();
    m.total_ms = m.token_ms.back();
    m.tpot_ms = m.generated_tokens > 1 ? (m.total_ms - m.ttft_ms) / (m.generated_tokens - 1) : 0.0;
    m.tokens_per_s = m.total_ms > 0 ? 1000.0 * m.generated_tokens / m.total_ms : 0.0;
    m.decode_tokens_per_s = m.tpot_ms > 0 ? 1000.0 / m.tpot_ms : 0.0;
    m.prefill_tokens_per_s = m.ttft_ms > 0 ? 1000.0 * n_prompt / m.ttft_ms : 0.0;
}

/// llama2.c's `-n steps` counts positions including the prompt; this many tokens get generated.
inline int new_tokens_for_steps(int steps, int n_prompt) { return std::max(0, steps - n_prompt + 1); }

/// A tokenizer for another vocabulary cannot drive the model: refused, naming both sizes.
inline void check_same_vocabulary(const Tokenizer& tokenizer, const ModelConfig& config) {
    if (tokenizer.vocab_size() != config.vocab_size)
        fail("tokenizer has ", tokenizer.vocab_size(), " pieces but the model's vocabulary has ", config.vocab_size);
}

/// What no generation can run, refused before any pass and naming the value: bad options, a
/// tokenizer for another vocabulary, an empty prompt, an id outside the vocabulary, a prompt
/// longer than the context window. generate() and the serving engine (serve/engine.hpp) both use it.
inline void check_generate_request(const ModelConfig& config, const Tokenizer& tokenizer, const GenerateOptions& options,
                                   std::span<const int> prompt_ids) {
    validate(options.sampling);
    if (options.max_new_tokens < 0) fail("max new tokens must be >= 0, got ", options.max_new_tokens);
    if (options.top_logprobs < 0 || options.top_logprobs > kMaxTopLogprobs)
        fail("top logprobs must be in [0, ", kMaxTopLogprobs, "], got ", options.top_logprobs);
    check_same_vocabulary(tokenizer, config);
    if (prompt_ids.empty()) fail("a request needs at least one prompt token");
    for (int id : prompt_ids)
        if (id < 0 || id >= config.vocab_size) fail("token id ", id, " is outside the vocabulary [0, ", config.vocab_size, ")");
    if (static_cast<std::int64_t>(prompt_ids.size()) > config.seq_len)
        fail("prompt of ", prompt_ids.size(), " tokens is longer than the context window of ", config.seq_len);
}

/// The same for a request on `session`, whose cached prompt tokens must be positions the session holds.
inline void check_generate_request(const Session& session, const Tokenizer& tokenizer, const GenerateOptions& options,
                                   std::span<const int> prompt_ids) {
    check_generate_request(session.config(), tokenizer, options, prompt_ids);
    // At least the last prompt position is computed: its logits choose the first token.
    if (options.cached_prompt_tokens < 0 || options.cached_prompt_tokens >= static_cast<int>(prompt_ids.size()) ||
        options.cached_prompt_tokens > session.position())
        fail("cached prompt tokens must be in [0, ", std::min<std::int64_t>(session.position(), prompt_ids.size() - 1),
             "] (the session caches ", session.position(), " positions, the prompt has ", prompt_ids.size(), "), got ",
             options.cached_prompt_tokens);
}

/// A result holding the prompt and what each token costs to compute, before any pass.
inline GenerateResult new_result(const Session& session, std::vector<int> prompt_ids) {
    GenerateResult r;
    r.prompt_ids = std::move(prompt_ids);
    r.metrics.prompt_tokens = static_cast<int>(r.prompt_ids.size());
    r.metrics.kv_bytes_per_token = kv_bytes_per_token(session.config(), session.kv_type());
    r.metrics.weight_bytes_per_token = session.weight_bytes();
    return r;
}

/// generate() for a prompt that is already token ids (BOS included if wanted): the loop itself.
/// Timings are measured from `t0`, the request's start (by default: now).
inline GenerateResult generate_from_ids(Session& session, const Tokenizer& tokenizer, std::vector<int> prompt_ids,
                                        const GenerateOptions& options,
                                        const std::function<void(std::string_view)>& on_text = {},
                                        std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now()) {
    using clock = std::chrono::steady_clock;
    const auto ms_since_start = [t0] { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
    check_generate_request(session, tokenizer, options, prompt_ids);
    const ModelConfig& config = session.config();

    GenerateResult r = new_result(session, std::move(prompt_ids));
    GenerationMetrics& m = r.metrics;
    const int n_prompt = m.prompt_tokens;
    if (options.max_new_tokens == 0) return r;

    Llama2cRng rng(options.seed);
    TokenOutput output(tokenizer, options, r.prompt_ids.back());
    const bool want_logprobs = options.logprobs || options.top_logprobs > 0;

    const int cached = options.cached_prompt_tokens;  // positions whose K/V the session kept
    if (cached > 0) session.rewind(cached);
    else session.reset();
    // [vocab], the last prompt position
    std::span<const float> logits = session.prefill(std::span<const int>(r.prompt_ids).subspan(static_cast<size_t>(cached)));
    while (true) {
        const int next = sample(logits, options.sampling, rng);
        m.token_ms.push_back(ms_since_start());  // the first one is TTFT
        if (want_logprobs) r.logprobs.push_back(step_logprobs(logits, next, options.top_logprobs));
        const std::string text = output.push(next, session.position(), config.seq_len);
        if (!text.empty() && on_text) on_text(text);
        if (output.done()) break;
        logits = session.decode(next);  // next's K/V enter the cache at position n_prompt + i
    }
    r.generated_ids = output.generated_ids();
    r.text = output.text();
    r.stop_reason = output.stop_reason();
    finish_metrics(m, n_prompt);
    m.prefill_tokens_per_s = m.ttft_ms > 0 ? 1000.0 * (n_prompt - cached) / m.ttft_ms : 0.0;  // the computed ones
    return r;
}

/// The whole request: encode the prompt (BOS first when the tokenizer says so), then generate_from_ids(). Timings include
/// the tokenization.
inline GenerateResult generate(Session& session, const Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options,
                               const std::function<void(std::string_view)>& on_text = {}) {
    const auto t0 = std::chrono::steady_clock::now();  // the request starts: every timing is measured from here
    return generate_from_ids(session, tokenizer, tokenizer.encode(prompt, tokenizer.adds_bos(), /*add_eos=*/false),
                             options, on_text, t0);
}

}  // namespace glass
