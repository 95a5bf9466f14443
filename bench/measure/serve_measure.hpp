// bench/measure/serve_measure.hpp — what serving costs, measured: the experiments behind C16,
// C17, C18 and C20. The benchmarks' harness, not part of glass's library: the CMake target
// glass_serve_measure gives its folder to `glass serve-bench`, `glass loadgen` and examples 17, 19, 20.
//
// Each function drives a real Engine on some PagedBackend and times it with the wall clock; each
// figure is measured beside its baseline in the same run (the same function with one option flipped).
//
//   run_load               N requests, Poisson arrivals: throughput, TTFT/TPOT p50/p99, largest
//                          inter-token gap, KV memory held vs used (C17), prefix-cache hits
//   measure_decode_batch   B requests decoding together: decode tokens/s at batch B (C20)
//   measure_batch_speedup  batch B ÷ batch 1 from steps of the two taken in turn (C20)
//   measure_chat           a chat re-sending its history each turn: TTFT per turn (C16)
//   measure_stall          decoders running while a long prompt arrives: their largest gap (C18)
//
// Prompts are random token ids (BOS first): speed depends on how many tokens, not which. For
// models with random weights, glass::NumberTokenizer (glass/tokenize/number_tokenizer.hpp) stands
// in for a vocabulary.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "glass/fast/benchmark.hpp"  // stat_of
#include "glass/serve/engine.hpp"
#include "glass/tokenizer.hpp"

namespace serve_measure {

using glass::fail;
using glass::GenerateOptions;
using glass::ModelConfig;
using glass::Tokenizer;
using glass::serve::Engine;
using glass::serve::EngineOptions;
using glass::serve::PagedBackend;
using glass::serve::Request;
using glass::serve::RequestResult;
using glass::serve::StepReport;

/// The value below which a fraction q of the values fall (nearest rank); 0 for none.
inline double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

/// BOS, then n - 1 random ids from [3, vocab): a prompt of n tokens.
inline std::vector<int> random_prompt(int n, int vocab, std::mt19937& rng) {
    std::vector<int> ids = {1};
    std::uniform_int_distribution<int> id(3, vocab - 1);
    while (static_cast<int>(ids.size()) < n) ids.push_back(id(rng));
    return ids;
}

/// Greedy, exactly `n` new tokens (BOS/EOS do not stop it): a request of known length.
inline GenerateOptions fixed_length(int n) {
    GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = n;
    o.stop_on_bos = o.stop_on_eos = false;
    return o;
}

using SteadyClock = std::chrono::steady_clock;
inline double ms_between(SteadyClock::time_point a, SteadyClock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---- The load run ---------------------------------------------------------------------------

struct LoadSpec {
    int requests = 32;
    double rate_per_s = 4.0;        ///< Poisson arrivals; <= 0: all arrive at once
    int prompt_min = 16, prompt_max = 128;
    int gen_min = 16, gen_max = 64;
    int shared_prefix = 0;          ///< the first tokens every prompt shares (a system prompt)
    std::uint64_t seed = 1;
};

struct LoadResult {
    int requests = 0, generated_tokens = 0, prompt_tokens = 0, steps = 0;
    double wall_s = 0, throughput_tokens_per_s = 0;  ///< generated tokens / wall time
    double ttft_ms_p50 = 0, ttft_ms_p99 = 0, tpot_ms_p50 = 0, tpot_ms_p99 = 0, max_gap_ms = 0;
    std::int64_t kv_reserved_bytes = 0;  ///< at the busiest step: blocks held x block bytes
    std::int64_t kv_used_bytes = 0;      ///< at that step: positions that hold K/V x bytes per position
    std::int64_t max_length_reserved_bytes = 0;  ///< the same requests, one context window each
    int peak_running = 0;                ///< most requests held in the pool at once
    int max_length_fit = 0;              ///< requests of one context window each that fit in the pool
    int prefix_hit_tokens = 0;
    std::int64_t draft_proposed = 0, draft_accepted = 0;  ///< speculative decoding (EngineOptions::draft_k)
};

namespace detail {

// One planned request: when it arrives (seconds after the start), its prompt, how many tokens it generates.
struct PlannedRequest {
    double arrival_s;
    std::vector<int> prompt;
    int gen;
};

// The spec checked against what one request of this engine may hold.
inline void check_load_spec(const Engine& engine, const LoadSpec& spec) {
    if (spec.requests < 1) fail("load run needs at least one request, got ", spec.requests);
    if (spec.prompt_min < 1 || spec.prompt_max < spec.prompt_min || spec.gen_min < 1 || spec.gen_max < spec.gen_min)
        fail("prompt lengths ", spec.prompt_min, ":", spec.prompt_max, " and generation lengths ", spec.gen_min, ":",
             spec.gen_max, " must be ranges A:B with 1 <= A <= B");
    if (spec.prompt_max + spec.gen_max > engine.request_positions())
        fail("prompts of up to ", spec.prompt_max, " plus up to ", spec.gen_max, " new tokens exceed the ",
             engine.request_positions(), " positions one request may use");
    if (spec.shared_prefix < 0 || spec.shared_prefix > spec.prompt_min)
        fail("shared prefix of ", spec.shared_prefix, " tokens must be in [0, shortest prompt ", spec.prompt_min, "]");
}

// The requests, from the seed alone: Poisson arrivals, random lengths, the shared prefix copied in.
inline std::vector<PlannedRequest> plan_load(const LoadSpec& spec, int vocab_size) {
    std::mt19937 rng(static_cast<unsigned>(spec.seed));
    const std::vector<int> prefix = random_prompt(std::max(1, spec.shared_prefix), vocab_size, rng);
    std::vector<PlannedRequest> plan;
    double t = 0;
    for (int i = 0; i < spec.requests; ++i) {
        if (spec.rate_per_s > 0 && i > 0) t += std::exponential_distribution<double>(spec.rate_per_s)(rng);
        const int n = std::uniform_int_distribution<int>(spec.prompt_min, spec.prompt_max)(rng);
        std::vector<int> prompt = random_prompt(n, vocab_size, rng);
        std::copy(prefix.begin(), prefix.begin() + std::min<std::ptrdiff_t>(spec.shared_prefix, n), prompt.begin());
        plan.push_back({t, std::move(prompt), std::uniform_int_distribution<int>(spec.gen_min, spec.gen_max)(rng)});
    }
    return plan;
}

// Memory after a step: blocks held by live requests vs positions holding K/V; kept at the busiest step.
inline void record_memory(const Engine& engine, std::int64_t block_bytes, std::int64_t per_position, LoadResult& r) {
    int held = 0, running = 0;
    std::int64_t positions = 0;
    for (const Request* q : engine.scheduler().running()) {
        held += static_cast<int>(q->block_table.size());
        positions += q->computed;
        ++running;
    }
    const std::int64_t reserved = held * block_bytes;
    if (reserved > r.kv_reserved_bytes) {
        r.kv_reserved_bytes = reserved;
        r.kv_used_bytes = positions * per_position;
    }
    r.peak_running = std::max(r.peak_running, running);
}

// A finished request's counts and timings into the result (TTFT, TPOT lists for the percentiles).
inline void record_finished(const RequestResult& res, LoadResult& r, std::vector<double>& ttft, std::vector<double>& tpot) {
    r.generated_tokens += static_cast<int>(res.generated_ids.size());
    r.prefix_hit_tokens += res.cached_tokens;
    r.draft_proposed += res.draft_proposed;
    r.draft_accepted += res.draft_accepted;
    ttft.push_back(res.metrics.ttft_ms);
    if (res.generated_ids.size() > 1) tpot.push_back(res.metrics.tpot_ms);
    for (size_t k = 1; k < res.metrics.token_ms.size(); ++k)
        r.max_gap_ms = std::max(r.max_gap_ms, res.metrics.token_ms[k] - res.metrics.token_ms[k - 1]);
}

}  // namespace detail

/// Runs the spec's requests through `engine` in real time: each is added at its arrival time
/// (TTFT counts from then, also when a step was running), the engine steps while it has work.
inline LoadResult run_load(Engine& engine, const LoadSpec& spec) {
    const ModelConfig& c = engine.config();
    detail::check_load_spec(engine, spec);
    const std::vector<detail::PlannedRequest> plan = detail::plan_load(spec, c.vocab_size);

    LoadResult r;
    r.requests = spec.requests;
    const std::int64_t per_position = glass::kv_bytes_per_token(c, engine.backend().kv_type());
    const std::int64_t block_bytes = per_position * engine.blocks().block_size();
    std::vector<double> ttft, tpot;
    size_t next = 0, done = 0;
    const auto t0 = SteadyClock::now();
    const auto arrival_of = [&](const detail::PlannedRequest& p) {
        return t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(p.arrival_s));
    };
    while (done < plan.size()) {
        // Arrivals up to now join the engine, then one step (or a sleep until the next arrival).
        const double now_s = ms_between(t0, SteadyClock::now()) / 1000.0;
        for (; next < plan.size() && plan[next].arrival_s <= now_s; ++next) {
            engine.add_request_ids(plan[next].prompt, fixed_length(plan[next].gen), arrival_of(plan[next]));
            r.prompt_tokens += static_cast<int>(plan[next].prompt.size());
        }
        if (engine.has_unfinished()) {
            engine.step();
            ++r.steps;
            detail::record_memory(engine, block_bytes, per_position, r);
        } else if (next < plan.size()) {
            std::this_thread::sleep_until(arrival_of(plan[next]));
        }
        for (const RequestResult& res : engine.take_finished()) {
            ++done;
            detail::record_finished(res, r, ttft, tpot);
        }
    }
    // The summary: throughput, percentiles, what one context window per request would have held.
    r.wall_s = ms_between(t0, SteadyClock::now()) / 1000.0;
    r.throughput_tokens_per_s = r.wall_s > 0 ? r.generated_tokens / r.wall_s : 0.0;
    r.ttft_ms_p50 = percentile(ttft, 0.50);
    r.ttft_ms_p99 = percentile(ttft, 0.99);
    r.tpot_ms_p50 = percentile(tpot, 0.50);
    r.tpot_ms_p99 = percentile(tpot, 0.99);
    r.max_length_reserved_bytes = std::int64_t{r.peak_running} * c.seq_len * per_position;
    r.max_length_fit = engine.blocks().num_blocks() * engine.blocks().block_size() / c.seq_len;
    return r;
}

// ---- C20: decode throughput at batch B ------------------------------------------------------

struct BatchPoint {
    int batch = 0;
    double decode_tokens_per_s = 0;  ///< B tokens per step / step_ms
    double step_ms = 0;              ///< the median of the timed steps
    double mean_step_ms = 0;         ///< their mean: what the steps took together, delays included
    double min_step_ms = 0, max_step_ms = 0;
};

/// B requests with `prompt_len`-token prompts, prefilled, every one of them decoding: a batch
/// ready to be stepped, one timed decode step at a time, `steps` times at most (each request asks
/// for steps + 2 tokens: one sampled by its prefill, one by the warm-up step, then the timed ones).
class DecodingBatch {
public:
    DecodingBatch(PagedBackend& backend, const Tokenizer& tok, int batch, int steps, int prompt_len = 16,
                  std::uint64_t seed = 1)
        : batch_(batch), engine_(backend, tok, options(batch, steps, prompt_len)) {
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int b = 0; b < batch; ++b)
            engine_.add_request_ids(random_prompt(prompt_len, backend.config().vocab_size, rng), fixed_length(steps + 2));
        while (true) {  // until every request is decoding: its prompt done, one token sampled
            const StepReport warm = engine_.step();
            if (std::all_of(warm.batch.begin(), warm.batch.end(), [](const StepReport::Part& p) { return !p.prefill; }) &&
                static_cast<int>(warm.batch.size()) == batch)
                break;
        }
    }
    /// One step in which all B requests decode a token; its milliseconds.
    double timed_step() {
        const auto t0 = SteadyClock::now();
        const StepReport step = engine_.step();
        const double ms = ms_between(t0, SteadyClock::now());
        if (static_cast<int>(step.batch.size()) != batch_) fail("decode batch shrank to ", step.batch.size());
        return ms;
    }

private:
    static EngineOptions options(int batch, int steps, int prompt_len) {
        if (batch < 1 || steps < 1) fail("batch ", batch, " and steps ", steps, " must be >= 1");
        EngineOptions eo;
        eo.scheduler.max_running = batch;
        eo.scheduler.max_tokens_per_step = std::max(batch * prompt_len, batch);
        const int per_request = prompt_len + steps + 2;
        eo.num_blocks = batch * ((per_request + eo.block_size - 1) / eo.block_size);
        return eo;
    }
    int batch_;
    Engine engine_;
};

/// `steps` timed steps of a DecodingBatch of B. Tokens/s comes from the median step: on a
/// shared machine some steps wait while another job holds a core. On a 2-vCPU VM, stories110M's
/// shape, one sweep's batch-1 steps took 15.8-45.4 ms (median 21.8, mean 25.0) and its batch-16
/// steps 42.8-70.6 ms (median 45.1, mean 52.2). The median measures the batch rather than the
/// neighbour; the mean and the range are kept beside it.
inline BatchPoint measure_decode_batch(PagedBackend& backend, const Tokenizer& tok, int batch, int steps,
                                       int prompt_len = 16, std::uint64_t seed = 1) {
    DecodingBatch decoding(backend, tok, batch, steps, prompt_len, seed);
    std::vector<double> step_ms;  // [steps]
    for (int s = 0; s < steps; ++s) step_ms.push_back(decoding.timed_step());
    const glass::fast::Stat stat = glass::fast::stat_of(step_ms);
    return {.batch = batch, .decode_tokens_per_s = 1000.0 * batch / stat.median, .step_ms = stat.median,
            .mean_step_ms = stat.mean, .min_step_ms = stat.min, .max_step_ms = stat.max};
}

/// Batch B against batch 1 in the same seconds: a batch of one on `single` and a batch of B on
/// `batched` (two backends of the same model: an engine holds its backend's K/V pool), stepped in
/// turn, 1, B, 1, B, ..., `pairs` times. Pair i's speedup is (B / step_B[i]) / (1 / step_1[i]) =
/// B · step_1[i] / step_B[i]. A shared VM's slow phases last seconds, longer than a pair's two
/// steps, so both steps of a pair share one; measure_decode_batch's points, taken a batch at a
/// time, can put batch 1 in a fast phase and batch 16 in a slow one (RESULTS.md: 3.8x in one sweep
/// of such an hour, 9.5x in another). The median speedup and its range, and each pair's steps.
struct BatchSpeedup {
    glass::fast::Stat speedup;
    std::vector<double> single_ms, batched_ms;  // [pairs], pair i's two steps
};
inline BatchSpeedup measure_batch_speedup(PagedBackend& single, PagedBackend& batched, const Tokenizer& tok, int batch,
                                          int pairs, int prompt_len = 16) {
    DecodingBatch one(single, tok, 1, pairs, prompt_len), many(batched, tok, batch, pairs, prompt_len);
    BatchSpeedup r;
    std::vector<double> speedups;  // [pairs]
    for (int i = 0; i < pairs; ++i) {
        r.single_ms.push_back(one.timed_step());
        r.batched_ms.push_back(many.timed_step());
        speedups.push_back(batch * r.single_ms.back() / r.batched_ms.back());
    }
    r.speedup = glass::fast::stat_of(speedups);
    return r;
}

// ---- C16: a chat that re-sends its history ---------------------------------------------------

struct ChatTurn {
    int turn = 0;
    int prompt_tokens = 0;  ///< the whole history so far
    int cached_tokens = 0;  ///< of them, served by the prefix cache
    double ttft_ms = 0;
};

/// `turns` turns on one engine: each adds `user_tokens` to the history, sends all of it, and
/// appends the `reply_tokens`-token reply. Run it with prefix caching on and off to compare.
inline std::vector<ChatTurn> measure_chat(PagedBackend& backend, const Tokenizer& tok, const EngineOptions& options,
                                          int turns, int user_tokens, int reply_tokens, std::uint64_t seed = 1) {
    Engine engine(backend, tok, options);
    if (turns * (user_tokens + reply_tokens) + 1 > engine.request_positions())
        fail(turns, " turns of ", user_tokens, " + ", reply_tokens, " tokens exceed the ", engine.request_positions(),
             " positions one request may use");
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::vector<int> history = {1};
    std::vector<ChatTurn> out;
    for (int t = 1; t <= turns; ++t) {
        const std::vector<int> user = random_prompt(user_tokens + 1, backend.config().vocab_size, rng);
        history.insert(history.end(), user.begin() + 1, user.end());
        engine.add_request_ids(history, fixed_length(reply_tokens));
        const RequestResult r = engine.run_to_completion().at(0);
        out.push_back({t, static_cast<int>(history.size()), r.cached_tokens, r.metrics.ttft_ms});
        history.insert(history.end(), r.generated_ids.begin(), r.generated_ids.end());
    }
    return out;
}

// ---- C18: a long prompt arrives while others decode ------------------------------------------

struct StallResult {
    double max_gap_ms = 0;          ///< the decoders' largest gap between two of their tokens
    double mean_gap_ms = 0;
    double p50_gap_ms = 0, p99_gap_ms = 0;  ///< the decoders' gaps: median and 99th percentile
    double long_prompt_ttft_ms = 0;
    double throughput_tokens_per_s = 0;  ///< tokens computed (prompt + decoded) / wall time
    int steps = 0;
    int long_prompt_steps = 0;     ///< steps that computed part of the long prompt
    int largest_step_tokens = 0;   ///< most positions one step computed
    int decoder_tokens_min = 0, decoder_tokens_max = 0;  ///< tokens each decoder got in the run
};

/// `decoders` requests decode; once all are decoding, a `long_prompt`-token prompt arrives. The
/// run ends `after` steps after the long prompt's first token; the decoders are then cancelled.
/// (With remote prefill in `options`, the prompts are computed by the prefill worker.)
inline StallResult measure_stall(PagedBackend& backend, const Tokenizer& tok, const EngineOptions& options,
                                 int decoders, int long_prompt, int after = 4, std::uint64_t seed = 1) {
    Engine engine(backend, tok, options);
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int room = engine.request_positions() - 16;
    std::vector<int> ids;
    for (int d = 0; d < decoders; ++d) ids.push_back(engine.add_request_ids(random_prompt(16, backend.config().vocab_size, rng), fixed_length(room)));
    StallResult r;
    std::int64_t computed = 0;
    int long_id = -1;
    const auto t0 = SteadyClock::now();
    auto step = [&] {
        const StepReport s = engine.step();
        int tokens = 0;
        for (const StepReport::Part& p : s.batch) {
            tokens += p.n;
            if (p.id == long_id && p.prefill) ++r.long_prompt_steps;
        }
        computed += tokens;
        r.largest_step_tokens = std::max(r.largest_step_tokens, tokens);
        ++r.steps;
        return s;
    };
    for (int s = 0; s < 3 || engine.awaiting_kv() > 0; ++s) step();  // every decoder is past its prompt
    long_id = engine.add_request_ids(random_prompt(long_prompt, backend.config().vocab_size, rng), fixed_length(after + 1));
    while (engine.request(long_id) != nullptr) step();
    for (int id : ids) engine.cancel(id);
    r.throughput_tokens_per_s = 1000.0 * static_cast<double>(computed) / ms_between(t0, SteadyClock::now());
    std::vector<double> gaps;
    for (const RequestResult& res : engine.take_finished()) {
        if (res.id == long_id) {
            r.long_prompt_ttft_ms = res.metrics.ttft_ms;
            continue;
        }
        const int got = static_cast<int>(res.generated_ids.size());
        r.decoder_tokens_min = r.decoder_tokens_max == 0 ? got : std::min(r.decoder_tokens_min, got);
        r.decoder_tokens_max = std::max(r.decoder_tokens_max, got);
        for (size_t k = 1; k < res.metrics.token_ms.size(); ++k) {
            const double gap = res.metrics.token_ms[k] - res.metrics.token_ms[k - 1];
            r.max_gap_ms = std::max(r.max_gap_ms, gap);
            gaps.push_back(gap);
        }
    }
    double sum = 0;
    for (const double g : gaps) sum += g;
    r.mean_gap_ms = gaps.empty() ? 0.0 : sum / static_cast<double>(gaps.size());
    r.p50_gap_ms = percentile(gaps, 0.50);
    r.p99_gap_ms = percentile(gaps, 0.99);
    return r;
}

}  // namespace serve_measure
