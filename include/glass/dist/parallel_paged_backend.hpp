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
/// One pass over the grid is split_paged_forward.hpp's; what each rank computes with is its
/// RankPart (rank_part.hpp: the CPU reference, the fast path or a GPU).
/// ```
#pragma once

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
#include "glass/dist/rank_part.hpp"
#include "glass/dist/split_paged_forward.hpp"
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

/// Options of a ParallelPagedBackend.
struct ParallelPagedOptions {
    KvType kv = KvType::fp32;     ///< the reference part's pool (a part made by a MakeRankPart picks its own)
    int micro_batches = 1;        ///< requests per step cut into this many groups (pipeline stages)
    std::int64_t rank_memory = 0;  ///< bytes one rank may hold (weights + KV pool); 0: no cap
};

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
