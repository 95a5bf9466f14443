// Attention (journey step 4): the causal mask, 1/sqrt(d) scaling, overflow-safe softmax, and the
// grouped-query head mapping for every ratio that real models use (pitfalls 3 and 8).
#include <cmath>
#include <random>

#include "test_support.hpp"

namespace test_attention {  // this file's own names (tests are built in unity batches)

namespace {

glass::RowMatrix random_matrix(int rows, int cols, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    glass::RowMatrix m(rows, cols);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) m(i, j) = normal(rng);
    return m;
}

// Attention with scalar loops only, in double, with the KV head of query head h given by `kv_of`.
glass::RowMatrix naive_attention(const glass::RowMatrix& q, const glass::RowMatrix& k,
                                 const glass::RowMatrix& v, int start_pos, int n_heads, int hd,
                                 const std::function<int(int)>& kv_of) {
    const int n_q = static_cast<int>(q.rows());
    glass::RowMatrix out = glass::RowMatrix::Zero(n_q, n_heads * hd);
    for (int h = 0; h < n_heads; ++h) {
        const int g = kv_of(h);
        for (int i = 0; i < n_q; ++i) {
            const int visible = start_pos + i + 1;  // keys 0 .. start_pos + i
            std::vector<double> w(static_cast<size_t>(visible));
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < visible; ++j) {
                double s = 0;
                for (int d = 0; d < hd; ++d) s += double(q(i, h * hd + d)) * k(j, g * hd + d);
                w[size_t(j)] = s / std::sqrt(double(hd));
                mx = std::max(mx, w[size_t(j)]);
            }
            for (double& x : w) sum += x = std::exp(x - mx);
            for (int d = 0; d < hd; ++d) {
                double acc = 0;
                for (int j = 0; j < visible; ++j) acc += w[size_t(j)] / sum * v(j, g * hd + d);
                out(i, h * hd + d) = static_cast<float>(acc);
            }
        }
    }
    return out;
}

double relative_error(const glass::RowMatrix& got, const glass::RowMatrix& want) {
    return (got - want).norm() / want.norm();
}

}  // namespace

TEST_CASE("GQA: query head h reads KV head h / (n_heads / n_kv_heads), for every common ratio") {
    struct Shape { int n_heads, n_kv_heads; };
    // MHA (1), 2, 4, 7 (28/4, Qwen2-7B), 3 (9/3), and MQA (n_kv_heads = 1).
    const Shape shapes[] = {{4, 4}, {8, 4}, {8, 2}, {28, 4}, {9, 3}, {6, 1}};
    std::mt19937 rng(2024);
    for (const Shape s : shapes) {
        CAPTURE(s.n_heads);
        CAPTURE(s.n_kv_heads);
        const int hd = 8, start_pos = 3, n_q = 5, n_k = start_pos + n_q;
        const glass::RowMatrix q = random_matrix(n_q, s.n_heads * hd, rng);
        const glass::RowMatrix k = random_matrix(n_k, s.n_kv_heads * hd, rng);
        const glass::RowMatrix v = random_matrix(n_k, s.n_kv_heads * hd, rng);
        const int group = s.n_heads / s.n_kv_heads;
        const glass::RowMatrix got = glass::causal_attention(
            q, k, v, start_pos, {s.n_heads, s.n_kv_heads, hd}, 1.0f / std::sqrt(float(hd)));
        const glass::RowMatrix repeat = naive_attention(q, k, v, start_pos, s.n_heads, hd,
                                                        [&](int h) { return h / group; });
        // fp32 vs a double reference over ≤ 8 keys of width 8: rounding ~1e-7 relative.
        CHECK(relative_error(got, repeat) <= 1e-5);
        if (s.n_kv_heads > 1 && group > 1) {
            // The wrong mapping ("tile": h % n_kv_heads) must give a clearly different answer,
            // which shows this test can tell the two apart.
            const glass::RowMatrix tile = naive_attention(q, k, v, start_pos, s.n_heads, hd,
                                                          [&](int h) { return h % s.n_kv_heads; });
            CHECK(relative_error(got, tile) > 1e-2);
        }
    }
}

TEST_CASE("causal mask: a query never sees later keys; changing them changes nothing") {
    std::mt19937 rng(7);
    const int hd = 4, n = 6;
    const glass::RowMatrix q = random_matrix(n, hd, rng), k = random_matrix(n, hd, rng), v = random_matrix(n, hd, rng);
    glass::RowMatrix weights;
    const glass::RowMatrix out = glass::attention_head(q, k, v, 0, 0.5f, &weights);
    for (int i = 0; i < n; ++i) {
        for (int j = i + 1; j < n; ++j) CHECK(weights(i, j) == 0.0f);
        CHECK(weights.row(i).sum() == doctest::Approx(1.0).epsilon(1e-6));
    }
    glass::RowMatrix k2 = k, v2 = v;
    k2.row(n - 1).setConstant(100.0f);
    v2.row(n - 1).setConstant(-100.0f);
    const glass::RowMatrix out2 = glass::attention_head(q, k2, v2, 0, 0.5f);
    CHECK(out2.topRows(n - 1) == out.topRows(n - 1));  // bit-for-bit
}

TEST_CASE("bottom-right mask: query i of a chunk starting at s sees keys 0..s+i (pitfall 10)") {
    std::mt19937 rng(11);
    const int hd = 4, s = 4, n_q = 3;
    const glass::RowMatrix q = random_matrix(n_q, hd, rng), k = random_matrix(s + n_q, hd, rng),
                           v = random_matrix(s + n_q, hd, rng);
    glass::RowMatrix w;
    glass::attention_head(q, k, v, s, 1.0f, &w);
    for (int i = 0; i < n_q; ++i)
        for (int j = 0; j < s + n_q; ++j) CHECK((w(i, j) > 0.0f) == (j <= s + i));
}

TEST_CASE("softmax subtracts the maximum: huge scores do not overflow (pitfall 8)") {
    float big[3] = {1000.0f, 999.0f, -1000.0f};  // exp(1000) is inf in fp32
    glass::softmax_inplace(big, 3);
    CHECK(big[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))));
    CHECK(big[1] == doctest::Approx(std::exp(-1.0) / (1.0 + std::exp(-1.0))));
    CHECK(big[2] == 0.0f);
    float masked[3] = {-INFINITY, 2.0f, -INFINITY};
    glass::softmax_inplace(masked, 3);
    CHECK(masked[1] == 1.0f);
    float all_masked[2] = {-INFINITY, -INFINITY};  // would be -inf - -inf = NaN: refused instead
    CHECK_THROWS_AS(glass::softmax_inplace(all_masked, 2), glass::Error);
    // Attention itself with scores around 1e4: finite and correct.
    glass::RowMatrix q(1, 2), k(2, 2), v(2, 2);
    q << 100.0f, 0.0f;
    k << 100.0f, 0.0f, 99.99f, 0.0f;
    v << 1.0f, 0.0f, 0.0f, 1.0f;
    const glass::RowMatrix out = glass::attention_head(q, k, v, 1, 1.0f);
    CHECK(std::isfinite(out(0, 0)));
    CHECK(out(0, 0) == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-3));
}

TEST_CASE("C3: the toy attention gives weights 0.731/0.269 and output 7.31/5.38") {
    glass::RowMatrix q(1, 2), k(2, 2), v(2, 2);
    q << 1, 0;
    k << 1, 0, 0, 1;
    v << 10, 0, 0, 20;
    glass::RowMatrix w;
    const glass::RowMatrix out = glass::attention_head(q, k, v, 1, 1.0f /* no scaling */, &w);
    const double e = std::exp(1.0);
    CHECK(w(0, 0) == doctest::Approx(e / (1 + e)));
    CHECK(out(0, 0) == doctest::Approx(10 * e / (1 + e)));
    CHECK(out(0, 1) == doctest::Approx(20 / (1 + e)));
}

}  // namespace test_attention
