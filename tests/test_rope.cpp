// RoPE (journey step 3): both pair layouts agree through the weight permutation Hugging Face
// converters apply (pitfall 1), on random weights and on the whole real model; rotation encodes
// relative position.
#include <cmath>
#include <cstring>
#include <random>

#include "test_support.hpp"

namespace {

glass::RowMatrix random_matrix(int rows, int cols, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    glass::RowMatrix m(rows, cols);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) m(i, j) = normal(rng);
    return m;
}

}  // namespace

TEST_CASE("position 0 is the identity; the angle of pair i is pos * theta^(-2i/d)") {
    std::mt19937 rng(1);
    glass::RowMatrix x = random_matrix(1, 16, rng);
    const glass::RowMatrix before = x;
    glass::apply_rope(x, 2, 8, 0, 10000.0f, glass::RopeLayout::adjacent_pairs);
    CHECK(x == before);
    glass::RowMatrix e = glass::RowMatrix::Zero(1, 8);
    e(0, 2) = 1.0f;  // pair 1 = dims (2,3), unit vector along dim 2
    glass::apply_rope(e, 1, 8, 5, 10000.0f, glass::RopeLayout::adjacent_pairs);
    const double angle = 5 * std::pow(10000.0, -2.0 / 8.0);
    CHECK(e(0, 2) == doctest::Approx(std::cos(angle)));
    CHECK(e(0, 3) == doctest::Approx(std::sin(angle)));
}

TEST_CASE("scores depend only on the distance between positions") {
    std::mt19937 rng(2);
    const glass::RowMatrix q0 = random_matrix(1, 8, rng), k0 = random_matrix(1, 8, rng);
    auto score = [&](int qpos, int kpos, glass::RopeLayout layout) {
        glass::RowMatrix q = q0, k = k0;
        glass::apply_rope(q, 1, 8, qpos, 10000.0f, layout);
        glass::apply_rope(k, 1, 8, kpos, 10000.0f, layout);
        return static_cast<double>(q.row(0).dot(k.row(0)));
    };
    for (auto layout : {glass::RopeLayout::adjacent_pairs, glass::RopeLayout::half_split}) {
        CHECK(score(7, 3, layout) == doctest::Approx(score(104, 100, layout)).epsilon(1e-4));
        CHECK(score(7, 3, layout) != doctest::Approx(score(7, 4, layout)).epsilon(1e-4));
    }
}

TEST_CASE("half-split RoPE on permuted weights equals adjacent-pair RoPE on the originals") {
    std::mt19937 rng(3);
    const int n_heads = 4, hd = 16, dim = n_heads * hd, n = 6, start = 9;
    const glass::RowMatrix x = random_matrix(n, dim, rng);
    const glass::RowMatrix wq = random_matrix(dim, dim, rng);  // adjacent (llama2.c) layout
    const glass::RowMatrix wq_hf = glass::permute_rows_adjacent_to_half_split(wq, n_heads, hd);
    CHECK(glass::permute_rows_half_split_to_adjacent(wq_hf, n_heads, hd) == wq);  // inverse
    CHECK(wq_hf != wq);

    glass::RowMatrix q_adj = x * wq.transpose();
    glass::RowMatrix q_hf = x * wq_hf.transpose();
    glass::apply_rope(q_adj, n_heads, hd, start, 10000.0f, glass::RopeLayout::adjacent_pairs);
    glass::apply_rope(q_hf, n_heads, hd, start, 10000.0f, glass::RopeLayout::half_split);
    // Same numbers, only the order of dimensions within each head differs.
    const glass::RowMatrix back = glass::permute_rows_half_split_to_adjacent(q_hf.transpose(), n_heads, hd).transpose();
    CHECK((back - q_adj).cwiseAbs().maxCoeff() <= 1e-5f * q_adj.cwiseAbs().maxCoeff());

    // Mixing them (half-split rotation on adjacent-layout weights) is silently wrong: detect it.
    glass::RowMatrix q_mixed = x * wq.transpose();
    glass::apply_rope(q_mixed, n_heads, hd, start, 10000.0f, glass::RopeLayout::half_split);
    CHECK((q_mixed - q_adj).norm() > 0.1 * q_adj.norm());
}

TEST_CASE("the real model converted to Hugging Face layout gives the same logits") {
    const glass::Model& original = test::shipped();
    const glass::ModelConfig c = original.config;
    // Copy the checkpoint's weights, permute every layer's W_Q and W_K rows as an HF converter does.
    const std::int64_t n_floats = (glass::llama2c_file_bytes(c) - 28) / 4;
    auto buffer = std::make_shared<std::vector<float>>(original.token_embedding, original.token_embedding + n_floats);
    glass::Model hf = glass::model_from_llama2c_bytes(c, buffer->data(), buffer);
    hf.config.rope_layout = glass::RopeLayout::half_split;
    for (int l = 0; l < c.n_layers; ++l) {
        const glass::RowMatrix wq = glass::permute_rows_adjacent_to_half_split(original.layers[size_t(l)].wq, c.n_heads, c.head_dim());
        const glass::RowMatrix wk = glass::permute_rows_adjacent_to_half_split(original.layers[size_t(l)].wk, c.n_kv_heads, c.head_dim());
        std::memcpy(const_cast<float*>(hf.layers[size_t(l)].wq.data()), wq.data(), sizeof(float) * size_t(wq.size()));
        std::memcpy(const_cast<float*>(hf.layers[size_t(l)].wk.data()), wk.data(), sizeof(float) * size_t(wk.size()));
    }
    const std::vector<int> ids = test::shipped_tok().encode("Once upon a time there was a little cat", true, false);
    glass::CpuSession a(original), b(hf);
    const std::span<const float> la = a.prefill(ids);
    const std::vector<float> want(la.begin(), la.end());
    const std::span<const float> lb = b.prefill(ids);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(double(lb[i]) - want[i]));
        scale = std::max(scale, std::abs(double(want[i])));
    }
    CHECK(diff / scale <= 1e-5);  // same arithmetic, dimensions visited in another order

    // And the mismatch pitfall: HF weights with adjacent-pair rotation give different logits.
    hf.config.rope_layout = glass::RopeLayout::adjacent_pairs;
    glass::CpuSession wrong(hf);
    const std::span<const float> lw = wrong.prefill(ids);
    double wrong_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong_diff = std::max(wrong_diff, std::abs(double(lw[i]) - want[i]));
    CHECK(wrong_diff / scale > 1e-3);
}
