// tests/cuda/test_cuda_ops_matmul.cpp — matrix products: fp32/f16/bf16 weights per kernel, q8/q4
// blocks, k-quant super-blocks, and the SwiGLU MLP built on them.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

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

namespace {

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

}  // namespace

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

}  // namespace cuda_ops_test
