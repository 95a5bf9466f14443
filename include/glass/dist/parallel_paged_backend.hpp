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

/// \brief One forward pass of this rank's part over a batch (every rank, the same batch), its
/// requests in `micro_batches` groups: at rank 0 the logits rows append_logit_rows names
/// `[n_rows, vocab]`, empty elsewhere. split_forward (parallel_session.hpp) for one sequence.
inline std::vector<float> split_paged_forward(const Model& shard, const RankPlace& at, const ModelConfig& whole,
                                              serve::PagedKVPool& pool, std::span<const serve::BatchEntry> batch,
                                              int micro_batches, Communicator& world, Communicator& group,
                                              StageClock* clock = nullptr) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const Clock::time_point pass_start = Clock::now();
    const ModelConfig& c = shard.config;
    const PipelineStage& stage = at.stage;
    std::vector<float> logits;  // [rows so far, vocab]: at the last stage's tensor rank 0
    for (const MicroBatch& mb : cut_micro_batches(batch, micro_batches)) {
        const std::span<const serve::BatchEntry> part = batch.subspan(static_cast<size_t>(mb.begin), static_cast<size_t>(mb.end - mb.begin));
        std::vector<int> ids;  // the part's new tokens, stacked
        std::vector<SequenceRows> seqs;
        for (const serve::BatchEntry& e : part) {
            seqs.push_back({.first = static_cast<int>(ids.size()), .count = static_cast<int>(e.tokens.size()), .start = e.start});
            ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
        }
        // 1. In: the first stage embeds; a later one waits for the stream from its peer before it.
        const Clock::time_point input_start = Clock::now();
        RowMatrix x = stage_input(shard, at, ids, world, group);  // [N, dim] (parallel_session.hpp)
        // stage 0's input is work (the embedding); a later stage's is waiting for the one before
        const Clock::time_point busy_start = stage.rank == 0 ? input_start : Clock::now();
        // 2. This stage's layers over the part's requests, row by row (batch-invariant bits).
        serve::PagedKv kv{.pool = pool, .batch = part, .first_layer = stage.first_layer};
        stage_layers(shard, at, x, seqs, kv, RowOrder::row_by_row, group);
        // 3. Out: the stream to the next stage, or the wanted rows' logits (vocabulary slices gathered).
        if (!stage.is_last()) {
            if (clock) clock->busy_seconds += seconds_since(busy_start);
            pass_stream_on(at, x, world);
            continue;
        }
        std::vector<int> wanted;
        for (size_t e = 0; e < part.size(); ++e) serve::append_logit_rows(part[e], seqs[e].first, wanted);
        RowMatrix rows(static_cast<Eigen::Index>(wanted.size()), c.dim);  // [r, dim]
        for (size_t i = 0; i < wanted.size(); ++i) rows.row(static_cast<Eigen::Index>(i)) = x.row(wanted[i]);
        const std::vector<float> mine = classify_split(shard, at.split, whole.vocab_size, rows, group, RowOrder::row_by_row);
        logits.insert(logits.end(), mine.begin(), mine.end());
        if (clock) clock->busy_seconds += seconds_since(busy_start);
    }
    // 4. The last stage's tensor rank 0 hands every micro-batch's logits to rank 0 at once (so it
    //    never waits on rank 0, which is still busy with its own micro-batches).
    const int last_stage_head = at.shape.rank_of(stage.ranks - 1, 0);
    if (world.rank() == last_stage_head && last_stage_head != 0) world.send(0, std::span<const float>(logits));
    if (world.rank() == 0 && last_stage_head != 0) {
        std::vector<int> wanted_all;  // only their count matters here
        int first = 0;
        for (const serve::BatchEntry& e : batch) {
            serve::append_logit_rows(e, first, wanted_all);
            first += static_cast<int>(e.tokens.size());
        }
        logits.resize(wanted_all.size() * static_cast<size_t>(whole.vocab_size));
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
    KvType kv = KvType::fp32;
    int micro_batches = 1;        ///< requests per step cut into this many groups (pipeline stages)
    std::int64_t rank_memory = 0;  ///< bytes one rank may hold (weights + KV pool); 0: no cap
};

/// \brief The engine's backend over a grid of tp × pp ranks (the CPU reference, split). Rank 0
/// hands it to serve::Engine; every other rank calls follow() until rank 0 finishes. A pass that
/// fails (a rank threw, died or went silent past its transport's patience) leaves the group gone:
/// unavailable() says why, and every later pass is refused with that reason (a server answers 503).
class ParallelPagedBackend : public serve::PagedBackend {
public:
    ParallelPagedBackend(const Model& whole, Communicator& world, ParallelShape shape, ParallelPagedOptions o = {})
        : world_(world),
          options_(o),
          whole_(whole.config),
          at_(rank_place(whole.config, shape, world.rank(), world.size())),
          group_(world, stage_members(shape, at_.stage.rank)),
          shard_(shard_model(whole, at_.split, at_.stage.first_layer, at_.stage.layers)) {
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
    std::int64_t pool_bytes() const override { return pool_.bytes(); }  // this rank's
    KvType kv_type() const override { return options_.kv; }
    std::span<const float> forward(std::span<const serve::BatchEntry> batch) override {
        serve::check_batch(whole_, batch, pool_.num_blocks(), pool_.block_size());  // refused here, before any rank hears of it
        return as_group([&] {
            const std::vector<int> ints = pack_batch(batch);
            announce({Kind::forward, static_cast<std::int32_t>(ints.size()), 0, 0}, ints);
            logits_ = split_paged_forward(shard_, at_, whole_, pool_, batch, options_.micro_batches, world_, group_, &clock_);
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
    std::int64_t weight_bytes() const override { return shard_.weight_bytes; }  // this rank's
    /// What this rank holds: its weights (its embedding rows included) and its KV pool.
    std::int64_t held_bytes() const { return held_weight_bytes(shard_) + pool_.bytes(); }

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
                split_paged_forward(shard_, at_, whole_, pool_, batch, options_.micro_batches, world_, group_, &clock_);
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
    const Model& shard() const { return shard_; }
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
        if (pool_.num_blocks() == 0) fail("KV shipment: no KV pool yet (allocate_pool first)");
        serve::check_kv_table(pool_.num_blocks(), pool_.block_size(), table, first, end, "KV shipment");
        return serve::kv_shipment_bytes(serve::kv_shipment_header(whole_, options_.kv, end - first));
    }
    // Every rank: its share of positions first .. end-1 to rank 0, which puts the whole together.
    std::vector<std::byte> gather_shares(std::span<const int> table, int first, int end) const {
        std::vector<std::byte> mine = serve::pack_kv_rows(pool_, table, first, end);
        if (world_.rank() != 0) {
            world_.send(0, std::span<const std::byte>(mine));
            return {};
        }
        std::vector<std::byte> whole(
            static_cast<size_t>(serve::kv_shipment_bytes(serve::kv_shipment_header(whole_, options_.kv, end - first))));
        put_share(whole_, options_.kv, at_.stage, at_.split, end - first, mine.data(), whole.data());
        for (int r = 1; r < world_.size(); ++r) {
            const RankPlace there = rank_place(whole_, at_.shape, r, world_.size());
            std::vector<std::byte> share(static_cast<size_t>(share_bytes(whole_, options_.kv, there.stage, there.split, end - first)));
            world_.recv(r, std::span<std::byte>(share));
            put_share(whole_, options_.kv, there.stage, there.split, end - first, share.data(), whole.data());
        }
        return whole;
    }
    // Rank 0 cuts `whole` into every rank's share and sends it; each rank stores its own.
    void scatter_shares(std::span<const int> table, int first, int end, std::span<const std::byte> whole) {
        const auto share_of = [&](const RankPlace& at) {
            return std::vector<std::byte>(static_cast<size_t>(share_bytes(whole_, options_.kv, at.stage, at.split, end - first)));
        };
        std::vector<std::byte> mine = share_of(at_);
        if (world_.rank() != 0) {
            world_.recv(0, std::span<std::byte>(mine));
        } else {
            for (int r = 1; r < world_.size(); ++r) {
                const RankPlace there = rank_place(whole_, at_.shape, r, world_.size());
                std::vector<std::byte> share = share_of(there);
                take_share(whole_, options_.kv, there.stage, there.split, end - first, whole.data(), share.data());
                world_.send(r, std::span<const std::byte>(share));
            }
            take_share(whole_, options_.kv, at_.stage, at_.split, end - first, whole.data(), mine.data());
        }
        serve::unpack_kv_rows(pool_, table, first, end, mine);
    }

    void announce(Header h, std::span<const int> ints) const {
        if (world_.rank() != 0) fail("rank ", world_.rank(), " follows: only rank 0 drives the backend");
        if (finished_ && h.kind != Kind::finish) fail("this split backend has finished");
        announce_step(world_, h, ints);  // driven_session.hpp
    }
    void make_pool(int num_blocks, int block_size) {
        check_rank_memory(serve::PagedKVPool::bytes_for(shard_.config, num_blocks, block_size, options_.kv));
        pool_ = serve::PagedKVPool(shard_.config, num_blocks, block_size, options_.kv);
    }
    void check_rank_memory(std::int64_t pool_bytes) const {
        dist::check_rank_memory(shard_, pool_bytes, "KV pool", options_.rank_memory);
    }

    Communicator& world_;
    ParallelPagedOptions options_;
    ModelConfig whole_;
    RankPlace at_;
    SubCommunicator group_;
    Model shard_;
    serve::PagedKVPool pool_;
    std::vector<float> logits_;
    StageClock clock_;
    bool finished_ = false;
    mutable std::mutex gone_mutex_;
    mutable std::string gone_;  // why the group is gone (a step failed), read by server threads
};

}  // namespace glass::dist
