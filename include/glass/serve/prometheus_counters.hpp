/// \file
/// \brief glass/serve/prometheus_counters.hpp — what the server counts since it started, as Prometheus text (GET /metrics).
/// ```text
/// The engine thread (engine_thread.hpp), the only thread that sees every step and every result,
/// fills in a ServerMetrics; HTTP handlers read a copy taken under a mutex (so a reader never
/// sees half an update), and render_prometheus() writes it as Prometheus text format 0.0.4:
///
///   glass_requests_total{outcome}          stop | length | cancelled | error | rejected (outcome.hpp)
///   glass_prompt_tokens_total              prompt tokens of requests the engine ran
///   glass_generation_tokens_total          tokens they generated (usage.completion_tokens)
///   glass_prefix_cache_hit_tokens_total    prompt tokens served from the prefix cache
///   glass_time_to_first_token_seconds      histogram, one observation per request with a token
///   glass_time_per_output_token_seconds    histogram, one per request with two tokens or more
///   glass_requests_running / _waiting      gauges, after the engine thread's latest step
///   glass_kv_blocks_total / _used / _free / _cached    gauges: used + free = total; free
///                                          includes the cached ones (ref count 0, still findable)
///   glass_engine_steps_total               forward passes so far
/// ```
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/serve/block_manager.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/outcome.hpp"

namespace glass::serve {

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

}  // namespace glass::serve
