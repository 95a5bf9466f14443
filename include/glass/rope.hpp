/// \file
/// \brief glass/rope.hpp — journey step 3: tell attention where each token sits.
/// ```text
/// In:  q or k rows [n_tokens, n_heads * head_dim], the position of row 0 (start_pos).
/// Out: the same rows, rotated in place.
///
/// RoPE (rotary position embedding) treats each head's vector as head_dim/2 two-dimensional
/// pairs and rotates pair i by the angle  pos · θ^(-2i/head_dim). Because a rotation by a
/// (query) dotted with a rotation by b (key) depends only on a - b, attention scores see
/// relative position. Values are not rotated.
///
/// θ (the base) is a model parameter, not a constant: 10,000 for Llama 2 and the shipped model,
/// 500,000 for Llama 3, 1,000,000 for Qwen2 and Qwen3, whose slowest pairs then take far longer
/// to turn once. Gemma 3 uses two: 10,000 on its local (sliding-window) layers, 1,000,000 on its
/// global ones (ModelConfig::rope_theta_of_layer). Llama 3.1 and its
/// successors also rescale the frequencies (RopeScaling): fast pairs keep theirs, slow pairs turn
/// 8 times more slowly, and a band in between is blended, so that a model first trained on
/// 8,192 positions can be stretched to 131,072.
///
/// Which dimensions form "pair i" is a convention, and checkpoints disagree:
///   adjacent_pairs: (2i, 2i+1)        — Meta's original code, llama2.c (this model)
///   half_split:     (i, i + head_dim/2) — Hugging Face "rotate_half"; GGUF qwen2, qwen3, gemma3
/// HF converters permute the rows of W_Q and W_K so the two give identical attention.
/// permute_rows_half_split_to_adjacent() undoes that permutation; tests check both paths agree.
/// ```
#pragma once

#include <cmath>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// The angle frequency of pair i (radians per position), computed in fp32 exactly as llama2.c
/// does: θ^(-2i/head_dim). Pair 0 turns one radian per position; the last pair is the slowest.
inline float rope_frequency(int pair, int head_dim, float theta) {
    return 1.0f / std::pow(theta, static_cast<float>(2 * pair) / static_cast<float>(head_dim));
}

/// Frequency scaling stretches RoPE past the context a model was trained on (RopeScaling in
/// config.hpp):
///   linear (Gemma 3 4B+ on its global layers): every frequency / factor, so position p turns as
///     p / factor did;
///   llama3 (Llama 3.1, 3.2, 3.3: "rope_type": "llama3"): sorts the pairs by wavelength, the
///     positions one full turn takes (2π / frequency):
///     - shorter than original_context / high_freq_factor (2,048): the frequency is kept;
///     - longer than original_context / low_freq_factor (8,192): divided by `factor` (8);
///     - in between: a linear blend of the two, weighted by original_context / wavelength.
/// Llama 2, Llama 3.0, Qwen and the shipped model use none.

/// The values Llama 3.1 (and 3.2, 3.3) ship in their configs.
inline RopeScaling llama3_rope_scaling() {
    RopeScaling s;
    s.type = RopeScalingType::llama3;
    s.factor = 8.0f;
    s.low_freq_factor = 1.0f;
    s.high_freq_factor = 4.0f;
    s.original_context = 8192;
    return s;
}

/// One pair's frequency after scaling; returned unchanged (bit for bit) for `none` or a factor of 1.
/// `pair` (i) matters for per_pair only: a GGUF of Llama 3.1 carries the llama3 rule as one
/// divisor per pair (its rope_freqs tensor, computed by llama.cpp's converter).
inline float rope_scaled_frequency(float frequency, const RopeScaling& s, int pair = 0) {
    if (s.type == RopeScalingType::per_pair) {
        if (pair < 0 || pair >= static_cast<int>(s.divisors.size()))
            fail("RoPE scaling: no divisor for pair ", pair, " (", s.divisors.size(), " given)");
        return frequency / s.divisors[static_cast<size_t>(pair)];
    }
    if (s.type == RopeScalingType::none || s.factor == 1.0f) return frequency;
    if (s.type == RopeScalingType::linear) {
        if (!(s.factor > 0.0f)) fail("RoPE scaling: linear factor ", s.factor, " (need factor > 0)");
        return frequency / s.factor;
    }
    if (!(s.factor > 0.0f) || !(s.low_freq_factor > 0.0f) ||
        !(s.high_freq_factor > s.low_freq_factor) || s.original_context < 1)
        fail("RoPE scaling: factor ", s.factor, ", low_freq_factor ", s.low_freq_factor,
             ", high_freq_factor ", s.high_freq_factor, ", original_context ", s.original_context,
             " (need factor > 0, 0 < low_freq_factor < high_freq_factor, original_context >= 1)");
    // The arithmetic of llama.cpp's converter, which turns this rule into one divisor per pair (a
    // GGUF's rope_freqs; conversion/llama.py, in float32): the same float operations here, so a
    // Hugging Face folder and its GGUF give bit-identical angles.
    const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
    const float context = static_cast<float>(s.original_context);
    const float wavelength = (1.0f / frequency) * two_pi;  // positions per full turn
    if (wavelength < static_cast<float>(s.original_context / static_cast<double>(s.high_freq_factor)))
        return frequency;                                     // fast: kept
    if (wavelength > static_cast<float>(s.original_context / static_cast<double>(s.low_freq_factor)))
        return frequency / s.factor;                          // slow: slowed
    // In between: smooth goes from 0 (at the slow edge) to 1 (at the fast edge), and the
    // frequency is divided by 1 / ((1 - smooth) / factor + smooth), a blend of factor and 1.
    const float smooth = ((1.0f / wavelength) * context - s.low_freq_factor) /
                         static_cast<float>(static_cast<double>(s.high_freq_factor) - s.low_freq_factor);
    return frequency / (1.0f / ((1.0f - smooth) / s.factor + smooth));
}

/// Rotates every head of every row of x [n_tokens, n_heads * head_dim] in place: row t sits at
/// position start_pos + t, and its pair i turns by (start_pos + t) · frequency(i). `layout` says
/// which two dimensions form a pair; `scaling` (none by default) adjusts the frequencies.
inline void apply_rope(Eigen::Ref<RowMatrix> x, int n_heads, int head_dim, int start_pos, float theta,
                       RopeLayout layout, const RopeScaling& scaling = {}) {
    const int half = head_dim / 2;
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
        const int pos = start_pos + static_cast<int>(t);
        for (int h = 0; h < n_heads; ++h) {
            float* v = x.row(t).data() + h * head_dim;  // this head's [head_dim] vector
            for (int i = 0; i < half; ++i) {
                const float frequency =
                    rope_scaled_frequency(rope_frequency(i, head_dim, theta), scaling, i);
                const float angle = static_cast<float>(pos) * frequency;
                const float c = std::cos(angle), s = std::sin(angle);
                const int a = layout == RopeLayout::adjacent_pairs ? 2 * i : i;
                const int b = layout == RopeLayout::adjacent_pairs ? 2 * i + 1 : i + half;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }
}

/// W_Q or W_K rows [n_heads * head_dim, dim] laid out for half_split RoPE -> the same weights for
/// adjacent_pairs RoPE. Within each head, half-split row i pairs with row i + head_dim/2; in the
/// adjacent layout they become rows 2i and 2i+1.
inline RowMatrix permute_rows_half_split_to_adjacent(const RowMatrix& w, int n_heads, int head_dim) {
    RowMatrix out(w.rows(), w.cols());
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h)
        for (int i = 0; i < half; ++i) {
            out.row(h * head_dim + 2 * i) = w.row(h * head_dim + i);
            out.row(h * head_dim + 2 * i + 1) = w.row(h * head_dim + i + half);
        }
    return out;
}

/// The inverse: what a Hugging Face converter does to a Meta/llama2.c checkpoint.
inline RowMatrix permute_rows_adjacent_to_half_split(const RowMatrix& w, int n_heads, int head_dim) {
    RowMatrix out(w.rows(), w.cols());
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; ++h)
        for (int i = 0; i < half; ++i) {
            out.row(h * head_dim + i) = w.row(h * head_dim + 2 * i);
            out.row(h * head_dim + i + half) = w.row(h * head_dim + 2 * i + 1);
        }
    return out;
}

}  // namespace glass
