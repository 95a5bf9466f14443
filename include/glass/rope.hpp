/// \file
/// \brief glass/rope.hpp — journey step 3: tell attention where each token sits.
/// ```text
/// In:  q or k rows [n_tokens, n_heads * head_dim], the position of row 0 (start_pos).
/// Out: the same rows, rotated in place.
///
/// RoPE (rotary position embedding) treats each head's vector as head_dim/2 two-dimensional
/// pairs and rotates pair i by the angle  pos · θ^(-2i/head_dim)  (θ = 10000). Because a rotation
/// by a (query) dotted with a rotation by b (key) depends only on a - b, attention scores see
/// relative position. Values are not rotated.
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
#include "glass/tensor.hpp"

namespace glass {

/// The angle frequency of pair i, computed in fp32 exactly as llama2.c does.
inline float rope_frequency(int pair, int head_dim, float theta) {
    return 1.0f / std::pow(theta, static_cast<float>(2 * pair) / static_cast<float>(head_dim));
}

inline void apply_rope(RowMatrix& x, int n_heads, int head_dim, int start_pos, float theta,
                       RopeLayout layout) {
    const int half = head_dim / 2;
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
        const int pos = start_pos + static_cast<int>(t);
        for (int h = 0; h < n_heads; ++h) {
            float* v = x.row(t).data() + h * head_dim;  // this head's [head_dim] vector
            for (int i = 0; i < half; ++i) {
                const float angle = static_cast<float>(pos) * rope_frequency(i, head_dim, theta);
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
