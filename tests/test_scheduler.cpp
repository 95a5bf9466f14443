// The scheduler (serve/scheduler.hpp) stepped by hand: exact batches under a token budget,
// chunked prefill and its absence, continuous batching (join and leave between steps), and
// preemption of the newest request when blocks run out.
#include <memory>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace test_scheduler {  // this file's own names (tests are built in unity batches)

using glass::serve::BlockManager;
using glass::serve::Request;
using glass::serve::Scheduler;
using glass::serve::SchedulerOptions;
using glass::serve::StepPlan;

namespace {

struct Harness {
    BlockManager blocks;
    Scheduler scheduler;
    glass::GenerateOptions options;
    std::vector<std::unique_ptr<Request>> requests;

    Harness(int num_blocks, int block_size, SchedulerOptions o)
        : blocks(num_blocks, block_size, false), scheduler(blocks, o) {}

    Request* add(int prompt_tokens) {
        std::vector<int> prompt(static_cast<size_t>(prompt_tokens), 7);
        const int id = static_cast<int>(requests.size());
        requests.push_back(std::make_unique<Request>(id, prompt, options, 7, test::shipped_tok()));
        scheduler.add(requests.back().get());
        return requests.back().get();
    }

    // Plans a step and plays the engine's part: the planned positions now have K/V, and a
    // request whose last token was computed "samples" one more token.
    std::string step() {
        const StepPlan plan = scheduler.schedule();
        std::string out;
        for (int id : plan.preempted) out += "preempt " + std::to_string(id) + "; ";
        for (const glass::serve::ScheduledChunk& c : plan.chunks) {
            out += std::to_string(c.request->id) + ":" + std::to_string(c.start) + "+" + std::to_string(c.n) + " ";
            c.request->computed += c.n;
            if (c.request->computed == static_cast<int>(c.request->tokens.size())) c.request->tokens.push_back(9);
        }
        return out;
    }

    void finish(Request* r) { scheduler.remove(r); }
};

SchedulerOptions budget(int tokens, bool chunked = true, int max_running = 64) {
    SchedulerOptions o;
    o.max_tokens_per_step = tokens;
    o.chunked_prefill = chunked;
    o.max_running = max_running;
    return o;
}

}  // namespace

TEST_CASE("chunked prefill: a prompt longer than the budget is cut; decodes go first, then new prompts") {
    Harness h(64, 4, budget(8));
    h.add(10);
    h.add(5);
    CHECK(h.step() == "0:0+8 ");            // request 0's first chunk fills the budget
    CHECK(h.step() == "0:8+2 1:0+5 ");      // the rest of it, then request 1 joins
    CHECK(h.step() == "0:10+1 1:5+1 ");     // both decoding
    h.add(20);
    CHECK(h.step() == "0:11+1 1:6+1 2:0+6 ");  // a new prompt joins, cut to what is left
    CHECK(h.step() == "0:12+1 1:7+1 2:6+6 ");
    h.finish(h.requests[0].get());          // one leaves between steps
    CHECK(h.step() == "1:8+1 2:12+7 ");
    CHECK(h.step() == "1:9+1 2:19+1 ");
}

TEST_CASE("without chunked prefill a prompt is taken whole: if it fits, or if it is the first to join this step") {
    Harness h(64, 4, budget(8, false));
    h.add(3);
    h.add(6);   // does not fit after request 0 (3 + 6 > 8): waits
    h.add(20);  // longer than the whole budget
    CHECK(h.step() == "0:0+3 ");
    CHECK(h.step() == "0:3+1 1:0+6 ");       // 1 + 6 <= 8
    CHECK(h.step() == "0:4+1 1:6+1 2:0+20 "); // first to join this step: taken whole, over budget
    CHECK(h.step() == "0:5+1 1:7+1 2:20+1 ");
}

TEST_CASE("when blocks run out the newest running request is preempted, goes to the front, and is recomputed") {
    // 6 blocks of 2 positions. Requests of 3 and 3 tokens take 2 blocks each; a third of 3
    // takes the last 2.
    Harness h(6, 2, budget(64));
    h.add(3);
    h.add(3);
    h.add(3);
    CHECK(h.step() == "0:0+3 1:0+3 2:0+3 ");
    CHECK(h.blocks.num_free() == 0);
    // Each now has 4 tokens (3 + 1 sampled); computing position 3 fits in their second block.
    CHECK(h.step() == "0:3+1 1:3+1 2:3+1 ");
    // Position 4 needs a third block for each, and none is free: request 0 preempts the newest,
    // request 2, whose two blocks then serve requests 0 and 1.
    const std::string s = h.step();
    CHECK(s == "preempt 2; 0:4+1 1:4+1 ");
    CHECK(h.requests[2]->status == glass::serve::RequestStatus::waiting);
    CHECK(h.requests[2]->computed == 0);
    CHECK(h.requests[2]->preemptions == 1);
    CHECK(h.requests[2]->block_table.empty());
    CHECK(h.scheduler.waiting().front() == h.requests[2].get());
    // Request 1 finishes: request 2 comes back and recomputes its 5 tokens (prompt + 2 sampled).
    h.finish(h.requests[1].get());
    CHECK(h.step() == "0:5+1 2:0+5 ");
}

TEST_CASE("a step that preempts admits no one; max_running caps the batch") {
    Harness h(4, 2, budget(64, true, 2));
    h.add(3);
    h.add(3);
    h.add(1);
    CHECK(h.step() == "0:0+3 1:0+3 ");  // max_running 2: request 2 waits
    CHECK(h.step() == "0:3+1 1:3+1 ");
    CHECK(h.step() == "preempt 1; 0:4+1 ");  // no room for both third blocks; no admission this step
    CHECK(h.scheduler.waiting().size() == 2);
    CHECK(h.scheduler.waiting().front()->id == 1);
}

TEST_CASE("remote prefill: admission reserves blocks for every token and takes no budget; steps skip a request until its rows arrive") {
    SchedulerOptions o = budget(8);
    o.remote_prefill = true;
    Harness h(8, 4, o);
    Request* a = h.add(10);  // 3 blocks
    Request* b = h.add(5);   // 2 blocks: 10 + 5 tokens, more than the budget of 8, admitted at once
    StepPlan plan = h.scheduler.schedule();
    CHECK(plan.chunks.empty());  // nothing computed here
    REQUIRE(plan.remote.size() == 2);
    CHECK(plan.remote[0].request == a);
    CHECK(plan.remote[0].start == 0);
    CHECK(plan.remote[0].n == 10);
    CHECK(plan.remote[1].n == 5);
    CHECK(a->block_table == std::vector<int>{0, 1, 2});
    CHECK(b->block_table == std::vector<int>{3, 4});
    CHECK(a->awaiting_kv);
    CHECK(b->awaiting_kv);
    CHECK(h.step().empty());  // still away: no chunk, no new blocks
    CHECK(h.blocks.num_free() == 3);
    // a's rows arrive (the engine's part: computed = its tokens, one token sampled); it decodes.
    a->awaiting_kv = false;
    a->computed = 10;
    a->tokens.push_back(9);
    CHECK(h.step() == "0:10+1 ");
    // c arrives and takes the last 3 blocks (its 12 tokens, all away). Then a's position 12 needs
    // a fourth block and none is free: the newest running request, c, is preempted while its
    // prompt is away (its shipment will be dropped: awaiting_kv is off, its blocks are gone).
    Request* c = h.add(12);
    CHECK(h.step() == "0:11+1 ");
    CHECK(c->block_table == std::vector<int>{5, 6, 7});
    CHECK(h.blocks.num_free() == 0);
    CHECK(h.step() == "preempt 2; 0:12+1 ");
    CHECK_FALSE(c->awaiting_kv);
    CHECK(c->block_table.empty());
    CHECK(h.scheduler.waiting().front() == c);
    CHECK(b->awaiting_kv);  // b is still away, its blocks kept
    CHECK(b->block_table == std::vector<int>{3, 4});
}

TEST_CASE("bad scheduler options are refused") {
    BlockManager bm(4, 2);
    CHECK_THROWS_WITH_AS(Scheduler(bm, budget(0)), doctest::Contains("got 0"), glass::Error);
    CHECK_THROWS_WITH_AS(Scheduler(bm, budget(8, true, 0)), doctest::Contains("got 0"), glass::Error);
}

}  // namespace test_scheduler
