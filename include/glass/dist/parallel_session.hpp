/// \file
/// \brief glass/dist/parallel_session.hpp — tensor and pipeline parallelism put together: a grid
/// of tp × pp ranks, one forward pass, one Session.
/// ```text
/// In:  the ids of a step (rank 0 decides them), the grid's shape {tp, pp}.
/// Out: at rank 0, the logits of the whole model.
///
/// Rank r sits at stage p = r / tp, tensor rank t = r mod tp (TensorRT-LLM numbers ranks the
/// same way). Stage p holds layers [first, first + layers) (pipeline_parallel.hpp), and each of
/// its tp ranks holds its heads and MLP units of them (shard.hpp). tp = 4, pp = 2:
///
///              tensor rank 0   tensor rank 1   tensor rank 2   tensor rank 3
///   stage 0:   rank 0          rank 1          rank 2          rank 3       layers 0 .. L/2-1
///                 │ x             │ x             │ x             │ x      (each to its peer)
///   stage 1:   rank 4          rank 5          rank 6          rank 7       layers L/2 .. L-1
///
/// split_forward, on every rank:
///   1. in:  stage 0 embeds the ids (its vocabulary rows, all-reduced in the stage's group);
///           later stages receive the residual stream from their peer in the stage before
///   2. the stage's layers: transformer_block on this rank's heads and MLP units, Wo's and W2's
///      partial sums all-reduced in the stage's group
///   3. out: the stream goes on to the peer in the next stage; the last stage's logits are
///      gathered at its tensor rank 0 and sent to rank 0
///
/// tp = 1 is plain pipeline parallelism (one process's bits exactly), pp = 1 plain tensor
/// parallelism (TensorParallelSession, PipelineParallelSession below are those two shapes).
/// ```
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/driven_session.hpp"
#include "glass/dist/pipeline_parallel.hpp"
#include "glass/dist/shard.hpp"
#include "glass/dist/tensor_parallel.hpp"
#include "glass/kv_cache.hpp"
#include "glass/transformer.hpp"

namespace glass::dist {

/// The grid's shape: tp ranks per stage, pp stages; tp × pp ranks in all.
struct ParallelShape {
    int tp = 1;
    int pp = 1;
    int rank_of(int stage, int tensor_rank) const { return stage * tp + tensor_rank; }
};

/// Where one rank sits and what it holds the rows of.
struct RankPlace {
    ParallelShape shape;
    PipelineStage stage;  ///< its layers
    TensorSplit split;    ///< its heads, MLP units, vocabulary rows
};

/// \brief Rank `rank`'s place in the grid, or an Error naming what does not fit.
inline RankPlace rank_place(const ModelConfig& c, ParallelShape shape, int rank, int ranks) {
    if (shape.tp < 1 || shape.pp < 1) fail("tp and pp must be at least 1, not ", shape.tp, " and ", shape.pp);
    if (shape.tp * shape.pp != ranks)
        fail("tp ", shape.tp, " × pp ", shape.pp, " needs ", shape.tp * shape.pp, " ranks, but the group has ", ranks);
    return {.shape = shape,
            .stage = pipeline_stage(c, rank / shape.tp, shape.pp),
            .split = tensor_split(c, rank % shape.tp, shape.tp)};
}

/// The ranks of stage `p`, in tensor-rank order: the members of its tensor-parallel group.
inline std::vector<int> stage_members(const ParallelShape& shape, int p) {
    std::vector<int> members;
    for (int t = 0; t < shape.tp; ++t) members.push_back(shape.rank_of(p, t));
    return members;
}

/// A stage's input rows `[n, dim]` for `ids`: stage 0 embeds them (its vocabulary rows,
/// all-reduced in its group); a later stage receives the stream from its peer in the stage before.
inline RowMatrix stage_input(const Model& shard, const RankPlace& at, std::span<const int> ids, Communicator& world,
                             Communicator& group) {
    if (at.stage.rank == 0) return embed_split(shard, at.split, ids, shard.config.embedding_scale, group);
    RowMatrix x(static_cast<Eigen::Index>(ids.size()), shard.config.dim);
    world.recv(at.shape.rank_of(at.stage.rank - 1, at.split.rank), std::span<float>(x.data(), static_cast<size_t>(x.size())));
    return x;
}

/// A stage's layers over x `[N, dim]` (shard.layers[i] is model layer first_layer + i: windows and
/// RoPE bases go by the model's numbering), each on this rank's heads and MLP units, Wo's and
/// W2's partial sums all-reduced in the stage's group.
template <typename Kv>
void stage_layers(const Model& shard, const RankPlace& at, RowMatrix& x, std::span<const SequenceRows> seqs, Kv& kv,
                  RowOrder order, Communicator& group) {
    AllReducePartials partials(group);
    for (int i = 0; i < at.stage.layers; ++i)
        transformer_block(shard.config, shard.layers[static_cast<size_t>(i)], at.stage.first_layer + i, x, seqs, kv,
                          order, nullptr, &partials);
}

/// A stage's output stream, on to its peer in the next stage.
inline void pass_stream_on(const RankPlace& at, const RowMatrix& x, Communicator& world) {
    world.send(at.shape.rank_of(at.stage.rank + 1, at.split.rank), std::span<const float>(x.data(), static_cast<size_t>(x.size())));
}

/// \brief One forward pass of this rank's part over `ids` at positions `cache.length() ..` (every
/// rank, the same ids): returns at rank 0 the last position's logits `[vocab]` (every position's
/// `[n, vocab]` when `all_positions`), empty elsewhere. `group`: this rank's stage, as a
/// Communicator of its tp ranks.
inline std::vector<float> split_forward(const Model& shard, const RankPlace& at, const ModelConfig& whole, KVCache& cache,
                                        std::span<const int> ids, bool all_positions, Communicator& world,
                                        Communicator& group) {
    check_forward_input(whole, cache.length(), ids);
    const int n = static_cast<int>(ids.size());
    const PipelineStage& stage = at.stage;
    // 1. In: the first stage embeds the ids; a later one receives the stream from its peer before it.
    RowMatrix x = stage_input(shard, at, ids, world, group);  // [n, dim]
    // 2. This stage's layers; the cache holds this stage's layers only.
    const SequenceRows one[1] = {{.first = 0, .count = n, .start = cache.length()}};
    ContiguousKv kv{cache, stage.first_layer};
    stage_layers(shard, at, x, one, kv, RowOrder::whole_batch, group);
    cache.advance(n);
    // 3. Out: the stream to the next stage; the last stage's logits (gathered at its tensor rank 0) to rank 0.
    if (!stage.is_last()) {
        pass_stream_on(at, x, world);
        if (world.rank() != 0) return {};
        std::vector<float> logits(static_cast<size_t>(all_positions ? n : 1) * static_cast<size_t>(whole.vocab_size));
        world.recv(at.shape.rank_of(stage.ranks - 1, 0), std::span<float>(logits));
        return logits;
    }
    std::vector<float> logits =
        classify_split(shard, at.split, whole.vocab_size, all_positions ? x : RowMatrix(x.bottomRows(1)), group);
    if (at.split.rank != 0 || world.rank() == 0) return logits;  // empty at tensor ranks > 0
    world.send(0, std::span<const float>(logits));
    return {};
}

/// Bytes a rank holds of its shard's weights: what a position reads (weight_bytes) and the
/// embedding rows, which it holds whole or in part (shard.hpp) but reads one of per token.
inline std::int64_t held_weight_bytes(const Model& shard) {
    const ModelConfig& c = shard.config;
    return shard.weight_bytes + (shard.token_embedding ? std::int64_t{4} * c.vocab_size * c.dim : 0);
}

/// \brief --rank-memory: a rank's weights plus `kv_bytes` of its KV memory (`kv_what`: "KV
/// pool", "KV cache") must fit `cap` bytes (0: no cap); else an Error naming the three numbers.
/// "Does not fit one rank, fits two" on one machine: the same cap refuses tp 1 and admits tp 2.
inline void check_rank_memory(std::int64_t weight_bytes, std::int64_t kv_bytes, const char* kv_what, std::int64_t cap) {
    if (cap > 0 && weight_bytes + kv_bytes > cap)
        fail("this rank would hold ", weight_bytes, " bytes of weights + ", kv_bytes, " bytes of ", kv_what,
             ", more than its memory of ", cap, " bytes (--rank-memory); split over more ranks");
}
inline void check_rank_memory(const Model& shard, std::int64_t kv_bytes, const char* kv_what, std::int64_t cap) {
    check_rank_memory(held_weight_bytes(shard), kv_bytes, kv_what, cap);
}

/// Options of a ParallelSession.
struct ParallelSessionOptions {
    KvType kv = KvType::fp32;
    std::int64_t rank_memory = 0;  ///< bytes one rank may hold (weights + its KV cache); 0: no cap
};

/// \brief A Session over a grid of tp × pp ranks: rank 0 drives it like any Session, every other
/// rank calls follow() (driven_session.hpp). Each rank copies only its part of `whole`, and
/// checks it against `rank_memory` before its KV cache (fp32, the whole context window for its
/// layers and heads, kv_cache.hpp) is allocated.
class ParallelSession : public DrivenSession {
public:
    ParallelSession(const Model& whole, Communicator& world, ParallelShape shape, ParallelSessionOptions o = {})
        : DrivenSession(world),
          whole_(whole.config),
          at_(rank_place(whole.config, shape, world.rank(), world.size())),
          group_(world, stage_members(shape, at_.stage.rank)),
          shard_(shard_model(whole, at_.split, at_.stage.first_layer, at_.stage.layers)),
          cache_((check_rank_memory(shard_, cache_bytes(shard_.config), "KV cache", o.rank_memory), shard_.config), o.kv) {}

    const ModelConfig& config() const override { return whole_; }
    std::int64_t kv_bytes_used() const override { return cache_.bytes_used(shard_.config); }  // this rank's
    std::int64_t weight_bytes() const override { return shard_.weight_bytes; }                // this rank's
    const char* backend_name() const override { return "the CPU reference, split over ranks"; }

    const RankPlace& place() const { return at_; }
    const TensorSplit& split() const { return at_.split; }
    const PipelineStage& stage() const { return at_.stage; }
    const Model& shard() const { return shard_; }
    Communicator& stage_group() { return group_; }

protected:
    std::vector<float> forward(std::span<const int> ids, bool all_positions) override {
        return split_forward(shard_, at_, whole_, cache_, ids, all_positions, communicator(), group_);
    }
    KVCache& cache() override { return cache_; }
    const KVCache& cache() const override { return cache_; }

private:
    // What KVCache allocates for a shard: fp32 K and V of its layers and KV heads, every position.
    static std::int64_t cache_bytes(const ModelConfig& c) {
        return check_kv_cache_fits(c, c.seq_len, sizeof(float), "context window (seq_len)");
    }

    ModelConfig whole_;
    RankPlace at_;
    SubCommunicator group_;
    Model shard_;
    KVCache cache_;
};

/// Tensor parallelism alone: every rank of `comm` holds a slice of every layer (pp = 1).
class TensorParallelSession : public ParallelSession {
public:
    TensorParallelSession(const Model& whole, Communicator& comm, KvType kv = KvType::fp32)
        : ParallelSession(whole, comm, {.tp = comm.size(), .pp = 1}, {.kv = kv}) {}
};

/// Pipeline parallelism alone: every rank of `comm` holds whole layers (tp = 1).
class PipelineParallelSession : public ParallelSession {
public:
    PipelineParallelSession(const Model& whole, Communicator& comm, KvType kv = KvType::fp32)
        : ParallelSession(whole, comm, {.tp = 1, .pp = comm.size()}, {.kv = kv}) {}
};

}  // namespace glass::dist
