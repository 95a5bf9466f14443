/// \file
/// \brief glass/ggml_quants.hpp — the quantized blocks of the files people download (llama.cpp's
/// ggml types): Q8_0 and Q4_0, the "legacy" Q4_1, Q5_0, Q5_1, and the k-quants Q4_K, Q5_K, Q6_K
/// that Q4_K_M / Q5_K_M files are made of, read to fp32 (written: ggml_quants_write.hpp).
/// ```text
/// quantize.hpp teaches the idea with glass's own two formats: blocks of 32 weights, one fp16
/// scale d each, w ≈ d·q. The formats below are the same idea with three refinements, each of
/// which buys accuracy for a few more bits:
///
///  1. an offset (a "min"): w ≈ d·q + m, so a block whose weights are all positive does not waste
///     half its levels on negative values (Q4_1, Q5_1; the k-quants' −dmin·m);
///  2. a fifth (or sixth) bit stored apart from the nibbles, so the nibbles stay two to a byte
///     (Q5_0, Q5_1, Q5_K: one bit per weight in qh; Q6_K: two);
///  3. two levels of scales (the k-quants): a super-block of 256 weights keeps ONE fp16 scale d
///     and cuts itself into 8 sub-blocks of 32 (or 16 of 16) whose own scales are small integers
///     (6 or 8 bits) multiplied by d — a scale of scales. The scales cost 6 bits per 32 weights
///     instead of 16, which is how Q4_K stores 4.5 bits per weight where Q4_1 stores 5.
///
/// Byte layouts (little-endian; "d" and "m" are fp16; one row of a matrix is a whole number of
/// blocks, block after block):
///
///   Q8_0  34 B / 32 w   [d][q0 .. q31: int8]                               w = d·q
///   Q4_0  18 B / 32 w   [d][16 B: byte j = q_j | q_{j+16} << 4]            w = d·(q − 8)
///   Q4_1  20 B / 32 w   [d][m][16 B as Q4_0]                               w = d·q + m
///   Q5_0  22 B / 32 w   [d][qh: 4 B][16 B as Q4_0]                         w = d·(q − 16)
///   Q5_1  24 B / 32 w   [d][m][qh: 4 B][16 B as Q4_0]                      w = d·q + m
///         q = nibble | (bit j of the 32-bit qh) << 4: bit j for weight j, bit j + 16 for j + 16.
///
///   Q4_K  144 B / 256 w  [d][dmin][scales: 12 B][qs: 128 B]
///         8 sub-blocks of 32, each with a 6-bit scale sc_s and a 6-bit min m_s, packed in 12 B:
///           byte  0..3 : sc_0..sc_3  (low 6 bits) | top 2 bits of sc_4..sc_7
///           byte  4..7 : m_0..m_3    (low 6 bits) | top 2 bits of m_4..m_7
///           byte  8..11: low 4 bits of sc_4..sc_7 | low 4 bits of m_4..m_7 << 4
///         qs: 4 chunks of 32 bytes; chunk c holds sub-block 2c in its low nibbles and 2c + 1 in
///         its high nibbles.                                  w = d·sc_s·q − dmin·m_s,  q in 0..15
///   Q5_K  176 B / 256 w  [d][dmin][scales: 12 B][qh: 32 B][qs: 128 B]
///         as Q4_K, plus a fifth bit: bit 2c of qh[l] for weight l of sub-block 2c, bit 2c + 1
///         for weight l of sub-block 2c + 1.                  w = d·sc_s·q − dmin·m_s,  q in 0..31
///   Q6_K  210 B / 256 w  [ql: 128 B][qh: 64 B][scales: 16 int8][d]   (d LAST)
///         16 sub-blocks of 16, each with an int8 scale. Two halves of 128 weights; in half h,
///         weight l (< 32) of each quarter comes from:
///           quarter 0: ql[64h + l]      low 4 bits, qh[32h + l] bits 0-1
///           quarter 1: ql[64h + l + 32] low 4 bits, qh[32h + l] bits 2-3
///           quarter 2: ql[64h + l]      high 4 bits, qh[32h + l] bits 4-5
///           quarter 3: ql[64h + l + 32] high 4 bits, qh[32h + l] bits 6-7
///                                                             w = d·scale_s·(q − 32),  q in 0..63
///
/// Bits per weight: Q8_0 8.5, Q6_K 6.5625, Q5_1 6, Q5_K 5.5, Q5_0 5.5, Q4_1 5, Q4_K 4.5, Q4_0 4.5.
///
/// Reading is exact: ggml_to_float computes each weight with the same fp32 operations, in the
/// same order, as ggml's dequantize_row_* (ctest llama_cpp_families checks it bit for bit
/// against llama.cpp's own gguf-py on random and extreme blocks). Writing (ggml_from_float) is
/// ggml_quants_write.hpp's.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "glass/errors.hpp"
#include "glass/half.hpp"

namespace glass {

/// ggml's tensor types (ggml.h's enum ggml_type), as GGUF stores them.
enum class GgmlType : std::uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
    q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15,
    iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22, iq4_xs = 23,
    i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
};

/// "F32", "Q4_K", ... (llama.cpp's names); "type N" for a number ggml does not define.
inline std::string ggml_type_name(std::uint32_t t) {
    static const std::map<std::uint32_t, const char*> names = {
        {0, "F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {6, "Q5_0"}, {7, "Q5_1"}, {8, "Q8_0"}, {9, "Q8_1"},
        {10, "Q2_K"}, {11, "Q3_K"}, {12, "Q4_K"}, {13, "Q5_K"}, {14, "Q6_K"}, {15, "Q8_K"}, {16, "IQ2_XXS"},
        {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
        {23, "IQ4_XS"}, {24, "I8"}, {25, "I16"}, {26, "I32"}, {27, "I64"}, {28, "F64"}, {29, "IQ1_M"}, {30, "BF16"},
    };
    const auto it = names.find(t);
    return it == names.end() ? "type " + std::to_string(t) : it->second;
}
inline std::string ggml_type_name(GgmlType t) { return ggml_type_name(static_cast<std::uint32_t>(t)); }

/// The types glass reads and writes, as a list for error messages.
inline const char* ggml_supported_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"; }

/// Weights per block and bytes per block of a type glass reads; {0, 0} for the others.
struct GgmlBlock {
    int weights = 0;
    int bytes = 0;
};
inline GgmlBlock ggml_block_of(std::uint32_t t) {
    switch (static_cast<GgmlType>(t)) {
        case GgmlType::f32: return {1, 4};
        case GgmlType::f16: case GgmlType::bf16: return {1, 2};
        case GgmlType::q8_0: return {32, 34};
        case GgmlType::q4_0: return {32, 18};
        case GgmlType::q4_1: return {32, 20};
        case GgmlType::q5_0: return {32, 22};
        case GgmlType::q5_1: return {32, 24};
        case GgmlType::q4_k: return {256, 144};
        case GgmlType::q5_k: return {256, 176};
        case GgmlType::q6_k: return {256, 210};
        default: return {};
    }
}
inline GgmlBlock ggml_block_of(GgmlType t) { return ggml_block_of(static_cast<std::uint32_t>(t)); }

/// Bytes of `count` weights stored as type `t` (count a multiple of its block; checked by the caller).
inline std::int64_t ggml_bytes(std::uint32_t t, std::int64_t count) {
    const GgmlBlock b = ggml_block_of(t);
    return count / b.weights * b.bytes;
}
inline double ggml_bits_per_weight(std::uint32_t t) {
    const GgmlBlock b = ggml_block_of(t);
    return b.weights ? 8.0 * b.bytes / b.weights : 0.0;
}

namespace ggml_blocks {

using u8 = std::uint8_t;

inline float half_at(const u8* p) {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return fp16_to_fp32(v);
}
inline void put_half(u8* p, float x) {
    const std::uint16_t v = fp32_to_fp16(x);
    std::memcpy(p, &v, 2);
}
/// The fifth bits of Q5_0/Q5_1: a little-endian 32-bit word, bit j for weight j.
inline std::uint32_t u32_at(const u8* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// ---- reading: one block -> its weights, ggml's fp32 operations in ggml's order -----------------

/// Q4_0, Q4_1, Q5_0, Q5_1: blocks of 32. `has_min`: a fp16 m after d; `fifth_bit`: 4 bytes of qh.
inline void read_block32(const u8* b, bool has_min, bool fifth_bit, float* y) {
    const float d = half_at(b);
    const float m = has_min ? half_at(b + 2) : 0.0f;
    const u8* p = b + (has_min ? 4 : 2);
    const std::uint32_t qh = fifth_bit ? u32_at(p) : 0;
    const u8* qs = p + (fifth_bit ? 4 : 0);
    for (int j = 0; j < 16; ++j) {
        int q0 = qs[j] & 0x0F, q1 = qs[j] >> 4;
        if (fifth_bit) {
            q0 |= static_cast<int>((qh >> j) & 1) << 4;
            q1 |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
        }
        if (has_min) {  // w = d·q + m
            y[j] = static_cast<float>(q0) * d + m;
            y[j + 16] = static_cast<float>(q1) * d + m;
        } else {        // w = d·(q − 8) or d·(q − 16): the offset makes q signed
            const int offset = fifth_bit ? 16 : 8;
            y[j] = static_cast<float>(q0 - offset) * d;
            y[j + 16] = static_cast<float>(q1 - offset) * d;
        }
    }
}

/// Sub-block s (< 8) of a Q4_K/Q5_K super-block: its 6-bit scale and min from the 12 packed bytes.
inline void k_scale_min(const u8* scales, int s, int& sc, int& m) {
    if (s < 4) {
        sc = scales[s] & 63;
        m = scales[s + 4] & 63;
    } else {
        sc = (scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4);
        m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
    }
}

/// Q4_K (fifth_bit false) or Q5_K (true): 256 weights.
inline void read_q45_k(const u8* b, bool fifth_bit, float* y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const u8* scales = b + 4;
    const u8* qh = b + 16;                    // Q5_K only
    const u8* qs = b + (fifth_bit ? 48 : 16);
    for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
        int sc0, m0, sc1, m1;
        k_scale_min(scales, 2 * c, sc0, m0);
        k_scale_min(scales, 2 * c + 1, sc1, m1);
        const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
        const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
        for (int l = 0; l < 32; ++l) {
            int q0 = qs[32 * c + l] & 0x0F, q1 = qs[32 * c + l] >> 4;
            if (fifth_bit) {
                q0 += ((qh[l] >> (2 * c)) & 1) << 4;
                q1 += ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            y[64 * c + l] = d0 * static_cast<float>(q0) - min0;
            y[64 * c + 32 + l] = d1 * static_cast<float>(q1) - min1;
        }
    }
}

/// Q6_K: 256 weights (the layout's quarters: see the file comment).
inline void read_q6_k(const u8* b, float* y) {
    const u8* ql = b;
    const u8* qh = b + 128;
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
    const float d = half_at(b + 208);
    for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
            const int sub = 8 * h + l / 16;  // sub-block of quarter 0; quarters add 2 each
            const u8 lo_a = ql[64 * h + l], lo_b = ql[64 * h + l + 32], hi = qh[32 * h + l];
            const int q[4] = {(lo_a & 0x0F) | ((hi & 3) << 4), (lo_b & 0x0F) | (((hi >> 2) & 3) << 4),
                              (lo_a >> 4) | (((hi >> 4) & 3) << 4), (lo_b >> 4) | (((hi >> 6) & 3) << 4)};
            for (int quarter = 0; quarter < 4; ++quarter)
                y[128 * h + 32 * quarter + l] =
                    d * static_cast<float>(scales[sub + 2 * quarter]) * static_cast<float>(q[quarter] - 32);
        }
    }
}

}  // namespace ggml_blocks

/// Dequantizes `count` weights of type `t` at `src` into `dst`, exactly as ggml's to_float does.
inline void ggml_to_float(std::uint32_t t, const char* src, std::int64_t count, float* dst) {
    using namespace ggml_blocks;
    const auto* s = reinterpret_cast<const u8*>(src);
    const GgmlBlock blk = ggml_block_of(t);
    if (blk.weights == 0) fail("tensor type ", ggml_type_name(t), " cannot be dequantized (", ggml_supported_types(), ")");
    switch (static_cast<GgmlType>(t)) {  // the plain types: one tight loop, no per-weight dispatch
        case GgmlType::f32: std::memcpy(dst, src, static_cast<size_t>(count) * 4); return;
        case GgmlType::f16:
            for (std::int64_t i = 0; i < count; ++i) dst[i] = half_at(s + 2 * i);
            return;
        case GgmlType::bf16:
            for (std::int64_t i = 0; i < count; ++i) {
                const std::uint32_t bits = std::uint32_t{s[2 * i]} << 16 | std::uint32_t{s[2 * i + 1]} << 24;  // fp32's top half
                std::memcpy(dst + i, &bits, 4);
            }
            return;
        default: break;  // blocks, below
    }
    for (std::int64_t i = 0; i < count / blk.weights; ++i) {
        const u8* b = s + i * blk.bytes;
        float* y = dst + i * blk.weights;
        switch (static_cast<GgmlType>(t)) {
            case GgmlType::q8_0: {
                const float d = half_at(b);
                for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(b[2 + j]));
                break;
            }
            case GgmlType::q4_0: read_block32(b, false, false, y); break;
            case GgmlType::q4_1: read_block32(b, true, false, y); break;
            case GgmlType::q5_0: read_block32(b, false, true, y); break;
            case GgmlType::q5_1: read_block32(b, true, true, y); break;
            case GgmlType::q4_k: read_q45_k(b, false, y); break;
            case GgmlType::q5_k: read_q45_k(b, true, y); break;
            case GgmlType::q6_k: read_q6_k(b, y); break;
            default: break;
        }
    }
}

}  // namespace glass
