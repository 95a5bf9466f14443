/// \file
/// \brief glass/half.hpp — 16-bit floats: fp16 and bf16 bit patterns to and from fp32.
/// ```text
/// fp16: 1 sign, 5 exponent, 10 mantissa bits: ~3 decimal digits, range ±65504.
/// bf16: the top 16 bits of an fp32: fp32's range, 7 mantissa bits (~2 digits).
/// Both round to nearest even. The quantization formats (quantize.hpp) keep their block scales
/// in fp16; the fast path (fast/packed_weights.hpp) can keep whole matrices in either.
/// ```
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace glass {

// The compiler's IEEE binary16 type: _Float16 (GCC/Clang on x86-64; GCC ≥ 13 on AArch64), or
// __fp16 on AArch64 where GCC 12's C++ lacks _Float16 (the same format; conversions from fp32
// round to nearest even there too).
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
using Half = __fp16;
#else
using Half = _Float16;
#endif

inline std::uint16_t fp32_to_fp16(float f) {
    const Half h = static_cast<Half>(f);  // round to nearest even
    std::uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}
inline float fp16_to_fp32(std::uint16_t bits) {
    Half h;
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

}  // namespace glass
