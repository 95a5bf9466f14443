/// \file
/// \brief glass/fast/benchmark.hpp — measure the two phases, and the two ceilings they run into.
/// ```text
/// Journey step 9 in numbers:
///   decode  reads every weight once per token: achieved bandwidth = weight bytes × tokens/s,
///           compared with read_bandwidth_probe() (summing a 1 GiB buffer: the best a loop that
///           only reads can do on this machine, with the same threads).
///   prefill does 2 FLOPs per weight per prompt token (+ attention): achieved FLOP/s compared
///           with fma_peak_probe() (independent fused multiply-adds, nothing else).
/// Every figure is a median of several runs, with the range, because a shared VM is noisy.
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "glass/fast/buffer.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/session.hpp"

namespace glass::fast {

struct Stat {
    double median = 0, min = 0, max = 0;
};
inline Stat stat_of(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {median, v.front(), v.back()};
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if defined(__x86_64__)
// The 16 lanes added one by one. (_mm512_reduce_add_ps would do, but GCC 12's expansion of it
// warns falsely here: -Wuninitialized on an intrinsic's "undefined" register.)
GLASS_AVX512 inline float add_lanes(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    float total = 0.0f;
    for (float x : lanes) total += x;
    return total;
}

// Σ of n floats, 64 at a time (4 independent accumulators, so adding never limits the loop).
GLASS_AVX512 inline float sum_avx512(const float* p, std::int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (std::int64_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    return add_lanes(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
// FLOPs of `iterations` rounds of 12 independent 16-lane FMA chains (12 > 4-cycle latency ×
// 1 FMA/cycle, so the unit never waits).
GLASS_AVX512 inline float fma_chains_avx512(std::int64_t iterations, float start) {
    __m512 acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(start + 0.001f * i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
    return add_lanes(s);
}
#endif

inline float sum_portable(const float* p, std::int64_t n) {
    float s[8] = {};
    for (std::int64_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// Read bandwidth (bytes/s) of `threads` threads each summing its slice of one `bytes` buffer
// (huge pages, like the weights), one value per pass.
inline Stat read_bandwidth_probe(int threads, std::int64_t bytes = std::int64_t{1} << 30, int passes = 7) {
    HugeBuffer buffer(static_cast<std::size_t>(bytes));
    const std::int64_t n = bytes / 4;
    float* data = buffer.as<float>();
    for (std::int64_t i = 0; i < n; ++i) data[i] = 1.0f;  // touch every page before timing
    ThreadPool pool(threads);
    const bool avx512 = cpu_has_avx512();
    std::vector<float> sinks(static_cast<size_t>(threads));
    std::vector<double> rates;
    for (int pass = 0; pass < passes; ++pass) {
        const int pieces = 64;  // 16 MiB each, shared out like the weight panels are
        auto job = [&](int piece, int t) {
            const std::int64_t b = n / pieces * piece, e = n / pieces * (piece + 1);
#if defined(__x86_64__)
            sinks[static_cast<size_t>(t)] += avx512 ? sum_avx512(data + b, e - b) : sum_portable(data + b, e - b);
#else
            sinks[static_cast<size_t>(t)] += sum_portable(data + b, e - b);
#endif
        };
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(pieces, job);
        rates.push_back(static_cast<double>(bytes) / seconds_since(t0));
    }
    volatile float keep_alive = sinks[0];  // the sums must look used, or the loop is deleted
    (void)keep_alive;
    return stat_of(rates);
}

// Peak fp32 FMA throughput (FLOP/s) of `threads` threads, one value per pass.
inline Stat fma_peak_probe(int threads, int passes = 7) {
    ThreadPool pool(threads);
    const std::int64_t iterations = 20'000'000;  // 20M × 12 FMAs × 32 FLOPs ≈ 7.7 GFLOP per thread
    std::vector<float> sinks(static_cast<size_t>(threads));
    std::vector<double> rates;
    const bool avx512 = cpu_has_avx512();
    for (int pass = 0; pass < passes; ++pass) {
        auto job = [&](int piece, int t) {  // 10 pieces per thread
#if defined(__x86_64__)
            // (a different start per piece, so the compiler cannot compute one and reuse it)
            if (avx512) sinks[static_cast<size_t>(t)] += fma_chains_avx512(iterations / 10, 0.01f * piece);
#endif
        };
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(10 * threads, job);
        const double s = seconds_since(t0);
        rates.push_back(avx512 ? 12.0 * 32.0 * static_cast<double>(iterations) * threads / s : 0.0);
    }
    volatile float keep_alive = sinks[0];
    (void)keep_alive;
    return stat_of(rates);
}

// FLOPs of prefilling n positions from an empty cache: 2 per weight per position for every
// layer matrix, 4·head_dim per (query head, visible key) pair for attention (scores + weighted
// sum), and the classifier once (only the last position's logits are computed).
inline double prefill_flops(const ModelConfig& c, int n) {
    const double d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
    const double per_layer_weights = 2 * d * d + 2 * kv * d + 3 * h * d;
    const double pairs = static_cast<double>(n) * (n + 1) / 2;  // Σ visible keys over positions
    return c.n_layers * (2 * per_layer_weights * n + 4.0 * c.n_heads * c.head_dim() * pairs) +
           2.0 * c.vocab_size * d;
}

struct PhaseSpeeds {
    Stat prefill_tokens_per_s;
    Stat decode_tokens_per_s;
};

// `runs` times: reset, prefill `prompt_len` ids, decode `gen` greedy tokens; one warm-up first.
inline PhaseSpeeds measure_phases(Session& s, int prompt_len, int gen, int runs) {
    const ModelConfig& c = s.config();
    if (prompt_len < 1 || gen < 1 || prompt_len + gen > c.seq_len)
        fail("prompt length ", prompt_len, " + generated ", gen, " must be ≥ 1 each and fit the context of ",
             c.seq_len);
    if (runs < 1) fail("runs must be ≥ 1, got ", runs);
    std::vector<int> prompt(static_cast<size_t>(prompt_len));
    for (int i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = 1 + (i * 7919) % (c.vocab_size - 1);
    auto argmax = [](std::span<const float> v) {
        return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
    };
    std::vector<double> prefill, decode;
    for (int run = -1; run < runs; ++run) {  // run -1 warms up (page faults, caches, clocks)
        s.reset();
        auto t0 = std::chrono::steady_clock::now();
        int next = argmax(s.prefill(prompt));
        const double prefill_s = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < gen; ++i) next = argmax(s.decode(next));
        const double decode_s = seconds_since(t0);
        if (run >= 0) {
            prefill.push_back(prompt_len / prefill_s);
            decode.push_back(gen / decode_s);
        }
    }
    return {stat_of(prefill), stat_of(decode)};
}

}  // namespace glass::fast
