// tests/cuda/test_cuda_model_speculative.cpp — CudaSession in speculative decoding (verify's rows,
// rewind, whole generations with a draft, greedy and sampled, as on the CPU) and its rules:
// positions, reset and bad input as on the CPU.
// (part of the test_cuda_model program; cuda_model_support.hpp has the shared pieces)
#include <memory>
#include <string>
#include <vector>

#include "cuda_model_support.hpp"
#include "glass/speculative.hpp"

using namespace cuda_model_test;


TEST_CASE("speculative decoding: verify's rows and rewind as on the CPU; greedy goldens with a draft") {
    gc::CudaSession gpu(test::shipped());
    glass::CpuSession cpu(test::shipped());
    const int vocab = gpu.config().vocab_size;
    const std::vector<int> prompt = {1, 403, 407}, chunk = {261, 378, 5, 9, 300};
    gpu.prefill(prompt);
    cpu.prefill(prompt);
    const std::span<const float> g_rows = gpu.verify(chunk);
    const std::vector<float> g(g_rows.begin(), g_rows.end());
    const std::span<const float> c = cpu.verify(chunk);
    REQUIRE(g.size() == chunk.size() * std::size_t(vocab));
    for (std::size_t i = 0; i < chunk.size(); ++i) {
        CAPTURE(i);
        CHECK(relative_error(std::span<const float>(g).subspan(i * vocab, vocab), c.subspan(i * vocab, vocab)) <= kF32);
    }
    CHECK(gpu.position() == 8);
    gpu.rewind(4);  // keep the first drafted position, as after one accepted token
    cpu.rewind(4);
    CHECK(gpu.position() == 4);
    CHECK_THROWS_WITH_AS(gpu.rewind(5), doctest::Contains("cannot rewind to position 5"), glass::Error);
    CHECK(relative_error(gpu.decode(17), cpu.decode(17)) <= kF32);

    // Whole generations: the target on the device (launched and graph-replayed decode), the draft
    // (the first 4 layers) on the CPU; greedy ids must be the goldens'.
    const glass::Model draft_model = glass::first_layers(test::shipped(), 4);
    for (const bool graph : {false, true}) {
        CAPTURE(graph);
        gc::CudaOptions options;
        options.graph = graph;
        gc::CudaSession target(test::shipped(), options);
        glass::ModelDrafter drafter(std::make_unique<glass::CpuSession>(draft_model), "layers:4");
        int records = 0;
        std::int64_t accepted = 0;
        for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
            const std::string name = rec["case"].get<std::string>();
            if (!variant_golden(name)) continue;
            CAPTURE(name);
            const glass::SpeculativeResult s = glass::generate_speculative_from_ids(
                target, drafter, test::shipped_tok(), test::ids_of(rec["prompt_ids"]), golden_run_options(rec), {4});
            CHECK(s.result.generated_ids == golden_run(rec).want);
            accepted += s.stats.accepted;
            ++records;
        }
        CHECK(records >= (kSmall ? 1 : 4));
        if (!kSmall) CHECK(accepted > 0);  // the small size's 4 tokens may keep no guess
    }

    // Sampled (T = 0.8, seeded; top-p 0.9 on every other case): the device's verify rows go
    // through the rule's coins and residual draws; the ids and every decision must be the CPU
    // target's (logits 1e-5 apart move a draw only if a coin lands that close to a boundary).
    gc::CudaSession target(test::shipped());
    glass::CpuSession cpu_target(test::shipped());
    int sampled = 0;
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        const std::string name = rec["case"].get<std::string>();
        if (!variant_golden(name)) continue;
        CAPTURE(name);
        glass::GenerateOptions o = golden_run_options(rec);
        o.sampling.temperature = 0.8f;
        o.seed = 100 + sampled;
        if (sampled++ % 2) o.sampling.top_p = 0.9f;
        glass::ModelDrafter on_gpu(std::make_unique<glass::CpuSession>(draft_model), "layers:4"),
            on_cpu(std::make_unique<glass::CpuSession>(draft_model), "layers:4");
        const glass::SpeculativeResult g = glass::generate_speculative_from_ids(
            target, on_gpu, test::shipped_tok(), test::ids_of(rec["prompt_ids"]), o, {3});
        const glass::SpeculativeResult c = glass::generate_speculative_from_ids(
            cpu_target, on_cpu, test::shipped_tok(), test::ids_of(rec["prompt_ids"]), o, {3});
        CHECK(g.result.generated_ids == c.result.generated_ids);
        CHECK(g.stats.accepted == c.stats.accepted);
        CHECK(g.stats.target_passes == c.stats.target_passes);
    }
    CHECK(sampled >= 1);
}

TEST_CASE("positions, reset and bad input behave as on the CPU") {
    gc::CudaSession gpu(test::shipped());
    const glass::ModelConfig& c = gpu.config();
    CHECK(gpu.weight_bytes() == test::shipped().weight_bytes);
    const std::vector<int> prompt = {1, 403, 407};
    gpu.prefill(prompt);
    CHECK(gpu.position() == 3);
    CHECK(gpu.kv_bytes_used() == 3 * c.kv_bytes_per_token());
    gpu.decode(261);
    CHECK(gpu.position() == 4);
    gpu.reset();
    CHECK(gpu.position() == 0);
    CHECK_THROWS_WITH_AS(gpu.decode(c.vocab_size), doctest::Contains("outside the vocabulary"), glass::Error);
    CHECK_THROWS_WITH_AS(gpu.decode(-1), doctest::Contains("outside the vocabulary"), glass::Error);
    CHECK(gpu.position() == 0);
    const std::vector<int> too_long(std::size_t(c.seq_len) + 1, 5);
    CHECK_THROWS_WITH_AS(gpu.prefill(too_long), doctest::Contains("longer than the context window"), glass::Error);
    std::vector<int> full(std::size_t(c.seq_len), 5);
    full[0] = 1;
    const std::span<const float> at_limit = gpu.prefill(full);  // exactly the window: allowed, and
    glass::CpuSession cpu(test::shipped());                       // the long naive attention runs
    CHECK(relative_error(at_limit, cpu.prefill(full)) <= kF32);
    CHECK(gpu.position() == c.seq_len);
    CHECK_THROWS_WITH_AS(gpu.decode(5), doctest::Contains("longer than the context window"), glass::Error);
}
