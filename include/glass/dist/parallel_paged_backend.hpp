/// \file
/// \brief glass/dist/parallel_paged_backend.hpp — the serving engine over a grid of ranks: rank 0
/// runs the scheduler, the engine and the HTTP server unchanged; every rank holds its part of the
/// weights and of the KV pool.
/// ```text
/// In:  each engine step's batch (serve/paged_backend.hpp: per request its new tokens, first
///      position and block table), decided at rank 0.
/// Out: at rank 0, the logits rows the batch wants: the rows a one-process backend returns.
///
///   rank 0: engine.step() → forward(batch) ─ check ─ broadcast {forward, n} + batch ─ split_paged_forward → logits
///   rank r: follow() ─────────────────────── receive {forward, n} + batch ────────── split_paged_forward → (nothing)
///
/// The batch travels as ints (pack_batch): the entry count, per entry {start, tokens, blocks,
/// wants_logits, every_row}, then each entry's tokens and block table. Every rank keeps the same
/// block tables, so block b means the same positions everywhere: in rank r's pool it holds rank
/// r's KV heads (tensor parallelism) of rank r's layers (pipeline stages).
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
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/driven_session.hpp"
#include "glass/dist/parallel_session.hpp"
#include "glass/dist/split_shipment.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_transformer.hpp"

namespace glass::dist {

/// \brief A batch as the ints one broadcast carries: `[count, count × {start, n_tokens,
/// n_blocks, wants_logits, every_row}, tokens and block table of each entry]`.
inline std::vector<int> pack_batch(std::span<const serve::BatchEntry> batch) {
    std::vector<int> ints{static_cast<int>(batch.size())};
    for (const serve::BatchEntry& e : batch)
        ints.insert(ints.end(), {e.start, static_cast<int>(e.tokens.size()), static_cast<int>(e.block_table.size()),
                                 e.wants_logits ? 1 : 0, e.every_row ? 1 : 0});
    for (const serve::BatchEntry& e : batch) {
        ints.insert(ints.end(), e.tokens.begin(), e.tokens.end());
        ints.insert(ints.end(), e.block_table.begin(), e.block_table.end());
    }
    return ints;
}

/// \brief The entries of a packed batch; their spans point into `ints`, which must outlive them.
/// A message whose lengths do not add up is an Error (never a read past its end).
inline std::vector<serve::BatchEntry> unpack_batch(std::span<const int> ints) {
    constexpr size_t kFields = 5;
    if (ints.empty() || ints[0] < 0 || ints.size() < 1 + kFields * static_cast<size_t>(ints[0]))
        fail("a packed batch of ", ints.size(), " ints is too short for its header");
    const size_t count = static_cast<size_t>(ints[0]);
    std::vector<serve::BatchEntry> batch(count);
    size_t next = 1 + kFields * count;  // where entry 0's tokens begin
    for (size_t i = 0; i < count; ++i) {
        const int* f = &ints[1 + kFields * i];  // {start, n_tokens, n_blocks, wants_logits, every_row}
        if (f[1] < 0 || f[2] < 0 || next + static_cast<size_t>(f[1]) + static_cast<size_t>(f[2]) > ints.size())
            fail("a packed batch of ", ints.size(), " ints is too short for entry ", i);
        batch[i] = {.tokens = ints.subspan(next, static_cast<size_t>(f[1])),
                    .start = f[0],
                    .block_table = ints.subspan(next + static_cast<size_t>(f[1]), static_cast<size_t>(f[2])),
                    .wants_logits = f[3] != 0,
                    .every_row = f[4] != 0};
        next += static_cast<size_t>(f[1]) + static_cast<size_t>(f[2]);
    }
    return batch;
}

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

/// \brief What one rank of the grid computes with, and where its share of the KV pool lives: the
/// CPU reference (ReferenceRankPart, below) or a GPU (cuda/parallel_paged.hpp). The part does
/// its stage's layers on its heads and MLP units, the tensor-parallel all-reduces included (over
/// its stage's group, given when it is made); moving the stream between stages and gathering
/// the logits is split_paged_forward's, the same for every kind of part.
class RankPart {
public:
    virtual ~RankPart() = default;
    virtual KvType kv_type() const = 0;
    /// Bytes make_pool(num_blocks, block_size) would hold (checked against --rank-memory first).
    virtual std::int64_t pool_bytes_for(int num_blocks, int block_size) const = 0;
    /// This rank's pool: num_blocks × block_size positions of its layers and KV heads.
    virtual void make_pool(int num_blocks, int block_size) = 0;
    virtual std::int64_t pool_bytes() const = 0;
    /// \brief One micro-batch through this rank's layers. `input`: the stream `[N, dim]` from the
    /// stage before; empty at stage 0, which embeds the tokens. Returns the stream `[N, dim]` for
    /// the next stage or, when `last`, this rank's vocabulary slice of the logits of the rows
    /// append_logit_rows names, `[r, my vocab]`.
    virtual std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) = 0;
    /// This rank's rows of positions first .. end-1 in its shard's shipment layout (pack_kv_rows), and back.
    virtual std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const = 0;
    virtual void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) = 0;
    virtual std::int64_t weight_bytes() const = 0;       ///< what one position reads of its weights
    virtual std::int64_t held_weight_bytes() const = 0;  ///< with its embedding rows (held_weight_bytes)
};

/// The CPU reference's part: the rank's copy of its weights (shard_model), its PagedKVPool, and
/// transformer_block row by row (so no logit depends on the batch or its micro-batches).
class ReferenceRankPart : public RankPart {
public:
    ReferenceRankPart(const Model& whole, const RankPlace& at, Communicator& group, KvType kv)
        : at_(at), group_(group), kv_(kv), shard_(shard_model(whole, at.split, at.stage.first_layer, at.stage.layers)) {}

    KvType kv_type() const override { return kv_; }
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const override {
        return serve::PagedKVPool::bytes_for(shard_.config, num_blocks, block_size, kv_);
    }
    void make_pool(int num_blocks, int block_size) override {
        pool_ = serve::PagedKVPool(shard_.config, num_blocks, block_size, kv_);
    }
    std::int64_t pool_bytes() const override { return pool_.bytes(); }
    std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) override {
        const ModelConfig& c = shard_.config;
        std::vector<int> ids;  // the part's new tokens, stacked
        std::vector<SequenceRows> seqs;
        for (const serve::BatchEntry& e : part) {
            seqs.push_back({.first = static_cast<int>(ids.size()), .count = static_cast<int>(e.tokens.size()), .start = e.start});
            ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
        }
        const Eigen::Index n = static_cast<Eigen::Index>(ids.size());
        RowMatrix x = input.empty() ? embed_split(shard_, at_.split, ids, c.embedding_scale, group_)  // [N, dim]
                                    : RowMatrix(Eigen::Map<const RowMatrix>(input.data(), n, c.dim));
        serve::PagedKv kv{.pool = pool_, .batch = part, .first_layer = at_.stage.first_layer};
        stage_layers(shard_, at_, x, seqs, kv, RowOrder::row_by_row, group_);
        if (!last) return std::vector<float>(x.data(), x.data() + x.size());
        std::vector<int> wanted;
        for (size_t e = 0; e < part.size(); ++e) serve::append_logit_rows(part[e], seqs[e].first, wanted);
        RowMatrix rows(static_cast<Eigen::Index>(wanted.size()), c.dim);  // [r, dim]
        for (size_t i = 0; i < wanted.size(); ++i) rows.row(static_cast<Eigen::Index>(i)) = x.row(wanted[i]);
        return classify(shard_, rows, RowOrder::row_by_row);  // [r, my vocab]
    }
    std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const override {
        return serve::pack_kv_rows(pool_, table, first, end);
    }
    void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        serve::unpack_kv_rows(pool_, table, first, end, bytes);
    }
    std::int64_t weight_bytes() const override { return shard_.weight_bytes; }
    std::int64_t held_weight_bytes() const override { return dist::held_weight_bytes(shard_); }
    const Model& shard() const { return shard_; }

private:
    RankPlace at_;
    Communicator& group_;
    KvType kv_;
    Model shard_;
    serve::PagedKVPool pool_;
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

/// Options of a ParallelPagedBackend.
struct ParallelPagedOptions {
    KvType kv = KvType::fp32;     ///< the reference part's pool (a part made by a MakeRankPart picks its own)
    int micro_batches = 1;        ///< requests per step cut into this many groups (pipeline stages)
    std::int64_t rank_memory = 0;  ///< bytes one rank may hold (weights + KV pool); 0: no cap
};

/// Makes rank `at`'s part of `whole`, its tensor-parallel all-reduces over `group` (its stage).
using MakeRankPart = std::function<std::unique_ptr<RankPart>(const Model& whole, const RankPlace& at, Communicator& group)>;

/// \brief The engine's backend over a grid of tp × pp ranks, each running a RankPart: the CPU
/// reference's by default, a GPU's with cuda::cuda_rank_parts (cuda/parallel_paged.hpp). Rank 0
/// hands it to serve::Engine; every other rank calls follow() until rank 0 finishes. A pass that
/// fails (a rank threw, died or went silent past its transport's patience) leaves the group gone:
/// unavailable() says why, and every later pass is refused with that reason (a server answers 503).
class ParallelPagedBackend : public serve::PagedBackend {
public:
    /// `make`: this rank's part (empty: the CPU reference's, with `o.kv`).
    ParallelPagedBackend(const Model& whole, Communicator& world, ParallelShape shape, ParallelPagedOptions o = {},
                         const MakeRankPart& make = {})
        : world_(world),
          options_(o),
          whole_(whole.config),
          at_(rank_place(whole.config, shape, world.rank(), world.size())),
          group_(world, stage_members(shape, at_.stage.rank)),
          part_(make ? make(whole, at_, group_) : std::make_unique<ReferenceRankPart>(whole, at_, group_, o.kv)) {
        if (o.micro_batches < 1) fail("micro-batches must be at least 1, not ", o.micro_batches);
        check_rank_memory(0);
    }
    ~ParallelPagedBackend() override {
        try {
            finish();
        } catch (...) {  // a rank that is gone cannot be told to stop
        }
    }

    const ModelConfig& config() const override { return whole_; }
    void allocate_pool(int num_blocks, int block_size) override {
        if (const std::string why = unavailable(); !why.empty()) fail(why);
        announce({Kind::allocate, 0, num_blocks, block_size}, {});
        make_pool(num_blocks, block_size);
    }
    std::int64_t pool_bytes() const override { return part_->pool_bytes(); }  // this rank's
    KvType kv_type() const override { return part_->kv_type(); }
    std::span<const float> forward(std::span<const serve::BatchEntry> batch) override {
        serve::check_batch(whole_, batch, num_blocks_, block_size_);  // refused here, before any rank hears of it
        return as_group([&] {
            const std::vector<int> ints = pack_batch(batch);
            announce({Kind::forward, static_cast<std::int32_t>(ints.size()), 0, 0}, ints);
            logits_ = split_paged_forward(*part_, at_, whole_, batch, options_.micro_batches, world_, group_, &clock_);
            return std::span<const float>(logits_);
        });
    }
    std::string unavailable() const override {
        const std::lock_guard<std::mutex> lock(gone_mutex_);
        return gone_;
    }
    /// An idle server's tick: the other ranks, waiting in follow() for the next step, hear that
    /// rank 0 is still there before their wait reaches the transport's patience (a hang guard).
    void keep_alive() override {
        if (world_.rank() != 0 || finished_ || !unavailable().empty()) return;
        try {
            announce({Kind::ping, 0, 0, 0}, {});
        } catch (const std::exception& e) {
            const std::lock_guard<std::mutex> lock(gone_mutex_);
            gone_ = std::string("the model's group of ranks is gone: ") + e.what();
        }
    }
    // Disaggregated prefill/decode (serve/kv_shipment.hpp): rank 0 tells every rank, each packs
    // or unpacks its share (its layers, its KV heads: split_shipment.hpp), and rank 0 puts the
    // shares together or sends each rank its own. Checked at rank 0 before any rank hears of it.
    std::vector<std::byte> export_kv(std::span<const int> table, int first, int end) const override {
        check_shipment(table, first, end);
        return as_group([&] {
            announce({Kind::export_kv, static_cast<std::int32_t>(table.size()), first, end}, table);
            return gather_shares(table, first, end);
        });
    }
    void import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        const std::int64_t expected = check_shipment(table, first, end);
        if (static_cast<std::int64_t>(bytes.size()) != expected)
            fail("KV shipment: ", bytes.size(), " bytes for ", end - first, " positions, expected ", expected);
        as_group([&] {
            announce({Kind::import_kv, static_cast<std::int32_t>(table.size()), first, end}, table);
            scatter_shares(table, first, end, bytes);
            return 0;
        });
    }
    std::int64_t weight_bytes() const override { return part_->weight_bytes(); }  // this rank's
    /// What this rank holds: its weights (its embedding rows included) and its KV pool.
    std::int64_t held_bytes() const { return part_->held_weight_bytes() + part_->pool_bytes(); }

    /// Ranks > 0: repeat rank 0's steps until it finishes. Returns the forward passes run.
    std::int64_t follow() {
        if (world_.rank() == 0) fail("follow() is for ranks > 0: rank 0 drives the backend");
        for (;;) {
            Header h{};
            const std::vector<int> ints = receive_step(world_, h);
            switch (h.kind) {
            case Kind::finish: return clock_.passes;
            case Kind::ping: break;  // rank 0 is idle, and still there
            case Kind::allocate: make_pool(h.a, h.b); break;
            case Kind::forward: {
                const std::vector<serve::BatchEntry> batch = unpack_batch(ints);
                split_paged_forward(*part_, at_, whole_, batch, options_.micro_batches, world_, group_, &clock_);
                break;
            }
            case Kind::export_kv: gather_shares(ints, h.a, h.b); break;
            case Kind::import_kv: scatter_shares(ints, h.a, h.b, {}); break;
            }
        }
    }
    /// Rank 0: tells the other ranks to return from follow(). The destructor calls it if not before.
    void finish() {
        if (world_.rank() != 0 || finished_) return;
        finished_ = true;
        announce({Kind::finish, 0, 0, 0}, {});
    }

    const RankPlace& place() const { return at_; }
    const RankPart& part() const { return *part_; }
    const StageClock& clock() const { return clock_; }
    void reset_clock() { clock_ = {}; }
    Communicator& stage_group() { return group_; }

private:
    enum class Kind : std::int32_t { allocate, forward, finish, ping, export_kv, import_kv };
    struct Header {
        Kind kind;
        std::int32_t count;  // ints that follow
        std::int32_t a, b;   // allocate's num_blocks, block_size; a shipment's first, end
    };

    // f() as a step of the whole group: if it fails (a rank threw, died or went silent), the
    // group is gone for good and every later step is refused with the reason.
    template <typename F>
    auto as_group(F f) const -> decltype(f()) {
        if (const std::string why = unavailable(); !why.empty()) fail(why);
        try {
            return f();
        } catch (const std::exception& e) {
            const std::lock_guard<std::mutex> lock(gone_mutex_);
            gone_ = std::string("the model's group of ranks is gone: ") + e.what();
            throw;
        }
    }
    // Rank 0: refuses a bad range or table before any rank hears of it; the whole shipment's bytes.
    std::int64_t check_shipment(std::span<const int> table, int first, int end) const {
        if (num_blocks_ == 0) fail("KV shipment: no KV pool yet (allocate_pool first)");
        serve::check_kv_table(num_blocks_, block_size_, table, first, end, "KV shipment");
        return serve::kv_shipment_bytes(serve::kv_shipment_header(whole_, kv_type(), end - first));
    }
    // Every rank: its share of positions first .. end-1 to rank 0, which puts the whole together.
    std::vector<std::byte> gather_shares(std::span<const int> table, int first, int end) const {
        std::vector<std::byte> mine = part_->pack_rows(table, first, end);
        if (world_.rank() != 0) {
            world_.send(0, std::span<const std::byte>(mine));
            return {};
        }
        std::vector<std::byte> whole(
            static_cast<size_t>(serve::kv_shipment_bytes(serve::kv_shipment_header(whole_, kv_type(), end - first))));
        put_share(whole_, kv_type(), at_.stage, at_.split, end - first, mine.data(), whole.data());
        for (int r = 1; r < world_.size(); ++r) {
            const RankPlace there = rank_place(whole_, at_.shape, r, world_.size());
            std::vector<std::byte> share(static_cast<size_t>(share_bytes(whole_, kv_type(), there.stage, there.split, end - first)));
            world_.recv(r, std::span<std::byte>(share));
            put_share(whole_, kv_type(), there.stage, there.split, end - first, share.data(), whole.data());
        }
        return whole;
    }
    // Rank 0 cuts `whole` into every rank's share and sends it; each rank stores its own.
    void scatter_shares(std::span<const int> table, int first, int end, std::span<const std::byte> whole) {
        const auto share_of = [&](const RankPlace& at) {
            return std::vector<std::byte>(static_cast<size_t>(share_bytes(whole_, kv_type(), at.stage, at.split, end - first)));
        };
        std::vector<std::byte> mine = share_of(at_);
        if (world_.rank() != 0) {
            world_.recv(0, std::span<std::byte>(mine));
        } else {
            for (int r = 1; r < world_.size(); ++r) {
                const RankPlace there = rank_place(whole_, at_.shape, r, world_.size());
                std::vector<std::byte> share = share_of(there);
                take_share(whole_, kv_type(), there.stage, there.split, end - first, whole.data(), share.data());
                world_.send(r, std::span<const std::byte>(share));
            }
            take_share(whole_, kv_type(), at_.stage, at_.split, end - first, whole.data(), mine.data());
        }
        part_->unpack_rows(table, first, end, mine);
    }

    void announce(Header h, std::span<const int> ints) const {
        if (world_.rank() != 0) fail("rank ", world_.rank(), " follows: only rank 0 drives the backend");
        if (finished_ && h.kind != Kind::finish) fail("this split backend has finished");
        announce_step(world_, h, ints);  // driven_session.hpp
    }
    void make_pool(int num_blocks, int block_size) {
        check_rank_memory(part_->pool_bytes_for(num_blocks, block_size));
        part_->make_pool(num_blocks, block_size);
        num_blocks_ = num_blocks;
        block_size_ = block_size;
    }
    void check_rank_memory(std::int64_t pool_bytes) const {
        dist::check_rank_memory(part_->held_weight_bytes(), pool_bytes, "KV pool", options_.rank_memory);
    }

    Communicator& world_;
    ParallelPagedOptions options_;
    ModelConfig whole_;
    RankPlace at_;
    SubCommunicator group_;
    std::unique_ptr<RankPart> part_;
    int num_blocks_ = 0, block_size_ = 0;  // the pool every rank allocated
    std::vector<float> logits_;
    StageClock clock_;
    bool finished_ = false;
    mutable std::mutex gone_mutex_;
    mutable std::string gone_;  // why the group is gone (a step failed), read by server threads
};

}  // namespace glass::dist
