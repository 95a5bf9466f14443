// bench/cuda/attention_bench.cpp — C19 on the GPU: three-step attention (attention.cu) against
// FlashAttention (flash_attention.cu), for prefill and for decode over a long cache.
//
// usage: glass_cuda_attention_bench [--max-n N] [--runs R]
// Shapes: stories110M (12 heads of 64, 12 KV heads) and tinyllama1b (32 heads of 64 over 4 KV
// heads); prefills of 512, 2,048 and 8,192 positions (up to --max-n), and one decode step at the
// end of a cache of that length (attention_decode, one block per head, against flash_decode,
// split-K in chunks of 256 keys). Timed with a device synchronize around each run; the median of
// --runs (5) after one warm-up. Reported per case: ms, the speed-up of the flash kernel, and the
// three-step version's score bytes (16 · heads · n_q · n_k) as GB/s of score traffic it sustained.
// Prints one "RESULT key=value ..." line per case (scripts/gpu-check's table). Exit 77 when there
// is no CUDA device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "glass/flash_attention.hpp"
#include "glass_cuda.hpp"

namespace gc = glass::cuda;

namespace {

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

template <typename F>
double median_ms(int runs, F&& f) {
    std::vector<double> ms;
    for (int r = -1; r < runs; ++r) {
        gc::synchronize("before a timed run");
        const auto t0 = std::chrono::steady_clock::now();
        f();
        gc::synchronize("a timed run");
        if (r >= 0) ms.push_back(1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    try {
        int max_n = 8192, runs = 5;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--max-n" && i + 1 < argc) max_n = std::stoi(argv[++i]);
            else if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
            else glass::fail("usage: glass_cuda_attention_bench [--max-n N] [--runs R]; unknown argument '", a, "'");
        }
        if (max_n < 1 || runs < 1) glass::fail("--max-n and --runs must be >= 1");
        std::string why;
        if (!gc::device_present(&why)) {
            std::printf("SKIPPED: no CUDA device (%s)\n", why.c_str());
            return 77;
        }
        std::printf("device %s\n", gc::device_name().c_str());
        struct Shape { const char* name; int heads, kv_heads, head_dim; };
        std::mt19937 rng(1);
        for (const Shape s : {Shape{"stories110M", 12, 12, 64}, Shape{"tinyllama1b", 32, 4, 64}}) {
            std::vector<int> lengths;
            for (int n : {512, 2048, 8192})
                if (n <= max_n) lengths.push_back(n);
            if (lengths.empty()) lengths.push_back(max_n);
            for (const int n : lengths) {
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                gc::DeviceBuffer q = gc::to_device(random_floats(std::size_t(n) * s.heads * s.head_dim, rng));
                gc::DeviceBuffer k = gc::to_device(random_floats(std::size_t(n) * s.kv_heads * s.head_dim, rng));
                gc::DeviceBuffer v = gc::to_device(random_floats(std::size_t(n) * s.kv_heads * s.head_dim, rng));
                gc::DeviceBuffer out(std::size_t(n) * s.heads * s.head_dim * sizeof(float));
                gc::poison(out.f32(), std::size_t(n) * s.heads * s.head_dim);
                gc::DeviceBuffer scores(std::size_t(s.heads) * n * n * sizeof(float));  // the three-step's S
                const double three = median_ms(runs, [&] {
                    gc::attention_naive(q.f32(), k.f32(), v.f32(), n, 0, d, scale, scores.f32(), out.f32());
                });
                const double flash = median_ms(runs, [&] { gc::flash_attention(q.f32(), k.f32(), v.f32(), n, 0, d, scale, out.f32()); });
                const double score_gb = glass::naive_score_bytes(s.heads, n, n) / 1e9;
                std::printf("RESULT op=prefill shape=%s n=%d three_step_ms=%.3f flash_ms=%.3f speedup=%.2f "
                            "three_step_score_gb=%.3f three_step_score_gb_s=%.0f\n",
                            s.name, n, three, flash, three / flash, score_gb, score_gb / (three / 1e3));
                // Decode: the last position over the whole cache of n keys.
                const float* q_last = q.f32() + std::size_t(n - 1) * s.heads * s.head_dim;
                const int chunk = 256;
                gc::DeviceBuffer partial(std::size_t(s.heads) * gc::flash_decode_splits(n, chunk) * (s.head_dim + 2) *
                                         sizeof(float));
                const double block_per_head = median_ms(runs, [&] {
                    gc::attention_decode(q_last, k.f32(), v.f32(), gc::IntArg(n), d, scale, scores.f32(), out.f32());
                });
                const double split = median_ms(runs, [&] {
                    gc::flash_decode(q_last, k.f32(), v.f32(), n, d, scale, chunk, partial.f32(), out.f32());
                });
                std::printf("RESULT op=decode shape=%s n=%d block_per_head_ms=%.4f split_k_ms=%.4f speedup=%.2f\n", s.name, n,
                            block_per_head, split, block_per_head / split);
                std::fflush(stdout);
            }
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass_cuda_attention_bench: error: %s\n", e.what());
        return 1;
    }
}
