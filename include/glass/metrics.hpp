/// \file
/// \brief glass/metrics.hpp — journey step 9: why it is fast or slow, in numbers.
/// ```text
/// Two phases, two bottlenecks:
///   prefill processes n_prompt positions per weight read: compute-bound (matrix–matrix).
///   decode processes one position per weight read: every weight byte crosses the memory bus
///   for every token, so  tokens/s ≤ memory bandwidth / bytes read per token  (C7).
/// What a user feels:
///   TTFT (time to first token) = tokenization + prefill + first sample.
///   TPOT (time per output token, a.k.a. inter-token latency) = the mean gap between consecutive
///        tokens after the first: (t_last - t_first) / (n_out - 1), where t_i is when token i
///        was chosen (GenerationMetrics::token_ms). A mean: single gaps can be far longer.
///   latency = TTFT + (n_out - 1) · TPOT                                      (C10)
///        (an identity, by TPOT's definition: useful to predict, not to check a measurement)
/// KV cache per token = 2 (K,V) · layers · KV heads · head_dim · bytes per value   (C8, C9).
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace glass {

/// C8/C9: bytes one token adds to the KV cache.
inline std::int64_t kv_cache_bytes_per_token(int n_layers, int n_kv_heads, int head_dim,
                                             int bytes_per_value) {
    return std::int64_t{2} * n_layers * n_kv_heads * head_dim * bytes_per_value;
}

/// C7: the decode speed limit set by memory bandwidth.
inline double bandwidth_bound_tokens_per_s(double bytes_per_token, double bytes_per_s) {
    return bytes_per_s / bytes_per_token;
}

/// C10: end-to-end latency of one request.
inline double request_latency_s(double ttft_s, double tpot_s, int n_output_tokens) {
    return ttft_s + (n_output_tokens - 1) * tpot_s;
}

/// What one generate() call measured.
struct GenerationMetrics {
    int prompt_tokens = 0;
    int generated_tokens = 0;
    std::vector<double> token_ms;  ///< request start -> each generated token chosen; [0] is ttft_ms
    double ttft_ms = 0;          ///< request start -> first token chosen
    double tpot_ms = 0;          ///< mean gap between consecutive token_ms after the first (0 if only one)
    double total_ms = 0;         ///< request start -> last token chosen
    double tokens_per_s = 0;     ///< generated tokens / total time (end to end)
    double decode_tokens_per_s = 0;  ///< 1000 / tpot_ms
    double prefill_tokens_per_s = 0; ///< prompt tokens / ttft
    std::int64_t kv_bytes_per_token = 0;
    std::int64_t weight_bytes_per_token = 0;
};

/// A quick read-bandwidth probe: sums a buffer much larger than the caches a few times and
/// returns bytes/s of the fastest pass. Single-threaded, like the reference decode loop.
inline double measure_read_bandwidth(std::size_t bytes = std::size_t{256} << 20, int passes = 3) {
    std::vector<float> buffer(bytes / sizeof(float), 1.0f);
    double best = 0;
    volatile float sink = 0;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        for (std::size_t i = 0; i + 8 <= buffer.size(); i += 8) {
            s0 += buffer[i]; s1 += buffer[i + 1]; s2 += buffer[i + 2]; s3 += buffer[i + 3];
            s4 += buffer[i + 4]; s5 += buffer[i + 5]; s6 += buffer[i + 6]; s7 += buffer[i + 7];
        }
        sink = sink + s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > 0) best = std::max(best, static_cast<double>(bytes) / s);
    }
    return best;
}

}  // namespace glass
