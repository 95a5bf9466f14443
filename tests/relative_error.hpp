// The error measure every numerical comparison in the tests uses (a header of its own so that
// programs without doctest, like tests/cuda/test_cuda_ops.cpp, share it too).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

namespace test {

// ‖got − want‖₂ / ‖want‖₂ in double. A non-finite value in `got` (e.g. a poisoned element a
// kernel never wrote) or a size mismatch is an infinite error.
inline double relative_error(std::span<const float> got, std::span<const float> want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        norm += double(want[i]) * want[i];
    }
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace test
