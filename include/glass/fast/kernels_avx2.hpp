/// \file
/// \brief glass/fast/kernels_avx2.hpp — the matrix products' inner loops for AVX2 + FMA (8 fp32
/// lanes), the CPUs most people own: Intel since Haswell (2013, every Core i3/i5/i7/i9 to this
/// day), AMD since Zen 1 (2017).
/// ```text
/// Same meaning as kernels_portable.hpp, same panel layout as the AVX-512 set (packed_weights.hpp):
/// a 32-row panel is four 8-lane registers instead of two 16-lane ones, so nothing is repacked.
/// What changes is the register budget: 16 ymm registers instead of 32 zmm, and that shapes
/// prefill's register tile (below). Everything else is the AVX-512 loop at half the width.
///
/// Numbers that guide the design (AMD Zen 3, one core): two 256-bit FMA pipes = 2 × 8 lanes ×
/// 2 FLOPs = 32 FLOP/cycle ≈ 110 GFLOP/s at 3.4 GHz; FMA latency 4 cycles, so ≥ 8 independent
/// accumulators; three loads per cycle, two of them 256-bit; a 32 KiB L1 data cache (Zen 4/5:
/// 48 KiB), which sets the prefill chunk at 128 inputs (16 KiB) instead of the AVX-512 set's 256.
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

#define GLASS_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace glass::fast::avx2 {

constexpr int kChunk = 128;  // prefill: inputs per panel chunk. 32 rows × 128 × 4 B = 16 KiB,
                             // half of a 32 KiB L1, the other half for the tokens and outputs.
// How far ahead (bytes) the first pass over an fp32 chunk prefetches the panel when more passes
// follow (more than 3 tokens). Those passes read the chunk from L1, so no load of the panel is
// in flight meanwhile and the hardware prefetcher, following a stream that keeps pausing, runs
// behind. Zen 5 VM, AVX2 set, 2 threads, 64 fp32 matrices of 2048 × 768 streamed, three rounds
// alternated: 4 tokens 40.3-40.6 → 42.0-44.4 GB/s, 8 tokens 27.3-27.5 → 31.0-31.8, 16 tokens
// 17.1-17.2 → 17.4-18.0. 1 KiB ahead helped less, 8-16 KiB no more; with 1-3 tokens (one pass)
// it cost 2-5 %, so those do not prefetch. A prefetch changes no number.
constexpr int kPanelPrefetchAhead = 4096;

// Lanes [0, n) of 8 on (all bits set), the rest off: the mask form AVX2's maskload/maskstore take.
GLASS_AVX2 inline __m256i lanes_below(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y[0..valid) (+)= v, valid ≤ 8 (the last panel may be partly padding).
GLASS_AVX2 inline void store8(float* y, int valid, __m256 v, bool accumulate) {
    if (valid >= 8) {
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
    } else if (valid > 0) {
        const __m256i m = lanes_below(valid);
        if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(y, m));
        _mm256_maskstore_ps(y, m, v);
    }
}
// The 32 rows of a panel: four registers, rows 8q .. 8q+7 in acc[q].
GLASS_AVX2 inline void store_panel(float* y, int valid, const __m256 acc[4], bool accumulate) {
    for (int q = 0; q < 4; ++q) store8(y + 8 * q, valid - 8 * q, acc[q], accumulate);
}

// 8 packed weights -> 8 fp32 lanes.
GLASS_AVX2 inline __m256 widen_fp16(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
GLASS_AVX2 inline __m256 widen_bf16(const std::uint16_t* p) {
    // bf16 is the top half of an fp32: zero-extend to 32 bits and shift left by 16.
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// A group of 4 inputs for 8 rows as signed bytes, [8 rows][4 inputs] (one 32-bit lane per row).
// Q8_0 stores exactly that (q8_offset). Q4_0 stores [16 rows][4 inputs] of bytes holding row i in
// the low 4 bits and row i + 16 in the high 4 (as q + 8, q4_offset): one 32-byte load is rows
// 8h .. 8h+7 (low nibbles) and 8h+16 .. 8h+23 (high nibbles); a byte shuffle (vpshufb) through
// the table −8 .. 7 turns each nibble into its signed integer.
GLASS_AVX2 inline __m256i q4_low_rows(__m256i v) {
    const __m256i table = _mm256_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7,
                                           -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(v, _mm256_set1_epi8(0x0F)));
}
GLASS_AVX2 inline __m256i q4_high_rows(__m256i v) { return q4_low_rows(_mm256_srli_epi16(v, 4)); }

// The signed bytes of group g for rows 8q .. 8q+7 (q < 4) of a Q8_0 or Q4_0 block.
GLASS_AVX2 inline __m256i group_bytes(bool q4, const unsigned char* block, int g, int q) {
    const unsigned char* ints = block + kPanel * 2;
    if (!q4) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 128 + q * 32));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 64 + (q % 2) * 32));
    return q < 2 ? q4_low_rows(v) : q4_high_rows(v);
}

// Input t (< 4) of each row's 4 bytes as fp32: shift byte t to the top of the lane, then back
// down with its sign. (Shift counts are immediates: each input is written out.)
GLASS_AVX2 inline void widen_bytes(__m256i v, __m256 w[4]) {
    w[0] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24));
    w[1] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 16), 24));
    w[2] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 8), 24));
    w[3] = _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
}

// ---------------------------------------------------------------------------------------------
// Decode: y[r] (+)= Σ_k W(r,k) · x[k] for the rows of panels [p0, p1).
// Per input k: broadcast x[k], load the panel's 32 weights (4 registers), 4 FMAs. Two k's in
// flight give 8 independent accumulators (2 pipes × 4-cycle latency).
// fp32, fp16 and bf16 panels: `row8(k, q)` gives input k's weights for rows 8q .. 8q+7 in fp32.
template <typename Row8>
GLASS_AVX2 inline void matvec_widened(Row8 row8, int cols, const float* x, __m256 acc[4]) {
    __m256 odd[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int k = 0;
    for (; k + 2 <= cols; k += 2) {
        const __m256 x0 = _mm256_set1_ps(x[k]), x1 = _mm256_set1_ps(x[k + 1]);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            acc[q] = _mm256_fmadd_ps(x0, row8(k, q), acc[q]);
            odd[q] = _mm256_fmadd_ps(x1, row8(k + 1, q), odd[q]);
        }
    }
    if (k < cols) {
        const __m256 x0 = _mm256_set1_ps(x[k]);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) acc[q] = _mm256_fmadd_ps(x0, row8(k, q), acc[q]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) acc[q] = _mm256_add_ps(acc[q], odd[q]);
}

// Q8_0 / Q4_0 with fp32 x: per block, Σ x·q for each 8-row quarter in fp32 (the group's 4
// inputs widened from bytes), then one multiply-add by the quarter's 8 scales. A row that ends
// inside a group meets x = 0 on its padding inputs, and x past the end is not read.
GLASS_AVX2 inline void matvec_quantized(const unsigned char* panel, bool q4, int cols, const float* x, __m256 acc[4]) {
    const std::int64_t block_bytes = q4 ? kQ4BlockBytes : kQ8BlockBytes;
    const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
    for (int b = 0; b < blocks; ++b) {
        const unsigned char* block = panel + b * block_bytes;
        const int k0 = b * kQuantBlock, n = std::min(kQuantBlock, cols - k0);
        __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int g = 0; 4 * g < n; ++g) {  // groups of 4 inputs
            const float* xg = x + k0 + 4 * g;
            const int left = n - 4 * g;
            const __m256 x0 = _mm256_set1_ps(xg[0]), x1 = _mm256_set1_ps(left > 1 ? xg[1] : 0.0f);
            const __m256 x2 = _mm256_set1_ps(left > 2 ? xg[2] : 0.0f), x3 = _mm256_set1_ps(left > 3 ? xg[3] : 0.0f);
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) {
                __m256 w[4];
                widen_bytes(group_bytes(q4, block, g, q), w);
                // two chains per quarter: inputs 0, 2 and 1, 3 meet in the final add
                const __m256 a = _mm256_fmadd_ps(x0, w[0], _mm256_mul_ps(x1, w[1]));
                sum[q] = _mm256_add_ps(sum[q], _mm256_fmadd_ps(x2, w[2], _mm256_fmadd_ps(x3, w[3], a)));
            }
        }
        const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) acc[q] = _mm256_fmadd_ps(sum[q], widen_fp16(scales + 8 * q), acc[q]);
    }
}

GLASS_AVX2 inline void matvec(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    for (int p = p0; p < p1; ++p) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        const unsigned char* panel = w.panel(p);
        const auto* pw = reinterpret_cast<const float*>(panel);
        const auto* ph = reinterpret_cast<const std::uint16_t*>(panel);
        if (w.type == WeightType::fp32)
            matvec_widened([pw](int k, int q) GLASS_AVX2 { return _mm256_loadu_ps(pw + k * 32 + 8 * q); }, w.cols, x, acc);
        else if (w.type == WeightType::fp16)
            matvec_widened([ph](int k, int q) GLASS_AVX2 { return widen_fp16(ph + k * 32 + 8 * q); }, w.cols, x, acc);
        else if (w.type == WeightType::bf16)
            matvec_widened([ph](int k, int q) GLASS_AVX2 { return widen_bf16(ph + k * 32 + 8 * q); }, w.cols, x, acc);
        else
            matvec_quantized(panel, w.type == WeightType::q4_0, w.cols, x, acc);
        store_panel(y + p * kPanel, w.rows - p * kPanel, acc, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Decode with int8 activations: y[r] (+)= Σ_b d_{r,b} · dx_b · Σ_{k in b} q_{r,k} · qx_k for the
// rows of Q8_0 / Q4_0 panels [p0, p1), x given as int8 blocks (Int8Vector).
//
// A group's bytes [8 rows][4 inputs] against the group's 4 qx broadcast to every 32-bit lane:
// each lane needs Σ_t q_t · qx_t. Two ways, both exact in int32:
//   AVX-VNNI   vpdpbusd adds the 4 products of unsigned × signed bytes into the lane in one
//              instruction; the weights become unsigned by an offset (Q4_0 stores q + 8; Q8_0
//              gets q + 128 by flipping the top bit), and offset · Σ qx (x.sums) comes off after.
//   AVX2       vpmaddubsw multiplies unsigned × signed bytes and adds pairs into 16 bits, with
//              saturation: (q + 128) · qx would overflow, so Q8_0 multiplies |q| by qx with q's
//              sign (vpsignb; 2 · 127 · 127 < 2^15), and Q4_0 keeps q + 8 (2 · 15 · 127 < 2^15);
//              vpmaddwd against ones adds the two pairs into the lane.
//
// AVX-VNNI is its own CPU feature (Intel since Alder Lake, AMD since Zen 5; cpu_has_avx_vnni).
// Its one instruction is written as inline assembly ({vex}: the VEX-encoded form, "%{" in GCC's template) rather than through a
// target("avxvnni") function, so both variants share one body compiled for plain AVX2 and the
// compiler cannot place a VNNI instruction anywhere else in the AVX2 variant.
GLASS_AVX2 inline __m256i dpbusd_vex(__m256i acc, __m256i unsigned_bytes, __m256i signed_bytes) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(unsigned_bytes), "x"(signed_bytes));
    return acc;
}

// acc + each lane's Σ_t q_t · qx_t.
template <bool kVnni>
GLASS_AVX2 inline __m256i add_group_dot(__m256i acc, bool q4, __m256i q_bytes, __m256i xg) {
    if constexpr (kVnni) {
        return dpbusd_vex(acc, q_bytes, xg);
    } else {
        const __m256i ones = _mm256_set1_epi16(1);
        const __m256i pairs = q4 ? _mm256_maddubs_epi16(q_bytes, xg)
                                 : _mm256_maddubs_epi16(_mm256_abs_epi8(q_bytes), _mm256_sign_epi8(xg, q_bytes));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
    }
}

// The group's bytes for the integer product: Q4_0 unsigned (q + 8: the nibble itself); Q8_0
// unsigned (q + 128) for VNNI, signed q for vpmaddubsw (which takes its sign apart itself).
template <bool kVnni>
GLASS_AVX2 inline __m256i int8_group_bytes(bool q4, const unsigned char* block, int g, int q) {
    const unsigned char* ints = block + kPanel * 2;
    if (q4) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 64 + (q % 2) * 32));
        return _mm256_and_si256(q < 2 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    }
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 128 + q * 32));
    return kVnni ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
}

template <bool kVnni>
GLASS_AVX2 inline void matvec_int8_impl(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                             bool accumulate) {
    const bool q4 = w.type == WeightType::q4_0;
    // the offset that came with unsigned weights: Q4_0 always, Q8_0 only in the VNNI form
    const int offset = q4 ? 8 : kVnni ? 128 : 0;
    for (int p = p0; p < p1; ++p) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        const unsigned char* panel = w.panel(p);
        for (int b = 0; b < w.q8_blocks(); ++b) {
            const unsigned char* block = panel + std::int64_t{b} * w.block_bytes();
            const std::int8_t* xb = x.q + b * kQuantBlock;
            __m256i isum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                               _mm256_setzero_si256()};
            for (int g = 0; g < kQuantBlock / 4; ++g) {
                std::int32_t x4;  // qx of inputs 4g .. 4g+3
                std::memcpy(&x4, xb + 4 * g, 4);
                const __m256i xg = _mm256_set1_epi32(x4);
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q)
                    isum[q] = add_group_dot<kVnni>(isum[q], q4, int8_group_bytes<kVnni>(q4, block, g, q), xg);
            }
            const __m256i correction = _mm256_set1_epi32(offset * x.sums[b]);
            const __m256 dx = _mm256_set1_ps(x.scales[b]);
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) {
                const __m256 s = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[q], correction));
                acc[q] = _mm256_fmadd_ps(s, _mm256_mul_ps(widen_fp16(scales + 8 * q), dx), acc[q]);
            }
        }
        store_panel(y + p * kPanel, w.rows - p * kPanel, acc, accumulate);
    }
}

// Two entry points of the table's type: one for CPUs with AVX-VNNI, one for plain AVX2.
GLASS_AVX2 inline void matvec_int8_vnni(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                        bool accumulate) {
    matvec_int8_impl<true>(w, x, y, p0, p1, accumulate);
}
GLASS_AVX2 inline void matvec_int8(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1, bool accumulate) {
    matvec_int8_impl<false>(w, x, y, p0, p1, accumulate);
}

// ---------------------------------------------------------------------------------------------
// Prefill: Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for tokens t < n and the rows of panels [p0, p1).
//
// Register tile: 3 tokens × the panel's 32 rows = 12 accumulators, + 3 broadcasts of x + 1
// weight register = all 16 ymm registers. Per input k: 4 loads of weights, 3 broadcasts, 12
// FMAs, so each loaded weight is used 3 times from a register. (The AVX-512 set's 12 × 32 tile
// would need 48 registers here.) A packed token tile (≤ 12 tokens, [kc][m]) is run three tokens
// at a time over the same chunk, which stays in L1 after the first pass.
//
// Why whole panels: each k's 128 bytes of weights are two cache lines, and a pass that reads all
// of them streams from memory at full rate. The set first cut the panel into two 16-row halves
// (6 tokens × 16 rows: 12 accumulators too); each pass then read every other 64-byte line, and
// the weights streamed at about half the rate. Zen 5, AVX2 set, 2 threads, 2048 × 768 fp32
// matrices streamed from memory: 8 tokens 22 → 29 GB/s, 16 tokens 15 → 19 GB/s (121 → 151
// GFLOP/s); in L2, 12 tokens reach ~95 % of the FMA probe. Each y is the same chain of FMAs over
// k either way, so the numbers are the same bits.

// A pass that streams its chunk from memory can also prefetch the panel `ahead` (nullptr: not):
// the two lines of input k there, at each k.
GLASS_AVX2 inline void prefetch_input(const char* ahead, int k) {
    if (!ahead) return;
    _mm_prefetch(ahead + k * 128, _MM_HINT_T0);
    _mm_prefetch(ahead + k * 128 + 64, _MM_HINT_T0);
}

// One or two tokens × 32 rows (4M accumulators).
template <int M>
GLASS_AVX2 inline void matmul_tile_panel(const float* x, int m, const float* chunk, int kc, float* y, long ldy,
                                         int valid, bool accumulate, const char* ahead = nullptr) {
    __m256 acc[M][4];
#pragma GCC unroll 2
    for (int t = 0; t < M; ++t)
        for (int q = 0; q < 4; ++q) acc[t][q] = _mm256_setzero_ps();
    for (int k = 0; k < kc; ++k) {
        __m256 xk[M];
#pragma GCC unroll 2
        for (int t = 0; t < M; ++t) xk[t] = _mm256_broadcast_ss(x + k * m + t);
        prefetch_input(ahead, k);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            const __m256 wq = _mm256_load_ps(chunk + k * 32 + 8 * q);
#pragma GCC unroll 2
            for (int t = 0; t < M; ++t) acc[t][q] = _mm256_fmadd_ps(xk[t], wq, acc[t][q]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < M; ++t) store_panel(y + t * ldy, valid, acc[t], accumulate);
}

// Three tokens × 32 rows, the tile that fills the register file. Named variables rather than
// the template's array: with 12 accumulators in an array, GCC 12 keeps them in registers but
// also stores all 12 to the stack on every k, which halves the speed.
GLASS_AVX2 inline void matmul_tile_panel3(const float* x, int m, const float* chunk, int kc, float* y, long ldy,
                                          int valid, bool accumulate, const char* ahead = nullptr) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // token 0: rows 0-7, 8-15, 16-23, 24-31
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // token 1
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                   // token 2
    for (int k = 0; k < kc; ++k) {
        const float* wk = chunk + k * 32;  // [32] rows of input k
        prefetch_input(ahead, k);
        const __m256 xa = _mm256_broadcast_ss(x + k * m), xb = _mm256_broadcast_ss(x + k * m + 1),
                     xc = _mm256_broadcast_ss(x + k * m + 2);
        __m256 w = _mm256_load_ps(wk);
        a0 = _mm256_fmadd_ps(xa, w, a0), b0 = _mm256_fmadd_ps(xb, w, b0), c0 = _mm256_fmadd_ps(xc, w, c0);
        w = _mm256_load_ps(wk + 8);
        a1 = _mm256_fmadd_ps(xa, w, a1), b1 = _mm256_fmadd_ps(xb, w, b1), c1 = _mm256_fmadd_ps(xc, w, c1);
        w = _mm256_load_ps(wk + 16);
        a2 = _mm256_fmadd_ps(xa, w, a2), b2 = _mm256_fmadd_ps(xb, w, b2), c2 = _mm256_fmadd_ps(xc, w, c2);
        w = _mm256_load_ps(wk + 24);
        a3 = _mm256_fmadd_ps(xa, w, a3), b3 = _mm256_fmadd_ps(xb, w, b3), c3 = _mm256_fmadd_ps(xc, w, c3);
    }
    const __m256 token0[4] = {a0, a1, a2, a3}, token1[4] = {b0, b1, b2, b3}, token2[4] = {c0, c1, c2, c3};
    store_panel(y, valid, token0, accumulate);
    store_panel(y + ldy, valid, token1, accumulate);
    store_panel(y + 2 * ldy, valid, token2, accumulate);
}

// One token over two fp32 panels at once (64 rows, 8 accumulators). Each y is still one chain of
// FMAs over k, so the bits are those of matmul_tile_panel<1>. That tile has only 4 chains, each
// waiting an FMA's latency (4 cycles) per input: it computes at half the FMA rate, and after a
// load that misses it catches up at that rate. Two panels give 8 chains, two streams of weights.
// Zen 5 VM, AVX2 set, 2 threads, 64 fp32 matrices of 2048 × 768 streamed, three rounds
// alternated: 50.0-54.7 → 59.8-61.8 GB/s (read probe 64-77 GB/s those minutes).
GLASS_AVX2 inline void matmul_one_token_two_panels(const float* x, const float* chunk_a, const float* chunk_b, int kc,
                                                   float* y_a, float* y_b, int valid_a, int valid_b, bool accumulate) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // panel a: rows 0-7, 8-15, 16-23, 24-31
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // panel b
    for (int k = 0; k < kc; ++k) {
        const __m256 xk = _mm256_broadcast_ss(x + k);
        const float* wa = chunk_a + k * 32;
        const float* wb = chunk_b + k * 32;
        a0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa), a0), b0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb), b0);
        a1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 8), a1), b1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 8), b1);
        a2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 16), a2), b2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 16), b2);
        a3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 24), a3), b3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 24), b3);
    }
    const __m256 panel_a[4] = {a0, a1, a2, a3}, panel_b[4] = {b0, b1, b2, b3};
    store_panel(y_a, valid_a, panel_a, accumulate);
    store_panel(y_b, valid_b, panel_b, accumulate);
}

// One token over three fp32 panels (96 rows: 12 accumulators and the broadcast x; the FMAs read
// the weights straight from memory), for work items of 3 panels or more (the fast model's items
// for stories110M's 768 × 768 matrices are 3 panels: two + one left 4 chains for the third).
// Named variables, as in matmul_tile_panel3. The microbenchmark above, items of 3 panels, three
// rounds alternated: 39.1-41.4 → 44.2-44.5 GB/s (a slow minute).
GLASS_AVX2 inline void matmul_one_token_three_panels(const float* x, const float* const chunks[3], int kc, float* y,
                                                     int valid, bool accumulate) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // panel 0: rows 0-7, 8-15, 16-23, 24-31
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                   // panel 1
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                   // panel 2
    const float *wa = chunks[0], *wb = chunks[1], *wc = chunks[2];
    for (int k = 0; k < kc; ++k, wa += 32, wb += 32, wc += 32) {
        const __m256 xk = _mm256_broadcast_ss(x + k);
        a0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa), a0), b0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb), b0);
        c0 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc), c0), a1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 8), a1);
        b1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 8), b1), c1 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 8), c1);
        a2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 16), a2), b2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 16), b2);
        c2 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 16), c2), a3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wa + 24), a3);
        b3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wb + 24), b3), c3 = _mm256_fmadd_ps(xk, _mm256_load_ps(wc + 24), c3);
    }
    const __m256 panel0[4] = {a0, a1, a2, a3}, panel1[4] = {b0, b1, b2, b3}, panel2[4] = {c0, c1, c2, c3};
    store_panel(y, valid, panel0, accumulate);
    store_panel(y + kPanel, valid - kPanel, panel1, accumulate);
    store_panel(y + 2 * kPanel, valid - 2 * kPanel, panel2, accumulate);
}

// Widens inputs [k0, k0+kc) of panel p into fp32 `chunk` [kc][32] (32-byte aligned): done once
// per chunk for fp16, bf16, Q8_0 and Q4_0, then reused by every token of the prompt.
GLASS_AVX2 inline void unpack_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    const unsigned char* panel = w.panel(p);
    if (is_quantized(w.type)) {  // k0: a multiple of 32 (kChunk is)
        const bool q4 = w.type == WeightType::q4_0;
        const std::int64_t block_bytes = q4 ? kQ4BlockBytes : kQ8BlockBytes;
        // Whole groups of 4 inputs: a chunk that ends inside one gets its padding inputs too
        // (q = 0), which kChunk, a multiple of 4, leaves room for.
        for (int k = 0; k < kc; k += 4) {
            const unsigned char* block = panel + (k0 + k) / kQuantBlock * block_bytes;
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            for (int q = 0; q < 4; ++q) {
                const __m256 d = widen_fp16(scales + 8 * q);
                __m256 wq[4];
                widen_bytes(group_bytes(q4, block, (k0 + k) % kQuantBlock / 4, q), wq);
                for (int t = 0; t < 4; ++t) _mm256_store_ps(chunk + (k + t) * 32 + 8 * q, _mm256_mul_ps(wq[t], d));
            }
        }
        return;
    }
    const auto* ph = reinterpret_cast<const std::uint16_t*>(panel) + std::int64_t{k0} * 32;
    const bool is_fp16 = w.type == WeightType::fp16;
    for (int i = 0; i < kc * 32; i += 8)
        _mm256_store_ps(chunk + i, is_fp16 ? widen_fp16(ph + i) : widen_bf16(ph + i));
}

// xp: the n tokens packed by pack_tokens (token_tiles.hpp) with cols = w.cols.
// `scratch` holds kChunk × 32 floats, 32-byte aligned (one per thread). `unpack(w, p, k0, kc,
// chunk)` widens a chunk of a panel that is not fp32 (unpack_chunk; the k-quants' in
// kernels_avx2_kquants.hpp).
template <class Unpack>
GLASS_AVX2 inline void matmul_with(Unpack unpack, const PackedMatrix& w, const float* xp, int n, float* y, long ldy,
                                   int p0, int p1, bool accumulate, float* scratch) {
    if (n == 1 && w.type == WeightType::fp32) {  // a lone token: three panels per pass, then two
        for (; p0 + 3 <= p1; p0 += 3)
            for (int k0 = 0; k0 < w.cols; k0 += kChunk) {  // chunk by chunk, as below
                const int kc = std::min(kChunk, w.cols - k0);
                const float* chunks[3];
                for (int q = 0; q < 3; ++q) chunks[q] = reinterpret_cast<const float*>(w.panel(p0 + q)) + std::int64_t{k0} * 32;
                matmul_one_token_three_panels(xp + k0, chunks, kc, y + p0 * kPanel, w.rows - p0 * kPanel, accumulate || k0 > 0);
            }
        for (; p0 + 2 <= p1; p0 += 2)
            for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
                const int kc = std::min(kChunk, w.cols - k0);
                const float* chunk_a = reinterpret_cast<const float*>(w.panel(p0)) + std::int64_t{k0} * 32;
                const float* chunk_b = reinterpret_cast<const float*>(w.panel(p0 + 1)) + std::int64_t{k0} * 32;
                matmul_one_token_two_panels(xp + k0, chunk_a, chunk_b, kc, y + p0 * kPanel, y + (p0 + 1) * kPanel,
                                            w.rows - p0 * kPanel, w.rows - (p0 + 1) * kPanel, accumulate || k0 > 0);
            }
        // (an odd panel left over goes through the loop below)
    }
    for (int p = p0; p < p1; ++p) {
        const int valid = w.rows - p * kPanel;  // rows of this panel that exist
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunk = scratch;
            if (w.type == WeightType::fp32)  // already fp32 (and 64-byte aligned): use it in place
                chunk = reinterpret_cast<const float*>(w.panel(p)) + std::int64_t{k0} * 32;
            else
                unpack(w, p, k0, kc, scratch);
            const bool add = accumulate || k0 > 0;  // after the first chunk, add to what is in y
            // fp32 panels are read in place: with more than one pass over the chunk (n > 3), the
            // first pass prefetches kPanelPrefetchAhead bytes ahead (the later passes read L1 and leave
            // the memory idle; see kPanelPrefetchAhead).
            const char* ahead = w.type == WeightType::fp32 && n > 3
                                    ? reinterpret_cast<const char*>(chunk) + kPanelPrefetchAhead : nullptr;
            for (int i = 0; i < token_tiles(n); ++i) {
                const TokenTile tile = token_tile(n, i);
                const int m = tile.t1 - tile.t0;
                const float* xt = xp + std::int64_t{tile.t0} * w.cols + std::int64_t{k0} * m;  // [kc][m]
                float* yt = y + tile.t0 * ldy + p * kPanel;
                for (int t = 0; t < m; t += 3) {  // three tokens per pass, then the one or two left
                    const int left = m - t;
                    if (left >= 3) matmul_tile_panel3(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                    else if (left == 2) matmul_tile_panel<2>(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                    else matmul_tile_panel<1>(xt + t, m, chunk, kc, yt + t * ldy, ldy, valid, add, ahead);
                    ahead = nullptr;  // only the first pass streams from memory
                }
            }
        }
    }
}
GLASS_AVX2 inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                              bool accumulate, float* scratch) {
    matmul_with(unpack_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::avx2

#pragma GCC diagnostic pop

#endif  // __x86_64__
