// RoPE (journey step 3): both pair layouts agree through the weight permutation Hugging Face
// converters apply (pitfall 1), on random weights and on the whole real model; rotation encodes
// relative position; Llama 3.1's frequency scaling against its rule worked out in double
// (pitfall 2), and no scaling leaves every angle bit for bit as before.
#include <cmath>
#include <cstring>
#include <random>

#include "glass/fast/random_model.hpp"
#include "test_support.hpp"

namespace test_rope {  // this file's own names (tests are built in unity batches)

TEST_CASE("position 0 is the identity; the angle of pair i is pos * theta^(-2i/d)") {
    std::mt19937 rng(1);
    glass::RowMatrix x = glass::fast::random_normal_matrix(1, 16, rng);
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
    const glass::RowMatrix q0 = glass::fast::random_normal_matrix(1, 8, rng), k0 = glass::fast::random_normal_matrix(1, 8, rng);
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
    const glass::RowMatrix x = glass::fast::random_normal_matrix(n, dim, rng);
    const glass::RowMatrix wq = glass::fast::random_normal_matrix(dim, dim, rng);  // adjacent (llama2.c) layout
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
        const glass::RowMatrix wq = glass::permute_rows_adjacent_to_half_split(original.layers[size_t(l)].wq, c.n_heads, c.head_dim);
        const glass::RowMatrix wk = glass::permute_rows_adjacent_to_half_split(original.layers[size_t(l)].wk, c.n_kv_heads, c.head_dim);
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

TEST_CASE("without scaling, pair i turns by exactly pos * rope_frequency(i): the CUDA twin's tables stay valid") {
    // A unit vector on the first dimension of pair i comes out as (cos, sin) of its angle, with no
    // rounding (1·c − 0·s and 1·s + 0·c are exact), so the comparison can be bitwise.
    const int hd = 128;
    for (float theta : {10000.0f, 500000.0f})
        for (int pos : {0, 1, 7, 4093})
            for (auto layout : {glass::RopeLayout::adjacent_pairs, glass::RopeLayout::half_split})
                for (int i = 0; i < hd / 2; ++i) {
                    const int a = layout == glass::RopeLayout::adjacent_pairs ? 2 * i : i;
                    const int b = layout == glass::RopeLayout::adjacent_pairs ? 2 * i + 1 : i + hd / 2;
                    glass::RowMatrix e = glass::RowMatrix::Zero(1, hd);
                    e(0, a) = 1.0f;
                    glass::apply_rope(e, 1, hd, pos, theta, layout);
                    const float angle = static_cast<float>(pos) * glass::rope_frequency(i, hd, theta);
                    CHECK(e(0, a) == std::cos(angle));
                    CHECK(e(0, b) == std::sin(angle));
                }
}

namespace {

// Llama 3.1's rule (Meta's apply_scaling) in double, from the published description: wavelength
// λ = 2π / f; λ < 8192/4 keeps f, λ > 8192/1 gives f/8, otherwise with s = (8192/λ − 1) / (4 − 1)
// the result is (1 − s)·f/8 + s·f.
double llama31_scaled(double f) {
    const double pi = 3.14159265358979323846, wavelength = 2 * pi / f;
    if (wavelength < 8192.0 / 4) return f;
    if (wavelength > 8192.0 / 1) return f / 8;
    const double s = (8192.0 / wavelength - 1) / (4 - 1);
    return (1 - s) * f / 8 + s * f;
}

}  // namespace

TEST_CASE("Llama 3.1 RoPE scaling: fast pairs kept, slow pairs slowed 8x, the band between blended") {
    const glass::RopeScaling s = glass::llama3_rope_scaling();
    const double pi = 3.14159265358979323846;
    // Ratio scaled / original for a pair of the given wavelength (in positions).
    const auto ratio = [&](double wavelength) {
        const float f = static_cast<float>(2 * pi / wavelength);
        return static_cast<double>(glass::rope_scaled_frequency(f, s)) / f;
    };
    // Fast pairs (a full turn in under 2,048 positions) keep their frequency, bit for bit.
    for (double w : {6.28, 100.0, 2000.0, 2047.0}) CHECK(ratio(w) == 1.0);
    // Slow pairs (over 8,192 positions per turn) are divided by 8 exactly (a power of two).
    for (double w : {8200.0, 54410.0, 2.6e6}) CHECK(ratio(w) == 0.125);
    // In between, by hand: λ = 4096 gives s = (2 − 1)/3 = 1/3 and (2/3)/8 + 1/3 = 5/12;
    // λ = 6144 gives s = (4/3 − 1)/3 = 1/9 and (8/9)/8 + 1/9 = 2/9. fp32 arithmetic: 1e-6.
    CHECK(ratio(4096.0) == doctest::Approx(5.0 / 12).epsilon(1e-6));
    CHECK(ratio(6144.0) == doctest::Approx(2.0 / 9).epsilon(1e-6));
    // Across the whole band, against the rule in double (fp32 wavelength and blend: 1e-5).
    for (double w : {2100.0, 2500.0, 3000.0, 5000.0, 7500.0, 8100.0}) {
        CAPTURE(w);
        CHECK(ratio(w) == doctest::Approx(llama31_scaled(2 * pi / w) / (2 * pi / w)).epsilon(1e-5));
    }
    // Continuous at both edges: just inside the band the blend is next to the outside value.
    CHECK(ratio(2048.5) == doctest::Approx(1.0).epsilon(1e-3));
    CHECK(ratio(8191.0) == doctest::Approx(0.125).epsilon(1e-3));

    // Every pair of a Llama 3.1 head (θ = 500,000, head_dim 128), against the rule in double.
    int kept = 0, slowed = 0, blended = 0;
    for (int i = 0; i < 64; ++i) {
        CAPTURE(i);
        const double f = std::pow(500000.0, -2.0 * i / 128);
        const double want = llama31_scaled(f);
        const float got = glass::rope_scaled_frequency(glass::rope_frequency(i, 128, 500000.0f), s);
        CHECK(got == doctest::Approx(want).epsilon(1e-5));  // fp32 pow and division: a few ulps
        kept += want == f;
        slowed += want == f / 8;
        blended += want != f && want != f / 8;
    }
    // Most of each end, a narrow band between (pairs 29..34 for these numbers).
    CHECK(kept + slowed + blended == 64);
    CHECK(blended == 6);
    CHECK(kept == 29);
    CHECK(slowed == 29);

    // apply_rope with scaling turns a slow pair 8 times less far.
    glass::RowMatrix e = glass::RowMatrix::Zero(1, 128);
    e(0, 126) = 1.0f;  // pair 63, adjacent layout
    glass::apply_rope(e, 1, 128, 100000, 500000.0f, glass::RopeLayout::adjacent_pairs, s);
    const double angle = 100000 * std::pow(500000.0, -126.0 / 128) / 8;
    CHECK(e(0, 126) == doctest::Approx(std::cos(angle)).epsilon(1e-5));
    CHECK(e(0, 127) == doctest::Approx(std::sin(angle)).epsilon(1e-5));
}

TEST_CASE("RoPE scaling: no scaling returns the frequency untouched; bad parameters are errors naming them") {
    const glass::RopeScaling none;
    for (float f : {1.0f, 0.1f, 3.7e-6f}) CHECK(glass::rope_scaled_frequency(f, none) == f);
    glass::RopeScaling bad = glass::llama3_rope_scaling();
    bad.low_freq_factor = 4.0f;
    bad.high_freq_factor = 1.0f;
    CHECK_THROWS_WITH_AS(glass::rope_scaled_frequency(0.001f, bad),
                         doctest::Contains("low_freq_factor 4, high_freq_factor 1"), glass::Error);
    bad = glass::llama3_rope_scaling();
    bad.factor = -2.0f;
    CHECK_THROWS_WITH_AS(glass::rope_scaled_frequency(0.001f, bad), doctest::Contains("factor -2"), glass::Error);
    bad.factor = std::nanf("");
    CHECK_THROWS_AS(glass::rope_scaled_frequency(0.001f, bad), glass::Error);
}

}  // namespace test_rope
