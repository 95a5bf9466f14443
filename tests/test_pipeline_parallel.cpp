// Pipeline parallelism on the CPU reference (dist/pipeline_parallel.hpp, dist/parallel_session.hpp),
// alone and with a tensor-parallel group per stage, the ranks as threads of this process;
// tests/dist/ runs it over Open MPI processes. Stages run the same operations in the same order
// as one process (or as tp ranks alone), so every check here is bit for bit.
#include <doctest/doctest.h>

#include "glass/glass.hpp"
#include "parallel_support.hpp"
#include "test_support.hpp"

namespace test_pipeline_parallel {  // this file's own names (tests are built in unity batches)

using glass::dist::Communicator;
using glass::dist::PipelineParallelSession;
using glass::dist::PipelineStage;

using test::greedy_trace;
using test::grid_trace;
using test::Trace;

namespace {

Trace pipeline_trace(const glass::Model& m, int pp, std::span<const int> prompt, int steps) {
    return grid_trace(m, {.tp = 1, .pp = pp}, prompt, steps);
}

}  // namespace

TEST_CASE("pipeline_stage: layers dealt out in order, the first stages one more; too many ranks refused") {
    const glass::ModelConfig c = test::shipped().config;  // 5 layers
    const PipelineStage a = glass::dist::pipeline_stage(c, 0, 2), b = glass::dist::pipeline_stage(c, 1, 2);
    CHECK(a.first_layer == 0);
    CHECK(a.layers == 3);
    CHECK(b.first_layer == 3);
    CHECK(b.layers == 2);
    CHECK(b.is_last());
    int next = 0;
    for (int r = 0; r < 3; ++r) {  // 2, 2, 1
        const PipelineStage s = glass::dist::pipeline_stage(c, r, 3);
        CHECK(s.first_layer == next);
        CHECK(s.layers == (r < 2 ? 2 : 1));
        next += s.layers;
    }
    CHECK(next == c.n_layers);
    CHECK_THROWS_WITH_AS(glass::dist::pipeline_stage(c, 0, 6), doctest::Contains("the model has 5"), glass::Error);
}

TEST_CASE("pp 2, 3 and 5 on the shipped model: one process's logits bit for bit, the greedy goldens' ids") {
    const glass::Model& m = test::shipped();
    const std::vector<test::GreedyGolden> goldens = test::greedy_goldens();
    REQUIRE(goldens.size() >= 30);
    for (const test::GreedyGolden& g : goldens) {
        INFO("golden " << g.name);
        CHECK(pipeline_trace(m, 2, g.prompt, g.steps()).ids == g.expected);
    }
    glass::CpuSession one(m);
    const Trace reference = greedy_trace(one, goldens[0].prompt, goldens[0].steps());
    for (const int pp : {2, 3, 5}) {
        INFO("pp " << pp);
        CHECK(pipeline_trace(m, pp, goldens[0].prompt, goldens[0].steps()).logits == reference.logits);
    }
}

TEST_CASE("every family on 2 and 3 stages: layer-numbered windows and RoPE bases stay right, bit for bit") {
    const std::vector<int> prompt = {1, 5, 17, 33, 60, 2, 71, 90, 11, 42};
    for (const char* family : {"llama2", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"}) {
        const glass::Model m = glass::fast::random_family_model(glass::fast::small_family_config(family), 7);
        glass::CpuSession one(m);
        const Trace reference = greedy_trace(one, prompt, 12);
        for (const int pp : {2, 3}) {
            if (pp > m.config.n_layers) continue;
            INFO(family << ", pp " << pp);
            CHECK(pipeline_trace(m, pp, prompt, 12).logits == reference.logits);
        }
    }
}

TEST_CASE("pp 2: verify, rewind and reset as one process does; each stage holds only its layers' K/V") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    glass::CpuSession one(m);  // the same steps: K/V rows 0 and 1 come from the 5-row prefill
    one.prefill(prompt);
    one.rewind(2);
    const std::span<const float> all = one.verify(std::span(prompt).subspan(2));
    const std::vector<float> expected(all.begin(), all.end());
    std::vector<float> got;
    std::vector<std::int64_t> kv_bytes(2);
    glass::dist::run_ranks(2, [&](Communicator& comm) {
        PipelineParallelSession s(m, comm);
        if (comm.rank() != 0) {
            s.follow();
            kv_bytes[1] = s.kv_bytes_used();
            return;
        }
        s.prefill(prompt);
        s.rewind(2);
        const std::span<const float> v = s.verify(std::span(prompt).subspan(2));
        got.assign(v.begin(), v.end());
        kv_bytes[0] = s.kv_bytes_used();
        s.reset();
        CHECK(s.position() == 0);
        s.finish();
    });
    CHECK(got == expected);
    // rank 0 counted after the verify: 5 positions × its 3 layers × K and V; rank 1 after the reset.
    CHECK(kv_bytes[0] == 5 * 3 * 2 * m.config.kv_dim() * 4);
    CHECK(kv_bytes[1] == 0);
}

TEST_CASE("tp 2 × pp 2 on 4 ranks: tp 2's logits bit for bit (the same shards, the same sums), the golden's ids") {
    const glass::Model& m = test::shipped();
    const test::GreedyGolden g = test::greedy_goldens().at(0);
    const std::vector<int>& prompt = g.prompt;
    const std::vector<int>& expected = g.expected;
    const int steps = g.steps();
    const Trace grid = grid_trace(m, {.tp = 2, .pp = 2}, prompt, steps);
    CHECK(grid.ids == expected);
    CHECK(grid.logits == grid_trace(m, {.tp = 2, .pp = 1}, prompt, steps).logits);
    const std::vector<int> small = {1, 5, 17, 33, 60, 2, 71};  // inside the family models' 96 ids
    for (const char* family : {"qwen3", "gemma3"}) {
        INFO(family);
        const glass::Model f = glass::fast::random_family_model(glass::fast::small_family_config(family), 5);
        CHECK(grid_trace(f, {.tp = 2, .pp = 2}, small, 10).logits == grid_trace(f, {.tp = 2, .pp = 1}, small, 10).logits);
    }
}

TEST_CASE("the grid's places: rank r at stage r / tp, tensor rank r mod tp; a grid the group does not fill is refused") {
    const glass::ModelConfig c = test::shipped().config;
    const glass::dist::RankPlace p = glass::dist::rank_place(c, {.tp = 2, .pp = 2}, 3, 4);
    CHECK(p.stage.rank == 1);
    CHECK(p.stage.first_layer == 3);
    CHECK(p.split.rank == 1);
    CHECK(p.split.head_begin == 4);
    CHECK(glass::dist::stage_members({.tp = 2, .pp = 2}, 1) == std::vector<int>{2, 3});
    CHECK_THROWS_WITH_AS(glass::dist::rank_place(c, {.tp = 2, .pp = 2}, 0, 3), doctest::Contains("needs 4 ranks"),
                         glass::Error);
    // Each rank of the grid holds about a quarter of the layers' weights.
    std::vector<std::int64_t> bytes(4);
    glass::dist::run_ranks(4, [&](Communicator& comm) {
        glass::dist::ParallelSession s(test::shipped(), comm, {.tp = 2, .pp = 2});
        bytes[static_cast<size_t>(comm.rank())] = s.weight_bytes();
        if (comm.rank() == 0) s.finish();
        else s.follow();
    });
    const std::int64_t sum = bytes[0] + bytes[1] + bytes[2] + bytes[3];
    CHECK(sum >= test::shipped().weight_bytes);            // the norms are copied to every rank
    CHECK(sum < test::shipped().weight_bytes * 11 / 10);
}

TEST_CASE("rank memory on a session: one rank over the cap is refused naming its bytes; tp 2 under it keeps the golden") {
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;
    // What one rank of tp 1 holds: the weights a position reads, the embedding table, and the
    // fp32 K and V of every layer for the whole context window (the reference's KVCache).
    const std::int64_t weights = m.weight_bytes + std::int64_t{4} * c.vocab_size * c.dim;
    const std::int64_t cache = 2 * std::int64_t{c.n_layers} * c.seq_len * c.kv_dim() * 4;
    const std::int64_t cap = (weights + cache) * 3 / 4;
    const test::GreedyGolden g = test::greedy_goldens()[0];
    const std::string refusal = "would hold " + std::to_string(weights) + " bytes of weights + " + std::to_string(cache) +
                                " bytes of KV cache, more than its memory of " + std::to_string(cap) + " bytes";
    CHECK_THROWS_WITH_AS(grid_trace(m, {.tp = 1, .pp = 1}, g.prompt, 2, {.rank_memory = cap}),
                         doctest::Contains(refusal.c_str()), glass::Error);
    CHECK(grid_trace(m, {.tp = 1, .pp = 1}, g.prompt, g.steps(), {.rank_memory = weights + cache}).ids == g.expected);  // exactly full
    // Two ranks each hold about half: the same cap admits them, and the ids are llama2.c's.
    CHECK(grid_trace(m, {.tp = 2, .pp = 1}, g.prompt, g.steps(), {.rank_memory = cap}).ids == g.expected);
    CHECK_THROWS_WITH_AS(grid_trace(m, {.tp = 2, .pp = 1}, g.prompt, 2, {.rank_memory = cap / 4}),
                         doctest::Contains("(--rank-memory); split over more ranks"), glass::Error);
}

}  // namespace test_pipeline_parallel
