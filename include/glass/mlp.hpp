/// \file
/// \brief glass/mlp.hpp — journey step 5: the per-position feed-forward half of each layer.
/// ```text
/// In:  x [n_tokens, dim] (already RMS-normalized); W1, W3 [hidden, dim]; W2 [dim, hidden].
/// Out: [n_tokens, dim]  =  ( silu(x W1ᵀ) ⊙ (x W3ᵀ) ) W2ᵀ
///
/// SwiGLU: W1 makes a "gate", W3 a candidate value; silu(g) = g·σ(g) decides how much of each
/// hidden unit passes; W2 projects back to the residual width. Positions do not interact here.
/// ```
#pragma once

#include <cmath>

#include "glass/tensor.hpp"

namespace glass {

/// silu(g) = g · σ(g) = g / (1 + e^-g): about g for large g, about 0 for very negative g, and
/// its smallest value is -0.278, at g ≈ -1.28.
inline float silu(float g) { return g * (1.0f / (1.0f + std::exp(-g))); }

/// The SwiGLU MLP on every row of x [n_tokens, dim]: gate = x W1ᵀ and up = x W3ᵀ
/// [n_tokens, hidden]; h = silu(gate) ⊙ up; returns h W2ᵀ [n_tokens, dim]. Each row is
/// computed on its own.
template <typename W>
RowMatrix swiglu_mlp(const RowMatrix& x, const W& w1, const W& w2, const W& w3) {
    RowMatrix gate = x * w1.transpose();        // [n_tokens, hidden]
    const RowMatrix up = x * w3.transpose();    // [n_tokens, hidden]
    for (Eigen::Index t = 0; t < gate.rows(); ++t)
        for (Eigen::Index i = 0; i < gate.cols(); ++i) gate(t, i) = silu(gate(t, i)) * up(t, i);
    return gate * w2.transpose();               // [n_tokens, dim]
}

}  // namespace glass
