/// \file
/// \brief glass/fast/kernels_neon_kquants.hpp — the k-quant panels' products (Q4_K, Q5_K, Q6_K;
/// packed_kquants.hpp) for NEON.
/// ```text
/// Every product splits a row's dot product into pieces of 16 inputs, over which a k-quant
/// weight is S·q − M (S = d·sc, M = dmin·m, or 32·S for Q6_K):
///     Σ_k w_k·x_k = Σ_pieces  S·(Σ q_k·x_k) − M·(Σ x_k)
/// so the inner loop multiplies small unsigned integers q by x, as Q4_0's does, and S and M
/// meet the sums once per 16 inputs and row. Σ x over each piece is the same for every row:
/// computed once per call.
///   decode, fp32 x    q widened to fp32 in registers (vld4: input t of 16 rows in register t,
///                     as Q4_0's group_ints), 8 FMA chains of 4 rows each
///   decode, int8 x    sdot: q (0..63, so a signed byte as it is) times qx, 4 rows × 4 inputs
///                     per instruction (the group layout's 16 bytes, as matvec_int8's Q4_0)
///   prefill           whole 16-input pieces of a chunk (kChunk = 256: one super-block) widened
///                     to fp32 weights, then the register tiles of kernels_neon.hpp
/// The table (kernels_neon_attention.hpp) takes the *_all entries below: these for k-quant
/// panels, kernels_neon.hpp's for every other type.
/// ```
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "glass/fast/kernels_neon.hpp"
#include "glass/fast/packed_kquants.hpp"
#include "glass/fast/packed_weights.hpp"

namespace glass::fast::neon {

// 16 nibble bytes of a sub-block group and the 16 extra-plane bytes beside them -> q of the rows
// in the bytes' low halves (lo) and high halves (hi), the same byte order. The extra bits (Q5_K,
// Q6_K) are shifted down to bit 0, masked, and inserted above the nibble (sli keeps the low 4
// bits of its first operand: lo needs no mask of its own).
inline void k_split(const KQuantLayout& L, int g, uint8x16_t nib, uint8x16_t ext, uint8x16_t& lo, uint8x16_t& hi) {
    hi = vshrq_n_u8(nib, 4);
    if (L.extra_bits == 0) {
        lo = vandq_u8(nib, vdupq_n_u8(0x0F));
        return;
    }
    const int shift = kq_extra_shift(L, g);
    const uint8x16_t mask = vdupq_n_u8(static_cast<std::uint8_t>((1 << L.extra_bits) - 1));
    const uint8x16_t e_lo = vandq_u8(vshlq_u8(ext, vdupq_n_s8(static_cast<std::int8_t>(-shift))), mask);
    const uint8x16_t e_hi = vandq_u8(vshlq_u8(ext, vdupq_n_s8(static_cast<std::int8_t>(-shift - L.extra_bits))), mask);
    lo = vsliq_n_u8(nib, e_lo, 4);
    hi = vsliq_n_u8(hi, e_hi, 4);
}

// Group g (inputs 4g .. 4g+3) of a panel sub-block: lo[t] = q of input 4g + t for rows 0..15,
// hi[t] = for rows 16..31 (vld4 takes every 4th byte: a row's 4 inputs sit side by side).
inline void k_group(const KQuantLayout& L, const std::uint8_t* sub, int g, uint8x16_t lo[4], uint8x16_t hi[4]) {
    const uint8x16x4_t v = vld4q_u8(sub + kq_nibbles(g));
    const uint8x16x4_t e = L.extra_bits == 0 ? v : vld4q_u8(sub + kq_extra_plane(L, g));
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) k_split(L, g, v.val[t], e.val[t], lo[t], hi[t]);
}

// The 4 bytes at p as fp32: unsigned (sc, m) or signed (Q6_K's scales).
inline float32x4_t unsigned4(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vcreate_u8(v)))));
}
inline float32x4_t signed4(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vcreate_s8(v)))));
}

// S and M (w = S·q − M) of rows 4i .. 4i+3 for inputs [16h, 16h + 16) of sub-block `sub` of
// super-block `super`: exact fp32 products, as packed_kquants.hpp's kq_scale_min.
struct KScale4 {
    float32x4_t s, m;
};
inline KScale4 k_scales(const KQuantLayout& L, const std::uint8_t* super, const std::uint8_t* sub, int h, int i) {
    const auto* half = reinterpret_cast<const std::uint16_t*>(super);  // d[32], then dmin[32]
    const float32x4_t d = widen_fp16(half + 4 * i);
    if (!L.has_min) {  // Q6_K: int8 scales, one per 16 inputs; M = 32·S
        const float32x4_t s = vmulq_f32(d, signed4(sub + 32 * h + 4 * i));
        return {s, vmulq_n_f32(s, 32.0f)};
    }
    return {vmulq_f32(d, unsigned4(sub + 4 * i)), vmulq_f32(widen_fp16(half + 32 + 4 * i), unsigned4(sub + 32 + 4 * i))};
}

// ---------------------------------------------------------------------------------------------
// Decode, fp32 x: out[i] = Σ q·x over inputs [16h, 16h + 16) of sub-block `sub` for rows
// 4i .. 4i+3, x the piece's 16 inputs. q ≤ 63 is a positive int8: widen_int8 widens it.
inline void k_piece_dot(const KQuantLayout& L, const std::uint8_t* sub, int h, const float* x, float32x4_t out[8]) {
    float32x4_t s[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) s[i] = vdupq_n_f32(0.0f);
    for (int g = 4 * h; g < 4 * h + 4; ++g) {
        uint8x16_t lo[4], hi[4];
        k_group(L, sub, g, lo, hi);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
            const float32x4_t xt = vdupq_n_f32(x[4 * (g - 4 * h) + t]);
            float32x4_t wl[4], wh[4];
            widen_int8(vreinterpretq_s8_u8(lo[t]), wl);
            widen_int8(vreinterpretq_s8_u8(hi[t]), wh);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                s[i] = vfmaq_f32(s[i], xt, wl[i]);
                s[4 + i] = vfmaq_f32(s[4 + i], xt, wh[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) out[i] = s[i];
}

// y[r] (+)= Σ_k W(r,k)·x[k] for the rows of panels [p0, p1).
inline void matvec_k(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    const KQuantLayout& L = k_layout(w.type);
    // Σ x over each 16 inputs: the M term's factor, the same for every row.
    static thread_local std::vector<float> x_sums;
    x_sums.resize(static_cast<size_t>(w.cols / 16));
    for (int i = 0; i < w.cols / 16; ++i) {
        const float* xi = x + 16 * i;
        x_sums[size_t(i)] = vaddvq_f32(vaddq_f32(vaddq_f32(vld1q_f32(xi), vld1q_f32(xi + 4)),
                                                 vaddq_f32(vld1q_f32(xi + 8), vld1q_f32(xi + 12))));
    }
    for (int p = p0; p < p1; ++p) {
        float32x4_t acc[8];  // rows 4i .. 4i+3
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = vdupq_n_f32(0.0f);
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + L.sub_offset(j);
                const int k0 = s * kSuperBlock + j * kSubBlock;
                for (int h = 0; h < 2; ++h) {
                    float32x4_t qx[8];
                    k_piece_dot(L, sub, h, x + k0 + 16 * h, qx);
                    const float xs = x_sums[size_t(k0 / 16 + h)];
#pragma GCC unroll 8
                    for (int i = 0; i < 8; ++i) {
                        const KScale4 sm = k_scales(L, super, sub, h, i);
                        acc[i] = vfmsq_n_f32(vfmaq_f32(acc[i], sm.s, qx[i]), sm.m, xs);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) store_rows(y + p * kPanel + 4 * i, acc[i], w.rows - p * kPanel - 4 * i, accumulate);
    }
}

// ---------------------------------------------------------------------------------------------
// Decode, int8 x (Int8Vector: blocks of 32 = one sub-block each): per piece of 16 inputs the
// exact integer sums Σ q·qx (sdot) and Σ qx, then dx·(S·Σ q·qx) − M·(dx·Σ qx).
#if defined(GLASS_NEON_DOT)
// out[i] = Σ q·qx over inputs [16h, 16h + 16) of sub-block `sub` for rows 4i .. 4i+3, xq the
// piece's 16 qx. 16 bytes of a group: rows 4c .. 4c+3 in the low halves, 16 + 4c .. in the high.
GLASS_NEON_DOT inline void k_piece_sdot(const KQuantLayout& L, const std::uint8_t* sub, int h, const std::int8_t* xq,
                                        int32x4_t out[8]) {
    int32x4_t s[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) s[i] = vdupq_n_s32(0);
    for (int g = 4 * h; g < 4 * h + 4; ++g) {
        std::int32_t x4;  // qx of inputs 4g .. 4g+3, in every lane
        std::memcpy(&x4, xq + 4 * (g - 4 * h), 4);
        const int8x16_t xg = vreinterpretq_s8_s32(vdupq_n_s32(x4));
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const uint8x16_t nib = vld1q_u8(sub + kq_nibbles(g) + 16 * c);
            const uint8x16_t ext = L.extra_bits == 0 ? nib : vld1q_u8(sub + kq_extra_plane(L, g) + 16 * c);
            uint8x16_t lo, hi;
            k_split(L, g, nib, ext, lo, hi);
            s[c] = vdotq_s32(s[c], vreinterpretq_s8_u8(lo), xg);
            s[4 + c] = vdotq_s32(s[4 + c], vreinterpretq_s8_u8(hi), xg);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) out[i] = s[i];
}

GLASS_NEON_DOT inline void matvec_int8_k(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                         bool accumulate) {
    const KQuantLayout& L = k_layout(w.type);
    static thread_local std::vector<float> x_sums;  // dx · Σ qx over each 16 inputs
    x_sums.resize(static_cast<size_t>(w.cols / 16));
    for (int i = 0; i < w.cols / 16; ++i)
        x_sums[size_t(i)] = x.scales[i / 2] * static_cast<float>(vaddlvq_s8(vld1q_s8(x.q + 16 * i)));
    for (int p = p0; p < p1; ++p) {
        float32x4_t acc[8];  // rows 4i .. 4i+3
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = vdupq_n_f32(0.0f);
        for (int s = 0; s < w.super_blocks(); ++s) {
            const std::uint8_t* super = w.super_block(p, s);
            for (int j = 0; j < kSuperBlock / kSubBlock; ++j) {
                const std::uint8_t* sub = super + L.sub_offset(j);
                const int b = s * (kSuperBlock / kSubBlock) + j;  // x's block
                const float dx = x.scales[b];
                for (int h = 0; h < 2; ++h) {
                    int32x4_t qqx[8];
                    k_piece_sdot(L, sub, h, x.q + b * kQuantBlock + 16 * h, qqx);
                    const float xs = x_sums[size_t(2 * b + h)];
#pragma GCC unroll 8
                    for (int i = 0; i < 8; ++i) {
                        const KScale4 sm = k_scales(L, super, sub, h, i);
                        acc[i] = vfmsq_n_f32(vfmaq_f32(acc[i], vmulq_n_f32(sm.s, dx), vcvtq_f32_s32(qqx[i])), sm.m, xs);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) store_rows(y + p * kPanel + 4 * i, acc[i], w.rows - p * kPanel - 4 * i, accumulate);
    }
}
#endif

// ---------------------------------------------------------------------------------------------
// Prefill: inputs [k0, k0 + kc) of panel p as fp32 weights, chunk[k − k0][32 rows]. k0 and kc
// are whole 16-input pieces (k-quant rows are whole super-blocks and kChunk a multiple of 16),
// so a chunk may start or end anywhere in a super-block. Per piece: w = S·q − M, and for Q6_K
// S·(q − 32) (M = 0): both exactly kq_weight's fp32 operations.
inline void unpack_k_chunk(const PackedMatrix& w, int p, int k0, int kc, float* chunk) {
    static_assert(kChunk % 16 == 0, "a prefill chunk is whole 16-input pieces");
    const KQuantLayout& L = k_layout(w.type);
    for (int k = k0; k < k0 + kc; k += 16) {
        const std::uint8_t* super = w.super_block(p, k / kSuperBlock);
        const std::uint8_t* sub = super + L.sub_offset(k % kSuperBlock / kSubBlock);
        const int h = k % kSubBlock / 16;
        KScale4 sm[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            sm[i] = k_scales(L, super, sub, h, i);
            if (!L.has_min) sm[i].m = vdupq_n_f32(0.0f);
        }
        const int8x16_t offset = vdupq_n_s8(L.has_min ? 0 : 32);
        for (int g = 4 * h; g < 4 * h + 4; ++g) {
            uint8x16_t lo[4], hi[4];
            k_group(L, sub, g, lo, hi);
            float* out = chunk + (k - k0 + 4 * (g - 4 * h)) * kPanel;
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) {
                float32x4_t q[8];  // q − offset of rows 4i .. 4i+3, exact
                widen_int8(vsubq_s8(vreinterpretq_s8_u8(lo[t]), offset), q);
                widen_int8(vsubq_s8(vreinterpretq_s8_u8(hi[t]), offset), q + 4);
#pragma GCC unroll 8
                for (int i = 0; i < 8; ++i) vst1q_f32(out + kPanel * t + 4 * i, vsubq_f32(vmulq_f32(sm[i].s, q[i]), sm[i].m));
            }
        }
    }
}

// ---- The table's entries: k-quant panels here, every other type in kernels_neon.hpp ----------
inline void matvec_all(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    if (is_k_quant(w.type)) return matvec_k(w, x, y, p0, p1, accumulate);
    matvec(w, x, y, p0, p1, accumulate);
}
#if defined(GLASS_NEON_DOT)
GLASS_NEON_DOT inline void matvec_int8_all(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1,
                                           bool accumulate) {
    if (is_k_quant(w.type)) return matvec_int8_k(w, x, y, p0, p1, accumulate);
    matvec_int8(w, x, y, p0, p1, accumulate);
}
#endif
inline void matmul_all(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                       bool accumulate, float* scratch) {
    if (is_k_quant(w.type)) return matmul_with(unpack_k_chunk, w, xp, n, y, ldy, p0, p1, accumulate, scratch);
    matmul(w, xp, n, y, ldy, p0, p1, accumulate, scratch);
}

}  // namespace glass::fast::neon

#endif  // __aarch64__
