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

#include "glass/config.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// silu(g) = g · σ(g) = g / (1 + e^-g): about g for large g, about 0 for very negative g, and
/// its smallest value is -0.278, at g ≈ -1.28.
inline float silu(float g) { return g * (1.0f / (1.0f + std::exp(-g))); }

/// GELU with its tanh approximation: gelu(g) = ½ g (1 + tanh(√(2/π) (g + 0.044715 g³))).
/// Gemma 2 and 3 gate their MLP with it instead of SiLU ("GeGLU", `gelu_pytorch_tanh` in their
/// configs): a smooth ramp like SiLU, with a shallower negative dip (-0.17 near g = -0.75).
inline float gelu_tanh(float g) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + std::tanh(sqrt_2_over_pi * (g + 0.044715f * g * g * g)));
}

/// The gate nonlinearity a model uses (ModelConfig::mlp_activation).
inline float mlp_gate(float g, MlpActivation a) { return a == MlpActivation::gelu_tanh ? gelu_tanh(g) : silu(g); }

/// The gated MLP on every row of x [n_tokens, dim]: gate = x W1ᵀ and up = x W3ᵀ
/// [n_tokens, hidden]; h = act(gate) ⊙ up; returns h W2ᵀ [n_tokens, dim]. Each row is computed on
/// its own. `act` is SiLU (SwiGLU: Llama, Mistral, Qwen) or GELU-tanh (GeGLU: Gemma).
template <typename W>
RowMatrix gated_mlp(const RowMatrix& x, const W& w1, const W& w2, const W& w3, MlpActivation act) {
    RowMatrix gate = x * w1.transpose();        // [n_tokens, hidden]
    const RowMatrix up = x * w3.transpose();    // [n_tokens, hidden]
    for (Eigen::Index t = 0; t < gate.rows(); ++t)
        for (Eigen::Index i = 0; i < gate.cols(); ++i) gate(t, i) = mlp_gate(gate(t, i), act) * up(t, i);
    return gate * w2.transpose();               // [n_tokens, dim]
}

/// The SwiGLU MLP of Llama: gated_mlp with SiLU.
template <typename W>
RowMatrix swiglu_mlp(const RowMatrix& x, const W& w1, const W& w2, const W& w3) {
    return gated_mlp(x, w1, w2, w3, MlpActivation::silu);
}

}  // namespace glass
