/// \file
/// \brief glass/attention.hpp — journey step 4: every position looks back at the ones before it.
/// ```text
/// In:  q      [n_q, n_heads * head_dim]     queries of the positions being computed, already
///                                           rotated; row i sits at position start_pos + i
///      keys   [n_k, n_kv_heads * head_dim]  keys of positions 0 .. n_k-1 (from the KV cache),
///      values [n_k, n_kv_heads * head_dim]  with n_k = start_pos + n_q
/// Out: [n_q, n_heads * head_dim]             each head's weighted sum of values, side by side
///
/// For each query head h:
///   scores  = Q_h K_g^T · scale            [n_q, n_k]   (scale = 1/√head_dim)
///   causal mask: query i may see keys 0 .. start_pos + i; later keys get -inf
///   weights = softmax over each row          [n_q, n_k]
///   out_h   = weights V_g                    [n_q, head_dim]
/// Grouped-query attention: query head h reads KV head g = h / (n_heads / n_kv_heads), so
/// consecutive query heads share one K/V head ("repeat", not "tile"). n_kv_heads == n_heads is
/// plain multi-head attention; n_kv_heads == 1 is multi-query attention.
///
/// The same function serves prefill (start_pos 0, n_q = prompt length), decode (n_q = 1, reads
/// the whole cache) and any chunk in between: the mask aligns to the bottom-right corner.
///
/// Family deltas, both set per layer in AttentionShape (ModelConfig says which layers):
///   sliding window W (Mistral 7B v0.1: every layer, 4096; Gemma 2: every other layer, 4096;
///     Gemma 3: 5 layers of 6, 512 or 1024): query i also masks keys older than start_pos + i - W + 1,
///     so a local layer's work and (in a serving engine) its cache stop growing past W;
///   score soft-cap c (Gemma 2: 50): scores -> c · tanh(scores / c) before the mask, a smooth clamp
///     to (-c, c) that keeps one key from taking all the weight.
/// And Qwen2 adds a learned bias to q, k and v (transformer.hpp's project()).
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "glass/errors.hpp"
#include "glass/softmax.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// The head counts attention needs (`n_heads` query heads share `n_kv_heads` K/V heads) and
/// the layer's rules for which keys a query sees and how sharp its scores may get.
struct AttentionShape {
    int n_heads;     ///< query heads
    int n_kv_heads;  ///< key/value heads; divides `n_heads` (equal: multi-head, 1: multi-query)
    int head_dim;    ///< numbers per head
    int window = 0;              ///< a query sees itself and the window-1 positions before it; 0 = all
    float logit_softcap = 0.0f;  ///< scores -> cap·tanh(scores/cap); 0 = off
};

/// \brief Attention for one head, written out fully: scores, causal mask, softmax, weighted sum.
///
/// `q_h` `[n_q, head_dim]` (row i at position `start_pos + i`); `k_g`, `v_g` `[n_k, head_dim]`;
/// returns `[n_q, head_dim]`. When `weights_out` is given it receives the weights `[n_q, n_k]`.
/// `window` > 0 also hides keys older than `window` positions; `softcap` > 0 clamps the scores.
template <typename Q, typename K, typename V>
RowMatrix attention_head(const Q& q_h, const K& k_g, const V& v_g, int start_pos, float scale,
                         RowMatrix* weights_out = nullptr, int window = 0, float softcap = 0.0f) {
    const Eigen::Index n_q = q_h.rows(), n_k = k_g.rows();
    RowMatrix scores = (q_h * k_g.transpose()) * scale;  // [n_q, n_k]
    if (softcap > 0.0f)  // Gemma 2: a smooth clamp to (-softcap, softcap)
        scores = softcap * (scores / softcap).array().tanh().matrix();
    for (Eigen::Index i = 0; i < n_q; ++i) {
        const Eigen::Index last_visible = start_pos + i;  // causal: keys 0..start_pos+i
        const Eigen::Index first_visible = window > 0 ? std::max<Eigen::Index>(0, last_visible - window + 1) : 0;
        for (Eigen::Index j = 0; j < first_visible; ++j)  // sliding window: too far back
            scores(i, j) = -std::numeric_limits<float>::infinity();
        for (Eigen::Index j = last_visible + 1; j < n_k; ++j)
            scores(i, j) = -std::numeric_limits<float>::infinity();
        softmax_inplace(scores.row(i).data(), static_cast<int>(n_k));
    }
    if (weights_out) *weights_out = scores;
    return scores * v_g;  // [n_q, head_dim]
}

/// \brief Attention for every head: causal, scaled, grouped-query.
///
/// `q` `[n_q, n_heads * head_dim]` holds the rotated queries of positions `start_pos ..`;
/// `keys`, `values` `[start_pos + n_q, n_kv_heads * head_dim]` are the cache's rows so far.
/// Query head h reads KV head `h / (n_heads / n_kv_heads)`; `scale` is `1/sqrt(head_dim)`.
/// Returns `[n_q, n_heads * head_dim]`, the heads side by side. When `head_weights_out` is given
/// it receives each head's weights, `[n_heads]` of `[n_q, n_k]` (for explaining; see trace.hpp).
/// Throws glass::Error when the head counts do not divide or the cache has the wrong length.
inline RowMatrix causal_attention(const Eigen::Ref<const RowMatrix>& q, const Eigen::Ref<const RowMatrix>& keys,
                                  const Eigen::Ref<const RowMatrix>& values, int start_pos,
                                  const AttentionShape& s, float scale,
                                  std::vector<RowMatrix>* head_weights_out = nullptr) {
    if (s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads);
    if (keys.rows() != start_pos + q.rows() || values.rows() != keys.rows())
        fail("attention: ", keys.rows(), " cached keys for ", q.rows(), " queries starting at ",
             start_pos, " (expected ", start_pos + q.rows(), ")");
    const int group = s.n_heads / s.n_kv_heads;  // query heads per KV head
    const int hd = s.head_dim;
    RowMatrix out(q.rows(), static_cast<Eigen::Index>(s.n_heads) * hd);
    if (head_weights_out) head_weights_out->assign(static_cast<size_t>(s.n_heads), RowMatrix());
    for (int h = 0; h < s.n_heads; ++h) {
        const int g = h / group;  // the KV head this query head reads
        out.middleCols(h * hd, hd) =
            attention_head(q.middleCols(h * hd, hd), keys.middleCols(g * hd, hd),
                           values.middleCols(g * hd, hd), start_pos, scale,
                           head_weights_out ? &(*head_weights_out)[static_cast<size_t>(h)] : nullptr,
                           s.window, s.logit_softcap);
    }
    return out;
}

}  // namespace glass
