/// \file
/// \brief glass/fast/kernels_avx512_attention.hpp — the AVX-512 inner loops of attention and the
/// MLP's activation: the work between the matrix products (kernels_avx512.hpp holds those).
/// ```text
/// Decode attention walks the cached positions of one head in runs (dot_rows for the scores,
/// add_rows for the weighted sum of values); prefill attention works on tiles of up to 4 queries
/// as two small matrix products (attention_scores, attention_mix); softmax and silu_mul share
/// exp16, a 16-lane e^x. Each has a plain twin in kernels_portable.hpp with the same meaning.
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_avx512.hpp"  // GLASS_AVX512, row_masks
#include "glass/fast/kernels_avx512_kquants.hpp"  // matvec_all, matmul_all, matvec_int8_all
#include "glass/fast/kernels_portable.hpp"

// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace glass::fast::avx512 {

// Σ a[i]·b[i], 16 lanes at a time (the tail masked).
GLASS_AVX512 inline float dot(const float* a, const float* b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = row_masks(n - i).lo;
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// 16 int8 values (the first lanes of m) as fp32.
GLASS_AVX512 inline __m512 widen_int8(const std::int8_t* p, __mmask16 m) {
    // (The maskz form: GCC 12 flags the plain one's undefined pass-through as uninitialized.)
    return _mm512_cvtepi32_ps(_mm512_maskz_cvtepi8_epi32(m, _mm_maskz_loadu_epi8(m, p)));
}

// An int8 cache's rows back in fp32 (kv_cache.hpp's KvType::int8): out[j·n + i] = s[j·lds] · rows[j·ld + i]
// for j < n_rows, i < n, the very products dequantize_kv_row computes, 16 values per instruction.
GLASS_AVX512 inline void dequantize_rows(const std::int8_t* rows, long ld, const float* s, long lds, int n_rows, int n,
                                         float* out) {
    for (int j = 0; j < n_rows; ++j) {
        const __m512 sj = _mm512_set1_ps(s[j * lds]);
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = row_masks(n - i).lo;
            _mm512_mask_storeu_ps(out + std::int64_t{j} * n + i, m, _mm512_mul_ps(sj, widen_int8(rows + j * ld + i, m)));
        }
    }
}

// Prefill attention as two small matrix products over a tile of M ≤ 4 queries (one head, M
// consecutive positions), instead of one dot product per (query, key) pair. Per pair a 64-long
// dot costs 4 FMAs plus a ~10-instruction horizontal sum, and the weighted sum of values
// reloads and stores the output row once per key: that made attention ~15 % of prefill time
// for ~2.5 % of its FLOPs. Tiled, every loaded key/value vector feeds M FMAs from registers.

// Lanes [16b, 16b + 16) of a 64-wide block starting at j0 that are below n.
inline __mmask16 lanes_below(int n, int j0, int b) {
    const int left = n - j0 - 16 * b;
    return left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}

// Decode attention, one query head against a run of cached positions (rows ld floats apart):
// one call per run instead of one per key, so the per-call cost (an indirect call through
// the kernel table, masks, reloading the output) is paid once per run.
// out[j] = scale · (q · rows[j]) for j < n_rows, each summed as dot() sums it.
GLASS_AVX512 inline void dot_rows(const float* q, const float* rows, long ld, int n_rows, int n, float scale,
                                  float* out) {
    for (int j = 0; j < n_rows; ++j) out[j] = dot(q, rows + j * ld, n) * scale;
}

// y[0..n) += Σ_j a[j] · rows[j][0..n), j in order: per element one FMA per row, y held in
// registers (64 floats at a time) for the whole run. Cutting the rows into several runs
// (blocks) gives the same bits: y is stored and reloaded exactly.
GLASS_AVX512 inline void add_rows(float* y, const float* a, const float* rows, long ld, int n_rows, int n) {
    for (int d0 = 0; d0 < n; d0 += 64) {
        const __mmask16 m0 = lanes_below(n, d0, 0), m1 = lanes_below(n, d0, 1),
                        m2 = lanes_below(n, d0, 2), m3 = lanes_below(n, d0, 3);
        __m512 y0 = _mm512_maskz_loadu_ps(m0, y + d0), y1 = _mm512_maskz_loadu_ps(m1, y + d0 + 16),
               y2 = _mm512_maskz_loadu_ps(m2, y + d0 + 32), y3 = _mm512_maskz_loadu_ps(m3, y + d0 + 48);
        for (int j = 0; j < n_rows; ++j) {
            const __m512 aj = _mm512_set1_ps(a[j]);
            const float* row = rows + j * ld + d0;
            y0 = _mm512_fmadd_ps(aj, _mm512_maskz_loadu_ps(m0, row), y0);
            y1 = _mm512_fmadd_ps(aj, _mm512_maskz_loadu_ps(m1, row + 16), y1);
            y2 = _mm512_fmadd_ps(aj, _mm512_maskz_loadu_ps(m2, row + 32), y2);
            y3 = _mm512_fmadd_ps(aj, _mm512_maskz_loadu_ps(m3, row + 48), y3);
        }
        _mm512_mask_storeu_ps(y + d0, m0, y0);
        _mm512_mask_storeu_ps(y + d0 + 16, m1, y1);
        _mm512_mask_storeu_ps(y + d0 + 32, m2, y2);
        _mm512_mask_storeu_ps(y + d0 + 48, m3, y3);
    }
}


// S[r][j] = scale · Σ_d Q[r][d] · Kᵀ[d][j]  for r < M, j < n_keys.
// Keys are transposed ([head_dim][keys], row stride ldkt) so 16 consecutive keys fill one
// register: per d, 4 loads + M broadcasts feed 4M FMAs into 4M accumulators (16 for M = 4),
// and no horizontal sums are needed.
template <int M>
GLASS_AVX512 inline void scores_tile(const float* q, long ldq, const float* kt, long ldkt, int n_keys,
                                     int hd, float scale, float* s, long lds) {
    for (int j0 = 0; j0 < n_keys; j0 += 64) {
        const __mmask16 m0 = lanes_below(n_keys, j0, 0), m1 = lanes_below(n_keys, j0, 1),
                        m2 = lanes_below(n_keys, j0, 2), m3 = lanes_below(n_keys, j0, 3);
        __m512 acc[M][4];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
        for (int d = 0; d < hd; ++d) {
            const float* row = kt + d * ldkt + j0;
            const __m512 k0 = _mm512_maskz_loadu_ps(m0, row), k1 = _mm512_maskz_loadu_ps(m1, row + 16),
                         k2 = _mm512_maskz_loadu_ps(m2, row + 32), k3 = _mm512_maskz_loadu_ps(m3, row + 48);
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const __m512 qd = _mm512_set1_ps(q[r * ldq + d]);
                acc[r][0] = _mm512_fmadd_ps(qd, k0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(qd, k1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(qd, k2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(qd, k3, acc[r][3]);
            }
        }
        const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
            float* out = s + r * lds + j0;
            _mm512_mask_storeu_ps(out, m0, _mm512_mul_ps(acc[r][0], sc));
            _mm512_mask_storeu_ps(out + 16, m1, _mm512_mul_ps(acc[r][1], sc));
            _mm512_mask_storeu_ps(out + 32, m2, _mm512_mul_ps(acc[r][2], sc));
            _mm512_mask_storeu_ps(out + 48, m3, _mm512_mul_ps(acc[r][3], sc));
        }
    }
}

// O[r][d] = Σ_j P[r][j] · V[j][d]  for r < M, d < head_dim: per key, 4 loads of its value row
// (64 dims) + M broadcasts of probabilities feed 4M FMAs; the outputs stay in registers.
template <int M>
GLASS_AVX512 inline void mix_tile(const float* p, long ldp, const float* v, long ldv, int n_keys,
                                  int hd, float* o, long ldo) {
    for (int d0 = 0; d0 < hd; d0 += 64) {
        const __mmask16 m0 = lanes_below(hd, d0, 0), m1 = lanes_below(hd, d0, 1),
                        m2 = lanes_below(hd, d0, 2), m3 = lanes_below(hd, d0, 3);
        __m512 acc[M][4];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_ps();
        for (int j = 0; j < n_keys; ++j) {
            const float* row = v + j * ldv + d0;
            const __m512 v0 = _mm512_maskz_loadu_ps(m0, row), v1 = _mm512_maskz_loadu_ps(m1, row + 16),
                         v2 = _mm512_maskz_loadu_ps(m2, row + 32), v3 = _mm512_maskz_loadu_ps(m3, row + 48);
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const __m512 pj = _mm512_set1_ps(p[r * ldp + j]);
                acc[r][0] = _mm512_fmadd_ps(pj, v0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(pj, v1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(pj, v2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(pj, v3, acc[r][3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
            float* out = o + r * ldo + d0;
            _mm512_mask_storeu_ps(out, m0, acc[r][0]);
            _mm512_mask_storeu_ps(out + 16, m1, acc[r][1]);
            _mm512_mask_storeu_ps(out + 32, m2, acc[r][2]);
            _mm512_mask_storeu_ps(out + 48, m3, acc[r][3]);
        }
    }
}

// The run-time query count m (1..4) picks the unrolled tile.
GLASS_AVX512 inline void attention_scores(const float* q, long ldq, int m, const float* kt, long ldkt,
                                          int n_keys, int hd, float scale, float* s, long lds) {
    switch (m) {
        case 4: scores_tile<4>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 3: scores_tile<3>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 2: scores_tile<2>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        default: scores_tile<1>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
    }
}
GLASS_AVX512 inline void attention_mix(const float* p, long ldp, int m, const float* v, long ldv,
                                       int n_keys, int hd, float* o, long ldo) {
    switch (m) {
        case 4: mix_tile<4>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 3: mix_tile<3>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 2: mix_tile<2>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        default: mix_tile<1>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
    }
}

// e^x for 16 lanes, relative error ≈ 1e-7 (a few fp32 ulps), without calling expf 16 times:
//   e^x = 2^n · e^r  with n = round(x / ln 2) and r = x − n·ln 2 ∈ [−0.35, 0.35];
//   e^r by its Taylor series to r⁷ (truncation error 0.35⁸/8! ≈ 6e-9); 2^n by scalef.
// ln 2 is split in a high part with few mantissa bits (n·hi is exact) plus a small remainder.
GLASS_AVX512 inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// x[i] = e^(x[i] − shift) for i < n; returns their sum (FlashAttention's online softmax step).
GLASS_AVX512 inline float exp_shift(float* x, int n, float shift) {
    const __m512 s = _mm512_set1_ps(shift);
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = row_masks(n - i).lo;
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(sum);
}

// max over x[0..n), n ≥ 1, 16 lanes at a time (FlashAttention's tile maximum; a maximum is the
// same in any order, so this equals the scalar loop exactly).
GLASS_AVX512 inline float row_max(const float* x, int n) {
    __m512 mx = _mm512_set1_ps(-3.0e38f);
    for (int i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, row_masks(n - i).lo, x + i));
    return _mm512_reduce_max_ps(mx);
}

// softmax over x[0..n) in place (all entries finite: the caller passes visible keys only):
// the maximum, then exp_shift's exponentials and sum, then one multiply by the sum's inverse.
GLASS_AVX512 inline void softmax(float* x, int n) {
    const __m512 inv = _mm512_set1_ps(1.0f / exp_shift(x, n, row_max(x, n)));
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = row_masks(n - i).lo;
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

// gate[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^−g)   (SwiGLU, mlp.hpp)
GLASS_AVX512 inline void silu_mul(float* gate, const float* up, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = row_masks(n - i).lo;
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
    }
}

// ---- A row in int8 blocks: decode's input with int8 activations (matvec_int8, kernels_avx512.hpp) ----

// matvec_int8's input: x [n] -> int8 blocks of 32 with their scales and Σ q, the portable
// loop's bytes (quantize_activations): x / dx rounded to nearest-even (std::nearbyint's way),
// clamped to ±127; a block holding NaN or ±inf gets dx = NaN and q = 0. Two registers a block;
// a masked load reads the last block's inputs and zeros past them.
GLASS_AVX512 inline void quantize_int8(const float* x, int n, std::int8_t* q, float* scales, std::int32_t* sums) {
    const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    for (int b = 0, k0 = 0; k0 < n; ++b, k0 += kQuantBlock) {
        const int left = n - k0;
        const __mmask16 m0 = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
        const __mmask16 m1 = left >= 32 ? 0xFFFF : left <= 16 ? 0 : static_cast<__mmask16>((1u << (left - 16)) - 1);
        const __m512 v[2] = {_mm512_maskz_loadu_ps(m0, x + k0), _mm512_maskz_loadu_ps(m1, x + k0 + 16)};
        // Phase 1: dx = max |x| / 127, or NaN where a value is not finite.
        const __m512 a0 = _mm512_abs_ps(v[0]), a1 = _mm512_abs_ps(v[1]);
        const bool not_finite = (_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) != 0;
        const float dx = not_finite ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / 127.0f;
        scales[b] = dx;
        if (!(dx > 0)) {  // all zeros, or NaN
            std::memset(q + k0, 0, kQuantBlock);
            sums[b] = 0;
            continue;
        }
        // Phase 2: q = clamp(round(x / dx)) as 2 × 16 int32, narrowed to bytes, and Σ q.
        __m512i i32[2];
        for (int i = 0; i < 2; ++i) {
            __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v[i], _mm512_set1_ps(dx)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
            i32[i] = _mm512_cvtps_epi32(r);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k0 + 16 * i), _mm512_cvtepi32_epi8(i32[i]));
        }
        sums[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i32[0], i32[1]));
    }
}

// The probes (benchmark.hpp). The 16 lanes added one by one: _mm512_reduce_add_ps would do, but
// GCC 12's expansion of it warns falsely here (-Wuninitialized on an intrinsic's "undefined").
GLASS_AVX512 inline float add_lanes(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    float total = 0.0f;
    for (float x : lanes) total += x;
    return total;
}
// Σ of n floats, 64 at a time (4 independent accumulators, so adding never limits the loop).
GLASS_AVX512 inline float read_sum(const float* p, std::int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (std::int64_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    return add_lanes(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
// 12 independent 16-lane FMA chains (12 > 4-cycle latency × 2 FMA pipes, so the units never wait).
GLASS_AVX512 inline float fma_chains(std::int64_t iterations, float start) {
    __m512 acc[kProbeChains];
    for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm512_set1_ps(start + 0.001f * i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
        for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < kProbeChains; ++i) s = _mm512_add_ps(s, acc[i]);
    return add_lanes(s);
}

// The set's table; matvec_int8 is the VNNI loop when the CPU has AVX-512 VNNI, else the plain one.
inline Kernels kernels(bool vnni) {
    return {.name = "avx512", .isa = "AVX-512 F/BW/VL/DQ + FMA + F16C",
            .matvec = matvec_all, .matmul = matmul_all, .dot_rows = dot_rows, .add_rows = add_rows,
            .dequantize_rows = dequantize_rows, .softmax = softmax, .silu_mul = silu_mul,
            .attention_scores = attention_scores, .attention_mix = attention_mix,
            .row_max = row_max, .exp_shift = exp_shift,
            .matvec_int8 = vnni ? matvec_int8_all : portable::matvec_int8, .int8_dot = vnni ? "avx512-vnni" : "portable",
            .quantize_int8 = quantize_int8,
            .read_sum = read_sum, .fma_chains = fma_chains, .fma_lanes = 16};
}

}  // namespace glass::fast::avx512

#pragma GCC diagnostic pop

#endif  // __x86_64__
