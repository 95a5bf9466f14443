/// \file
/// \brief glass/serve/ticket.hpp — one request's mailbox between the thread that submitted it and the engine's thread.
/// ```text
/// A server's handler fills in the request (prompt ids, options, arrival), hands the Ticket to
/// EngineThread::submit (engine_thread.hpp) and waits on it; the engine thread writes the text as
/// it streams out, the logprobs, and finally the result or the reason it failed:
///
///   handler:        wait(text, timeout)  -> new text; true once finished
///   engine thread:  under `mutex`: new_text += ..., finished = true; changed.notify_all()
/// ```
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
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
    std::string name;                          ///< how the live view names it (the HTTP response id)

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
    std::vector<StepLogprobs> new_logprobs;  ///< with options.logprobs: steps take_logprobs() has not handed out
                                             ///< (a request's last ones come in its result only)

    /// Waits up to `timeout` for news: appends the text that arrived since the last call to
    /// `text` and returns true once the request has finished (all of its text handed out).
    bool wait(std::string& text, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait_for(lock, timeout, [&] { return finished || !new_text.empty(); });
        text += new_text;
        new_text.clear();
        return finished;
    }

    /// The logprobs of the tokens chosen since the last call; those of a step's text arrive no
    /// later than the text itself.
    std::vector<StepLogprobs> take_logprobs() {
        std::lock_guard<std::mutex> lock(mutex);
        std::vector<StepLogprobs> out;
        out.swap(new_logprobs);
        return out;
    }

    /// Waits up to `timeout` for the request to finish (its text stays for wait()); true if it has.
    bool wait_finished(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex);
        return changed.wait_for(lock, timeout, [&] { return finished; });
    }

    // The engine thread's own bookkeeping.
    int engine_id = -1;                   ///< the engine's id, once added
    size_t logprobs_published = 0;        ///< steps moved to new_logprobs so far
    std::atomic<bool> cancel_requested{false};
};

}  // namespace glass::serve
