/// \file
/// \brief glass/fast/kernels_portable.hpp — the same kernels as kernels_avx512.hpp and
/// kernels_avx512_attention.hpp, as plain loops.
/// ```text
/// The reference for every other set (AVX2, AVX-512, NEON): the tests check each against these,
/// and a CPU with none of those runs them. They read the packed layout through
/// PackedMatrix::at(), so they are slow but obviously right.
/// ```
#pragma once

#include <cmath>
#include <cstdint>

#include "glass/fast/kernel_table.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/token_tiles.hpp"

namespace glass::fast::portable {

// y[r] (+)= Σ_k W(r,k) · x[k] for the rows of panels [p0, p1).
inline void matvec(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    const int r1 = std::min(w.rows, p1 * kPanel);
    for (int r = p0 * kPanel; r < r1; ++r) {
        float sum = 0;
        for (int k = 0; k < w.cols; ++k) sum += w.at(r, k) * x[k];
        y[r] = accumulate ? y[r] + sum : sum;
    }
}

// Row r of a k-quant matrix (packed_kquants.hpp) times x in int8 blocks of 32: per 16 inputs,
// the integer sums Σ q·qx and Σ qx, then S·Σ q·qx − M·Σ qx, times the block's dx.
inline float k_row_dot_int8(const PackedMatrix& w, int r, const Int8Vector& x) {
    const KQuantLayout& L = k_layout(w.type);
    const int lane = r % kPanel;
    float sum = 0;
    for (int s = 0; s < w.super_blocks(); ++s) {
        const std::uint8_t* super = w.super_block(r / kPanel, s);
        for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
            const int b = s * (kSuperBlock / kSubBlock) + j;  // x's block of 32 = this sub-block
            float block = 0;
            for (int h = 0; h < 2; ++h) {
                std::int32_t qqx = 0, qx = 0;
                for (int kk = 16 * h; kk < 16 * h + 16; ++kk) {
                    const int xk = x.q[b * kQuantBlock + kk];
                    qqx += kq_integer(L, super + L.sub_offset(j), kk, lane) * xk;
                    qx += xk;
                }
                const KScaleMin sm = kq_scale_min(L, super, j, h, lane);
                block += sm.scale * static_cast<float>(qqx) - sm.min * static_cast<float>(qx);
            }
            sum += x.scales[b] * block;
        }
    }
    return sum;
}

// matvec_int8's input: x [n] in int8 blocks of 32 (quantize.hpp's quantize_activations:
// dx = max |x| / 127, qx = round(x / dx)), the last block padded with 0, and each block's Σ qx.
inline void quantize_int8(const float* x, int n, std::int8_t* q, float* scales, std::int32_t* sums) {
    quantize_activations(x, n, q, scales);
    for (int b = 0; b * kQuantBlock < n; ++b) {
        std::int32_t sum = 0;
        for (int i = 0; i < kQuantBlock; ++i) sum += q[b * kQuantBlock + i];
        sums[b] = sum;
    }
}

// y[r] (+)= Σ_b d_{r,b} · dx_b · Σ_{k in b} q_{r,k} · qx_k (Q8_0 / Q4_0, x in int8 blocks):
// quantize.hpp's quantized_dot_int8 on the packed layout; the k-quants as k_row_dot_int8.
inline void matvec_int8(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1, bool accumulate) {
    const int r1 = std::min(w.rows, p1 * kPanel);
    for (int r = p0 * kPanel; r < r1; ++r) {
        if (is_k_quant(w.type)) {
            const float sum = k_row_dot_int8(w, r, x);
            y[r] = accumulate ? y[r] + sum : sum;
            continue;
        }
        float sum = 0;
        for (int b = 0; b < w.q8_blocks(); ++b) {
            const int k0 = b * kQuantBlock, k1 = std::min(w.cols, k0 + kQuantBlock);
            std::int32_t block_sum = 0;
            for (int k = k0; k < k1; ++k) block_sum += w.q(r, k) * x.q[k];
            sum += w.scale(r, b) * x.scales[b] * static_cast<float>(block_sum);
        }
        y[r] = accumulate ? y[r] + sum : sum;
    }
}

// Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for t < n and the rows of panels [p0, p1), X given as
// packed token tiles (token_tiles.hpp): token t0 + j of a tile of m has x[k] at tile[k·m + j].
// A row's weights are widened (w.at) once per tile into `scratch`, kScratchFloats at a time, not
// once per token: for a k-quant, at() decodes its block's scales for every weight. Each sum still
// runs over k in order.
inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                   bool accumulate, float* scratch) {
    const int r1 = std::min(w.rows, p1 * kPanel);
    for (int i = 0; i < token_tiles(n); ++i) {
        const TokenTile tile = token_tile(n, i);
        const int m = tile.t1 - tile.t0;
        const float* x = xp + std::int64_t{tile.t0} * w.cols;
        for (int r = p0 * kPanel; r < r1; ++r) {
            float sum[kTile] = {};
            for (int k0 = 0; k0 < w.cols; k0 += kScratchFloats) {
                const int k1 = std::min(w.cols, k0 + kScratchFloats);
                for (int k = k0; k < k1; ++k) scratch[k - k0] = w.at(r, k);
                for (int j = 0; j < m; ++j)
                    for (int k = k0; k < k1; ++k) sum[j] += scratch[k - k0] * x[std::int64_t{k} * m + j];
            }
            for (int j = 0; j < m; ++j) {
                float& out = y[(tile.t0 + j) * ldy + r];
                out = accumulate ? out + sum[j] : sum[j];
            }
        }
    }
}

// Prefill attention for m query rows (see kernels_avx512_attention.hpp): keys transposed [head_dim][keys].
// S[r][j] = scale · Σ_d Q[r][d] · Kᵀ[d][j]
inline void attention_scores(const float* q, long ldq, int m, const float* kt, long ldkt, int n_keys,
                             int hd, float scale, float* s, long lds) {
    for (int r = 0; r < m; ++r)
        for (int j = 0; j < n_keys; ++j) {
            float sum = 0;
            for (int d = 0; d < hd; ++d) sum += q[r * ldq + d] * kt[d * ldkt + j];
            s[r * lds + j] = sum * scale;
        }
}
// O[r][d] = Σ_j P[r][j] · V[j][d]
inline void attention_mix(const float* p, long ldp, int m, const float* v, long ldv, int n_keys, int hd,
                          float* o, long ldo) {
    for (int r = 0; r < m; ++r)
        for (int d = 0; d < hd; ++d) {
            float sum = 0;
            for (int j = 0; j < n_keys; ++j) sum += p[r * ldp + j] * v[j * ldv + d];
            o[r * ldo + d] = sum;
        }
}

inline float dot(const float* a, const float* b, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

inline void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// out[j] = scale · (q · rows[j]) for j < n_rows (rows ld floats apart)
inline void dot_rows(const float* q, const float* rows, long ld, int n_rows, int n, float scale, float* out) {
    for (int j = 0; j < n_rows; ++j) out[j] = dot(q, rows + j * ld, n) * scale;
}

// y += Σ_j a[j] · rows[j], j in order
inline void add_rows(float* y, const float* a, const float* rows, long ld, int n_rows, int n) {
    for (int j = 0; j < n_rows; ++j) axpy(y, a[j], rows + j * ld, n);
}

// An int8 cache's rows back in fp32: out[j·n + i] = s[j·lds] · rows[j·ld + i].
inline void dequantize_rows(const std::int8_t* rows, long ld, const float* s, long lds, int n_rows, int n, float* out) {
    for (int j = 0; j < n_rows; ++j)
        for (int i = 0; i < n; ++i) out[std::int64_t{j} * n + i] = s[j * lds] * static_cast<float>(rows[j * ld + i]);
}

// max over x[0..n), n ≥ 1.
inline float row_max(const float* x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
    return mx;
}

inline void softmax(float* x, int n) {
    const float mx = row_max(x, n);
    float sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    for (int i = 0; i < n; ++i) x[i] /= sum;
}

// x[i] = e^(x[i] − shift) for i < n; returns their sum (FlashAttention's online softmax step).
inline float exp_shift(float* x, int n, float shift) {
    float sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
    return sum;
}

inline void silu_mul(float* gate, const float* up, int n) {
    for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// The probes: a read-only sum and 12 independent multiply-add chains of 8 lanes, as plain
// loops (the compiler vectorizes them with whatever the build targets).
inline float read_sum(const float* p, std::int64_t n) {
    float s[8] = {};
    for (std::int64_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}
inline float fma_chains(std::int64_t iterations, float start) {
    float acc[kProbeChains][8];
    for (int i = 0; i < kProbeChains; ++i)
        for (int j = 0; j < 8; ++j) acc[i][j] = start + 0.001f * i + 0.0001f * j;
    for (std::int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < kProbeChains; ++i)
            for (int j = 0; j < 8; ++j) acc[i][j] = acc[i][j] * 0.999999f + 1e-7f;
    float s = 0;
    for (int i = 0; i < kProbeChains; ++i)
        for (int j = 0; j < 8; ++j) s += acc[i][j];
    return s;
}

inline Kernels kernels() {
    return {.name = "portable", .isa = "plain C++ loops (any CPU)",
            .matvec = matvec, .matmul = matmul, .dot_rows = dot_rows, .add_rows = add_rows,
            .dequantize_rows = dequantize_rows, .softmax = softmax, .silu_mul = silu_mul,
            .attention_scores = attention_scores, .attention_mix = attention_mix,
            .row_max = row_max, .exp_shift = exp_shift,
            .matvec_int8 = matvec_int8, .int8_dot = "portable", .quantize_int8 = quantize_int8,
            .read_sum = read_sum, .fma_chains = fma_chains, .fma_lanes = 8};
}

}  // namespace glass::fast::portable
