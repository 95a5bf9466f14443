/// \file
/// \brief glass/quantize.hpp — the toolbox's quantization (C14): weights in 8 or 4 bits, in blocks of 32 with one scale.
/// ```text
/// Decode reads every weight once per token and does 2 FLOPs with it (journey step 9), so its
/// speed is bytes of weights / memory bandwidth. Fewer bits per weight, proportionally faster.
///
/// A weight matrix W [rows = out, cols = in] is cut, row by row, into blocks of 32 consecutive
/// inputs. Each block keeps one scale d (an fp16, 2 bytes) and 32 small signed integers q:
///     d = max |w| over the block / q_max,     q = round(w / d) clamped to [-q_max, q_max],
///     w ≈ d · q                               error ≤ d / 2 per weight.
///   q8_0: q_max = 127, q int8, 2 + 32 bytes per block = 1.0625 bytes per weight.
///   q4_0: q_max = 7 (symmetric: -7 .. 7), q stored as q + 8 in 4 bits, two per byte
///         (input 2j in the low half of byte j, 2j + 1 in the high half),
///         2 + 16 bytes per block = 0.5625 bytes per weight.
/// (llama.cpp's Q8_0/Q4_0 have the same sizes; its Q4_0 also uses -8, with the sign of the
/// largest weight, and orders the nibbles differently.)
/// The scale is rounded to fp16 first and q computed with the rounded d: the integers are the
/// best ones for the scale that will actually be read.
///
/// The dot product of one row with an fp32 input x, block by block:
///     y_r = Σ_b d_b · (Σ_{k in block b} q_k · x_k)
/// one multiplication by the scale per 32 weights. The fast path and CUDA compute exactly this;
/// quantized_model() gives the plain CPU reference the same numbers by rounding every weight
/// matrix to d · q (fp32), so everything downstream (logits, greedy text, likelihoods) can be
/// compared format against format with the reference's own forward pass.
///
/// With the activations in int8 too (quantize_activations: x cut into the same blocks of 32,
/// each with one fp32 scale dx = max |x| / 127), the inner sum is a sum of integer products,
/// exact in int32, which CPUs do 64 bytes at a time (AVX-512 VNNI's vpdpbusd):
///     y_r = Σ_b d_b · dx_b · (Σ_{k in b} q_k · qx_k)          (quantized_dot_int8)
/// It costs a second rounding (of x), which moves y by about as much as q8_0's own.
///
/// The KV cache in int8 is kv_cache.hpp's (quantize_kv_row: one scale per KV head and token).
/// The blocks of downloaded files (llama.cpp's Q4_1 ... Q6_K, the k-quants' super-blocks with a
/// scale of scales) are ggml_quants.hpp's; model_in_file_type (below) runs a model through them.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/ggml_quants_write.hpp"
#include "glass/half.hpp"
#include "glass/int8.hpp"
#include "glass/tensor.hpp"

namespace glass {

enum class QuantFormat { q8_0, q4_0 };

constexpr int kQuantBlock = 32;  // inputs per block, one scale each

inline const char* to_string(QuantFormat f) { return f == QuantFormat::q8_0 ? "q8" : "q4"; }
inline QuantFormat quant_format_from_string(const std::string& s) {
    if (s == "q8" || s == "q8_0") return QuantFormat::q8_0;
    if (s == "q4" || s == "q4_0") return QuantFormat::q4_0;
    fail("unknown quantization format '", s, "' (q8, q4)");
}
inline int quant_max(QuantFormat f) { return f == QuantFormat::q8_0 ? 127 : 7; }
/// Bytes of one block: the fp16 scale, then the 32 integers (8 or 4 bits each).
inline int quant_block_bytes(QuantFormat f) { return 2 + (f == QuantFormat::q8_0 ? kQuantBlock : kQuantBlock / 2); }
inline double bytes_per_weight(QuantFormat f) { return quant_block_bytes(f) / double(kQuantBlock); }

/// Q4_0 keeps two 4-bit integers per byte, each as q + 8 (0 .. 15): writes q into the low
/// nibble of `byte`, or the high one, leaving the other alone.
inline void set_nibble(std::uint8_t& byte, bool high, int q) {
    const auto nibble = static_cast<std::uint8_t>(q + 8);
    byte = high ? static_cast<std::uint8_t>((byte & 0x0F) | (nibble << 4)) : static_cast<std::uint8_t>((byte & 0xF0) | nibble);
}

/// One quantized matrix [rows, cols]. Rows whose length is not a multiple of 32 end in a
/// partial block, padded with q = 0.
struct QuantizedMatrix {
    QuantFormat format = QuantFormat::q8_0;
    int rows = 0, cols = 0;
    std::vector<std::uint16_t> scales;  // [rows][blocks()] fp16 bit patterns
    std::vector<std::uint8_t> quants;   // [rows][row_bytes()] int8, or two 4-bit q + 8 per byte

    int blocks() const { return (cols + kQuantBlock - 1) / kQuantBlock; }
    int row_bytes() const { return blocks() * (format == QuantFormat::q8_0 ? kQuantBlock : kQuantBlock / 2); }
    std::int64_t bytes() const { return std::int64_t{rows} * blocks() * quant_block_bytes(format); }

    /// The integer stored for weight (r, k).
    int q(int r, int k) const {
        const std::uint8_t* row = quants.data() + std::int64_t{r} * row_bytes();
        if (format == QuantFormat::q8_0) return static_cast<std::int8_t>(row[k]);
        const std::uint8_t byte = row[k / 2];
        return (k % 2 == 0 ? byte & 0x0F : byte >> 4) - 8;
    }
    float scale(int r, int block) const { return fp16_to_fp32(scales[std::size_t(r) * blocks() + block]); }
    /// Weight (r, k) as every kernel sees it: d · q.
    float at(int r, int k) const { return scale(r, k / kQuantBlock) * static_cast<float>(q(r, k)); }
};

/// W [rows, cols] row-major fp32 -> blocks of 32 with one fp16 scale each.
inline QuantizedMatrix quantize(const float* w, int rows, int cols, QuantFormat format) {
    if (rows < 1 || cols < 1) fail("quantize: empty matrix [", rows, ", ", cols, "]");
    QuantizedMatrix m;
    m.format = format;
    m.rows = rows;
    m.cols = cols;
    const int nb = m.blocks(), qmax = quant_max(format);
    m.scales.assign(std::size_t(rows) * nb, 0);
    m.quants.assign(std::size_t(rows) * m.row_bytes(), format == QuantFormat::q8_0 ? 0 : 0x88);  // q = 0
    for (int r = 0; r < rows; ++r) {
        const float* row = w + std::int64_t{r} * cols;
        std::uint8_t* out = m.quants.data() + std::int64_t{r} * m.row_bytes();
        for (int b = 0; b < nb; ++b) {
            const int k0 = b * kQuantBlock, k1 = std::min(cols, k0 + kQuantBlock);
            float amax = 0.0f;
            for (int k = k0; k < k1; ++k) {
                if (!std::isfinite(row[k])) fail("quantize: weight (", r, ", ", k, ") is ", row[k]);
                amax = std::max(amax, std::fabs(row[k]));
            }
            const std::uint16_t scale_bits = fp32_to_fp16(amax / static_cast<float>(qmax));
            const float d = fp16_to_fp32(scale_bits);  // the scale as it will be read back
            m.scales[std::size_t(r) * nb + b] = scale_bits;
            for (int k = k0; k < k1; ++k) {
                const float rounded = d > 0 ? std::nearbyint(row[k] / d) : 0.0f;
                const int q = static_cast<int>(std::clamp(rounded, -float(qmax), float(qmax)));
                if (format == QuantFormat::q8_0)
                    out[k] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
                else
                    set_nibble(out[k / 2], k % 2 == 1, q);
            }
        }
    }
    return m;
}
inline QuantizedMatrix quantize(const Eigen::Ref<const RowMatrix>& w, QuantFormat format) {
    const int rows = static_cast<int>(w.rows()), cols = static_cast<int>(w.cols());
    if (w.outerStride() == w.cols()) return quantize(w.data(), rows, cols, format);  // rows already back to back
    const RowMatrix dense = w;
    return quantize(dense.data(), rows, cols, format);
}

/// The fp32 matrix the quantized one stands for: W'(r, k) = d · q.
inline RowMatrix dequantize(const QuantizedMatrix& m) {
    RowMatrix w(m.rows, m.cols);
    for (int r = 0; r < m.rows; ++r)
        for (int k = 0; k < m.cols; ++k) w(r, k) = m.at(r, k);
    return w;
}

/// y_r = Σ_b d_b · Σ_{k in b} q_k x_k: one row of W' times x [cols].
inline float quantized_dot(const QuantizedMatrix& m, int r, const float* x) {
    float y = 0.0f;
    for (int b = 0; b < m.blocks(); ++b) {
        const int k0 = b * kQuantBlock, k1 = std::min(m.cols, k0 + kQuantBlock);
        float block_sum = 0.0f;
        for (int k = k0; k < k1; ++k) block_sum += static_cast<float>(m.q(r, k)) * x[k];
        y += m.scale(r, b) * block_sum;
    }
    return y;
}

/// x [n] -> int8 blocks of 32 (int8.hpp: dx = max |x| / 127 per block, qx = round(x / dx)):
/// q [blocks · 32] (the last block padded with 0), scales [blocks].
inline void quantize_activations(const float* x, int n, std::int8_t* q, float* scales) {
    for (int b = 0, k0 = 0; k0 < n; ++b, k0 += kQuantBlock) {
        const int len = std::min(kQuantBlock, n - k0);
        scales[b] = int8_scale(x + k0, len);
        for (int i = 0; i < kQuantBlock; ++i) q[k0 + i] = i < len ? to_int8(x[k0 + i], scales[b]) : 0;
    }
}

/// y_r = Σ_b d_b · dx_b · Σ_{k in b} q_k · qx_k: one row of W' times x given in int8 blocks
/// (quantize_activations). The block's sum is an exact int32; one fp32 multiply-add per block.
inline float quantized_dot_int8(const QuantizedMatrix& m, int r, const std::int8_t* xq, const float* xs) {
    float y = 0.0f;
    for (int b = 0; b < m.blocks(); ++b) {
        const int k0 = b * kQuantBlock, k1 = std::min(m.cols, k0 + kQuantBlock);
        std::int32_t block_sum = 0;
        for (int k = k0; k < k1; ++k) block_sum += m.q(r, k) * xq[k];
        y += m.scale(r, b) * xs[b] * static_cast<float>(block_sum);
    }
    return y;
}

/// Y [n, rows] = X [n, cols] · W'ᵀ, each entry a quantized_dot (matmul.hpp's y = W x, per row of X).
inline RowMatrix quantized_matmul(const Eigen::Ref<const RowMatrix>& x, const QuantizedMatrix& w) {
    if (x.cols() != w.cols) fail("quantized_matmul: x has ", x.cols(), " columns, W has ", w.cols);
    const RowMatrix xs = x;
    RowMatrix y(xs.rows(), w.rows);
    for (Eigen::Index t = 0; t < xs.rows(); ++t)
        for (int r = 0; r < w.rows; ++r) y(t, r) = quantized_dot(w, r, xs.data() + t * xs.cols());
    return y;
}

/// The same for a model of any family (config.hpp's deltas, which a llama2.c layout cannot hold):
/// the seven matrices of every layer and the classifier quantized and back (d · q, fp32), the
/// embedding table fp32; the norm gains, biases and per-head norms stay views into `model`, which
/// must outlive the copy. quantized_model calls it for such a model.
inline Model quantized_family_model(const Model& model, QuantFormat format) {
    require_fp32_weights(model, "quantized_model");
    const ModelConfig& c = model.config;
    auto floats = std::make_shared<std::vector<float>>();
    std::int64_t total = std::int64_t{c.vocab_size} * c.dim;  // the classifier
    for (const LayerWeights& s : model.layers)
        for (const ConstMatrixMap* w : {&s.wq, &s.wk, &s.wv, &s.wo, &s.w1, &s.w2, &s.w3}) total += w->size();
    floats->reserve(static_cast<size_t>(total));  // no reallocation: the copy's maps point into it
    auto put = [&](const ConstMatrixMap& w) {
        const RowMatrix d = dequantize(quantize(w.data(), static_cast<int>(w.rows()), static_cast<int>(w.cols()), format));
        const float* at = floats->data() + floats->size();
        floats->insert(floats->end(), d.data(), d.data() + d.size());
        return ConstMatrixMap(at, w.rows(), w.cols());
    };
    Model q;
    q.config = c;
    q.config.shared_classifier = false;  // the classifier is quantized, the embedding is not
    q.token_embedding = model.token_embedding;
    q.classifier = put(model.output_classifier()).data();
    q.rms_final = model.rms_final;
    for (const LayerWeights& s : model.layers)
        q.layers.push_back({.rms_att = s.rms_att, .wq = put(s.wq), .wk = put(s.wk), .wv = put(s.wv), .wo = put(s.wo),
                            .rms_ffn = s.rms_ffn, .w1 = put(s.w1), .w2 = put(s.w2), .w3 = put(s.w3),
                            .bq = s.bq, .bk = s.bk, .bv = s.bv, .q_norm = s.q_norm, .k_norm = s.k_norm,
                            .post_attention_norm = s.post_attention_norm, .post_mlp_norm = s.post_mlp_norm});
    q.weight_bytes = model.weight_bytes;
    q.storage = std::move(floats);
    return q;
}

/// A copy of `model` whose weight matrices (the seven of every layer and the classifier) are
/// replaced by their quantized values d · q, in fp32. The token embedding stays fp32 (a lookup
/// reads one row per token; the fast path keeps it fp32 too) and so do the norm gains. Running
/// the plain forward pass on it computes what a quantized kernel computes, up to fp32 rounding.
/// (A model with family deltas: quantized_family_model above, which keeps its gains as views.)
inline Model quantized_model(const Model& model, QuantFormat format) {
    if (!family_deltas(model.config).empty()) return quantized_family_model(model, format);
    ModelConfig c = model.config;
    c.shared_classifier = false;  // the classifier is quantized, the embedding is not
    const std::int64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
    auto floats = std::make_shared<std::vector<float>>();
    floats->reserve(static_cast<std::size_t>(2 * V * d + L * (2 * d + 2 * d * d + 2 * kv * d + 3 * h * d) + d +
                                             c.seq_len * c.head_dim));
    auto put = [&](const float* p, std::int64_t n) { floats->insert(floats->end(), p, p + n); };
    auto put_quantized = [&](const float* p, std::int64_t rows, std::int64_t cols) {
        const RowMatrix w = dequantize(quantize(p, static_cast<int>(rows), static_cast<int>(cols), format));
        put(w.data(), w.size());
    };
    put(model.token_embedding, V * d);  // llama2.c's order (checkpoint.hpp)
    for (const auto& l : model.layers) put(l.rms_att.data(), d);
    for (const auto& l : model.layers) put_quantized(l.wq.data(), d, d);
    for (const auto& l : model.layers) put_quantized(l.wk.data(), kv, d);
    for (const auto& l : model.layers) put_quantized(l.wv.data(), kv, d);
    for (const auto& l : model.layers) put_quantized(l.wo.data(), d, d);
    for (const auto& l : model.layers) put(l.rms_ffn.data(), d);
    for (const auto& l : model.layers) put_quantized(l.w1.data(), h, d);
    for (const auto& l : model.layers) put_quantized(l.w2.data(), d, h);
    for (const auto& l : model.layers) put_quantized(l.w3.data(), h, d);
    put(model.rms_final, d);
    floats->resize(floats->size() + static_cast<std::size_t>(c.seq_len * c.head_dim), 0.0f);  // legacy RoPE tables
    put_quantized(model.classifier, V, d);
    const float* data = floats->data();
    return model_from_llama2c_bytes(c, data, std::move(floats));
}

/// A copy of `model` whose weight matrices went through the blocks of a llama.cpp file type
/// (ggml_quants.hpp: "Q8_0", "Q4_K_M", ...; each matrix in the type ggml_file_tensor_type gives
/// it, written and read back), in fp32: what a GGUF of that type holds, for any architecture.
/// The embedding and a separate classifier go through their blocks too, as in the file; norm
/// gains, biases and per-head norms stay fp32 and stay views into `model`, which must outlive the
/// copy.
inline Model model_in_file_type(const Model& model, const std::string& file_type) {
    require_fp32_weights(model, "model_in_file_type");
    const ModelConfig& c = model.config;
    auto floats = std::make_shared<std::vector<float>>();
    floats->reserve(static_cast<size_t>(model.weight_bytes / 4 + std::int64_t{c.vocab_size} * c.dim));  // no reallocation
    auto put = [&](const float* x, std::int64_t rows, std::int64_t cols, const std::string& name, int layer) {
        const GgmlType t = ggml_file_tensor_type(file_type, name, layer, c.n_layers, c.shared_classifier, cols);
        const std::vector<float> w = ggml_round_trip(static_cast<std::uint32_t>(t), x, rows * cols);
        const float* at = floats->data() + floats->size();
        floats->insert(floats->end(), w.begin(), w.end());
        return ConstMatrixMap(at, rows, cols);
    };
    Model q;
    q.config = c;
    q.token_embedding = put(model.token_embedding, c.vocab_size, c.dim, "token_embd.weight", -1).data();
    q.classifier = c.shared_classifier ? q.token_embedding : put(model.classifier, c.vocab_size, c.dim, "output.weight", -1).data();
    q.rms_final = model.rms_final;
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& s = model.layers[static_cast<size_t>(l)];
        const std::string b = "blk." + std::to_string(l) + ".";
        auto matrix = [&](const ConstMatrixMap& w, const char* name) { return put(w.data(), w.rows(), w.cols(), b + name, l); };
        LayerWeights t{.rms_att = s.rms_att, .wq = matrix(s.wq, "attn_q.weight"), .wk = matrix(s.wk, "attn_k.weight"),
                       .wv = matrix(s.wv, "attn_v.weight"), .wo = matrix(s.wo, "attn_output.weight"), .rms_ffn = s.rms_ffn,
                       .w1 = matrix(s.w1, "ffn_gate.weight"), .w2 = matrix(s.w2, "ffn_down.weight"), .w3 = matrix(s.w3, "ffn_up.weight"),
                       .bq = s.bq, .bk = s.bk, .bv = s.bv, .q_norm = s.q_norm, .k_norm = s.k_norm,
                       .post_attention_norm = s.post_attention_norm, .post_mlp_norm = s.post_mlp_norm};
        q.layers.push_back(std::move(t));
    }
    q.weight_bytes = model.weight_bytes;
    q.storage = std::move(floats);
    return q;
}

}  // namespace glass
