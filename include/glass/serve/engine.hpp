/// \file
/// \brief glass/serve/engine.hpp — many requests at once: add them, step the engine, collect what finished.
/// ```text
/// generate() serves one request with a Session. The engine serves many with one PagedBackend:
///
///   add_request(prompt, options)  -> id        the request waits (request.hpp)
///   step():                                    one forward pass for everyone scheduled
///     plan  = scheduler.schedule()             who computes which tokens (scheduler.hpp)
///     batch = build_batch(plan)                an entry per planned request: tokens, start, table
///     logits = backend.forward(batch)          K/V written into the pool (paged_backend.hpp)
///     apply_logits: for each entry: computed += n; its full blocks join the prefix cache;
///       if its last token was computed: sample the next one with the request's own RNG and
///       push it through the request's TokenOutput (generate.hpp: the same stop rules, UTF-8
///       streaming and stop strings as generate()); finished requests give their blocks back
///   take_finished()                            results with TTFT, TPOT, token times, cached tokens
///   cancel(id)                                 stops a request now and frees its blocks
///
/// A request's tokens come out exactly as generate() would give them with the request alone
/// (same logits, same draws), whatever else runs beside it: the batch changes who waits, never
/// what anyone computes. The pool holds num_blocks · block_size positions; a request may use at
/// most min(context window, that) of them.
///
/// Speculative decoding (draft_k > 0; speculative.hpp): before planning, each decoding request
/// asks for `lookahead` = min(draft_k, room left, tokens left − 1) more positions; the scheduler
/// grants them from what is left of the budget and the free blocks once everyone else is
/// planned. A granted request's own drafter proposes that many tokens, the step checks
/// [last token, drafts] as one entry that wants every row's logits, and judge_draft keeps a
/// prefix and draws the correction (or the bonus token):
///
///   computed += 1 + accepted     the rejected drafts' pool rows are simply not counted
///   tokens   += accepted drafts, then the correction/bonus, each through the stop rules
///   blocks   shrink back to what tokens use (the reserved room goes back to the pool)
///
/// With greedy sampling the ids are exactly those without speculation; sampled, a request given
/// its full lookahead every step draws exactly what generate_speculative() draws alone.
///
/// Disaggregated prefill/decode (remote_prefill set; remote_prefill.hpp): the engine computes no
/// prompt. Each step first takes the shipments that have arrived (import_kv into the request's
/// blocks; its first token sampled from the shipped logits), then plans; requests admitted this
/// step go to the prefill worker. A step with nothing to compute waits briefly for a shipment
/// instead of spinning. The text equals the combined engine's, bit for bit.
/// ```
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "glass/generate.hpp"
#include "glass/serve/block_manager.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/remote_prefill.hpp"
#include "glass/serve/request.hpp"
#include "glass/serve/scheduler.hpp"
#include "glass/speculative.hpp"

namespace glass::serve {

struct EngineOptions {
    int block_size = 16;            ///< positions per KV block
    int num_blocks = 0;             ///< blocks in the pool; 0 = four context windows' worth
    bool prefix_caching = true;     ///< share full blocks between requests with equal prefixes
    SchedulerOptions scheduler;     ///< token budget, max running, chunked prefill
    /// Speculative decoding: tokens drafted per decoding request and step (1..16); 0 = off.
    int draft_k = 0;
    /// Makes one request's drafter (called once per request, when it first decodes).
    std::function<std::unique_ptr<Drafter>()> make_drafter;
    /// Disaggregated prefill/decode: prompts go to this worker (not owned; remote_prefill.hpp).
    RemotePrefill* remote_prefill = nullptr;
};

/// A finished (or cancelled) request.
struct RequestResult {
    int id = 0;
    std::vector<int> prompt_ids;
    std::vector<int> generated_ids;  ///< includes a final BOS/EOS that stopped it, as in generate()
    std::string text;
    StopReason stop_reason = StopReason::length;
    GenerationMetrics metrics;       ///< token_ms from arrival; TTFT, TPOT, rates
    std::vector<StepLogprobs> logprobs;
    int cached_tokens = 0;           ///< prompt tokens served by the prefix cache
    int preemptions = 0;
    std::int64_t draft_proposed = 0; ///< speculative decoding: drafted tokens checked
    std::int64_t draft_accepted = 0; ///< of which accepted
};

/// What one step did: for the live view, the examples, and tests.
struct StepReport {
    struct Part {
        int id;
        int start;      ///< first position computed
        int n;          ///< positions computed
        bool prefill;   ///< part of a prompt (or a recomputation), not one decoded token
        int drafted = 0;   ///< of the n, drafted tokens checked (speculative decoding)
        int accepted = -1; ///< of those, accepted (-1: nothing drafted)
    };
    std::vector<Part> batch;
    std::vector<int> preempted;                       ///< ids sent back to the queue this step
    std::vector<int> finished;                        ///< ids that finished this step
    std::vector<int> waiting;                         ///< ids still waiting after the step
    std::vector<int> prefilled_remotely;              ///< ids whose shipped prompt K/V arrived this step
    std::vector<int> sent_to_prefill;                 ///< ids whose prompt went to the prefill worker
    std::vector<std::pair<int, std::string>> text;    ///< new text per request this step
};

class Engine {
public:
    Engine(PagedBackend& backend, const Tokenizer& tokenizer, EngineOptions options = {})
        : backend_(backend), tokenizer_(tokenizer), options_(options),
          blocks_(options.num_blocks > 0 ? options.num_blocks
                                         : 4 * ((backend.config().seq_len + options.block_size - 1) / std::max(options.block_size, 1)),
                  options.block_size, options.prefix_caching),
          scheduler_(blocks_, with_remote_prefill(options.scheduler, options.remote_prefill != nullptr)) {
        check_same_vocabulary(tokenizer, backend.config());
        if (options.draft_k < 0 || options.draft_k > 16)
            fail("draft k (tokens drafted per step) must be in [0, 16], got ", options.draft_k);
        if (options.draft_k > 0 && !options.make_drafter) fail("draft k is ", options.draft_k, " but no drafter was given");
        backend_.allocate_pool(blocks_.num_blocks(), blocks_.block_size());
    }

    /// Queues a prompt (encoded with BOS, as generate() does); returns the request's id.
    int add_request(std::string_view prompt, const GenerateOptions& options) {
        return add_request_ids(tokenizer_.encode(prompt, /*add_bos=*/true, /*add_eos=*/false), options);
    }

    /// Queues already-encoded prompt ids. Refuses (glass::Error) what could never run: what
    /// generate() refuses (check_generate_request), cached prompt tokens, a prompt longer than the pool.
    /// Its timings (TTFT, token times) count from `arrival`: when the request came in.
    int add_request_ids(std::vector<int> prompt_ids, const GenerateOptions& options, Clock::time_point arrival = Clock::now()) {
        check_generate_request(config(), tokenizer_, options, prompt_ids);
        if (options.cached_prompt_tokens != 0)
            fail("cached prompt tokens are a single session's (glass chat); the engine finds cached blocks itself, got ",
                 options.cached_prompt_tokens);
        const int n = static_cast<int>(prompt_ids.size());
        if (n > pool_positions())
            fail("prompt of ", n, " tokens does not fit the KV pool of ", blocks_.num_blocks(), " blocks of ",
                 blocks_.block_size(), " positions");

        const int id = next_id_++;
        const int last = prompt_ids.back();
        auto r = std::make_unique<Request>(id, std::move(prompt_ids), options, last, tokenizer_);
        r->arrival = arrival;
        Request* raw = r.get();
        requests_[id] = std::move(r);
        if (options.max_new_tokens == 0) {  // as generate(): nothing to compute
            finish(*raw);
        } else {
            scheduler_.add(raw);
        }
        return id;
    }

    /// One forward pass over everything the scheduler picks. Returns what happened.
    StepReport step() {
        StepReport report;
        if (options_.remote_prefill) take_shipments(std::chrono::milliseconds(0), report);
        set_lookaheads();
        const StepPlan plan = scheduler_.schedule();
        report.preempted = plan.preempted;
        send_to_prefill(plan, report);
        const StepBatch batch = build_batch(plan, report);
        if (!batch.entries.empty()) apply_logits(plan, batch, backend_.forward(batch.entries), report);
        else if (options_.remote_prefill && awaiting_kv() > 0)  // nothing to compute: wait for a shipment
            take_shipments(std::chrono::milliseconds(20), report);
        for (const Request* r : scheduler_.waiting()) report.waiting.push_back(r->id);
        return report;
    }

    /// Stops a request now (waiting or running) and gives its blocks back; its result, with
    /// stop reason "cancelled", comes out of take_finished(). Unknown or finished ids: no-op.
    void cancel(int id) {
        const auto it = requests_.find(id);
        if (it == requests_.end() || it->second->status == RequestStatus::finished) return;
        it->second->output.cancel();
        finish(*it->second);
    }

    /// Results of the requests that finished since the last call, in the order they finished.
    std::vector<RequestResult> take_finished() {
        std::vector<RequestResult> out;
        out.swap(finished_);
        return out;
    }

    /// Steps until every request has finished; returns all their results, by id.
    std::vector<RequestResult> run_to_completion() {
        while (!scheduler_.idle()) step();
        std::vector<RequestResult> out = take_finished();
        std::sort(out.begin(), out.end(), [](const RequestResult& a, const RequestResult& b) { return a.id < b.id; });
        return out;
    }

    bool has_unfinished() const { return !scheduler_.idle(); }
    const ModelConfig& config() const { return backend_.config(); }
    const PagedBackend& backend() const { return backend_; }
    const BlockManager& blocks() const { return blocks_; }
    const Scheduler& scheduler() const { return scheduler_; }
    /// A live request (for watching it), or nullptr once it has finished and been taken.
    const Request* request(int id) const {
        const auto it = requests_.find(id);
        return it == requests_.end() ? nullptr : it->second.get();
    }
    /// Positions one request may use: the context window, or the pool if that is smaller.
    int request_positions() const { return std::min(config().seq_len, pool_positions()); }
    /// Why no step can run any more (the backend's ranks, or the prefill worker, are gone), or empty.
    std::string unavailable() const {
        std::string why = backend_.unavailable();
        if (why.empty() && options_.remote_prefill) why = options_.remote_prefill->unavailable();
        return why;
    }
    /// An idle server's tick (PagedBackend::keep_alive): the backend's other ranks hear it is alive.
    void keep_alive() { backend_.keep_alive(); }
    /// Requests whose prompt is with the prefill worker (remote prefill only).
    int awaiting_kv() const {
        return static_cast<int>(std::ranges::count_if(scheduler_.running(), [](const Request* r) { return r->awaiting_kv; }));
    }

private:
    // One step's forward-pass input: an entry per scheduled chunk, in the plan's order.
    struct StepBatch {
        std::vector<BatchEntry> entries;        // [chunks]
        std::vector<Draft> drafts;              // [chunks] empty where nothing was drafted
        std::vector<std::vector<int>> checked;  // [chunks] [t, d_1..d_k] of a speculative entry (its tokens)
    };

    int pool_positions() const { return blocks_.num_blocks() * blocks_.block_size(); }

    static SchedulerOptions with_remote_prefill(SchedulerOptions o, bool remote) {
        o.remote_prefill = remote;
        return o;
    }

    // Remote prefill, out: each request admitted this step sends its tokens, and which of its
    // positions the prefix cache already holds here, under a new ticket.
    void send_to_prefill(const StepPlan& plan, StepReport& report) {
        for (const ScheduledChunk& c : plan.remote) {
            Request& r = *c.request;
            ++r.prefill_ticket;
            options_.remote_prefill->submit({.request_id = r.id, .ticket = r.prefill_ticket, .tokens = r.tokens, .first = c.start});
            report.sent_to_prefill.push_back(r.id);
        }
    }

    // Remote prefill, in: each shipment that still answers its request's current ticket goes into
    // the request's blocks, which makes its tokens computed; its first token is sampled from the
    // shipped logits, exactly as apply_logits would have sampled it after computing them here.
    void take_shipments(std::chrono::milliseconds wait, StepReport& report) {
        for (PrefilledKv& s : options_.remote_prefill->take_arrived(wait)) {
            const auto it = requests_.find(s.request_id);
            if (it == requests_.end()) continue;  // cancelled (or finished) while away
            Request& r = *it->second;
            if (!r.awaiting_kv || r.prefill_ticket != s.ticket) continue;  // preempted since: stale rows
            if (!s.error.empty()) fail("prefill worker, request ", r.id, ": ", s.error);
            if (s.first != r.computed || s.end != static_cast<int>(r.tokens.size()))
                fail("prefill worker, request ", r.id, ": shipped positions ", s.first, " .. ", s.end - 1, ", expected ",
                     r.computed, " .. ", r.tokens.size() - 1);
            backend_.import_kv(r.block_table, s.first, s.end, s.rows);
            r.awaiting_kv = false;
            r.computed = s.end;
            ++r.scheduled_steps;
            blocks_.cache_full_blocks(r.block_table, r.tokens, r.computed);
            report.prefilled_remotely.push_back(r.id);
            report_progress(r, accept_token(r, s.last_logits), report);  // r may be gone after this
        }
    }

    // Phase 1, the batch: each chunk's tokens, start and block table. A chunk with drafted room
    // checks [its last token, the drafts] and wants every row's logits; a prompt chunk wants its
    // last row's only if it reaches the end of the prompt.
    StepBatch build_batch(const StepPlan& plan, StepReport& report) {
        StepBatch b;
        b.drafts.resize(plan.chunks.size());
        b.checked.resize(plan.chunks.size());  // sized once: the entries' spans point into it
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
            const ScheduledChunk& c = plan.chunks[i];
            Request& r = *c.request;
            if (c.draft > 0) {
                if (!r.drafter) r.drafter = options_.make_drafter();
                b.drafts[i] = checked_draft(*r.drafter, r.tokens, c.draft, r.options.sampling, r.rng, config().vocab_size);
                b.checked[i] = {r.tokens.back()};
                b.checked[i].insert(b.checked[i].end(), b.drafts[i].tokens.begin(), b.drafts[i].tokens.end());
                b.entries.push_back({.tokens = b.checked[i], .start = c.start, .block_table = r.block_table, .every_row = true});
            } else {
                const std::span<const int> tokens(r.tokens);
                b.entries.push_back({.tokens = tokens.subspan(static_cast<size_t>(c.start), static_cast<size_t>(c.n)),
                                     .start = c.start,
                                     .block_table = r.block_table,
                                     .wants_logits = c.start + c.n == static_cast<int>(r.tokens.size())});
            }
            report.batch.push_back({.id = r.id,
                                    .start = c.start,
                                    .n = static_cast<int>(b.entries.back().tokens.size()),
                                    .prefill = !c.decode,
                                    .drafted = static_cast<int>(b.drafts[i].tokens.size())});
        }
        return b;
    }

    // Phase 2, the pass's results: each chunk's positions now have K/V in the pool (full blocks
    // join the prefix cache); where its logits were wanted, the request takes its next token(s).
    void apply_logits(const StepPlan& plan, const StepBatch& batch, std::span<const float> logits, StepReport& report) {
        const size_t vocab = static_cast<size_t>(config().vocab_size);
        size_t row = 0;  // logits rows come in the batch's order, only for the entries that want them
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
            Request& r = *plan.chunks[i].request;
            const BatchEntry& entry = batch.entries[i];
            ++r.scheduled_steps;
            std::string text;
            if (entry.every_row) {  // a speculative check: keep a prefix of the drafts
                const size_t n_rows = entry.tokens.size();
                text = judge_drafts(r, logits.subspan(row * vocab, n_rows * vocab), batch.drafts[i], report.batch[i]);
                row += n_rows;
            } else {
                r.computed += static_cast<int>(entry.tokens.size());
                blocks_.cache_full_blocks(r.block_table, r.tokens, r.computed);
                if (!entry.wants_logits) continue;
                text = accept_token(r, logits.subspan(row++ * vocab, vocab));
            }
            report_progress(r, text, report);  // r may be gone after this
        }
    }

    // Phase 3, speculative decoding: `rows` [1 + k, vocab] judge [t, d_1..d_k]. Accepted drafts,
    // then the correction (or the bonus token), join the request through the stop rules; the
    // rejected drafts' pool rows are not counted, and the room reserved for them goes back.
    std::string judge_drafts(Request& r, std::span<const float> rows, const Draft& draft, StepReport::Part& part) {
        const size_t vocab = static_cast<size_t>(config().vocab_size);
        const SpeculativeRound round = judge_draft(rows, config().vocab_size, draft, r.options.sampling, r.rng);
        r.draft_proposed += static_cast<std::int64_t>(draft.tokens.size());
        r.draft_accepted += round.accepted;
        if (!draft.tokens.empty()) part.accepted = round.accepted;
        r.computed += 1 + round.accepted;  // t and the accepted drafts; the rest is forgotten
        std::string text;
        for (size_t j = 0; j < round.emitted.size() && !r.output.done(); ++j)  // row j predicted emitted[j]
            text += push_token(r, round.emitted[j], rows.subspan(j * vocab, vocab));
        r.computed = std::min(r.computed, static_cast<int>(r.tokens.size()));  // it may have stopped early
        blocks_.cache_full_blocks(r.block_table, r.tokens, r.computed);
        blocks_.shrink(r.block_table, static_cast<int>(r.tokens.size()));  // the reserved room goes back
        return text;
    }

    // Phase 4, the report: the request's new text, and whether it finished (then it leaves).
    void report_progress(Request& r, const std::string& text, StepReport& report) {
        if (!text.empty()) report.text.emplace_back(r.id, text);
        if (r.output.done()) {
            report.finished.push_back(r.id);
            finish(r);  // r is gone after this
        }
    }

    // The request's last token was just computed: sample its next token, exactly as generate().
    std::string accept_token(Request& r, std::span<const float> logits) {
        return push_token(r, sample(logits, r.options.sampling, r.rng), logits);
    }

    // A chosen token (predicted by `logits`) joins the request: its time, its logprobs, the stop rules.
    std::string push_token(Request& r, int token, std::span<const float> logits) {
        r.metrics.token_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - r.arrival).count());
        if (r.options.logprobs || r.options.top_logprobs > 0)
            r.logprobs.push_back(step_logprobs(logits, token, r.options.top_logprobs));
        const int before = static_cast<int>(r.tokens.size());  // positions before it (all cached but the last)
        r.tokens.push_back(token);
        return r.output.push(token, before, request_positions());
    }

    // Speculative decoding: how many drafted tokens each decoding request would like checked next
    // step, as generate_speculative() asks: no more than fit the window, nor than it may still emit.
    void set_lookaheads() {
        for (Request* r : scheduler_.running()) {
            r->lookahead = 0;
            if (options_.draft_k == 0 || !r->decoding()) continue;
            const int remaining = r->options.max_new_tokens - r->generated();
            r->lookahead = std::max(0, std::min({options_.draft_k, request_positions() - static_cast<int>(r->tokens.size()),
                                                 remaining - 1}));
        }
    }

    void finish(Request& r) {
        scheduler_.remove(&r);
        r.status = RequestStatus::finished;
        RequestResult res;
        res.id = r.id;
        res.prompt_ids = r.prompt_ids;
        res.generated_ids = r.output.generated_ids();
        res.text = r.output.text();
        res.stop_reason = r.output.stop_reason();
        res.metrics = r.metrics;
        res.metrics.kv_bytes_per_token = kv_bytes_per_token(config(), backend_.kv_type());
        res.metrics.weight_bytes_per_token = backend_.weight_bytes();
        finish_metrics(res.metrics, static_cast<int>(r.prompt_ids.size()));
        res.logprobs = std::move(r.logprobs);
        res.cached_tokens = r.cached_tokens;
        res.preemptions = r.preemptions;
        res.draft_proposed = r.draft_proposed;
        res.draft_accepted = r.draft_accepted;
        finished_.push_back(std::move(res));
        requests_.erase(r.id);  // r is gone after this line
    }

    PagedBackend& backend_;
    const Tokenizer& tokenizer_;
    EngineOptions options_;
    BlockManager blocks_;
    Scheduler scheduler_;
    std::map<int, std::unique_ptr<Request>> requests_;  // waiting and running ones
    std::vector<RequestResult> finished_;
    int next_id_ = 0;
};

}  // namespace glass::serve
