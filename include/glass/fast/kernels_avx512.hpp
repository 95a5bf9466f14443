/// \file
/// \brief glass/fast/kernels_avx512.hpp — the matrix products' inner loops, written for AVX-512
/// (16 fp32 lanes).
/// ```text
/// Decode's matvec and prefill's register-tiled matmul over packed weight panels; attention's
/// and the MLP activation's loops build on these in kernels_avx512_attention.hpp.
/// Every function here has a plain twin in kernels_portable.hpp with the same meaning; the
/// session picks one set at run time (__builtin_cpu_supports), so the build never needs
/// -march=native and still runs on a CPU without AVX-512. `target` attributes let one file hold
/// AVX-512 code while the rest of the program is compiled for plain x86-64.
///
/// Numbers that guide the design (AMD Zen 4, one core): one 512-bit fused multiply-add (FMA) per
/// cycle = 16 lanes × 2 FLOPs = 32 FLOP/cycle ≈ 115 GFLOP/s at 3.6 GHz; one 512-bit load per
/// cycle (two 256-bit); FMA latency 4 cycles, so ≥ 4 independent accumulators keep it busy.
/// Zen 5 (what the bench VM now reports: family 26) has two 512-bit FMA pipes, ≈ 265 GFLOP/s
/// per core: ≥ 8 independent accumulators, and the prefill tile's 24 are still enough.
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "glass/fast/packed_weights.hpp"
#include "glass/fast/token_tiles.hpp"

// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define GLASS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
// The integer dot products (vpdpbusd) are AVX-512 VNNI, a separate CPU feature (cpu_has_vnni).
#define GLASS_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni")))

namespace glass::fast::avx512 {

constexpr int kChunk = 256;  // prefill: inputs per panel chunk. 32 rows × 256 × 4 B = 32 KiB:
                             // the chunk stays in the 48 KiB L1 cache while every token uses it.

// Masks for storing the valid rows of a 32-row panel (the last panel may be partly padding).
struct RowMasks {
    __mmask16 lo, hi;
};
inline RowMasks row_masks(int valid) {
    const auto bits = [](int n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); };
    return {bits(std::min(valid, 16)), bits(std::max(valid - 16, 0))};
}

GLASS_AVX512 inline void store_rows(float* y, RowMasks m, __m512 lo, __m512 hi, bool accumulate) {
    if (accumulate) {
        lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m.lo, y));
        hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m.hi, y + 16));
    }
    _mm512_mask_storeu_ps(y, m.lo, lo);
    _mm512_mask_storeu_ps(y + 16, m.hi, hi);
}

// 16 packed weights -> 16 fp32 lanes.
GLASS_AVX512 inline __m512 widen_fp16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
GLASS_AVX512 inline __m512 widen_bf16(const std::uint16_t* p) {
    // bf16 is the top half of an fp32: zero-extend to 32 bits and shift left by 16.
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
// Inputs 4g .. 4g+3 of a Q8_0 or Q4_0 block (packed_weights.hpp): their 32 rows' integers as
// fp32, w[t] = rows 0..15 of input 4g + t and w[4 + t] = rows 16..31 (the block's scales are
// applied by the caller). The block stores a row's 4 inputs of a group side by side (q8_offset,
// q4_offset), so one 64-byte load holds the group for 16 rows (Q8_0) or 32 rows (Q4_0), input
// t in byte t of each 32-bit lane. Q8_0: shift byte t to the top of the lane, then back down
// with its sign. Q4_0: shift it to the bottom; its low 4 bits (rows 0..15) or the next 4 (rows
// 16..31) index a table of the 16 floats -8 .. 7 (permutexvar reads only the low 4 bits of each
// lane), which replaces a mask, a subtraction and an int-to-float conversion per register.
// (Shift counts are immediates: every call is written out.)
GLASS_AVX512 inline void widen_group(bool q4, const unsigned char* block, int g, __m512 w[8]) {
    const unsigned char* q = block + kPanel * 2;
    if (q4) {
        const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
        const __m512i v = _mm512_loadu_si512(q + g * 64);
        w[0] = _mm512_permutexvar_ps(v, table);
        w[4] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
        w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), table);
        w[5] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), table);
        w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 16), table);
        w[6] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 20), table);
        w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 24), table);
        w[7] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 28), table);
        return;
    }
    for (int half = 0; half < 2; ++half) {  // rows 0..15, then 16..31
        const __m512i v = _mm512_loadu_si512(q + g * 128 + half * 64);
        w[4 * half + 0] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24), 24));
        w[4 * half + 1] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 16), 24));
        w[4 * half + 2] = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 8), 24));
        w[4 * half + 3] = _mm512_cvtepi32_ps(_mm512_srai_epi32(v, 24));
    }
}

// ---------------------------------------------------------------------------------------------
// Decode: y[r] (+)= Σ_k W(r,k) · x[k] for the rows of panels [p0, p1).
// Per input k: broadcast x[k] to 16 lanes, load the panel's 32 weights for k, 2 FMAs. The panel
// is read once, front to back, so the loop runs at memory speed; 4 k's in flight give 8
// independent accumulators (> 4-cycle FMA latency) for models small enough to sit in cache.
GLASS_AVX512 inline void matvec(const PackedMatrix& w, const float* x, float* y, int p0, int p1,
                                bool accumulate) {
    const int cols = w.cols;
    for (int p = p0; p < p1; ++p) {
        __m512 lo[4] = {}, hi[4] = {};
        const unsigned char* panel = w.panel(p);
        if (w.type == WeightType::fp32) {
            const float* pw = reinterpret_cast<const float*>(panel);
            int k = 0;
            for (; k + 4 <= cols; k += 4)
                for (int u = 0; u < 4; ++u) {
                    const __m512 xk = _mm512_set1_ps(x[k + u]);
                    lo[u] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(pw + (k + u) * 32), lo[u]);
                    hi[u] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(pw + (k + u) * 32 + 16), hi[u]);
                }
            for (; k < cols; ++k) {
                const __m512 xk = _mm512_set1_ps(x[k]);
                lo[0] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(pw + k * 32), lo[0]);
                hi[0] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(pw + k * 32 + 16), hi[0]);
            }
        } else if (w.type == WeightType::fp16 || w.type == WeightType::bf16) {
            // Two inputs per step into separate accumulators. (Accumulators are indexed by
            // constants only: an array indexed by a run-time value would live in memory, and
            // every FMA would wait on a store and a reload.)
            const auto* ph = reinterpret_cast<const std::uint16_t*>(panel);
            const bool is_fp16 = w.type == WeightType::fp16;
            auto widen = [is_fp16](const std::uint16_t* q) GLASS_AVX512 {
                return is_fp16 ? widen_fp16(q) : widen_bf16(q);
            };
            int k = 0;
            for (; k + 2 <= cols; k += 2) {
                const __m512 x0 = _mm512_set1_ps(x[k]), x1 = _mm512_set1_ps(x[k + 1]);
                lo[0] = _mm512_fmadd_ps(x0, widen(ph + k * 32), lo[0]);
                hi[0] = _mm512_fmadd_ps(x0, widen(ph + k * 32 + 16), hi[0]);
                lo[1] = _mm512_fmadd_ps(x1, widen(ph + k * 32 + 32), lo[1]);
                hi[1] = _mm512_fmadd_ps(x1, widen(ph + k * 32 + 48), hi[1]);
            }
            if (k < cols) {
                const __m512 x0 = _mm512_set1_ps(x[k]);
                lo[0] = _mm512_fmadd_ps(x0, widen(ph + k * 32), lo[0]);
                hi[0] = _mm512_fmadd_ps(x0, widen(ph + k * 32 + 16), hi[0]);
            }
        } else {  // Q8_0 / Q4_0: sum x·q over a block in fp32, then multiply by the block's 32 scales.
            const bool q4 = w.type == WeightType::q4_0;
            const std::int64_t block_bytes = q4 ? kQ4BlockBytes : kQ8BlockBytes;
            for (int b = 0; b < w.q8_blocks(); ++b) {
                const unsigned char* block = panel + b * block_bytes;
                const int k0 = b * kQuantBlock, n = std::min(kQuantBlock, cols - k0);
                __m512 b_lo0 = _mm512_setzero_ps(), b_hi0 = b_lo0, b_lo1 = b_lo0, b_hi1 = b_lo0;
                __m512 wq[8];
                for (int g = 0; 4 * g < n; ++g) {  // groups of 4 inputs
                    widen_group(q4, block, g, wq);
                    // A row that ends inside the group: its padding inputs (q = 0) meet x = 0,
                    // and x past the end is not read.
                    const float* xg = x + k0 + 4 * g;
                    const int left = n - 4 * g;
                    const __m512 x0 = _mm512_set1_ps(xg[0]), x1 = _mm512_set1_ps(left > 1 ? xg[1] : 0.0f);
                    const __m512 x2 = _mm512_set1_ps(left > 2 ? xg[2] : 0.0f), x3 = _mm512_set1_ps(left > 3 ? xg[3] : 0.0f);
                    b_lo0 = _mm512_fmadd_ps(x0, wq[0], b_lo0);
                    b_hi0 = _mm512_fmadd_ps(x0, wq[4], b_hi0);
                    b_lo1 = _mm512_fmadd_ps(x1, wq[1], b_lo1);
                    b_hi1 = _mm512_fmadd_ps(x1, wq[5], b_hi1);
                    b_lo0 = _mm512_fmadd_ps(x2, wq[2], b_lo0);
                    b_hi0 = _mm512_fmadd_ps(x2, wq[6], b_hi0);
                    b_lo1 = _mm512_fmadd_ps(x3, wq[3], b_lo1);
                    b_hi1 = _mm512_fmadd_ps(x3, wq[7], b_hi1);
                }
                const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
                lo[0] = _mm512_fmadd_ps(_mm512_add_ps(b_lo0, b_lo1), widen_fp16(scales), lo[0]);
                hi[0] = _mm512_fmadd_ps(_mm512_add_ps(b_hi0, b_hi1), widen_fp16(scales + 16), hi[0]);
            }
        }
        const __m512 sum_lo = _mm512_add_ps(_mm512_add_ps(lo[0], lo[1]), _mm512_add_ps(lo[2], lo[3]));
        const __m512 sum_hi = _mm512_add_ps(_mm512_add_ps(hi[0], hi[1]), _mm512_add_ps(hi[2], hi[3]));
        store_rows(y + p * kPanel, row_masks(w.rows - p * kPanel), sum_lo, sum_hi, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Decode with int8 activations: y[r] (+)= Σ_b d_{r,b} · dx_b · Σ_{k in b} q_{r,k} · qx_k for the
// rows of Q8_0 / Q4_0 panels [p0, p1), x given as int8 blocks (Int8Vector).
//
// vpdpbusd (_mm512_dpbusd_epi32) multiplies 64 unsigned bytes by 64 signed bytes and adds each
// lane's 4 products to that 32-bit lane: with a group's layout [16 rows][4 inputs] (q8_offset,
// q4_offset) and the 4 inputs' qx broadcast to every lane, one instruction does 64 multiply-adds
// for 16 rows, where the fp32 path needs 4 FMAs and the widening. The weights are the unsigned
// side, shifted by an offset: Q4_0 stores q + 8 already; Q8_0 gets q + 128 by flipping each
// byte's top bit. So each lane sums (q + offset) · qx, and offset · Σ qx (x.sums) comes off
// before the block's sum becomes fp32 and meets the two scales. Integer sums are exact: this
// equals quantize.hpp's quantized_dot_int8 up to the order of the fp32 additions over blocks.
// Q4 bytes taken whole (below, and Q4_K in kernels_avx512_kquants.hpp): whole = Σ (lo + 16·hi)·qx
// and hi16 = Σ 16·hi·qx become Σ lo·qx and Σ hi·qx, exactly (hi16 is a multiple of 16).
GLASS_AVX512 inline void separate_nibble_sums(__m512i& whole, __m512i& hi16) {
    whole = _mm512_sub_epi32(whole, hi16);
    hi16 = _mm512_srai_epi32(hi16, 4);
}
GLASS_AVX512_VNNI inline void matvec_int8(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                          bool accumulate) {
    const bool q4 = w.type == WeightType::q4_0;
    const int offset = q4 ? 8 : 128;
    const __m512i high4 = _mm512_set1_epi8(static_cast<char>(0xF0)), top_bit = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int p = p0; p < p1; ++p) {
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        const unsigned char* panel = w.panel(p);
        for (int b = 0; b < w.q8_blocks(); ++b) {
            const unsigned char* block = panel + std::int64_t{b} * w.block_bytes();
            const unsigned char* q = block + kPanel * 2;
            const std::int8_t* xb = x.q + b * kQuantBlock;
            // Two accumulators per 16 rows (even and odd groups): two chains of 4 instead of one of 8.
            __m512i lo0 = _mm512_setzero_si512(), lo1 = lo0, hi0 = lo0, hi1 = lo0;
            for (int g = 0; g < kQuantBlock / 4; g += 2) {
                std::int32_t x0, x1;  // qx of inputs 4g .. 4g+3 and 4g+4 .. 4g+7
                std::memcpy(&x0, xb + 4 * g, 4);
                std::memcpy(&x1, xb + 4 * g + 4, 4);
                const __m512i b0 = _mm512_set1_epi32(x0), b1 = _mm512_set1_epi32(x1);
                if (q4) {  // one load: rows 0..15 in the low 4 bits of each byte, 16..31 in the high
                    // The bytes whole (lo + 16 · hi) and the high nibbles in place (16 · hi): one and
                    // instead of a shift and two; the two come apart exactly after the loop (as in
                    // kernels_avx2.hpp's int8_group_bytes). From L2: 158-163 → 169-175 GB/s.
                    const __m512i v0 = _mm512_loadu_si512(q + g * 64), v1 = _mm512_loadu_si512(q + g * 64 + 64);
                    lo0 = _mm512_dpbusd_epi32(lo0, v0, b0);
                    hi0 = _mm512_dpbusd_epi32(hi0, _mm512_and_si512(v0, high4), b0);
                    lo1 = _mm512_dpbusd_epi32(lo1, v1, b1);
                    hi1 = _mm512_dpbusd_epi32(hi1, _mm512_and_si512(v1, high4), b1);
                } else {  // rows 0..15, then 16..31
                    const unsigned char* g0 = q + g * 128;
                    lo0 = _mm512_dpbusd_epi32(lo0, _mm512_xor_si512(_mm512_loadu_si512(g0), top_bit), b0);
                    hi0 = _mm512_dpbusd_epi32(hi0, _mm512_xor_si512(_mm512_loadu_si512(g0 + 64), top_bit), b0);
                    lo1 = _mm512_dpbusd_epi32(lo1, _mm512_xor_si512(_mm512_loadu_si512(g0 + 128), top_bit), b1);
                    hi1 = _mm512_dpbusd_epi32(hi1, _mm512_xor_si512(_mm512_loadu_si512(g0 + 192), top_bit), b1);
                }
            }
            __m512i int_lo = _mm512_add_epi32(lo0, lo1), int_hi = _mm512_add_epi32(hi0, hi1);
            if (q4) separate_nibble_sums(int_lo, int_hi);
            const __m512i correction = _mm512_set1_epi32(offset * x.sums[b]);
            const __m512 sum_lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(int_lo, correction));
            const __m512 sum_hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(int_hi, correction));
            const __m512 dx = _mm512_set1_ps(x.scales[b]);
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            lo = _mm512_fmadd_ps(sum_lo, _mm512_mul_ps(widen_fp16(scales), dx), lo);
            hi = _mm512_fmadd_ps(sum_hi, _mm512_mul_ps(widen_fp16(scales + 16), dx), hi);
        }
        store_rows(y + p * kPanel, row_masks(w.rows - p * kPanel), lo, hi, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Prefill: Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for tokens t < n and the rows of panels [p0, p1).
//
// Register tile: M tokens × 32 rows = 2M accumulators (24 of the 32 zmm registers for M = 12).
// Per input k: 2 loads of weights, M broadcasts of x, 2M FMAs. Each weight loaded is used by
// 12 tokens from a register, so the FMA unit, not memory, sets the pace: 24 FMAs vs 2 vector
// loads + 12 scalar broadcasts per k (the core issues 3 loads per cycle).
// M is a template parameter so that the accumulator arrays are fully unrolled into registers.
// x is the tile's slice of the packed tokens (token_tiles.hpp), [kc][M]: the M values
// broadcast for one k are adjacent.
//
// `next`, `next_bytes`: the weights the following chunk will read; this tile asks for them to be
// brought into L2 (two cache lines per k) while it computes, so the next chunk's first tile finds
// them there instead of waiting for memory. Without it a batch of a few rows alternates between
// waiting for memory (its first tile) and computing (the others), and the two costs add up.
template <int M>
GLASS_AVX512 inline void matmul_tile(const float* x, const float* chunk, int kc, float* y, long ldy,
                                     RowMasks masks, bool accumulate, const char* next = nullptr,
                                     long next_bytes = 0) {
    __m512 lo[M], hi[M];
#pragma GCC unroll 12
    for (int t = 0; t < M; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
    for (int k = 0; k < kc; ++k) {
        if (long{k} * 128 < next_bytes) {
            _mm_prefetch(next + long{k} * 128, _MM_HINT_T1);
            _mm_prefetch(next + long{k} * 128 + 64, _MM_HINT_T1);
        }
        const __m512 w_lo = _mm512_load_ps(chunk + k * 32);
        const __m512 w_hi = _mm512_load_ps(chunk + k * 32 + 16);
#pragma GCC unroll 12
        for (int t = 0; t < M; ++t) {
            const __m512 xt = _mm512_set1_ps(x[k * M + t]);
            lo[t] = _mm512_fmadd_ps(xt, w_lo, lo[t]);
            hi[t] = _mm512_fmadd_ps(xt, w_hi, hi[t]);
        }
    }
#pragma GCC unroll 12
    for (int t = 0; t < M; ++t) store_rows(y + t * ldy, masks, lo[t], hi[t], accumulate);
}

// One or two tokens over P ≤ 4 fp32 panels at once (2·M·P accumulators, P streams of weights).
// Each y is still one chain of FMAs over k, so the bits are those of matmul_tile<M>. That tile
// has only 2M chains (a panel's 32 rows in two registers per token), each waiting an FMA's
// latency per input: the serving engine's batches of one and two computed at a quarter and a
// half of the FMA rate, and caught up slowly after a load that missed. Zen 5 VM, 2 threads, 64
// fp32 matrices of 2048 × 768 streamed, items of 3 and of 8 panels, two rounds alternated:
// 1 token 46-51 → 62-65 GB/s, 2 tokens 47-49 → 58-62.
template <int M, int P>
GLASS_AVX512 inline void matmul_tile_panels(const float* x, const float* const* chunks, int kc, float* y, long ldy,
                                            const RowMasks* masks, bool accumulate) {
    __m512 lo[M][P], hi[M][P];
#pragma GCC unroll 2
    for (int t = 0; t < M; ++t)
#pragma GCC unroll 4
        for (int q = 0; q < P; ++q) lo[t][q] = hi[t][q] = _mm512_setzero_ps();
    for (int k = 0; k < kc; ++k) {
#pragma GCC unroll 4
        for (int q = 0; q < P; ++q) {
            const __m512 w_lo = _mm512_load_ps(chunks[q] + k * 32), w_hi = _mm512_load_ps(chunks[q] + k * 32 + 16);
#pragma GCC unroll 2
            for (int t = 0; t < M; ++t) {
                const __m512 xt = _mm512_set1_ps(x[k * M + t]);
                lo[t][q] = _mm512_fmadd_ps(xt, w_lo, lo[t][q]);
                hi[t][q] = _mm512_fmadd_ps(xt, w_hi, hi[t][q]);
            }
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < M; ++t)
#pragma GCC unroll 4
        for (int q = 0; q < P; ++q) store_rows(y + t * ldy + q * kPanel, masks[q], lo[t][q], hi[t][q], accumulate);
}

// M ≤ 2 tokens (packed [cols][M]) over fp32 panels [p0, p1): four panels per pass (the last
// pass the 1-3 left), chunk by chunk as matmul_with does, so each y is added to per chunk in
// the same order.
template <int M>
GLASS_AVX512 inline void matmul_few_tokens(const PackedMatrix& w, const float* xp, float* y, long ldy, int p0, int p1,
                                           bool accumulate) {
    for (int P; p0 < p1; p0 += P) {
        P = std::min(4, p1 - p0);
        const float* chunks[4];
        RowMasks masks[4];
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            for (int q = 0; q < P; ++q) {
                chunks[q] = reinterpret_cast<const float*>(w.panel(p0 + q)) + std::int64_t{k0} * 32;
                masks[q] = row_masks(w.rows - (p0 + q) * kPanel);
            }
            const bool add = accumulate || k0 > 0;
            const float* xk = xp + std::int64_t{k0} * M;
            float* yp = y + p0 * kPanel;
            switch (P) {
                case 4: matmul_tile_panels<M, 4>(xk, chunks, kc, yp, ldy, masks, add); break;
                case 3: matmul_tile_panels<M, 3>(xk, chunks, kc, yp, ldy, masks, add); break;
                case 2: matmul_tile_panels<M, 2>(xk, chunks, kc, yp, ldy, masks, add); break;
                default: matmul_tile_panels<M, 1>(xk, chunks, kc, yp, ldy, masks, add); break;
            }
        }
    }
}

// Widens inputs [k0, k0+kc) of panel p into fp32 `chunk` [kc][32] (64-byte aligned): for fp16,
// bf16 and Q8_0 this is done once per chunk and then reused by every token of the prompt.
GLASS_AVX512 inline void unpack_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    const unsigned char* panel = w.panel(p);
    if (is_quantized(w.type)) {  // k0: a multiple of 32 (kChunk is)
        const bool q4 = w.type == WeightType::q4_0;
        const std::int64_t block_bytes = q4 ? kQ4BlockBytes : kQ8BlockBytes;
        // Whole groups of 4 inputs: a chunk that ends inside one (kc not a multiple of 4) gets
        // its padding inputs too (q = 0), which kChunk, a multiple of 4, leaves room for.
        for (int k = 0; k < kc; k += 4) {
            const unsigned char* block = panel + (k0 + k) / kQuantBlock * block_bytes;
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            const __m512 d_lo = widen_fp16(scales), d_hi = widen_fp16(scales + 16);
            __m512 wq[8];
            widen_group(q4, block, (k0 + k) % kQuantBlock / 4, wq);
            for (int t = 0; t < 4; ++t) {
                _mm512_store_ps(chunk + (k + t) * 32, _mm512_mul_ps(wq[t], d_lo));
                _mm512_store_ps(chunk + (k + t) * 32 + 16, _mm512_mul_ps(wq[4 + t], d_hi));
            }
        }
        return;
    }
    const auto* ph = reinterpret_cast<const std::uint16_t*>(panel) + std::int64_t{k0} * 32;
    const bool is_fp16 = w.type == WeightType::fp16;
    for (int i = 0; i < kc * 32; i += 16)
        _mm512_store_ps(chunk + i, is_fp16 ? widen_fp16(ph + i) : widen_bf16(ph + i));
}

// xp: the n tokens packed by pack_tokens (token_tiles.hpp) with cols = w.cols.
// `scratch` holds kChunk × 32 floats, 64-byte aligned (one per thread). `unpack(w, p, k0, kc,
// chunk)` widens a chunk of a panel that is not fp32 (unpack_chunk; the k-quants' in
// kernels_avx512_kquants.hpp).
template <class Unpack>
GLASS_AVX512 inline void matmul_with(Unpack unpack, const PackedMatrix& w, const float* xp, int n, float* y, long ldy,
                                     int p0, int p1, bool accumulate, float* scratch) {
    if (w.type == WeightType::fp32 && n <= 2)  // one or two tokens: several panels per pass
        return n == 1 ? matmul_few_tokens<1>(w, xp, y, ldy, p0, p1, accumulate)
                      : matmul_few_tokens<2>(w, xp, y, ldy, p0, p1, accumulate);
    for (int p = p0; p < p1; ++p) {
        const RowMasks masks = row_masks(w.rows - p * kPanel);
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunk = scratch;
            if (w.type == WeightType::fp32)  // already fp32 (and 64-byte aligned): use it in place
                chunk = reinterpret_cast<const float*>(w.panel(p)) + std::int64_t{k0} * 32;
            else
                unpack(w, p, k0, kc, scratch);
            // After the first chunk, add to what the earlier chunks left in y.
            const bool add = accumulate || k0 > 0;
            // The next chunk's weights, fetched into L2 by the first tile.
            const NextChunk next = next_chunk(w, p, p1, k0, kc, kChunk);
            for (int i = 0; i < token_tiles(n); ++i) {
                const TokenTile tile = token_tile(n, i);
                const float* xt = xp + std::int64_t{tile.t0} * w.cols + std::int64_t{k0} * (tile.t1 - tile.t0);
                float* yt = y + tile.t0 * ldy + p * kPanel;
                // Only a tile of 4 or more rows has the compute to hide the fetch behind; for
                // one row (decode alone) the extra instructions only compete with its loads.
                const bool fetch_next = i == 0 && tile.t1 - tile.t0 >= 4;
                const char* pf = fetch_next ? next.at : nullptr;
                const long pb = fetch_next ? next.bytes : 0;
                switch (tile.t1 - tile.t0) {
                    case 12: matmul_tile<12>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 11: matmul_tile<11>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 10: matmul_tile<10>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 9: matmul_tile<9>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 8: matmul_tile<8>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 7: matmul_tile<7>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 6: matmul_tile<6>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 5: matmul_tile<5>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 4: matmul_tile<4>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 3: matmul_tile<3>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    case 2: matmul_tile<2>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                    default: matmul_tile<1>(xt, chunk, kc, yt, ldy, masks, add, pf, pb); break;
                }
            }
        }
    }
}
GLASS_AVX512 inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                                bool accumulate, float* scratch) {
    matmul_with(unpack_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::avx512

#pragma GCC diagnostic pop

#endif  // __x86_64__
