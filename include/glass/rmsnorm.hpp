/// \file
/// \brief glass/rmsnorm.hpp — the normalization before attention, before the MLP, and at the end.
/// ```text
/// In:  x [n_tokens, dim]; a learned gain g [dim].
/// Out: y [n_tokens, dim], each row y = g ⊙ x / sqrt(mean(x²) + eps).
///
/// Llama-family models use RMSNorm: like LayerNorm without subtracting the mean or adding a bias.
/// It keeps the residual stream's scale under control as layers add to it.
///
/// Family deltas here: Gemma's gain offset (x·(1+w)); Qwen3's and Gemma 3's per-head norm of q
/// and k (rmsnorm_heads). Gemma 2 and 3 also norm the outputs of attention and of the MLP before
/// adding them to the residual stream ("sandwich" norms, transformer.hpp): the same function.
/// ```
#pragma once

#include <cmath>

#include "glass/tensor.hpp"

namespace glass {

/// Every row of x normalized: y = (offset + g) ⊙ x / sqrt(mean(x²) + eps).
///
/// `weight_offset` is 0 for Llama, Mistral, Qwen. Gemma's checkpoints store the gain as w for
/// the formula x·(1 + w) (so a freshly initialized w = 0 is the identity): its Hugging Face
/// weights run with offset 1. llama.cpp's converter adds the 1 when it writes a GGUF, so a Gemma
/// GGUF runs with offset 0, and both give the same numbers (ModelConfig::norm_weight_offset).
inline RowMatrix rmsnorm(const Eigen::Ref<const RowMatrix>& x, const ConstVectorMap& gain, float eps,
                         float weight_offset = 0.0f) {
    RowMatrix y(x.rows(), x.cols());
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
        // Sum of squares in order, in fp32, as llama2.c does.
        float sum_sq = 0.0f;
        for (Eigen::Index i = 0; i < x.cols(); ++i) sum_sq += x(t, i) * x(t, i);
        const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(x.cols()) + eps);
        for (Eigen::Index i = 0; i < x.cols(); ++i) y(t, i) = (weight_offset + gain(i)) * (inv_rms * x(t, i));
    }
    return y;
}

/// RMSNorm of every head on its own: x [n, n_heads · head_dim] is read as [n · n_heads, head_dim]
/// and each head's vector normalized with one gain [head_dim] shared by all heads, in place.
///
/// Qwen3 and Gemma 3 apply it to q and k after their projections and before RoPE ("QK-norm"):
/// it bounds each head's |q| and |k|, so attention scores cannot grow without limit as training
/// pushes the projections up, which kept their training stable without a score soft-cap.
inline void rmsnorm_heads(RowMatrix& x, int n_heads, int head_dim, const ConstVectorMap& gain, float eps,
                          float weight_offset = 0.0f) {
    Eigen::Map<RowMatrix> heads(x.data(), x.rows() * n_heads, head_dim);  // [n · n_heads, head_dim]
    heads = rmsnorm(heads, gain, eps, weight_offset);
}

}  // namespace glass
