/// \file
/// \brief glass/rmsnorm.hpp — the normalization before attention, before the MLP, and at the end.
/// ```text
/// In:  x [n_tokens, dim]; a learned gain g [dim].
/// Out: y [n_tokens, dim], each row y = g ⊙ x / sqrt(mean(x²) + eps).
///
/// Llama-family models use RMSNorm: like LayerNorm without subtracting the mean or adding a bias.
/// It keeps the residual stream's scale under control as layers add to it.
/// ```
#pragma once

#include <cmath>

#include "glass/tensor.hpp"

namespace glass {

inline RowMatrix rmsnorm(const RowMatrix& x, const ConstVectorMap& gain, float eps) {
    RowMatrix y(x.rows(), x.cols());
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
        // Sum of squares in order, in fp32, as llama2.c does.
        float sum_sq = 0.0f;
        for (Eigen::Index i = 0; i < x.cols(); ++i) sum_sq += x(t, i) * x(t, i);
        const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(x.cols()) + eps);
        for (Eigen::Index i = 0; i < x.cols(); ++i) y(t, i) = gain(i) * (inv_rms * x(t, i));
    }
    return y;
}

}  // namespace glass
