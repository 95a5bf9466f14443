/// \file
/// \brief glass/serve/remote_prefill.hpp — disaggregated prefill/decode, the engine's side:
/// prompts computed by a prefill worker, their K/V shipped into the decode engine's pool.
/// ```text
/// A prompt is compute-bound (many rows per weight read), a decode step bandwidth-bound (one row
/// per request). On one engine a long prompt's chunks share every step with the decoding
/// requests and stretch their time per token. Disaggregated serving gives prompts their own
/// worker; the decode engine (EngineOptions::remote_prefill set) never computes one:
///
///   admission  the scheduler gives a waiting request blocks for ALL its tokens (prefix-cache
///              hits shared) and marks it awaiting_kv; it takes none of the step's budget
///   submit     the engine sends PrefillJob{request, ticket, tokens, first = cached positions}
///   worker     PrefillWorker::run: tokens 0 .. n-1 through its own backend and pool, in chunks;
///              back come rows first .. n-1 (kv_shipment.hpp) and the last position's logits
///   arrival    at the start of a step: backend.import_kv into the request's blocks, computed = n,
///              its full blocks join the prefix cache, and its first token is sampled from the
///              shipped logits with the request's own generator; then it decodes like any other
///
///   bytes shipped per request = kv_bytes_per_token × (n − first) + 4 × vocab
///
/// Both sides run the same backend, which computes a row the same way whoever else is in its
/// batch, so the shipped rows and logits are the bits a combined engine would have made: the
/// text equals serving on one engine, bit for bit. A request preempted or cancelled while its
/// prompt is away keeps nothing: the arriving shipment's ticket no longer matches, and its rows
/// are dropped before they touch the pool.
///
/// RemotePrefill is where the jobs go: ThreadPrefill below (a worker thread with its own backend,
/// in this process), or dist/disaggregated.hpp's CommPrefill (a prefill rank over MPI).
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "glass/errors.hpp"
#include "glass/serve/paged_backend.hpp"

namespace glass::serve {

/// \brief A prompt to compute: its tokens 0 .. n-1; the decode side needs rows first .. n-1.
struct PrefillJob {
    int request_id = 0;
    int ticket = 0;           ///< which submission of that request (a preempted one is sent again)
    std::vector<int> tokens{};  ///< [n]
    int first = 0;            ///< positions the decode side already holds (its prefix cache)
};

/// \brief A computed prompt on its way back (or why it could not be computed).
struct PrefilledKv {
    int request_id = 0;
    int ticket = 0;
    int first = 0, end = 0;              ///< the rows carried: positions first .. end-1
    std::vector<std::byte> rows{};       ///< kv_shipment.hpp's layout
    std::vector<float> last_logits{};    ///< [vocab] of position end-1
    std::string error{};                 ///< non-empty: the worker failed; nothing else is set
};

/// \brief Where the decode engine sends its prompts. Called from the engine's thread only.
class RemotePrefill {
public:
    virtual ~RemotePrefill() = default;
    virtual void submit(PrefillJob job) = 0;
    /// The shipments that arrived since the last call; waits up to `wait` for one if none has.
    virtual std::vector<PrefilledKv> take_arrived(std::chrono::milliseconds wait) = 0;
    /// Why no prompt can be computed any more (the worker is gone), or empty.
    virtual std::string unavailable() const { return {}; }
};

/// \brief Shipments that arrived, handed from the thread that received them to the engine's
/// (what every RemotePrefill's take_arrived needs: ThreadPrefill here, dist::CommPrefill).
class ArrivedShipments {
public:
    void deliver(PrefilledKv done) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            arrived_.push_back(std::move(done));
        }
        changed_.notify_all();
    }
    /// Those that arrived since the last call; waits up to `wait` for one if none has.
    std::vector<PrefilledKv> take(std::chrono::milliseconds wait) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait_for(lock, wait, [&] { return !arrived_.empty(); });
        std::vector<PrefilledKv> out;
        out.swap(arrived_);
        return out;
    }

private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<PrefilledKv> arrived_;
};

/// \brief The prefill worker's computation, on any PagedBackend: one prompt at a time through
/// its own pool (a whole context window, blocks in order), `chunk` positions per pass.
class PrefillWorker {
public:
    PrefillWorker(PagedBackend& backend, int block_size = 16, int chunk = 256) : backend_(backend), chunk_(chunk) {
        if (chunk < 1) fail("prefill chunk must be >= 1 positions, got ", chunk);
        const int blocks = (backend.config().seq_len + block_size - 1) / block_size;
        backend_.allocate_pool(blocks, block_size);
        table_.resize(static_cast<size_t>(blocks));
        std::iota(table_.begin(), table_.end(), 0);
    }

    /// K/V of job.tokens, rows first .. n-1 exported, and the last position's logits.
    PrefilledKv run(const PrefillJob& job) {
        const int n = static_cast<int>(job.tokens.size());
        if (n < 1 || n > backend_.config().seq_len)
            fail("prefill worker: a prompt of ", n, " tokens (the context window is ", backend_.config().seq_len, ")");
        if (job.first < 0 || job.first >= n)
            fail("prefill worker: the decode side holds ", job.first, " of ", n, " positions; it must need at least the last");
        std::span<const float> logits;
        for (int start = 0; start < n; start += chunk_) {  // [start, start + m): one pass
            const int m = std::min(chunk_, n - start);
            const BatchEntry entry{.tokens = std::span<const int>(job.tokens).subspan(static_cast<size_t>(start), static_cast<size_t>(m)),
                                   .start = start,
                                   .block_table = table_,
                                   .wants_logits = start + m == n};
            logits = backend_.forward({&entry, 1});
        }
        positions_computed_ += n;
        return {.request_id = job.request_id,
                .ticket = job.ticket,
                .first = job.first,
                .end = n,
                .rows = backend_.export_kv(table_, job.first, n),
                .last_logits = std::vector<float>(logits.begin(), logits.end())};
    }

    const ModelConfig& config() const { return backend_.config(); }
    std::int64_t positions_computed() const { return positions_computed_; }

private:
    PagedBackend& backend_;
    int chunk_;
    std::vector<int> table_;  // the whole pool, in order
    std::int64_t positions_computed_ = 0;
};

/// \brief A prefill worker on its own thread, with its own backend: disaggregation inside one
/// process (the tests' and serve-bench's; a prefill rank over MPI is dist/disaggregated.hpp).
class ThreadPrefill : public RemotePrefill {
public:
    ThreadPrefill(PagedBackend& backend, int block_size = 16, int chunk = 256)
        : worker_(backend, block_size, chunk), thread_([this] { work(); }) {}
    ~ThreadPrefill() override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        thread_.join();
    }

    void submit(PrefillJob job) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            jobs_.push_back(std::move(job));
        }
        changed_.notify_all();
    }

    std::vector<PrefilledKv> take_arrived(std::chrono::milliseconds wait) override { return arrived_.take(wait); }

private:
    void work() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
            if (stopping_) return;
            const PrefillJob job = std::move(jobs_.front());
            jobs_.pop_front();
            lock.unlock();
            PrefilledKv done;
            try {
                done = worker_.run(job);
            } catch (const std::exception& e) {
                done = {.request_id = job.request_id, .ticket = job.ticket, .error = e.what()};
            }
            arrived_.deliver(std::move(done));
            lock.lock();
        }
    }

    PrefillWorker worker_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<PrefillJob> jobs_;
    ArrivedShipments arrived_;
    bool stopping_ = false;
    std::thread thread_;  // last: it starts once everything above exists
};

}  // namespace glass::serve
