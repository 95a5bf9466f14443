// tests/cuda/test_cuda_ops.cpp — every CUDA op × many shapes against the CPU reference.
//
// One table, in the spirit of ggml's test-backend-ops: each row is an op, a shape and a variant
// (kernel, weight type, layout); it gets fresh random inputs (seeded by its row number, so a
// failure reproduces), runs on the GPU with its output NaN-poisoned first (an element the kernel
// never writes fails), runs the include/glass/*.hpp reference on the CPU, and compares:
//   relative error ‖gpu − cpu‖₂ / ‖cpu‖₂ <= 1e-5 in fp32. Both sides compute in fp32 and differ
//   only in the order of additions and the last bit of expf/cosf (CUDA's are within 2 ulp), which
//   stays orders of magnitude below 1e-5 for these sizes. f16/bf16 weights are compared against
//   the CPU run on the *same rounded weights* (round trip on the device), so the kernels are held
//   to the same 1e-5; what rounding itself costs is measured at model level (test_cuda_model).
//   k-quant weights (q4_k/q5_k/q6_k) likewise: against ggml_to_float of the very blocks uploaded.
//   Token outputs (argmax, sampling) must match exactly. The int8 KV cache's writes
//   (kv_write_int8, kv_write_rows_int8 through a batch's slots) must give glass::quantize_kv_row's integers and scales
//   exactly; attention over int8 K/V + scales is held to 1e-5 against causal_attention over the
//   dequantized K/V (the same fp32 values on both sides).
//
// usage: test_cuda_ops [--quick] [--filter TEXT[,TEXT...]] [--list]
//   --quick   skip the big shapes (for compute-sanitizer, which runs kernels ~100x slower)
//   --filter  only rows whose name contains one of the comma-separated texts
// Exit: 0 all passed, 1 a failure, 77 no CUDA device (ctest: skipped).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "glass_cuda.hpp"
#include "paged.hpp"
#include "../relative_error.hpp"

namespace gc = glass::cuda;
using glass::RowMatrix;

namespace {

using Rng = std::mt19937;

std::vector<float> random_floats(Rng& rng, std::size_t n, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
}

RowMatrix random_matrix(Rng& rng, int rows, int cols, float scale = 1.0f) {
    const std::vector<float> v = random_floats(rng, static_cast<std::size_t>(rows) * cols, scale);
    return Eigen::Map<const RowMatrix>(v.data(), rows, cols);
}

using test::relative_error;  // ‖gpu − cpu‖₂ / ‖cpu‖₂; NaN anywhere in gpu: infinite
double relative_error(std::span<const float> gpu, const RowMatrix& cpu) {
    return relative_error(gpu, std::span<const float>(cpu.data(), static_cast<std::size_t>(cpu.size())));
}

// A device output of n floats, NaN-poisoned before the launch.
gc::DeviceBuffer poisoned(std::size_t n) {
    gc::DeviceBuffer b(n * sizeof(float));
    gc::poison(b.f32(), n);
    return b;
}

gc::DeviceBuffer to_device(const RowMatrix& m) {
    return gc::to_device(std::span<const float>(m.data(), static_cast<std::size_t>(m.size())));
}

// A weight matrix on the device as `type`, and the exact fp32 values the device holds (for the
// CPU reference): f16/bf16 round on the way up, so the reference uses the rounded numbers.
struct TestWeights {
    gc::OwnedMatrix device;
    RowMatrix reference;
};
TestWeights make_weights(Rng& rng, int rows, int cols, gc::WeightType type, float scale) {
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

const gc::WeightType kAllTypes[] = {gc::WeightType::f32, gc::WeightType::f16, gc::WeightType::bf16};
constexpr double kF32 = 1e-5;  // see the top of this file

std::string fmt(const char* f, auto... args) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, args...);
    return buf;
}

// ---- the table ---------------------------------------------------------------------------------

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

void add_matmul(std::vector<Case>& cases) {
    struct S { int n, in, out; };
    // Long reductions want several outputs: with one output the relative error of a single dot
    // product is |rounding| / |result|, and a result that happens to land near 0 (cancellation)
    // turns the ~1e-6 rounding difference of two summation orders over 4096 terms into > 1e-5.
    // 7 outputs (fewer than a block's 8 warps) keep the "block partly idle" edge case.
    const S shapes[] = {S{1, 1, 1}, S{1, 64, 172}, S{7, 33, 65}, S{17, 257, 100}, S{3, 768, 768},
                        S{64, 512, 512}, S{1, 2048, 5632}, S{1, 4096, 7}, S{300, 288, 768}, S{1, 288, 32000}};
    for (S s : shapes)
        for (gc::MatmulKernel k : {gc::MatmulKernel::naive, gc::MatmulKernel::tiled,
                                   gc::MatmulKernel::warp_per_row, gc::MatmulKernel::cublas})
            for (gc::WeightType type : kAllTypes) {
                if (k == gc::MatmulKernel::cublas && type != gc::WeightType::f32) continue;
                cases.push_back({fmt("matmul(%s, %s, n=%d, in=%d, out=%d)", gc::to_string(k),
                                     gc::to_string(type), s.n, s.in, s.out),
                                 kF32, double(s.n) * s.in * s.out > 5e6, [s, k, type](Rng& rng) {
                    const RowMatrix x = random_matrix(rng, s.n, s.in);
                    TestWeights w = make_weights(rng, s.out, s.in, type, 1.0f / std::sqrt(float(s.in)));
                    gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(s.n) * s.out);
                    gc::matmul(k, d_x.f32(), s.n, w.device.view, y.f32());
                    const RowMatrix want = x * w.reference.transpose();
                    return relative_error(gc::to_host(y.f32(), std::size_t(s.n) * s.out), want);
                }});
            }
}

// quantize.hpp's blocks on the device: the reference's own integers and scales uploaded as they
// are, both kernels against glass::quantized_matmul (the same d·q, one scale per block: only the
// order of fp32 additions differs, so the fp32 rule holds). Shapes: partial last blocks (in = 33,
// 257), one block (32), decode (n = 1) and prefill, the tinyllama1b MLP row count.
void add_quantized_matmul(std::vector<Case>& cases) {
    struct S { int n, in, out; };
    const S shapes[] = {S{1, 32, 1}, S{1, 64, 172}, S{7, 33, 65}, S{17, 257, 100}, S{3, 768, 768},
                        S{1, 2048, 5632}, S{64, 512, 300}};
    for (S s : shapes)
        for (const bool naive : {true, false})
            for (const glass::QuantFormat f : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0}) {
                cases.push_back({fmt("quantized_matmul(%s, %s, n=%d, in=%d, out=%d)", naive ? "naive" : "warp_per_row",
                                     glass::to_string(f), s.n, s.in, s.out),
                                 kF32, double(s.n) * s.in * s.out > 5e6, [s, naive, f](Rng& rng) {
                    const RowMatrix x = random_matrix(rng, s.n, s.in);
                    const RowMatrix w = random_matrix(rng, s.out, s.in, 1.0f / std::sqrt(float(s.in)));
                    const glass::QuantizedMatrix q = glass::quantize(w, f);
                    gc::DeviceBuffer quants(q.quants.size()), scales(q.scales.size() * 2);
                    gc::upload(quants.data(), q.quants.data(), q.quants.size());
                    gc::upload(scales.data(), q.scales.data(), q.scales.size() * 2);
                    gc::DeviceQuantMatrix dq;
                    dq.quants = static_cast<const std::uint8_t*>(quants.data());
                    dq.scales = static_cast<const std::uint16_t*>(scales.data());
                    dq.type = f == glass::QuantFormat::q8_0 ? gc::QuantType::q8_0 : gc::QuantType::q4_0;
                    dq.rows = q.rows;
                    dq.cols = q.cols;
                    dq.blocks = q.blocks();
                    dq.row_bytes = q.row_bytes();
                    gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(s.n) * s.out);
                    if (naive) gc::quantized_matmul_naive(d_x.f32(), s.n, dq, y.f32());
                    else gc::quantized_matmul(d_x.f32(), s.n, dq, y.f32());
                    return relative_error(gc::to_host(y.f32(), std::size_t(s.n) * s.out), glass::quantized_matmul(x, q));
                }});
            }
    // The path CudaSession takes: upload_matrix quantizes on the host (glass::quantize, so the same
    // integers as q below) and matmul() routes a q8/q4 DeviceMatrix to the kernels above.
    for (const gc::MatmulKernel k : {gc::MatmulKernel::automatic, gc::MatmulKernel::naive, gc::MatmulKernel::tiled})
        for (const glass::QuantFormat f : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0}) {
            const S s{5, 172, 64};  // a partial last block, as the shipped model's w2
            cases.push_back({fmt("matmul(%s, upload_matrix(%s), n=%d, in=%d, out=%d)", gc::to_string(k), glass::to_string(f), s.n,
                                 s.in, s.out),
                             kF32, false, [s, k, f](Rng& rng) {
                const RowMatrix x = random_matrix(rng, s.n, s.in);
                const RowMatrix w = random_matrix(rng, s.out, s.in, 1.0f / std::sqrt(float(s.in)));
                const gc::WeightType type = f == glass::QuantFormat::q8_0 ? gc::WeightType::q8_0 : gc::WeightType::q4_0;
                const gc::OwnedMatrix dw = gc::upload_matrix(w.data(), s.out, s.in, type);
                if (gc::matrix_bytes(dw.view) != glass::quantize(w, f).bytes()) return 1.0;
                gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(s.n) * s.out);
                gc::matmul(k, d_x.f32(), s.n, dw.view, y.f32());
                return relative_error(gc::to_host(y.f32(), std::size_t(s.n) * s.out), glass::quantized_matmul(x, glass::quantize(w, f)));
            }});
        }
    cases.push_back({"matmul(cublas, q8 weights -> glass::Error naming cublas)", 0.0, false, [](Rng& rng) {
        const RowMatrix w = random_matrix(rng, 4, 32);
        const gc::OwnedMatrix dw = gc::upload_matrix(w.data(), 4, 32, gc::WeightType::q8_0);
        try {
            gc::matmul(gc::MatmulKernel::cublas, nullptr, 1, dw.view, nullptr);
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("cublas kernel takes fp32 weights only, got q8") != std::string::npos ? 0.0 : 1.0;
        }
        return 1.0;
    }});
    cases.push_back({"quantized_matmul(a row_bytes that does not match cols -> glass::Error naming both)", 0.0, false,
                     [](Rng&) {
        gc::DeviceQuantMatrix dq;
        dq.rows = 2;
        dq.cols = 64;
        dq.blocks = 2;
        dq.row_bytes = 64;  // q4 needs 32
        dq.type = gc::QuantType::q4_0;
        try {
            gc::quantized_matmul(nullptr, 1, dq, nullptr);
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("2 blocks of 32 bytes per row, not 2 / 64") != std::string::npos ? 0.0 : 1.0;
        }
        return 1.0;
    }});
}

// ggml's k-quant super-blocks on the device (kquants.cu): the blocks glass::ggml_from_float writes,
// uploaded as they are, against the definition on the CPU: ggml_to_float of the same blocks, then
// x · Wᵀ summed in double. The kernels compute each weight with ggml's fp32 operations in ggml's
// order, so both sides multiply the very same fp32 weights; what is left is the device's fp32
// rounding of the products and sums, ~1e-7 relative for these lengths (random signs), which the
// fp32 rule (1e-5) holds with room while a wrong scale, min, nibble or high bit misses it by far.
// Shapes: one super-block, row counts that are not a multiple of 32 (a block's last warps idle),
// 40 pieces of 32 per row (in = 1280: lanes wrap), decode (n = 1) and prefill (n > 1).
glass::GgmlType ggml_type_of(gc::WeightType t) {
    return t == gc::WeightType::q4_k ? glass::GgmlType::q4_k
         : t == gc::WeightType::q5_k ? glass::GgmlType::q5_k
                                     : glass::GgmlType::q6_k;
}

// y [n, rows] = x [n, cols] · Wᵀ with W [rows, cols] given row-major, in double, rounded once.
RowMatrix product_in_double(const RowMatrix& x, const std::vector<float>& w, int rows) {
    const Eigen::Index cols = x.cols();
    RowMatrix y(x.rows(), rows);
    for (Eigen::Index t = 0; t < x.rows(); ++t)
        for (int r = 0; r < rows; ++r) {
            double sum = 0.0;
            for (Eigen::Index k = 0; k < cols; ++k) sum += double(w[std::size_t(r * cols + k)]) * double(x(t, k));
            y(t, r) = float(sum);
        }
    return y;
}

const gc::WeightType kKQuantTypes[] = {gc::WeightType::q4_k, gc::WeightType::q5_k, gc::WeightType::q6_k};

void add_kquant_matmul(std::vector<Case>& cases) {
    struct S { int n, in, out; };
    const S shapes[] = {S{1, 256, 1}, S{1, 256, 37}, S{5, 512, 67}, S{3, 1280, 100}, S{1, 2048, 300}, S{17, 768, 256}};
    for (S s : shapes)
        for (const bool naive : {true, false})
            for (const gc::WeightType type : kKQuantTypes) {
                cases.push_back({fmt("kquant_matmul(%s, %s, n=%d, in=%d, out=%d)", naive ? "naive" : "warp_per_row",
                                     gc::to_string(type), s.n, s.in, s.out),
                                 kF32, double(s.n) * s.in * s.out > 5e6, [s, naive, type](Rng& rng) {
                    const RowMatrix x = random_matrix(rng, s.n, s.in);
                    const RowMatrix w = random_matrix(rng, s.out, s.in, 1.0f / std::sqrt(float(s.in)));
                    const auto t = static_cast<std::uint32_t>(ggml_type_of(type));
                    const std::int64_t count = std::int64_t{s.out} * s.in;
                    std::vector<char> blocks(std::size_t(glass::ggml_bytes(t, count)));
                    glass::ggml_from_float(t, w.data(), count, blocks.data());
                    std::vector<float> dequantized(static_cast<std::size_t>(count));
                    glass::ggml_to_float(t, blocks.data(), count, dequantized.data());
                    gc::DeviceBuffer d_blocks(blocks.size());
                    gc::upload(d_blocks.data(), blocks.data(), blocks.size());
                    gc::DeviceKQuantMatrix dw;
                    dw.blocks = static_cast<const std::uint8_t*>(d_blocks.data());
                    dw.type = type;
                    dw.rows = s.out;
                    dw.cols = s.in;
                    dw.block_bytes = gc::kquant_block_bytes(type);
                    gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(s.n) * s.out);
                    (naive ? gc::kquant_matmul_naive : gc::kquant_matmul)(d_x.f32(), s.n, dw, y.f32());
                    return relative_error(gc::to_host(y.f32(), std::size_t(s.n) * s.out),
                                          product_in_double(x, dequantized, s.out));
                }});
            }
    // The path CudaSession takes: upload_matrix quantizes on the host (ggml_from_float: the same
    // blocks as above, and matrix_bytes counts them) and matmul() routes a k-quant DeviceMatrix to
    // kquants.cu (naive -> naive, every other kernel but cublas -> warp per row).
    for (const gc::MatmulKernel k : {gc::MatmulKernel::automatic, gc::MatmulKernel::naive, gc::MatmulKernel::tiled})
        for (const gc::WeightType type : kKQuantTypes) {
            const S s{3, 512, 45};
            cases.push_back({fmt("matmul(%s, upload_matrix(%s), n=%d, in=%d, out=%d)", gc::to_string(k), gc::to_string(type),
                                 s.n, s.in, s.out),
                             kF32, false, [s, k, type](Rng& rng) {
                const RowMatrix x = random_matrix(rng, s.n, s.in);
                const RowMatrix w = random_matrix(rng, s.out, s.in, 1.0f / std::sqrt(float(s.in)));
                const gc::OwnedMatrix dw = gc::upload_matrix(w.data(), s.out, s.in, type);
                const auto t = static_cast<std::uint32_t>(ggml_type_of(type));
                const std::int64_t count = std::int64_t{s.out} * s.in;
                if (gc::matrix_bytes(dw.view) != glass::ggml_bytes(t, count)) return 1.0;
                if (gc::bytes_per_weight(type) != glass::ggml_bits_per_weight(t) / 8) return 1.0;
                gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(s.n) * s.out);
                gc::matmul(k, d_x.f32(), s.n, dw.view, y.f32());
                return relative_error(gc::to_host(y.f32(), std::size_t(s.n) * s.out),
                                      product_in_double(x, glass::ggml_round_trip(t, w.data(), count), s.out));
            }});
        }
    cases.push_back({"upload_matrix(q4_k, rows of 300 -> glass::Error naming the width)", 0.0, false, [](Rng& rng) {
        const RowMatrix w = random_matrix(rng, 2, 300);
        try {
            gc::upload_matrix(w.data(), 2, 300, gc::WeightType::q4_k);
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("whole super-blocks of 256 weights; a row of 300 is not") != std::string::npos ? 0.0
                                                                                                                         : 1.0;
        }
        return 1.0;
    }});
    cases.push_back({"matmul(cublas, q6_k weights -> glass::Error naming cublas)", 0.0, false, [](Rng& rng) {
        const RowMatrix w = random_matrix(rng, 4, 256);
        const gc::OwnedMatrix dw = gc::upload_matrix(w.data(), 4, 256, gc::WeightType::q6_k);
        try {
            gc::matmul(gc::MatmulKernel::cublas, nullptr, 1, dw.view, nullptr);
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("cublas kernel takes fp32 weights only, got q6_k") != std::string::npos ? 0.0 : 1.0;
        }
        return 1.0;
    }});
}

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

// q [n_q, heads*hd], keys/values [n_k, kv_heads*hd], n_k = start + n_q.
RowMatrix cpu_attention(const RowMatrix& q, const RowMatrix& k, const RowMatrix& v, int start,
                        const gc::AttentionDims& d) {
    return glass::causal_attention(q, k, v, start, {d.n_heads, d.n_kv_heads, d.head_dim},
                                   1.0f / std::sqrt(float(d.head_dim)));
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
Int8Kv quantize_rows(const RowMatrix& x, int n_kv_heads, int head_dim) {
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

// Both prefill kernels (the three-step attention_naive and the tiled flash_attention) and the
// three decode kernels (block per head, its naive fallback, split-K flash_decode) against the
// CPU's causal_attention. Shapes: GQA ratios 1, 2, 3, 4, 7, 8; head_dim 64, 128, 256 (where the
// flash kernel's key tiles halve); query counts that are and are not multiples of its 32 rows;
// chunks (start > 0); long prefills and caches; split-K chunks shorter and longer than the cache.
void add_attention(std::vector<Case>& cases) {
    struct S { int heads, kv_heads, head_dim, n_q, start; };
    for (S s : {S{1, 1, 64, 1, 0}, S{8, 8, 64, 7, 0}, S{8, 2, 64, 33, 0}, S{8, 1, 128, 5, 100},
                S{32, 4, 128, 17, 3}, S{6, 3, 64, 1, 2047}, S{2, 2, 128, 1, 0}, S{7, 1, 64, 64, 0},
                S{4, 2, 256, 40, 9}, S{4, 1, 64, 2048, 0}, S{8, 2, 128, 2048, 0}})
        for (const bool flash : {false, true}) {
            // The emulator runs one of the 2,048-query prefills of each kernel (10 s for the naive one there).
            if (s.n_q == 2048 && gc::runs_on_emulator() && (s.heads == 8 || flash)) continue;
            cases.push_back({fmt("%s, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d)",
                                 flash ? "flash_attention(tiled" : "attention_naive(three steps", s.heads, s.kv_heads,
                                 s.head_dim, s.n_q, s.start),
                             kF32, s.n_q >= 2048, [s, flash](Rng& rng) {
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
                const int n_k = s.start + s.n_q;
                const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
                const RowMatrix k = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
                const RowMatrix v = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
                gc::DeviceBuffer d_q = to_device(q), d_k = to_device(k), d_v = to_device(v);
                gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                if (flash) {
                    gc::flash_attention(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, out.f32());
                } else {
                    gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_q * n_k);
                    gc::attention_naive(d_q.f32(), d_k.f32(), d_v.f32(), s.n_q, s.start, d, scale, scores.f32(), out.f32());
                }
                return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                      cpu_attention(q, k, v, s.start, d));
            }});
        }

    struct D { int heads, kv_heads, head_dim, n_k; };
    for (D s : {D{1, 1, 64, 1}, D{8, 8, 64, 2}, D{8, 2, 64, 257}, D{6, 2, 64, 33}, D{8, 1, 128, 2048},
                D{32, 4, 128, 4097}, D{32, 32, 128, 1000}, D{4, 4, 256, 300}})
        for (const char* variant : {"block per head", "block per head, n_k on device", "naive", "split-K, chunk=7",
                                    "split-K, chunk=256", "split-K, chunk=1000"})
            cases.push_back({fmt("%s(%s, heads=%d, kv_heads=%d, head_dim=%d, n_k=%d)",
                                 std::strstr(variant, "split-K") ? "flash_decode" : "attention_decode", variant, s.heads,
                                 s.kv_heads, s.head_dim, s.n_k),
                             kF32, s.n_k > 2048, [s, variant](Rng& rng) {
                const bool naive = std::strcmp(variant, "naive") == 0;
                const bool on_device = std::strstr(variant, "on device") != nullptr;
                const char* chunk_at = std::strstr(variant, "chunk=");
                const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
                const RowMatrix q = random_matrix(rng, 1, s.heads * s.head_dim);
                const RowMatrix k = random_matrix(rng, s.n_k, s.kv_heads * s.head_dim);
                const RowMatrix v = random_matrix(rng, s.n_k, s.kv_heads * s.head_dim);
                gc::DeviceBuffer d_q = to_device(q), d_k = to_device(k), d_v = to_device(v);
                gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_k);
                gc::DeviceBuffer out = poisoned(std::size_t(s.heads) * s.head_dim);
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                if (chunk_at) {
                    const int chunk = std::atoi(chunk_at + 6);
                    gc::DeviceBuffer partial =
                        poisoned(std::size_t(s.heads) * gc::flash_decode_splits(s.n_k, chunk) * (s.head_dim + 2));
                    gc::flash_decode(d_q.f32(), d_k.f32(), d_v.f32(), s.n_k, d, scale, chunk, partial.f32(), out.f32());
                } else if (naive) {
                    gc::attention_naive(d_q.f32(), d_k.f32(), d_v.f32(), 1, s.n_k - 1, d, scale, scores.f32(), out.f32());
                } else {
                    const int n_k[1] = {s.n_k};
                    gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k));
                    gc::attention_decode(d_q.f32(), d_k.f32(), d_v.f32(),
                                         on_device ? gc::IntArg::at(d_n_k.i32()) : gc::IntArg(s.n_k), d, scale,
                                         scores.f32(), out.f32());
                }
                return relative_error(gc::to_host(out.f32(), std::size_t(s.heads) * s.head_dim),
                                      cpu_attention(q, k, v, s.n_k - 1, d));
            }});

    // K/V in the int8 cache's form (KvType::int8): the kernels read the integers and scales and
    // must give causal_attention over the dequantized K/V (the same fp32 values on both sides:
    // scale · (float)q is one exact-as-IEEE product), so the fp32 rule holds. Decode with n_k on
    // the device (the graph's way) and both prefill chunk paths of the naive kernels; few, small
    // rows (the kernel bodies are the fp32 rows' own, templated on the row reader).
    struct Q { int heads, kv_heads, head_dim, n_q, start; bool decode; };
    for (Q s : {Q{8, 2, 64, 1, 256, true}, Q{6, 3, 128, 1, 40, true}, Q{4, 1, 64, 1, 0, true},
                Q{8, 2, 64, 17, 5, false}, Q{4, 4, 96, 33, 0, false}})
        cases.push_back({fmt("%s, int8 K/V + scales, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d)",
                             s.decode ? "attention_decode(block per head, n_k on device" : "attention_naive(three steps",
                             s.heads, s.kv_heads, s.head_dim, s.n_q, s.start),
                         kF32, false, [s](Rng& rng) {
            const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
            const int n_k = s.start + s.n_q;
            const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
            Int8Kv k = quantize_rows(random_matrix(rng, n_k, s.kv_heads * s.head_dim), s.kv_heads, s.head_dim);
            Int8Kv v = quantize_rows(random_matrix(rng, n_k, s.kv_heads * s.head_dim), s.kv_heads, s.head_dim);
            gc::DeviceBuffer d_q = to_device(q);
            const gc::KvRows d_k = k.up(), d_v = v.up();
            gc::DeviceBuffer scores = poisoned(std::size_t(s.heads) * s.n_q * n_k);
            gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
            const float scale = 1.0f / std::sqrt(float(s.head_dim));
            const int n_k_host[1] = {n_k};
            gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k_host));
            if (s.decode)
                gc::attention_decode(d_q.f32(), d_k, d_v, gc::IntArg::at(d_n_k.i32()), d, scale, scores.f32(), out.f32());
            else
                gc::attention_naive(d_q.f32(), d_k, d_v, s.n_q, s.start, d, scale, scores.f32(), out.f32());
            return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                  cpu_attention(q, k.dequantized, v.dequantized, s.start, d));
        }});
    // The flash kernels over int8 K/V, and flash_decode with n_k read from the device (the decode
    // graph's way): its grid is sized for max_n_k keys, the splits past n_k must add nothing.
    struct F { int heads, kv_heads, head_dim, n_q, start, max_n_k; bool int8; };
    for (F s : {F{8, 2, 64, 33, 5, 0, true}, F{4, 1, 128, 1, 99, 300, true}, F{6, 3, 64, 1, 256, 1000, false},
                F{4, 4, 64, 1, 0, 64, false}})
        cases.push_back({fmt("%s, %s K/V, heads=%d, kv_heads=%d, head_dim=%d, n_q=%d, start=%d%s)",
                             s.n_q > 1 ? "flash_attention(tiled" : "flash_decode(split-K, chunk=7, n_k on device",
                             s.int8 ? "int8 + scales" : "fp32", s.heads, s.kv_heads, s.head_dim, s.n_q, s.start,
                             s.n_q > 1 ? "" : fmt(", grid for %d keys", s.max_n_k).c_str()),
                         kF32, false, [s](Rng& rng) {
            const gc::AttentionDims d{s.heads, s.kv_heads, s.head_dim};
            const int n_k = s.start + s.n_q, chunk = 7;
            const RowMatrix q = random_matrix(rng, s.n_q, s.heads * s.head_dim);
            RowMatrix k = random_matrix(rng, n_k, s.kv_heads * s.head_dim), v = random_matrix(rng, n_k, s.kv_heads * s.head_dim);
            Int8Kv k8, v8;
            gc::DeviceBuffer d_q = to_device(q), d_k32 = to_device(k), d_v32 = to_device(v);
            gc::KvRows d_k = gc::KvRows::fp32(d_k32.f32()), d_v = gc::KvRows::fp32(d_v32.f32());
            if (s.int8) {
                k8 = quantize_rows(k, s.kv_heads, s.head_dim);
                v8 = quantize_rows(v, s.kv_heads, s.head_dim);
                d_k = k8.up();
                d_v = v8.up();
                k = k8.dequantized;
                v = v8.dequantized;
            }
            gc::DeviceBuffer out = poisoned(std::size_t(s.n_q) * s.heads * s.head_dim);
            const float scale = 1.0f / std::sqrt(float(s.head_dim));
            if (s.n_q > 1) {
                gc::flash_attention(d_q.f32(), d_k, d_v, s.n_q, s.start, d, scale, out.f32());
            } else {
                const int n_k_host[1] = {n_k};
                gc::DeviceBuffer d_n_k = gc::to_device(std::span<const int>(n_k_host));
                gc::DeviceBuffer partial =
                    poisoned(std::size_t(s.heads) * gc::flash_decode_splits(s.max_n_k, chunk) * (s.head_dim + 2));
                gc::flash_decode(d_q.f32(), d_k, d_v, gc::IntArg::at(d_n_k.i32()), s.max_n_k, d, scale, chunk,
                                 partial.f32(), out.f32());
            }
            return relative_error(gc::to_host(out.f32(), std::size_t(s.n_q) * s.heads * s.head_dim),
                                  cpu_attention(q, k, v, s.start, d));
        }});
    cases.push_back({"attention_decode(int8 keys with fp32 values -> glass::Error naming both types)", 0.0, false,
                     [](Rng&) {
        gc::DeviceBuffer some(256);  // valid pointers: only the mix of types is wrong
        try {
            gc::attention_decode(some.f32(), gc::KvRows::int8(static_cast<const std::int8_t*>(some.data()), some.f32()),
                                 gc::KvRows::fp32(some.f32()), 1, {1, 1, 8}, 1.0f, some.f32(), some.f32());
        } catch (const glass::Error& e) {
            return std::string(e.what()).find("keys (int8) and values (fp32)") != std::string::npos ? 0.0 : 1.0;
        }
        return 1.0;
    }});
}

void add_mlp(std::vector<Case>& cases) {
    for (long n : {1L, 7L, 1000L, 3L * 5632})
        cases.push_back({fmt("swiglu(n=%ld)", n), kF32, false, [n](Rng& rng) {
            std::vector<float> gate = random_floats(rng, std::size_t(n), 3.0f), up = random_floats(rng, std::size_t(n));
            gc::DeviceBuffer d_gate = gc::to_device(std::span<const float>(gate));
            gc::DeviceBuffer d_up = gc::to_device(std::span<const float>(up));
            gc::swiglu(d_gate.f32(), d_up.f32(), n);
            for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = glass::silu(gate[i]) * up[i];
            return relative_error(gc::to_host(d_gate.f32(), gate.size()), gate);
        }});
    for (long n : {1L, 1000L, (1L << 20) + 3})
        cases.push_back({fmt("residual_add(n=%ld)", n), 0.0 /* one IEEE addition: exact */, false, [n](Rng& rng) {
            std::vector<float> x = random_floats(rng, std::size_t(n)), y = random_floats(rng, std::size_t(n));
            gc::DeviceBuffer d_x = gc::to_device(std::span<const float>(x));
            gc::DeviceBuffer d_y = gc::to_device(std::span<const float>(y));
            gc::residual_add(d_x.f32(), d_y.f32(), n);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
            return relative_error(gc::to_host(d_x.f32(), x.size()), x);
        }});
    struct S { int n, dim, hidden; };
    for (S s : {S{1, 64, 172}, S{7, 288, 768}, S{33, 64, 172}, S{1, 2048, 5632}})
        for (gc::MatmulKernel k : {gc::MatmulKernel::tiled, gc::MatmulKernel::warp_per_row, gc::MatmulKernel::cublas,
                                   gc::MatmulKernel::automatic})
            for (gc::WeightType type : kAllTypes) {
                if (k == gc::MatmulKernel::cublas && type != gc::WeightType::f32) continue;
                // The emulator (seconds per case at this size) runs the tinyllama shape through the
                // automatic kernel only: each kernel has its own matmul case at 2048 x 5632 above.
                if (s.dim >= 2048 && k != gc::MatmulKernel::automatic && gc::runs_on_emulator()) continue;
                cases.push_back({fmt("mlp(%s, %s, n=%d, dim=%d, hidden=%d)", gc::to_string(k), gc::to_string(type),
                                     s.n, s.dim, s.hidden),
                                 kF32, s.dim >= 2048, [s, k, type](Rng& rng) {
                    const RowMatrix x = random_matrix(rng, s.n, s.dim);
                    TestWeights w1 = make_weights(rng, s.hidden, s.dim, type, 1.0f / std::sqrt(float(s.dim)));
                    TestWeights w2 = make_weights(rng, s.dim, s.hidden, type, 1.0f / std::sqrt(float(s.hidden)));
                    TestWeights w3 = make_weights(rng, s.hidden, s.dim, type, 1.0f / std::sqrt(float(s.dim)));
                    gc::DeviceBuffer d_x = to_device(x), out = poisoned(std::size_t(s.n) * s.dim);
                    gc::DeviceBuffer gate = poisoned(std::size_t(s.n) * s.hidden), up = poisoned(std::size_t(s.n) * s.hidden);
                    gc::mlp(k, d_x.f32(), s.n, w1.device.view, w2.device.view, w3.device.view, gate.f32(), up.f32(), out.f32());
                    const RowMatrix want = glass::swiglu_mlp(x, w1.reference, w2.reference, w3.reference);
                    return relative_error(gc::to_host(out.f32(), std::size_t(s.n) * s.dim), want);
                }});
            }
}

// Logits spaced at least 6/vocab apart (a random permutation of a ramp): no two probabilities are
// within rounding of each other, so CPU and GPU must agree on every token.
std::vector<float> separated_logits(Rng& rng, int vocab) {
    std::vector<int> rank(static_cast<std::size_t>(vocab));
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    std::vector<float> logits(rank.size());
    for (std::size_t i = 0; i < rank.size(); ++i) logits[i] = 6.0f * float(rank[i]) / float(vocab) - 3.0f;
    return logits;
}

// Draws per sampling case; --quick takes fewer (under compute-sanitizer every launch of the sort
// costs tens of milliseconds).
int g_sample_draws = 64;

void add_sampling(std::vector<Case>& cases) {
    for (int vocab : {1, 2, 512, 32000, 128256})
        cases.push_back({fmt("argmax(vocab=%d, ties -> lowest id)", vocab), 0.0, vocab > 100000, [vocab](Rng& rng) {
            std::vector<float> logits = random_floats(rng, std::size_t(vocab));
            if (vocab > 2) {  // the maximum twice: the lower id must win
                std::uniform_int_distribution<int> pick(0, vocab - 1);
                const int a = pick(rng), b = pick(rng);
                logits[std::size_t(a)] = logits[std::size_t(b)] = 10.0f;
            }
            gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
            gc::DeviceSampler sampler(vocab);
            return double(sampler.argmax(d.f32()) != glass::sample_argmax(logits));
        }});
    using glass::NucleusRule;
    struct P { float temperature, top_p; int top_k; float min_p; NucleusRule nucleus = NucleusRule::exceeds_p_llama2c; };
    const P params[] = {P{1.0f, 1.0f, 0, 0.0f}, P{1.0f, 0.9f, 0, 0.0f}, P{0.7f, 0.95f, 0, 0.0f},
                        P{1.0f, 1.0f, 40, 0.0f}, P{1.0f, 1.0f, 0, 0.05f}, P{1.2f, 0.8f, 50, 0.0f},
                        P{0.9f, 0.9f, 20, 0.02f}, P{0.0f, 0.9f, 0, 0.0f},
                        P{1.0f, 0.9f, 0, 0.0f, NucleusRule::reaches_p}, P{0.7f, 0.95f, 0, 0.0f, NucleusRule::reaches_p},
                        P{0.9f, 0.9f, 20, 0.02f, NucleusRule::reaches_p}};
    const auto rule_name = [](NucleusRule r) { return r == NucleusRule::reaches_p ? ", reaches_p" : ""; };
    for (int vocab : {1, 2, 512, 32000})
        for (P p : params)
            cases.push_back({fmt("sample(vocab=%d, T=%g, top_p=%g, top_k=%d, min_p=%g%s; draws, mismatches)",
                                 vocab, double(p.temperature), double(p.top_p), p.top_k, double(p.min_p),
                                 rule_name(p.nucleus)),
                             0.0, vocab >= 32000, [vocab, p](Rng& rng) {
                const glass::SamplingParams params{p.temperature, p.top_p, p.top_k, p.min_p, p.nucleus};
                glass::Llama2cRng cpu_rng(1234), gpu_rng(1234);  // same seed: same coins
                gc::DeviceSampler sampler(vocab);
                int mismatches = 0;
                for (int draw = 0; draw < g_sample_draws; ++draw) {
                    const std::vector<float> logits = separated_logits(rng, vocab);
                    gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
                    mismatches += sampler.sample(d.f32(), params, gpu_rng) != glass::sample(logits, params, cpu_rng);
                }
                if (cpu_rng.state() != gpu_rng.state()) mismatches += 1000;  // a different number of draws
                return double(mismatches);
            }});
    // A running sum that lands exactly on top_p: 0.5 + 0.25 = 0.75 with no rounding, where the two
    // rules keep different sets (reaches_p {0.5, 0.25}, llama2.c {0.5, 0.25, 0.125}). Every draw
    // must match the host's; under llama2.c's rule some draws must land on the third token, so a
    // flipped comparison on the device cannot hide. The logits are ln p; the host's softmax gives
    // p back exactly (checked: a failure to do so fails the row with 2000).
    for (NucleusRule rule : {NucleusRule::reaches_p, NucleusRule::exceeds_p_llama2c})
        cases.push_back({fmt("sample(exact landing: p 0.5/0.25/0.125/0.125, top_p=0.75%s; mismatches)",
                             rule == NucleusRule::reaches_p ? ", reaches_p" : ", exceeds_p_llama2c"),
                         0.0, false, [rule](Rng&) {
            const std::vector<float> probs = {0.125f, 0.5f, 0.125f, 0.25f};  // descending: ids 1, 3, 0, 2
            std::vector<float> logits;
            for (float x : probs) logits.push_back(std::log(x));
            if (glass::probabilities(logits, 1.0f) != probs) return 2000.0;
            glass::SamplingParams params;
            params.top_p = 0.75f;
            params.nucleus = rule;
            gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
            gc::DeviceSampler sampler(4);
            glass::Llama2cRng cpu_rng(77), gpu_rng(77);
            int mismatches = 0, third = 0;
            for (int draw = 0; draw < 64; ++draw) {
                const int host = glass::sample(logits, params, cpu_rng);
                mismatches += sampler.sample(d.f32(), params, gpu_rng) != host;
                third += host == 0;
            }
            const bool third_kept = rule == NucleusRule::exceeds_p_llama2c;
            if ((third > 0) != third_kept) mismatches += 1000;  // the host itself broke the rule
            return double(mismatches);
        }});
    cases.push_back({"sample(non-finite logit -> glass::Error naming it)", 0.0, false, [](Rng& rng) {
        std::vector<float> logits = random_floats(rng, 100);
        logits[37] = NAN;
        gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
        gc::DeviceSampler sampler(100);
        glass::Llama2cRng coin(1);
        int refused = 0;
        for (float t : {0.0f, 1.0f}) {
            try {
                sampler.sample(d.f32(), {t, 0.9f, 0, 0.0f}, coin);
            } catch (const glass::Error& e) {
                refused += std::strstr(e.what(), "token 37") != nullptr;
            }
        }
        return double(2 - refused);
    }});
}

// The same random K/V rows into both caches, every layer, in passes of `steps` rows (a prefill,
// then decode steps).
void write_both(Rng& rng, const glass::ModelConfig& c, glass::KVCache& cpu, gc::DeviceKVCache& gpu,
                std::initializer_list<int> steps) {
    for (int n_new : steps) {
        const int start = cpu.length();
        for (int l = 0; l < c.n_layers; ++l) {
            const RowMatrix k = random_matrix(rng, n_new, c.kv_dim()), v = random_matrix(rng, n_new, c.kv_dim());
            cpu.write(l, start, k, v);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            gpu.write(l, start, d_k.f32(), d_v.f32(), n_new);
        }
        cpu.advance(n_new);
        gpu.advance(n_new);
    }
}

void add_kv_cache(std::vector<Case>& cases) {
    cases.push_back({"kv_cache(layers=3, seq_len=40, kv_heads=2, head_dim=6; prefill 7, decode x3)", 0.0, false,
                     [](Rng& rng) {
        glass::ModelConfig c;
        c.dim = 24; c.n_heads = 4; c.n_kv_heads = 2; c.n_layers = 3; c.seq_len = 40; c.hidden_dim = 8; c.vocab_size = 4;
        c.head_dim = c.dim / c.n_heads;
        glass::KVCache cpu(c);
        gc::DeviceKVCache gpu(c);
        double bad = 0;
        write_both(rng, c, cpu, gpu, {7, 1, 1, 1});
        bad += gpu.length() != cpu.length();
        for (int l = 0; l < c.n_layers; ++l) {
            const std::size_t n = std::size_t(cpu.length()) * c.kv_dim();
            bad += relative_error(gc::to_host(gpu.keys(l), n), RowMatrix(cpu.keys(l, cpu.length())));
            bad += relative_error(gc::to_host(gpu.values(l), n), RowMatrix(cpu.values(l, cpu.length())));
        }
        // The write rule is the CPU's: a hole or a write past the window is refused.
        gc::DeviceBuffer row(std::size_t(c.kv_dim()) * sizeof(float) * 64);
        for (int start : {gpu.length() + 1, gpu.length() - 1}) {
            try { gpu.write(0, start, row.f32(), row.f32(), 1); bad += 1; } catch (const glass::Error&) {}
        }
        try { gpu.write(0, gpu.length(), row.f32(), row.f32(), 64); bad += 1; } catch (const glass::Error&) {}
        return bad;
    }});

    // kv_write_int8 against glass::quantize_kv_row: every integer and every scale exactly equal
    // (value: how many differ; NaN scales must be NaN on both sides). Rows written at a start
    // position read from device memory (the decode graph's way) into a poisoned cache; rows
    // outside must keep their NaN scales. head_dim 70 leaves lanes of the warp with 2 or 3
    // values; the planted groups test the edges: all zeros (s = 0, q = 0), an inf and a NaN
    // (s = NaN, q = 0), max 127 so that s = 1 exactly and x = ±k.5 are ties that round half to
    // even (2.5 -> 2, -3.5 -> -4, 0.5 -> 0), and one huge group (1e30).
    struct W { int n_new, kv_heads, head_dim, start, capacity; };
    for (W w : {W{7, 3, 70, 2, 12}, W{1, 4, 64, 9, 10}, W{5, 1, 256, 0, 5}})
        cases.push_back({fmt("kv_write_int8(n_new=%d, kv_heads=%d, head_dim=%d, start=%d on device; ties, 0, inf, NaN;"
                             " q and scales exact)", w.n_new, w.kv_heads, w.head_dim, w.start),
                         0.0, false, [w](Rng& rng) {
            const int kv_dim = w.kv_heads * w.head_dim;
            RowMatrix k = random_matrix(rng, w.n_new, kv_dim, 3.0f), v = random_matrix(rng, w.n_new, kv_dim);
            k.row(0).head(w.head_dim).setZero();
            if (w.kv_heads > 1) {
                k(0, w.head_dim + 3) = INFINITY;
                v(0, w.head_dim + 1) = NAN;
            }
            const int tie = w.n_new - 1, g = w.kv_heads - 1;  // a group whose scale is exactly 1
            for (int i = 0; i < w.head_dim; ++i) v(tie, g * w.head_dim + i) = float(i % 5) - 2.0f;
            v(tie, g * w.head_dim + 0) = 127.0f;
            v(tie, g * w.head_dim + 1) = 2.5f;
            v(tie, g * w.head_dim + 2) = -3.5f;
            v(tie, g * w.head_dim + 3) = 0.5f;
            if (w.n_new > 2) k.row(1) *= 1e30f;
            const std::size_t values = std::size_t(w.capacity) * kv_dim, scales = std::size_t(w.capacity) * w.kv_heads;
            gc::DeviceBuffer d_keys(values), d_values(values), d_key_scales = poisoned(scales),
                d_value_scales = poisoned(scales);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            const int start[1] = {w.start};
            gc::DeviceBuffer d_start = gc::to_device(std::span<const int>(start));
            gc::kv_write_int8(static_cast<std::int8_t*>(d_keys.data()), d_key_scales.f32(),
                              static_cast<std::int8_t*>(d_values.data()), d_value_scales.f32(), d_k.f32(), d_v.f32(),
                              w.n_new, w.kv_heads, w.head_dim, gc::IntArg::at(d_start.i32()));
            double differ = 0;
            for (int which = 0; which < 2; ++which) {
                const Int8Kv want = quantize_rows(which ? v : k, w.kv_heads, w.head_dim);
                std::vector<std::int8_t> q(values);
                gc::download(q.data(), (which ? d_values : d_keys).data(), values);
                const std::vector<float> got_scales = gc::to_host((which ? d_value_scales : d_key_scales).f32(), scales);
                for (std::size_t i = 0; i < want.q.size(); ++i) differ += q[std::size_t(w.start) * kv_dim + i] != want.q[i];
                for (std::size_t r = 0; r < std::size_t(w.capacity) * w.kv_heads; ++r) {
                    const std::size_t written = r - std::size_t(w.start) * w.kv_heads;
                    const bool inside = r >= std::size_t(w.start) * w.kv_heads && written < want.scales.size();
                    const float expect = inside ? want.scales[written] : NAN;  // outside: still the poison
                    differ += std::isnan(expect) ? !std::isnan(got_scales[r])
                                                 : std::memcmp(&expect, &got_scales[r], sizeof(float)) != 0;
                }
                if (which == 1) {  // the planted tie group really has s = 1 and half-even integers
                    const std::size_t at = std::size_t(tie) * kv_dim + std::size_t(g) * w.head_dim;
                    differ += want.scales[std::size_t(tie) * w.kv_heads + g] != 1.0f;
                    differ += want.q[at + 1] != 2 || want.q[at + 2] != -4 || want.q[at + 3] != 0;
                }
            }
            return differ;
        }});

    // DeviceKVCache(c, int8) against KVCache(c, int8): the rows it dequantizes to equal the CPU
    // cache's exactly (the same integers times the same scales), over prefill and decodes; the
    // bytes are kv_bytes_per_token(c, int8) per position.
    cases.push_back({"kv_cache(int8, layers=2, seq_len=20, kv_heads=2, head_dim=40; prefill 6, decode x2; exact)", 0.0,
                     false, [](Rng& rng) {
        glass::ModelConfig c;
        c.dim = 160; c.n_heads = 4; c.n_kv_heads = 2; c.n_layers = 2; c.seq_len = 20; c.hidden_dim = 8; c.vocab_size = 4;
        c.head_dim = c.dim / c.n_heads;
        glass::KVCache cpu(c, glass::KvType::int8);
        gc::DeviceKVCache gpu(c, glass::KvType::int8);
        double bad = gpu.type() != glass::KvType::int8;
        write_both(rng, c, cpu, gpu, {6, 1, 1});
        const int n = cpu.length();
        for (int l = 0; l < c.n_layers; ++l)
            for (int which = 0; which < 2; ++which) {
                const gc::KvRows rows = which ? gpu.value_rows(l) : gpu.key_rows(l);
                std::vector<std::int8_t> q(std::size_t(n) * c.kv_dim());
                gc::download(q.data(), rows.q, q.size());
                const std::vector<float> scales = gc::to_host(rows.scales, std::size_t(n) * c.n_kv_heads);
                RowMatrix got(n, c.kv_dim());
                for (int r = 0; r < n; ++r)
                    glass::dequantize_kv_row(q.data() + std::size_t(r) * c.kv_dim(), scales.data() + std::size_t(r) * c.n_kv_heads,
                                             c.n_kv_heads, c.head_dim, got.row(r).data());
                bad += relative_error(std::span<const float>(got.data(), std::size_t(got.size())),
                                      RowMatrix(which ? cpu.values(l, n) : cpu.keys(l, n)));
            }
        bad += gpu.bytes_used(c) != glass::kv_bytes_per_token(c, glass::KvType::int8) * n;
        bad += gpu.bytes_used(c) != cpu.bytes_used(c);
        try { gpu.keys(0); bad += 1; } catch (const glass::Error&) {}  // no fp32 view of an int8 cache
        return bad;
    }});
}

// The decode graph's mechanics at op level: record rope + kv_write + attention_decode once, with
// the position read from device memory, then replay it at successive positions, rewriting only
// that int; each replay must match the CPU reference at its own position. And a capture that tries
// to wait for the device must fail with a named error and leave the stream usable.
void add_graph(std::vector<Case>& cases) {
    cases.push_back({"graph(rope + kv_write + attention_decode, captured once, 6 replays at positions 3..8)",
                     kF32, false, [](Rng& rng) {
        const gc::AttentionDims d{4, 2, 64};
        const int kv_dim = d.n_kv_heads * d.head_dim, q_dim = d.n_heads * d.head_dim, capacity = 16;
        const float scale = 1.0f / std::sqrt(float(d.head_dim)), theta = 1e4f;
        const RowMatrix k_all = random_matrix(rng, capacity, kv_dim), v_all = random_matrix(rng, capacity, kv_dim);
        gc::DeviceBuffer keys = poisoned(std::size_t(capacity) * kv_dim), values = poisoned(std::size_t(capacity) * kv_dim);
        gc::DeviceBuffer freq = gc::rope_frequencies(d.head_dim, theta);
        gc::DeviceBuffer q = poisoned(q_dim), k = poisoned(kv_dim), v = poisoned(kv_dim);
        gc::DeviceBuffer scores = poisoned(std::size_t(d.n_heads) * capacity), out = poisoned(q_dim);
        gc::DeviceBuffer step(2 * sizeof(int));  // {position, position + 1}
        const auto enqueue_step = [&](gc::IntArg pos, gc::IntArg n_k) {
            gc::rope(q.f32(), 1, d.n_heads, d.head_dim, pos, freq.f32(), glass::RopeLayout::half_split);
            gc::rope(k.f32(), 1, d.n_kv_heads, d.head_dim, pos, freq.f32(), glass::RopeLayout::half_split);
            gc::kv_write(keys.f32(), values.f32(), k.f32(), v.f32(), 1, kv_dim, pos);
            gc::attention_decode(q.f32(), keys.f32(), values.f32(), n_k, d, scale, scores.f32(), out.f32());
        };
        // Rows 0..2 the ordinary way (host positions).
        for (int p = 0; p < 3; ++p) {
            const RowMatrix kp = k_all.row(p), vp = v_all.row(p);
            gc::upload(k.data(), kp.data(), kv_dim * sizeof(float));
            gc::upload(v.data(), vp.data(), kv_dim * sizeof(float));
            gc::rope(k.f32(), 1, d.n_kv_heads, d.head_dim, p, freq.f32(), glass::RopeLayout::half_split);
            gc::kv_write(keys.f32(), values.f32(), k.f32(), v.f32(), 1, kv_dim, p);
        }
        gc::DeviceGraph graph;
        graph.capture([&] { enqueue_step(gc::IntArg::at(step.i32()), gc::IntArg::at(step.i32() + 1)); });
        double worst = graph.nodes() >= 4 ? 0.0 : INFINITY;  // 2 rope + kv_write + attention (+ copies)
        for (int p = 3; p < 9; ++p) {
            const RowMatrix qp = random_matrix(rng, 1, q_dim), kp = k_all.row(p), vp = v_all.row(p);
            const int positions[2] = {p, p + 1};
            gc::upload(step.data(), positions, sizeof positions);
            gc::upload(q.data(), qp.data(), q_dim * sizeof(float));
            gc::upload(k.data(), kp.data(), kv_dim * sizeof(float));
            gc::upload(v.data(), vp.data(), kv_dim * sizeof(float));
            graph.replay();
            // CPU: the same step at position p over rows 0..p.
            RowMatrix cq = qp, ck = k_all.topRows(p + 1);
            glass::apply_rope(cq, d.n_heads, d.head_dim, p, theta, glass::RopeLayout::half_split);
            for (int r = 0; r <= p; ++r) {
                RowMatrix row = ck.row(r);
                glass::apply_rope(row, d.n_kv_heads, d.head_dim, r, theta, glass::RopeLayout::half_split);
                ck.row(r) = row;
            }
            const RowMatrix want = cpu_attention(cq, ck, v_all.topRows(p + 1), p, d);
            worst = std::max(worst, relative_error(gc::to_host(out.f32(), q_dim), want));
        }
        return worst;
    }});
    cases.push_back({"graph(a wait inside a capture is refused; the stream works after it)", 0.0, false,
                     [](Rng& rng) {
        const RowMatrix x = random_matrix(rng, 3, 8);
        gc::DeviceBuffer d_x = to_device(x), d_y = to_device(x);
        gc::DeviceGraph graph;
        double bad = 0;
        try {
            graph.capture([&] {
                gc::residual_add(d_x.f32(), d_y.f32(), 24);
                gc::synchronize("a wait inside a capture");  // not allowed while capturing
            });
            bad += 1;  // the capture should have thrown
        } catch (const glass::Error& e) {
            bad += std::string(e.what()).find("a wait inside a capture") == std::string::npos;
        }
        bad += !graph.empty();
        gc::residual_add(d_x.f32(), d_y.f32(), 24);  // not captured: runs (once) now
        const std::vector<float> got = gc::to_host(d_x.f32(), 24);
        for (int i = 0; i < 24; ++i) bad += got[std::size_t(i)] != 2.0f * x.data()[i];
        return bad;
    }});
}

// ---- serving: rows of many requests, K/V in a paged pool -----------------------------------------

void add_rope_rows(std::vector<Case>& cases) {
    struct S { int n, heads, head_dim, max_pos; };
    for (S s : {S{1, 1, 2, 0}, S{7, 3, 64, 4000}, S{33, 8, 128, 2047}, S{300, 4, 64, 511}})
        for (glass::RopeLayout layout : {glass::RopeLayout::adjacent_pairs, glass::RopeLayout::half_split})
            cases.push_back({fmt("rope_rows(%s, n=%d, heads=%d, head_dim=%d, positions on device in 0..%d)",
                                 layout == glass::RopeLayout::adjacent_pairs ? "adjacent" : "half_split", s.n,
                                 s.heads, s.head_dim, s.max_pos),
                             kF32, false, [s, layout](Rng& rng) {
                RowMatrix x = random_matrix(rng, s.n, s.heads * s.head_dim);
                std::uniform_int_distribution<int> pick(0, s.max_pos);
                std::vector<int> positions(static_cast<std::size_t>(s.n));
                for (int& p : positions) p = pick(rng);
                gc::DeviceBuffer d_x = to_device(x), d_positions = gc::to_device(std::span<const int>(positions));
                gc::DeviceBuffer freq = gc::rope_frequencies(s.head_dim, 1e4f);
                gc::rope_rows(d_x.f32(), s.n, s.heads, s.head_dim, d_positions.i32(), freq.f32(), layout);
                for (int r = 0; r < s.n; ++r) {  // the CPU: each row alone, at its own position
                    RowMatrix row = x.row(r);
                    glass::apply_rope(row, s.heads, s.head_dim, positions[std::size_t(r)], 1e4f, layout);
                    x.row(r) = row;
                }
                return relative_error(gc::to_host(d_x.f32(), std::size_t(x.size())), x);
            }});
}

// A serving batch over a pool of random K/V: entries (start, n) with block tables drawn from a
// shuffled pool, entries 0 and 1 sharing their first `shared` blocks (a cached prefix: both start
// past it). Pool rows that no table holds, and positions past an entry's end, are NaN, so a read
// through a wrong table entry or past the mask poisons the output.
struct PagedBatch {
    int block_size = 0, num_blocks = 0;
    std::vector<std::pair<int, int>> spans;  // (start, n) per entry
    std::vector<std::vector<int>> tokens, tables;
    std::vector<glass::serve::BatchEntry> entries;
    RowMatrix keys, values;  // the pool of one layer [num_blocks * block_size, kv_dim]
    int n_rows() const {
        int n = 0;
        for (auto [start, count] : spans) n += count;
        return n;
    }
};

PagedBatch make_paged_batch(Rng& rng, int block_size, const std::vector<std::pair<int, int>>& spans, int shared,
                            int kv_dim) {
    PagedBatch b;
    b.block_size = block_size;
    b.spans = spans;
    int needed = 0;
    for (auto [start, n] : spans) needed += (start + n + block_size - 1) / block_size;
    b.num_blocks = needed - shared + 3;  // 3 blocks nobody holds
    std::vector<int> free_ids(static_cast<std::size_t>(b.num_blocks));
    std::iota(free_ids.begin(), free_ids.end(), 0);
    std::shuffle(free_ids.begin(), free_ids.end(), rng);
    std::size_t next = 0;
    for (std::size_t e = 0; e < spans.size(); ++e) {
        const int blocks = (spans[e].first + spans[e].second + block_size - 1) / block_size;
        std::vector<int> table;
        for (int k = 0; k < blocks; ++k)
            table.push_back(e == 1 && k < shared ? b.tables[0][std::size_t(k)] : free_ids[next++]);
        b.tables.push_back(table);
        b.tokens.emplace_back(static_cast<std::size_t>(spans[e].second), 0);
    }
    for (std::size_t e = 0; e < spans.size(); ++e)
        b.entries.push_back({.tokens = b.tokens[e], .start = spans[e].first, .block_table = b.tables[e]});
    const int rows = b.num_blocks * block_size;
    b.keys = random_matrix(rng, rows, kv_dim);
    b.values = random_matrix(rng, rows, kv_dim);
    std::vector<bool> valid(static_cast<std::size_t>(rows), false);
    for (std::size_t e = 0; e < spans.size(); ++e)
        for (int p = 0; p < spans[e].first + spans[e].second; ++p)
            valid[std::size_t(glass::serve::pool_row(b.tables[e], block_size, p))] = true;
    for (int r = 0; r < rows; ++r)
        if (!valid[std::size_t(r)]) {
            b.keys.row(r).setConstant(NAN);
            b.values.row(r).setConstant(NAN);
        }
    return b;
}

// The CPU reference (paged_transformer.hpp's attention): each entry's keys and values gathered
// through its block table, then glass::causal_attention of its rows.
RowMatrix cpu_paged_attention(const PagedBatch& b, const RowMatrix& q, const gc::AttentionDims& d) {
    RowMatrix out(q.rows(), q.cols());
    Eigen::Index row = 0;
    for (std::size_t e = 0; e < b.spans.size(); ++e) {
        const auto [start, n] = b.spans[e];
        RowMatrix keys(start + n, b.keys.cols()), values(start + n, b.keys.cols());
        for (int p = 0; p < start + n; ++p) {
            keys.row(p) = b.keys.row(glass::serve::pool_row(b.tables[e], b.block_size, p));
            values.row(p) = b.values.row(glass::serve::pool_row(b.tables[e], b.block_size, p));
        }
        out.middleRows(row, n) = cpu_attention(q.middleRows(row, n), keys, values, start, d);
        row += n;
    }
    return out;
}

// The three paged attentions, as the rows name them.
const gc::PagedAttention kPagedAttentions[] = {gc::PagedAttention::naive, gc::PagedAttention::per_row,
                                               gc::PagedAttention::flash};
const char* paged_name(gc::PagedAttention a) {
    switch (a) {
    case gc::PagedAttention::naive: return "naive";
    case gc::PagedAttention::per_row: return "block per (row, head)";
    case gc::PagedAttention::flash: return "flash, online softmax";
    }
    return "?";
}

// Runs one of the three paged attentions on the device over `b` (its pool uploaded); out [n_rows, q.cols()].
// int8: the pool goes up in the int8 cache's form (quantize_rows; its NaN rows get NaN scales), and
// `b`'s pool becomes what that dequantizes to, the CPU reference's input.
std::vector<float> gpu_paged_attention(PagedBatch& b, std::span<const glass::serve::BatchEntry> entries,
                                       const RowMatrix& q, const gc::AttentionDims& d, gc::PagedAttention which,
                                       bool int8 = false) {
    const gc::PagedStep step = gc::plan_step(entries, b.block_size);
    gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
    const gc::RowPlacement rows = step.rows(ints.i32());
    gc::DeviceBuffer d_q = to_device(q), keys = to_device(b.keys), values = to_device(b.values);
    gc::KvRows pool_keys = gc::KvRows::fp32(keys.f32()), pool_values = gc::KvRows::fp32(values.f32());
    Int8Kv k8, v8;
    if (int8) {
        k8 = quantize_rows(b.keys, d.n_kv_heads, d.head_dim);
        v8 = quantize_rows(b.values, d.n_kv_heads, d.head_dim);
        pool_keys = k8.up();
        pool_values = v8.up();
        b.keys = k8.dequantized;
        b.values = v8.dequantized;
    }
    gc::DeviceBuffer scores = poisoned(std::size_t(step.n_rows) * d.n_heads * step.max_keys);
    gc::DeviceBuffer out = poisoned(std::size_t(step.n_rows) * q.cols());
    const float scale = 1.0f / std::sqrt(float(d.head_dim));
    switch (which) {
    case gc::PagedAttention::naive:
        gc::attention_rows_naive(d_q.f32(), pool_keys, pool_values, rows, d, scale, scores.f32(), out.f32());
        break;
    case gc::PagedAttention::per_row:
        gc::attention_rows(d_q.f32(), pool_keys, pool_values, rows, d, scale, scores.f32(), out.f32());
        break;
    case gc::PagedAttention::flash:  // no scores: `scores` stays poisoned and unused
        gc::attention_rows_flash(d_q.f32(), pool_keys, pool_values, rows, d, scale, out.f32());
        break;
    }
    return gc::to_host(out.f32(), std::size_t(step.n_rows) * q.cols());
}

struct PagedShape {
    const char* name;
    std::vector<std::pair<int, int>> spans;  // (start, n) per entry
    int shared_positions;                    // entries 0 and 1 share the blocks of these positions
};
const PagedShape kPagedShapes[] = {
    {"decode rows", {{0, 1}, {1, 1}, {37, 1}, {300, 1}, {16, 1}}, 0},
    {"prompt chunks", {{0, 33}, {20, 17}}, 0},
    {"ragged", {{100, 1}, {0, 40}, {13, 7}, {0, 1}, {250, 3}}, 0},
    {"shared prefix", {{64, 5}, {70, 1}, {0, 9}}, 64},
};

void add_paged(std::vector<Case>& cases) {
    for (int block_size : {1, 16, 5, 7})
        cases.push_back({fmt("kv_write_rows(batch, block=%d, ragged rows, kv_dim=96; whole pool exact)", block_size), 0.0,
                         false, [block_size](Rng& rng) {
            const int kv_dim = 96;
            PagedBatch b = make_paged_batch(rng, block_size, kPagedShapes[2].spans, 0, kv_dim);
            const gc::PagedStep step = gc::plan_step(b.entries, block_size);
            gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
            const RowMatrix k = random_matrix(rng, step.n_rows, kv_dim), v = random_matrix(rng, step.n_rows, kv_dim);
            RowMatrix pool_k = random_matrix(rng, b.num_blocks * block_size, kv_dim), pool_v = pool_k * 2.0f;
            gc::DeviceBuffer d_pool_k = to_device(pool_k), d_pool_v = to_device(pool_v);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            gc::kv_write_rows(d_pool_k.f32(), d_pool_v.f32(), d_k.f32(), d_v.f32(), kv_dim, step.rows(ints.i32()));
            // The CPU: PagedKVPool::write's rule, row by row (every other pool row unchanged).
            Eigen::Index r = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e)
                for (int p = b.spans[e].first; p < b.spans[e].first + b.spans[e].second; ++p, ++r) {
                    pool_k.row(glass::serve::pool_row(b.tables[e], block_size, p)) = k.row(r);
                    pool_v.row(glass::serve::pool_row(b.tables[e], block_size, p)) = v.row(r);
                }
            return relative_error(gc::to_host(d_pool_k.f32(), std::size_t(pool_k.size())), pool_k) +
                   relative_error(gc::to_host(d_pool_v.f32(), std::size_t(pool_v.size())), pool_v);
        }});

    struct H { int heads, kv_heads, head_dim; };
    const H heads[] = {H{4, 4, 64}, H{8, 2, 128}, H{8, 1, 64}, H{6, 3, 128}};  // GQA 1, 4, 8, 2
    const int block_sizes[] = {1, 16, 5, 7};
    // Every row at kF32 (the top of this file). The flash kernel's online softmax also rescales
    // its running sums by exp(m - m') once per 128-position tile (up to 3 tiles here): a few more
    // roundings of ~6e-8 each per output, still far below 1e-5.
    for (int si = 0; si < 4; ++si)
        for (int bi = 0; bi < 4; ++bi)
            for (gc::PagedAttention which : kPagedAttentions) {
                const PagedShape& shape = kPagedShapes[si];
                const int block_size = block_sizes[bi];
                const H h = heads[(si + bi) % 4];  // every shape and every block size meets every head layout
                cases.push_back({fmt("paged_attention(%s, %s, block=%d, heads=%d, kv_heads=%d, head_dim=%d)",
                                     paged_name(which), shape.name, block_size, h.heads, h.kv_heads, h.head_dim),
                                 kF32, false, [shape, block_size, h, which](Rng& rng) {
                    const gc::AttentionDims d{h.heads, h.kv_heads, h.head_dim};
                    PagedBatch b = make_paged_batch(rng, block_size, shape.spans,
                                                          shape.shared_positions / block_size, h.kv_heads * h.head_dim);
                    const RowMatrix q = random_matrix(rng, b.n_rows(), h.heads * h.head_dim);
                    return relative_error(gpu_paged_attention(b, b.entries, q, d, which), cpu_paged_attention(b, q, d));
                }});
            }
    // An int8 pool (KvType::int8): all three attentions against the CPU over the dequantized pool (the
    // same fp32 values: the fp32 rule), on the ragged and the shared-prefix batches, whose NaN
    // rows now come as NaN scales.
    for (int si : {2, 3})
        for (gc::PagedAttention which : kPagedAttentions) {
            const PagedShape& shape = kPagedShapes[si];
            const int block_size = si == 2 ? 5 : 16;
            const H h = si == 2 ? H{8, 2, 64} : H{6, 3, 128};
            cases.push_back({fmt("paged_attention(%s, int8 pool + scales, %s, block=%d, heads=%d, kv_heads=%d, head_dim=%d)",
                                 paged_name(which), shape.name, block_size, h.heads, h.kv_heads, h.head_dim),
                             kF32, false, [shape, block_size, h, which](Rng& rng) {
                const gc::AttentionDims d{h.heads, h.kv_heads, h.head_dim};
                PagedBatch b = make_paged_batch(rng, block_size, shape.spans, shape.shared_positions / block_size,
                                                h.kv_heads * h.head_dim);
                const RowMatrix q = random_matrix(rng, b.n_rows(), h.heads * h.head_dim);
                const std::vector<float> gpu = gpu_paged_attention(b, b.entries, q, d, which, /*int8=*/true);
                return relative_error(gpu, cpu_paged_attention(b, q, d));  // b's pool is now the dequantized one
            }});
        }
    // kv_write_rows_int8 against quantize_kv_row through the slots: the whole int8 pool and its
    // scales exactly (value: how many differ); rows no slot names keep their NaN scales.
    cases.push_back({"kv_write_rows_int8(batch, block=7, ragged rows, kv_heads=3, head_dim=40; whole pool exact)", 0.0, false,
                     [](Rng& rng) {
        const int block_size = 7, kv_heads = 3, head_dim = 40, kv_dim = kv_heads * head_dim;
        PagedBatch b = make_paged_batch(rng, block_size, kPagedShapes[2].spans, 0, kv_dim);
        const gc::PagedStep step = gc::plan_step(b.entries, block_size);
        gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
        const RowMatrix k = random_matrix(rng, step.n_rows, kv_dim), v = random_matrix(rng, step.n_rows, kv_dim, 2.0f);
        const int pool_rows = b.num_blocks * block_size;
        const std::size_t values = std::size_t(pool_rows) * kv_dim, scales = std::size_t(pool_rows) * kv_heads;
        gc::DeviceBuffer d_keys(values), d_values(values), d_key_scales = poisoned(scales),
            d_value_scales = poisoned(scales), d_k = to_device(k), d_v = to_device(v);
        gc::kv_write_rows_int8(static_cast<std::int8_t*>(d_keys.data()), d_key_scales.f32(),
                                static_cast<std::int8_t*>(d_values.data()), d_value_scales.f32(), d_k.f32(), d_v.f32(),
                                kv_heads, head_dim, step.rows(ints.i32()));
        double differ = 0;
        for (int which = 0; which < 2; ++which) {
            const Int8Kv want = quantize_rows(which ? v : k, kv_heads, head_dim);  // row r of the step
            std::vector<std::int8_t> q(values);
            gc::download(q.data(), (which ? d_values : d_keys).data(), values);
            const std::vector<float> got = gc::to_host((which ? d_value_scales : d_key_scales).f32(), scales);
            std::vector<bool> written(std::size_t(pool_rows), false);
            Eigen::Index r = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e)
                for (int p = b.spans[e].first; p < b.spans[e].first + b.spans[e].second; ++p, ++r) {
                    const std::size_t slot = std::size_t(glass::serve::pool_row(b.tables[e], block_size, p));
                    written[slot] = true;
                    for (int i = 0; i < kv_dim; ++i)
                        differ += q[slot * kv_dim + std::size_t(i)] != want.q[std::size_t(r) * kv_dim + std::size_t(i)];
                    for (int g = 0; g < kv_heads; ++g)
                        differ += got[slot * kv_heads + std::size_t(g)] != want.scales[std::size_t(r) * kv_heads + std::size_t(g)];
                }
            for (int slot = 0; slot < pool_rows; ++slot)
                if (!written[std::size_t(slot)])
                    for (int g = 0; g < kv_heads; ++g) differ += !std::isnan(got[std::size_t(slot) * kv_heads + std::size_t(g)]);
        }
        return differ;
    }});

    // Long requests: 2,000+ keys through 16-position blocks, decode and a chunk together.
    for (gc::PagedAttention which : kPagedAttentions)
        cases.push_back({fmt("paged_attention(%s, long: decode at 2100 + chunk of 64 at 2000, block=16, heads=8, "
                             "kv_heads=2, head_dim=128)", paged_name(which)),
                         kF32, true, [which](Rng& rng) {
            const gc::AttentionDims d{8, 2, 128};
            PagedBatch b = make_paged_batch(rng, 16, {{2100, 1}, {2000, 64}}, 0, 2 * 128);
            const RowMatrix q = random_matrix(rng, b.n_rows(), 8 * 128);
            return relative_error(gpu_paged_attention(b, b.entries, q, d, which), cpu_paged_attention(b, q, d));
        }});

    // Batch invariance, which the engine's tests rely on: each entry alone gives bit for bit the
    // rows it gets inside the batch (value: how many floats differ).
    for (gc::PagedAttention which : kPagedAttentions)
        cases.push_back({fmt("paged_attention(%s, batch invariance: each entry alone == in the ragged batch, exact)",
                             paged_name(which)),
                         0.0, false, [which](Rng& rng) {
            const gc::AttentionDims d{8, 2, 64};
            PagedBatch b = make_paged_batch(rng, 5, kPagedShapes[2].spans, 0, 2 * 64);
            const RowMatrix q = random_matrix(rng, b.n_rows(), 8 * 64);
            const std::vector<float> together = gpu_paged_attention(b, b.entries, q, d, which);
            double differ = 0;
            Eigen::Index row = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e) {
                const int n = b.spans[e].second;
                const std::vector<float> alone =
                    gpu_paged_attention(b, {&b.entries[e], 1}, q.middleRows(row, n), d, which);
                for (std::size_t i = 0; i < alone.size(); ++i)
                    differ += alone[i] != together[std::size_t(row) * q.cols() + i];
                row += n;
            }
            return differ;
        }});
    for (gc::MatmulKernel k : {gc::MatmulKernel::naive, gc::MatmulKernel::tiled, gc::MatmulKernel::warp_per_row})
        for (gc::WeightType type : {gc::WeightType::f32, gc::WeightType::f16})
            cases.push_back({fmt("matmul(%s, %s, batch invariance: rows alone and 5..16 == in n=37, exact)",
                                 gc::to_string(k), gc::to_string(type)),
                             0.0, false, [k, type](Rng& rng) {
                const int n = 37, in = 260, out = 100;
                const RowMatrix x = random_matrix(rng, n, in);
                TestWeights w = make_weights(rng, out, in, type, 1.0f / std::sqrt(float(in)));
                gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(n) * out);
                gc::matmul(k, d_x.f32(), n, w.device.view, y.f32());
                const std::vector<float> together = gc::to_host(y.f32(), std::size_t(n) * out);
                double differ = 0;
                const auto compare = [&](int first, int count) {
                    const RowMatrix part = x.middleRows(first, count);
                    gc::DeviceBuffer d_part = to_device(part), y_part = poisoned(std::size_t(count) * out);
                    gc::matmul(k, d_part.f32(), count, w.device.view, y_part.f32());
                    const std::vector<float> got = gc::to_host(y_part.f32(), std::size_t(count) * out);
                    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != together[std::size_t(first) * out + i];
                };
                for (int t = 0; t < n; ++t) compare(t, 1);
                compare(5, 12);
                return differ;
            }});
}

// --filter "a,b": rows whose name contains a or b (empty: all).
bool matches(const std::string& name, const std::string& filter) {
    if (filter.empty()) return true;
    std::size_t begin = 0;
    while (begin <= filter.size()) {
        const std::size_t end = std::min(filter.find(',', begin), filter.size());
        if (end > begin && name.find(filter.substr(begin, end - begin)) != std::string::npos) return true;
        begin = end + 1;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, list = false;
    std::string filter;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--list") list = true;
        else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
        else {
            std::fprintf(stderr, "usage: test_cuda_ops [--quick] [--filter TEXT[,TEXT...]] [--list]\n");
            return 2;
        }
    }
    std::vector<Case> cases;
    add_embedding(cases);
    add_rmsnorm(cases);
    add_rope(cases);
    add_matmul(cases);
    add_quantized_matmul(cases);
    add_kquant_matmul(cases);
    add_softmax(cases);
    add_attention(cases);
    add_mlp(cases);
    add_sampling(cases);
    add_kv_cache(cases);
    add_graph(cases);
    add_rope_rows(cases);
    add_paged(cases);
    if (list) {
        for (const Case& c : cases) std::printf("%s\n", c.name.c_str());
        return 0;
    }
    std::string why;
    if (!gc::device_present(&why)) {
        std::printf("SKIPPED: no CUDA device (%s)\n", why.c_str());
        return 77;
    }
    std::printf("device: %s\n", gc::device_name().c_str());
    if (quick) g_sample_draws = 8;

    int ran = 0, failed = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        if ((quick && c.big) || !matches(c.name, filter)) continue;
        Rng rng(static_cast<unsigned>(1000 + i));  // fresh inputs per case, reproducible by row
        double error = INFINITY;
        std::string note;
        try {
            error = c.run(rng);
            gc::synchronize(c.name.c_str());
        } catch (const std::exception& e) {
            note = std::string("  threw: ") + e.what();
        }
        const bool ok = error <= c.tolerance;  // NaN fails too
        ++ran;
        failed += !ok;
        std::printf("  %-88s %10.3g <= %-6g %s%s\n", c.name.c_str(), error, c.tolerance, ok ? "OK" : "FAIL",
                    note.c_str());
        std::fflush(stdout);
    }
    std::printf("%d/%d cases passed%s\n", ran - failed, ran, quick ? " (--quick)" : "");
    return failed == 0 && ran > 0 ? 0 : 1;
}
