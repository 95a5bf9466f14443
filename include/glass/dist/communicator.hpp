/// \file
/// \brief glass/dist/communicator.hpp — how the ranks of a split model talk: one interface, a
/// transport behind it.
/// ```text
/// When a model is split over several processes (tensor or pipeline parallelism, or prefill and
/// decode on separate pools), each process is a *rank* 0 .. size-1, and they exchange arrays:
///
///   send(to, data) / recv(from, data)   one rank to one other (pipeline stages, KV shipping)
///   broadcast(data, root)               root's array to everyone (each step's batch)
///   gather(mine, all, root)             every rank's array, in rank order, at root (logits)
///   all_gather(mine, all)               the same, at every rank
///   all_reduce_sum(values)              every rank ends with Σ over ranks of its values
///   barrier()                           nobody leaves before everybody arrived
///
/// Transports implement the byte-level send/recv (and may override a collective); the typed
/// calls and the counters live here, once:
///   ThreadCommunicator  (thread_communicator.hpp)  ranks are threads of one process: tests anywhere
///   MpiCommunicator     (mpi_communicator.hpp)     ranks are processes started by mpirun (Open MPI)
///
/// all_reduce_sum is an all_gather followed by a sum in rank order, ((v0 + v1) + v2) + ...,
/// written here and not left to the transport: MPI and NCCL choose their reduction order by
/// message size and rank count, so their sums can differ in the last bits between ranks and
/// between batch sizes. Ours gives every rank the same bits, whatever the transport.
///
/// Failures end, never hang: a peer that threw, died, or stopped answering for longer than
/// the transport's patience turns a waiting call into a glass::Error naming that rank.
/// ```
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "glass/errors.hpp"

namespace glass::dist {

/// Calls, bytes moved by this rank (sent plus received) and seconds spent waiting, for one kind
/// of call.
struct CallCounter {
    std::int64_t calls = 0;
    std::int64_t bytes = 0;
    double seconds = 0.0;
};

/// One CallCounter per kind of call: what `glass bench` and the tests read to say how much of a
/// step was communication.
struct CommCounters {
    CallCounter send, recv, broadcast, gather, all_gather, all_reduce, barrier;
};

/// \brief The ranks of one group, seen from one of them.
///
/// A transport implements `send_bytes`/`recv_bytes` (blocking; messages between one pair of ranks
/// arrive in the order they were sent). The collectives below are built from them in the plainest
/// way (root talks to each rank in turn); a transport may override one with its own.
class Communicator {
public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// The transport's name for logs and bench JSON: "threads", "mpi".
    virtual const char* transport() const = 0;

    // --- what a transport provides -------------------------------------------------------------
    virtual void send_bytes(int to, std::span<const std::byte> data) = 0;
    virtual void recv_bytes(int from, std::span<std::byte> data) = 0;

    // --- collectives over bytes (defaults: root-centred loops over send/recv) ------------------
    virtual void broadcast_bytes(std::span<std::byte> data, int root);
    /// `all` holds size() slices of mine.size() bytes, slice r from rank r (only at root).
    virtual void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all, int root);
    /// gather to rank 0, then broadcast: every rank's `all` holds every slice in rank order.
    virtual void all_gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all);
    virtual void barrier();

    // --- typed calls, counted ------------------------------------------------------------------
    template <typename T>
    void send(int to, std::span<const T> data) {
        Timed t(counters_.send, data.size_bytes());
        send_bytes(to, std::as_bytes(data));
    }
    template <typename T>
    void recv(int from, std::span<T> data) {
        Timed t(counters_.recv, data.size_bytes());
        recv_bytes(from, std::as_writable_bytes(data));
    }
    template <typename T>
    void broadcast(std::span<T> data, int root) {
        Timed t(counters_.broadcast, data.size_bytes());
        broadcast_bytes(std::as_writable_bytes(data), root);
    }
    /// root's `all` (size() × mine.size() elements) receives every rank's `mine` in rank order.
    template <typename T>
    void gather(std::span<const T> mine, std::span<T> all, int root) {
        check_slices(mine.size(), all.size(), rank() == root, "gather");
        Timed t(counters_.gather, mine.size_bytes());
        gather_bytes(std::as_bytes(mine), std::as_writable_bytes(all), root);
    }
    template <typename T>
    void all_gather(std::span<const T> mine, std::span<T> all) {
        check_slices(mine.size(), all.size(), true, "all_gather");
        Timed t(counters_.all_gather, all.size_bytes());
        all_gather_bytes(std::as_bytes(mine), std::as_writable_bytes(all));
    }

    /// \brief values ← Σ over ranks of each rank's values, added in rank order: every rank holds
    /// the same bits afterwards, for any transport and any length.
    void all_reduce_sum(std::span<float> values) {
        if (size() == 1) return;  // nothing to add, nothing moves: not counted
        Timed t(counters_.all_reduce, values.size_bytes() * static_cast<size_t>(size()));
        gathered_.resize(values.size() * static_cast<size_t>(size()));
        all_gather_bytes(std::as_bytes(std::span<const float>(values)), std::as_writable_bytes(std::span(gathered_)));
        const size_t n = values.size();
        for (size_t i = 0; i < n; ++i) {
            float sum = gathered_[i];  // rank 0's value, then ranks 1, 2, ... added in order
            for (size_t r = 1; r < static_cast<size_t>(size()); ++r) sum += gathered_[r * n + i];
            values[i] = sum;
        }
    }
    void synchronize() {
        Timed t(counters_.barrier, 0);
        barrier();
    }

    const CommCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }

protected:
    /// A peer rank number outside [0, size) or equal to our own: a programming error in the caller,
    /// reported by name rather than left to the transport.
    void check_peer(int peer, const char* what) const {
        if (peer < 0 || peer >= size() || peer == rank())
            fail(what, ": rank ", rank(), " cannot talk to rank ", peer, " (group of ", size(), ")");
    }

private:
    struct Timed {
        CallCounter& counter;
        std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
        Timed(CallCounter& c, size_t bytes) : counter(c) {
            ++counter.calls;
            counter.bytes += static_cast<std::int64_t>(bytes);
        }
        ~Timed() { counter.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
    };
    void check_slices(size_t mine, size_t all, bool holds_all, const char* what) const {
        if (holds_all && all != mine * static_cast<size_t>(size()))
            fail(what, ": the result holds ", all, " elements, not ", size(), " ranks × ", mine);
    }

    CommCounters counters_;
    std::vector<float> gathered_;
};

// --- the default collectives: root talks to every other rank in rank order ---------------------

inline void Communicator::broadcast_bytes(std::span<std::byte> data, int root) {
    if (rank() == root) {
        for (int r = 0; r < size(); ++r)
            if (r != root) send_bytes(r, data);
    } else {
        recv_bytes(root, data);
    }
}

inline void Communicator::gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all, int root) {
    if (rank() != root) {
        send_bytes(root, mine);
        return;
    }
    for (int r = 0; r < size(); ++r) {
        // .first(n), not subspan(offset, n): GCC 12 warns about the memcpy otherwise (subspan reads
        // n == SIZE_MAX as "to the end", and the warning follows that path).
        const std::span<std::byte> slice = all.subspan(static_cast<size_t>(r) * mine.size()).first(mine.size());
        if (r == root) std::memcpy(slice.data(), mine.data(), mine.size());
        else recv_bytes(r, slice);
    }
}

inline void Communicator::all_gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all) {
    gather_bytes(mine, all, 0);
    broadcast_bytes(all, 0);
}

inline void Communicator::barrier() {
    std::byte token[1] = {};
    all_gather_bytes(std::span<const std::byte>(token, 0), std::span<std::byte>(token, 0));
}

/// \brief A group inside a group: ranks `members` of `parent`, renumbered 0 .. n-1 in that order
/// (a tensor-parallel group inside a tp × pp grid: parallel_session.hpp).
///
/// Its messages travel as the parent's point-to-point messages, and its collectives are the
/// default ones above, built on them: any transport's ranks can form subgroups. A rank outside
/// `members` cannot hold one.
class SubCommunicator : public Communicator {
public:
    SubCommunicator(Communicator& parent, std::vector<int> members) : parent_(parent), members_(std::move(members)) {
        for (size_t i = 0; i < members_.size(); ++i)
            if (members_[i] == parent.rank()) rank_ = static_cast<int>(i);
        if (rank_ < 0) fail("rank ", parent.rank(), " is not a member of the subgroup it was asked to join");
    }

    int rank() const override { return rank_; }
    int size() const override { return static_cast<int>(members_.size()); }
    const char* transport() const override { return parent_.transport(); }
    /// The parent's number of this group's rank r.
    int parent_rank(int r) const { return members_[static_cast<size_t>(r)]; }

    void send_bytes(int to, std::span<const std::byte> data) override {
        check_peer(to, "send");
        parent_.send_bytes(parent_rank(to), data);
    }
    void recv_bytes(int from, std::span<std::byte> data) override {
        check_peer(from, "recv");
        parent_.recv_bytes(parent_rank(from), data);
    }

private:
    Communicator& parent_;
    std::vector<int> members_;
    int rank_ = -1;
};

}  // namespace glass::dist
