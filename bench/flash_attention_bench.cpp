// flash_attention_bench — C19 on the CPU: prefill attention, three-step (attention.hpp) against
// tiled (flash_attention.hpp, fast/fast_flash_attention.hpp), at 512, 2,048 and 8,192 positions.
//
//   flash_attention_bench [--runs R] [--threads T] [--max-n N]
//
// Per shape and length: one KV head group (the query heads that share one K/V head: 1 for
// stories110M's 12 x 12 heads, 8 for tinyllama1b's 32 over 4), since groups are independent and
// the three-step version at 8,192 positions would otherwise take minutes per layer; the per-layer
// time is the group's times n_kv_heads. Reported: median ms [min - max] per group, the speed-up
// over the three-step reference, GFLOP/s (4 · head_dim per visible (query, key) pair: Q Kᵀ and
// P V) as a fraction of the FMA peak measured in the same run, and the extra memory each holds:
// the three-step's [n, n] scores of one head against the tiled scratch.
// Then the whole prefill of FastCpuSession (stories110M's shape, random weights, context 8,192,
// prompts cut into its 512-position chunks) with its own prefill attention (score rows per block
// of 4 queries, fast_session.hpp) and with FastOptions::flash_attention: the same command, the
// same weights, only the attention differs.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_flash_attention.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/flash_attention.hpp"

namespace {

template <typename F>
glass::fast::Stat time_runs(int runs, F&& f) {
    std::vector<double> ms;
    for (int r = -1; r < runs; ++r) {  // run -1 warms up and is not counted
        const auto t0 = std::chrono::steady_clock::now();
        f();
        if (r >= 0) ms.push_back(1e3 * glass::fast::seconds_since(t0));
    }
    return glass::fast::stat_of(ms);
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 3, threads = 2, max_n = 8192;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--max-n" && i + 1 < argc) max_n = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: flash_attention_bench [--runs R] [--threads T] [--max-n N]\n");
            return 2;
        }
    }
    if (runs < 1 || threads < 1 || threads > 256 || max_n < 1) {
        std::fprintf(stderr, "flash_attention_bench: --runs and --max-n must be >= 1, --threads in [1, 256]\n");
        return 2;
    }
    const double peak1 = glass::fast::fma_peak_probe(1).median, peakT = glass::fast::fma_peak_probe(threads).median;
    const glass::fast::Kernels kernels = glass::fast::best_kernels();
    std::printf("FMA peak (measured now): %.1f GFLOP/s on 1 thread, %.1f on %d; attention kernels: %s\n\n", peak1 / 1e9,
                peakT / 1e9, threads, kernels.name);
    std::printf("| shape (one KV group) | n | three-step ms | tiled ref ms | tiled fast 1 thread ms | tiled fast %d threads ms | "
                "speed-up (fast %dT / three-step) | fast %dT %% of FMA peak | three-step scores | tiled scratch |\n",
                threads, threads, threads);
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");

    struct Shape { const char* name; int group, head_dim; };
    glass::fast::ThreadPool one(1), many(threads);
    std::mt19937 rng(1);
    for (const Shape s : {Shape{"stories110M (1 head of 64)", 1, 64}, Shape{"tinyllama1b (8 heads of 64 over 1)", 8, 64}})
        for (const int n : {512, 2048, 8192}) {
            if (n > max_n) continue;
            const glass::AttentionShape shape{s.group, 1, s.head_dim};
            const float scale = 1.0f / std::sqrt(float(s.head_dim));
            const glass::RowMatrix q = glass::fast::random_normal_matrix(n, s.group * s.head_dim, rng);
            const glass::RowMatrix k = glass::fast::random_normal_matrix(n, s.head_dim, rng), v = glass::fast::random_normal_matrix(n, s.head_dim, rng);
            glass::RowMatrix out(n, s.group * s.head_dim);
            const int ref_runs = n >= 8192 ? 1 : runs;  // the three-step one at 8,192 takes seconds per run
            const glass::fast::Stat three = time_runs(ref_runs, [&] { out = glass::causal_attention(q, k, v, 0, shape, scale); });
            const glass::RowMatrix want = out;
            const glass::fast::Stat ref = time_runs(ref_runs, [&] { out = glass::flash_attention(q, k, v, 0, shape, scale); });
            const auto fast = [&](glass::fast::ThreadPool& pool) {
                return time_runs(runs, [&] {
                    glass::fast::flash_attention(q.data(), q.cols(), k.data(), v.data(), k.cols(), n, 0, shape, scale,
                                                 out.data(), out.cols(), pool, kernels);
                });
            };
            const glass::fast::Stat f1 = fast(one), fT = fast(many);
            const double err = double((out - want).norm() / want.norm());
            if (!(err <= 1e-5)) {
                std::fprintf(stderr, "flash_attention_bench: tiled result differs from three-step by %.3g\n", err);
                return 1;
            }
            const double flops = 4.0 * s.head_dim * s.group * (double(n) * (n + 1) / 2);
            const std::int64_t scratch = 4LL * static_cast<std::int64_t>(glass::fast::flash_scratch_floats(threads, s.head_dim, {256, 128}));
            std::printf("| %s | %d | %.1f [%.1f – %.1f] | %.1f | %.1f [%.1f – %.1f] | %.1f [%.1f – %.1f] | %.2fx | %.0f%% | "
                        "%.1f MB | %.1f KB |\n",
                        s.name, n, three.median, three.min, three.max, ref.median, f1.median, f1.min, f1.max, fT.median,
                        fT.min, fT.max, three.median / fT.median, 100.0 * flops / (fT.median / 1e3) / peakT,
                        4.0 * n * n / 1e6, scratch / 1e3);
        }

    // The fast session's whole prefill, its attention one way or the other.
    glass::ModelConfig c = glass::fast::shape_config("stories110M");
    c.seq_len = 8192;
    const glass::Model model = glass::fast::random_model_in_memory(c, 3);
    std::printf("\nFastCpuSession prefill, stories110M shape (random weights), %d threads, fp32, chunks of 512:\n\n", threads);
    std::printf("| prompt | prefill ms, score-row attention | prefill ms, flash attention | speed-up | attention ms, score rows | attention ms, flash | attention speed-up | logits relative difference |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const int n : {512, 2048, 8192}) {
        if (n > max_n) continue;
        std::vector<int> prompt(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) prompt[size_t(i)] = i == 0 ? 1 : (i * 7919) % c.vocab_size;
        std::vector<float> logits[2];
        glass::fast::Stat t[2];
        double attention_ms[2];  // the session's own clock around its prefill attention: the timed runs' median
        for (const bool flash : {false, true}) {
            glass::fast::FastOptions o;
            o.threads = threads;
            o.flash_attention = flash;
            glass::fast::FastCpuSession session(model, o);
            const int n_runs = n >= 8192 ? 1 : runs;
            std::vector<double> per_run;  // the warm-up's first, not counted
            t[flash] = time_runs(n_runs, [&] {
                const double before = session.prefill_attention_ms();
                session.reset();
                const std::span<const float> l = session.prefill(prompt);
                logits[flash].assign(l.begin(), l.end());
                per_run.push_back(session.prefill_attention_ms() - before);
            });
            per_run.erase(per_run.begin());
            attention_ms[flash] = glass::fast::stat_of(per_run).median;
        }
        double diff = 0, norm = 0;
        for (size_t i = 0; i < logits[0].size(); ++i) {
            diff += double(logits[1][i] - logits[0][i]) * (logits[1][i] - logits[0][i]);
            norm += double(logits[0][i]) * logits[0][i];
        }
        std::printf("| %d | %.0f [%.0f – %.0f] | %.0f [%.0f – %.0f] | %.2fx | %.0f | %.0f | %.2fx | %.1e |\n", n, t[0].median,
                    t[0].min, t[0].max, t[1].median, t[1].min, t[1].max, t[0].median / t[1].median, attention_ms[0],
                    attention_ms[1], attention_ms[0] / attention_ms[1], std::sqrt(diff / norm));
    }
    return 0;
}
