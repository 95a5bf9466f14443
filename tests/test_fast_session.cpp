// FastCpuSession (include/glass/fast/fast_session.hpp) against the plain reference it replaces:
// fp32 logits within 1e-5 of CpuSession's on the shipped model and on generated shapes, input
// checked before anything changes, run.c's greedy goldens on every kernel set, and GLASS_KERNELS
// choosing the set. No timing here (speed lives in bench/).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "fast_cpu_support.hpp"

namespace test_fast_session {  // this file's own names (tests are built in unity batches)

TEST_CASE("FastCpuSession fp32 equals CpuSession on the shipped model (every kernel set, 1 and 2 threads, chunked prefill)") {
    const auto& model = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (int threads : {1, 2})
        for (const std::string& set : all_sets())
            for (int chunk : {512, 4})  // 4: the 9-token prompt goes through in 3 passes
                for (bool flash : {false, true}) {  // prefill attention: score rows, or tiles (C19)
                CAPTURE(threads);
                CAPTURE(set);
                CAPTURE(chunk);
                CAPTURE(flash);
                glass::CpuSession ref(model);
                FastOptions options{.threads = threads, .weights = WeightType::fp32, .prefill_chunk = chunk, .flash_attention = flash};
                options.kernels = set;
                FastCpuSession fast(model, options);
                CHECK(std::string(fast.kernel_name()) == set);
                CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
                // hidden_dim 172 is padded to 192 rows in W1/W3's last panel: those zeros are read too.
                CHECK(fast.weight_bytes() > model.weight_bytes);
            }
}

TEST_CASE("FastCpuSession fp32 equals CpuSession on generated shapes: GQA, own classifier, long prompt") {
    glass::ModelConfig c;
    SUBCASE("grouped-query attention, nothing a multiple of 32") {
        c.dim = 96; c.hidden_dim = 200; c.n_layers = 2; c.n_heads = 6; c.n_kv_heads = 2;
        c.vocab_size = 300; c.seq_len = 80; c.shared_classifier = false;
    }
    SUBCASE("multiples of 32: the packed bytes are exactly the checkpoint's") {
        c.dim = 64; c.hidden_dim = 128; c.n_layers = 3; c.n_heads = 4; c.n_kv_heads = 4;
        c.vocab_size = 96; c.seq_len = 80; c.shared_classifier = true;
    }
    c.head_dim = c.dim / c.n_heads;
    const glass::Model model = glass::fast::random_model_in_memory(c, 7);
    std::vector<int> prompt;
    for (int i = 0; i < 50; ++i) prompt.push_back((i * 37 + 11) % c.vocab_size);  // 4+ token tiles
    const std::vector<int> next = {5, 17, 42, 3, 88};
    glass::CpuSession ref(model);
    FastCpuSession fast(model, {.threads = 2, .weights = WeightType::fp32, .flash_attention = false});  // score-row prefill attention
    CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
    {  // FlashAttention for the prefill (C19, the default), whole and in chunks of 16 (start > 0)
        for (const int chunk : {512, 16}) {
            glass::CpuSession ref_again(model);
            FastCpuSession flash(model, {.threads = 2, .weights = WeightType::fp32, .prefill_chunk = chunk, .flash_attention = true});
            CHECK(worst_error(ref_again, flash, prompt, next) <= 1e-5);
        }
    }
    if (c.hidden_dim % 32 == 0 && c.vocab_size % 32 == 0 && c.kv_dim() % 32 == 0)
        CHECK(fast.weight_bytes() == model.weight_bytes);
    // reset() starts a new sequence: the same prompt gives the same logits again.
    ref.reset();
    fast.reset();
    CHECK(worst_error(ref, fast, prompt, {}) <= 1e-5);
}

TEST_CASE("bad input: token ids and context length are checked before anything changes") {
    FastCpuSession fast(test::shipped(), {.threads = 2, .weights = WeightType::fp32});
    const std::vector<int> bad = {1, 512};
    CHECK_THROWS_WITH_AS(fast.prefill(bad), doctest::Contains("token id 512"), glass::Error);
    CHECK(fast.position() == 0);
    CHECK_THROWS_WITH_AS(fast.decode(-1), doctest::Contains("token id -1"), glass::Error);
    CHECK_THROWS_AS(fast.prefill(std::span<const int>()), glass::Error);
    const std::vector<int> too_long(513, 1);
    CHECK_THROWS_WITH_AS(fast.prefill(too_long), doctest::Contains("513 tokens"), glass::Error);
    CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), {.threads = 0, .weights = WeightType::fp32}),
                         doctest::Contains("thread count 0"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::fast::weight_type_from_string("fp8"), doctest::Contains("'fp8'"), glass::Error);
}

// Greedy generation is the sharpest end-to-end check: one wrong logit anywhere in 256 steps
// changes the story. fp32 and fp16 reproduce every golden exactly (measured). bf16 and Q8_0
// may pick the other token where the reference's top two logits are closer than their error:
// at the first differing step the golden's top1 − top2 margin must be within twice the
// tolerance (each logit can move by tolerance × scale, using the top logit as the scale).
TEST_CASE("greedy generation on the shipped model matches run.c's goldens (every kernel set; fp32, fp16 exactly)") {
  for (const std::string& set : all_sets())
    for (WeightType type : kAllTypes) {
        CAPTURE(set);
        CAPTURE(std::string(glass::fast::to_string(type)));
        int exact = 0, cases = 0, earliest = 1 << 30;
        for (const auto& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
            CAPTURE(g["case"].get<std::string>());
            FastOptions options{.threads = 2, .weights = type};
            options.kernels = set;
            FastCpuSession fast(test::shipped(), options);
            glass::GenerateOptions o;
            o.sampling.temperature = 0.0f;
            const auto want = test::ids_of(g["generated_ids"]);
            o.max_new_tokens = static_cast<int>(want.size());
            const auto r = glass::generate(fast, test::shipped_tok(), g["prompt"].get<std::string>(), o);
            REQUIRE(r.prompt_ids == test::ids_of(g["prompt_ids"]));
            size_t i = 0;
            while (i < want.size() && i < r.generated_ids.size() && r.generated_ids[i] == want[i]) ++i;
            ++cases;
            if (i == want.size() && r.generated_ids.size() == want.size()) {
                ++exact;
                continue;
            }
            earliest = std::min(earliest, static_cast<int>(i));
            if (type == WeightType::fp32 || type == WeightType::fp16) {
                FAIL_CHECK("differs from run.c at generated token " << i);
                continue;
            }
            const double top1 = g["top1_logits"][i].get<double>(), top2 = g["top2_logits"][i].get<double>();
            CHECK(top1 - top2 <= 2 * kernel_checks::weight_tolerance(type) * std::fabs(top1));
        }
        MESSAGE(set << ", " << std::string(glass::fast::to_string(type)) << " weights: " << exact << " of " << cases
                << " golden cases identical; earliest difference at generated token "
                << (exact == cases ? -1 : earliest));
    }
}

// GLASS_KERNELS forces a set; a name that is not a set, or a set this CPU cannot run, is refused
// with the names of the sets it does run (and, for the second, the instructions it has).
TEST_CASE("kernel sets: GLASS_KERNELS forces one, unknown or unavailable sets are refused by name") {
    const std::vector<std::string> sets = all_sets();
    REQUIRE(sets.front() == "portable");  // every CPU runs the reference
    for (const std::string& set : sets) {
        CAPTURE(set);
        REQUIRE(setenv("GLASS_KERNELS", set.c_str(), 1) == 0);
        CHECK(std::string(glass::fast::best_kernels().name) == set);
        FastCpuSession fast(test::shipped(), FastOptions{.threads = 1, .weights = WeightType::fp32});
        CHECK(std::string(fast.kernel_name()) == set);
    }
    REQUIRE(unsetenv("GLASS_KERNELS") == 0);
    CHECK(std::string(glass::fast::best_kernels().name) == sets.back());  // the widest
    CHECK_THROWS_WITH_AS(glass::fast::kernels_of("sse9"), doctest::Contains("unknown kernel set 'sse9'"), glass::Error);
    for (const char* other : {"neon", "avx2", "avx512"}) {
        if (std::find(sets.begin(), sets.end(), other) != sets.end()) continue;
        CAPTURE(other);
        REQUIRE(setenv("GLASS_KERNELS", other, 1) == 0);
        const std::string forced = "GLASS_KERNELS=" + std::string(other);
        CHECK_THROWS_WITH_AS(glass::fast::best_kernels(), doctest::Contains(forced.c_str()), glass::Error);
        CHECK_THROWS_WITH_AS(glass::fast::kernels_of(other), doctest::Contains("kernel sets it runs: portable"),
                             glass::Error);
        FastOptions o{.threads = 1, .weights = WeightType::fp32};
        o.kernels = other;
        CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), o), doctest::Contains("this CPU lacks"), glass::Error);
    }
    REQUIRE(unsetenv("GLASS_KERNELS") == 0);
}

TEST_CASE("work items: a small product still gives every thread items, a large one keeps them near 1 MB") {
    using glass::fast::panels_per_item;
    // A 768 × 768 Q4_0 matrix (stories110M's wq): 24 panels of 32 rows × 24 blocks × 18 B. By
    // bytes alone it was one item of 24 panels, so one thread ran the product while the other
    // waited; now 2 threads get 8 items of 3 panels.
    const std::int64_t q4_panel = 32 * 24 * 18;
    CHECK(panels_per_item(24, q4_panel, 2) == 3);
    CHECK(panels_per_item(24, q4_panel, 1) == 6);  // 4 items for one thread too (claims are cheap)
    CHECK(panels_per_item(3, q4_panel, 4) == 1);   // fewer panels than items: one panel each
    // A 32000 × 768 fp32 classifier: 1000 panels of 96 KiB. Balance alone would take 125 panels
    // (12 MB) per item; the 1 MB cap keeps 10.
    const std::int64_t fp32_panel = 32 * 768 * 4;
    CHECK(panels_per_item(1000, fp32_panel, 2) == 10);
    CHECK(panels_per_item(1000, fp32_panel, 2) * fp32_panel <= std::int64_t{1} << 20);
    CHECK(panels_per_item(10, std::int64_t{4} << 20, 2) == 1);  // a panel over 1 MB is still an item
}

TEST_CASE("thread pool: every item of every job runs exactly once (1-4 threads, jobs of changing sizes)") {
    for (int threads = 1; threads <= 4; ++threads) {
        glass::fast::ThreadPool pool(threads);
        std::vector<std::atomic<int>> runs(97);
        int wrong = 0;
        for (int job_index = 0; job_index < 3000; ++job_index) {
            const int n = 1 + (job_index * 37) % 97;  // 1 .. 97 items: fewer and more than threads
            for (int i = 0; i < n; ++i) runs[static_cast<size_t>(i)].store(0);
            auto job = [&](int item, int thread) {
                if (item >= 0 && item < n && thread >= 0 && thread < threads) runs[static_cast<size_t>(item)].fetch_add(1);
            };
            pool.run(n, job);
            for (int i = 0; i < n; ++i) wrong += runs[static_cast<size_t>(i)].load() != 1;
        }
        CAPTURE(threads);
        CHECK(wrong == 0);
    }
}

TEST_CASE("thread pool: a stalled worker's run is taken over by the caller") {
    // Thread 1 owns items 4..7 of 8. Whichever item it starts first, it holds until the caller
    // (thread 0) has run 7 items: its own four and the three thread 1 has not claimed. Without
    // taking over another thread's run the caller would stop at four; the 10 s bound only keeps
    // such a failure from hanging the test.
    glass::fast::ThreadPool pool(2);
    std::atomic<int> by_caller{0}, total{0};
    std::atomic<bool> stalled{false};
    auto job = [&](int, int thread) {
        if (thread == 0) {
            by_caller.fetch_add(1);
        } else if (!stalled.exchange(true)) {
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (by_caller.load() < 7 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
        }
        total.fetch_add(1);
    };
    pool.run(8, job);
    CHECK(total.load() == 8);
    CHECK(by_caller.load() >= 7);  // 8 when the worker woke too late to claim anything
}

TEST_CASE("logits do not depend on how the rows are shared: 1, 2 and 3 threads agree bit for bit (fp32, q4 int8)") {
    const auto& model = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    for (const WeightType type : {WeightType::fp32, WeightType::q4_0}) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        std::vector<std::vector<float>> runs;  // per thread count: prompt's logits, then one decode step's
        for (int threads : {1, 2, 3}) {
            FastCpuSession fast(model, {.threads = threads, .weights = type, .int8_activations = type == WeightType::q4_0});
            std::vector<float> out;
            for (float v : fast.prefill(prompt)) out.push_back(v);
            for (float v : fast.decode(376)) out.push_back(v);
            runs.push_back(std::move(out));
        }
        CHECK(runs[1] == runs[0]);
        CHECK(runs[2] == runs[0]);
    }
}

}  // namespace test_fast_session
