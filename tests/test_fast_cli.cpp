// glass generate's fast-path flags (--threads, --precision, --kv, --activations): the ids the CLI
// prints against the goldens and against sessions built here with the same options.
#include "fast_cpu_support.hpp"

namespace test_fast_cli {  // this file's own names (tests are built in unity batches)

TEST_CASE("glass generate --threads/--precision runs the fast path and matches the goldens") {
    const auto golden = test::read_jsonl(test::golden("stories260K_greedy.jsonl")).at(1);  // once_upon_n64
    REQUIRE(golden["case"] == "once_upon_n64");
    const std::string base = test::bin_dir() + "/glass generate --temperature 0 -n 64 --json -p " +
                             test::sh(golden["prompt"].get<std::string>());
    for (const char* flags : {" --threads 2", " --threads 1 --precision fp16"}) {
        CAPTURE(flags);
        const test::Run r = test::run(base + flags);
        REQUIRE(r.exit_code == 0);
        const std::string last = r.out.substr(r.out.rfind('{'));
        CHECK(nlohmann::json::parse(last)["generated_ids"] == golden["generated_ids"]);
    }
    const test::Run bad = test::run(base + " --threads 0");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("0") != std::string::npos);
    const test::Run bad_precision = test::run(base + " --precision q3");
    CHECK(bad_precision.exit_code == 2);
    CHECK(bad_precision.err.find("q3") != std::string::npos);
    // q4 runs the fast path's 4-bit weights: the same ids as the fast session built here.
    const test::Run q4 = test::run(base + " --threads 1 --precision q4");
    REQUIRE(q4.exit_code == 0);
    FastCpuSession session(test::shipped(), {.threads = 1, .weights = WeightType::q4_0});
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = static_cast<int>(golden["generated_ids"].size());
    const auto want = glass::generate(session, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    CHECK(nlohmann::json::parse(q4.out.substr(q4.out.rfind('{')))["generated_ids"] == want.generated_ids);
    // --kv int8: the reference and the fast path give the ids of a CpuSession with an int8 cache.
    glass::CpuSession int8(test::shipped(), glass::KvType::int8);
    const auto want_int8 = glass::generate(int8, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    for (const char* flags : {" --kv int8", " --kv int8 --threads 2"}) {
        CAPTURE(flags);
        const test::Run r = test::run(base + flags);
        REQUIRE(r.exit_code == 0);
        CHECK(nlohmann::json::parse(r.out.substr(r.out.rfind('{')))["generated_ids"] == want_int8.generated_ids);
    }
    // --activations int8: the ids of a q4 session with int8 activations built here.
    glass::fast::FastOptions int8_x{.threads = 1, .weights = WeightType::q4_0};
    int8_x.int8_activations = true;
    FastCpuSession int8_x_session(test::shipped(), int8_x);
    const auto want_int8_x = glass::generate(int8_x_session, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    const test::Run q4_int8_x = test::run(base + " --threads 1 --precision q4 --activations int8");
    REQUIRE(q4_int8_x.exit_code == 0);
    CHECK(nlohmann::json::parse(q4_int8_x.out.substr(q4_int8_x.out.rfind('{')))["generated_ids"] == want_int8_x.generated_ids);
    const test::Run bad_kv = test::run(base + " --kv int4");
    CHECK(bad_kv.exit_code == 2);
    CHECK(bad_kv.err.find("--kv must be fp32 or int8, got 'int4'") != std::string::npos);
}

}  // namespace test_fast_cli
