// The serving engine (serve/engine.hpp) on the CPU reference backend: any workload, any
// interleaving, gives every request exactly what it gets alone; the pool stays consistent and
// comes back whole; the goldens of llama2.c come out of a batch of 36; refusals and cancels.
#include <algorithm>
#include <numeric>
#include <set>

#include "serve_workloads.hpp"
#include "test_support.hpp"

namespace test_engine {  // this file's own names (tests are built in unity batches)

using glass::serve::CpuPagedBackend;
using glass::serve::Engine;
using glass::serve::EngineOptions;

namespace {

glass::GenerateOptions greedy(int max_new) {
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = max_new;
    return o;
}

}  // namespace

TEST_CASE("randomized workloads: each request's tokens equal the request run alone (CPU reference)") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m), alone(m);
    test::check_workload_grid(backend, alone, test::shipped_tok(), /*first_seed=*/1);
}

TEST_CASE("all 36 greedy goldens and the seeded sampling goldens of llama2.c, batched in one engine") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m);
    EngineOptions eo;
    eo.num_blocks = 36 * 32;  // room for everyone at once: 36 requests x 512 positions / 16
    eo.scheduler.max_running = 64;
    Engine engine(backend, test::shipped_tok(), eo);
    std::vector<nlohmann::json> goldens = test::read_jsonl(test::golden("stories260K_greedy.jsonl"));
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_sampling.jsonl"))) goldens.push_back(g);
    for (const nlohmann::json& g : goldens) {
        glass::GenerateOptions o = test::golden_options(g);
        const int id = engine.add_request(g["prompt"].get<std::string>(), o);
        CHECK(id == static_cast<int>(&g - goldens.data()));
    }
    const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
    REQUIRE(results.size() == goldens.size());
    for (size_t i = 0; i < goldens.size(); ++i) {
        INFO("golden " << goldens[i]["prompt"] << " steps " << goldens[i]["steps"] << " T " << goldens[i]["temperature"]);
        CHECK(results[i].prompt_ids == test::ids_of(goldens[i]["prompt_ids"]));
        CHECK(results[i].generated_ids == test::ids_of(goldens[i]["generated_ids"]));
    }
}

TEST_CASE("prefix caching: a repeated prompt reuses floor((n - 1) / block) blocks, and the output is unchanged") {
    const glass::Model& m = test::shipped();
    const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside";
    const int n = static_cast<int>(test::shipped_tok().encode(prompt, true, false).size());
    for (const int block : {1, 4, 16}) {
        INFO("block size " << block);
        CpuPagedBackend backend(m);
        EngineOptions eo;
        eo.block_size = block;
        Engine engine(backend, test::shipped_tok(), eo);
        engine.add_request(prompt, greedy(10));
        const glass::serve::RequestResult first = engine.run_to_completion().at(0);
        engine.add_request(prompt, greedy(10));
        const glass::serve::RequestResult second = engine.run_to_completion().at(0);
        CHECK(first.cached_tokens == 0);
        CHECK(second.cached_tokens == (n - 1) / block * block);
        CHECK(second.generated_ids == first.generated_ids);
    }
}

TEST_CASE("a chat turn re-sends the history: the next turn hits the blocks of the previous prompt AND reply") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m);
    EngineOptions eo;
    eo.block_size = 4;
    Engine engine(backend, test::shipped_tok(), eo);
    const glass::Tokenizer& tok = test::shipped_tok();
    std::vector<int> history = tok.encode("Once upon a time", true, false);
    engine.add_request_ids(history, greedy(20));
    const glass::serve::RequestResult turn1 = engine.run_to_completion().at(0);
    // Turn 2: everything so far (prompt + reply; the reply's last token has no K/V yet) + more.
    history.insert(history.end(), turn1.generated_ids.begin(), turn1.generated_ids.end());
    const std::vector<int> more = tok.encode(" The end", false, false);
    history.insert(history.end(), more.begin(), more.end());
    engine.add_request_ids(history, greedy(5));
    const glass::serve::RequestResult turn2 = engine.run_to_completion().at(0);
    // Cached: every full block of turn 1's computed positions (its prompt + all but its last token).
    const int computed_turn1 = static_cast<int>(turn1.prompt_ids.size() + turn1.generated_ids.size()) - 1;
    CHECK(turn2.cached_tokens == std::min(computed_turn1 / 4 * 4, (static_cast<int>(history.size()) - 1) / 4 * 4));
    CHECK(turn2.cached_tokens > static_cast<int>(turn1.prompt_ids.size()));
}

TEST_CASE("requests that can never run are refused with the offending value; the others go on") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m);
    EngineOptions eo;
    eo.block_size = 16;
    eo.num_blocks = 8;  // 128 positions
    Engine engine(backend, test::shipped_tok(), eo);
    const int ok = engine.add_request("Once upon a time", greedy(8));
    CHECK_THROWS_WITH_AS(engine.add_request_ids(std::vector<int>(600, 5), greedy(4)),
                         doctest::Contains("prompt of 600 tokens is longer than the context window of 512"), glass::Error);
    CHECK_THROWS_WITH_AS(engine.add_request_ids(std::vector<int>(200, 5), greedy(4)),
                         doctest::Contains("prompt of 200 tokens does not fit the KV pool of 8 blocks of 16"), glass::Error);
    CHECK_THROWS_WITH_AS(engine.add_request_ids({1, 512}, greedy(4)), doctest::Contains("token id 512"), glass::Error);
    CHECK_THROWS_WITH_AS(engine.add_request_ids({}, greedy(4)), doctest::Contains("at least one prompt token"), glass::Error);
    glass::GenerateOptions bad = greedy(4);
    bad.sampling.top_p = 1.5f;
    CHECK_THROWS_WITH_AS(engine.add_request("x", bad), doctest::Contains("1.5"), glass::Error);
    bad = greedy(4);
    bad.top_logprobs = 21;
    CHECK_THROWS_WITH_AS(engine.add_request("x", bad), doctest::Contains("21"), glass::Error);
    const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
    REQUIRE(results.size() == 1);
    CHECK(results[0].id == ok);
    CHECK(results[0].generated_ids.size() == 8);
    // A request longer than the pool stops like a full context, at the pool's size.
    glass::GenerateOptions long_run = greedy(100);
    long_run.stop_on_bos = long_run.stop_on_eos = false;
    engine.add_request_ids(std::vector<int>(120, 5), long_run);
    const glass::serve::RequestResult full = engine.run_to_completion().at(0);
    CHECK(glass::to_string(full.stop_reason) == std::string("context_full"));
    CHECK(full.prompt_ids.size() + full.generated_ids.size() == 128 + 1);  // the last token never needs K/V
}

TEST_CASE("cancel: a waiting and a running request stop now, give their blocks back, and say so") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m);
    EngineOptions eo;
    eo.scheduler.max_running = 1;  // the second request has to wait
    Engine engine(backend, test::shipped_tok(), eo);
    const int a = engine.add_request("Once upon a time", greedy(50));
    const int b = engine.add_request("The cat", greedy(50));
    engine.step();
    engine.step();
    REQUIRE(engine.scheduler().running().size() == 1);
    REQUIRE(engine.scheduler().waiting().size() == 1);
    CHECK(engine.blocks().num_free() < engine.blocks().num_blocks());
    engine.cancel(b);  // waiting
    engine.cancel(a);  // running, after 2 tokens
    engine.cancel(a);  // twice: no-op
    engine.cancel(99);  // unknown: no-op
    CHECK_FALSE(engine.has_unfinished());
    CHECK(engine.blocks().num_free() == engine.blocks().num_blocks());
    const std::vector<glass::serve::RequestResult> results = engine.take_finished();
    REQUIRE(results.size() == 2);
    for (const glass::serve::RequestResult& r : results) CHECK(glass::to_string(r.stop_reason) == std::string("cancelled"));
    const auto ra = std::find_if(results.begin(), results.end(), [&](const auto& r) { return r.id == a; });
    REQUIRE(ra != results.end());
    CHECK(ra->generated_ids.size() == 2);
}

TEST_CASE("per-request timings: token times rise from arrival, TTFT is the first, TPOT the mean gap") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m);
    Engine engine(backend, test::shipped_tok());
    engine.add_request("Once upon a time", greedy(12));
    engine.add_request("The cat", greedy(6));
    for (const glass::serve::RequestResult& r : engine.run_to_completion()) {
        const std::vector<double>& t = r.metrics.token_ms;
        REQUIRE(t.size() == r.generated_ids.size());
        CHECK(std::is_sorted(t.begin(), t.end()));
        CHECK(t.front() > 0);
        CHECK(r.metrics.ttft_ms == t.front());
        CHECK(r.metrics.tpot_ms == doctest::Approx((t.back() - t.front()) / static_cast<double>(t.size() - 1)));
        CHECK(r.metrics.prompt_tokens == static_cast<int>(r.prompt_ids.size()));
    }
}

TEST_CASE("the reference paged forward equals CpuSession fed one token at a time, bit for bit (fp32 and int8 KV)") {
    // Batch invariance: the paged reference multiplies row by row with the same calls
    // CpuSession makes for one decoded token, so their logits are identical. With an int8 pool
    // both round each stored row the same way (kv_cache.hpp's round_kv_row_to_int8), so that
    // holds for the int8 cache too; and int8 really changes the logits.
    const glass::Model& m = test::shipped();
    const std::vector<int> ids = test::shipped_tok().encode("Lily went to the park", true, false);
    std::vector<std::vector<float>> by_type;
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        CpuPagedBackend backend(m, kv);
        glass::serve::PagedSession paged(backend, 4);
        glass::CpuSession cpu(m, kv);
        std::vector<float> cpu_logits;
        for (int id : ids) {
            const std::span<const float> l = cpu.decode(id);
            cpu_logits.assign(l.begin(), l.end());
        }
        const std::span<const float> l = paged.prefill(ids);
        CHECK(std::equal(l.begin(), l.end(), cpu_logits.begin()));
        CHECK(paged.kv_type() == kv);
        CHECK(paged.kv_bytes_used() == cpu.kv_bytes_used());
        CHECK(paged.kv_bytes_used() == static_cast<std::int64_t>(ids.size()) * glass::kv_bytes_per_token(m.config, kv));
        by_type.push_back(cpu_logits);
    }
    CHECK(by_type[0] != by_type[1]);
}

TEST_CASE("int8 KV pool: randomized workloads equal each request alone, and the metrics count int8 bytes") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend backend(m, glass::KvType::int8), alone(m, glass::KvType::int8);
    test::check_workload_grid(backend, alone, test::shipped_tok(), /*first_seed=*/7);
    Engine engine(backend, test::shipped_tok());
    engine.add_request("Once upon a time", greedy(4));
    const std::vector<glass::serve::RequestResult> done = engine.run_to_completion();
    REQUIRE(done.size() == 1);
    CHECK(done[0].metrics.kv_bytes_per_token == glass::kv_bytes_per_token(m.config, glass::KvType::int8));
    CHECK(done[0].metrics.kv_bytes_per_token == 2 * 5 * 4 * (8 + 4));  // 2 x layers x KV heads x (head_dim + a scale)
}

}  // namespace test_engine
