/// \file
/// \brief glass/dist/split_paged_forward.hpp — one forward pass of the serving engine's batch
/// over a grid of tp × pp ranks, written once for every kind of RankPart (rank_part.hpp).
/// ```text
/// In:  the step's batch (the same on every rank), this rank's place in the grid and its part.
/// Out: at rank 0, the logits rows the batch wants [n_rows, vocab]: the rows a one-process
///      backend returns; nothing elsewhere.
///
///   for each micro-batch (cut_micro_batches):
///     stage 0           part.run(ids)    ──stream [N, dim]──▶ next stage
///     stage s > 0       recv stream ─▶ part.run(stream) ──▶ next stage
///     last stage        part.run(...) ─▶ my vocabulary slice ─▶ gather_vocab_slices ─▶ logits
///   the last stage's tensor rank 0 sends every micro-batch's logits to rank 0 at once
///
/// Micro-batches (pipeline stages). One batch through pp stages leaves each stage idle while the
/// others work. Cut the batch's requests into m micro-batches and stage 0 starts the second
/// while stage 1 runs the first:
///
///   m = 1:  stage 0  [ A B C D ]                            time →
///           stage 1              [ A B C D ]       each stage idle (pp-1)/pp = 1/2 of the step
///   m = 4:  stage 0  [A][B][C][D]
///           stage 1     [A][B][C][D]               each stage idle (pp-1)/(m+pp-1) = 1/5
///
/// Requests are independent and every product runs row by row (serve/paged_transformer.hpp), so
/// no logit depends on m: micro-batching moves work in time, never bits. StageClock measures the
/// idle share (the bubble) each rank saw.
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "glass/config.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/rank_part.hpp"
#include "glass/dist/tensor_parallel.hpp"
#include "glass/serve/paged_backend.hpp"

namespace glass::dist {

/// Entries [begin, end) of a batch: one micro-batch.
struct MicroBatch {
    int begin = 0;
    int end = 0;
};

/// \brief The batch's entries cut, in order, into at most `m` micro-batches of about equal token
/// counts (never an empty one; fewer when the batch has fewer entries).
inline std::vector<MicroBatch> cut_micro_batches(std::span<const serve::BatchEntry> batch, int m) {
    if (m < 1) fail("micro-batches must be at least 1, not ", m);
    const int entries = static_cast<int>(batch.size());
    m = std::min(m, entries);
    std::int64_t total = 0;
    for (const serve::BatchEntry& e : batch) total += static_cast<std::int64_t>(e.tokens.size());
    std::vector<MicroBatch> cuts;
    std::int64_t seen = 0;
    int begin = 0;
    for (int e = 0; e < entries; ++e) {
        seen += static_cast<std::int64_t>(batch[static_cast<size_t>(e)].tokens.size());
        const int made = static_cast<int>(cuts.size());
        const bool share_reached = seen * m >= total * (made + 1);    // this micro-batch has its share
        const bool must_cut = entries - (e + 1) == m - (made + 1);     // one entry left per micro-batch to come
        if (made + 1 < m && (share_reached || must_cut)) {
            cuts.push_back({begin, e + 1});
            begin = e + 1;
        }
    }
    cuts.push_back({begin, entries});
    return cuts;
}

/// What one rank's forward passes cost in time: `busy` from each micro-batch's input (the ids, or
/// the stream from the stage before) to its output (the tensor-parallel all-reduces inside it
/// count as busy), `step` from the start of a pass to its end. 1 − busy/step is the share of its
/// passes this rank sat waiting for another stage: the pipeline's bubble.
struct StageClock {
    double busy_seconds = 0.0;
    double step_seconds = 0.0;
    std::int64_t passes = 0;
    double idle_share() const { return step_seconds > 0.0 ? 1.0 - busy_seconds / step_seconds : 0.0; }
};

/// The rows of `batch` whose logits are wanted (append_logit_rows), counted.
inline size_t count_logit_rows(std::span<const serve::BatchEntry> batch) {
    std::vector<int> wanted;
    int first = 0;
    for (const serve::BatchEntry& e : batch) {
        serve::append_logit_rows(e, first, wanted);
        first += static_cast<int>(e.tokens.size());
    }
    return wanted.size();
}

/// \brief One forward pass of this rank's part over a batch (every rank, the same batch), its
/// requests in `micro_batches` groups: at rank 0 the logits rows append_logit_rows names
/// `[n_rows, vocab]`, empty elsewhere. split_forward (parallel_session.hpp) for one sequence.
inline std::vector<float> split_paged_forward(RankPart& rank_part, const RankPlace& at, const ModelConfig& whole,
                                              std::span<const serve::BatchEntry> batch, int micro_batches,
                                              Communicator& world, Communicator& group, StageClock* clock = nullptr) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const Clock::time_point pass_start = Clock::now();
    const PipelineStage& stage = at.stage;
    std::vector<float> logits;  // [rows so far, vocab]: at the last stage's tensor rank 0
    for (const MicroBatch& mb : cut_micro_batches(batch, micro_batches)) {
        const std::span<const serve::BatchEntry> part = batch.subspan(static_cast<size_t>(mb.begin), static_cast<size_t>(mb.end - mb.begin));
        // 1. In: the first stage embeds (inside run); a later one waits for the stream from its peer before it.
        std::vector<float> input;
        if (stage.rank > 0) {
            size_t n = 0;
            for (const serve::BatchEntry& e : part) n += e.tokens.size();
            input.resize(n * static_cast<size_t>(whole.dim));  // [N, dim]
            world.recv(at.shape.rank_of(stage.rank - 1, at.split.rank), std::span<float>(input));
        }
        const Clock::time_point busy_start = Clock::now();  // a later stage's input was waiting, not work
        // 2. This stage's layers over the part's requests (row by row: batch-invariant bits).
        const std::vector<float> out = rank_part.run(part, input, stage.is_last());
        // 3. Out: the stream to the next stage, or the wanted rows' logits (vocabulary slices gathered).
        if (!stage.is_last()) {
            if (clock) clock->busy_seconds += seconds_since(busy_start);
            world.send(at.shape.rank_of(stage.rank + 1, at.split.rank), std::span<const float>(out));
            continue;
        }
        const std::vector<float> mine = gather_vocab_slices(out, count_logit_rows(part), at.split, whole.vocab_size, group);
        logits.insert(logits.end(), mine.begin(), mine.end());
        if (clock) clock->busy_seconds += seconds_since(busy_start);
    }
    // 4. The last stage's tensor rank 0 hands every micro-batch's logits to rank 0 at once (so it
    //    never waits on rank 0, which is still busy with its own micro-batches).
    const int last_stage_head = at.shape.rank_of(stage.ranks - 1, 0);
    if (world.rank() == last_stage_head && last_stage_head != 0) world.send(0, std::span<const float>(logits));
    if (world.rank() == 0 && last_stage_head != 0) {
        logits.resize(count_logit_rows(batch) * static_cast<size_t>(whole.vocab_size));
        world.recv(last_stage_head, std::span<float>(logits));
    }
    if (clock) {
        clock->step_seconds += seconds_since(pass_start);
        ++clock->passes;
    }
    return world.rank() == 0 ? logits : std::vector<float>{};
}

}  // namespace glass::dist
