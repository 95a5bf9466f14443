/// \file
/// \brief glass/fast/kernels_neon.hpp — the kernel set for AArch64 (NEON: 4 fp32 lanes per
/// 128-bit register): the matrix products here (the k-quant panels' in
/// kernels_neon_kquants.hpp), attention, e^x and the set's table in kernels_neon_attention.hpp.
/// ```text
/// The same meaning as kernels_portable.hpp, function for function; tests/neon/ checks each
/// against those plain loops (cross-compiled, under qemu-aarch64). NEON (Advanced SIMD) is part
/// of every AArch64 CPU, so only the integer dot product (sdot, the "dotprod" extension of
/// ARMv8.2+: Apple M1+, Graviton 2+, Neoverse, Cortex-A55/A76 and later, not the Pi 4's A72)
/// is checked at run time: neon_has_dotprod() reads the kernel's HWCAP_ASIMDDP bit, and only
/// matvec_int8 carries a `target` attribute.
///
/// Registers: 32 of 128 bits. A 32-row panel (packed_weights.hpp) is 8 registers of 4 rows.
///   matvec   decode: per input k, x[k] broadcast times the panel's 32 weights: 8 FMAs into
///            8 independent accumulators (FMA latency 4 cycles × 2 pipes on Neoverse N1)
///   matmul   prefill: a 256-input chunk of a panel unpacked to fp32 [256][32] (32 KiB, in L1),
///            then register tiles of ≤ 5 tokens × 16 rows: 20 accumulators, 4 weights and
///            5 broadcasts (6 tokens would need 34 registers); each loaded weight feeds 5
///            FMAs, each broadcast x feeds 4
///   attention tiles of ≤ 4 queries × 16 keys (scores) or 16 dims (mix): 16 accumulators
///   exp      exp4, a 4-lane e^x (≈ 1e-7 relative), for softmax, exp_shift and silu_mul
///   int8     sdot: 16 int8 weights × 16 int8 x into 4 int32 lanes, 4 products each: with
///            the group layout [rows][4 inputs] one instruction covers 4 rows × 4 inputs
/// NEON has no masked loads: tails (the padded last panel, head_dim 8, 17 keys) are loaded and
/// stored lane by lane (load_n, store_n: zeros in the lanes past the end, which are neither read
/// nor written), outside the loops' full blocks.
/// ```
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "glass/fast/kernel_table.hpp"
#include "glass/fast/kernels_portable.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/token_tiles.hpp"

// sdot (vdotq_s32) is ARMv8.2's dotprod extension: matvec_int8 alone may use it, and runs only
// where neon_has_dotprod() said yes. GCC's arm_neon.h declares it for armv8.2-a+dotprod, so the
// function takes that target (with less, GCC could not inline it). Clang's (14, the one tried)
// declares it only when the whole build targets dotprod (-march=armv8.2-a+dotprod, Apple's
// default); otherwise there is no sdot kernel and int8 activations take the portable loop.
#if !defined(__clang__)
#define GLASS_NEON_DOT __attribute__((target("arch=armv8.2-a+dotprod")))
#elif defined(__ARM_FEATURE_DOTPROD)
#define GLASS_NEON_DOT
#endif

namespace glass::fast {

// Whether this CPU has the integer dot product (sdot/udot): the kernel's HWCAP_ASIMDDP on
// Linux (also what qemu-aarch64 reports for its emulated CPU); every Apple M-series core has it.
inline bool neon_has_dotprod() {
#if defined(__linux__)
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    return true;
#else
    return false;
#endif
}

// The extensions glass looks for (kernels.hpp's cpu_feature_list): "neon" or "neon dotprod".
inline std::string neon_feature_list() { return neon_has_dotprod() ? "neon dotprod" : "neon"; }

}  // namespace glass::fast

namespace glass::fast::neon {

constexpr int kChunk = 256;  // prefill: inputs per unpacked panel chunk (kScratchFloats = 256 × 32)
constexpr int kSubTile = 5;  // prefill: tokens per register tile (5 × 4 accumulators of 16 rows)

// ---- Lanes ------------------------------------------------------------------------------------

// The first n lanes of p (n < 4: the rest 0, nothing past p + n read).
inline float32x4_t load_n(const float* p, int n) {
    if (n >= 4) return vld1q_f32(p);
    float32x4_t v = vdupq_n_f32(0.0f);
    if (n > 0) v = vld1q_lane_f32(p, v, 0);
    if (n > 1) v = vld1q_lane_f32(p + 1, v, 1);
    if (n > 2) v = vld1q_lane_f32(p + 2, v, 2);
    return v;
}
// Writes the first n lanes of v (n ≤ 0: nothing).
inline void store_n(float* p, float32x4_t v, int n) {
    if (n >= 4) {
        vst1q_f32(p, v);
        return;
    }
    if (n > 0) vst1q_lane_f32(p, v, 0);
    if (n > 1) vst1q_lane_f32(p + 1, v, 1);
    if (n > 2) vst1q_lane_f32(p + 2, v, 2);
}
// The 16 floats at p into v[4], n of them real (n < 16: zero-padded, nothing past p + n read).
// One test per 16 floats keeps the full blocks' loads plain.
inline void load16(const float* p, int n, float32x4_t v[4]) {
    if (n >= 16) {
        v[0] = vld1q_f32(p), v[1] = vld1q_f32(p + 4), v[2] = vld1q_f32(p + 8), v[3] = vld1q_f32(p + 12);
        return;
    }
    v[0] = load_n(p, n), v[1] = load_n(p + 4, n - 4), v[2] = load_n(p + 8, n - 8), v[3] = load_n(p + 12, n - 12);
}
// y[0..n) (+)= v, n of 4 rows valid (the last panel may be padding).
inline void store_rows(float* y, float32x4_t v, int n, bool accumulate) {
    if (n <= 0) return;
    if (accumulate) v = vaddq_f32(v, load_n(y, n));
    store_n(y, v, n);
}
// All ones in lanes i < n.
inline uint32x4_t lanes_below(int n) {
    const std::uint32_t iota[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(iota), vdupq_n_u32(static_cast<std::uint32_t>(std::max(n, 0))));
}

// ---- Widening packed weights to fp32 -----------------------------------------------------------

inline float32x4_t widen_fp16(const std::uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
// bf16 is the top half of an fp32: widen to 32 bits shifted left by 16.
inline float32x4_t widen_bf16(const std::uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }

// 16 int8 -> 4 × 4 fp32 (exact).
inline void widen_int8(int8x16_t q, float32x4_t out[4]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    out[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    out[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

// The integers of group g (inputs 4g .. 4g+3) of a Q8_0 / Q4_0 block: lo[t] = rows 0..15 of input
// 4g + t, hi[t] = rows 16..31. The group stores a row's 4 inputs side by side (q8_offset,
// q4_offset), so vld4 (load with a stride of 4 bytes) puts input t of 16 rows in register t.
// Q4_0's byte holds row i in its low 4 bits and row i + 16 in its high 4 bits, as q + 8.
inline void group_ints(bool q4, const unsigned char* block, int g, int8x16_t lo[4], int8x16_t hi[4]) {
    const unsigned char* q = block + kPanel * 2;
    if (q4) {
        const uint8x16x4_t v = vld4q_u8(q + g * 64);
        const uint8x16_t low4 = vdupq_n_u8(0x0F);
        const int8x16_t eight = vdupq_n_s8(8);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            lo[t] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v.val[t], low4)), eight);
            hi[t] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v.val[t], 4)), eight);
        }
        return;
    }
    const auto* ints = reinterpret_cast<const std::int8_t*>(q + g * 128);
    const int8x16x4_t rows0 = vld4q_s8(ints), rows16 = vld4q_s8(ints + 64);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
        lo[t] = rows0.val[t];
        hi[t] = rows16.val[t];
    }
}

// ---- Decode: y[r] (+)= Σ_k W(r,k) · x[k] for the rows of panels [p0, p1) ------------------------

// Σ_k x[k] · panel[k][0..32) for fp32, fp16 and bf16 panels (`widen`: 4 stored weights -> fp32).
// One FMA chain per 4 rows, over k in order: 8 independent chains, enough for a 4-cycle FMA on
// 2 pipes (Neoverse N1, Cortex-A76); decode reads each weight once, from memory, so loads set
// the pace. (Two inputs in flight, 16 chains, made GCC 12 spill accumulators inside the loop.)
template <class T, class Widen>
inline void panel_dot(const T* pw, const float* x, int cols, Widen widen, float32x4_t out[8]) {
    float32x4_t acc[8];  // (not `out`, which may live in memory: GCC would store it every step)
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = vdupq_n_f32(0.0f);
    for (int k = 0; k < cols; ++k) {
        const T* wk = pw + k * kPanel;
        const float32x4_t xk = vdupq_n_f32(x[k]);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = vfmaq_f32(acc[i], xk, widen(wk + 4 * i));
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) out[i] = acc[i];
}

// The same for a Q8_0 / Q4_0 panel: per block, Σ x·q in fp32 (per row one chain over the block's
// inputs), then times the block's 32 scales. Inputs past the end of a row (q = 0) meet x = 0, and
// x past cols is not read.
inline void panel_dot_quantized(const PackedMatrix& w, const unsigned char* panel, const float* x,
                                float32x4_t out[8]) {
    const bool q4 = w.type == WeightType::q4_0;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) out[i] = vdupq_n_f32(0.0f);
    for (int b = 0; b < w.q8_blocks(); ++b) {
        const unsigned char* block = panel + std::int64_t{b} * w.block_bytes();
        const int k0 = b * kQuantBlock, n = std::min(kQuantBlock, w.cols - k0);
        float32x4_t s[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) s[i] = vdupq_n_f32(0.0f);
        for (int g = 0; 4 * g < n; ++g) {
            int8x16_t lo[4], hi[4];
            group_ints(q4, block, g, lo, hi);
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) {
                const float32x4_t xt = vdupq_n_f32(4 * g + t < n ? x[k0 + 4 * g + t] : 0.0f);
                float32x4_t wl[4], wh[4];
                widen_int8(lo[t], wl);
                widen_int8(hi[t], wh);
#pragma GCC unroll 4
                for (int i = 0; i < 4; ++i) {
                    s[i] = vfmaq_f32(s[i], xt, wl[i]);
                    s[4 + i] = vfmaq_f32(s[4 + i], xt, wh[i]);
                }
            }
        }
        const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) out[i] = vfmaq_f32(out[i], s[i], widen_fp16(scales + 4 * i));
    }
}

inline void matvec(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    for (int p = p0; p < p1; ++p) {
        const unsigned char* panel = w.panel(p);
        float32x4_t sum[8];
        const auto* half = reinterpret_cast<const std::uint16_t*>(panel);
        if (w.type == WeightType::fp32)
            panel_dot(reinterpret_cast<const float*>(panel), x, w.cols, [](const float* q) { return vld1q_f32(q); }, sum);
        else if (w.type == WeightType::fp16)
            panel_dot(half, x, w.cols, [](const std::uint16_t* q) { return widen_fp16(q); }, sum);
        else if (w.type == WeightType::bf16)
            panel_dot(half, x, w.cols, [](const std::uint16_t* q) { return widen_bf16(q); }, sum);
        else
            panel_dot_quantized(w, panel, x, sum);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) store_rows(y + p * kPanel + 4 * i, sum[i], w.rows - p * kPanel - 4 * i, accumulate);
    }
}

// ---- Decode with int8 activations -------------------------------------------------------------
// y[r] (+)= Σ_b d_{r,b} · dx_b · Σ_{k in b} q_{r,k} · qx_k for the rows of Q8_0 / Q4_0 panels
// [p0, p1), x in int8 blocks (Int8Vector).
// sdot (vdotq_s32) multiplies 16 signed bytes by 16 signed bytes and adds each 4 adjacent
// products into one 32-bit lane: 16 bytes of a group are 4 rows × their 4 inputs, and the 4
// inputs' qx repeated in every lane give those rows' 4 products each. Both sides are signed, so
// no offset is needed (Q4_0's stored q + 8 has its 8 taken off first). Integer sums are exact:
// this equals quantize.hpp's quantized_dot_int8 up to the order of the fp32 additions over blocks.
#if defined(GLASS_NEON_DOT)
GLASS_NEON_DOT inline void matvec_int8(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                       bool accumulate) {
    const bool q4 = w.type == WeightType::q4_0;
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int p = p0; p < p1; ++p) {
        const unsigned char* panel = w.panel(p);
        float32x4_t acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = vdupq_n_f32(0.0f);
        for (int b = 0; b < w.q8_blocks(); ++b) {
            const unsigned char* block = panel + std::int64_t{b} * w.block_bytes();
            const unsigned char* q = block + kPanel * 2;
            int32x4_t s[8];  // s[i]: rows 4i .. 4i+3
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) s[i] = vdupq_n_s32(0);
            for (int g = 0; g < kQuantBlock / 4; ++g) {
                std::int32_t x4;  // qx of inputs 4g .. 4g+3
                std::memcpy(&x4, x.q + b * kQuantBlock + 4 * g, 4);
                const int8x16_t xg = vreinterpretq_s8_s32(vdupq_n_s32(x4));
                int8x16_t r[8];
                if (q4) {  // 16 bytes: rows 4c .. 4c+3 (low 4 bits) and 16 + 4c .. (high 4 bits)
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        const uint8x16_t v = vld1q_u8(q + g * 64 + 16 * c);
                        r[c] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, low4)), eight);
                        r[4 + c] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
                    }
                } else {
#pragma GCC unroll 8
                    for (int i = 0; i < 8; ++i) r[i] = vld1q_s8(reinterpret_cast<const std::int8_t*>(q + g * 128 + 16 * i));
                }
#pragma GCC unroll 8
                for (int i = 0; i < 8; ++i) s[i] = vdotq_s32(s[i], r[i], xg);
            }
            const float32x4_t dx = vdupq_n_f32(x.scales[b]);
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i)
                acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(s[i]), vmulq_f32(widen_fp16(scales + 4 * i), dx));
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) store_rows(y + p * kPanel + 4 * i, acc[i], w.rows - p * kPanel - 4 * i, accumulate);
    }
}
#endif

// ---- Prefill: Y[t][r] (+)= Σ_k W(r,k) · X[t][k], t < n, rows of panels [p0, p1) -----------------

// Inputs [k0, k0 + kc) of panel p as fp32 [kc][32] in `chunk`: fp16, bf16 and Q8_0/Q4_0 are
// widened once per chunk, then reused by every token of the prompt. Quantized: whole groups of
// 4 inputs (a chunk ending inside one gets its padding inputs, q = 0; kChunk leaves room).
inline void unpack_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    const unsigned char* panel = w.panel(p);
    if (is_quantized(w.type)) {  // k0: a multiple of 32 (kChunk is)
        const bool q4 = w.type == WeightType::q4_0;
        for (int k = 0; k < kc; k += 4) {
            const unsigned char* block = panel + std::int64_t{(k0 + k) / kQuantBlock} * w.block_bytes();
            const auto* scales = reinterpret_cast<const std::uint16_t*>(block);
            int8x16_t lo[4], hi[4];
            group_ints(q4, block, (k0 + k) % kQuantBlock / 4, lo, hi);
            for (int t = 0; t < 4; ++t) {
                float32x4_t q[8];
                widen_int8(lo[t], q);
                widen_int8(hi[t], q + 4);
#pragma GCC unroll 8
                for (int i = 0; i < 8; ++i) vst1q_f32(chunk + (k + t) * kPanel + 4 * i, vmulq_f32(q[i], widen_fp16(scales + 4 * i)));
            }
        }
        return;
    }
    const auto* ph = reinterpret_cast<const std::uint16_t*>(panel) + std::int64_t{k0} * kPanel;
    const bool is_fp16 = w.type == WeightType::fp16;
    for (int i = 0; i < kc * kPanel; i += 4) vst1q_f32(chunk + i, is_fp16 ? widen_fp16(ph + i) : widen_bf16(ph + i));
}

// The register tile: Y[t][16 rows] (+)= Σ_k w[k][16 rows] · x[k·m + t] for t < M, w with a row
// stride of 32 (one half of the unpacked chunk), x the tile's tokens packed [kc][m]. Per input:
// 4 weight loads and M broadcasts feed 4M FMAs. Each output is one FMA chain over k in order,
// whatever M is, so a token's result does not depend on the tokens beside it.
template <int M>
inline void matmul_tile(const float* x, int m, const float* w, int kc, float* y, long ldy, int valid, bool accumulate) {
    float32x4_t acc[M][4];
#pragma GCC unroll 5
    for (int t = 0; t < M; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
    for (int k = 0; k < kc; ++k) {
        const float* wk = w + k * kPanel;
        const float32x4_t w0 = vld1q_f32(wk), w1 = vld1q_f32(wk + 4), w2 = vld1q_f32(wk + 8), w3 = vld1q_f32(wk + 12);
#pragma GCC unroll 5
        for (int t = 0; t < M; ++t) {
            const float32x4_t xt = vld1q_dup_f32(x + k * m + t);
            acc[t][0] = vfmaq_f32(acc[t][0], xt, w0);
            acc[t][1] = vfmaq_f32(acc[t][1], xt, w1);
            acc[t][2] = vfmaq_f32(acc[t][2], xt, w2);
            acc[t][3] = vfmaq_f32(acc[t][3], xt, w3);
        }
    }
    // Through memory: with the sums stored first, the branches of a padded panel's stores do not
    // compete for registers with the loop above (GCC 12 spilled accumulators inside it).
    float out[M][16];
#pragma GCC unroll 5
    for (int t = 0; t < M; ++t)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) vst1q_f32(out[t] + 4 * c, acc[t][c]);
    for (int t = 0; t < M; ++t)
        for (int c = 0; c < 4; ++c) store_rows(y + t * ldy + 4 * c, vld1q_f32(out[t] + 4 * c), valid - 4 * c, accumulate);
}

// The run-time token count (1..5) picks the unrolled tile.
inline void matmul_tokens(int count, const float* x, int m, const float* w, int kc, float* y, long ldy, int valid,
                          bool accumulate) {
    switch (count) {
        case 5: matmul_tile<5>(x, m, w, kc, y, ldy, valid, accumulate); break;
        case 4: matmul_tile<4>(x, m, w, kc, y, ldy, valid, accumulate); break;
        case 3: matmul_tile<3>(x, m, w, kc, y, ldy, valid, accumulate); break;
        case 2: matmul_tile<2>(x, m, w, kc, y, ldy, valid, accumulate); break;
        default: matmul_tile<1>(x, m, w, kc, y, ldy, valid, accumulate); break;
    }
}

// xp: the n tokens packed by pack_tokens (token_tiles.hpp) with cols = w.cols. `scratch` holds
// kChunk × 32 floats (one per thread). A token tile of m ≤ 12 is cut into ⌈m/5⌉ nearly equal
// register tiles, each run over both 16-row halves of the panel. `unpack(w, p, k0, kc, chunk)`
// widens a chunk of a panel that is not fp32 (unpack_chunk; the k-quants' in
// kernels_neon_kquants.hpp).
template <class Unpack>
inline void matmul_with(Unpack unpack, const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0,
                        int p1, bool accumulate, float* scratch) {
    for (int p = p0; p < p1; ++p) {
        const int valid = w.rows - p * kPanel;
        for (int k0 = 0; k0 < w.cols; k0 += kChunk) {
            const int kc = std::min(kChunk, w.cols - k0);
            const float* chunk = scratch;
            if (w.type == WeightType::fp32)  // already fp32: used in place
                chunk = reinterpret_cast<const float*>(w.panel(p)) + std::int64_t{k0} * kPanel;
            else
                unpack(w, p, k0, kc, scratch);
            const bool add = accumulate || k0 > 0;  // after the first chunk, add to what it left
            for (int i = 0; i < token_tiles(n); ++i) {
                const TokenTile tile = token_tile(n, i);
                const int m = tile.t1 - tile.t0, parts = (m + kSubTile - 1) / kSubTile;
                const float* xt = xp + std::int64_t{tile.t0} * w.cols + std::int64_t{k0} * m;
                for (int half = 0; half < 2 && valid > 16 * half; ++half)
                    for (int part = 0; part < parts; ++part) {
                        const int a = m * part / parts, b = m * (part + 1) / parts;
                        float* yt = y + (tile.t0 + a) * ldy + p * kPanel + 16 * half;
                        matmul_tokens(b - a, xt + a, m, chunk + 16 * half, kc, yt, ldy, valid - 16 * half, add);
                    }
            }
        }
    }
}
inline void matmul(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                   bool accumulate, float* scratch) {
    matmul_with(unpack_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::neon

#endif  // __aarch64__
