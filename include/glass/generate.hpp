/// \file
/// \brief glass/generate.hpp — journey steps 6–8 as one loop: prefill once, then decode until done.
/// ```text
/// In:  a Session (model + KV cache on some backend), its tokenizer, a prompt, options.
/// Out: the generated ids and text, why generation stopped, and timings. Text is handed to
///      `on_text` as soon as it is complete (whole UTF-8 characters, never part of a stop string).
///
///   prompt_ids = encode(prompt)             BOS first
///   logits = prefill(prompt_ids)             every prompt position at once; cache = n_prompt rows
///   next = sample(logits)                    first token (TTFT ends here); it has no K/V yet
///   loop:
///     stop if next is BOS (llama2.c's rule) or EOS, or a stop string appeared, or enough tokens
///     logits = decode(next)                  writes next's K/V at position n_prompt + i
///     next = sample(logits)
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
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
};

enum class StopReason { length, context_full, bos, eos, stop_string };

inline const char* to_string(StopReason r) {
    switch (r) {
        case StopReason::length: return "length";
        case StopReason::context_full: return "context_full";
        case StopReason::bos: return "bos";
        case StopReason::eos: return "eos";
        case StopReason::stop_string: return "stop_string";
    }
    return "?";
}

struct GenerateResult {
    std::vector<int> prompt_ids;
    std::vector<int> generated_ids;  ///< after the prompt; includes a final BOS/EOS that stopped it
    std::string text;                ///< generated text only, as streamed (stop string excluded)
    StopReason stop_reason = StopReason::length;
    GenerationMetrics metrics;
};

/// llama2.c's `-n steps` counts positions including the prompt; this many tokens get generated.
inline int new_tokens_for_steps(int steps, int n_prompt) { return std::max(0, steps - n_prompt + 1); }

inline GenerateResult generate(Session& session, const Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options,
                               const std::function<void(std::string_view)>& on_text = {}) {
    using clock = std::chrono::steady_clock;
    const auto ms_since = [](clock::time_point t0) {
        return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    };
    validate(options.sampling);
    if (options.max_new_tokens < 0) fail("max new tokens must be >= 0, got ", options.max_new_tokens);
    const ModelConfig& config = session.config();
    if (tokenizer.vocab_size() != config.vocab_size)
        fail("tokenizer has ", tokenizer.vocab_size(), " pieces but the model's vocabulary has ",
             config.vocab_size);

    const auto t0 = clock::now();
    GenerateResult r;
    r.prompt_ids = tokenizer.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const int n_prompt = static_cast<int>(r.prompt_ids.size());
    if (n_prompt > config.seq_len)
        fail("prompt of ", n_prompt, " tokens is longer than the context window of ", config.seq_len);
    r.metrics.prompt_tokens = n_prompt;
    r.metrics.kv_bytes_per_token = config.kv_bytes_per_token();
    r.metrics.weight_bytes_per_token = session.weight_bytes();
    if (options.max_new_tokens == 0) return r;

    Llama2cRng rng(options.seed);
    Utf8Stream utf8_stream;
    StopStringFilter stop_filter(options.stop_strings);
    const auto emit = [&](const std::string& text) {
        if (text.empty()) return;
        r.text += text;
        if (on_text) on_text(text);
    };

    session.reset();
    int next = sample(session.prefill(r.prompt_ids), options.sampling, rng);
    r.metrics.ttft_ms = ms_since(t0);
    int prev = r.prompt_ids.back();
    double last_token_ms = r.metrics.ttft_ms;
    while (true) {
        r.generated_ids.push_back(next);
        last_token_ms = ms_since(t0);
        if (options.stop_on_bos && next == tokenizer.bos_id()) { r.stop_reason = StopReason::bos; break; }
        if (options.stop_on_eos && next == tokenizer.eos_id()) { r.stop_reason = StopReason::eos; break; }
        emit(stop_filter.push(utf8_stream.push(tokenizer.decode(prev, next))));
        if (stop_filter.stopped()) { r.stop_reason = StopReason::stop_string; break; }
        if (static_cast<int>(r.generated_ids.size()) >= options.max_new_tokens) {
            r.stop_reason = StopReason::length;
            break;
        }
        if (session.position() >= config.seq_len) { r.stop_reason = StopReason::context_full; break; }
        const std::span<const float> logits = session.decode(next);
        prev = next;
        next = sample(logits, options.sampling, rng);
    }
    if (!stop_filter.stopped()) emit(stop_filter.push(utf8_stream.finish()) + stop_filter.finish());

    GenerationMetrics& m = r.metrics;
    m.generated_tokens = static_cast<int>(r.generated_ids.size());
    m.total_ms = last_token_ms;
    m.tpot_ms = m.generated_tokens > 1 ? (m.total_ms - m.ttft_ms) / (m.generated_tokens - 1) : 0.0;
    m.tokens_per_s = m.total_ms > 0 ? 1000.0 * m.generated_tokens / m.total_ms : 0.0;
    m.decode_tokens_per_s = m.tpot_ms > 0 ? 1000.0 / m.tpot_ms : 0.0;
    m.prefill_tokens_per_s = m.ttft_ms > 0 ? 1000.0 * n_prompt / m.ttft_ms : 0.0;
    return r;
}

}  // namespace glass
