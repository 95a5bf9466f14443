/// \file
/// \brief glass/fast/packed_weights.hpp — weights reordered (and optionally shrunk) once, for speed.
/// ```text
/// In:  one fp32 weight matrix W [rows = out, cols = in] as stored in the checkpoint.
/// Out: the same numbers in "panels" of 32 rows, in fp32, fp16, bf16 or Q8_0 (int8).
///
/// Panel layout. Rows r = 32p .. 32p+31 form panel p, stored column by column:
///     panel p = [cols][32]      element (r, k) at  p·cols·32 + k·32 + (r mod 32)
/// so the 32 weights that multiply the same input x[k] sit side by side (128 bytes in fp32 =
/// two 512-bit registers). Both products then stream memory front to back:
///   decode  (matrix–vector): for each k, y[32 rows] += x[k] · panel[k][0..32]      (fused multiply-add)
///   prefill (matrix–matrix): the same, for up to 12 tokens at once, each loaded panel
///                            row reused 12 times from registers (see kernels_avx512.hpp).
/// The last panel is padded with zero rows when rows is not a multiple of 32.
///
/// Why fewer bytes means faster decode: each decoded token reads every weight once, and does
/// only 2 FLOPs per weight; at ~34 GB/s the 4.4 GB fp32 1.1B model caps decode near 7.7 tokens/s.
/// fp16/bf16 halve the bytes (cap ×2); Q8_0 stores 1.0625 bytes/weight (cap ×3.8).
///   fp16: 1 sign, 5 exponent, 10 mantissa bits: ~3 decimal digits, range ±65504 (fine for weights).
///   bf16: the top 16 bits of an fp32: same range as fp32, only 7 mantissa bits (~2 digits).
///   Q8_0 (llama.cpp's name): blocks of 32 consecutive inputs of one row share one fp16 scale
///        d = max|w| / 127; each weight is the int8 round(w / d). Error ≤ d/2 per weight.
/// Arithmetic is always fp32: weights are widened to fp32 in registers, activations stay fp32.
///
/// Q8_0 panel layout: per block of 32 inputs, 64 bytes of scales (fp16[32], one per row) then
/// 1024 bytes of int8 [32 inputs][32 rows]: one contiguous 1088-byte stream per panel.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "glass/errors.hpp"

namespace glass::fast {

enum class WeightType { fp32, fp16, bf16, q8_0 };

inline const char* to_string(WeightType t) {
    switch (t) {
        case WeightType::fp32: return "fp32";
        case WeightType::fp16: return "fp16";
        case WeightType::bf16: return "bf16";
        case WeightType::q8_0: return "q8";
    }
    return "?";
}
inline WeightType weight_type_from_string(const std::string& s) {
    if (s == "fp32") return WeightType::fp32;
    if (s == "fp16") return WeightType::fp16;
    if (s == "bf16") return WeightType::bf16;
    if (s == "q8" || s == "q8_0") return WeightType::q8_0;
    fail("unknown weight precision '", s, "' (fp32, fp16, bf16, q8)");
}

constexpr int kPanel = 32;        // rows per panel = fp32 lanes in two AVX-512 registers
constexpr int kQ8Block = 32;      // inputs per Q8_0 block
constexpr int kQ8BlockBytes = kPanel * 2 + kQ8Block * kPanel;  // scales + int8 values = 1088

// --- scalar conversions (the reference for what the vector kernels compute) ---

inline std::uint16_t fp32_to_fp16(float f) {
    const _Float16 h = static_cast<_Float16>(f);  // round to nearest even (GCC/Clang on x86-64)
    std::uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}
inline float fp16_to_fp32(std::uint16_t bits) {
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return static_cast<float>(h);
}
// bf16 = the upper half of the fp32 bit pattern, rounded to nearest even.
inline std::uint16_t fp32_to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stay NaN
    u += 0x7fff + ((u >> 16) & 1);
    return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_fp32(std::uint16_t bits) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// One packed matrix: a view into the session's weight arena.
struct PackedMatrix {
    int rows = 0, cols = 0;
    WeightType type = WeightType::fp32;
    const unsigned char* data = nullptr;

    int panels() const { return (rows + kPanel - 1) / kPanel; }
    int q8_blocks() const { return (cols + kQ8Block - 1) / kQ8Block; }
    // Bytes of one panel; panels follow each other.
    std::int64_t panel_bytes() const {
        switch (type) {
            case WeightType::fp32: return std::int64_t{cols} * kPanel * 4;
            case WeightType::fp16:
            case WeightType::bf16: return std::int64_t{cols} * kPanel * 2;
            case WeightType::q8_0: return std::int64_t{q8_blocks()} * kQ8BlockBytes;
        }
        return 0;
    }
    std::int64_t bytes() const { return panel_bytes() * panels(); }
    const unsigned char* panel(int p) const { return data + panel_bytes() * p; }

    // Weight (r, k) as the kernels see it: the plain, slow definition of the layout.
    float at(int r, int k) const {
        const unsigned char* base = panel(r / kPanel);
        const int lane = r % kPanel;
        switch (type) {
            case WeightType::fp32: {
                float f;
                std::memcpy(&f, base + (std::int64_t{k} * kPanel + lane) * 4, 4);
                return f;
            }
            case WeightType::fp16:
            case WeightType::bf16: {
                std::uint16_t h;
                std::memcpy(&h, base + (std::int64_t{k} * kPanel + lane) * 2, 2);
                return type == WeightType::fp16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            case WeightType::q8_0: {
                const unsigned char* block = base + std::int64_t{k / kQ8Block} * kQ8BlockBytes;
                std::uint16_t scale;
                std::memcpy(&scale, block + lane * 2, 2);
                const auto q = static_cast<std::int8_t>(block[kPanel * 2 + (k % kQ8Block) * kPanel + lane]);
                return fp16_to_fp32(scale) * static_cast<float>(q);
            }
        }
        return 0;
    }
};

// Bytes pack_matrix will write for a [rows, cols] matrix of this type.
inline std::int64_t packed_bytes(int rows, int cols, WeightType type) {
    PackedMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    return m.bytes();
}

// Writes W [rows, cols] (row-major fp32) into `dest` (packed_bytes() bytes, zeroed beforehand)
// and returns the view. Runs once per matrix when a session is built.
inline PackedMatrix pack_matrix(const float* w, int rows, int cols, WeightType type,
                                unsigned char* dest) {
    PackedMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    m.data = dest;
    for (int r = 0; r < rows; ++r) {
        unsigned char* base = dest + m.panel_bytes() * (r / kPanel);
        const int lane = r % kPanel;
        const float* row = w + std::int64_t{r} * cols;
        if (type == WeightType::q8_0) {
            for (int b = 0; b < m.q8_blocks(); ++b) {
                unsigned char* block = base + std::int64_t{b} * kQ8BlockBytes;
                const int k0 = b * kQ8Block, k1 = std::min(cols, k0 + kQ8Block);
                float amax = 0;
                for (int k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(row[k]));
                // Quantize with the scale as it will be read back (fp16), so the stored
                // integers are the best ones for the stored scale.
                const std::uint16_t scale_bits = fp32_to_fp16(amax / 127.0f);
                const float d = fp16_to_fp32(scale_bits);
                std::memcpy(block + lane * 2, &scale_bits, 2);
                for (int k = k0; k < k1; ++k) {
                    const float q = d > 0 ? std::nearbyint(row[k] / d) : 0.0f;
                    const float clamped = std::min(127.0f, std::max(-127.0f, q));
                    block[kPanel * 2 + (k - k0) * kPanel + lane] =
                        static_cast<unsigned char>(static_cast<std::int8_t>(clamped));
                }
            }
            continue;
        }
        for (int k = 0; k < cols; ++k) {
            const std::int64_t at = std::int64_t{k} * kPanel + lane;
            if (type == WeightType::fp32) {
                std::memcpy(base + at * 4, &row[k], 4);
            } else {
                const std::uint16_t h = type == WeightType::fp16 ? fp32_to_fp16(row[k]) : fp32_to_bf16(row[k]);
                std::memcpy(base + at * 2, &h, 2);
            }
        }
    }
    return m;
}

}  // namespace glass::fast
