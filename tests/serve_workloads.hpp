// Randomized serving workloads, shared by the engine tests of every backend (CPU reference, fast
// CPU path, CUDA): requests arriving at different steps, prompts from 1 token to past several
// block boundaries with shared prefixes, greedy and seeded sampling, stop strings, a pool small
// enough to force preemption, budgets small enough to force chunked prefill.
//
// The check: every request's ids (and text and stop reason) under the engine equal the same
// request run ALONE through generate_from_ids() on a PagedSession of the same kind of backend,
// and the block pool is consistent after every step and whole again at the end.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "glass/glass.hpp"

namespace test {

struct WorkloadRequest {
    std::vector<int> prompt;
    glass::GenerateOptions options;
    int arrival_step = 0;   // added just before this engine step
    int cancel_step = -1;   // cancelled just before this step (-1: never)
};

struct Workload {
    std::string name;
    glass::serve::EngineOptions engine;
    std::vector<WorkloadRequest> requests;
};

// What a run of the engine showed, beyond the results.
struct WorkloadStats {
    int steps = 0;
    int preemptions = 0;
    int chunked_prompts = 0;     // prompts computed over more than one step
    int prefix_hit_tokens = 0;
    int max_batch_requests = 0;

    // Sums the workloads of one test, so it can check they exercised what they are meant to.
    void add(const WorkloadStats& s) {
        steps += s.steps;
        preemptions += s.preemptions;
        chunked_prompts += s.chunked_prompts;
        prefix_hit_tokens += s.prefix_hit_tokens;
        max_batch_requests = std::max(max_batch_requests, s.max_batch_requests);
    }
};

// A test's randomized workloads meant to preempt, chunk prompts, hit the prefix cache and batch
// at least `min_batch` requests: a check that passes without them proves little.
inline void check_exercised(const WorkloadStats& total, int min_batch) {
    CHECK(total.preemptions > 0);
    CHECK(total.chunked_prompts > 0);
    CHECK(total.prefix_hit_tokens > 0);
    CHECK(total.max_batch_requests >= min_batch);
}

inline Workload random_workload(unsigned seed, const glass::ModelConfig& c, int block_size, int budget,
                                int num_blocks, bool prefix_caching, bool chunked_prefill, int n_requests = 12) {
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    Workload w;
    w.name = "seed " + std::to_string(seed) + ", block " + std::to_string(block_size) + ", budget " +
             std::to_string(budget) + ", " + std::to_string(num_blocks) + " blocks, prefix cache " +
             (prefix_caching ? "on" : "off") + ", chunked prefill " + (chunked_prefill ? "on" : "off");
    w.engine.block_size = block_size;
    w.engine.num_blocks = num_blocks;
    w.engine.prefix_caching = prefix_caching;
    w.engine.scheduler.max_tokens_per_step = budget;
    w.engine.scheduler.chunked_prefill = chunked_prefill;
    w.engine.scheduler.max_running = 8;

    // Three long "system prompts" that requests start with (shared prefixes), BOS first.
    std::vector<std::vector<int>> bases(3);
    for (auto& b : bases) {
        b.push_back(1);
        for (int i = 0; i < 47; ++i) b.push_back(uniform(3, c.vocab_size - 1));
    }
    const int max_positions = std::min(c.seq_len, num_blocks * block_size);
    for (int i = 0; i < n_requests; ++i) {
        WorkloadRequest r;
        const std::vector<int>& base = bases[static_cast<size_t>(uniform(0, 2))];
        const int shared = uniform(0, 3) == 0 ? 1 : uniform(1, static_cast<int>(base.size()));
        r.prompt.assign(base.begin(), base.begin() + shared);
        const int extra = uniform(0, 12);
        for (int k = 0; k < extra; ++k) r.prompt.push_back(uniform(3, c.vocab_size - 1));
        r.options.max_new_tokens = uniform(1, 24);
        // Keep the whole request inside what one request may use, so "alone" (a full context)
        // and "in the engine" stop for the same reasons.
        r.options.max_new_tokens = std::min(r.options.max_new_tokens, max_positions - static_cast<int>(r.prompt.size()));
        REQUIRE(r.options.max_new_tokens >= 1);
        if (uniform(0, 1) == 0) {
            r.options.sampling.temperature = 0.0f;  // greedy
        } else {
            r.options.sampling.temperature = 0.7f + 0.1f * static_cast<float>(uniform(0, 6));
            r.options.sampling.top_p = uniform(0, 1) ? 0.9f : 1.0f;
            r.options.sampling.top_k = uniform(0, 2) == 0 ? 40 : 0;
            r.options.seed = static_cast<std::uint64_t>(uniform(1, 1 << 30));
        }
        if (uniform(0, 4) == 0) r.options.stop_strings = {"."};
        if (uniform(0, 5) == 0) r.options.top_logprobs = 3;
        r.arrival_step = uniform(0, 2) == 0 ? 0 : uniform(0, 40);
        if (uniform(0, 9) == 0) r.cancel_step = r.arrival_step + uniform(0, 6);
        w.requests.push_back(r);
    }
    return w;
}

// Every block's ref count equals the number of live block tables holding it; tables are as long
// as their computed positions need.
inline void check_pool_consistent(const glass::serve::Engine& engine) {
    const glass::serve::BlockManager& bm = engine.blocks();
    std::vector<int> holders(static_cast<size_t>(bm.num_blocks()), 0);
    auto count = [&](const glass::serve::Request* r) {
        CHECK(static_cast<int>(r->block_table.size()) >= bm.blocks_for(r->computed));
        for (int b : r->block_table) ++holders[static_cast<size_t>(b)];
    };
    for (const glass::serve::Request* r : engine.scheduler().running()) count(r);
    for (const glass::serve::Request* r : engine.scheduler().waiting()) {
        CHECK(r->block_table.empty());
        count(r);
    }
    int free_blocks = 0;
    for (int b = 0; b < bm.num_blocks(); ++b) {
        CHECK_MESSAGE(bm.block(b).ref_count == holders[static_cast<size_t>(b)], "block " << b);
        free_blocks += bm.block(b).ref_count == 0;
    }
    CHECK(free_blocks == bm.num_free());
}

// Runs the workload on `backend`; checks the pool after every step. Results by request index.
inline std::vector<glass::serve::RequestResult> run_workload(glass::serve::PagedBackend& backend,
                                                             const glass::Tokenizer& tok, const Workload& w,
                                                             WorkloadStats* stats = nullptr) {
    glass::serve::Engine engine(backend, tok, w.engine);
    std::vector<int> id_of(w.requests.size(), -1);
    std::vector<glass::serve::RequestResult> results(w.requests.size());
    WorkloadStats s;
    std::map<int, int> prefill_parts;  // request id -> steps that computed part of its prompt
    size_t done = 0;
    for (int step = 0; done < w.requests.size(); ++step) {
        REQUIRE_MESSAGE(step < 5000, "the engine does not finish: " << w.name);
        for (size_t i = 0; i < w.requests.size(); ++i) {
            if (w.requests[i].arrival_step == step)
                id_of[i] = engine.add_request_ids(w.requests[i].prompt, w.requests[i].options);
            if (w.requests[i].cancel_step == step && id_of[i] >= 0) engine.cancel(id_of[i]);
        }
        const glass::serve::StepReport report = engine.step();
        ++s.steps;
        s.preemptions += static_cast<int>(report.preempted.size());
        s.max_batch_requests = std::max(s.max_batch_requests, static_cast<int>(report.batch.size()));
        for (const glass::serve::StepReport::Part& p : report.batch)
            if (p.prefill && ++prefill_parts[p.id] == 2) ++s.chunked_prompts;
        check_pool_consistent(engine);
        for (glass::serve::RequestResult& r : engine.take_finished()) {
            const size_t i = static_cast<size_t>(std::find(id_of.begin(), id_of.end(), r.id) - id_of.begin());
            REQUIRE(i < w.requests.size());
            s.prefix_hit_tokens += r.cached_tokens;
            results[i] = std::move(r);
            ++done;
        }
        const bool more_arrivals = std::any_of(w.requests.begin(), w.requests.end(),
                                               [&](const WorkloadRequest& r) { return r.arrival_step > step; });
        if (!more_arrivals && !engine.has_unfinished()) REQUIRE_MESSAGE(done == w.requests.size(), w.name);
    }
    // The pool is whole again: every block free, no ref count left.
    CHECK(engine.blocks().num_free() == engine.blocks().num_blocks());
    for (int b = 0; b < engine.blocks().num_blocks(); ++b) CHECK(engine.blocks().block(b).ref_count == 0);
    if (stats) *stats = s;
    return results;
}

// The check described at the top of this file. `alone` is a second backend of the same kind
// (generate() runs on it through a PagedSession, one request at a time).
inline WorkloadStats check_workload_against_alone(glass::serve::PagedBackend& backend, glass::serve::PagedBackend& alone,
                                                  const glass::Tokenizer& tok, const Workload& w) {
    INFO(w.name);
    WorkloadStats stats;
    const std::vector<glass::serve::RequestResult> results = run_workload(backend, tok, w, &stats);
    glass::serve::PagedSession session(alone, w.engine.block_size);
    for (size_t i = 0; i < w.requests.size(); ++i) {
        const WorkloadRequest& q = w.requests[i];
        const glass::serve::RequestResult& got = results[i];
        INFO("request " << i << " (" << q.prompt.size() << " prompt tokens, arrives at step " << q.arrival_step << ")");
        CHECK(got.prompt_ids == q.prompt);
        const glass::GenerateResult want = glass::generate_from_ids(session, tok, q.prompt, q.options);
        if (got.stop_reason == glass::StopReason::cancelled) {  // stopped early on purpose
            CHECK(q.cancel_step >= 0);
            REQUIRE(got.generated_ids.size() <= want.generated_ids.size());
            CHECK(std::equal(got.generated_ids.begin(), got.generated_ids.end(), want.generated_ids.begin()));
            continue;
        }
        CHECK(got.generated_ids == want.generated_ids);
        CHECK(got.text == want.text);
        CHECK(glass::to_string(got.stop_reason) == std::string(glass::to_string(want.stop_reason)));
        CHECK(got.metrics.token_ms.size() == got.generated_ids.size());
        REQUIRE(got.logprobs.size() == want.logprobs.size());
        for (size_t k = 0; k < got.logprobs.size(); ++k) {
            CHECK(got.logprobs[k].chosen.logprob == want.logprobs[k].chosen.logprob);
            CHECK(got.logprobs[k].top.size() == want.logprobs[k].top.size());
        }
    }
    return stats;
}

// The grid of randomized workloads the engine tests of the CPU backends run, each checked as
// above: block sizes 1, 16 and odd (5) x budgets of 7, 64 and 512 tokens per step (the small ones
// force chunked prefill) x a pool of 120 positions (forces preemption: one request needs at most
// 48 + 12 + 24 = 84) or 1024 x prefix caching on and off; chunked prefill on, but off for the
// 512-token budget's odd seeds; 36 workloads, seeds first_seed, first_seed + 1, ... Then checks that between them they preempted, chunked, hit the prefix cache
// and batched 4 requests. Returns what they showed, summed.
inline WorkloadStats check_workload_grid(glass::serve::PagedBackend& backend, glass::serve::PagedBackend& alone,
                                         const glass::Tokenizer& tok, unsigned first_seed) {
    const glass::ModelConfig& c = backend.config();
    WorkloadStats total;
    unsigned seed = first_seed;
    for (const int block : {1, 16, 5})
        for (const int budget : {7, 64, 512})
            for (const bool small_pool : {true, false})
                for (const bool prefix : {true, false}) {
                    const int pool_positions = small_pool ? 120 : 1024;
                    const int num_blocks = (pool_positions + block - 1) / block;
                    const bool chunked = budget != 512 || seed % 2 == 0;
                    const Workload w = random_workload(seed++, c, block, budget, num_blocks, prefix, chunked);
                    total.add(check_workload_against_alone(backend, alone, tok, w));
                }
    check_exercised(total, 4);  // the workloads did what they are meant to
    return total;
}

}  // namespace test
