/// \file
/// \brief glass/fast/kernels_avx2_attention.hpp — the AVX2 inner loops of attention, the MLP's
/// activation and a row's int8 blocks, and the AVX2 set's table (kernels_avx2.hpp and
/// kernels_avx2_matmul.hpp hold the matrix products).
/// ```text
/// The AVX-512 versions (kernels_avx512_attention.hpp) at 8 lanes: decode attention walks cached
/// rows (dot_rows, add_rows), prefill attention multiplies tiles of ≤ 4 queries (attention_scores,
/// attention_mix) 16 keys or 16 dims at a time (4 × 2 accumulators: the 16 ymm registers hold no
/// more next to the loads), and softmax, exp_shift and silu_mul share exp8, an 8-lane e^x.
/// A tail shorter than 8 lanes is read and written through masks (vmaskmovps), never past the end.
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_avx2.hpp"  // GLASS_AVX2, lanes_below
#include "glass/fast/kernels_avx2_kquants.hpp"  // matvec_all, matmul_all, matvec_int8_all, matvec_int8_vnni_all
#include "glass/fast/kernels_portable.hpp"

// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace glass::fast::avx2 {

// x[0..n) into lanes (n ≤ 8: masked, the rest 0), and back.
GLASS_AVX2 inline __m256 load8(const float* x, int n) {
    return n >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, lanes_below(n));
}
GLASS_AVX2 inline void save8(float* x, int n, __m256 v) {
    if (n >= 8) _mm256_storeu_ps(x, v);
    else _mm256_maskstore_ps(x, lanes_below(n), v);
}

// Σ a[i]·b[i], 8 lanes at a time (the tail masked).
GLASS_AVX2 inline float dot(const float* a, const float* b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i < n; i += 8) s0 = _mm256_fmadd_ps(load8(a + i, n - i), load8(b + i, n - i), s0);
    return add_lanes(_mm256_add_ps(s0, s1));
}

// out[j] = scale · (q · rows[j]) for j < n_rows (rows ld floats apart)
GLASS_AVX2 inline void dot_rows(const float* q, const float* rows, long ld, int n_rows, int n, float scale, float* out) {
    for (int j = 0; j < n_rows; ++j) out[j] = dot(q, rows + j * ld, n) * scale;
}

// y[0..n) += Σ_j a[j] · rows[j][0..n), j in order: one FMA chain per element, y held in
// registers for the whole run, so cutting the rows into runs gives the same bits (y is stored
// and reloaded exactly). Each element's FMA waits for its previous row's (4 cycles), so the
// chains side by side are what keeps the two FMA pipes busy: 64 floats (8 chains) at a time,
// one pass over the rows for a head of 64; a last part of fewer than 64, 32 at a time.
GLASS_AVX2 inline void add_rows_64(float* y, const float* a, const float* rows, long ld, int n_rows) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_loadu_ps(y + 8 * v);
    for (int j = 0; j < n_rows; ++j) {
        const __m256 aj = _mm256_set1_ps(a[j]);
        const float* row = rows + j * ld;
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(aj, _mm256_loadu_ps(row + 8 * v), acc[v]);
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(y + 8 * v, acc[v]);
}
GLASS_AVX2 inline void add_rows(float* y, const float* a, const float* rows, long ld, int n_rows, int n) {
    int d0 = 0;
    for (; d0 + 64 <= n; d0 += 64) add_rows_64(y + d0, a, rows + d0, ld, n_rows);
    for (; d0 < n; d0 += 32) {
        const int left = n - d0;
        __m256 y0 = load8(y + d0, left), y1 = load8(y + d0 + 8, left - 8), y2 = load8(y + d0 + 16, left - 16),
               y3 = load8(y + d0 + 24, left - 24);
        for (int j = 0; j < n_rows; ++j) {
            const __m256 aj = _mm256_set1_ps(a[j]);
            const float* row = rows + j * ld + d0;
            y0 = _mm256_fmadd_ps(aj, load8(row, left), y0);
            if (left > 8) y1 = _mm256_fmadd_ps(aj, load8(row + 8, left - 8), y1);
            if (left > 16) y2 = _mm256_fmadd_ps(aj, load8(row + 16, left - 16), y2);
            if (left > 24) y3 = _mm256_fmadd_ps(aj, load8(row + 24, left - 24), y3);
        }
        save8(y + d0, left, y0);
        if (left > 8) save8(y + d0 + 8, left - 8, y1);
        if (left > 16) save8(y + d0 + 16, left - 16, y2);
        if (left > 24) save8(y + d0 + 24, left - 24, y3);
    }
}

// An int8 cache's rows back in fp32: out[j·n + i] = s[j·lds] · rows[j·ld + i], one fp32 product
// each (dequantize_kv_row's), 8 values per instruction; a tail of < 8 as plain products.
GLASS_AVX2 inline void dequantize_rows(const std::int8_t* rows, long ld, const float* s, long lds, int n_rows, int n,
                                       float* out) {
    for (int j = 0; j < n_rows; ++j) {
        const float sj = s[j * lds];
        const std::int8_t* row = rows + j * ld;
        float* o = out + std::int64_t{j} * n;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_set1_ps(sj), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))));
        }
        for (; i < n; ++i) o[i] = sj * static_cast<float>(row[i]);
    }
}

// S[r][j] = scale · Σ_d Q[r][d] · Kᵀ[d][j]  for r < M, j < n_keys (keys transposed [hd][keys]):
// per d, 2 loads of 16 keys + M broadcasts feed 2M FMAs into 2M accumulators.
template <int M>
GLASS_AVX2 inline void scores_tile(const float* q, long ldq, const float* kt, long ldkt, int n_keys, int hd,
                                   float scale, float* s, long lds) {
    for (int j0 = 0; j0 < n_keys; j0 += 16) {
        const int left = n_keys - j0;
        __m256 acc[M][2];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int d = 0; d < hd; ++d) {
            const float* row = kt + d * ldkt + j0;
            const __m256 k0 = load8(row, left), k1 = left > 8 ? load8(row + 8, left - 8) : _mm256_setzero_ps();
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const __m256 qd = _mm256_set1_ps(q[r * ldq + d]);
                acc[r][0] = _mm256_fmadd_ps(qd, k0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(qd, k1, acc[r][1]);
            }
        }
        const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
            save8(s + r * lds + j0, left, _mm256_mul_ps(acc[r][0], sc));
            if (left > 8) save8(s + r * lds + j0 + 8, left - 8, _mm256_mul_ps(acc[r][1], sc));
        }
    }
}

// O[r][d] = Σ_j P[r][j] · V[j][d]  for r < M, d < hd: per key, 2 loads of 16 value dims + M
// broadcasts of probabilities feed 2M FMAs; the outputs stay in registers.
template <int M>
GLASS_AVX2 inline void mix_tile(const float* p, long ldp, const float* v, long ldv, int n_keys, int hd, float* o,
                                long ldo) {
    for (int d0 = 0; d0 < hd; d0 += 16) {
        const int left = hd - d0;
        __m256 acc[M][2];
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        for (int j = 0; j < n_keys; ++j) {
            const float* row = v + j * ldv + d0;
            const __m256 v0 = load8(row, left), v1 = left > 8 ? load8(row + 8, left - 8) : _mm256_setzero_ps();
#pragma GCC unroll 4
            for (int r = 0; r < M; ++r) {
                const __m256 pj = _mm256_set1_ps(p[r * ldp + j]);
                acc[r][0] = _mm256_fmadd_ps(pj, v0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(pj, v1, acc[r][1]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
            save8(o + r * ldo + d0, left, acc[r][0]);
            if (left > 8) save8(o + r * ldo + d0 + 8, left - 8, acc[r][1]);
        }
    }
}

// The run-time query count m (1..4) picks the unrolled tile.
GLASS_AVX2 inline void attention_scores(const float* q, long ldq, int m, const float* kt, long ldkt, int n_keys,
                                        int hd, float scale, float* s, long lds) {
    switch (m) {
        case 4: scores_tile<4>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 3: scores_tile<3>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        case 2: scores_tile<2>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
        default: scores_tile<1>(q, ldq, kt, ldkt, n_keys, hd, scale, s, lds); break;
    }
}
GLASS_AVX2 inline void attention_mix(const float* p, long ldp, int m, const float* v, long ldv, int n_keys, int hd,
                                     float* o, long ldo) {
    switch (m) {
        case 4: mix_tile<4>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 3: mix_tile<3>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        case 2: mix_tile<2>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
        default: mix_tile<1>(p, ldp, v, ldv, n_keys, hd, o, ldo); break;
    }
}

// e^x for 8 lanes, avx512::exp16's arithmetic (e^x = 2^n · e^r, r = x − n·ln 2 ∈ [−0.35, 0.35],
// e^r by Taylor to r⁷), with 2^n built by hand: AVX2 has no scalef, so n + 127 goes into an
// fp32's exponent bits. x is clamped to [−87, 88], so n ∈ [−126, 127] and the exponent fits.
GLASS_AVX2 inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// x[i] = e^(x[i] − shift) for i < n; returns their sum (FlashAttention's online softmax step).
GLASS_AVX2 inline float exp_shift(float* x, int n, float shift) {
    const __m256 s = _mm256_set1_ps(shift);
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        const int left = n - i;
        const __m256 e = exp8(_mm256_sub_ps(load8(x + i, left), s));
        save8(x + i, left, e);
        sum = _mm256_add_ps(sum, left >= 8 ? e : _mm256_and_ps(e, _mm256_castsi256_ps(lanes_below(left))));
    }
    return add_lanes(sum);
}

// max over x[0..n), n ≥ 1: the same in any order, so exactly the scalar loop's.
GLASS_AVX2 inline float row_max(const float* x, int n) {
    __m256 mx = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
    if (i < n)  // lanes past n keep mx's values
        mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, load8(x + i, n - i)), _mm256_castsi256_ps(lanes_below(n - i)));
    const __m128 four = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    const __m128 two = _mm_max_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_max_ss(two, _mm_movehdup_ps(two)));
}

// softmax over x[0..n) in place (all entries finite): the maximum, exp_shift, one multiply.
GLASS_AVX2 inline void softmax(float* x, int n) {
    const __m256 inv = _mm256_set1_ps(1.0f / exp_shift(x, n, row_max(x, n)));
    for (int i = 0; i < n; i += 8) save8(x + i, n - i, _mm256_mul_ps(load8(x + i, n - i), inv));
}

// gate[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^−g)   (SwiGLU, mlp.hpp)
GLASS_AVX2 inline void silu_mul(float* gate, const float* up, int n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < n; i += 8) {
        const int left = n - i;
        const __m256 g = load8(gate + i, left);
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        save8(gate + i, left, _mm256_mul_ps(s, load8(up + i, left)));
    }
}

// ---- A row in int8 blocks: decode's input with int8 activations (matvec_int8, kernels_avx2.hpp) ----

// matvec_int8's input: x [n] -> int8 blocks of 32 with their scales and Σ q, the portable loop's
// bytes (quantize_activations): the same division x / dx, rounded to nearest-even as
// std::nearbyint does, clamped to ±127. A block holding NaN or ±inf gets dx = NaN and q = 0.
// (In the portable loop, 768 calls of std::nearbyint took ~2 µs, serially, before every product.)
GLASS_AVX2 inline void quantize_int8(const float* x, int n, std::int8_t* q, float* scales, std::int32_t* sums) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    for (int b = 0, k0 = 0; k0 < n; ++b, k0 += kQuantBlock) {
        alignas(32) float padded[kQuantBlock] = {};  // the last block's inputs, then zeros
        const float* xb = x + k0;
        if (n - k0 < kQuantBlock) {
            std::copy(x + k0, x + n, padded);
            xb = padded;
        }
        // Phase 1: dx = max |x| / 127, or NaN where a value is not finite.
        __m256 v[4], amax = _mm256_setzero_ps(), not_finite = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            const __m256 a = _mm256_and_ps(v[i], abs_mask);
            not_finite = _mm256_or_ps(not_finite, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // |x| ≥ inf, or NaN
            amax = _mm256_max_ps(amax, a);
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float dx = _mm256_movemask_ps(not_finite) ? std::numeric_limits<float>::quiet_NaN() : _mm_cvtss_f32(m) / 127.0f;
        scales[b] = dx;
        if (!(dx > 0)) {  // all zeros, or NaN
            std::memset(q + k0, 0, kQuantBlock);
            sums[b] = 0;
            continue;
        }
        // Phase 2: q = clamp(round(x / dx)), 4 × 8 int32 -> 32 bytes in order, and Σ q.
        __m256i i32[4];
        for (int i = 0; i < 4; ++i) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(v[i], _mm256_set1_ps(dx)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
            i32[i] = _mm256_cvtps_epi32(r);
        }
        const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
        __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4E));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xB1));
        sums[b] = _mm_cvtsi128_si32(sum4);
        // Packing works within 128-bit lanes: the bytes come out as 4-byte groups
        // [v0 0-3, v1 0-3, v2 0-3, v3 0-3 | v0 4-7, v1 4-7, v2 4-7, v3 4-7]; one permute orders them.
        const __m256i i16 = _mm256_packs_epi32(i32[0], i32[1]), j16 = _mm256_packs_epi32(i32[2], i32[3]);
        const __m256i i8 = _mm256_packs_epi16(i16, j16);
        const __m256i ordered = _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k0), ordered);
    }
}

// The probes (benchmark.hpp): Σ of n floats 32 at a time (4 independent accumulators), and 12
// independent 8-lane FMA chains (12 > 4-cycle latency × 2 FMA pipes, so the units never wait).
GLASS_AVX2 inline float read_sum(const float* p, std::int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (std::int64_t i = 0; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
    return add_lanes(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}
GLASS_AVX2 inline float fma_chains(std::int64_t iterations, float start) {
    __m256 acc[kProbeChains];
    for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm256_set1_ps(start + 0.001f * i);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (std::int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
        for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < kProbeChains; ++i) s = _mm256_add_ps(s, acc[i]);
    return add_lanes(s);
}

// The set's table; matvec_int8 uses vpdpbusd where the CPU has AVX-VNNI, else vpmaddubsw.
inline Kernels kernels(bool avx_vnni) {
    return {.name = "avx2", .isa = "AVX2 + FMA + F16C",
            .matvec = matvec_all, .matmul = matmul_all, .dot_rows = dot_rows, .add_rows = add_rows,
            .dequantize_rows = dequantize_rows, .softmax = softmax, .silu_mul = silu_mul,
            .attention_scores = attention_scores, .attention_mix = attention_mix,
            .row_max = row_max, .exp_shift = exp_shift,
            .matvec_int8 = avx_vnni ? matvec_int8_vnni_all : matvec_int8_all, .int8_dot = avx_vnni ? "avx-vnni" : "avx2",
            .quantize_int8 = quantize_int8,
            .read_sum = read_sum, .fma_chains = fma_chains, .fma_lanes = 8};
}

}  // namespace glass::fast::avx2

#pragma GCC diagnostic pop

#endif  // __x86_64__
