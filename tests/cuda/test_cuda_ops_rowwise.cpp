// tests/cuda/test_cuda_ops_rowwise.cpp — ops on one row at a time: embedding, rmsnorm, rope, softmax.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

void add_embedding(std::vector<Case>& cases) {
    struct S { int vocab, dim, n; };
    for (S s : {S{1, 1, 1}, S{5, 3, 7}, S{512, 64, 33}, S{1000, 257, 100}, S{32000, 128, 2048}})
        for (gc::WeightType type : kAllTypes)
            cases.push_back({fmt("embedding(%s, vocab=%d, dim=%d, n=%d)", gc::to_string(type), s.vocab, s.dim, s.n),
                             0.0,  // a copy: exact
                             s.vocab * s.dim > 1000000, [s, type](Rng& rng) {
                TestWeights table = make_weights(rng, s.vocab, s.dim, type, 1.0f);
                std::uniform_int_distribution<int> pick(0, s.vocab - 1);
                std::vector<int> ids(static_cast<std::size_t>(s.n));
                for (int& id : ids) id = pick(rng);
                gc::DeviceBuffer d_ids = gc::to_device(std::span<const int>(ids));
                gc::DeviceBuffer out = poisoned(std::size_t(s.n) * s.dim);
                gc::embedding(table.device.view, d_ids.i32(), s.n, out.f32());
                const glass::ConstMatrixMap map(table.reference.data(), s.vocab, s.dim);
                return relative_error(gc::to_host(out.f32(), std::size_t(s.n) * s.dim),
                                      glass::embed_tokens(map, ids));
            }});
}

void add_rmsnorm(std::vector<Case>& cases) {
    struct S { int n, dim; };
    for (S s : {S{1, 1}, S{1, 64}, S{7, 63}, S{33, 257}, S{2048, 288}, S{3, 4096}, S{1, 8192}})
        for (bool naive : {true, false})
            cases.push_back({fmt("rmsnorm(%s, n=%d, dim=%d)", naive ? "naive" : "block", s.n, s.dim), kF32,
                             s.n * s.dim > 100000, [s, naive](Rng& rng) {
                const RowMatrix x = random_matrix(rng, s.n, s.dim, 2.0f);
                const std::vector<float> gain = random_floats(rng, std::size_t(s.dim));
                gc::DeviceBuffer d_x = to_device(x), d_gain = gc::to_device(std::span<const float>(gain));
                gc::DeviceBuffer out = poisoned(std::size_t(s.n) * s.dim);
                (naive ? gc::rmsnorm_naive : gc::rmsnorm)(d_x.f32(), d_gain.f32(), s.n, s.dim, 1e-5f, out.f32());
                const RowMatrix want = glass::rmsnorm(x, glass::ConstVectorMap(gain.data(), s.dim), 1e-5f);
                return relative_error(gc::to_host(out.f32(), std::size_t(s.n) * s.dim), want);
            }});
}

void add_rope(std::vector<Case>& cases) {
    struct S { int n, heads, head_dim, start; float theta; };
    for (S s : {S{1, 1, 2, 0, 1e4f}, S{5, 5, 6, 1, 1e4f}, S{7, 3, 64, 5, 1e4f}, S{33, 8, 128, 100, 1e4f},
                S{2048, 4, 64, 0, 1e4f}, S{3, 32, 128, 4093, 1e4f}, S{9, 8, 128, 2000, 5e5f}})
        for (glass::RopeLayout layout : {glass::RopeLayout::adjacent_pairs, glass::RopeLayout::half_split})
            for (bool start_on_device : {false, true})  // IntArg: a number, or read from device memory
                cases.push_back({fmt("rope(%s, n=%d, heads=%d, head_dim=%d, start=%d%s, theta=%g)",
                                     layout == glass::RopeLayout::adjacent_pairs ? "adjacent" : "half_split",
                                     s.n, s.heads, s.head_dim, s.start, start_on_device ? " on device" : "",
                                     double(s.theta)),
                                 kF32, s.n >= 2048, [s, layout, start_on_device](Rng& rng) {
                    RowMatrix x = random_matrix(rng, s.n, s.heads * s.head_dim);
                    gc::DeviceBuffer d_x = to_device(x);  // rotated in place: poison is not possible
                    gc::DeviceBuffer freq = gc::rope_frequencies(s.head_dim, s.theta);
                    const int start[1] = {s.start};
                    gc::DeviceBuffer d_start = gc::to_device(std::span<const int>(start));
                    gc::rope(d_x.f32(), s.n, s.heads, s.head_dim,
                             start_on_device ? gc::IntArg::at(d_start.i32()) : gc::IntArg(s.start), freq.f32(), layout);
                    glass::apply_rope(x, s.heads, s.head_dim, s.start, s.theta, layout);
                    return relative_error(gc::to_host(d_x.f32(), std::size_t(x.size())), x);
                }});
}

namespace {

// glass::softmax_inplace's steps with the one inexact step, the running fp32 sum, done in double.
// Why the block kernel needs it: a sequential fp32 sum drops every addend smaller than half an ulp
// of the running total, so over a long row of widely spread scores the CPU's own sum is off by
// 4e-5 (n = 32,000) to 2e-4 (n = 128,256) relative (measured with these inputs), while the block
// kernel's tree of short sums is good to ~1e-7. The naive kernel adds in the CPU's order and is
// held to the CPU itself.
void softmax_exact_sum(float* x, int n) {
    float max_value = -INFINITY;
    for (int i = 0; i < n; ++i) max_value = std::fmax(max_value, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max_value);
        sum += x[i];
    }
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / sum);
}

}  // namespace

void add_softmax(std::vector<Case>& cases) {
    struct S { int rows, n; };
    for (S s : {S{1, 1}, S{1, 2}, S{3, 31}, S{64, 1000}, S{2, 2049}, S{1, 32000}, S{4, 128256}})
        for (bool naive : {true, false})
            cases.push_back({fmt("softmax(%s, rows=%d, n=%d, some -inf)", naive ? "naive vs CPU" : "block vs exact sum",
                                 s.rows, s.n),
                             kF32, s.n > 100000, [s, naive](Rng& rng) {
                RowMatrix x = random_matrix(rng, s.rows, s.n, 4.0f);
                std::uniform_int_distribution<int> visible(1, s.n);
                for (int r = 0; r < s.rows; ++r)  // mask a random tail, as the causal mask does
                    for (int j = visible(rng); j < s.n; ++j) x(r, j) = -INFINITY;
                gc::DeviceBuffer d_x = to_device(x);
                (naive ? gc::softmax_rows_naive : gc::softmax_rows)(d_x.f32(), s.rows, s.n);
                for (int r = 0; r < s.rows; ++r)
                    (naive ? glass::softmax_inplace : softmax_exact_sum)(x.row(r).data(), s.n);
                return relative_error(gc::to_host(d_x.f32(), std::size_t(x.size())), x);
            }});
}

}  // namespace cuda_ops_test
