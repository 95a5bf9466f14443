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
/// 500,000 for Llama 3, whose slowest pairs then take far longer to turn once. Llama 3.1 and its
/// successors also rescale the frequencies (RopeScaling): fast pairs keep theirs, slow pairs turn
/// 8 times more slowly, and a band in between is blended, so that a model first trained on
/// 8,192 positions can be stretched to 131,072.
///
/// Which dimensions form "pair i" is a convention, and checkpoints disagree:
///   adjacent_pairs: (2i, 2i+1)        — Meta's original code, llama2.c (this model)
///   half_split:     (i, i + head_dim/2) — Hugging Face "rotate_half"
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

/// Llama 3.1's frequency scaling ("rope_type": "llama3" in a Hugging Face config). It sorts the
/// pairs by wavelength, the positions one full turn takes (2π / frequency):
///   - shorter than original_context / high_freq_factor (2,048): the frequency is kept;
///   - longer than original_context / low_freq_factor (8,192): divided by `factor` (8);
///   - in between: a linear blend of the two, weighted by original_context / wavelength.
/// `factor` 1 means no scaling: the default, Llama 2, Llama 3.0 and the shipped model.
struct RopeScaling {
    float factor = 1.0f;           ///< how many times slower the slow pairs turn (Llama 3.1: 8)
    float low_freq_factor = 1.0f;  ///< original_context / this = where slowing is complete (1)
    float high_freq_factor = 4.0f; ///< original_context / this = where slowing begins (4)
    int original_context = 8192;   ///< the context length the model was first trained with
};

/// The values Llama 3.1 (and 3.2, 3.3) ship in their configs.
inline RopeScaling llama3_rope_scaling() { return {8.0f, 1.0f, 4.0f, 8192}; }

/// One pair's frequency after scaling; returned unchanged (bit for bit) when `factor` is 1.
inline float rope_scaled_frequency(float frequency, const RopeScaling& s) {
    if (s.factor == 1.0f) return frequency;
    if (!(s.factor > 0.0f) || !(s.low_freq_factor > 0.0f) ||
        !(s.high_freq_factor > s.low_freq_factor) || s.original_context < 1)
        fail("RoPE scaling: factor ", s.factor, ", low_freq_factor ", s.low_freq_factor,
             ", high_freq_factor ", s.high_freq_factor, ", original_context ", s.original_context,
             " (need factor > 0, 0 < low_freq_factor < high_freq_factor, original_context >= 1)");
    const float pi = 3.14159265358979f;
    const float context = static_cast<float>(s.original_context);
    const float wavelength = 2.0f * pi / frequency;                  // positions per full turn
    if (wavelength < context / s.high_freq_factor) return frequency;   // fast: kept
    if (wavelength > context / s.low_freq_factor) return frequency / s.factor;  // slow: slowed
    // In between: smooth goes from 0 (at the slow edge) to 1 (at the fast edge).
    const float smooth =
        (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    return (1.0f - smooth) * frequency / s.factor + smooth * frequency;
}

/// Rotates every head of every row of x [n_tokens, n_heads * head_dim] in place: row t sits at
/// position start_pos + t, and its pair i turns by (start_pos + t) · frequency(i). `layout` says
/// which two dimensions form a pair; `scaling` (none by default) adjusts the frequencies.
inline void apply_rope(RowMatrix& x, int n_heads, int head_dim, int start_pos, float theta,
                       RopeLayout layout, const RopeScaling& scaling = {}) {
    const int half = head_dim / 2;
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
        const int pos = start_pos + static_cast<int>(t);
        for (int h = 0; h < n_heads; ++h) {
            float* v = x.row(t).data() + h * head_dim;  // this head's [head_dim] vector
            for (int i = 0; i < half; ++i) {
                const float frequency =
                    rope_scaled_frequency(rope_frequency(i, head_dim, theta), scaling);
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
