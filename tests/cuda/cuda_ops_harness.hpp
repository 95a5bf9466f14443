// tests/cuda/cuda_ops_harness.hpp — the op harness's shared pieces: a row of the table (Case),
// random inputs, NaN-poisoned device outputs, weights as the device holds them, the error measure,
// the CPU attention references several families use, and the families' table builders.
// test_cuda_ops.cpp runs the table; test_cuda_ops_<family>.cpp add its rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "glass_cuda.hpp"
#include "paged.hpp"
#include "../relative_error.hpp"

namespace cuda_ops_test {

namespace gc = glass::cuda;
using glass::RowMatrix;

using Rng = std::mt19937;

inline std::vector<float> random_floats(Rng& rng, std::size_t n, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

inline RowMatrix random_matrix(Rng& rng, int rows, int cols, float scale = 1.0f) {
    const std::vector<float> v = random_floats(rng, static_cast<std::size_t>(rows) * cols, scale);
    return Eigen::Map<const RowMatrix>(v.data(), rows, cols);
}

using test::relative_error;  // ‖gpu − cpu‖₂ / ‖cpu‖₂; NaN anywhere in gpu: infinite
inline double relative_error(std::span<const float> gpu, const RowMatrix& cpu) {
    return relative_error(gpu, std::span<const float>(cpu.data(), static_cast<std::size_t>(cpu.size())));
}

// A device output of n floats, NaN-poisoned before the launch.
inline gc::DeviceBuffer poisoned(std::size_t n) {
    gc::DeviceBuffer b(n * sizeof(float));
    gc::poison(b.f32(), n);
    return b;
}

inline gc::DeviceBuffer to_device(const RowMatrix& m) {
    return gc::to_device(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())));
}

// A weight matrix on the device as `type`, and the exact fp32 values the device holds (for the
// CPU reference): f16/bf16 round on the way up, so the reference uses the rounded numbers.
struct TestWeights {
    gc::OwnedMatrix device;
    RowMatrix reference;
};
inline TestWeights make_weights(Rng& rng, int rows, int cols, gc::WeightType type, float scale) {
    const RowMatrix w = random_matrix(rng, rows, cols, scale);
    TestWeights t{gc::upload_matrix(w.data(), rows, cols, type), RowMatrix(rows, cols)};
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    gc::DeviceBuffer widened = poisoned(n);
    gc::widen_weights(t.device.view.data, widened.f32(), n, type);
    gc::download(t.reference.data(), widened.data(), n * sizeof(float));
    return t;
}

struct Case {
    std::string name;    // op(variant, shape)
    double tolerance;    // on the value run() returns
    bool big;            // skipped by --quick
    std::function<double(Rng&)> run;
};

inline constexpr gc::WeightType kAllTypes[] = {gc::WeightType::f32, gc::WeightType::f16, gc::WeightType::bf16};
inline constexpr double kF32 = 1e-5;  // see the top of test_cuda_ops.cpp

inline std::string fmt(const char* f, auto... args) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, args...);
    return buf;
}

// ---- CPU references shared by the attention, KV cache, graph and paged rows ----------------------

// q [n_q, heads*hd], keys/values [n_k, kv_heads*hd], n_k = start + n_q; the window and soft-cap of d.
inline RowMatrix cpu_attention(const RowMatrix& q, const RowMatrix& k, const RowMatrix& v, int start,
                        const gc::AttentionDims& d, float scale = 0.0f) {
    return glass::causal_attention(q, k, v, start, {d.n_heads, d.n_kv_heads, d.head_dim, d.window, d.softcap},
                                   scale > 0.0f ? scale : 1.0f / std::sqrt(float(d.head_dim)));
}

// The int8 KV cache's form of fp32 rows x [n, n_kv_heads * head_dim]: glass::quantize_kv_row's
// integers and scales row by row, and what they dequantize to (dequantize_kv_row), the K/V the
// CPU's int8 cache attends over. up() puts the integers and scales on the device.
struct Int8Kv {
    std::vector<std::int8_t> q;
    std::vector<float> scales;  // [n, n_kv_heads]
    RowMatrix dequantized;
    gc::DeviceBuffer d_q, d_scales;
    gc::KvRows up() {
        d_q = gc::DeviceBuffer(q.size());
        gc::upload(d_q.data(), q.data(), q.size());
        d_scales = gc::to_device(std::span<const float>(scales));
        return gc::KvRows::int8(static_cast<const std::int8_t*>(d_q.data()), d_scales.f32());
    }
};
inline Int8Kv quantize_rows(const RowMatrix& x, int n_kv_heads, int head_dim) {
    Int8Kv r;
    r.q.resize(std::size_t(x.size()));
    r.scales.resize(std::size_t(x.rows()) * n_kv_heads);
    r.dequantized.resize(x.rows(), x.cols());
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        std::int8_t* q = r.q.data() + i * x.cols();
        float* s = r.scales.data() + i * n_kv_heads;
        glass::quantize_kv_row(x.row(i).data(), n_kv_heads, head_dim, q, s);
        glass::dequantize_kv_row(q, s, n_kv_heads, head_dim, r.dequantized.row(i).data());
    }
    return r;
}

// Draws per sampling case; --quick takes fewer (under compute-sanitizer every launch of the sort
// costs tens of milliseconds).
inline int g_sample_draws = 64;

// ---- the table, family by family (in the order the rows are numbered) ----------------------------

void add_embedding(std::vector<Case>& cases);   // test_cuda_ops_rowwise.cpp
void add_rmsnorm(std::vector<Case>& cases);
void add_rope(std::vector<Case>& cases);
void add_matmul(std::vector<Case>& cases);      // test_cuda_ops_matmul.cpp
void add_quantized_matmul(std::vector<Case>& cases);
void add_kquant_matmul(std::vector<Case>& cases);
void add_softmax(std::vector<Case>& cases);     // test_cuda_ops_rowwise.cpp
void add_attention(std::vector<Case>& cases);   // test_cuda_ops_attention.cpp
void add_mlp(std::vector<Case>& cases);         // test_cuda_ops_matmul.cpp
void add_sampling(std::vector<Case>& cases);    // test_cuda_ops_sampling.cpp
void add_kv_cache(std::vector<Case>& cases);    // test_cuda_ops_attention.cpp
void add_graph(std::vector<Case>& cases);
void add_rope_rows(std::vector<Case>& cases);   // test_cuda_ops_paged.cpp
void add_paged(std::vector<Case>& cases);
void add_families(std::vector<Case>& cases);  // test_cuda_ops_families.cpp

}  // namespace cuda_ops_test
