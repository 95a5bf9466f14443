/// \file
/// \brief glass/serve/engine.hpp — many requests at once: add them, step the engine, collect what finished.
/// ```text
/// generate() serves one request with a Session. The engine serves many with one PagedBackend:
///
///   add_request(prompt, options)  -> id        the request waits (request.hpp)
///   step():                                    one forward pass for everyone scheduled
///     plan  = scheduler.schedule()             who computes which tokens (scheduler.hpp)
///     batch = one entry per planned request    its new tokens, start, block table
///     logits = backend.forward(batch)          K/V written into the pool (paged_backend.hpp)
///     for each entry: computed += n; its full blocks join the prefix cache;
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
    std::vector<std::pair<int, std::string>> text;    ///< new text per request this step
};

class Engine {
public:
    Engine(PagedBackend& backend, const Tokenizer& tokenizer, EngineOptions options = {})
        : backend_(backend), tokenizer_(tokenizer), options_(options),
          blocks_(options.num_blocks > 0 ? options.num_blocks
                                         : 4 * ((backend.config().seq_len + options.block_size - 1) / std::max(options.block_size, 1)),
                  options.block_size, options.prefix_caching),
          scheduler_(blocks_, options.scheduler) {
        if (tokenizer.vocab_size() != backend.config().vocab_size)
            fail("tokenizer has ", tokenizer.vocab_size(), " pieces but the model's vocabulary has ",
                 backend.config().vocab_size);
        if (options.draft_k < 0 || options.draft_k > 16)
            fail("draft k (tokens drafted per step) must be in [0, 16], got ", options.draft_k);
        if (options.draft_k > 0 && !options.make_drafter) fail("draft k is ", options.draft_k, " but no drafter was given");
        backend_.allocate_pool(blocks_.num_blocks(), blocks_.block_size());
    }

    /// Queues a prompt (encoded with BOS, as generate() does); returns the request's id.
    int add_request(std::string_view prompt, const GenerateOptions& options) {
        return add_request_ids(tokenizer_.encode(prompt, /*add_bos=*/true, /*add_eos=*/false), options);
    }

    /// Queues already-encoded prompt ids. Refuses (glass::Error) what could never run: bad
    /// options, no ids, an id outside the vocabulary, a prompt longer than what one request may use.
    /// Its timings (TTFT, token times) count from `arrival`: when the request came in.
    int add_request_ids(std::vector<int> prompt_ids, const GenerateOptions& options, Clock::time_point arrival = Clock::now()) {
        validate(options.sampling);
        if (options.max_new_tokens < 0) fail("max new tokens must be >= 0, got ", options.max_new_tokens);
        if (options.top_logprobs < 0 || options.top_logprobs > kMaxTopLogprobs)
            fail("top logprobs must be in [0, ", kMaxTopLogprobs, "], got ", options.top_logprobs);
        if (options.cached_prompt_tokens != 0)
            fail("cached prompt tokens are a single session's (glass chat); the engine finds cached blocks itself, got ",
                 options.cached_prompt_tokens);
        if (prompt_ids.empty()) fail("a request needs at least one prompt token");
        for (int id : prompt_ids)
            if (id < 0 || id >= config().vocab_size)
                fail("token id ", id, " is outside the vocabulary [0, ", config().vocab_size, ")");
        const int n = static_cast<int>(prompt_ids.size());
        if (n > config().seq_len)
            fail("prompt of ", n, " tokens is longer than the context window of ", config().seq_len);
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
        set_lookaheads();
        const StepPlan plan = scheduler_.schedule();
        report.preempted = plan.preempted;
        std::vector<BatchEntry> batch;
        std::vector<Draft> drafts(plan.chunks.size());
        std::vector<std::vector<int>> checked(plan.chunks.size());  // [t, d_1..d_k] per speculative entry
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
            const ScheduledChunk& c = plan.chunks[i];
            Request& r = *c.request;
            if (c.draft > 0) {  // its last token, and up to c.draft drafted ones checked beside it
                if (!r.drafter) r.drafter = options_.make_drafter();
                drafts[i] = checked_draft(*r.drafter, r.tokens, c.draft, r.options.sampling, r.rng, config().vocab_size);
                checked[i] = {r.tokens.back()};
                checked[i].insert(checked[i].end(), drafts[i].tokens.begin(), drafts[i].tokens.end());
                batch.push_back({checked[i], c.start, r.block_table, true, /*every_row=*/true});
            } else {
                const std::span<const int> tokens(r.tokens);
                batch.push_back({tokens.subspan(static_cast<size_t>(c.start), static_cast<size_t>(c.n)), c.start,
                                 r.block_table, c.start + c.n == static_cast<int>(r.tokens.size())});
            }
            const int n = static_cast<int>(batch.back().tokens.size());
            const bool decode = n == 1 + static_cast<int>(drafts[i].tokens.size()) && r.generated() > 0 &&
                                c.start + 1 == static_cast<int>(r.tokens.size());  // exactly its last sampled token
            report.batch.push_back({r.id, c.start, n, !decode, static_cast<int>(drafts[i].tokens.size())});
        }
        if (!batch.empty()) {
            const std::span<const float> logits = backend_.forward(batch);
            const size_t vocab = static_cast<size_t>(config().vocab_size);
            size_t row = 0;
            for (size_t i = 0; i < plan.chunks.size(); ++i) {
                Request& r = *plan.chunks[i].request;
                ++r.scheduled_steps;
                std::string text;
                if (batch[i].every_row) {  // a speculative check: keep a prefix of the drafts
                    const size_t n_rows = batch[i].tokens.size();
                    const std::span<const float> rows = logits.subspan(row * vocab, n_rows * vocab);
                    row += n_rows;
                    const SpeculativeRound round = judge_draft(rows, config().vocab_size, drafts[i], r.options.sampling, r.rng);
                    r.draft_proposed += static_cast<std::int64_t>(drafts[i].tokens.size());
                    r.draft_accepted += round.accepted;
                    if (!drafts[i].tokens.empty()) report.batch[i].accepted = round.accepted;
                    r.computed += 1 + round.accepted;  // t and the accepted drafts; the rest is forgotten
                    for (size_t j = 0; j < round.emitted.size() && !r.output.done(); ++j)  // row j predicted emitted[j]
                        text += push_token(r, round.emitted[j], rows.subspan(j * vocab, vocab));
                    r.computed = std::min(r.computed, static_cast<int>(r.tokens.size()));  // it may have stopped early
                    blocks_.cache_full_blocks(r.block_table, r.tokens, r.computed);
                    blocks_.shrink(r.block_table, static_cast<int>(r.tokens.size()));  // the reserved room goes back
                } else {
                    r.computed += static_cast<int>(batch[i].tokens.size());
                    blocks_.cache_full_blocks(r.block_table, r.tokens, r.computed);
                    if (!batch[i].wants_logits) continue;
                    text = accept_token(r, logits.subspan(row++ * vocab, vocab));
                }
                if (!text.empty()) report.text.emplace_back(r.id, text);
                if (r.output.done()) {
                    report.finished.push_back(r.id);
                    finish(r);  // r is gone after this
                }
            }
        }
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

private:
    int pool_positions() const { return blocks_.num_blocks() * blocks_.block_size(); }

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
            if (options_.draft_k == 0 || r->uncomputed() != 1 || r->generated() == 0) continue;
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
