/// \file
/// \brief glass/dist/pipeline_parallel.hpp — one model over several ranks, each holding whole
/// layers: the residual stream travels from stage to stage.
/// ```text
/// In:  the ids of a step (rank 0 decides them), each rank's range of layers.
/// Out: at rank 0, exactly the logits of one process (the same operations in the same order).
///
///   stage 0 (rank 0)          stage 1 (rank 1)          ...   last stage
///   x = embed(ids)
///   layers 0 .. a-1
///   send x [n, dim] ────────▶ recv x
///                             layers a .. b-1
///                             send x ────────────────▶ ...   recv x
///                                                             layers .. L-1
///   recv logits ◀──────────────────────────────────────────── final norm, classifier, send
///
/// Each stage keeps the K/V of its own layers only, and touches only its layers' weights (views
/// of the whole model: pages of other stages' layers are never read). A stage waits while the
/// others work: with one sequence, only one stage is busy at a time (the pipeline's bubble), so
/// pp buys memory, not speed; serving keeps every stage busy with several batches in flight.
/// ```
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/driven_session.hpp"
#include "glass/embedding.hpp"
#include "glass/kv_cache.hpp"
#include "glass/transformer.hpp"

namespace glass::dist {

/// The layers rank `rank` of `ranks` owns: `[first_layer, first_layer + layers)`.
struct PipelineStage {
    int rank = 0;
    int ranks = 1;
    int first_layer = 0;
    int layers = 0;
    bool is_last() const { return rank == ranks - 1; }
};

/// \brief Layers dealt out in order: ⌊L / pp⌋ each, one more to each of the first L mod pp
/// ranks. Every stage needs at least one layer.
inline PipelineStage pipeline_stage(const ModelConfig& c, int rank, int ranks) {
    if (ranks < 1) fail("pipeline parallelism needs at least 1 rank, not ", ranks);
    if (rank < 0 || rank >= ranks) fail("rank ", rank, " is outside the group of ", ranks);
    if (ranks > c.n_layers) fail("pipeline parallelism over ", ranks, " ranks needs a layer for each: the model has ", c.n_layers);
    const int base = c.n_layers / ranks, extra = c.n_layers % ranks;
    return {.rank = rank,
            .ranks = ranks,
            .first_layer = rank * base + std::min(rank, extra),
            .layers = base + (rank < extra ? 1 : 0)};
}

/// The config of a stage's KV cache: its own layers only.
inline ModelConfig stage_cache_config(const ModelConfig& c, const PipelineStage& s) {
    ModelConfig r = c;
    r.n_layers = s.layers;
    return r;
}

/// Bytes of weights stage `s` reads per position: its layers' matrices and norms, and the
/// classifier on the last stage.
inline std::int64_t stage_weight_bytes(const Model& m, const PipelineStage& s) {
    std::int64_t floats = s.is_last() ? std::int64_t{m.config.vocab_size} * m.config.dim + m.config.dim : 0;
    for (int l = s.first_layer; l < s.first_layer + s.layers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        for (const ConstMatrixMap* mat : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w2, &w.w3}) floats += mat->size();
        for (const ConstVectorMap* v : {&w.rms_att, &w.rms_ffn, &w.bq, &w.bk, &w.bv, &w.q_norm, &w.k_norm,
                                        &w.post_attention_norm, &w.post_mlp_norm})
            floats += v->size();
    }
    return 4 * floats;
}

/// \brief One forward pass of this stage over `ids` at positions `cache.length() ..`: returns
/// at rank 0 the last position's logits `[vocab]` (every position's `[n, vocab]` when
/// `all_positions`), empty elsewhere. Every rank must call it with the same ids.
inline std::vector<float> pipeline_forward(const Model& m, const PipelineStage& s, KVCache& cache,
                                           std::span<const int> ids, bool all_positions, Communicator& comm) {
    const ModelConfig& c = m.config;
    check_forward_input(c, cache.length(), ids);
    const int n = static_cast<int>(ids.size());
    // 1. In: the first stage embeds the ids; every other receives the stream from the one before.
    RowMatrix x(n, c.dim);  // [n, dim]
    if (s.rank == 0) x = embed_tokens(m.embedding_table(), ids, c.embedding_scale);
    else comm.recv(s.rank - 1, std::span<float>(x.data(), static_cast<size_t>(x.size())));
    // 2. This stage's layers, with the model's own layer numbers (windows, RoPE bases).
    const SequenceRows one[1] = {{.first = 0, .count = n, .start = cache.length()}};
    ContiguousKv kv{cache, s.first_layer};  // the cache holds this stage's layers only
    for (int l = s.first_layer; l < s.first_layer + s.layers; ++l)
        transformer_block(c, m.layers[static_cast<size_t>(l)], l, x, one, kv, RowOrder::whole_batch);
    cache.advance(n);
    // 3. Out: pass the stream on; the last stage classifies and sends the logits to rank 0.
    const size_t logit_count = static_cast<size_t>(all_positions ? n : 1) * static_cast<size_t>(c.vocab_size);
    if (!s.is_last()) {
        comm.send(s.rank + 1, std::span<const float>(x.data(), static_cast<size_t>(x.size())));
        if (s.rank != 0) return {};
        std::vector<float> logits(logit_count);
        comm.recv(s.ranks - 1, std::span<float>(logits));
        return logits;
    }
    std::vector<float> logits = classify(m, all_positions ? x : RowMatrix(x.bottomRows(1)));
    if (s.rank == 0) return logits;  // a pipeline of one stage
    comm.send(0, std::span<const float>(logits));
    return {};
}

/// \brief A Session whose layers are dealt out to the ranks of `comm` in order: rank 0 drives
/// it like any Session, every other rank calls follow() (driven_session.hpp).
class PipelineParallelSession : public DrivenSession {
public:
    PipelineParallelSession(const Model& m, Communicator& comm, KvType kv = KvType::fp32)
        : DrivenSession(comm),
          model_(m),
          stage_(pipeline_stage(m.config, comm.rank(), comm.size())),
          cache_(stage_cache_config(m.config, stage_), kv) {
        require_fp32_weights(m, "pipeline parallelism");
    }

    const ModelConfig& config() const override { return model_.config; }
    std::int64_t kv_bytes_used() const override { return cache_.bytes_used(stage_cache_config(model_.config, stage_)); }
    std::int64_t weight_bytes() const override { return stage_weight_bytes(model_, stage_); }  // this rank's
    const char* backend_name() const override { return "the CPU reference, pipeline-parallel"; }

    const PipelineStage& stage() const { return stage_; }

protected:
    std::vector<float> forward(std::span<const int> ids, bool all_positions) override {
        return pipeline_forward(model_, stage_, cache_, ids, all_positions, communicator());
    }
    KVCache& cache() override { return cache_; }
    const KVCache& cache() const override { return cache_; }

private:
    const Model& model_;
    PipelineStage stage_;
    KVCache cache_;
};

}  // namespace glass::dist
