/// \file
/// \brief glass/transformer.hpp — journey steps 4–8 assembled: the model forward pass.
/// ```text
/// In:  n new token ids, at positions start_pos .. start_pos+n-1 (start_pos = what the KV cache
///      already holds).
/// Out: logits [vocab] for the last of those positions; the cache now also holds their K/V.
///
///   x = embedding rows of the ids                          [n, dim]
///   for each layer:
///     xn = rmsnorm(x)                                      [n, dim]
///     q = xn Wqᵀ, k = xn Wkᵀ, v = xn Wvᵀ                   [n, dim], [n, kv_dim], [n, kv_dim]
///     rotate q and k by their positions (RoPE)
///     append k, v to this layer's cache                    rows start_pos .. start_pos+n-1
///     x += causal_attention(q, cached K, cached V) Woᵀ     residual connection
///     x += swiglu_mlp(rmsnorm(x))                          residual connection
///   h = rmsnorm(x[last])                                   [dim]
///   logits = classifier h                                  [vocab]
///
/// Prefill calls this once with the whole prompt: each weight is used in one matrix–matrix
/// product over [n_prompt, dim], and attention covers the whole causal block. Decode calls it
/// with one id: every product becomes matrix–vector, and attention reads the cache.
/// ```
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "glass/attention.hpp"
#include "glass/checkpoint.hpp"
#include "glass/embedding.hpp"
#include "glass/kv_cache.hpp"
#include "glass/mlp.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/rope.hpp"
#include "glass/session.hpp"
#include "glass/trace.hpp"

namespace glass {

/// \brief One transformer block over n positions: attention half, then MLP half, each added
/// to the residual stream.
///
/// `x` `[n, dim]` holds positions `cache.length() ..` and is updated in place; this layer's K and
/// V rows are written to `cache` (which advances only after every layer: transformer_forward).
/// `trace` (optional) receives what this layer saw: see trace.hpp.
inline void transformer_block(const ModelConfig& c, const LayerWeights& w, int layer,
                              RowMatrix& x, KVCache& cache, LayerTrace* trace = nullptr) {
    const int start_pos = cache.length();
    const int n = static_cast<int>(x.rows());

    // Attention half.
    const RowMatrix xn = rmsnorm(x, w.rms_att, c.norm_eps);
    RowMatrix q = xn * w.wq.transpose();  // [n, n_heads * head_dim]
    RowMatrix k = xn * w.wk.transpose();  // [n, n_kv_heads * head_dim]
    RowMatrix v = xn * w.wv.transpose();  // [n, n_kv_heads * head_dim]
    apply_rope(q, c.n_heads, c.head_dim(), start_pos, c.rope_theta, c.rope_layout);
    apply_rope(k, c.n_kv_heads, c.head_dim(), start_pos, c.rope_theta, c.rope_layout);
    cache.write(layer, start_pos, k, v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
    const RowMatrix att = causal_attention(q, cache.keys(layer, start_pos + n),
                                           cache.values(layer, start_pos + n), start_pos,
                                           {c.n_heads, c.n_kv_heads, c.head_dim()}, scale,
                                           trace ? &trace->attention : nullptr);
    x += att * w.wo.transpose();
    if (trace) trace->residual_norm_after_attention = x.rowwise().norm();

    // MLP half.
    x += swiglu_mlp(rmsnorm(x, w.rms_ffn, c.norm_eps), w.w1, w.w2, w.w3);
    if (trace) trace->residual_norm_after_mlp = x.rowwise().norm();
}

/// \brief The input rules of a forward pass, shared by every backend (this one and the CUDA twin's
/// cuda/transformer.cpp).
///
/// A pass over `ids` at position `cache_length` needs at least one id, each inside the
/// vocabulary, and room in the context window; otherwise glass::Error names the offending value.
inline void check_forward_input(const ModelConfig& c, int cache_length, std::span<const int> ids) {
    if (ids.empty()) fail("forward pass needs at least one token");
    if (cache_length + static_cast<std::int64_t>(ids.size()) > c.seq_len)
        fail(cache_length == 0 ? "prompt of " : "sequence of ",
             cache_length + static_cast<std::int64_t>(ids.size()),
             " tokens is longer than the context window of ", c.seq_len);
    for (const int id : ids)
        if (id < 0 || id >= c.vocab_size)
            fail("token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")");
}

/// \brief Every layer over `ids` at positions `cache.length() ..`: the residual stream after the
/// last layer `[n, dim]`, before the final norm. The ids' K/V rows are now in `cache`.
/// `trace` (optional) receives every layer's attention weights and residual norms (trace.hpp).
inline RowMatrix forward_layers(const Model& m, KVCache& cache, std::span<const int> ids,
                                ForwardTrace* trace = nullptr) {
    const ModelConfig& c = m.config;
    check_forward_input(c, cache.length(), ids);

    if (trace) *trace = {cache.length(), std::vector<LayerTrace>(static_cast<size_t>(c.n_layers))};
    RowMatrix x = embed_tokens(m.embedding_table(), ids);  // [n, dim]
    for (int l = 0; l < c.n_layers; ++l)
        transformer_block(c, m.layers[l], l, x, cache, trace ? &trace->layers[static_cast<size_t>(l)] : nullptr);
    cache.advance(static_cast<int>(ids.size()));
    return x;
}

/// Final norm and classifier on rows `[r, dim]` of the residual stream: logits `[r, vocab]`,
/// row-major in one vector.
inline std::vector<float> classify(const Model& m, const RowMatrix& rows) {
    const ModelConfig& c = m.config;
    const RowMatrix h = rmsnorm(rows, m.final_norm(), c.norm_eps);  // [r, dim]
    std::vector<float> logits(static_cast<size_t>(rows.rows()) * static_cast<size_t>(c.vocab_size));
    Eigen::Map<RowMatrix>(logits.data(), rows.rows(), c.vocab_size) =
        h * m.output_classifier().transpose();  // [r, vocab]
    return logits;
}

/// \brief The model's forward pass: runs `ids` through every layer at positions
/// `cache.length() ..` and returns the last position's logits `[vocab]`.
///
/// Prefill passes the whole prompt, decode one id; both append their K/V rows to `cache`.
inline std::vector<float> transformer_forward(const Model& m, KVCache& cache,
                                              std::span<const int> ids,
                                              ForwardTrace* trace = nullptr) {
    const RowMatrix x = forward_layers(m, cache, ids, trace);
    return classify(m, x.bottomRows(1));
}

/// The same pass, returning every position's logits `[n, vocab]` (row i predicts the token after
/// ids[i]): speculative decoding checks all drafted tokens with one of these (speculative.hpp).
inline std::vector<float> transformer_forward_all(const Model& m, KVCache& cache, std::span<const int> ids) {
    return classify(m, forward_layers(m, cache, ids));
}

/// \brief The CPU backend: one model, one sequence, one KV cache.
///
/// A Session (session.hpp) over transformer_forward: `prefill(ids)` runs the prompt, each
/// `decode(id)` one more position; both return the logits of the newest position, valid until
/// the next call. generate() drives it, and the CUDA twin (`CudaSession`) in the same way.
class CpuSession : public Session {
public:
    /// `kv` int8: the KV cache holds int8 rows, one scale per KV head and token (kv_cache.hpp).
    explicit CpuSession(const Model& model, KvType kv = KvType::fp32) : model_(model), cache_(model.config, kv) {}

    const ModelConfig& config() const override { return model_.config; }
    int position() const override { return cache_.length(); }
    void reset() override { cache_.clear(); }
    KvType kv_type() const override { return cache_.type(); }
    std::int64_t kv_bytes_used() const override { return cache_.bytes_used(model_.config); }
    std::int64_t weight_bytes() const override { return model_.weight_bytes; }

    std::span<const float> prefill(std::span<const int> ids) override {
        logits_ = transformer_forward(model_, cache_, ids);
        return logits_;
    }
    std::span<const float> decode(int id) override {
        const int one[1] = {id};
        logits_ = transformer_forward(model_, cache_, one);
        return logits_;
    }
    std::span<const float> verify(std::span<const int> ids) override {
        logits_ = transformer_forward_all(model_, cache_, ids);
        return logits_;
    }
    void rewind(int position) override { cache_.rewind(position); }
    const char* backend_name() const override { return "the CPU reference"; }

    const KVCache& cache() const { return cache_; }
    const Model& model() const { return model_; }

private:
    const Model& model_;
    KVCache cache_;
    std::vector<float> logits_;
};

}  // namespace glass
