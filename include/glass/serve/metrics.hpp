/// \file
/// \brief glass/serve/metrics.hpp — what the server counts (GET /metrics, Prometheus text) and what its live page shows (GET /v1/engine/state).
/// ```text
/// Two views of a running server, both filled in by the engine thread (engine_thread.hpp), the
/// only thread that sees every step and every result, and read by HTTP handlers as a copy taken
/// under a mutex (so a reader never sees half an update):
///
///   ServerMetrics   counters, histograms and gauges since the server started, rendered as
///                   Prometheus text format 0.0.4 by render_prometheus():
///     glass_requests_total{outcome}          stop | length | cancelled | error | rejected
///     glass_prompt_tokens_total              prompt tokens of requests the engine ran
///     glass_generation_tokens_total          tokens they generated (usage.completion_tokens)
///     glass_prefix_cache_hit_tokens_total    prompt tokens served from the prefix cache
///     glass_time_to_first_token_seconds      histogram, one observation per request with a token
///     glass_time_per_output_token_seconds    histogram, one per request with two tokens or more
///     glass_requests_running / _waiting      gauges, after the engine thread's latest step
///     glass_kv_blocks_total / _used / _free / _cached    gauges: used + free = total; free
///                                            includes the cached ones (ref count 0, still findable)
///     glass_engine_steps_total               forward passes so far
///
///   EngineState     the last kRecentSteps steps (who decoded, who prefilled which chunk
///                   [start, start + n), who waited, who was preempted), the block pool block by
///                   block (ref count, owners, cached), the live requests, and the last
///                   kRecentFinished finished ones with TTFT and TPOT; engine_state_json() makes
///                   the JSON of GET /v1/engine/state, which the live page (GET /) polls.
///
/// Outcomes: a request refused before it reached the engine (4xx, or 503 for a full queue or a
/// shutdown) is "rejected" (counted by the HTTP layer); one the engine refused or failed is
/// "error"; one cancelled (client gone, shutdown) is "cancelled"; the others carry their
/// finish_reason: "stop" (EOS, BOS, a stop string) or "length" (max_tokens, a full context).
/// ```
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/serve/engine.hpp"

namespace glass::serve {

// ---------------------------------------------------------------------------------------------
// Counters and histograms: GET /metrics
// ---------------------------------------------------------------------------------------------

/// A Prometheus histogram: how many observations fell at or below each bound.
struct Histogram {
    std::vector<double> bounds;         ///< upper bounds of the buckets, increasing; +Inf is implied
    std::vector<std::uint64_t> counts;  ///< [bounds + 1] observations per bucket, NOT cumulative; the last is above every bound
    double sum = 0;                     ///< of all observations
    std::uint64_t count = 0;            ///< observations

    explicit Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

    void observe(double value) {
        size_t bucket = 0;
        while (bucket < bounds.size() && value > bounds[bucket]) ++bucket;  // the first bound >= value
        ++counts[bucket];
        sum += value;
        ++count;
    }
};

enum class Outcome { stop, length, cancelled, error, rejected };
inline constexpr int kOutcomes = 5;

inline const char* to_string(Outcome o) {
    switch (o) {
        case Outcome::stop: return "stop";
        case Outcome::length: return "length";
        case Outcome::cancelled: return "cancelled";
        case Outcome::error: return "error";
        case Outcome::rejected: return "rejected";
    }
    return "?";
}

/// The outcome of a request the engine ran: its finish_reason (as openai_api.hpp's), or cancelled.
inline Outcome outcome_of(StopReason r) {
    switch (r) {
        case StopReason::length:
        case StopReason::context_full: return Outcome::length;
        case StopReason::bos:
        case StopReason::eos:
        case StopReason::stop_string: return Outcome::stop;
        case StopReason::cancelled: return Outcome::cancelled;
    }
    return Outcome::stop;
}

struct ServerMetrics {
    // Counters: only ever grow.
    std::array<std::uint64_t, kOutcomes> requests{};  ///< [Outcome] requests by outcome
    std::uint64_t prompt_tokens = 0;
    std::uint64_t generation_tokens = 0;
    std::uint64_t prefix_cache_hit_tokens = 0;
    std::uint64_t engine_steps = 0;
    // Seconds. Buckets from 1 ms (a tiny model's whole prefill) to half a minute (a long queue).
    Histogram time_to_first_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram time_per_output_token{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
    // Gauges: the state after the engine thread's latest step.
    int requests_running = 0;
    int requests_waiting = 0;
    int kv_blocks_total = 0;
    int kv_blocks_used = 0;    ///< held by a request (ref count at least 1)
    int kv_blocks_free = 0;    ///< ref count 0 (total - used), cached ones included
    int kv_blocks_cached = 0;  ///< free, but still holding a cached prefix a request may hit
};

/// Counts one request the engine has finished (any outcome but rejected).
inline void count_finished(ServerMetrics& m, const RequestResult& r, Outcome outcome) {
    ++m.requests[static_cast<size_t>(outcome)];
    m.prompt_tokens += r.prompt_ids.size();
    m.generation_tokens += r.generated_ids.size();
    m.prefix_cache_hit_tokens += static_cast<std::uint64_t>(r.cached_tokens);
    if (r.metrics.generated_tokens >= 1) m.time_to_first_token.observe(r.metrics.ttft_ms / 1000.0);
    if (r.metrics.generated_tokens >= 2) m.time_per_output_token.observe(r.metrics.tpot_ms / 1000.0);
}

/// The gauges of the block pool, read from the block manager.
inline void count_blocks(ServerMetrics& m, const BlockManager& blocks) {
    m.kv_blocks_total = blocks.num_blocks();
    m.kv_blocks_free = blocks.num_free();
    m.kv_blocks_used = m.kv_blocks_total - m.kv_blocks_free;
    m.kv_blocks_cached = 0;
    for (int b = 0; b < blocks.num_blocks(); ++b) m.kv_blocks_cached += blocks.block(b).ref_count == 0 && blocks.block(b).cached;
}

namespace detail {

inline std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

inline void header(std::string& out, const char* name, const char* type, const char* help) {
    out += "# HELP " + std::string(name) + " " + help + "\n";
    out += "# TYPE " + std::string(name) + " " + type + "\n";
}

inline void sample(std::string& out, const std::string& name, double value) {
    out += name + " " + number_text(value) + "\n";
}

inline void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    std::uint64_t cumulative = 0;  // Prometheus buckets count everything at or below their bound
    for (size_t i = 0; i < h.counts.size(); ++i) {
        cumulative += h.counts[i];
        const std::string le = i < h.bounds.size() ? number_text(h.bounds[i]) : "+Inf";
        sample(out, std::string(name) + "_bucket{le=\"" + le + "\"}", static_cast<double>(cumulative));
    }
    sample(out, std::string(name) + "_sum", h.sum);
    sample(out, std::string(name) + "_count", static_cast<double>(h.count));
}

}  // namespace detail

/// The metrics as Prometheus text format 0.0.4 (serve it as "text/plain; version=0.0.4").
inline std::string render_prometheus(const ServerMetrics& m) {
    using detail::header, detail::sample;
    std::string out;
    header(out, "glass_requests_total", "counter",
           "Requests by outcome: stop, length (their finish_reason), cancelled (client gone or shutdown), "
           "error (the engine refused or failed them), rejected (refused before the engine: 4xx, 503).");
    for (int o = 0; o < kOutcomes; ++o)
        sample(out, std::string("glass_requests_total{outcome=\"") + to_string(static_cast<Outcome>(o)) + "\"}",
               static_cast<double>(m.requests[static_cast<size_t>(o)]));
    header(out, "glass_prompt_tokens_total", "counter", "Prompt tokens of the requests the engine ran.");
    sample(out, "glass_prompt_tokens_total", static_cast<double>(m.prompt_tokens));
    header(out, "glass_generation_tokens_total", "counter", "Tokens generated (usage.completion_tokens summed).");
    sample(out, "glass_generation_tokens_total", static_cast<double>(m.generation_tokens));
    header(out, "glass_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.");
    sample(out, "glass_prefix_cache_hit_tokens_total", static_cast<double>(m.prefix_cache_hit_tokens));
    header(out, "glass_engine_steps_total", "counter", "Engine steps (forward passes over a batch).");
    sample(out, "glass_engine_steps_total", static_cast<double>(m.engine_steps));
    detail::histogram(out, "glass_time_to_first_token_seconds",
                      "Arrival to first token, one observation per request that produced a token.", m.time_to_first_token);
    detail::histogram(out, "glass_time_per_output_token_seconds",
                      "Mean time between a request's tokens after the first, one observation per request with 2+ tokens.",
                      m.time_per_output_token);
    header(out, "glass_requests_running", "gauge", "Requests in the running batch after the latest step.");
    sample(out, "glass_requests_running", m.requests_running);
    header(out, "glass_requests_waiting", "gauge", "Requests waiting for the scheduler after the latest step.");
    sample(out, "glass_requests_waiting", m.requests_waiting);
    header(out, "glass_kv_blocks_total", "gauge", "Blocks in the KV pool.");
    sample(out, "glass_kv_blocks_total", m.kv_blocks_total);
    header(out, "glass_kv_blocks_used", "gauge", "KV blocks held by a request (ref count > 0).");
    sample(out, "glass_kv_blocks_used", m.kv_blocks_used);
    header(out, "glass_kv_blocks_free", "gauge", "KV blocks no request holds (cached ones included): total - used.");
    sample(out, "glass_kv_blocks_free", m.kv_blocks_free);
    header(out, "glass_kv_blocks_cached", "gauge", "Free KV blocks that still hold a cached prefix a new request can hit.");
    sample(out, "glass_kv_blocks_cached", m.kv_blocks_cached);
    return out;
}

// ---------------------------------------------------------------------------------------------
// The engine's recent past, block by block and step by step: GET /v1/engine/state
// ---------------------------------------------------------------------------------------------

inline constexpr size_t kRecentSteps = 64;     ///< steps the live view keeps
inline constexpr size_t kRecentFinished = 32;  ///< finished requests it keeps

/// One step's batch, from its StepReport.
struct StepRecord {
    struct Chunk {
        int id;     ///< engine request id
        int start;  ///< first position computed
        int n;      ///< positions computed: [start, start + n)
    };
    std::uint64_t step = 0;      ///< 1 for the server's first step
    std::vector<int> decode;     ///< ids that computed their one sampled token
    std::vector<Chunk> prefill;  ///< prompt chunks (or recomputation after a preemption)
    std::vector<int> waiting;    ///< ids still waiting after the step
    std::vector<int> preempted;  ///< ids sent back to the queue this step
    std::vector<int> finished;   ///< ids that finished this step
};

inline StepRecord step_record(const StepReport& report, std::uint64_t step) {
    StepRecord s;
    s.step = step;
    for (const StepReport::Part& p : report.batch) {
        if (p.prefill) s.prefill.push_back({p.id, p.start, p.n});
        else s.decode.push_back(p.id);
    }
    s.waiting = report.waiting;
    s.preempted = report.preempted;
    s.finished = report.finished;
    return s;
}

/// One block of the pool.
struct BlockRecord {
    int ref_count = 0;        ///< requests holding it; 2 or more: a prefix shared through the cache
    bool cached = false;      ///< holds a hashed full block a later request can hit
    std::vector<int> owners;  ///< engine ids of the requests whose block table holds it
};

/// A request in the engine: waiting or running.
struct LiveRecord {
    int id = 0;
    std::string name;         ///< the HTTP response id (cmpl-3, chatcmpl-4), if it came over HTTP
    std::string status;       ///< "waiting" or "running"
    int prompt_tokens = 0;
    int generated = 0;
    int computed = 0;         ///< positions with K/V in the pool
    int cached_tokens = 0;
    int blocks = 0;           ///< length of its block table
};

/// A finished request.
struct FinishedRecord {
    int id = 0;
    std::string name;
    Outcome outcome = Outcome::stop;
    int prompt_tokens = 0;
    int cached_tokens = 0;
    int generated_tokens = 0;
    double ttft_ms = 0;
    double tpot_ms = 0;
    int preemptions = 0;
};

struct EngineState {
    std::uint64_t steps = 0;               ///< steps so far (the newest record's step)
    int block_size = 0;
    std::deque<StepRecord> recent_steps;   ///< oldest first, at most kRecentSteps
    std::vector<BlockRecord> blocks;       ///< [num_blocks]
    std::vector<LiveRecord> live;          ///< running first, then waiting
    std::deque<FinishedRecord> recent_finished;  ///< oldest first, at most kRecentFinished
};

/// The pool block by block: ref counts and cache flags from the block manager, owners from the
/// block tables of the live requests.
inline std::vector<BlockRecord> block_records(const BlockManager& blocks, const Scheduler& scheduler) {
    std::vector<BlockRecord> out(static_cast<size_t>(blocks.num_blocks()));
    for (int b = 0; b < blocks.num_blocks(); ++b) {
        out[static_cast<size_t>(b)].ref_count = blocks.block(b).ref_count;
        out[static_cast<size_t>(b)].cached = blocks.block(b).cached;
    }
    const auto add_owner = [&](const Request* r) {
        for (int b : r->block_table) out[static_cast<size_t>(b)].owners.push_back(r->id);
    };
    for (const Request* r : scheduler.running()) add_owner(r);
    for (const Request* r : scheduler.waiting()) add_owner(r);  // empty tables, unless a scheduler keeps them
    return out;
}

inline LiveRecord live_record(const Request& r, const std::string& name) {
    return {r.id, name, to_string(r.status), static_cast<int>(r.prompt_ids.size()), r.generated(), r.computed,
            r.cached_tokens, static_cast<int>(r.block_table.size())};
}

inline FinishedRecord finished_record(const RequestResult& r, const std::string& name, Outcome outcome) {
    return {r.id, name, outcome, static_cast<int>(r.prompt_ids.size()), r.cached_tokens,
            static_cast<int>(r.generated_ids.size()), r.metrics.ttft_ms, r.metrics.tpot_ms, r.preemptions};
}

/// The JSON of GET /v1/engine/state (documented in docs/DESIGN.md):
///
/// ```text
/// {"steps": 812, "block_size": 16, "num_blocks": 128,
///  "recent_steps": [{"step": 811, "decode": [3, 4], "prefill": [{"id": 5, "start": 0, "n": 16}],
///                    "waiting": [6], "preempted": [], "finished": [3]}, ...],      oldest first
///  "blocks": [{"ref_count": 2, "cached": true, "owners": [4, 5]}, ...],          one per block
///  "live": [{"id": 4, "name": "cmpl-4", "status": "running", "prompt_tokens": 40, "generated": 7,
///            "computed": 46, "cached_tokens": 32, "blocks": 3}, ...],
///  "recent_finished": [{"id": 3, "name": "cmpl-3", "outcome": "stop", "prompt_tokens": 5,
///                       "cached_tokens": 0, "generated_tokens": 41, "ttft_ms": 2.1,
///                       "tpot_ms": 0.4, "preemptions": 0}, ...]}                  oldest first
/// ```
inline nlohmann::json engine_state_json(const EngineState& s) {
    using json = nlohmann::json;
    json steps = json::array();
    for (const StepRecord& r : s.recent_steps) {
        json prefill = json::array();
        for (const StepRecord::Chunk& c : r.prefill) prefill.push_back({{"id", c.id}, {"start", c.start}, {"n", c.n}});
        steps.push_back({{"step", r.step}, {"decode", r.decode}, {"prefill", prefill}, {"waiting", r.waiting},
                         {"preempted", r.preempted}, {"finished", r.finished}});
    }
    json blocks = json::array();
    for (const BlockRecord& b : s.blocks)
        blocks.push_back({{"ref_count", b.ref_count}, {"cached", b.cached}, {"owners", b.owners}});
    json live = json::array();
    for (const LiveRecord& r : s.live)
        live.push_back({{"id", r.id}, {"name", r.name}, {"status", r.status}, {"prompt_tokens", r.prompt_tokens},
                        {"generated", r.generated}, {"computed", r.computed}, {"cached_tokens", r.cached_tokens},
                        {"blocks", r.blocks}});
    json finished = json::array();
    for (const FinishedRecord& r : s.recent_finished)
        finished.push_back({{"id", r.id}, {"name", r.name}, {"outcome", to_string(r.outcome)},
                            {"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens},
                            {"generated_tokens", r.generated_tokens}, {"ttft_ms", r.ttft_ms}, {"tpot_ms", r.tpot_ms},
                            {"preemptions", r.preemptions}});
    return {{"steps", s.steps},
            {"block_size", s.block_size},
            {"num_blocks", s.blocks.size()},
            {"recent_steps", steps},
            {"blocks", blocks},
            {"live", live},
            {"recent_finished", finished}};
}

}  // namespace glass::serve
