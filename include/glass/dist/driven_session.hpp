/// \file
/// \brief glass/dist/driven_session.hpp — one Session, many ranks: rank 0 drives, the others
/// repeat its steps.
/// ```text
/// A model split over ranks (tensor_parallel.hpp, pipeline_parallel.hpp) is still one Session to
/// generate(), the CLI and the tests, but only at rank 0. Every step rank 0 takes is announced to
/// the others first, and each rank then does its part of it:
///
///   rank 0: prefill(ids) ─ check ids ─ broadcast {prefill, n} + ids ─ forward(ids) ─▶ logits
///   rank r:      follow() ─ receive {prefill, n} + ids ──────────────── forward(ids) ─▶ (nothing)
///
/// The steps: prefill (decode is a prefill of one id), verify (every position's logits), reset,
/// rewind, finish (follow() returns). rank 0 checks each step's input before announcing it, so a
/// bad id or position is refused there and the other ranks never see it.
/// ```
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"
#include "glass/kv_cache.hpp"
#include "glass/session.hpp"
#include "glass/transformer.hpp"

namespace glass::dist {

/// \brief Rank 0's half of one step of the driver protocol: a header (its `count` says how many
/// ints follow), then the ints, broadcast to every rank. (DrivenSession here, and the serving
/// engine's ParallelPagedBackend, speak it.)
template <typename Header>
void announce_step(Communicator& comm, Header h, std::span<const int> ints) {
    comm.broadcast(std::span<Header>(&h, 1), 0);
    if (ints.empty()) return;
    std::vector<int> copy(ints.begin(), ints.end());
    comm.broadcast(std::span<int>(copy), 0);
}

/// \brief The other ranks' half: the header into `h`, then its `h.count` ints.
template <typename Header>
std::vector<int> receive_step(Communicator& comm, Header& h) {
    comm.broadcast(std::span<Header>(&h, 1), 0);
    std::vector<int> ints(static_cast<size_t>(h.count));
    if (h.count > 0) comm.broadcast(std::span<int>(ints), 0);
    return ints;
}

/// \brief The driver/follower protocol of a split Session. A subclass says how its rank computes
/// a forward pass (`forward`: every rank, the same ids; logits at rank 0) and owns the rank's KV
/// cache (`cache`).
class DrivenSession : public Session {
public:
    explicit DrivenSession(Communicator& comm) : comm_(comm) {}
    ~DrivenSession() override {
        try {
            finish();
        } catch (...) {  // a rank that is gone cannot be told to stop; nothing else to do
        }
    }

    int position() const override { return cache().length(); }
    KvType kv_type() const override { return cache().type(); }

    void reset() override {
        announce({Kind::reset, 0, 0}, {});
        cache().clear();
    }
    void rewind(int position) override {
        check_rewind(position, cache().length());  // refused here, before any other rank hears of it
        announce({Kind::rewind, 0, position}, {});
        cache().rewind(position);
    }
    std::span<const float> prefill(std::span<const int> ids) override { return step(Kind::prefill, ids); }
    std::span<const float> decode(int id) override {  // a decoded token is a prefill of one id
        const int one[1] = {id};
        return step(Kind::prefill, one);
    }
    std::span<const float> verify(std::span<const int> ids) override { return step(Kind::verify, ids); }

    /// Ranks > 0: repeat rank 0's steps until it finishes. Returns the forward passes run.
    std::int64_t follow() {
        if (comm_.rank() == 0) fail("follow() is for ranks > 0: rank 0 drives the session");
        for (std::int64_t passes = 0;;) {
            Header h{};
            const std::vector<int> ids = receive_step(comm_, h);
            switch (h.kind) {
            case Kind::finish: return passes;
            case Kind::reset: cache().clear(); break;
            case Kind::rewind: cache().rewind(h.argument); break;
            case Kind::prefill:
            case Kind::verify:
                forward(ids, h.kind == Kind::verify);
                ++passes;
                break;
            }
        }
    }
    /// Rank 0: tells the other ranks to return from follow(). The destructor calls it if not before.
    void finish() {
        if (comm_.rank() != 0 || finished_) return;
        finished_ = true;
        announce({Kind::finish, 0, 0}, {});
    }

    Communicator& communicator() { return comm_; }

protected:
    /// One forward pass of this rank's part over `ids` at positions `cache().length() ..`;
    /// advances the cache. Returns at rank 0 the last position's logits `[vocab]` (every
    /// position's `[n, vocab]` when `all_positions`), empty elsewhere.
    virtual std::vector<float> forward(std::span<const int> ids, bool all_positions) = 0;
    virtual KVCache& cache() = 0;
    virtual const KVCache& cache() const = 0;

private:
    enum class Kind : std::int32_t { prefill, verify, reset, rewind, finish };
    struct Header {
        Kind kind;
        std::int32_t count;     // ids that follow
        std::int32_t argument;  // rewind's position
    };

    void announce(Header h, std::span<const int> ids) {
        if (comm_.rank() != 0) fail("rank ", comm_.rank(), " follows: only rank 0 drives the session");
        if (finished_ && h.kind != Kind::finish) fail("this split session has finished");
        announce_step(comm_, h, ids);
    }
    std::span<const float> step(Kind kind, std::span<const int> ids) {
        check_forward_input(config(), cache().length(), ids);  // refused here, before any other rank hears of it
        announce({kind, static_cast<std::int32_t>(ids.size()), 0}, ids);
        logits_ = forward(ids, kind == Kind::verify);
        return logits_;
    }

    Communicator& comm_;
    std::vector<float> logits_;
    bool finished_ = false;
};

}  // namespace glass::dist
