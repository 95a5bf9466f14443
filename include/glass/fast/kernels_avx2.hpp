/// \file
/// \brief glass/fast/kernels_avx2.hpp — decode's matrix products (one token: matvec, and matvec_int8
/// with int8 activations) for AVX2 + FMA (8 fp32 lanes), and the pieces every AVX2 file shares
/// (GLASS_AVX2, masks, widening fp16 / bf16 / Q8_0 / Q4_0 to fp32). The CPUs most people own:
/// Intel since Haswell (2013, every Core i3/i5/i7/i9 to this day), AMD since Zen 1 (2017).
/// ```text
/// Same meaning as kernels_portable.hpp, same panel layout as the AVX-512 set (packed_weights.hpp):
/// a 32-row panel is four 8-lane registers instead of two 16-lane ones, so nothing is repacked.
/// What changes is the register budget: 16 ymm registers instead of 32 zmm, and that shapes
/// prefill's register tile (kernels_avx2_matmul.hpp). Everything else is the AVX-512 loop at
/// half the width.
///
/// Numbers that guide the design (AMD Zen 3, one core): two 256-bit FMA pipes = 2 × 8 lanes ×
/// 2 FLOPs = 32 FLOP/cycle ≈ 110 GFLOP/s at 3.4 GHz; FMA latency 4 cycles, so ≥ 8 independent
/// accumulators; three loads per cycle, two of them 256-bit; a 32 KiB L1 data cache (Zen 4/5:
/// 48 KiB).
///
/// The set's files, in the order they include each other:
///   kernels_avx2.hpp            decode's products (this file)
///   kernels_avx2_matmul.hpp     prefill's and batched decode's products: register tiles
///   kernels_avx2_kquants.hpp    the same for k-quant panels (Q4_K, Q5_K, Q6_K)
///   kernels_avx2_attention.hpp  attention, softmax, silu_mul, int8 rows; the set's table
/// ```
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "glass/fast/packed_weights.hpp"

// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define GLASS_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace glass::fast::avx2 {

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

// A group of 4 inputs for 8 rows as signed bytes, [8 rows][4 inputs] (one 32-bit lane per row):
// Q8_0 stores exactly that (q8_offset), so group g's rows 8q .. 8q+7 (q < 4) are one load. (Q4_0's
// nibbles are never given a sign here: matvec_q4 and unpack_q4_chunk take the offset 8 out after
// widening, and the int8 products read them through int8_group_bytes.)
GLASS_AVX2 inline __m256i q8_group_bytes(const unsigned char* block, int g, int q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kPanel * 2 + g * 128 + q * 32));
}

// Input t (< 4) of each row's 4 bytes as fp32: shift byte t to the top of the lane, then back
// down with its sign. (Shift counts are immediates: each input is written out.)
GLASS_AVX2 inline void widen_bytes(__m256i v, __m256 w[4]) {
    w[0] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24), 24));
    w[1] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 16), 24));
    w[2] = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 8), 24));
    w[3] = _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
}

// Input t (< 4) of each row's 4 nibbles (Q4_0's v = q + 8, one per byte of its 32-bit lane, high
// bits clear) as fp32 v · 2^(8t): each byte masked in place and converted, exact; input 3 is
// shifted down instead (v itself). No sign to carry: unpack_q4_chunk takes the offset 8 and the
// scale 2^(8t) out afterwards; matvec_q4 writes the same four steps out (its comment says why).
GLASS_AVX2 inline void widen_nibbles(__m256i u, __m256 w[4]) {
    w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(u, _mm256_set1_epi32(0xFF)));
    w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(u, _mm256_set1_epi32(0xFF00)));
    w[2] = _mm256_cvtepi32_ps(_mm256_and_si256(u, _mm256_set1_epi32(0xFF0000)));
    w[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(u, 24));
}

// The sum of a register's 8 lanes.
GLASS_AVX2 inline float add_lanes(__m256 v) {
    const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
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

// Asks for the bytes [p, p + n) a 64-byte line at a time, while the caller works on what it
// already has (decode's Q8_0/Q4_0 products, and the k-quants' in kernels_avx2_kquants.hpp). A
// prefetch changes no number and never faults, so it may run past a matrix's end.
GLASS_AVX2 inline void prefetch_lines(const unsigned char* p, std::int64_t n) {
    for (std::int64_t line = 0; line < n; line += 64) _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T0);
}

// Q8_0 with fp32 x: per block, Σ x·q for each 8-row quarter in fp32 (the group's 4 inputs
// widened from signed bytes), then one multiply-add by the quarter's 8 scales. A row that ends
// inside a group meets x = 0 on its padding inputs, and x past the end is not read. It asks for
// the block two ahead as matvec_int8_impl (below) does: Zen 3 VM, one thread, 64 Q8_0 matrices
// of 2048 × 768 from memory, two rounds: 11.9-12.3 → 14.1-14.3 GB/s. (Q4_0 took this loop too,
// its nibbles given a sign through a byte-shuffle table, at 7.3-7.4 GB/s either way, held by its arithmetic:
// hence matvec_q4, below.)
GLASS_AVX2 inline void matvec_q8(const unsigned char* panel, int cols, const float* x, __m256 acc[4]) {
    const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
    for (int b = 0; b < blocks; ++b) {
        const unsigned char* block = panel + b * kQ8BlockBytes;
        prefetch_lines(block + 2 * kQ8BlockBytes, kQ8BlockBytes);
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
                widen_bytes(q8_group_bytes(block, g, q), w);
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

// Q4_0 with fp32 x, widened without a sign. A Q4_0 byte holds the nibbles v = q + 8 of two rows
// (r and r + 16), so per block
//     Σ_k x_k q_k  =  Σ_k x_k v_k  −  8 Σ_k x_k,
// and v needs no sign: after one AND (low nibbles) or a shift and an AND (high), input t of a row
// is the nibble in byte t of its 32-bit lane. Masking that byte and converting gives v · 2^(8t),
// exactly (t = 3 is shifted down instead); input t's products go to a chain of their own, which
// is scaled back by 2^(−8t) at the block's end (a power of two: exact). Per 8 rows and 4 inputs:
// 4 AND/shift + 4 converts + 4 FMAs, where Q4_0 through matvec_q8's signed loop (its nibbles
// through a byte-shuffle table; the loop before this one) took a table lookup, 7 shifts, 4
// converts and 5 multiply-adds. Σ x is the block's 32 x summed once per panel. Zen 3 VM,
// scripts/paired-bench against that loop, 11 rounds: one thread, a 512 × 768 matrix in L2,
// 1.30x; two threads, 64 matrices of 2048 × 768 streamed, 1.20x. Rounding: against the same sums
// in double, 2048 × 768 / 2048 / 5632 inputs, relative error 2.6 / 3.0 / 3.1e-7 (the signed loop
// 1.1 / 1.5 / 2.5e-7, the portable loop 4.8 / 7.5 / 13e-7).
GLASS_AVX2 inline void matvec_q4(const unsigned char* panel, int cols, const float* x, __m256 acc[4]) {
    const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
    const __m256i byte0 = _mm256_set1_epi32(0xFF), byte1 = _mm256_set1_epi32(0xFF00), byte2 = _mm256_set1_epi32(0xFF0000);
    const __m256 to_byte1 = _mm256_set1_ps(0x1p-8f), to_byte2 = _mm256_set1_ps(0x1p-16f);
    const int blocks = (cols + kQuantBlock - 1) / kQuantBlock;
    for (int b = 0; b < blocks; ++b) {
        const unsigned char* block = panel + b * kQ4BlockBytes;
        prefetch_lines(block + 2 * kQ4BlockBytes, kQ4BlockBytes);
        // x's 32 inputs (a last, partial block: copied, zeros after; its padding nibbles then add
        // nothing) and their sum
        const int k0 = b * kQuantBlock, n = std::min(kQuantBlock, cols - k0);
        alignas(32) float tail[kQuantBlock];
        const float* xb = x + k0;
        if (n < kQuantBlock) {
            std::fill_n(tail, kQuantBlock, 0.0f);
            xb = static_cast<const float*>(std::memcpy(tail, xb, sizeof(float) * static_cast<size_t>(n)));
        }
        const __m256 sum_x = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                                           _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
        const __m256 minus_8_sum_x = _mm256_set1_ps(-8.0f * add_lanes(sum_x));
        // Half h of the panel: one 32-byte load per group holds rows 8h.. (low) and 8h + 16.. (high).
        const unsigned char* ints = block + kPanel * 2;
        __m256 sum[4];
        for (int h = 0; h < 2; ++h) {
            __m256 lo[4], hi[4];  // chain t: input t of each group, as v · 2^(8t) (t < 3)
            for (int t = 0; t < 4; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
            for (int g = 0; g < kQuantBlock / 4; ++g) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 64 + h * 32));
                const __m256i vl = _mm256_and_si256(v, low_nibbles), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), low_nibbles);
                const float* xg = xb + 4 * g;
                const __m256 x0 = _mm256_broadcast_ss(xg), x1 = _mm256_broadcast_ss(xg + 1);
                const __m256 x2 = _mm256_broadcast_ss(xg + 2), x3 = _mm256_broadcast_ss(xg + 3);
                // widen_nibbles written out, each input straight into its FMA: through two arrays
                // of 4, GCC 12 kept the 8 chains on the stack (objdump: FMAs on (%rsp)), 0.83x.
                lo[0] = _mm256_fmadd_ps(x0, _mm256_cvtepi32_ps(_mm256_and_si256(vl, byte0)), lo[0]);
                hi[0] = _mm256_fmadd_ps(x0, _mm256_cvtepi32_ps(_mm256_and_si256(vh, byte0)), hi[0]);
                lo[1] = _mm256_fmadd_ps(x1, _mm256_cvtepi32_ps(_mm256_and_si256(vl, byte1)), lo[1]);
                hi[1] = _mm256_fmadd_ps(x1, _mm256_cvtepi32_ps(_mm256_and_si256(vh, byte1)), hi[1]);
                lo[2] = _mm256_fmadd_ps(x2, _mm256_cvtepi32_ps(_mm256_and_si256(vl, byte2)), lo[2]);
                hi[2] = _mm256_fmadd_ps(x2, _mm256_cvtepi32_ps(_mm256_and_si256(vh, byte2)), hi[2]);
                lo[3] = _mm256_fmadd_ps(x3, _mm256_cvtepi32_ps(_mm256_srli_epi32(vl, 24)), lo[3]);
                hi[3] = _mm256_fmadd_ps(x3, _mm256_cvtepi32_ps(_mm256_srli_epi32(vh, 24)), hi[3]);
            }
            // chains 1 and 2 back to v's own scale: times 2^−8 and 2^−16, exact
            sum[h] = _mm256_add_ps(_mm256_fmadd_ps(lo[1], to_byte1, lo[0]), _mm256_fmadd_ps(lo[2], to_byte2, lo[3]));
            sum[h + 2] = _mm256_add_ps(_mm256_fmadd_ps(hi[1], to_byte1, hi[0]), _mm256_fmadd_ps(hi[2], to_byte2, hi[3]));
        }
        const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
            acc[q] = _mm256_fmadd_ps(_mm256_add_ps(sum[q], minus_8_sum_x), widen_fp16(scales + 8 * q), acc[q]);
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
        else if (w.type == WeightType::q4_0)
            matvec_q4(panel, w.cols, x, acc);
        else
            matvec_q8(panel, w.cols, x, acc);
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

// The group's bytes for the integer product: Q4_0 unsigned (q + 8: the nibble itself); Q8_0
// unsigned (q + 128) for VNNI, signed q for vpmaddubsw (which takes its sign apart itself).
// A Q4_0 byte holds row r's nibble low and row r + 16's high: lo + 16 · hi. VNNI takes bytes
// whole (no saturation), so it multiplies the bytes as they are (lo + 16 · hi) for rows 0-15 and
// the high nibbles in place (16 · hi, one and) for rows 16-31; block_int8_dots then takes
// the two apart exactly: lo = whole − 16 · hi, hi = (16 · hi) / 16. Zen 5 VM, 2 threads, a 2048 ×
// 768 Q4_0 matrix read from L2, three rounds alternated: 106-108 → 124-128 GB/s, same bits.
// vpmaddubsw saturates at 2^15, so plain AVX2 masks each nibble out (a shift and two ands per
// pair of registers).
// The two sums of such whole bytes apart, exactly: whole = Σ (lo + 16·hi)·qx and hi16 = Σ 16·hi·qx
// become Σ lo·qx and Σ hi·qx (hi16 is a multiple of 16, so the shift is exact). Q4_0 here, Q4_K in
// kernels_avx2_kquants.hpp.
GLASS_AVX2 inline void separate_nibble_sums(__m256i& whole, __m256i& hi16) {
    whole = _mm256_sub_epi32(whole, hi16);
    hi16 = _mm256_srai_epi32(hi16, 4);
}
template <bool kVnni, bool kQ4>
GLASS_AVX2 inline __m256i int8_group_bytes(const unsigned char* block, int g, int q) {
    const unsigned char* ints = block + kPanel * 2;
    if constexpr (kQ4) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 64 + (q % 2) * 32));
        if constexpr (kVnni) return q < 2 ? v : _mm256_and_si256(v, _mm256_set1_epi8(static_cast<char>(0xF0)));
        return _mm256_and_si256(q < 2 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    }
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + g * 128 + q * 32));
    return kVnni ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
}

// A group's 4 qx in every 32-bit lane.
GLASS_AVX2 inline __m256i broadcast_group(const std::int8_t* qx) {
    std::int32_t x4;
    std::memcpy(&x4, qx, 4);
    return _mm256_set1_epi32(x4);
}

// acc + each lane's Σ_t q_t · qx_t, in the form the block's loop keeps:
//   VNNI         int32 lanes, one vpdpbusd
//   AVX2, Q8_0   int32 lanes: vpmaddubsw (|q| · ±qx, pairs) then vpmaddwd by ones
//   AVX2, Q4_0   16-bit pairs, left for block_int8_dots to widen once per block: a pair of
//                nibble × qx products lies within ±2 · 15 · 128 = ±3,840, so a block's 8 groups
//                add up within ±30,720 < 2^15. That saves a vpmaddwd and an add per group.
template <bool kVnni, bool kQ4>
GLASS_AVX2 inline __m256i add_group_dot(__m256i acc, __m256i q_bytes, __m256i xg) {
    if constexpr (kVnni) return dpbusd_vex(acc, q_bytes, xg);
    else if constexpr (kQ4) return _mm256_add_epi16(acc, _mm256_maddubs_epi16(q_bytes, xg));
    else {
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(q_bytes), _mm256_sign_epi8(xg, q_bytes));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
}

// Σ_t q_t · qx_t over one block's 32 inputs for every row of a panel, as four int32 registers
// (rows 8q .. 8q+7 in isum[q]), still with the weights' offset. Even and odd groups run in
// separate chains: vpdpbusd's latency (4-5 cycles) would otherwise hold four chains to one group
// per 4-5 cycles, half the rate two VNNI pipes can take (the k-quants' k_pair_dot does the same).
// The sums are integers, so their order changes no bit. With Q4_0's pairs kept in 16 bits (add_group_dot) and the layout a template
// argument (no test of the type per group), Zen 5 VM, 2 threads, a 2048 × 768 Q4_0 matrix read
// from L2 300 times, three rounds alternated: plain AVX2 65.6-66.4 → 71.6-72.3 GB/s, AVX-VNNI
// 89.6-91.6 → 93.7. The whole q4 + int8 decode (stories110M shape): 514-550 → 554-563 tokens/s.
template <bool kVnni, bool kQ4>
GLASS_AVX2 inline void block_int8_dots(const unsigned char* block, const std::int8_t* xb, __m256i isum[4]) {
    const __m256i zero = _mm256_setzero_si256();
    __m256i even[4] = {zero, zero, zero, zero}, odd[4] = {zero, zero, zero, zero};
    for (int g = 0; g < kQuantBlock / 4; g += 2) {  // groups g and g + 1: inputs 4g .. 4g+7
        const __m256i x_even = broadcast_group(xb + 4 * g), x_odd = broadcast_group(xb + 4 * g + 4);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            even[q] = add_group_dot<kVnni, kQ4>(even[q], int8_group_bytes<kVnni, kQ4>(block, g, q), x_even);
            odd[q] = add_group_dot<kVnni, kQ4>(odd[q], int8_group_bytes<kVnni, kQ4>(block, g + 1, q), x_odd);
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
        isum[q] = !kVnni && kQ4 ? _mm256_madd_epi16(_mm256_add_epi16(even[q], odd[q]), _mm256_set1_epi16(1))
                                : _mm256_add_epi32(even[q], odd[q]);
    if constexpr (kVnni && kQ4) {  // whole bytes in 0-1, 16 · high nibbles in 2-3 (int8_group_bytes)
        separate_nibble_sums(isum[0], isum[2]);
        separate_nibble_sums(isum[1], isum[3]);
    }
}

// The plain AVX2 form asks for the block two ahead (1,152 bytes for Q4_0, 2,176 for Q8_0; blocks
// and panels follow each other, so past a panel's end that is the next panel's start) while it
// multiplies this one: its integer work is slow enough that the hardware prefetcher alone leaves
// the stream idle between loads. Zen 3 VM (AVX2, no VNNI), one thread, 64 matrices of 2048 × 768
// streamed from memory, two rounds: Q4_0 11.8-12.4 → 16.0-16.1 GB/s (a plain read of the same
// bytes: 15.3-15.6), Q8_0 14.1-14.3 → 16.1-17.5; one block ahead helped Q8_0 only, three or
// more less than two. The VNNI form, not measured with it (no such CPU was at hand), does not prefetch.
template <bool kVnni, bool kQ4>
GLASS_AVX2 inline void matvec_int8_impl(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                        bool accumulate) {
    // the offset that came with unsigned weights: Q4_0 always, Q8_0 only in the VNNI form
    const int offset = kQ4 ? 8 : kVnni ? 128 : 0;
    const std::int64_t block_bytes = w.block_bytes();  // a multiple of 64: 576 (Q4_0), 1,088 (Q8_0)
    for (int p = p0; p < p1; ++p) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        const unsigned char* panel = w.panel(p);
        for (int b = 0; b < w.q8_blocks(); ++b) {
            const unsigned char* block = panel + std::int64_t{b} * block_bytes;
            if constexpr (!kVnni) prefetch_lines(block + 2 * block_bytes, block_bytes);
            __m256i isum[4];
            block_int8_dots<kVnni, kQ4>(block, x.q + b * kQuantBlock, isum);
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

// The weight type picks the loop's layout once per call.
template <bool kVnni>
GLASS_AVX2 inline void matvec_int8_typed(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                         bool accumulate) {
    if (w.type == WeightType::q4_0) return matvec_int8_impl<kVnni, true>(w, x, y, p0, p1, accumulate);
    matvec_int8_impl<kVnni, false>(w, x, y, p0, p1, accumulate);
}
// Two entry points of the table's type: one for CPUs with AVX-VNNI, one for plain AVX2.
GLASS_AVX2 inline void matvec_int8_vnni(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                        bool accumulate) {
    matvec_int8_typed<true>(w, x, y, p0, p1, accumulate);
}
GLASS_AVX2 inline void matvec_int8(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1, bool accumulate) {
    matvec_int8_typed<false>(w, x, y, p0, p1, accumulate);
}

}  // namespace glass::fast::avx2

#pragma GCC diagnostic pop

#endif  // __x86_64__
