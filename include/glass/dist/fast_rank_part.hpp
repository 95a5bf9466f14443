/// \file
/// \brief glass/dist/fast_rank_part.hpp — a split model's ranks on the fast CPU path: each rank's
/// part a FastPagedBackend over its shard (packed weights, the kernel sets, threads).
/// ```text
/// In:  the whole model, a rank's place in the grid, its stage's group; FastOptions per rank.
/// Out: the RankPart ParallelPagedBackend runs at that rank (rank_part.hpp).
///
///   FastRankPart = FastPagedBackend over shard_model's copy (run, pool and K/V shipments as
///                  BackendRankPart passes them, rank_part.hpp), told its share (RankShare):
///     first_layer, vocab_begin   which layers and vocabulary rows the shard holds
///     add_across_ranks           the group's all_reduce_sum (rank order: the same bits everywhere)
///   FastModel completes the embedding's, Wo's and W2's partial sums where the reference's
///   PartialSums does (transformer.hpp), with the fast path's kernels and threads in between.
///   Once the shard is packed, its fp32 matrices are let go (release_shard_matrices): a rank
///   holds its panels plus its embedding rows, gains and biases, not two copies of its weights.
///
/// Threads are per rank (FastOptions::threads): tp 2 with 1 thread each uses the cores one process
/// with 2 threads uses. Pipeline stages alone (tp 1) run one FastPagedBackend's operations on the
/// same rows: one process's bits; tensor ranks sum Wo's and W2's products in tp pieces.
/// ```
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "glass/dist/rank_part.hpp"
#include "glass/dist/shard.hpp"
#include "glass/fast/fast_paged_backend.hpp"

namespace glass::dist {

class FastRankPart : public BackendRankPart<fast::FastPagedBackend> {
public:
    FastRankPart(const Model& whole, const RankPlace& at, Communicator& group, fast::FastOptions options)
        : shard_(shard_model(whole, at.split, at.stage.first_layer, at.stage.layers)),
          backend_(shard_, options, share_of(at, group)) {
        release_shard_matrices(shard_);  // packed now: the fp32 matrices go
        attach(backend_);
    }

    /// What the rank holds once its shard's matrices are let go: the packed panels with the norm
    /// gains and biases (weight_bytes: read from the shard every pass), and the shard's embedding
    /// rows (read one per token).
    std::int64_t held_weight_bytes() const override {
        const ModelConfig& c = shard_.config;
        return backend_.weight_bytes() + (shard_.token_embedding ? std::int64_t{4} * c.vocab_size * c.dim : 0);
    }
    const fast::FastPagedBackend& backend() const { return backend_; }

private:
    static RankShare share_of(const RankPlace& at, Communicator& group) {
        RankShare share{.first_layer = at.stage.first_layer, .vocab_begin = at.split.vocab_begin};
        if (group.size() > 1)  // tensor ranks: complete the partial sums (tp 1 adds nothing)
            share.add_across_ranks = [&group](float* values, std::int64_t n) {
                group.all_reduce_sum(std::span<float>(values, static_cast<size_t>(n)));
            };
        return share;
    }

    Model shard_;  // before backend_, which reads it
    fast::FastPagedBackend backend_;
};

/// Every rank's part on the fast path, for ParallelPagedBackend's `make` argument.
inline MakeRankPart fast_rank_parts(fast::FastOptions options) {
    return [options](const Model& whole, const RankPlace& at, Communicator& group) {
        return std::unique_ptr<RankPart>(std::make_unique<FastRankPart>(whole, at, group, options));
    };
}

}  // namespace glass::dist
