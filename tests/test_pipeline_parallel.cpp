// Pipeline parallelism on the CPU reference (dist/pipeline_parallel.hpp), with the ranks as threads
// of this process; tests/dist/ runs it over Open MPI processes. Stages run the same operations in
// the same order as one process, so every check here is bit for bit.
#include <doctest/doctest.h>

#include "glass/glass.hpp"
#include "test_support.hpp"

using glass::dist::Communicator;
using glass::dist::PipelineParallelSession;
using glass::dist::PipelineStage;

namespace {

struct Trace {
    std::vector<int> ids;
    std::vector<std::vector<float>> logits;
};

Trace greedy_trace(glass::Session& s, std::span<const int> prompt, int steps) {
    Trace t;
    std::span<const float> l = s.prefill(prompt);
    for (int i = 0; i < steps; ++i) {
        t.logits.emplace_back(l.begin(), l.end());
        t.ids.push_back(static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin()));
        l = s.decode(t.ids.back());
    }
    return t;
}

Trace pipeline_trace(const glass::Model& m, int pp, std::span<const int> prompt, int steps) {
    Trace t;
    glass::dist::run_ranks(pp, [&](Communicator& comm) {
        PipelineParallelSession s(m, comm);
        if (comm.rank() != 0) {
            s.follow();
            return;
        }
        t = greedy_trace(s, prompt, steps);
        s.finish();
    });
    return t;
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
    bool first = true;
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        if (g["temperature"].get<double>() != 0.0) continue;
        const std::vector<int> prompt = test::ids_of(g["prompt_ids"]);
        const std::vector<int> expected = test::ids_of(g["generated_ids"]);
        const int steps = static_cast<int>(expected.size());
        INFO("golden " << g["case"]);
        CHECK(pipeline_trace(m, 2, prompt, steps).ids == expected);
        if (!first) continue;
        first = false;
        glass::CpuSession one(m);
        const Trace reference = greedy_trace(one, prompt, steps);
        for (const int pp : {2, 3, 5}) {
            INFO("pp " << pp);
            CHECK(pipeline_trace(m, pp, prompt, steps).logits == reference.logits);
        }
    }
    CHECK_FALSE(first);
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
