/// \file
/// \brief glass/serve/engine_thread.hpp — one thread owns the engine; other threads hand it requests and read their tokens.
/// ```text
/// The engine (engine.hpp) is not thread-safe, so exactly one thread touches it. Other threads
/// (the HTTP server's, one per connection: tools/cmd_serve.cpp) talk to that thread through two
/// kinds of mailbox, each a mutex with a condition variable:
///
///   the inbox        one, handler threads -> engine thread: new requests and cancels
///   a Ticket         (ticket.hpp) one per request, engine thread -> that request's handler: the text as it
///                    streams out, then the RequestResult (or the engine's refusal)
///
///   engine thread:
///     sleep until the inbox has something or some request is unfinished
///     take the inbox:  add_request_ids() each new ticket (a refusal becomes its error),
///                      cancel() each cancelled one
///     step()                         one forward pass for everyone scheduled
///     append each request's new logprobs (if asked) and text (StepReport::text) to its
///     ticket; hand each finished result (take_finished()) to its ticket; wake the handlers
///     count what happened: outcomes, tokens, TTFT/TPOT and the pool's gauges
///     (prometheus_counters.hpp), the step's batch, the block pool and the live requests
///     (engine_state.hpp); handlers read a copy with metrics() and engine_state()
///
/// Handlers never wait for the engine's lock and the engine never waits for a client: a slow
/// reader's text piles up in its ticket (bytes per token) while the batch goes on. A request that
/// arrives during a step joins at the next one, so requests from different connections share
/// forward passes: continuous batching across connections.
///
/// Admission: at most max_in_flight requests are in flight (submitted and not finished); submit()
/// refuses the next one (an HTTP server answers 503), and every one once the backend is
/// unavailable (a model split over ranks whose group is gone: 503 too). Shutdown: drain(grace) refuses new ones and
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
#include "glass/serve/engine_state.hpp"
#include "glass/serve/outcome.hpp"
#include "glass/serve/prometheus_counters.hpp"
#include "glass/serve/ticket.hpp"

namespace glass::serve {

enum class Admission { accepted, queue_full, shutting_down, backend_unavailable };

class EngineThread {
public:
    /// Builds the engine (the backend and tokenizer must outlive this) and starts its thread.
    EngineThread(PagedBackend& backend, const Tokenizer& tokenizer, EngineOptions options, int max_in_flight)
        : engine_(backend, tokenizer, options), max_in_flight_(max_in_flight),
          request_positions_(engine_.request_positions()), num_blocks_(engine_.blocks().num_blocks()) {
        if (max_in_flight < 1) fail("requests in flight at most must be >= 1, got ", max_in_flight);
        count_blocks(metrics_, engine_.blocks());
        state_.block_size = engine_.blocks().block_size();
        state_.blocks = block_records(engine_.blocks(), engine_.scheduler());
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
            if (!unavailable().empty()) return Admission::backend_unavailable;
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

    /// Why the engine can run no more steps (the backend's ranks or the prefill worker are gone),
    /// or empty: Engine::unavailable().
    std::string unavailable() const { return engine_.unavailable(); }

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
    int free_blocks() const { return metrics().kv_blocks_free; }
    /// Positions one request may use (prompt + generated): min(context window, pool).
    int request_positions() const { return request_positions_; }
    int num_blocks() const { return num_blocks_; }

    /// Counts a request the HTTP layer refused before it reached the engine (4xx, 503).
    void count_rejected() {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        ++metrics_.requests[static_cast<size_t>(Outcome::rejected)];
    }
    /// A consistent copy of the counters, histograms and gauges (for GET /metrics).
    ServerMetrics metrics() const {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        return metrics_;
    }
    /// A consistent copy of the recent steps, the block pool and recent requests (for the live view).
    EngineState engine_state() const {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        return state_;
    }

private:
    using LiveTickets = std::map<int, std::shared_ptr<Ticket>>;  // engine id -> ticket
    using FinishedTickets = std::vector<std::pair<std::shared_ptr<Ticket>, RequestResult>>;

    // What the handler threads left in the inbox since the engine thread last looked.
    struct Inbox {
        std::vector<std::shared_ptr<Ticket>> arrivals;
        std::vector<std::shared_ptr<Ticket>> cancels;
        bool stopping = false;
        bool past_deadline = false;  // the drain's grace period is over
    };

    // The engine thread: one pass of this loop per step.
    void run() {
        LiveTickets live;
        while (true) {
            const Inbox inbox = take_inbox();
            open_inbox(inbox, live);
            const std::optional<StepReport> report = step_and_publish(live);
            // Count first, then hand the results out: a client that reads its last event and then
            // asks for /metrics or /v1/engine/state sees its request counted and its blocks back.
            FinishedTickets done = take_finished(live);
            record(report, done, live);
            hand_out(done);
            if (inbox.stopping && live.empty() && nothing_arrived()) return;
        }
    }

    // Sleeps until a handler left something or a request is unfinished, then empties the inbox.
    // Idle, it wakes every kKeepAlive to tell a backend split over ranks that it is alive.
    Inbox take_inbox() {
        Inbox inbox;
        std::unique_lock<std::mutex> lock(mutex_);
        const auto has_work = [&] { return stopping_ || !arrivals_.empty() || !cancels_.empty() || engine_.has_unfinished(); };
        while (!work_.wait_for(lock, kKeepAlive, has_work)) {
            lock.unlock();  // handlers may submit meanwhile
            engine_.keep_alive();
            lock.lock();
        }
        inbox.arrivals.swap(arrivals_);
        inbox.cancels.swap(cancels_);
        inbox.stopping = stopping_;
        inbox.past_deadline = deadline_ && Clock::now() >= *deadline_;
        return inbox;
    }

    // New tickets join the engine (or finish at once: cancelled or stopping before they started,
    // refused by the engine); cancels reach it; stopping or past the deadline, everyone live is cancelled.
    void open_inbox(const Inbox& inbox, LiveTickets& live) {
        for (const std::shared_ptr<Ticket>& t : inbox.arrivals) {
            if (t->cancel_requested || inbox.stopping) {  // gone before it started
                finish_unstarted(*t, "cancelled before it started", inbox.stopping, Outcome::cancelled);
                continue;
            }
            try {
                t->engine_id = engine_.add_request_ids(t->prompt_ids, t->options, t->arrival);
                live[t->engine_id] = t;
            } catch (const std::exception& e) {
                finish_unstarted(*t, e.what(), false, Outcome::error);
            }
        }
        for (const std::shared_ptr<Ticket>& t : inbox.cancels)
            if (t->engine_id >= 0) engine_.cancel(t->engine_id);  // finished ones: no-op
        if (inbox.stopping || inbox.past_deadline) {
            for (auto& [id, t] : live) {
                t->cancelled_by_shutdown = true;
                engine_.cancel(id);
            }
        }
    }

    // One engine step, if anything is unfinished (nullopt if not); then each live ticket gets its
    // new logprobs, then its new text. A step that throws is a bug, not bad input: it ends
    // everyone's request with its message.
    std::optional<StepReport> step_and_publish(const LiveTickets& live) {
        if (!engine_.has_unfinished()) return std::nullopt;
        StepReport report;
        try {
            report = engine_.step();
        } catch (const std::exception& e) {
            for (const auto& [id, t] : live) {
                {
                    std::lock_guard<std::mutex> lock(t->mutex);
                    t->error = std::string("engine step failed: ") + e.what();
                }
                engine_.cancel(id);
            }
        }
        publish(report, live);
        return report;
    }

    // Logprobs first: a handler that sees a step's text sees its logprobs too.
    void publish(const StepReport& report, const LiveTickets& live) {
        for (const auto& [id, t] : live) {
            const Request* r = engine_.request(id);
            if (r == nullptr || r->logprobs.size() <= t->logprobs_published) continue;
            std::lock_guard<std::mutex> lock(t->mutex);
            t->new_logprobs.insert(t->new_logprobs.end(), r->logprobs.begin() + static_cast<std::ptrdiff_t>(t->logprobs_published),
                                   r->logprobs.end());
            t->logprobs_published = r->logprobs.size();
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

    // The engine's finished results, each with its ticket; those tickets leave `live`.
    FinishedTickets take_finished(LiveTickets& live) {
        FinishedTickets done;
        for (RequestResult& r : engine_.take_finished()) {
            const auto it = live.find(r.id);
            if (it == live.end()) continue;
            done.emplace_back(it->second, std::move(r));
            live.erase(it);
        }
        return done;
    }

    // Each finished ticket gets its result and the pool's state; its handler wakes.
    void hand_out(FinishedTickets& done) {
        for (auto& [t, r] : done) {
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
    }

    // Stopping ends the thread only once no ticket is left in the inbox.
    bool nothing_arrived() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return arrivals_.empty();
    }

    // After each pass of the loop: the finished requests, the step's batch (if it stepped), the
    // gauges, the pool, the live requests, for metrics() and engine_state().
    void record(const std::optional<StepReport>& report, const FinishedTickets& done, const LiveTickets& live) {
        count_finished_requests(done);
        record_engine(report, live);
    }

    // Outcomes, tokens, TTFT and TPOT of the requests that just finished.
    void count_finished_requests(const FinishedTickets& done) {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        for (const auto& [t, r] : done) {
            const Outcome outcome = t->error.empty() ? outcome_of(r.stop_reason) : Outcome::error;  // error: a failed step
            count_finished(metrics_, r, outcome);
            state_.recent_finished.push_back(finished_record(r, t->name, outcome));
            if (state_.recent_finished.size() > kRecentFinished) state_.recent_finished.pop_front();
        }
    }

    // The step's batch (if it stepped), the gauges, the pool, the live requests. O(blocks + live
    // requests): small beside a forward pass, and nothing at all while the engine sleeps.
    void record_engine(const std::optional<StepReport>& report, const LiveTickets& live) {
        std::vector<LiveRecord> live_records;
        const auto add = [&](const Request* r) {
            const auto it = live.find(r->id);
            live_records.push_back(live_record(*r, it == live.end() ? std::string() : it->second->name));
        };
        for (const Request* r : engine_.scheduler().running()) add(r);
        for (const Request* r : engine_.scheduler().waiting()) add(r);
        std::vector<BlockRecord> blocks = block_records(engine_.blocks(), engine_.scheduler());

        std::lock_guard<std::mutex> lock(stats_mutex_);
        if (report) {
            ++metrics_.engine_steps;
            state_.steps = metrics_.engine_steps;
            state_.recent_steps.push_back(step_record(*report, metrics_.engine_steps));
            if (state_.recent_steps.size() > kRecentSteps) state_.recent_steps.pop_front();
        }
        metrics_.requests_running = static_cast<int>(engine_.scheduler().running().size());
        metrics_.requests_waiting = static_cast<int>(engine_.scheduler().waiting().size());
        count_blocks(metrics_, engine_.blocks());
        state_.blocks = std::move(blocks);
        state_.live = std::move(live_records);
    }

    // A ticket that never ran (refused by the engine, cancelled or stopped before it started).
    void finish_unstarted(Ticket& t, const std::string& why, bool by_shutdown, Outcome outcome) {
        {
            std::lock_guard<std::mutex> lock(stats_mutex_);
            ++metrics_.requests[static_cast<size_t>(outcome)];
        }
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

    mutable std::mutex mutex_;  // guards everything below
    std::condition_variable work_;  // the engine thread sleeps on it
    static constexpr std::chrono::seconds kKeepAlive{5};  // an idle engine thread's tick (keep_alive)
    std::condition_variable idle_;  // wait_idle() sleeps on it
    std::vector<std::shared_ptr<Ticket>> arrivals_;
    std::vector<std::shared_ptr<Ticket>> cancels_;
    int in_flight_ = 0;
    bool draining_ = false;
    bool stopping_ = false;
    std::optional<Clock::time_point> deadline_;

    mutable std::mutex stats_mutex_;  // guards the two below: written by the engine thread, copied by handlers
    ServerMetrics metrics_;
    EngineState state_;

    std::thread thread_;  // last: starts after everything above exists
};

}  // namespace glass::serve
