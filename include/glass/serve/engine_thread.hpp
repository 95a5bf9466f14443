/// \file
/// \brief glass/serve/engine_thread.hpp — one thread owns the engine; other threads hand it requests and read their tokens.
/// ```text
/// The engine (engine.hpp) is not thread-safe, so exactly one thread touches it. Other threads
/// (the HTTP server's, one per connection: tools/cmd_serve.cpp) talk to that thread through two
/// kinds of mailbox, each a mutex with a condition variable:
///
///   the inbox        one, handler threads -> engine thread: new requests and cancels
///   a Ticket         one per request, engine thread -> that request's handler: the text as it
///                    streams out, then the RequestResult (or the engine's refusal)
///
///   engine thread:
///     sleep until the inbox has something or some request is unfinished
///     take the inbox:  add_request_ids() each new ticket (a refusal becomes its error),
///                      cancel() each cancelled one
///     step()                         one forward pass for everyone scheduled
///     append each request's new text (StepReport::text) to its ticket; hand each finished
///     result (take_finished()) to its ticket; wake the handlers
///
/// Handlers never wait for the engine's lock and the engine never waits for a client: a slow
/// reader's text piles up in its ticket (bytes per token) while the batch goes on. A request that
/// arrives during a step joins at the next one, so requests from different connections share
/// forward passes: continuous batching across connections.
///
/// Admission: at most max_in_flight requests are in flight (submitted and not finished); submit()
/// refuses the next one (an HTTP server answers 503). Shutdown: drain(grace) refuses new ones and
/// lets those in flight run until the grace period ends, then cancels what is left; stop() cancels
/// everything and ends the thread.
/// ```
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "glass/serve/engine.hpp"

namespace glass::serve {

/// One request's mailbox: filled in by the submitting thread, then written by the engine thread
/// and read by the submitting thread.
struct Ticket {
    // Set before submit(), read-only afterwards.
    std::vector<int> prompt_ids;
    GenerateOptions options;
    Clock::time_point arrival = Clock::now();  ///< TTFT and token times count from here

    // Written by the engine thread under `mutex`; read with wait() (or under `mutex`).
    std::mutex mutex;
    std::condition_variable changed;
    std::string new_text;          ///< streamed text that wait() has not handed out yet
    bool finished = false;
    RequestResult result;          ///< valid once finished, unless `error` is set
    std::string error;             ///< why the request failed (the engine refused it, or a step failed)
    bool cancelled_by_shutdown = false;  ///< cancelled because the drain's grace period ran out
    int free_blocks = 0;           ///< free KV blocks right after it finished (all blocks when idle)
    int num_blocks = 0;            ///< blocks in the pool

    /// Waits up to `timeout` for news: appends the text that arrived since the last call to
    /// `text` and returns true once the request has finished (all of its text handed out).
    bool wait(std::string& text, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait_for(lock, timeout, [&] { return finished || !new_text.empty(); });
        text += new_text;
        new_text.clear();
        return finished;
    }

    /// Waits up to `timeout` for the request to finish (its text stays for wait()); true if it has.
    bool wait_finished(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex);
        return changed.wait_for(lock, timeout, [&] { return finished; });
    }

    // The engine thread's own bookkeeping.
    int engine_id = -1;                   ///< the engine's id, once added
    std::atomic<bool> cancel_requested{false};
};

enum class Admission { accepted, queue_full, shutting_down };

class EngineThread {
public:
    /// Builds the engine (the backend and tokenizer must outlive this) and starts its thread.
    EngineThread(PagedBackend& backend, const Tokenizer& tokenizer, EngineOptions options, int max_in_flight)
        : engine_(backend, tokenizer, options), max_in_flight_(max_in_flight),
          request_positions_(engine_.request_positions()), num_blocks_(engine_.blocks().num_blocks()),
          free_blocks_(num_blocks_) {
        if (max_in_flight < 1) fail("requests in flight at most must be >= 1, got ", max_in_flight);
        thread_ = std::thread([this] { run(); });
    }
    EngineThread(const EngineThread&) = delete;
    EngineThread& operator=(const EngineThread&) = delete;
    ~EngineThread() { stop(); }

    /// Hands a ticket to the engine thread, unless max_in_flight requests are in flight already
    /// or the engine is draining.
    Admission submit(const std::shared_ptr<Ticket>& ticket) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (draining_ || stopping_) return Admission::shutting_down;
            if (in_flight_ >= max_in_flight_) return Admission::queue_full;
            ++in_flight_;
            arrivals_.push_back(ticket);
        }
        work_.notify_one();
        return Admission::accepted;
    }

    /// Stops a request (its client left): it finishes as cancelled and its blocks return to the
    /// pool. Finished tickets: no-op.
    void cancel(const std::shared_ptr<Ticket>& ticket) {
        if (ticket->cancel_requested.exchange(true)) return;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            cancels_.push_back(ticket);
        }
        work_.notify_one();
    }

    /// Refuses new requests from now on; what is in flight may run for `grace`, then is cancelled.
    void drain(std::chrono::milliseconds grace) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            draining_ = true;
            const Clock::time_point deadline = Clock::now() + grace;
            if (!deadline_ || deadline < *deadline_) deadline_ = deadline;
        }
        work_.notify_one();
    }

    /// Waits up to `timeout` until nothing is in flight; true if so.
    bool wait_idle(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        return idle_.wait_for(lock, timeout, [&] { return in_flight_ == 0; });
    }

    /// Cancels whatever is in flight and ends the thread (also done by the destructor).
    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        work_.notify_one();
        if (thread_.joinable()) thread_.join();
    }

    bool draining() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return draining_;
    }
    int in_flight() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return in_flight_;
    }
    int max_in_flight() const { return max_in_flight_; }
    /// Free KV blocks after the engine thread's latest step (all of them once nothing runs).
    int free_blocks() const { return free_blocks_; }
    /// Positions one request may use (prompt + generated): min(context window, pool).
    int request_positions() const { return request_positions_; }
    int num_blocks() const { return num_blocks_; }

private:
    void run() {
        std::map<int, std::shared_ptr<Ticket>> live;  // engine id -> ticket
        std::vector<std::shared_ptr<Ticket>> arrivals, cancels;
        while (true) {
            bool stopping = false, past_deadline = false;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                work_.wait(lock, [&] {
                    return stopping_ || !arrivals_.empty() || !cancels_.empty() || engine_.has_unfinished();
                });
                arrivals.swap(arrivals_);
                cancels.swap(cancels_);
                stopping = stopping_;
                past_deadline = deadline_ && Clock::now() >= *deadline_;
            }
            for (const std::shared_ptr<Ticket>& t : arrivals) {
                if (t->cancel_requested || stopping) {  // gone before it started
                    finish_unstarted(*t, "cancelled before it started", stopping);
                    continue;
                }
                try {
                    t->engine_id = engine_.add_request_ids(t->prompt_ids, t->options, t->arrival);
                    live[t->engine_id] = t;
                } catch (const std::exception& e) {
                    finish_unstarted(*t, e.what(), false);
                }
            }
            arrivals.clear();
            for (const std::shared_ptr<Ticket>& t : cancels)
                if (t->engine_id >= 0) engine_.cancel(t->engine_id);  // finished ones: no-op
            cancels.clear();
            if (stopping || past_deadline) {
                for (auto& [id, t] : live) {
                    t->cancelled_by_shutdown = true;
                    engine_.cancel(id);
                }
            }

            if (engine_.has_unfinished()) {
                StepReport report;
                try {
                    report = engine_.step();
                } catch (const std::exception& e) {  // a bug, not bad input: end everyone's request with it
                    for (auto& [id, t] : live) {
                        {
                            std::lock_guard<std::mutex> lock(t->mutex);
                            t->error = std::string("engine step failed: ") + e.what();
                        }
                        engine_.cancel(id);
                    }
                }
                for (const auto& [id, text] : report.text) {
                    const auto it = live.find(id);
                    if (it == live.end()) continue;
                    {
                        std::lock_guard<std::mutex> lock(it->second->mutex);
                        it->second->new_text += text;
                    }
                    it->second->changed.notify_all();
                }
            }
            for (RequestResult& r : engine_.take_finished()) {
                const auto it = live.find(r.id);
                if (it == live.end()) continue;
                const std::shared_ptr<Ticket> t = it->second;
                live.erase(it);
                {
                    std::lock_guard<std::mutex> lock(t->mutex);
                    t->result = std::move(r);
                    t->free_blocks = engine_.blocks().num_free();
                    t->num_blocks = num_blocks_;
                    t->finished = true;
                }
                t->changed.notify_all();
                leave();
            }
            free_blocks_ = engine_.blocks().num_free();
            if (stopping && live.empty()) {
                std::lock_guard<std::mutex> lock(mutex_);
                if (arrivals_.empty()) return;
            }
        }
    }

    // A ticket that never ran (refused by the engine, cancelled or stopped before it started).
    void finish_unstarted(Ticket& t, const std::string& why, bool by_shutdown) {
        {
            std::lock_guard<std::mutex> lock(t.mutex);
            t.error = why;
            t.cancelled_by_shutdown = by_shutdown;
            t.free_blocks = engine_.blocks().num_free();
            t.num_blocks = num_blocks_;
            t.finished = true;
        }
        t.changed.notify_all();
        leave();
    }

    void leave() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            --in_flight_;
        }
        idle_.notify_all();
    }

    Engine engine_;  // touched by thread_ only, once it runs
    const int max_in_flight_;
    const int request_positions_;
    const int num_blocks_;
    std::atomic<int> free_blocks_;

    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable work_;  // the engine thread sleeps on it
    std::condition_variable idle_;  // wait_idle() sleeps on it
    std::vector<std::shared_ptr<Ticket>> arrivals_;
    std::vector<std::shared_ptr<Ticket>> cancels_;
    int in_flight_ = 0;
    bool draining_ = false;
    bool stopping_ = false;
    std::optional<Clock::time_point> deadline_;

    std::thread thread_;  // last: starts after everything above exists
};

}  // namespace glass::serve
