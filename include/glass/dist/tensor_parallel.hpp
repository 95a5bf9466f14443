/// \file
/// \brief glass/dist/tensor_parallel.hpp — one model over several ranks, each holding a slice of
/// every layer (the CPU reference's forward pass, split as dist/shard.hpp draws).
/// ```text
/// In:  the ids of a step (rank 0 decides them; the others receive them), each rank's shard.
/// Out: at rank 0, the logits the whole model would give (within fp32 rounding: see below).
///
///   rank 0 (the driver)                     rank r > 0 (a worker)
///   ───────────────────                     ─────────────────────
///   prefill/decode(ids)
///     broadcast {kind, ids} ───────────────▶ receive {kind, ids}
///   x = my vocabulary rows of ids            x = my vocabulary rows of ids (zeros elsewhere)
///   all-reduce x ◀─────────────────────────▶ all-reduce x               [n, dim], whole rows
///   for each layer:                          for each layer:
///     transformer_block on my heads            the same on its heads
///     all-reduce Wo's partial ◀────────────▶   all-reduce
///     all-reduce W2's partial ◀────────────▶   all-reduce
///   logits of my vocabulary slice            logits of its slice
///   gather the slices ◀────────────────────  send its slice
///   return logits [vocab]                    wait for the next step
///
/// Every rank runs transformer_block (transformer.hpp), the same code as one process, with a
/// PartialSums that all-reduces. This header holds the pieces (the all-reduce, the split
/// embedding, the gathered logits); parallel_session.hpp puts them in order (split_forward) and
/// wraps them in a Session (TensorParallelSession), together with pipeline stages. The all-reduce adds partials in rank order, so every rank holds
/// the same bits and a run is reproducible whatever the transport; against one process, Wo's
/// and W2's dot products are summed in two pieces instead of one, which moves logits by a few
/// fp32 roundings (tests: within 1e-5 relative), not the greedy ids.
/// ```
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/shard.hpp"
#include "glass/transformer.hpp"

namespace glass::dist {

/// transformer_block's PartialSums over a Communicator: an all-reduce, in rank order.
struct AllReducePartials : PartialSums {
    Communicator& comm;
    explicit AllReducePartials(Communicator& c) : comm(c) {}
    void add_across_ranks(RowMatrix& partial) override {
        comm.all_reduce_sum(std::span<float>(partial.data(), static_cast<size_t>(partial.size())));
    }
};

/// \brief The rows of `ids` in the whole embedding table, built from every rank's slice: each
/// rank writes the rows of the ids it holds (times the embedding scale) and zeros elsewhere, and
/// the all-reduce adds exactly one nonzero row per id, so the result equals embed_tokens' bits.
inline RowMatrix embed_split(const Model& shard, const TensorSplit& s, std::span<const int> ids, float scale,
                             Communicator& comm) {
    RowMatrix x = RowMatrix::Zero(static_cast<Eigen::Index>(ids.size()), shard.config.dim);  // [n, dim]
    const ConstMatrixMap slice = shard.embedding_table();  // [my vocab, dim]
    for (size_t t = 0; t < ids.size(); ++t)
        if (ids[t] >= s.vocab_begin && ids[t] < s.vocab_begin + s.vocab)
            x.row(static_cast<Eigen::Index>(t)) = slice.row(ids[t] - s.vocab_begin);
    if (scale != 1.0f) x *= scale;
    comm.all_reduce_sum(std::span<float>(x.data(), static_cast<size_t>(x.size())));
    return x;
}

/// \brief Every rank's slice `mine` `[r, s.vocab]` of `r` rows of logits, gathered at rank 0 into
/// `[r, vocab]` (row-major; empty on the other ranks). Whoever computed the slices (the CPU
/// below, a GPU: cuda/parallel_paged.cpp), the whole rows are put together here.
inline std::vector<float> gather_vocab_slices(std::span<const float> mine, size_t r, const TensorSplit& s, int vocab,
                                              Communicator& comm) {
    const size_t stride = static_cast<size_t>(s.vocab_stride);
    std::vector<float> padded(r * stride, 0.0f);  // [r, stride]: my slice, padded to the common width
    for (size_t i = 0; i < r; ++i)
        std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(s.vocab)), s.vocab,
                    padded.begin() + static_cast<std::ptrdiff_t>(i * stride));
    std::vector<float> all(comm.rank() == 0 ? r * stride * static_cast<size_t>(s.ranks) : 0);
    comm.gather(std::span<const float>(padded), std::span<float>(all), 0);
    if (comm.rank() != 0) return {};
    std::vector<float> logits(r * static_cast<size_t>(vocab));  // [r, vocab]
    for (int q = 0; q < s.ranks; ++q) {  // rank q's slice: vocabulary rows [begin, end)
        const int begin = std::min(vocab, q * s.vocab_stride), end = std::min(vocab, (q + 1) * s.vocab_stride);
        for (size_t i = 0; i < r; ++i)
            std::copy_n(all.begin() + static_cast<std::ptrdiff_t>((static_cast<size_t>(q) * r + i) * stride), end - begin,
                        logits.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(vocab) + static_cast<size_t>(begin)));
    }
    return logits;
}

/// \brief Every rank's vocabulary slice of the logits of `rows` `[r, dim]`, gathered at rank 0
/// into `[r, vocab]` (row-major; empty on the other ranks). `order`: as classify's (the serving
/// engine's batches go row by row, so a request's logits never depend on its batch).
inline std::vector<float> classify_split(const Model& shard, const TensorSplit& s, int vocab, const RowMatrix& rows,
                                         Communicator& comm, RowOrder order = RowOrder::whole_batch) {
    const std::vector<float> slice = classify(shard, rows, order);  // [r, my vocab]
    return gather_vocab_slices(slice, static_cast<size_t>(rows.rows()), s, vocab, comm);
}

}  // namespace glass::dist
