/// \file
/// \brief glass/fast/kernels_avx512.hpp — the inner loops, written for AVX-512 (16 fp32 lanes).
/// ```text
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

#include "glass/fast/packed_weights.hpp"
#include "glass/fast/token_tiles.hpp"

// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define GLASS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

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
GLASS_AVX512 inline __m512 widen_int8(const unsigned char* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
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
        } else {  // Q8_0: sum x·q over a block in fp32, then multiply by the block's 32 scales.
            for (int b = 0; b < w.q8_blocks(); ++b) {
                const unsigned char* block = panel + std::int64_t{b} * kQ8BlockBytes;
                const unsigned char* q = block + kPanel * 2;
                const int k0 = b * kQ8Block, n = std::min(kQ8Block, cols - k0);
                __m512 b_lo0 = _mm512_setzero_ps(), b_hi0 = b_lo0, b_lo1 = b_lo0, b_hi1 = b_lo0;
                int kk = 0;
                for (; kk + 2 <= n; kk += 2) {
                    const __m512 x0 = _mm512_set1_ps(x[k0 + kk]), x1 = _mm512_set1_ps(x[k0 + kk + 1]);
                    b_lo0 = _mm512_fmadd_ps(x0, widen_int8(q + kk * 32), b_lo0);
                    b_hi0 = _mm512_fmadd_ps(x0, widen_int8(q + kk * 32 + 16), b_hi0);
                    b_lo1 = _mm512_fmadd_ps(x1, widen_int8(q + kk * 32 + 32), b_lo1);
                    b_hi1 = _mm512_fmadd_ps(x1, widen_int8(q + kk * 32 + 48), b_hi1);
                }
                if (kk < n) {
                    const __m512 x0 = _mm512_set1_ps(x[k0 + kk]);
                    b_lo0 = _mm512_fmadd_ps(x0, widen_int8(q + kk * 32), b_lo0);
                    b_hi0 = _mm512_fmadd_ps(x0, widen_int8(q + kk * 32 + 16), b_hi0);
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

// Widens inputs [k0, k0+kc) of panel p into fp32 `chunk` [kc][32] (64-byte aligned): for fp16,
// bf16 and Q8_0 this is done once per chunk and then reused by every token of the prompt.
GLASS_AVX512 inline void unpack_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    const unsigned char* panel = w.panel(p);
    if (w.type == WeightType::q8_0) {  // k0 is a multiple of the block size (kChunk is)
        for (int k = 0; k < kc; ++k) {
            const unsigned char* block = panel + std::int64_t{(k0 + k) / kQ8Block} * kQ8BlockBytes;
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            const unsigned char* q = block + kPanel * 2 + ((k0 + k) % kQ8Block) * kPanel;
            _mm512_store_ps(chunk + k * 32, _mm512_mul_ps(widen_int8(q), widen_fp16(scales)));
            _mm512_store_ps(chunk + k * 32 + 16, _mm512_mul_ps(widen_int8(q + 16), widen_fp16(scales + 16)));
        }
        return;
    }
    const auto* ph = reinterpret_cast<const std::uint16_t*>(panel) + std::int64_t{k0} * 32;
    const bool is_fp16 = w.type == WeightType::fp16;
    for (int i = 0; i < kc * 32; i += 16)
        _mm512_store_ps(chunk + i, is_fp16 ? widen_fp16(ph + i) : widen_bf16(ph + i));
}

// xp: the n tokens packed by pack_tokens (token_tiles.hpp) with cols = w.cols.
// `scratch` holds kChunk × 32 floats, 64-byte aligned (one per thread).
GLASS_AVX512 inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy,
                                int p0, int p1, bool accumulate, float* scratch) {
    for (int p = p0; p < p1; ++p) {
        const RowMasks masks = row_masks(w.rows - p * kPanel);
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunk = scratch;
            if (w.type == WeightType::fp32)  // already fp32 (and 64-byte aligned): use it in place
                chunk = reinterpret_cast<const float*>(w.panel(p)) + std::int64_t{k0} * 32;
            else
                unpack_chunk(w, p, k0, kc, scratch);
            // After the first chunk, add to what the earlier chunks left in y.
            const bool add = accumulate || k0 > 0;
            // The next chunk's weights (this panel's next inputs, or the next panel's first),
            // fetched into L2 by the first tile (fp32 only: the others are unpacked first).
            const char* next = nullptr;
            long next_bytes = 0;
            if (w.type == WeightType::fp32 && (k0 + kc < w.cols || p + 1 < p1)) {
                const int np = k0 + kc < w.cols ? p : p + 1, nk = k0 + kc < w.cols ? k0 + kc : 0;
                next = reinterpret_cast<const char*>(w.panel(np)) + std::int64_t{nk} * 32 * 4;
                next_bytes = long{std::min(kChunk, w.cols - nk)} * 32 * 4;
            }
            for (int i = 0; i < token_tiles(n); ++i) {
                const TokenTile tile = token_tile(n, i);
                const float* xt = xp + std::int64_t{tile.t0} * w.cols + std::int64_t{k0} * (tile.t1 - tile.t0);
                float* yt = y + tile.t0 * ldy + p * kPanel;
                // Only a tile of 4 or more rows has the compute to hide the fetch behind; for
                // one row (decode alone) the extra instructions only compete with its loads.
                const bool fetch_next = i == 0 && tile.t1 - tile.t0 >= 4;
                const char* pf = fetch_next ? next : nullptr;
                const long pb = fetch_next ? next_bytes : 0;
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

// ---------------------------------------------------------------------------------------------
// Attention and MLP helpers.

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

// softmax over x[0..n) in place (all entries finite: the caller passes visible keys only).
GLASS_AVX512 inline void softmax(float* x, int n) {
    __m512 mx = _mm512_set1_ps(-3.0e38f);
    for (int i = 0; i < n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, row_masks(n - i).lo, x + i));
    const __m512 max_value = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = row_masks(n - i).lo;
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), max_value));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
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

}  // namespace glass::fast::avx512

#pragma GCC diagnostic pop

#endif  // __x86_64__
