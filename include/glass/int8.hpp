/// \file
/// \brief glass/int8.hpp — a group of numbers in int8 with one fp32 scale, the rounding shared by
/// the int8 KV cache and the fast path's int8 activations.
/// ```text
/// In:  x [n] fp32.   Out: s = max |x| / 127 and q [n] int8 = round(x / s), so x ≈ s · q with
/// error ≤ s / 2. A group is one KV head's slice of a cached row (kv_cache.hpp) or one block of
/// 32 inputs of a matrix product (quantize.hpp's quantize_activations).
/// A group holding NaN or ±inf gets s = NaN: it dequantizes to NaN, and the NaN travels on to
/// the logits (which generation refuses, naming it), as it would in fp32, instead of becoming
/// integers (converting NaN to int8 is undefined behaviour in C++).
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace glass {

/// s = max |x| / 127 over x [n]; NaN when any value is not finite.
inline float int8_scale(const float* x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (!std::isfinite(x[i])) return std::numeric_limits<float>::quiet_NaN();
        amax = std::max(amax, std::fabs(x[i]));
    }
    return amax / 127.0f;
}

/// x -> round(x / s) in [-127, 127]; 0 when s is 0 (an all-zero group) or NaN.
inline std::int8_t to_int8(float x, float s) {
    return static_cast<std::int8_t>(s > 0 ? std::clamp(std::nearbyint(x / s), -127.0f, 127.0f) : 0.0f);
}

}  // namespace glass
