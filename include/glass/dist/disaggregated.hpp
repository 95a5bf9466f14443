/// \file
/// \brief glass/dist/disaggregated.hpp — disaggregated prefill/decode over a Communicator: a
/// decode rank that serves, a prefill rank that computes its prompts.
/// ```text
///   mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
///
///   decode rank (0): the engine, the scheduler, the HTTP server; EngineOptions::remote_prefill
///                    is a CommPrefill, whose comm thread is this rank's only MPI caller
///   prefill rank (1): run_prefill_rank — a PrefillWorker (serve/remote_prefill.hpp) on its own
///                    backend and pool, one prompt after another
///
/// One job, one round trip, on the comm thread:
///
///   decode ─▶ prefill   ints {kind = job, request, ticket, first, n}, then tokens [n]
///   prefill computes tokens 0 .. n-1 in its pool (chunks of --budget positions)
///   prefill ─▶ decode   int status: 0, then the KV shipment of rows first .. n-1 and the last
///                       logits row (kv_transfer.hpp: header, verdict, blocks, logits);
///                       or 1, then the worker's error message (length, bytes)
///
///   kind = ping   every few seconds while no job is out: an idle prefill rank waits on a recv,
///                 and a recv gives up after the communicator's patience (a hang guard)
///   kind = stop   the decode rank is done: run_prefill_rank returns
///
/// The engine thread never touches the communicator: it hands jobs to the comm thread and takes
/// what arrived (RemotePrefill), so MPI needs no thread support beyond one caller at a time.
/// ```
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "glass/dist/communicator.hpp"
#include "glass/dist/kv_transfer.hpp"
#include "glass/serve/remote_prefill.hpp"

namespace glass::dist {

/// What the decode rank sends: kind, then request, ticket, first, n.
enum class PrefillMessage : int { stop = 0, job = 1, ping = 2 };

/// \brief What one rank of either role did (for the reports and the tests).
struct DisaggregatedCounters {
    std::int64_t jobs = 0;            ///< prompts computed (prefill) or received (decode)
    std::int64_t positions = 0;       ///< positions computed by the prefill worker
    std::int64_t shipped_rows = 0;    ///< positions shipped (n − first, summed)
    std::int64_t shipped_bytes = 0;   ///< bytes of the shipments (header, rows, logits)
};

/// \brief The prefill rank: computes the prompts rank `decode` sends, until it says stop.
inline DisaggregatedCounters run_prefill_rank(Communicator& comm, int decode, serve::PagedBackend& backend,
                                              int block_size = 16, int chunk = 256) {
    serve::PrefillWorker worker(backend, block_size, chunk);
    DisaggregatedCounters counters;
    for (;;) {
        std::array<int, 5> head{};  // kind, request, ticket, first, n
        comm.recv(decode, std::span<int>(head));
        if (head[0] == static_cast<int>(PrefillMessage::stop)) return counters;
        if (head[0] == static_cast<int>(PrefillMessage::ping)) {
            backend.keep_alive();  // the decode side is idle and still there: so is this side, to its own grid
            continue;
        }
        if (head[4] < 1 || head[4] > backend.config().seq_len)
            fail("prefill rank: a job of ", head[4], " tokens (the context window is ", backend.config().seq_len, ")");
        serve::PrefillJob job{.request_id = head[1], .ticket = head[2], .tokens = std::vector<int>(static_cast<size_t>(head[4])),
                              .first = head[3]};
        comm.recv(decode, std::span<int>(job.tokens));
        serve::PrefilledKv done;
        try {
            done = worker.run(job);
        } catch (const Error& e) {  // the job's fault (not the group's): the decode side hears why
            const std::string why = e.what();
            const int status[2] = {1, static_cast<int>(why.size())};
            comm.send(decode, std::span<const int>(status));
            comm.send(decode, std::as_bytes(std::span<const char>(why.data(), why.size())));
            continue;
        }
        const int ok = 0;
        comm.send(decode, std::span<const int>(&ok, 1));
        const serve::KvShipmentHeader h = serve::kv_shipment_header(backend.config(), backend.kv_type(), done.end - done.first);
        counters.shipped_bytes += send_kv_shipment(comm, decode, h, done.rows, done.last_logits);
        counters.jobs += 1;
        counters.positions += done.end;
        counters.shipped_rows += done.end - done.first;
    }
}

/// \brief The decode rank's RemotePrefill: jobs go to rank `prefill` from a comm thread (the
/// only caller of `comm` while it lives); shipments come back into a queue the engine takes.
class CommPrefill : public serve::RemotePrefill {
public:
    /// `config` and `kv` are the decode side's: every shipment is checked against them.
    CommPrefill(Communicator& comm, int prefill, const ModelConfig& config, KvType kv,
                std::chrono::milliseconds ping_every = std::chrono::seconds(5))
        : comm_(comm), prefill_(prefill), config_(config), kv_(kv), ping_every_(ping_every), thread_([this] { talk(); }) {}
    ~CommPrefill() override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        thread_.join();
    }

    void submit(serve::PrefillJob job) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            jobs_.push_back(std::move(job));
        }
        changed_.notify_all();
    }
    std::vector<serve::PrefilledKv> take_arrived(std::chrono::milliseconds wait) override { return arrived_.take(wait); }
    std::string unavailable() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        return broken_;
    }
    DisaggregatedCounters counters() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return counters_;
    }

private:
    // The comm thread: each job out and its shipment back; a ping when idle; stop at the end.
    // A failed exchange (the prefill rank gone) fails that job and every later one.
    void talk() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            const bool woke = changed_.wait_for(lock, ping_every_, [&] { return stopping_ || !jobs_.empty(); });
            if (!broken_.empty()) {  // nothing can reach the prefill rank: every job fails with why
                for (; !jobs_.empty(); jobs_.pop_front()) arrived_.deliver(failed(jobs_.front(), broken_));
                if (stopping_) return;
                continue;
            }
            if (stopping_ && jobs_.empty()) break;
            const PrefillMessage kind = woke ? PrefillMessage::job : PrefillMessage::ping;
            serve::PrefillJob job;
            if (kind == PrefillMessage::job) {
                job = std::move(jobs_.front());
                jobs_.pop_front();
            }
            lock.unlock();
            serve::PrefilledKv done;
            std::string error;
            try {
                if (kind == PrefillMessage::ping) send_head(kind, job);
                else done = exchange(job);
            } catch (const std::exception& e) {
                error = "the prefill rank (" + std::to_string(prefill_) + ") cannot be reached: " + e.what();
            }
            lock.lock();
            if (!error.empty()) broken_ = error;
            if (kind == PrefillMessage::job) arrived_.deliver(error.empty() ? std::move(done) : failed(job, error));
        }
        lock.unlock();
        try {
            send_head(PrefillMessage::stop, {});
        } catch (const std::exception&) {  // nobody left to tell
        }
    }

    // One job's round trip (comm thread, unlocked).
    serve::PrefilledKv exchange(const serve::PrefillJob& job) {
        send_head(PrefillMessage::job, job);
        comm_.send(prefill_, std::span<const int>(job.tokens));
        int status = 0;
        comm_.recv(prefill_, std::span<int>(&status, 1));
        if (status != 0) {
            int length = 0;
            comm_.recv(prefill_, std::span<int>(&length, 1));
            std::string why(static_cast<size_t>(length), '\0');
            comm_.recv(prefill_, std::as_writable_bytes(std::span<char>(why.data(), why.size())));
            return failed(job, why);
        }
        const int n = static_cast<int>(job.tokens.size());
        KvShipment got = receive_kv_shipment(comm_, prefill_, serve::kv_shipment_header(config_, kv_, n - job.first),
                                             config_.vocab_size);
        std::lock_guard<std::mutex> lock(mutex_);
        counters_.jobs += 1;
        counters_.shipped_rows += n - job.first;
        counters_.shipped_bytes += got.bytes;
        return {.request_id = job.request_id, .ticket = job.ticket, .first = job.first, .end = n,
                .rows = std::move(got.blocks), .last_logits = std::move(got.last_logits)};
    }

    void send_head(PrefillMessage kind, const serve::PrefillJob& job) {
        const std::array<int, 5> head = {static_cast<int>(kind), job.request_id, job.ticket, job.first,
                                         static_cast<int>(job.tokens.size())};
        comm_.send(prefill_, std::span<const int>(head));
    }
    static serve::PrefilledKv failed(const serve::PrefillJob& job, const std::string& why) {
        return {.request_id = job.request_id, .ticket = job.ticket, .error = why};
    }

    Communicator& comm_;
    int prefill_;
    ModelConfig config_;
    KvType kv_;
    std::chrono::milliseconds ping_every_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<serve::PrefillJob> jobs_;
    serve::ArrivedShipments arrived_;
    DisaggregatedCounters counters_;
    std::string broken_;  // why the prefill rank cannot be reached any more
    bool stopping_ = false;
    std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace glass::dist
