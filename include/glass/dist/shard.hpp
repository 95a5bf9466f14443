/// \file
/// \brief glass/dist/shard.hpp — tensor parallelism's cut: which rank holds which heads, which
/// MLP rows and which vocabulary rows, and a rank's own copy of them.
/// ```text
/// In:  a ModelConfig (and a Model for shard_model), the number of ranks tp, a rank r.
/// Out: TensorSplit (the ranges rank r owns) and a Model holding only those weights.
///
/// Megatron-LM's split of one block over tp ranks (arXiv 1909.08053; vLLM does the same):
///
///   x ──norm──┬─ Wq rows of my heads ─┐                          column-split: by output
///             ├─ Wk rows of my KV heads ─ attention over my heads ─ Wo columns of my heads ─┐
///             └─ Wv rows of my KV heads ┘                                    row-split: by input
///                                                                    partial [n, dim] ──all-reduce──▶ x +=
///   x ──norm──┬─ W1 (gate) rows h0..h1 ─┐
///             └─ W3 (up)   rows h0..h1 ─ silu(g)·u ─ W2 columns h0..h1 ─ partial ──all-reduce──▶ x +=
///
/// Heads are independent, and so are the MLP's hidden units: a rank computes its heads'
/// attention and its hidden units completely, and only the two products that come back to the
/// residual stream (Wo, W2) are partial sums over ranks: two all-reduces per layer.
/// Norm gains (whole [dim] or [head_dim]) are copied to every rank.
///
/// Grouped-query attention: KV heads are split like query heads when tp divides n_kv_heads;
/// when tp > n_kv_heads each rank keeps the one KV head its query heads read (replicated over
/// tp / n_kv_heads ranks), so tp must be a multiple of n_kv_heads.
/// The embedding table and the classifier are split by vocabulary rows: a rank embeds only the
/// ids in its slice (zeros elsewhere; an all-reduce completes the rows) and computes only its
/// slice of the logits (gathered at rank 0).
/// ```
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"

namespace glass::dist {

/// \brief What rank `rank` of `ranks` owns under tensor parallelism: half-open ranges
/// `[begin, begin + count)` of query heads, KV heads, MLP hidden units and vocabulary rows.
struct TensorSplit {
    int rank = 0;
    int ranks = 1;
    int head_begin = 0, heads = 0;        ///< query heads
    int kv_head_begin = 0, kv_heads = 0;  ///< KV heads (one each, replicated, when ranks > n_kv_heads)
    int hidden_begin = 0, hidden = 0;     ///< MLP hidden units (rows of W1, W3; columns of W2)
    int vocab_begin = 0, vocab = 0;       ///< rows of the embedding table and the classifier
    int vocab_stride = 0;                 ///< every rank's slice padded to this for the gather
};

/// \brief The ranges rank `rank` of `ranks` owns, or a glass::Error naming the count that does
/// not divide.
inline TensorSplit tensor_split(const ModelConfig& c, int rank, int ranks) {
    if (ranks < 1) fail("tensor parallelism needs at least 1 rank, not ", ranks);
    if (rank < 0 || rank >= ranks) fail("rank ", rank, " is outside the group of ", ranks);
    if (c.n_heads % ranks != 0)
        fail("tensor parallelism over ", ranks, " ranks needs the query heads to divide evenly: ", c.n_heads,
             " heads do not");
    if (c.hidden_dim % ranks != 0)
        fail("tensor parallelism over ", ranks, " ranks needs the MLP width to divide evenly: hidden_dim ",
             c.hidden_dim, " does not");
    const bool replicate_kv = ranks > c.n_kv_heads;
    if (replicate_kv ? ranks % c.n_kv_heads != 0 : c.n_kv_heads % ranks != 0)
        fail("tensor parallelism over ", ranks, " ranks cannot share ", c.n_kv_heads,
             " KV heads: the rank count must divide them or be a multiple of them");
    TensorSplit s{.rank = rank, .ranks = ranks};
    s.heads = c.n_heads / ranks;
    s.head_begin = rank * s.heads;
    s.kv_heads = replicate_kv ? 1 : c.n_kv_heads / ranks;
    s.kv_head_begin = replicate_kv ? rank / (ranks / c.n_kv_heads) : rank * s.kv_heads;
    s.hidden = c.hidden_dim / ranks;
    s.hidden_begin = rank * s.hidden;
    // Vocabulary: equal slices of ⌈vocab / ranks⌉ rows, the last one shorter when it does not divide.
    s.vocab_stride = (c.vocab_size + ranks - 1) / ranks;
    s.vocab_begin = std::min(c.vocab_size, rank * s.vocab_stride);
    s.vocab = std::min(c.vocab_size, s.vocab_begin + s.vocab_stride) - s.vocab_begin;
    return s;
}

/// The config a rank runs with: its own head, hidden and vocabulary counts; everything else
/// (dim, head_dim, RoPE, norms, the family deltas) as the whole model's. (Token ids are checked
/// against the whole model's vocabulary, before the ranks split the work.)
inline ModelConfig shard_config(const ModelConfig& c, const TensorSplit& s) {
    ModelConfig r = c;
    r.n_heads = s.heads;
    r.n_kv_heads = s.kv_heads;
    r.hidden_dim = s.hidden;
    r.vocab_size = s.vocab;
    return r;
}

namespace detail {

/// The owned weights of one rank: each piece copied once into its own buffer, which never moves.
struct ShardStorage {
    std::vector<std::vector<float>> pieces;

    /// rows [r0, r0 + nr) and columns [c0, c0 + nc) of m, as a new row-major matrix.
    ConstMatrixMap block(const ConstMatrixMap& m, Eigen::Index r0, Eigen::Index nr, Eigen::Index c0, Eigen::Index nc) {
        std::vector<float>& p = pieces.emplace_back(static_cast<size_t>(nr * nc));
        Eigen::Map<RowMatrix>(p.data(), nr, nc) = m.block(r0, c0, nr, nc);
        return ConstMatrixMap(p.data(), nr, nc);
    }
    ConstMatrixMap rows(const ConstMatrixMap& m, Eigen::Index r0, Eigen::Index nr) { return block(m, r0, nr, 0, m.cols()); }
    ConstMatrixMap columns(const ConstMatrixMap& m, Eigen::Index c0, Eigen::Index nc) { return block(m, 0, m.rows(), c0, nc); }
    ConstVectorMap segment(const ConstVectorMap& v, Eigen::Index i0, Eigen::Index n) {
        if (v.size() == 0) return ConstVectorMap(nullptr, 0);
        std::vector<float>& p = pieces.emplace_back(v.data() + i0, v.data() + i0 + n);
        return ConstVectorMap(p.data(), n);
    }
    ConstVectorMap whole(const ConstVectorMap& v) { return segment(v, 0, v.size()); }
};

/// What a shard's storage is deleted by: its type marks a Model's storage as a ShardStorage, so
/// release_shard_matrices can ask (std::get_deleter) before it looks inside.
struct ShardStorageDeleter {
    void operator()(ShardStorage* st) const { delete st; }
};

}  // namespace detail

/// \brief Rank `s.rank`'s own copy of its slice of `m`: the layers cut as drawn above, the
/// final norm whole, and `token_embedding`/`classifier` holding vocabulary rows
/// `[s.vocab_begin, s.vocab_begin + s.vocab)` only.
///
/// `first_layer`, `layers` (a pipeline stage's range, parallel_session.hpp; default: all) keep
/// only those layers, as `layers[0 ..]`; the embedding slice then comes only with layer 0, the
/// final norm and classifier only with the last layer (the others are null).
///
/// The result's config is shard_config's with n_layers = `layers`, so transformer_block runs its
/// layers unchanged and embedding_table()/output_classifier() are the slice's rows. The copy is
/// what lets a rank hold less than the whole model (weights read from an mmap'd file would be
/// shared otherwise).
inline Model shard_model(const Model& m, const TensorSplit& s, int first_layer = 0, int layers = -1) {
    require_fp32_weights(m, "a model split over ranks");
    const ModelConfig& c = m.config;
    if (layers < 0) layers = c.n_layers - first_layer;
    if (first_layer < 0 || layers < 1 || first_layer + layers > c.n_layers)
        fail("layers ", first_layer, " .. ", first_layer + layers - 1, " are not inside the model's ", c.n_layers);
    const std::shared_ptr<detail::ShardStorage> storage(new detail::ShardStorage, detail::ShardStorageDeleter{});
    detail::ShardStorage& st = *storage;
    Model r;
    r.config = shard_config(c, s);
    r.config.n_layers = layers;
    const Eigen::Index hd = c.head_dim;
    const Eigen::Index q0 = s.head_begin * hd, nq = s.heads * hd;        // my query columns
    const Eigen::Index k0 = s.kv_head_begin * hd, nk = s.kv_heads * hd;  // my K/V columns
    for (int l = first_layer; l < first_layer + layers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        LayerWeights mine{
            .rms_att = st.whole(w.rms_att),
            .wq = st.rows(w.wq, q0, nq),             // [my q_dim, dim]
            .wk = st.rows(w.wk, k0, nk),             // [my kv_dim, dim]
            .wv = st.rows(w.wv, k0, nk),
            .wo = st.columns(w.wo, q0, nq),          // [dim, my q_dim]
            .rms_ffn = st.whole(w.rms_ffn),
            .w1 = st.rows(w.w1, s.hidden_begin, s.hidden),     // [my hidden, dim]
            .w2 = st.columns(w.w2, s.hidden_begin, s.hidden),  // [dim, my hidden]
            .w3 = st.rows(w.w3, s.hidden_begin, s.hidden),
            .bq = st.segment(w.bq, q0, nq),
            .bk = st.segment(w.bk, k0, nk),
            .bv = st.segment(w.bv, k0, nk),
            .q_norm = st.whole(w.q_norm),
            .k_norm = st.whole(w.k_norm),
            .post_attention_norm = st.whole(w.post_attention_norm),
            .post_mlp_norm = st.whole(w.post_mlp_norm),
        };
        r.layers.push_back(mine);
    }
    std::int64_t embedding_floats = 0;  // read once per id, not per position: not in weight_bytes
    if (first_layer == 0) {
        r.token_embedding = st.rows(m.embedding_table(), s.vocab_begin, s.vocab).data();  // [my vocab, dim]
        embedding_floats = std::int64_t{s.vocab} * c.dim;
    }
    if (first_layer + layers == c.n_layers) {
        r.classifier = st.rows(m.output_classifier(), s.vocab_begin, s.vocab).data();  // [my vocab, dim]
        r.rms_final = st.whole(m.final_norm()).data();
    }
    std::int64_t floats = 0;
    for (const std::vector<float>& p : st.pieces) floats += static_cast<std::int64_t>(p.size());
    r.weight_bytes = 4 * (floats - embedding_floats);
    r.storage = storage;
    return r;
}

/// \brief Lets go of a shard's matrices (Wq .. W3 of every layer, the classifier) once another
/// copy of them serves the rank — the fast path's packed panels (dist/fast_rank_part.hpp) —
/// keeping what is still read from the shard: the embedding rows, norm gains and biases. The
/// matrix views become empty (null, 0 × 0) and `classifier` null. Returns the bytes the shard
/// still holds. A model that is not shard_model's (its storage another kind) is refused.
inline std::int64_t release_shard_matrices(Model& shard) {
    if (std::get_deleter<detail::ShardStorageDeleter>(shard.storage) == nullptr)
        fail("release_shard_matrices: the model is not a shard_model copy (its weights are not the shard's own)");
    auto* st = static_cast<detail::ShardStorage*>(const_cast<void*>(shard.storage.get()));
    const auto release = [&](const float* data) {
        for (std::vector<float>& piece : st->pieces)
            if (!piece.empty() && piece.data() == data) {
                std::vector<float>().swap(piece);  // its memory back, not just its size
                return;
            }
        fail("release_shard_matrices: a matrix that is not the shard's own copy (not a shard_model result?)");
    };
    for (LayerWeights& w : shard.layers)
        for (ConstMatrixMap* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w2, &w.w3}) {
            release(m->data());
            new (m) ConstMatrixMap(nullptr, 0, 0);  // Eigen's way to re-seat a Map
        }
    if (shard.classifier) release(shard.classifier);
    shard.classifier = nullptr;
    std::int64_t floats = 0;
    for (const std::vector<float>& piece : st->pieces) floats += static_cast<std::int64_t>(piece.size());
    return 4 * floats;
}

}  // namespace glass::dist
