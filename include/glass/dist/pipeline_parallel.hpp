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
/// Each stage keeps the weights and the K/V of its own layers only (shard_model copies its range).
/// A stage waits while the others work: with one sequence, only one stage is busy at a time (the
/// pipeline's bubble), so pp buys memory, not speed; serving keeps every stage busy with several
/// batches in flight. This header deals out the layers; parallel_session.hpp runs the stages
/// (split_forward, PipelineParallelSession), each of which may itself be a tensor-parallel group.
/// ```
#pragma once

#include <algorithm>

#include "glass/config.hpp"
#include "glass/errors.hpp"

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

}  // namespace glass::dist
