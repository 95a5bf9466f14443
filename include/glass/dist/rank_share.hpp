/// \file
/// \brief glass/dist/rank_share.hpp — what a fast or CUDA forward pass must know to run one
/// rank's share of a split model, and nothing else (no Eigen, no communicator: plain data and one
/// callback).
/// ```text
/// In:  the rank's shard (dist/shard.hpp: its layers, heads, MLP units and vocabulary rows) and
///      where that shard sits in the whole model.
/// Out: three corrections to a one-process forward pass, each named where it happens:
///        layer numbers   layer i of the shard is the whole model's first_layer + i (Gemma 3's
///                        sliding windows and RoPE bases go by the whole model's numbering)
///        embedding       ids outside [vocab_begin, vocab_begin + rows) give zero rows here;
///                        add_across_ranks fills them in from the rank that holds them
///        Wo and W2       each product over this rank's heads / hidden units is a partial sum;
///                        add_across_ranks completes it before it joins the residual stream
/// ```
/// The fast path (fast/fast_model.hpp, through dist/fast_rank_part.hpp) passes host pointers to
/// add_across_ranks; the CUDA path (cuda/forward.hpp, through cuda/parallel_paged.hpp) passes
/// device pointers. Either way every rank of the tensor-parallel group calls it with the same n,
/// in the same order, and gets the same bits back (dist::Communicator::all_reduce_sum: rank order).
#pragma once

#include <cstdint>
#include <functional>

namespace glass::dist {

/// \brief One rank's share of a split model. Default: one process, the whole model (no callback).
struct RankShare {
    int first_layer = 0;  ///< the whole model's number for the shard's layer 0 (pipeline stages)
    int vocab_begin = 0;  ///< the first vocabulary row the shard holds (tensor parallelism)
    /// Sums `values[0 .. n)` across the group, in place, on every rank (host or device memory).
    std::function<void(float* values, std::int64_t n)> add_across_ranks = {};
    bool split() const { return static_cast<bool>(add_across_ranks); }
};

}  // namespace glass::dist
