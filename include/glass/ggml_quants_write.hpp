/// \file
/// \brief glass/ggml_quants_write.hpp — fp32 weights into ggml's blocks (ggml_quants.hpp draws
/// them and reads them back), and which type each matrix of a Q4_K_M / Q5_K_M file gets.
/// ```text
/// In:  fp32 weights, a whole number of the type's blocks; for a file, its type name ("Q4_K_M").
/// Out: the blocks, byte for byte as ggml lays them out, and ggml_file_tensor_type's choice.
///
/// The rules are simpler than llama.cpp's quantizers, which search for the best scale: min/max
/// per block or sub-block, sub-block scales rounded UP to their stored width (so a step still
/// spans its range), then each q rounded with the scale and min as they will be read back. Every
/// weight's error is then half a step of its (sub-)block, plus half of dmin for the k-quants'
/// rounded mins and fp16's rounding of d and m (tests/test_ggml_quants.cpp checks these
/// bounds); llama.cpp's search does somewhat better.
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
#include "glass/ggml_quants.hpp"
#include "glass/half.hpp"

namespace glass {

namespace ggml_blocks {

// ---- writing: weights -> one block (min/max rules; see the file comment) -----------------------

/// Rounds v to an integer in [lo, hi] (ties to even, as nearbyint does).
inline int round_clamped(float v, int lo, int hi) {
    if (!(v == v)) return lo;  // NaN (0/0 of an all-zero block) -> lo
    return static_cast<int>(std::clamp(std::nearbyint(v), float(lo), float(hi)));
}
/// The smallest integer ≥ v, at most hi: a sub-block scale rounded UP, so that its step still
/// spans the sub-block's range (rounding it down would clamp the extreme weights).
inline int round_up_clamped(float v, int hi) { return static_cast<int>(std::min(std::ceil(v), float(hi))); }
inline void check_finite(const float* x, int n) {
    for (int i = 0; i < n; ++i)
        if (!std::isfinite(x[i])) fail("quantizing: weight ", i, " of a block is ", x[i]);
}

/// Q4_0 / Q5_0 (symmetric: d = max |x| / (2^(bits−1) − 1)) and Q4_1 / Q5_1 (d = (max − min) /
/// (2^bits − 1), m = min). q is computed with d and m as read back (fp16).
inline void write_block32(const float* x, bool has_min, bool fifth_bit, u8* b) {
    check_finite(x, 32);
    const int levels = fifth_bit ? 32 : 16;
    float lo = x[0], hi = x[0], amax = 0.0f;
    for (int j = 0; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]), amax = std::max(amax, std::fabs(x[j]));
    put_half(b, has_min ? (hi - lo) / float(levels - 1) : amax / float(levels / 2 - 1));
    if (has_min) put_half(b + 2, lo);
    const float d = half_at(b), m = has_min ? half_at(b + 2) : 0.0f;
    const int offset = has_min ? 0 : levels / 2;
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = d > 0 ? round_clamped((x[j] - m) / d, -offset, levels - 1 - offset) + offset : offset;
    u8* p = b + (has_min ? 4 : 2);
    std::uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<std::uint32_t>(q[j] >> 4) << j;
    if (fifth_bit) std::memcpy(p, &qh, 4), p += 4;
    for (int j = 0; j < 16; ++j) p[j] = static_cast<u8>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

/// Q4_K / Q5_K: per sub-block of 32, scale_s = (max − min') / (levels − 1) and min_s = −min'
/// (min' = min(min, 0): the format subtracts a non-negative min); d = max scale_s / 63,
/// dmin = max min_s / 63; sc_s rounded up (the step must span the range), m_s to nearest; q with
/// d·sc_s and dmin·m_s as read back. Error ≤ half a step + half of dmin.
inline void write_q45_k(const float* x, bool fifth_bit, u8* b) {
    check_finite(x, 256);
    const int levels = fifth_bit ? 32 : 16;
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 8; ++s) {
        float lo = 0.0f, hi = x[32 * s];
        for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * s + l]), hi = std::max(hi, x[32 * s + l]);
        scale[s] = (hi - lo) / float(levels - 1);
        min[s] = -lo;
        max_scale = std::max(max_scale, scale[s]);
        max_min = std::max(max_min, min[s]);
    }
    put_half(b, max_scale / 63.0f);
    put_half(b + 2, max_min / 63.0f);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc[8], m[8];
    for (int s = 0; s < 8; ++s) {
        sc[s] = d > 0 ? round_up_clamped(scale[s] / d, 63) : 0;
        m[s] = dmin > 0 ? round_clamped(min[s] / dmin, 0, 63) : 0;
    }
    u8* scales = b + 4;
    for (int j = 0; j < 4; ++j) {
        scales[j] = static_cast<u8>(sc[j] | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = static_cast<u8>(m[j] | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = static_cast<u8>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
    u8* qh = b + 16;
    u8* qs = b + (fifth_bit ? 48 : 16);
    if (fifth_bit) std::memset(qh, 0, 32);
    for (int s = 0; s < 8; ++s) {
        const float step = d * static_cast<float>(sc[s]), offset = dmin * static_cast<float>(m[s]);
        for (int l = 0; l < 32; ++l) {
            const int q = step > 0 ? round_clamped((x[32 * s + l] + offset) / step, 0, levels - 1) : 0;
            u8& byte = qs[32 * (s / 2) + l];
            byte = static_cast<u8>(s % 2 == 0 ? (byte & 0xF0) | (q & 0x0F) : (byte & 0x0F) | ((q & 0x0F) << 4));
            if (fifth_bit) qh[l] = static_cast<u8>(qh[l] | ((q >> 4) << s));
        }
    }
}

/// Q6_K: per sub-block of 16, scale_s = max |x| / 31 (q − 32 in −31 .. 31); d = max scale_s /
/// 127; the int8 scales rounded up; q with d·scale_s as read back. Error ≤ half a step.
inline void write_q6_k(const float* x, u8* b) {
    check_finite(x, 256);
    float scale[16], max_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
        float amax = 0.0f;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
        scale[s] = amax / 31.0f;
        max_scale = std::max(max_scale, scale[s]);
    }
    put_half(b + 208, max_scale / 127.0f);
    const float d = half_at(b + 208);
    auto* scales = reinterpret_cast<std::int8_t*>(b + 192);
    int q[256];
    for (int s = 0; s < 16; ++s) {
        scales[s] = static_cast<std::int8_t>(d > 0 ? round_up_clamped(scale[s] / d, 127) : 0);
        const float step = d * static_cast<float>(scales[s]);
        for (int l = 0; l < 16; ++l) q[16 * s + l] = (step > 0 ? round_clamped(x[16 * s + l] / step, -32, 31) : 0) + 32;
    }
    u8* ql = b;
    u8* qh = b + 128;
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const int* w = q + 128 * h + l;  // quarters at w[0], w[32], w[64], w[96]
            ql[64 * h + l] = static_cast<u8>((w[0] & 0x0F) | ((w[64] & 0x0F) << 4));
            ql[64 * h + l + 32] = static_cast<u8>((w[32] & 0x0F) | ((w[96] & 0x0F) << 4));
            qh[32 * h + l] = static_cast<u8>((w[0] >> 4) | ((w[32] >> 4) << 2) | ((w[64] >> 4) << 4) | ((w[96] >> 4) << 6));
        }
}

inline void write_q8_0(const float* x, u8* b) {
    check_finite(x, 32);
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    put_half(b, amax / 127.0f);
    const float d = half_at(b);
    for (int j = 0; j < 32; ++j)
        b[2 + j] = static_cast<u8>(static_cast<std::int8_t>(d > 0 ? round_clamped(x[j] / d, -127, 127) : 0));
}

}  // namespace ggml_blocks

/// Quantizes `count` fp32 weights (a multiple of the type's block) into `dst`
/// (ggml_bytes(t, count) bytes), with the rules in the file comment.
inline void ggml_from_float(std::uint32_t t, const float* src, std::int64_t count, char* dst) {
    using namespace ggml_blocks;
    const GgmlBlock blk = ggml_block_of(t);
    if (blk.weights == 0) fail("cannot quantize to ", ggml_type_name(t), " (", ggml_supported_types(), ")");
    if (count % blk.weights != 0) fail("cannot quantize ", count, " weights to ", ggml_type_name(t), ": not whole blocks of ", blk.weights);
    auto* d = reinterpret_cast<u8*>(dst);
    for (std::int64_t i = 0; i < count / blk.weights; ++i) {
        const float* x = src + i * blk.weights;
        u8* b = d + i * blk.bytes;
        switch (static_cast<GgmlType>(t)) {
            case GgmlType::f32: std::memcpy(b, x, 4); break;
            case GgmlType::f16: put_half(b, x[0]); break;
            case GgmlType::bf16: {
                const std::uint16_t v = fp32_to_bf16(x[0]);
                std::memcpy(b, &v, 2);
                break;
            }
            case GgmlType::q8_0: write_q8_0(x, b); break;
            case GgmlType::q4_0: write_block32(x, false, false, b); break;
            case GgmlType::q4_1: write_block32(x, true, false, b); break;
            case GgmlType::q5_0: write_block32(x, false, true, b); break;
            case GgmlType::q5_1: write_block32(x, true, true, b); break;
            case GgmlType::q4_k: write_q45_k(x, false, b); break;
            case GgmlType::q5_k: write_q45_k(x, true, b); break;
            case GgmlType::q6_k: write_q6_k(x, b); break;
            default: break;
        }
    }
}

/// The weights a stored block stands for: `count` fp32 weights written as type `t`, read back.
inline std::vector<float> ggml_round_trip(std::uint32_t t, const float* x, std::int64_t count) {
    std::vector<char> blocks(static_cast<size_t>(ggml_bytes(t, count)));
    ggml_from_float(t, x, count, blocks.data());
    std::vector<float> back(static_cast<size_t>(count));
    ggml_to_float(t, blocks.data(), count, back.data());
    return back;
}

/// \brief The type of one matrix in a file of `file_type`, as llama-quantize (llama-quant.cpp)
/// chooses it. Pure files ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K") store every matrix in
/// that type; the mixes give more bits where the error costs most:
///   Q4_K_M / Q5_K_M: output.weight (and token_embd.weight when the output is tied to it) in
///   Q6_K; attn_v and ffn_down in Q6_K on the layers where use_more_bits holds — the first and
///   last eighth of the layers and every third one between — and Q4_K / Q5_K everywhere else.
/// A row whose length is not whole super-blocks of 256 falls back to a 32-block type (Q4_K ->
/// Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), as llama.cpp does for e.g. Qwen2.5 0.5B's rows of 896.
/// `layer` is the tensor's block number (-1 for token_embd and output). Norms and other 1-D
/// tensors stay F32 in every file; this function is for the matrices.
inline GgmlType ggml_file_tensor_type(const std::string& file_type, const std::string& tensor, int layer, int n_layers,
                                      bool tied_output, std::int64_t row_length) {
    static const std::map<std::string, GgmlType> pure = {
        {"Q8_0", GgmlType::q8_0}, {"Q4_0", GgmlType::q4_0}, {"Q4_1", GgmlType::q4_1}, {"Q5_0", GgmlType::q5_0},
        {"Q5_1", GgmlType::q5_1}, {"Q6_K", GgmlType::q6_k}, {"F16", GgmlType::f16}, {"F32", GgmlType::f32}};
    GgmlType t;
    if (const auto it = pure.find(file_type); it != pure.end()) {
        t = it->second;
    } else if (file_type == "Q4_K_M" || file_type == "Q5_K_M") {
        const auto ends_with = [&](const char* s) {
            const std::string suffix = s;
            return tensor.size() >= suffix.size() && tensor.compare(tensor.size() - suffix.size(), suffix.size(), suffix) == 0;
        };
        const bool more_bits = layer >= 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2);
        t = file_type == "Q4_K_M" ? GgmlType::q4_k : GgmlType::q5_k;
        if (tensor == "output.weight" || (tensor == "token_embd.weight" && tied_output)) t = GgmlType::q6_k;
        if ((ends_with("attn_v.weight") || ends_with("ffn_down.weight")) && more_bits) t = GgmlType::q6_k;
    } else {
        fail("unknown file type '", file_type, "' (F32, F16, Q8_0, Q6_K, Q5_K_M, Q5_1, Q5_0, Q4_K_M, Q4_1, Q4_0)");
    }
    if (ggml_block_of(t).weights == 256 && row_length % 256 != 0)
        t = t == GgmlType::q4_k ? GgmlType::q5_0 : t == GgmlType::q5_k ? GgmlType::q5_1 : GgmlType::q8_0;
    return t;
}

}  // namespace glass
