/// \file
/// \brief glass/fast/kernels_neon_attention.hpp — the NEON inner loops of attention, e^x (softmax,
/// SiLU), the probes, and the NEON set's table (kernels_neon.hpp holds the lanes helpers and the
/// matrix products; its header comment explains the register budget of both).
/// ```text
/// decode attention walks cached rows (dot_rows, add_rows, dequantize_rows for the int8 cache);
/// prefill attention multiplies tiles of ≤ 4 queries × 16 keys or 16 dims (attention_scores,
/// attention_mix); exp4 is a 4-lane e^x shared by softmax, exp_shift and silu_mul.
/// ```
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_neon.hpp"  // load_n, store_n, GLASS_NEON_DOT
#include "glass/fast/kernels_neon_kquants.hpp"  // matvec_all, matmul_all, matvec_int8_all
#include "glass/fast/kernels_portable.hpp"

namespace glass::fast::neon {

// ---- Decode attention over a run of cached rows (rows ld floats apart) ---------------------------

// Σ a[i]·b[i], 8 lanes at a time in two accumulators, the tail zero-padded.
inline float dot(const float* a, const float* b, int n) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    for (; i < n; i += 4) s0 = vfmaq_f32(s0, load_n(a + i, n - i), load_n(b + i, n - i));
    return vaddvq_f32(vaddq_f32(s0, s1));
}

// out[j] = scale · (q · rows[j]) for j < n_rows.
inline void dot_rows(const float* q, const float* rows, long ld, int n_rows, int n, float scale, float* out) {
    for (int j = 0; j < n_rows; ++j) out[j] = dot(q, rows + j * ld, n) * scale;
}

// y[0..n) += Σ_j a[j] · rows[j][0..n), j in order: per element one FMA per row, y held in 4
// registers (16 floats) for the whole run. Cutting the rows into several runs (the blocks of a
// paged cache) gives the same bits: y is stored and reloaded exactly.
inline void add_rows(float* y, const float* a, const float* rows, long ld, int n_rows, int n) {
    for (int d0 = 0; d0 < n; d0 += 16) {
        const int left = n - d0;
        float32x4_t acc[4];
        load16(y + d0, left, acc);
        for (int j = 0; j < n_rows; ++j) {
            const float32x4_t aj = vdupq_n_f32(a[j]);
            float32x4_t row[4];
            load16(rows + j * ld + d0, left, row);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) acc[c] = vfmaq_f32(acc[c], aj, row[c]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) store_n(y + d0 + 4 * c, acc[c], left - 4 * c);
    }
}

// An int8 cache's rows in fp32: out[j·n + i] = s[j·lds] · rows[j·ld + i], the very product
// dequantize_kv_row computes (one fp32 multiply), 16 values at a time.
inline void dequantize_rows(const std::int8_t* rows, long ld, const float* s, long lds, int n_rows, int n, float* out) {
    for (int j = 0; j < n_rows; ++j) {
        const float32x4_t sj = vdupq_n_f32(s[j * lds]);
        const std::int8_t* row = rows + j * ld;
        float* o = out + std::int64_t{j} * n;
        for (int i = 0; i < n; i += 16) {
            std::int8_t tail[16] = {};  // the last < 16 values, zero-padded
            if (n - i < 16) std::memcpy(tail, row + i, static_cast<size_t>(n - i));
            float32x4_t f[4];
            widen_int8(n - i < 16 ? vld1q_s8(tail) : vld1q_s8(row + i), f);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) store_n(o + i + 4 * c, vmulq_f32(sj, f[c]), n - i - 4 * c);
        }
    }
}

// ---- Prefill attention: tiles of M ≤ 4 queries (one head) ---------------------------------------

// S[r][j] = scale · Σ_d Q[r][d] · Kᵀ[d][j] for r < M, j < n_keys. Keys transposed ([head_dim]
// [keys], row stride ldkt): 4 consecutive keys fill a register; per d, 4 loads + M broadcasts
// feed 4M FMAs (16 keys per block), and no horizontal sums are needed.
template <int M>
inline void scores_tile(const float* q, long ldq, const float* kt, long ldkt, int n_keys, int hd, float scale,
                        float* s, long lds) {
    const float32x4_t sc = vdupq_n_f32(scale);
    for (int j0 = 0; j0 < n_keys; j0 += 16) {
        const int left = n_keys - j0;
        float32x4_t acc[M][4];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_f32(0.0f);
        for (int d = 0; d < hd; ++d) {
            float32x4_t k[4];
            load16(kt + d * ldkt + j0, left, k);
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const float32x4_t qd = vdupq_n_f32(q[r * ldq + d]);
                acc[r][0] = vfmaq_f32(acc[r][0], qd, k[0]);
                acc[r][1] = vfmaq_f32(acc[r][1], qd, k[1]);
                acc[r][2] = vfmaq_f32(acc[r][2], qd, k[2]);
                acc[r][3] = vfmaq_f32(acc[r][3], qd, k[3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) store_n(s + r * lds + j0 + 4 * c, vmulq_f32(acc[r][c], sc), left - 4 * c);
    }
}

// O[r][d] = Σ_j P[r][j] · V[j][d] for r < M, d < head_dim: per key, 4 loads of its value row
// (16 dims) + M broadcasts of probabilities feed 4M FMAs; the outputs stay in registers.
template <int M>
inline void mix_tile(const float* p, long ldp, const float* v, long ldv, int n_keys, int hd, float* o, long ldo) {
    for (int d0 = 0; d0 < hd; d0 += 16) {
        const int left = hd - d0;
        float32x4_t acc[M][4];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = vdupq_n_f32(0.0f);
        for (int j = 0; j < n_keys; ++j) {
            float32x4_t vj[4];
            load16(v + j * ldv + d0, left, vj);
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const float32x4_t pj = vdupq_n_f32(p[r * ldp + j]);
                acc[r][0] = vfmaq_f32(acc[r][0], pj, vj[0]);
                acc[r][1] = vfmaq_f32(acc[r][1], pj, vj[1]);
                acc[r][2] = vfmaq_f32(acc[r][2], pj, vj[2]);
                acc[r][3] = vfmaq_f32(acc[r][3], pj, vj[3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) store_n(o + r * ldo + d0 + 4 * c, acc[r][c], left - 4 * c);
    }
}

// The run-time query count m (1..4) picks the unrolled tile.
inline void attention_scores(const float* q, long ldq, int m, const float* kt, long ldkt, int n_keys, int hd,
                             float scale, float* s, long lds) {
    switch (m) {
        case 4: scores_tile<4>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 3: scores_tile<3>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 2: scores_tile<2>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        default: scores_tile<1>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
    }
}
inline void attention_mix(const float* p, long ldp, int m, const float* v, long ldv, int n_keys, int hd, float* o,
                          long ldo) {
    switch (m) {
        case 4: mix_tile<4>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 3: mix_tile<3>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 2: mix_tile<2>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        default: mix_tile<1>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
    }
}

// ---- e^x, softmax, SiLU -------------------------------------------------------------------------

// e^x for 4 lanes, relative error ≈ 1e-7 (a few fp32 ulps), kernels_avx512_attention.hpp's exp16:
//   e^x = 2^n · e^r  with n = round(x / ln 2) and r = x − n·ln 2 ∈ [−0.35, 0.35];
//   e^r by its Taylor series to r⁷ (truncation error 0.35⁸/8! ≈ 6e-9); 2^n built in the
//   exponent field (n + 127 ∈ [1, 254] after the clamp: a normal float).
// ln 2 is split in a high part with few mantissa bits (n·hi is exact) plus a small remainder.
inline float32x4_t exp4(float32x4_t x) {
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));  // x − n·hi
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t two_n = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(two_n));
}

// x[i] = e^(x[i] − shift) for i < n; returns their sum (FlashAttention's online softmax step).
inline float exp_shift(float* x, int n, float shift) {
    const float32x4_t s = vdupq_n_f32(shift);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (int i = 0; i < n; i += 4) {
        const float32x4_t e = exp4(vsubq_f32(load_n(x + i, n - i), s));
        store_n(x + i, e, n - i);
        sum = vaddq_f32(sum, vreinterpretq_f32_u32(vandq_u32(lanes_below(n - i), vreinterpretq_u32_f32(e))));
    }
    return vaddvq_f32(sum);
}

// max over x[0..n), n ≥ 1 (FlashAttention's tile maximum): fmaxnm, like std::fmax, ignores a NaN;
// a maximum is the same in any order, so this equals the scalar loop exactly.
inline float row_max(const float* x, int n) {
    float32x4_t mx = vdupq_n_f32(x[0]);
    int i = 0;
    for (; i + 4 <= n; i += 4) mx = vmaxnmq_f32(mx, vld1q_f32(x + i));
    float m = vmaxnmvq_f32(mx);
    for (; i < n; ++i) m = std::fmax(m, x[i]);
    return m;
}

// softmax over x[0..n) in place (all entries finite: the caller passes visible keys only):
// the maximum, then exp_shift's exponentials and sum, then one multiply by the sum's inverse.
inline void softmax(float* x, int n) {
    const float32x4_t inv = vdupq_n_f32(1.0f / exp_shift(x, n, row_max(x, n)));
    for (int i = 0; i < n; i += 4) store_n(x + i, vmulq_f32(load_n(x + i, n - i), inv), n - i);
}

// gate[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^−g)   (SwiGLU, mlp.hpp)
inline void silu_mul(float* gate, const float* up, int n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (int i = 0; i < n; i += 4) {
        const float32x4_t g = load_n(gate + i, n - i);
        const float32x4_t s = vdivq_f32(g, vaddq_f32(one, exp4(vnegq_f32(g))));
        store_n(gate + i, vmulq_f32(s, load_n(up + i, n - i)), n - i);
    }
}

// ---- A row in int8 blocks: decode's input with int8 activations (matvec_int8, kernels_neon.hpp) ----

// matvec_int8's input: x [n] -> int8 blocks of 32 with their scales and Σ q, the portable
// loop's bytes (quantize_activations): x / dx rounded to nearest-even (vrndnq, std::nearbyint's
// way), clamped to ±127; a block holding NaN or ±inf gets dx = NaN and q = 0.
inline void quantize_int8(const float* x, int n, std::int8_t* q, float* scales, std::int32_t* sums) {
    const float32x4_t inf = vdupq_n_f32(std::numeric_limits<float>::infinity());
    for (int b = 0, k0 = 0; k0 < n; ++b, k0 += kQuantBlock) {
        float padded[kQuantBlock] = {};  // the last block's inputs, then zeros
        const float* xb = x + k0;
        if (n - k0 < kQuantBlock) {
            std::copy(x + k0, x + n, padded);
            xb = padded;
        }
        // Phase 1: dx = max |x| / 127, or NaN where a value is not finite (|x| < inf fails).
        float32x4_t v[8], amax = vdupq_n_f32(0.0f);
        uint32x4_t finite = vdupq_n_u32(~0u);
        for (int i = 0; i < 8; ++i) {
            v[i] = vld1q_f32(xb + 4 * i);
            const float32x4_t a = vabsq_f32(v[i]);
            finite = vandq_u32(finite, vcltq_f32(a, inf));
            amax = vmaxq_f32(amax, a);
        }
        const float dx = vminvq_u32(finite) == 0 ? std::numeric_limits<float>::quiet_NaN() : vmaxvq_f32(amax) / 127.0f;
        scales[b] = dx;
        if (!(dx > 0)) {  // all zeros, or NaN
            std::memset(q + k0, 0, kQuantBlock);
            sums[b] = 0;
            continue;
        }
        // Phase 2: q = clamp(round(x / dx)), 8 × 4 int32 narrowed to bytes, and Σ q.
        int32x4_t total = vdupq_n_s32(0);
        for (int i = 0; i < 8; i += 2) {
            int32x4_t i32[2];
            for (int j = 0; j < 2; ++j) {
                float32x4_t r = vrndnq_f32(vdivq_f32(v[i + j], vdupq_n_f32(dx)));
                r = vminq_f32(vmaxq_f32(r, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
                i32[j] = vcvtq_s32_f32(r);
                total = vaddq_s32(total, i32[j]);
            }
            vst1_s8(q + k0 + 4 * i, vmovn_s16(vcombine_s16(vmovn_s32(i32[0]), vmovn_s32(i32[1]))));
        }
        sums[b] = vaddvq_s32(total);
    }
}

// ---- The probes (benchmark.hpp) -----------------------------------------------------------------

// Σ of n floats, 16 at a time (4 independent accumulators, so adding never limits the loop).
inline float read_sum(const float* p, std::int64_t n) {
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
    for (std::int64_t i = 0; i + 16 <= n; i += 16) {
        s0 = vaddq_f32(s0, vld1q_f32(p + i));
        s1 = vaddq_f32(s1, vld1q_f32(p + i + 4));
        s2 = vaddq_f32(s2, vld1q_f32(p + i + 8));
        s3 = vaddq_f32(s3, vld1q_f32(p + i + 12));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}
// 12 independent 4-lane FMA chains (≥ 4-cycle latency × up to 4 FMA pipes on Apple/Neoverse V).
inline float fma_chains(std::int64_t iterations, float start) {
    float32x4_t acc[kProbeChains];
#pragma GCC unroll 12
    for (int i = 0; i < kProbeChains; ++i) acc[i] = vdupq_n_f32(start + 0.001f * i);
    const float32x4_t a = vdupq_n_f32(0.999999f), b = vdupq_n_f32(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
        for (int i = 0; i < kProbeChains; ++i) acc[i] = vfmaq_f32(b, acc[i], a);
    float32x4_t s = acc[0];
#pragma GCC unroll 12
    for (int i = 1; i < kProbeChains; ++i) s = vaddq_f32(s, acc[i]);
    return vaddvq_f32(s);
}

// The set's table; matvec_int8 is the sdot loop when the CPU has dotprod, else the plain one.
inline Kernels kernels(bool dotprod) {
#if !defined(GLASS_NEON_DOT)
    dotprod = false;  // this compiler built no sdot kernel
    const auto matvec_int8_all = portable::matvec_int8;
#endif
    return {.name = "neon", .isa = "AArch64 NEON (+ dotprod for int8 activations)",
            .matvec = matvec_all, .matmul = matmul_all, .dot_rows = dot_rows, .add_rows = add_rows,
            .dequantize_rows = dequantize_rows, .softmax = softmax, .silu_mul = silu_mul,
            .attention_scores = attention_scores, .attention_mix = attention_mix,
            .row_max = row_max, .exp_shift = exp_shift,
            .matvec_int8 = dotprod ? matvec_int8_all : portable::matvec_int8, .int8_dot = dotprod ? "neon-dot" : "portable",
            .quantize_int8 = quantize_int8,
            .read_sum = read_sum, .fma_chains = fma_chains, .fma_lanes = 4};
}

}  // namespace glass::fast::neon

#endif  // __aarch64__
