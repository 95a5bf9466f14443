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
///     q = xn Wqᵀ, k = xn Wkᵀ, v = xn Wvᵀ                   [n, q_dim], [n, kv_dim], [n, kv_dim]
///     rotate q and k by their positions (RoPE)
///     append k, v to this layer's cache                    rows start_pos .. start_pos+n-1
///     x += causal_attention(q, cached K, cached V) Woᵀ     residual connection
///     x += swiglu_mlp(rmsnorm(x))                          residual connection
///   h = rmsnorm(x[last])                                   [dim]
///   logits = classifier h                                  [vocab]
///
/// That is Llama 2. Later families change a few lines of it, each written once, in the header
/// of its stage and switched on by a ModelConfig field (config.hpp):
///   Qwen2      + bias on q, k, v (project() below); half-split RoPE, base 1e6
///   Qwen3      + RMSNorm per head on q and k before RoPE (rmsnorm.hpp); head_dim ≠ dim / n_heads
///   Llama 3.1+ RoPE frequency scaling (rope.hpp)
///   Mistral    sliding-window attention (attention.hpp)
///   Gemma 2/3  embeddings × √dim (embedding.hpp); GELU-tanh MLP (mlp.hpp); gain x·(1+w) and norms
///              after attention and after the MLP (rmsnorm.hpp, transformer_block); local layers
///              with a window and their own RoPE base; Gemma 2's score and logit soft-caps
///
/// One block body serves every backend of this reference: transformer_forward (one sequence,
/// one contiguous KVCache) and the serving engine's paged_forward (many sequences, pool
/// blocks) call the same transformer_block, through a small K/V adapter each.
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

/// \brief The rows of one forward pass that belong to one sequence: rows `first ..
/// first+count-1` of the residual stream, at positions `start .. start+count-1`.
///
/// transformer_forward passes one sequence (its positions follow the cache's length);
/// the serving engine's paged_forward stacks many (serve/paged_transformer.hpp).
struct SequenceRows {
    int first = 0;  ///< its first row in x
    int count = 0;  ///< rows (new tokens)
    int start = 0;  ///< position of its first row
};

/// How a pass computes its products. `whole_batch`: one matrix-matrix product over all rows, the
/// way prefill is fast (C5). `row_by_row`: each row as a lone decoded token is computed, so a row's
/// numbers never depend on which other rows share the pass: the serving engine's batch
/// invariance (paged_transformer.hpp).
enum class RowOrder { whole_batch, row_by_row };

/// y = x Wᵀ (+ b) for every row of x [n, in] -> [n, out]. `bias` is empty except for Qwen2's
/// q, k, v projections, whose learned offsets shift every query and key by a fixed vector.
template <typename W>
RowMatrix project(const RowMatrix& x, const W& w, const ConstVectorMap& bias, RowOrder order) {
    RowMatrix y(x.rows(), w.rows());
    if (order == RowOrder::whole_batch) {
        y = x * w.transpose();
    } else {
        for (Eigen::Index r = 0; r < x.rows(); ++r) {
            const RowMatrix row = x.row(r);  // [1, in], as a decoded token is held
            y.row(r) = row * w.transpose();
        }
    }
    if (bias.size() > 0) y.rowwise() += bias.transpose();
    return y;
}

/// The MLP half's product: gated_mlp (mlp.hpp) on all rows at once or on each row alone.
inline RowMatrix mlp_rows(const ModelConfig& c, const LayerWeights& w, const RowMatrix& xn, RowOrder order) {
    if (order == RowOrder::whole_batch) return gated_mlp(xn, w.w1, w.w2, w.w3, c.mlp_activation);
    RowMatrix out(xn.rows(), c.dim);
    for (Eigen::Index r = 0; r < xn.rows(); ++r) {
        const RowMatrix row = xn.row(r);
        out.row(r) = gated_mlp(row, w.w1, w.w2, w.w3, c.mlp_activation);
    }
    return out;
}

/// The layer's attention rules from the config: head counts, this layer's sliding window and
/// the score soft-cap.
inline AttentionShape attention_shape_of_layer(const ModelConfig& c, int layer) {
    return {c.n_heads, c.n_kv_heads, c.head_dim, c.window_of_layer(layer), c.attn_logit_softcap};
}

/// \brief What tensor parallelism adds to a block (dist/tensor_parallel.hpp): a rank holding some
/// of the heads and some of the MLP's hidden units computes only a partial sum of what attention
/// and the MLP add to the residual stream; `add_across_ranks` sums the ranks' partials (an
/// all-reduce) before they join it. One process passes none: its sums are already whole.
struct PartialSums {
    virtual ~PartialSums() = default;
    virtual void add_across_ranks(RowMatrix& partial) = 0;  ///< partial [N, dim] -> Σ over ranks
};

/// \brief One transformer block over the rows of x `[N, dim]`: attention half, then MLP half, each
/// added to the residual stream.
///
/// `seqs` says which rows belong to which sequence and at which positions. `kv` stores this
/// layer's K and V rows and gives them back: any type with
///   kv.write(layer, s, first_position, k [n, kv_dim], v [n, kv_dim])   for sequence s
///   kv.keys(layer, s, n), kv.values(layer, s, n)  -> positions 0..n-1 [n, kv_dim]
/// (ContiguousKv below for one KVCache; PagedKv in serve/paged_transformer.hpp for pool blocks).
/// `trace` (optional, one sequence) receives what this layer saw: see trace.hpp.
/// `partial_sums` (tensor parallelism only) completes the two partial products, Wo's and W2's.
template <typename Kv>
void transformer_block(const ModelConfig& c, const LayerWeights& w, int layer, RowMatrix& x,
                       std::span<const SequenceRows> seqs, Kv& kv, RowOrder order,
                       LayerTrace* trace = nullptr, PartialSums* partial_sums = nullptr) {
    // 1. Queries, keys, values: norm, project, per-head norm (Qwen3, Gemma 3), rotate, cache.
    const RowMatrix xn = rmsnorm(x, w.rms_att, c.norm_eps, c.norm_weight_offset);
    RowMatrix q = project(xn, w.wq, w.bq, order);        // [N, q_dim]
    RowMatrix k = project(xn, w.wk, w.bk, order);        // [N, kv_dim]
    const RowMatrix v = project(xn, w.wv, w.bv, order);  // [N, kv_dim]
    if (c.qk_norm) {
        rmsnorm_heads(q, c.n_heads, c.head_dim, w.q_norm, c.norm_eps, c.norm_weight_offset);
        rmsnorm_heads(k, c.n_kv_heads, c.head_dim, w.k_norm, c.norm_eps, c.norm_weight_offset);
    }
    const float theta = c.rope_theta_of_layer(layer);
    const RopeScaling scaling = c.rope_scaling_of_layer(layer);
    for (size_t s = 0; s < seqs.size(); ++s) {
        const SequenceRows& r = seqs[s];
        apply_rope(q.middleRows(r.first, r.count), c.n_heads, c.head_dim, r.start, theta, c.rope_layout, scaling);
        apply_rope(k.middleRows(r.first, r.count), c.n_kv_heads, c.head_dim, r.start, theta, c.rope_layout, scaling);
        kv.write(layer, static_cast<int>(s), r.start, k.middleRows(r.first, r.count), v.middleRows(r.first, r.count));
    }

    // 2. Attention: each sequence reads its own cached rows; row i sees positions up to its own.
    const AttentionShape shape = attention_shape_of_layer(c, layer);
    const float scale = c.attention_score_scale();
    RowMatrix att(x.rows(), c.q_dim());  // [N, q_dim]
    for (size_t s = 0; s < seqs.size(); ++s) {
        const SequenceRows& r = seqs[s];
        const int end = r.start + r.count;
        const auto keys = kv.keys(layer, static_cast<int>(s), end);      // [end, kv_dim]
        const auto values = kv.values(layer, static_cast<int>(s), end);  // [end, kv_dim]
        if (order == RowOrder::whole_batch) {
            att.middleRows(r.first, r.count) =
                causal_attention(q.middleRows(r.first, r.count), keys, values, r.start, shape, scale,
                                 trace ? &trace->attention : nullptr);
            continue;
        }
        for (int i = 0; i < r.count; ++i) {
            const int pos = r.start + i;
            att.row(r.first + i) =
                causal_attention(q.row(r.first + i), keys.topRows(pos + 1), values.topRows(pos + 1), pos, shape, scale);
        }
    }
    RowMatrix attended = project(att, w.wo, ConstVectorMap(nullptr, 0), order);  // [N, dim]
    if (partial_sums) partial_sums->add_across_ranks(attended);
    if (c.sandwich_norms)  // Gemma 2 and 3: norm what attention adds, before adding it
        attended = rmsnorm(attended, w.post_attention_norm, c.norm_eps, c.norm_weight_offset);
    x += attended;
    if (trace) trace->residual_norm_after_attention = x.rowwise().norm();

    // 3. MLP half.
    RowMatrix mlp = mlp_rows(c, w, rmsnorm(x, w.rms_ffn, c.norm_eps, c.norm_weight_offset), order);
    if (partial_sums) partial_sums->add_across_ranks(mlp);
    if (c.sandwich_norms) mlp = rmsnorm(mlp, w.post_mlp_norm, c.norm_eps, c.norm_weight_offset);
    x += mlp;
    if (trace) trace->residual_norm_after_mlp = x.rowwise().norm();
}

/// The KV storage of one sequence in one KVCache, as transformer_block reads and writes it.
/// `first_layer`: the model layer the cache's layer 0 holds (a pipeline stage's cache keeps only
/// its own layers: dist/pipeline_parallel.hpp); 0 for a whole model.
struct ContiguousKv {
    KVCache& cache;
    int first_layer = 0;
    void write(int layer, int /*sequence*/, int start, const RowMatrix& k, const RowMatrix& v) {
        cache.write(layer - first_layer, start, k, v);
    }
    auto keys(int layer, int /*sequence*/, int n) const { return cache.keys(layer - first_layer, n); }  // a view
    auto values(int layer, int /*sequence*/, int n) const { return cache.values(layer - first_layer, n); }
};

/// One block over the rows x `[n, dim]` of one sequence at positions `cache.length() ..`: the
/// block above with a single SequenceRows and the cache as its K/V store (the cache advances only
/// after every layer: forward_layers).
inline void transformer_block(const ModelConfig& c, const LayerWeights& w, int layer, RowMatrix& x, KVCache& cache,
                              LayerTrace* trace = nullptr, PartialSums* partial_sums = nullptr) {
    const SequenceRows one[1] = {{.first = 0, .count = static_cast<int>(x.rows()), .start = cache.length()}};
    ContiguousKv kv{cache};
    transformer_block(c, w, layer, x, one, kv, RowOrder::whole_batch, trace, partial_sums);
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

/// \brief Every layer over stacked rows: embeds `ids` (all sequences' new tokens, in `seqs`
/// order), runs each block, and returns the residual stream after the last layer `[N, dim]`,
/// before the final norm. The K/V rows are now in `kv`.
template <typename Kv>
RowMatrix forward_rows(const Model& m, std::span<const int> ids, std::span<const SequenceRows> seqs, Kv& kv,
                       RowOrder order, ForwardTrace* trace = nullptr) {
    const ModelConfig& c = m.config;
    RowMatrix x = embed_tokens(m.embedding_table(), ids, c.embedding_scale);  // [N, dim]
    for (int l = 0; l < c.n_layers; ++l)
        transformer_block(c, m.layers[static_cast<size_t>(l)], l, x, seqs, kv, order,
                          trace ? &trace->layers[static_cast<size_t>(l)] : nullptr);
    return x;
}

/// \brief Every layer over `ids` at positions `cache.length() ..` of one sequence: the residual
/// stream after the last layer `[n, dim]`, before the final norm. The ids' K/V rows are now in
/// `cache`. `trace` (optional) receives every layer's attention weights and residual norms.
inline RowMatrix forward_layers(const Model& m, KVCache& cache, std::span<const int> ids,
                                ForwardTrace* trace = nullptr) {
    const ModelConfig& c = m.config;
    check_forward_input(c, cache.length(), ids);
    if (trace) *trace = {cache.length(), std::vector<LayerTrace>(static_cast<size_t>(c.n_layers))};
    const SequenceRows one[1] = {{.first = 0, .count = static_cast<int>(ids.size()), .start = cache.length()}};
    ContiguousKv kv{cache};
    RowMatrix x = forward_rows(m, ids, one, kv, RowOrder::whole_batch, trace);
    cache.advance(static_cast<int>(ids.size()));
    return x;
}

/// Final norm and classifier on rows `[r, dim]` of the residual stream: logits `[r, vocab]`,
/// row-major in one vector. Gemma 2 soft-caps them (final_logit_softcap): cap · tanh(z / cap).
inline std::vector<float> classify(const Model& m, const RowMatrix& rows, RowOrder order = RowOrder::whole_batch) {
    const ModelConfig& c = m.config;
    const RowMatrix h = rmsnorm(rows, m.final_norm(), c.norm_eps, c.norm_weight_offset);  // [r, dim]
    std::vector<float> logits(static_cast<size_t>(rows.rows()) * static_cast<size_t>(c.vocab_size));
    Eigen::Map<RowMatrix> out(logits.data(), rows.rows(), c.vocab_size);  // [r, vocab]
    out = project(h, m.output_classifier(), ConstVectorMap(nullptr, 0), order);
    if (c.final_logit_softcap > 0.0f) {
        const float cap = c.final_logit_softcap;
        out = cap * (out.array() / cap).tanh();
    }
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
    explicit CpuSession(const Model& model, KvType kv = KvType::fp32) : model_(model), cache_(model.config, kv) {
        require_fp32_weights(model, "the reference (CpuSession)");
    }

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
