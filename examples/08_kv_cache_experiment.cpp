// 08_kv_cache_experiment — journey steps 6/8: why a KV cache gives the same answer (C4).
//
// In:  projections W_Q, W_K, W_V [4, 4] and token embeddings X [n, d = 4] (n = 3, or argv[1]),
//      all random from a fixed seed (std::mt19937(2024), uniform in [-1, 1), the weights drawn
//      first, so a longer run starts with the same weights and the same first tokens). One
//      attention head, scale 1/sqrt(d).
//      The weights here are stored [in, out] and used as y = x W, the NumPy convention of the
//      article's experiment. The rest of glass stores them [out, in] and computes y = W x (in
//      rows: y = x Wᵀ), as llama2.c's checkpoints do; the products are the same.
// Out: for each new token t = 0, 1, 2 the attention output [1, 4] computed two ways:
//        without a cache: project every token 0..t again, attend with the last query;
//        with a cache:    project only token t, append its K and V rows, attend over the cache.
//      The largest difference between the two (should be rounding only) and the cache size.
//
// Why they agree: with a causal mask, token j's key and value depend on token j alone (here) —
// in a full model on tokens 0..j only — so they never change once computed. Recomputing them at
// every step is pure waste; the cache stores them instead.
//
// Usage: 08_kv_cache_experiment [TOKENS]   (default 3)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "args.hpp"
#include "glass/attention.hpp"
#include "glass/tensor.hpp"

constexpr int kDim = 4;

// y [1, d] = x [1, d] W [d, d], with W stored [in, out] — the loop written out.
static glass::RowMatrix project(const glass::RowMatrix& x_row, const glass::RowMatrix& w) {
    glass::RowMatrix y = glass::RowMatrix::Zero(1, kDim);
    for (int j = 0; j < kDim; ++j)
        for (int i = 0; i < kDim; ++i) y(0, j) += x_row(0, i) * w(i, j);
    return y;
}

static int run(int argc, char** argv) {
    const int n_tokens = argc > 1 ? example::int_arg(argv[1], "token count", 1, 1000) : 3;  // the sequence length

    // Seeded random inputs: the same numbers on every run. Weights first, then the tokens.
    std::mt19937 rng(2024);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    glass::RowMatrix x(n_tokens, kDim), wq(kDim, kDim), wk(kDim, kDim), wv(kDim, kDim);  // W: [in, out]
    for (glass::RowMatrix* w : {&wq, &wk, &wv})
        for (int r = 0; r < kDim; ++r)
            for (int c = 0; c < kDim; ++c) (*w)(r, c) = uniform(rng);
    for (int r = 0; r < n_tokens; ++r)
        for (int c = 0; c < kDim; ++c) x(r, c) = uniform(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));

    // The cache: room for every position, filled one row per step.
    glass::RowMatrix k_cache = glass::RowMatrix::Zero(n_tokens, kDim);
    glass::RowMatrix v_cache = glass::RowMatrix::Zero(n_tokens, kDim);
    int cached_rows = 0;

    int projected_without_cache = 0;  // how many token rows went through W_K (and W_V)
    int projected_with_cache = 0;
    float max_diff = 0.0f;

    for (int t = 0; t < n_tokens; ++t) {
        // (a) No cache: recompute Q, K, V for tokens 0..t; keep the output of the last query.
        glass::RowMatrix q_all(t + 1, kDim), k_all(t + 1, kDim), v_all(t + 1, kDim);
        for (int j = 0; j <= t; ++j) {
            q_all.row(j) = project(x.row(j), wq);
            k_all.row(j) = project(x.row(j), wk);
            v_all.row(j) = project(x.row(j), wv);
            ++projected_without_cache;
        }
        const glass::RowMatrix full = glass::attention_head(q_all, k_all, v_all, 0, scale);
        const glass::RowMatrix out_recompute = full.row(t);

        // (b) Cache: project only the new token, append its K and V, attend over rows 0..t.
        const glass::RowMatrix q_new = project(x.row(t), wq);
        k_cache.row(t) = project(x.row(t), wk);
        v_cache.row(t) = project(x.row(t), wv);
        ++projected_with_cache;
        cached_rows = t + 1;
        const glass::RowMatrix out_cached =
            glass::attention_head(q_new, k_cache.topRows(cached_rows), v_cache.topRows(cached_rows),
                                  /*start_pos=*/t, scale);

        float diff = 0.0f;
        for (int c = 0; c < kDim; ++c)
            diff = std::max(diff, std::fabs(out_recompute(0, c) - out_cached(0, c)));
        max_diff = std::max(max_diff, diff);

        std::printf("token %d: output with cache:", t);
        for (int c = 0; c < kDim; ++c) std::printf(" %+.6f", out_cached(0, c));
        std::printf("  | recomputed:");
        for (int c = 0; c < kDim; ++c) std::printf(" %+.6f", out_recompute(0, c));
        std::printf("  | max abs diff %.3g\n", diff);
    }

    std::printf("max abs difference: %.3g\n", max_diff);
    std::printf("cache holds %d K rows\n", cached_rows);
    std::printf("cache holds %d V rows\n", cached_rows);
    std::printf("K/V projections without cache: %d\n", projected_without_cache);
    std::printf("K/V projections with cache: %d\n", projected_with_cache);
    std::printf("K cache:\n");
    for (int r = 0; r < cached_rows; ++r) {
        std::printf("  row %d:", r);
        for (int c = 0; c < kDim; ++c) std::printf(" %+.6f", k_cache(r, c));
        std::printf("\n");
    }
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
