/// \file
/// \brief glass/dist/thread_communicator.hpp — ranks as threads of one process: the transport
/// every test can run, on any machine, with no launcher.
/// ```text
/// run_ranks(n, body) starts n threads; thread r calls body(comm) with comm.rank() == r. Between
/// each ordered pair of ranks (from → to) sits one mailbox, a queue of byte messages:
///
///   send_bytes(to, data):   copy data into mailbox[me → to], wake its reader
///   recv_bytes(from, data): wait until mailbox[from → me] has a message, copy it out
///
/// A rank that throws marks the group failed: every rank waiting in recv wakes and throws an
/// Error naming the failed rank, and run_ranks rethrows the first failure after joining every
/// thread. A peer that says nothing for `patience` (a generous 120 s by default: a hang guard,
/// not a deadline) fails the same way. Waiting sleeps on a condition variable: an idle rank
/// burns no core.
/// ```
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"

namespace glass::dist {

/// What the ranks of one run_ranks call share: a mailbox per ordered pair, and the first failure.
class ThreadGroup {
public:
    ThreadGroup(int size, std::chrono::milliseconds patience)
        : size_(size), patience_(patience), mailboxes_(static_cast<size_t>(size) * static_cast<size_t>(size)) {}

    int size() const { return size_; }

    void post(int from, int to, std::span<const std::byte> data) {
        std::lock_guard lock(mutex_);
        mailbox(from, to).emplace_back(data.begin(), data.end());
        arrived_.notify_all();
    }

    void take(int from, int to, std::span<std::byte> data) {
        std::unique_lock lock(mutex_);
        std::deque<std::vector<std::byte>>& box = mailbox(from, to);
        const bool arrived = arrived_.wait_for(lock, patience_, [&] { return !box.empty() || failed_rank_ >= 0; });
        if (!box.empty()) {  // a message already sent is delivered even if its sender failed since
            const std::vector<std::byte> message = std::move(box.front());
            box.pop_front();
            if (message.size() != data.size())
                fail("rank ", to, " expected ", data.size(), " bytes from rank ", from, " but got ", message.size());
            if (!message.empty()) std::memcpy(data.data(), message.data(), message.size());
            return;
        }
        if (failed_rank_ >= 0)
            fail("rank ", to, " stops: rank ", failed_rank_, " failed (", failure_, ")");
        if (!arrived) fail("rank ", to, " waited ", patience_.count() / 1000.0, " s for rank ", from, ", which did not answer");
    }

    /// Records a rank's failure (the first one wins) and wakes every waiting rank.
    void fail_rank(int rank, const std::string& what) {
        std::lock_guard lock(mutex_);
        if (failed_rank_ < 0) {
            failed_rank_ = rank;
            failure_ = what;
        }
        arrived_.notify_all();
    }

private:
    std::deque<std::vector<std::byte>>& mailbox(int from, int to) {
        return mailboxes_[static_cast<size_t>(from) * static_cast<size_t>(size_) + static_cast<size_t>(to)];
    }

    int size_;
    std::chrono::milliseconds patience_;
    std::mutex mutex_;
    std::condition_variable arrived_;
    std::vector<std::deque<std::vector<std::byte>>> mailboxes_;  // [from][to]
    int failed_rank_ = -1;
    std::string failure_;
};

/// One rank's view of a ThreadGroup.
class ThreadCommunicator : public Communicator {
public:
    ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}

    int rank() const override { return rank_; }
    int size() const override { return group_.size(); }
    const char* transport() const override { return "threads"; }

    void send_bytes(int to, std::span<const std::byte> data) override {
        check_peer(to, "send");
        group_.post(rank_, to, data);
    }
    void recv_bytes(int from, std::span<std::byte> data) override {
        check_peer(from, "recv");
        group_.take(from, rank_, data);
    }

private:
    ThreadGroup& group_;
    int rank_;
};

/// Options of run_ranks.
struct ThreadRanksOptions {
    /// How long a rank waits for a silent peer before failing (a hang guard, not a deadline).
    std::chrono::milliseconds patience{120'000};
};

/// \brief Runs body(comm) on `size` threads, one per rank, and returns when all have finished.
///
/// If any rank throws, the others are woken out of their waits, every thread is joined, and the
/// first failure is rethrown as a glass::Error naming its rank.
inline void run_ranks(int size, const std::function<void(Communicator&)>& body, ThreadRanksOptions options = {}) {
    if (size < 1) fail("run_ranks: a group needs at least one rank, not ", size);
    ThreadGroup group(size, options.patience);
    std::vector<std::string> failures(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] {
            ThreadCommunicator comm(group, r);
            try {
                body(comm);
            } catch (const std::exception& e) {
                failures[static_cast<size_t>(r)] = e.what();
                group.fail_rank(r, e.what());
            } catch (...) {
                failures[static_cast<size_t>(r)] = "unknown exception";
                group.fail_rank(r, "unknown exception");
            }
        });
    for (std::thread& t : threads) t.join();
    // The root cause first: a rank whose failure is not "stops: rank N failed" from a peer.
    for (int r = 0; r < size; ++r) {
        const std::string& f = failures[static_cast<size_t>(r)];
        if (!f.empty() && f.find(" stops: rank ") == std::string::npos) fail("rank ", r, ": ", f);
    }
    for (int r = 0; r < size; ++r)
        if (!failures[static_cast<size_t>(r)].empty()) fail("rank ", r, ": ", failures[static_cast<size_t>(r)]);
}

}  // namespace glass::dist
