/// \file
/// \brief glass/fast/packed_kquants.hpp — Q4_K, Q5_K and Q6_K matrices in 32-row panels: the
/// file's own integers and scales, moved so that 32 rows are read side by side.
/// ```text
/// In:  a matrix stored as ggml k-quant super-blocks (ggml_quants.hpp), one row after another.
/// Out: the same integers, the same 6-bit (Q6_K: 8-bit) sub-block scales and the same fp16 d
///      (and dmin), rearranged into panels of 32 rows like every other panel type
///      (packed_weights.hpp). Nothing is rounded again: the fast path multiplies exactly the
///      weights a file holds, and reads about as many bytes as the file has.
///
/// One panel, per super-block of 256 inputs (a row of the matrix is a whole number of them):
///
///   [d: fp16 × 32 rows] [dmin: fp16 × 32 rows]          header: 128 B (Q6_K: no dmin, 64 B)
///   then 8 sub-blocks of 32 inputs, each
///     [scales: 64 B] [nibbles: 512 B] [extra bits: 128 B per extra bit]
///        scales   Q4_K, Q5_K: sc (6 bits) of rows 0..31, then m (6 bits) of rows 0..31
///                 Q6_K:       int8 scale of inputs 0..15 of rows 0..31, then of inputs 16..31
///        nibbles  the low 4 bits of q, exactly Q4_0's panel layout (q4_offset): 8 groups of 4
///                 inputs, each [16 bytes × 4 inputs], byte = row i's nibble | row i+16's << 4
///        extra    the bits above the nibble, e per weight (Q5_K e = 1, Q6_K e = 2): byte j of
///                 a group's 64 nibble bytes has 2e more bits (e for row i, then e for row
///                 i+16), found in byte j of plane g·e/4, at bit 2e·(g mod 4/e)
///
///   bytes per super-block and panel:  Q4_K 4736 (4.63 bits a weight; the file: 4.5)
///                                     Q5_K 5760 (5.63; the file: 5.5)
///                                     Q6_K 6720 (6.56; the file: 6.56)
///   (the file keeps sc and m in 6 bits; a byte each here costs 1/8 bit a weight and saves the
///   unpacking in every product.)
///
/// A weight, with ggml's fp32 operations in ggml's order (so unpacking is bit-exact):
///   Q4_K, Q5_K   w = (d·sc)·q − (dmin·m)           q in 0..15 / 0..31, sc and m per 32 inputs
///   Q6_K         w = (d·sc)·(q − 32)                q in 0..63, sc per 16 inputs
/// Both are "scale times an unsigned integer, minus a per-row offset" over each 16 inputs:
///   Σ_k w_k·x_k = Σ_half [ S·Σ q_k·x_k − M·Σ x_k ],   S = d·sc,  M = dmin·m  (Q6_K: M = 32·S)
/// which is how the kernels compute it: integer q times x (fp32, or int8 with integer dot
/// products), then two fp32 multiplies per 16 inputs and row, Σx shared by all the rows.
/// ```
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "glass/errors.hpp"
#include "glass/ggml_quants.hpp"
#include "glass/quantize.hpp"

namespace glass::fast {

constexpr int kSuperBlock = 256;  // inputs per k-quant super-block (one d, one dmin)
constexpr int kSubBlock = 32;     // inputs per panel sub-block (Q6_K: two scales of 16 each)

/// The shape of one k-quant panel type.
struct KQuantLayout {
    int extra_bits;  // bits of q above the nibble: 0 (Q4_K), 1 (Q5_K), 2 (Q6_K)
    bool has_min;    // Q4_K, Q5_K: w = d·sc·q − dmin·m; Q6_K: w = d·sc·(q − 32)
    int header_bytes() const { return has_min ? 128 : 64; }
    int sub_bytes() const { return 64 + 512 + 128 * extra_bits; }
    int super_bytes() const { return header_bytes() + 8 * sub_bytes(); }
    // Sub-block j (< 8) of a super-block, from the super-block's start.
    int sub_offset(int j) const { return header_bytes() + j * sub_bytes(); }
};
inline constexpr KQuantLayout kQ4KLayout{0, true}, kQ5KLayout{1, true}, kQ6KLayout{2, false};

/// Within a sub-block: where group g's (inputs 4g .. 4g+3) nibble bytes and extra bits sit, and
/// the shift of row i's extra bits in a plane byte (row i + 16's are e bits higher).
inline int kq_nibbles(int g) { return 64 + 64 * g; }
inline int kq_extra_plane(const KQuantLayout& L, int g) { return 64 + 512 + 64 * (g * L.extra_bits / 4); }
inline int kq_extra_shift(const KQuantLayout& L, int g) { return 2 * L.extra_bits * (g % (4 / L.extra_bits)); }

/// One row's super-block as integers: what the file holds, before it is placed in a panel.
struct KIntegers {
    std::uint16_t d = 0, dmin = 0;  // fp16 bits, copied
    int sc[16] = {};                // Q4_K/Q5_K: sc[0..8) per 32 inputs; Q6_K: sc[0..16) per 16
    int m[8] = {};                  // Q4_K/Q5_K: the mins
    std::uint8_t q[256] = {};       // unsigned: 0..15, 0..31, 0..63
};

/// A file's super-block (`type` Q4_K, Q5_K or Q6_K, ggml_quants.hpp's layouts) -> its integers.
inline KIntegers read_k_integers(GgmlType type, const std::uint8_t* b) {
    KIntegers k;
    if (type == GgmlType::q6_k) {
        const std::uint8_t *ql = b, *qh = b + 128;
        std::memcpy(&k.d, b + 208, 2);
        for (int s = 0; s < 16; ++s) k.sc[s] = static_cast<std::int8_t>(b[192 + s]);
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; ++l) {  // the four quarters of half h (ggml_quants.hpp)
                const int hi = qh[32 * h + l];
                k.q[128 * h + l] = static_cast<std::uint8_t>((ql[64 * h + l] & 0x0F) | ((hi & 3) << 4));
                k.q[128 * h + 32 + l] = static_cast<std::uint8_t>((ql[64 * h + 32 + l] & 0x0F) | (((hi >> 2) & 3) << 4));
                k.q[128 * h + 64 + l] = static_cast<std::uint8_t>((ql[64 * h + l] >> 4) | (((hi >> 4) & 3) << 4));
                k.q[128 * h + 96 + l] = static_cast<std::uint8_t>((ql[64 * h + 32 + l] >> 4) | (((hi >> 6) & 3) << 4));
            }
        return k;
    }
    const bool fifth_bit = type == GgmlType::q5_k;
    std::memcpy(&k.d, b, 2);
    std::memcpy(&k.dmin, b + 2, 2);
    for (int s = 0; s < 8; ++s) ggml_blocks::k_scale_min(b + 4, s, k.sc[s], k.m[s]);
    const std::uint8_t* qh = b + 16;
    const std::uint8_t* qs = b + (fifth_bit ? 48 : 16);
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {  // chunk c: sub-block 2c in the low nibbles, 2c + 1 high
            k.q[64 * c + l] = static_cast<std::uint8_t>((qs[32 * c + l] & 0x0F) | (fifth_bit ? ((qh[l] >> (2 * c)) & 1) << 4 : 0));
            k.q[64 * c + 32 + l] = static_cast<std::uint8_t>((qs[32 * c + l] >> 4) | (fifth_bit ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0));
        }
    return k;
}

/// Writes one row's super-block into row `lane` (< 32) of a panel's super-block at `dest`
/// (the bytes of other rows are left as they are).
inline void put_k_integers(const KQuantLayout& L, const KIntegers& k, int lane, std::uint8_t* dest) {
    std::memcpy(dest + 2 * lane, &k.d, 2);
    if (L.has_min) std::memcpy(dest + 64 + 2 * lane, &k.dmin, 2);
    const bool high = lane >= 16;
    for (int j = 0; j < 8; ++j) {
        std::uint8_t* sub = dest + L.sub_offset(j);
        if (L.has_min) {
            sub[lane] = static_cast<std::uint8_t>(k.sc[j]);
            sub[32 + lane] = static_cast<std::uint8_t>(k.m[j]);
        } else {
            sub[lane] = static_cast<std::uint8_t>(static_cast<std::int8_t>(k.sc[2 * j]));
            sub[32 + lane] = static_cast<std::uint8_t>(static_cast<std::int8_t>(k.sc[2 * j + 1]));
        }
        for (int kk = 0; kk < kSubBlock; ++kk) {
            const int q = k.q[kSubBlock * j + kk], g = kk / 4, at = (lane % 16) * 4 + kk % 4;
            std::uint8_t& byte = sub[kq_nibbles(g) + at];
            byte = static_cast<std::uint8_t>(high ? (byte & 0x0F) | (q & 0x0F) << 4 : (byte & 0xF0) | (q & 0x0F));
            if (L.extra_bits == 0) continue;
            const int shift = kq_extra_shift(L, g) + (high ? L.extra_bits : 0);
            sub[kq_extra_plane(L, g) + at] = static_cast<std::uint8_t>(sub[kq_extra_plane(L, g) + at] | (q >> 4) << shift);
        }
    }
}

/// The integer q of row `lane`, input kk (< 32) of a panel sub-block: the plain definition of
/// the layout the kernels unpack with shifts and masks.
inline int kq_integer(const KQuantLayout& L, const std::uint8_t* sub, int kk, int lane) {
    const int g = kk / 4, at = (lane % 16) * 4 + kk % 4;
    const bool high = lane >= 16;
    const int nibble = high ? sub[kq_nibbles(g) + at] >> 4 : sub[kq_nibbles(g) + at] & 0x0F;
    if (L.extra_bits == 0) return nibble;
    const int shift = kq_extra_shift(L, g) + (high ? L.extra_bits : 0);
    return nibble | ((sub[kq_extra_plane(L, g) + at] >> shift) & ((1 << L.extra_bits) - 1)) << 4;
}

/// S and M of row `lane` for inputs [16h, 16h + 16) of sub-block j of a panel super-block:
/// w = S·q − M (see the file comment), each an exact fp32 product as ggml forms it.
struct KScaleMin {
    float scale, min;
};
inline KScaleMin kq_scale_min(const KQuantLayout& L, const std::uint8_t* super, int j, int h, int lane) {
    const float d = ggml_blocks::half_at(super + 2 * lane);
    const std::uint8_t* sub = super + L.sub_offset(j);
    if (!L.has_min) {
        const float s = d * static_cast<float>(static_cast<std::int8_t>(sub[32 * h + lane]));
        return {s, 32.0f * s};
    }
    const float dmin = ggml_blocks::half_at(super + 64 + 2 * lane);
    return {d * static_cast<float>(sub[lane]), dmin * static_cast<float>(sub[32 + lane])};
}

/// Weight (lane, k) of a panel super-block, k < 256, computed exactly as ggml's dequantization.
inline float kq_weight(const KQuantLayout& L, const std::uint8_t* super, int lane, int k) {
    const int j = k / kSubBlock, kk = k % kSubBlock;
    const int q = kq_integer(L, super + L.sub_offset(j), kk, lane);
    const KScaleMin sm = kq_scale_min(L, super, j, kk / 16, lane);
    if (!L.has_min) return sm.scale * static_cast<float>(q - 32);
    return sm.scale * static_cast<float>(q) - sm.min;
}

/// Σ x over each run of `piece` inputs of x[0..cols) (cols a multiple of piece): the M term's
/// factor, the same for every row of a product, so the kernels compute it once per call. Kept
/// in a per-thread buffer that only grows: decode allocates nothing once it has seen the widest
/// row. `Sum`: float for fp32 x, std::int32_t for int8 x (exact).
template <class Sum, class X>
inline const Sum* piece_sums(const X* x, int cols, int piece) {
    static thread_local std::vector<Sum> sums;
    sums.resize(static_cast<size_t>(cols / piece));
    for (int i = 0; i < cols / piece; ++i) {
        Sum s = 0;
        for (int k = piece * i; k < piece * (i + 1); ++k) s += x[k];
        sums[static_cast<size_t>(i)] = s;
    }
    return sums.data();
}

}  // namespace glass::fast
