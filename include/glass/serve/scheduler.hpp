/// \file
/// \brief glass/serve/scheduler.hpp — continuous batching: which tokens of which requests the next step computes.
/// ```text
/// Every engine step runs ONE forward pass over a batch built here, under a token budget:
///
///   1. running requests, oldest first: each gets its uncomputed tokens — 1 for a request that
///      is decoding, the rest of its prompt (up to what is left of the budget) for one whose
///      prompt was cut into chunks;
///   2. then waiting requests, oldest first, while budget and blocks last: the prompt minus
///      what the prefix cache already holds. With chunked prefill a prompt longer than what is
///      left of the budget is cut, and the rest follows in later steps (so a 2,000-token prompt
///      never stalls the others' decode steps for long: C18). Without it, a prompt is taken
///      whole: only if it fits what is left of the budget, or if it is the first waiting
///      request this step (so a long prompt is never starved; that step runs long);
///   3. speculative decoding: a decoding request may ask for `lookahead` more positions, for
///      drafted tokens checked beside its last one. They get only what is left of the budget
///      and the free blocks once 1 and 2 are planned (a step never computes more than
///      max_tokens_per_step positions, drafts included), so drafts never delay or preempt anyone.
///
/// Disaggregated prefill/decode (remote_prefill: remote_prefill.hpp): step 2 admits a waiting
/// request with blocks for ALL its tokens and marks it awaiting_kv (its prompt is computed by a
/// prefill worker, so it takes nothing from this step's budget) and plans it in `remote`; step 1
/// skips it until its rows have arrived and it decodes like any other.
///
/// New requests join and finished ones leave between any two steps: that is continuous
/// batching. When a running request needs a block and none is free, the NEWEST running request
/// is preempted: its blocks go back to the pool, it returns to the FRONT of the waiting queue,
/// and later it is computed again from its tokens (prompt + what it generated). No new request
/// is admitted in a step that had to preempt.
///
/// In:  requests (request.hpp), the block manager (block_manager.hpp), the options.
/// Out: a StepPlan — for each scheduled request the positions to compute this step.
/// ```
#pragma once

#include <algorithm>
#include <deque>
#include <vector>

#include "glass/serve/block_manager.hpp"
#include "glass/serve/request.hpp"

namespace glass::serve {

struct SchedulerOptions {
    int max_tokens_per_step = 256;  ///< the token budget of one forward pass
    int max_running = 64;           ///< requests in one batch at most
    bool chunked_prefill = true;    ///< cut prompts that do not fit what is left of the budget
    bool remote_prefill = false;    ///< prompts are computed by a prefill worker (remote_prefill.hpp)
};

/// Positions start .. start + n - 1 of one request are computed this step.
struct ScheduledChunk {
    Request* request;
    int start;
    int n;
    bool decode = false;  ///< a decode step: it computes the token it sampled last (Request::decoding()), plus any drafts
    int draft = 0;        ///< of the n, positions reserved for drafted tokens (at most n - 1; decode chunks only)
};

struct StepPlan {
    std::vector<ScheduledChunk> chunks;  ///< running requests first, then newly admitted ones
    std::vector<int> preempted;          ///< ids of requests preempted while planning
    std::vector<ScheduledChunk> remote;  ///< admitted with remote prefill: positions [start, start + n) come from a worker
    int tokens() const {
        int total = 0;
        for (const ScheduledChunk& c : chunks) total += c.n;
        return total;
    }
};

class Scheduler {
public:
    Scheduler(BlockManager& blocks, SchedulerOptions options) : blocks_(blocks), options_(options) {
        if (options.max_tokens_per_step < 1) fail("token budget per step must be >= 1, got ", options.max_tokens_per_step);
        if (options.max_running < 1) fail("max running requests must be >= 1, got ", options.max_running);
    }

    const SchedulerOptions& options() const { return options_; }
    const std::deque<Request*>& waiting() const { return waiting_; }
    const std::vector<Request*>& running() const { return running_; }
    bool idle() const { return waiting_.empty() && running_.empty(); }

    void add(Request* r) { waiting_.push_back(r); }

    /// The plan of one step, in three phases that share the step's token budget.
    StepPlan schedule() {
        StepPlan plan;
        int budget = options_.max_tokens_per_step;
        schedule_running(plan, budget);  // 1. running requests, oldest first
        if (options_.remote_prefill)     // 2. waiting requests, oldest first, unless memory was short
            admit_for_remote_prefill(plan);
        else
            admit_waiting(plan, budget);
        add_drafts(plan, budget);  // 3. drafted positions for decoding requests, from what is left
        return plan;
    }

    /// A finished or cancelled request leaves: its blocks go back to the pool.
    void remove(Request* r) {
        running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
        waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
        blocks_.release(r->block_table);
        r->computed = 0;
    }

private:
    // Step 1: each running request's next chunk (its prompt's next piece, or one decode
    // position), oldest first. A request whose blocks cannot grow preempts the newest running
    // request (itself, if it is the newest: then the step stops here).
    void schedule_running(StepPlan& plan, int& budget) {
        for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
            Request* r = running_[i];
            if (r->awaiting_kv) continue;  // its prompt is being computed elsewhere
            const int n = std::min(r->uncomputed(), budget);
            bool preempted_self = false;
            while (!blocks_.can_grow(r->block_table, {}, r->computed + n)) {
                Request* victim = running_.back();  // the newest
                preempt(victim);
                plan.preempted.push_back(victim->id);
                if (victim == r) { preempted_self = true; break; }
            }
            if (preempted_self) break;
            blocks_.grow(r->block_table, {}, r->computed + n);
            plan.chunks.push_back({.request = r, .start = r->computed, .n = n, .decode = r->decoding()});
            budget -= n;
        }
    }

    // Step 2: waiting requests, oldest first, with their prefix cache hits, while the budget,
    // the blocks and max_running allow and nothing was preempted this step. A prompt longer than
    // what is left of the budget is cut (chunked prefill); with chunking off it waits for the
    // next step, unless it is this step's first admission, which takes its whole prompt.
    void admit_waiting(StepPlan& plan, int& budget) {
        bool first_admission = true;
        while (!waiting_.empty() && budget > 0 && plan.preempted.empty() &&
               static_cast<int>(running_.size()) < options_.max_running) {
            Request* r = waiting_.front();
            const std::vector<int> hits = blocks_.find_cached_prefix(r->tokens);
            const int cached = static_cast<int>(hits.size()) * blocks_.block_size();
            int n = static_cast<int>(r->tokens.size()) - cached;
            if (n > budget) {
                if (options_.chunked_prefill) n = budget;
                else if (!first_admission) break;  // whole prompts only: wait for the next step
            }
            if (!blocks_.can_grow(r->block_table, hits, cached + n)) break;
            blocks_.grow(r->block_table, hits, cached + n);
            r->computed = cached;
            if (r->preemptions == 0) r->cached_tokens = cached;
            r->status = RequestStatus::running;
            waiting_.pop_front();
            running_.push_back(r);
            plan.chunks.push_back({.request = r, .start = cached, .n = n, .decode = r->decoding()});
            budget -= n;
            first_admission = false;
        }
    }

    // Step 3: a decoding request that asked for lookahead (speculative decoding) gets up to that
    // many more positions in its chunk, oldest first, as far as the budget and its blocks go.
    void add_drafts(StepPlan& plan, int& budget) {
        for (ScheduledChunk& c : plan.chunks) {
            Request* r = c.request;
            if (budget <= 0) break;
            if (r->lookahead <= 0 || !c.decode) continue;  // only a decode step drafts
            int extra = std::min(r->lookahead, budget);
            while (extra > 0 && !blocks_.can_grow(r->block_table, {}, r->computed + 1 + extra)) --extra;
            if (extra == 0) continue;
            blocks_.grow(r->block_table, {}, r->computed + 1 + extra);
            c.n += extra;
            c.draft = extra;
            budget -= extra;
        }
    }

    // Step 2 with remote prefill: every token of a waiting request gets its block here (the
    // prefix cache's hits shared), while blocks last; the positions past the hits are computed
    // by the prefill worker, so they take no budget.
    void admit_for_remote_prefill(StepPlan& plan) {
        while (!waiting_.empty() && plan.preempted.empty() && static_cast<int>(running_.size()) < options_.max_running) {
            Request* r = waiting_.front();
            const std::vector<int> hits = blocks_.find_cached_prefix(r->tokens);
            const int cached = static_cast<int>(hits.size()) * blocks_.block_size();
            const int n = static_cast<int>(r->tokens.size()) - cached;
            if (!blocks_.can_grow(r->block_table, hits, cached + n)) break;
            blocks_.grow(r->block_table, hits, cached + n);
            r->computed = cached;
            if (r->preemptions == 0) r->cached_tokens = cached;
            r->status = RequestStatus::running;
            r->awaiting_kv = true;
            waiting_.pop_front();
            running_.push_back(r);
            plan.remote.push_back({.request = r, .start = cached, .n = n});
        }
    }

    void preempt(Request* r) {
        running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
        blocks_.release(r->block_table);
        r->computed = 0;
        r->awaiting_kv = false;  // a shipment still on its way is dropped (its ticket is stale)
        r->status = RequestStatus::waiting;
        r->lookahead = 0;  // asked for its old state; it will ask again once it decodes
        ++r->preemptions;
        waiting_.push_front(r);
    }

    BlockManager& blocks_;
    SchedulerOptions options_;
    std::deque<Request*> waiting_;   // oldest first; preempted requests go to the front
    std::vector<Request*> running_;  // oldest first
};

}  // namespace glass::serve
