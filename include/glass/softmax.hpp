/// \file
/// \brief glass/softmax.hpp — turn scores into probabilities (used by attention and by sampling).
/// ```text
/// In:  scores [n] (some may be -inf: masked out).
/// Out: probabilities [n], each in [0, 1], summing to 1.
///
/// softmax(x)_i = exp(x_i - max) / Σ_j exp(x_j - max). Subtracting the maximum changes nothing
/// mathematically but keeps exp() from overflowing (exp(89) is already inf in fp32). A row with no
/// finite entry at all has no meaningful distribution; callers never produce one (the causal mask
/// always leaves position 0 visible), and we refuse it rather than return NaN.
/// ```
#pragma once

#include <cmath>
#include <limits>

#include "glass/errors.hpp"

namespace glass {

inline void softmax_inplace(float* x, int n) {
    float max_value = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; ++i) max_value = std::fmax(max_value, x[i]);
    if (!(max_value > -std::numeric_limits<float>::infinity()))
        fail("softmax over a row with no finite entry (all masked or NaN)");
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max_value);
        sum += x[i];
    }
    for (int i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace glass
