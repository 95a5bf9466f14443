/// \file
/// \brief glass/dist/mpi_communicator.hpp — ranks as processes started by mpirun: the
/// Communicator over Open MPI.
/// ```text
/// `mpirun -np 2 PROGRAM` starts PROGRAM twice; each process is one rank of the group:
///
///   main:  MpiRuntime runtime;        MPI_Init_thread here, MPI_Finalize when it goes out of scope
///          MpiCommunicator comm;      the group's own copy of MPI_COMM_WORLD
///          comm.send / recv / broadcast / gather / all_gather / all_reduce_sum / synchronize
///
///   ┌─ process, rank 0 ─┐   shared memory (one host, `--mca btl self,vader`)   ┌─ process, rank 1 ─┐
///   │ MpiCommunicator   │ ◄────────────── or the network (a hostfile) ───────► │ MpiCommunicator   │
///   └───────────────────┘                                                      └───────────────────┘
///
/// In: byte spans (the typed calls of communicator.hpp turn arrays into bytes).
/// Out: the same bytes at the other ranks, or a glass::Error.
///
/// send/recv use MPI_Isend/MPI_Irecv; broadcast, gather, all_gather and the barrier use MPI's
/// nonblocking collectives. They only move bytes: all_reduce_sum keeps its sum in rank order
/// (communicator.hpp), so every rank holds the same bits whatever MPI's algorithms are.
///
/// Every call then waits the same way: it polls MPI_Test, spinning for a few microseconds and
/// then sleeping between polls (50 µs, growing to 200 µs), so a rank waiting for a slower one uses
/// almost no CPU (a rank blocked in MPI_Recv keeps a whole core busy). A wait longer than
/// `patience` (120 s by default: a hang guard, not a deadline) fails with an Error naming the rank
/// it waited for. MPI counts bytes in an int: longer messages travel as several parts.
///
/// MPI runs MPI_THREAD_SERIALIZED: any thread may call it, one at a time. Two threads of one
/// process may use the group at once (a decode rank's engine thread drives its grid while its
/// comm thread talks to the prefill side: tools/disaggregation_setup.hpp), so every MPI call
/// here holds one process-wide lock, released while a wait sleeps.
///
/// MPI's error codes become glass::Error with MPI's own text. When one rank cannot go on,
/// abort_group prints "glass: rank R: message" and MPI_Abort ends every process of the group.
/// Only programs built against MPI include this header (CMake: GLASS_MPI_FOUND, MPI::MPI_CXX).
/// ```
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"

namespace glass::dist {

/// MPI's text for an error code, e.g. "MPI_ERR_TRUNCATE: message truncated".
inline std::string mpi_error_text(int code) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
    return std::string(text, static_cast<size_t>(length));
}

/// The lock every MPI call of this process's MpiCommunicators holds (MPI_THREAD_SERIALIZED).
inline std::mutex& mpi_lock() {
    static std::mutex m;
    return m;
}

/// Turns an MPI call's return code into a glass::Error naming the call.
inline void check_mpi(int code, const char* call) {
    if (code != MPI_SUCCESS) fail(call, " failed: ", mpi_error_text(code));
}

/// Prints "glass: rank R: message" on stderr and ends every process of `comm`'s group.
[[noreturn]] inline void abort_mpi_group(MPI_Comm comm, int rank, int code, std::string_view message) {
    std::fprintf(stderr, "glass: rank %d: %.*s\n", rank, static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
    MPI_Abort(comm, code == 0 ? 1 : code);  // does not return; a zero code would look like success
    std::abort();
}

/// \brief MPI for the lifetime of one object: MPI_Init_thread in the constructor, MPI_Finalize in
/// the destructor. One per process, created in main before any MpiCommunicator.
class MpiRuntime {
public:
    /// argc and argv may be null (MPI reads its settings from the environment mpirun sets).
    explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized) fail("MpiRuntime: MPI is already started in this process (one MpiRuntime per process)");
        // SERIALIZED: any thread may call MPI, one at a time (the serving engine's loop need not
        // run on the thread that started MPI).
        int provided = 0;
        check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            fail("MpiRuntime: this MPI library cannot be called from more than one thread (MPI_THREAD_SERIALIZED)");
        }
        exceptions_at_start_ = std::uncaught_exceptions();
    }
    /// When the scope is left by an exception, MPI_Finalize is skipped: it waits for every rank,
    /// and a peer may be waiting for this one. mpirun then ends the whole group when this process
    /// exits (a process that exits without finalizing fails its group).
    ~MpiRuntime() {
        if (std::uncaught_exceptions() > exceptions_at_start_) return;
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    MpiRuntime(const MpiRuntime&) = delete;
    MpiRuntime& operator=(const MpiRuntime&) = delete;

    /// True when this process was started by Open MPI's mpirun (or mpiexec): then the CLI starts
    /// MPI, and a plain `glass ...` never touches it.
    static bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

    /// abort_group before any MpiCommunicator exists: the rank is MPI_COMM_WORLD's.
    [[noreturn]] static void abort_group(int code, std::string_view message) {
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (!initialized || finalized) {  // no group to end: this process alone
            std::fprintf(stderr, "glass: %.*s\n", static_cast<int>(message.size()), message.data());
            std::exit(code == 0 ? 1 : code);
        }
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        abort_mpi_group(MPI_COMM_WORLD, rank, code, message);
    }

private:
    int exceptions_at_start_ = 0;
};

/// Options of MpiCommunicator.
struct MpiOptions {
    /// How long one call waits for its peers before failing (a hang guard, not a deadline).
    std::chrono::milliseconds patience{120'000};
    /// The longest message handed to MPI in one call (MPI counts in int); longer ones travel in
    /// parts. Lowered only by tests, to exercise the parts with small arrays.
    size_t max_message_bytes = size_t{1} << 30;
};

/// \brief One rank of the processes mpirun started, over a duplicate of MPI_COMM_WORLD (so glass's
/// messages never mix with another library's).
///
/// Needs a live MpiRuntime; construct it on every rank (duplicating the communicator is a
/// collective call) and destroy it before the runtime. After a failed wait the communicator
/// refuses further calls: end the group with abort_group.
class MpiCommunicator : public Communicator {
public:
    explicit MpiCommunicator(MpiOptions options = {}) : options_(options) {
        options_.max_message_bytes = std::clamp<size_t>(options_.max_message_bytes, 1, INT_MAX);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "MPI_Comm_idup");
        wait(request, "starting the group", kAnyPeer);
        check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    }
    ~MpiCommunicator() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && broken_.empty() && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }
    MpiCommunicator(const MpiCommunicator&) = delete;
    MpiCommunicator& operator=(const MpiCommunicator&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* transport() const override { return "mpi"; }

    /// Prints "glass: rank R: message" on stderr and ends every process of the group (MPI_Abort):
    /// what a rank calls when it cannot go on, so that no peer waits for it.
    [[noreturn]] void abort_group(int code, std::string_view message) const {
        abort_mpi_group(comm_ == MPI_COMM_NULL ? MPI_COMM_WORLD : comm_, rank_, code, message);
    }

    // --- point to point: one MPI message per part, in order (MPI keeps a pair's order) --------

    void send_bytes(int to, std::span<const std::byte> data) override {
        check_peer(to, "send");
        check_usable();
        size_t offset = 0;
        do {  // at least one message, so that an empty send meets its empty recv
            const size_t part = std::min(options_.max_message_bytes, data.size() - offset);
            MPI_Request request = MPI_REQUEST_NULL;
            check_mpi(serialized([&] { return MPI_Isend(data.data() + offset, static_cast<int>(part), MPI_BYTE, to, kTag,
                                                        comm_, &request); }),
                      "MPI_Isend");
            wait(request, "send", to);
            offset += part;
        } while (offset < data.size());
    }

    void recv_bytes(int from, std::span<std::byte> data) override {
        check_peer(from, "recv");
        check_usable();
        size_t offset = 0;
        do {
            const size_t part = std::min(options_.max_message_bytes, data.size() - offset);
            MPI_Request request = MPI_REQUEST_NULL;
            check_mpi(serialized([&] { return MPI_Irecv(data.data() + offset, static_cast<int>(part), MPI_BYTE, from, kTag,
                                                        comm_, &request); }),
                      "MPI_Irecv");
            const MPI_Status status = wait(request, "recv", from);
            int count = 0;
            serialized([&] { return MPI_Get_count(&status, MPI_BYTE, &count); });
            if (static_cast<size_t>(count) != part)
                fail("rank ", rank_, " expected ", data.size(), " bytes from rank ", from, " but a part of ", part,
                     " bytes held ", count);
            offset += part;
        } while (offset < data.size());
    }

    // --- collectives: MPI's own, waited for like the rest ---------------------------------------

    void broadcast_bytes(std::span<std::byte> data, int root) override {
        check_root(root, "broadcast");
        check_usable();
        for (size_t offset = 0; offset < data.size(); offset += options_.max_message_bytes) {
            const size_t part = std::min(options_.max_message_bytes, data.size() - offset);
            MPI_Request request = MPI_REQUEST_NULL;
            check_mpi(serialized([&] { return MPI_Ibcast(data.data() + offset, static_cast<int>(part), MPI_BYTE, root,
                                                         comm_, &request); }),
                      "MPI_Ibcast");
            wait(request, "broadcast", rank_ == root ? kAnyPeer : root);
        }
    }

    void gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all, int root) override {
        check_root(root, "gather");
        check_usable();
        if (rank_ == root && all.size() != mine.size() * static_cast<size_t>(size_))
            fail("gather: the result holds ", all.size(), " bytes, not ", size_, " ranks × ", mine.size());
        if (mine.size() * static_cast<size_t>(size_) > options_.max_message_bytes) {
            Communicator::gather_bytes(mine, all, root);  // too long for one MPI call: send/recv in parts
            return;
        }
        const int count = static_cast<int>(mine.size());
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(serialized([&] { return MPI_Igather(mine.data(), count, MPI_BYTE, all.data(), count, MPI_BYTE, root,
                                                      comm_, &request); }),
                  "MPI_Igather");
        wait(request, "gather", rank_ == root ? kAnyPeer : root);
    }

    void all_gather_bytes(std::span<const std::byte> mine, std::span<std::byte> all) override {
        check_usable();
        if (all.size() != mine.size() * static_cast<size_t>(size_))
            fail("all_gather: the result holds ", all.size(), " bytes, not ", size_, " ranks × ", mine.size());
        if (all.size() > options_.max_message_bytes) {
            Communicator::all_gather_bytes(mine, all);  // gather, then broadcast, each in parts
            return;
        }
        const int count = static_cast<int>(mine.size());
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(serialized([&] { return MPI_Iallgather(mine.data(), count, MPI_BYTE, all.data(), count, MPI_BYTE, comm_,
                                                         &request); }),
                  "MPI_Iallgather");
        wait(request, "all_gather", kAnyPeer);
    }

    void barrier() override {
        check_usable();
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(serialized([&] { return MPI_Ibarrier(comm_, &request); }), "MPI_Ibarrier");
        wait(request, "barrier", kAnyPeer);
    }

private:
    static constexpr int kTag = 0;
    static constexpr int kAnyPeer = -1;  // a collective: we cannot tell which rank is late

    void check_root(int root, const char* what) const {
        if (root < 0 || root >= size_) fail(what, ": root ", root, " is not a rank of a group of ", size_);
    }
    void check_usable() const {
        const std::lock_guard<std::mutex> lock(mpi_lock());
        if (!broken_.empty()) fail("rank ", rank_, ": this communicator stopped after an earlier failure: ", broken_);
    }
    /// call() under mpi_lock(): one MPI call at a time in this process.
    template <typename Call>
    static int serialized(Call call) {
        const std::lock_guard<std::mutex> lock(mpi_lock());
        return call();
    }

    /// Polls `request` until it completes, without keeping a core busy:
    ///   spin   MPI_Test back to back for kSpin (a quick peer answers in microseconds)
    ///   sleep  between polls, 50 µs at first, growing to 200 µs
    ///   fail   after patience (naming `peer`, or the group for a collective), or on an MPI error
    MPI_Status wait(MPI_Request& request, const char* what, int peer) {
        using Clock = std::chrono::steady_clock;
        constexpr std::chrono::microseconds kSpin{20}, kFirstSleep{50}, kLongestSleep{200};
        const Clock::time_point start = Clock::now();
        std::chrono::microseconds sleep = kFirstSleep;
        MPI_Status status{};
        for (;;) {
            int done = 0;
            const int code = serialized([&] { return MPI_Test(&request, &done, &status); });
            if (code != MPI_SUCCESS) give_up(request, what, peer, mpi_error_text(code));
            if (done) return status;
            const Clock::duration waited = Clock::now() - start;
            if (waited < kSpin) continue;
            if (waited > options_.patience) give_up(request, what, peer, "");
            std::this_thread::sleep_for(sleep);
            sleep = std::min(kLongestSleep, sleep * 3 / 2);
        }
    }

    /// Fails a wait with an Error naming the call and the rank waited for (`reason` empty: the
    /// patience ran out). A pending send or recv is cancelled; a collective cannot be, so from
    /// here on the communicator refuses every call.
    [[noreturn]] void give_up(MPI_Request& request, const char* what, int peer, const std::string& reason) {
        const std::string me = "rank " + std::to_string(rank_);
        const std::string them = peer == kAnyPeer ? "the other ranks" : "rank " + std::to_string(peer);
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", std::chrono::duration<double>(options_.patience).count());
        std::string message;
        if (!reason.empty()) message = me + ", " + what + " with " + them + ": " + reason;
        else if (peer == kAnyPeer) message = me + " waited " + seconds + " s in " + what + "; another rank did not answer";
        else message = me + " waited " + seconds + " s for " + them + ", which did not answer (" + what + ")";
        const bool point_to_point = std::string_view(what) == "send" || std::string_view(what) == "recv";
        const std::lock_guard<std::mutex> lock(mpi_lock());
        if (point_to_point && request != MPI_REQUEST_NULL) {
            MPI_Cancel(&request);
            MPI_Request_free(&request);
        }
        broken_ = message;
        throw Error(message);
    }

    MpiOptions options_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    std::string broken_;  // why the communicator stopped, once a wait failed
};

}  // namespace glass::dist
