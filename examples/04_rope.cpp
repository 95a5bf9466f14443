// 04_rope — journey step 3: position as a rotation (RoPE), on vectors you can check by hand.
//
// In:  part 1: a query q and a key k [head_dim = 8] that are the same vector, one unit in the first
//              dimension of every pair: q = k = [1, 0, 1, 0, 1, 0, 1, 0]; θ = 10,000 (the shipped
//              model's head width and base); q placed at position m, k at position n.
//      part 2: the vector [1, 2, ..., 8] rotated in both pair layouts; then the shipped model's
//              layer 0 queries and keys for "Once upon a time", with llama2.c's weights and with
//              the rows of W_Q and W_K permuted the way Hugging Face converters do.
//      part 3: Llama's head width (128, 64 pairs) with θ = 10,000 (Llama 2) and 500,000 (Llama 3),
//              and Llama 3.1's frequency scaling (factor 8, low/high frequency factors 1 and 4,
//              original context 8,192).
// Out: part 1: the score q·k after rotating q by m and k by n, for pairs (m, n) with the same and
//              with different distances m − n, and the same score worked out by hand;
//      part 2: both rotated vectors; the layer-0 scores of the last query for head 0 three ways,
//              and the largest difference over all heads;
//      part 3: the wavelength (positions per full turn) of the fastest and slowest pair, and how
//              many pairs the scaling keeps, slows 8 times, or blends.
//
// Why the score depends only on m − n: rotating q by angle mθᵢ and k by nθᵢ in the same plane and
// taking the dot product leaves cos((m − n)θᵢ) of each pair's product. Here, with q = k and one unit
// per pair, score(m, n) = cos(d·1) + cos(d·0.1) + cos(d·0.01) + cos(d·0.001) with d = m − n.
//
// Usage: 04_rope [OFFSET]   (OFFSET, default 0, is added to every position of part 1)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/embedding.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/rope.hpp"
#include "glass/tensor.hpp"

constexpr int kHeadDim = 8;  // the shipped model's head width: 4 pairs
constexpr float kTheta = 10000.0f;

// The dot product of q rotated to position m with k rotated to position n (one head).
static float rotated_score(const glass::RowMatrix& q, const glass::RowMatrix& k, int m, int n) {
    glass::RowMatrix q_m = q, k_n = k;
    glass::apply_rope(q_m, 1, kHeadDim, m, kTheta, glass::RopeLayout::adjacent_pairs);
    glass::apply_rope(k_n, 1, kHeadDim, n, kTheta, glass::RopeLayout::adjacent_pairs);
    return q_m.row(0).dot(k_n.row(0));
}

static void print_row(const char* label, const glass::RowMatrix& x, int row, int from, int count) {
    std::printf("%s:", label);
    for (int i = from; i < from + count; ++i) std::printf(" %.4f", x(row, i));
    std::printf("\n");
}

// Layer 0's scores q·k/√head_dim for every head and every query/key pair (key <= query), as one
// flat list; `wq`, `wk` are [out, in] and `layout` is the rotation used.
static std::vector<float> layer0_scores(const glass::ModelConfig& c, const glass::RowMatrix& xn,
                                        const glass::RowMatrix& wq, const glass::RowMatrix& wk,
                                        glass::RopeLayout layout) {
    glass::RowMatrix q = xn * wq.transpose();  // [n, n_heads * head_dim]
    glass::RowMatrix k = xn * wk.transpose();  // [n, n_kv_heads * head_dim]
    glass::apply_rope(q, c.n_heads, c.head_dim, 0, c.rope_theta, layout);
    glass::apply_rope(k, c.n_kv_heads, c.head_dim, 0, c.rope_theta, layout);
    const int hd = c.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> scores;  // [head][query][key <= query]
    for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / c.heads_per_kv_head();  // the KV head this query head reads
        for (Eigen::Index t = 0; t < q.rows(); ++t)
            for (Eigen::Index j = 0; j <= t; ++j)
                scores.push_back(q.row(t).segment(h * hd, hd).dot(k.row(j).segment(g * hd, hd)) * scale);
    }
    return scores;
}

static float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
    float worst = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

static int run(int argc, char** argv) {
    const int offset = argc > 1 ? example::int_arg(argv[1], "offset", 0, 100000) : 0;

    // ---- Part 1: the score depends only on the distance m - n ----
    std::printf("part 1: one query, one key, head_dim %d, theta %.0f\n", kHeadDim, kTheta);
    std::printf("pair frequencies (radians per position):");
    for (int i = 0; i < kHeadDim / 2; ++i) std::printf(" %g", glass::rope_frequency(i, kHeadDim, kTheta));
    std::printf("\n");
    glass::RowMatrix q(1, kHeadDim);
    q << 1, 0, 1, 0, 1, 0, 1, 0;
    const glass::RowMatrix k = q;  // the same vector: unrotated, q·k = 4
    print_row("q = k", q, 0, 0, kHeadDim);
    std::printf("q.k unrotated: %.4f\n", q.row(0).dot(k.row(0)));
    std::printf("offset added to every position: %d\n", offset);
    struct Placement { int m, n; };
    const Placement placements[] = {{2, 0}, {7, 5}, {102, 100}, {5, 0}, {105, 100}, {100, 100}};
    for (const Placement& p : placements) {
        const int m = p.m + offset, n = p.n + offset, d = p.m - p.n;
        // By hand: each pair contributes cos(d · frequency) (computed here in double).
        double by_hand = 0;
        for (int i = 0; i < kHeadDim / 2; ++i) by_hand += std::cos(d * std::pow(10000.0, -2.0 * i / kHeadDim));
        std::printf("q at %d, k at %d, distance %d: score %.4f, by hand %.4f\n", m, n, d,
                    rotated_score(q, k, m, n), by_hand);
    }

    // ---- Part 2: two pair layouts ----
    std::printf("\npart 2: which dimensions form a pair\n");
    glass::RowMatrix x(1, kHeadDim);
    x << 1, 2, 3, 4, 5, 6, 7, 8;
    glass::RowMatrix adjacent = x, half = x;
    glass::apply_rope(adjacent, 1, kHeadDim, 1, kTheta, glass::RopeLayout::adjacent_pairs);
    glass::apply_rope(half, 1, kHeadDim, 1, kTheta, glass::RopeLayout::half_split);
    print_row("x", x, 0, 0, kHeadDim);
    print_row("x at position 1, adjacent_pairs (0,1)(2,3)(4,5)(6,7)", adjacent, 0, 0, kHeadDim);
    print_row("x at position 1, half_split (0,4)(1,5)(2,6)(3,7)", half, 0, 0, kHeadDim);

    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;
    const std::vector<int> ids = tok.encode("Once upon a time", /*add_bos=*/true, /*add_eos=*/false);
    const glass::RowMatrix xn = glass::rmsnorm(glass::embed_tokens(model.embedding_table(), ids),
                                               model.layers[0].rms_att, c.norm_eps);  // [n, dim]
    const glass::RowMatrix wq = model.layers[0].wq, wk = model.layers[0].wk;  // llama2.c layout
    const glass::RowMatrix wq_hf = glass::permute_rows_adjacent_to_half_split(wq, c.n_heads, c.head_dim);
    const glass::RowMatrix wk_hf = glass::permute_rows_adjacent_to_half_split(wk, c.n_kv_heads, c.head_dim);
    const std::vector<float> original = layer0_scores(c, xn, wq, wk, glass::RopeLayout::adjacent_pairs);
    const std::vector<float> converted = layer0_scores(c, xn, wq_hf, wk_hf, glass::RopeLayout::half_split);
    const std::vector<float> mixed = layer0_scores(c, xn, wq_hf, wk_hf, glass::RopeLayout::adjacent_pairs);
    const int n = static_cast<int>(ids.size());
    const int pairs_per_head = n * (n + 1) / 2;
    std::printf("layer 0, \"Once upon a time\" (%d tokens), head 0, last query against keys 0..%d:\n", n, n - 1);
    const auto print_last_query = [&](const char* label, const std::vector<float>& s) {
        std::printf("%s:", label);
        for (int j = 0; j < n; ++j) std::printf(" %.4f", s[static_cast<size_t>(pairs_per_head - n + j)]);
        std::printf("\n");
    };
    print_last_query("llama2.c weights, adjacent_pairs", original);
    print_last_query("permuted weights, half_split", converted);
    print_last_query("permuted weights, adjacent_pairs (mismatch)", mixed);
    std::printf("scores compared, all %d heads: %zu\n", c.n_heads, original.size());
    const float converted_diff = max_abs_difference(original, converted);
    std::printf("permuted + half_split vs original, max abs difference: %.1e\n", converted_diff);
    std::printf("permuted + half_split equals original (within 1e-5): %s\n", converted_diff <= 1e-5f ? "yes" : "no");
    std::printf("mismatch vs original, max abs difference: %.4f\n", max_abs_difference(original, mixed));

    // ---- Part 3: what θ and Llama 3.1's scaling change ----
    const int llama_head_dim = 128, llama_pairs = llama_head_dim / 2;
    const double two_pi = 2 * 3.14159265358979323846;
    std::printf("\npart 3: wavelength = 2 pi / frequency = positions per full turn (head_dim %d, %d pairs)\n",
                llama_head_dim, llama_pairs);
    for (float theta : {10000.0f, 500000.0f}) {
        std::printf("theta %.0f: pair 0 wavelength %.2f, pair %d wavelength %.0f\n", theta,
                    two_pi / glass::rope_frequency(0, llama_head_dim, theta), llama_pairs - 1,
                    two_pi / glass::rope_frequency(llama_pairs - 1, llama_head_dim, theta));
    }
    const glass::RopeScaling scaling = glass::llama3_rope_scaling();
    std::printf("llama 3.1 scaling: factor %.0f, low_freq_factor %.0f, high_freq_factor %.0f, original context %d\n",
                scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor, scaling.original_context);
    int kept = 0, slowed = 0, blended = 0, first_blended = -1;
    for (int i = 0; i < llama_pairs; ++i) {
        const float f = glass::rope_frequency(i, llama_head_dim, 500000.0f);
        const float scaled = glass::rope_scaled_frequency(f, scaling);
        if (scaled == f) {
            ++kept;
        } else if (scaled == f / scaling.factor) {
            ++slowed;
        } else {
            ++blended;
            if (first_blended < 0) first_blended = i;
        }
    }
    std::printf("theta 500000 pairs kept (wavelength under %.0f): %d\n",
                scaling.original_context / scaling.high_freq_factor, kept);
    std::printf("theta 500000 pairs blended: %d (pairs %d..%d)\n", blended, first_blended, first_blended + blended - 1);
    std::printf("theta 500000 pairs slowed %.0fx (wavelength over %.0f): %d\n", scaling.factor,
                scaling.original_context / scaling.low_freq_factor, slowed);
    for (int i : {first_blended, first_blended + blended - 1, llama_pairs - 1}) {
        const float f = glass::rope_frequency(i, llama_head_dim, 500000.0f);
        const float scaled = glass::rope_scaled_frequency(f, scaling);
        std::printf("pair %d: wavelength %.0f -> %.0f (frequency divided by %.3f)\n", i, two_pi / f,
                    two_pi / scaled, f / scaled);
    }
    std::printf("shipped model (head_dim %d, theta %.0f, context %d) wavelengths:", c.head_dim, c.rope_theta,
                c.seq_len);
    for (int i = 0; i < c.head_dim / 2; ++i)
        std::printf(" %.2f", two_pi / glass::rope_frequency(i, c.head_dim, c.rope_theta));
    std::printf("\n");
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
