/// \file
/// \brief glass/serve/engine_state.hpp — the engine's recent past, step by step and block by block, for the live page (GET /v1/engine/state).
/// ```text
/// The engine thread (engine_thread.hpp) keeps an EngineState after each step; HTTP handlers
/// read a copy taken under a mutex (so a reader never sees half an update):
///
///   recent_steps     the last kRecentSteps steps: who decoded, who prefilled which chunk
///                    [start, start + n), who waited, who was preempted, who finished
///   blocks           the block pool block by block: ref count, owners, cached
///   live             the requests in the engine, running first, then waiting
///   recent_finished  the last kRecentFinished finished requests, with outcome, TTFT and TPOT
///
/// engine_state_json() makes the JSON of GET /v1/engine/state, which the live page (GET /) polls.
/// ```
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/serve/block_manager.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/outcome.hpp"
#include "glass/serve/request.hpp"
#include "glass/serve/scheduler.hpp"

namespace glass::serve {

inline constexpr size_t kRecentSteps = 64;     ///< steps the live view keeps
inline constexpr size_t kRecentFinished = 32;  ///< finished requests it keeps

/// One step's batch, from its StepReport.
struct StepRecord {
    struct Chunk {
        int id;     ///< engine request id
        int start;  ///< first position computed
        int n;      ///< positions computed: [start, start + n)
    };
    std::uint64_t step = 0;      ///< 1 for the server's first step
    std::vector<int> decode;     ///< ids that computed their one sampled token
    std::vector<Chunk> prefill;  ///< prompt chunks (or recomputation after a preemption)
    std::vector<int> waiting;    ///< ids still waiting after the step
    std::vector<int> preempted;  ///< ids sent back to the queue this step
    std::vector<int> finished;   ///< ids that finished this step
};

inline StepRecord step_record(const StepReport& report, std::uint64_t step) {
    StepRecord s;
    s.step = step;
    for (const StepReport::Part& p : report.batch) {
        if (p.prefill) s.prefill.push_back({.id = p.id, .start = p.start, .n = p.n});
        else s.decode.push_back(p.id);
    }
    s.waiting = report.waiting;
    s.preempted = report.preempted;
    s.finished = report.finished;
    return s;
}

/// One block of the pool.
struct BlockRecord {
    int ref_count = 0;        ///< requests holding it; 2 or more: a prefix shared through the cache
    bool cached = false;      ///< holds a hashed full block a later request can hit
    std::vector<int> owners;  ///< engine ids of the requests whose block table holds it
};

/// A request in the engine: waiting or running.
struct LiveRecord {
    int id = 0;
    std::string name;         ///< the HTTP response id (cmpl-3, chatcmpl-4), if it came over HTTP
    std::string status;       ///< "waiting" or "running"
    int prompt_tokens = 0;
    int generated = 0;
    int computed = 0;         ///< positions with K/V in the pool
    int cached_tokens = 0;
    int blocks = 0;           ///< length of its block table
};

/// A finished request.
struct FinishedRecord {
    int id = 0;
    std::string name;
    Outcome outcome = Outcome::stop;
    int prompt_tokens = 0;
    int cached_tokens = 0;
    int generated_tokens = 0;
    double ttft_ms = 0;
    double tpot_ms = 0;
    int preemptions = 0;
};

struct EngineState {
    std::uint64_t steps = 0;               ///< steps so far (the newest record's step)
    int block_size = 0;
    std::deque<StepRecord> recent_steps;   ///< oldest first, at most kRecentSteps
    std::vector<BlockRecord> blocks;       ///< [num_blocks]
    std::vector<LiveRecord> live;          ///< running first, then waiting
    std::deque<FinishedRecord> recent_finished;  ///< oldest first, at most kRecentFinished
};

/// The pool block by block: ref counts and cache flags from the block manager, owners from the
/// block tables of the live requests.
inline std::vector<BlockRecord> block_records(const BlockManager& blocks, const Scheduler& scheduler) {
    std::vector<BlockRecord> out(static_cast<size_t>(blocks.num_blocks()));
    for (int b = 0; b < blocks.num_blocks(); ++b) {
        out[static_cast<size_t>(b)].ref_count = blocks.block(b).ref_count;
        out[static_cast<size_t>(b)].cached = blocks.block(b).cached;
    }
    const auto add_owner = [&](const Request* r) {
        for (int b : r->block_table) out[static_cast<size_t>(b)].owners.push_back(r->id);
    };
    for (const Request* r : scheduler.running()) add_owner(r);
    for (const Request* r : scheduler.waiting()) add_owner(r);  // empty tables, unless a scheduler keeps them
    return out;
}

inline LiveRecord live_record(const Request& r, const std::string& name) {
    return {.id = r.id,
            .name = name,
            .status = to_string(r.status),
            .prompt_tokens = static_cast<int>(r.prompt_ids.size()),
            .generated = r.generated(),
            .computed = r.computed,
            .cached_tokens = r.cached_tokens,
            .blocks = static_cast<int>(r.block_table.size())};
}

inline FinishedRecord finished_record(const RequestResult& r, const std::string& name, Outcome outcome) {
    return {.id = r.id,
            .name = name,
            .outcome = outcome,
            .prompt_tokens = static_cast<int>(r.prompt_ids.size()),
            .cached_tokens = r.cached_tokens,
            .generated_tokens = static_cast<int>(r.generated_ids.size()),
            .ttft_ms = r.metrics.ttft_ms,
            .tpot_ms = r.metrics.tpot_ms,
            .preemptions = r.preemptions};
}

/// The JSON of GET /v1/engine/state (documented in docs/DESIGN.md):
///
/// ```text
/// {"steps": 812, "block_size": 16, "num_blocks": 128,
///  "recent_steps": [{"step": 811, "decode": [3, 4], "prefill": [{"id": 5, "start": 0, "n": 16}],
///                    "waiting": [6], "preempted": [], "finished": [3]}, ...],      oldest first
///  "blocks": [{"ref_count": 2, "cached": true, "owners": [4, 5]}, ...],          one per block
///  "live": [{"id": 4, "name": "cmpl-4", "status": "running", "prompt_tokens": 40, "generated": 7,
///            "computed": 46, "cached_tokens": 32, "blocks": 3}, ...],
///  "recent_finished": [{"id": 3, "name": "cmpl-3", "outcome": "stop", "prompt_tokens": 5,
///                       "cached_tokens": 0, "generated_tokens": 41, "ttft_ms": 2.1,
///                       "tpot_ms": 0.4, "preemptions": 0}, ...]}                  oldest first
/// ```
inline nlohmann::json engine_state_json(const EngineState& s) {
    using json = nlohmann::json;
    json steps = json::array();
    for (const StepRecord& r : s.recent_steps) {
        json prefill = json::array();
        for (const StepRecord::Chunk& c : r.prefill) prefill.push_back({{"id", c.id}, {"start", c.start}, {"n", c.n}});
        steps.push_back({{"step", r.step}, {"decode", r.decode}, {"prefill", prefill}, {"waiting", r.waiting},
                         {"preempted", r.preempted}, {"finished", r.finished}});
    }
    json blocks = json::array();
    for (const BlockRecord& b : s.blocks)
        blocks.push_back({{"ref_count", b.ref_count}, {"cached", b.cached}, {"owners", b.owners}});
    json live = json::array();
    for (const LiveRecord& r : s.live)
        live.push_back({{"id", r.id}, {"name", r.name}, {"status", r.status}, {"prompt_tokens", r.prompt_tokens},
                        {"generated", r.generated}, {"computed", r.computed}, {"cached_tokens", r.cached_tokens},
                        {"blocks", r.blocks}});
    json finished = json::array();
    for (const FinishedRecord& r : s.recent_finished)
        finished.push_back({{"id", r.id}, {"name", r.name}, {"outcome", to_string(r.outcome)},
                            {"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens},
                            {"generated_tokens", r.generated_tokens}, {"ttft_ms", r.ttft_ms}, {"tpot_ms", r.tpot_ms},
                            {"preemptions", r.preemptions}});
    return {{"steps", s.steps},
            {"block_size", s.block_size},
            {"num_blocks", s.blocks.size()},
            {"recent_steps", steps},
            {"blocks", blocks},
            {"live", live},
            {"recent_finished", finished}};
}

}  // namespace glass::serve
