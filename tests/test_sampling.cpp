// Sampling: llama2.c's sampler draw for draw, top-p edge cases (both nucleus rules, and the exact
// landings where they part), parameter validation, sampling_distribution, and the statistics of
// 100k seeded draws against the distribution each setting defines.
#include <cmath>
#include <map>
#include <numeric>

#include "test_support.hpp"

namespace test_sampling {  // this file's own names (tests are built in unity batches)

TEST_CASE("xorshift64* reproduces llama2.c's states and coins, draw for draw") {
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_sampling.jsonl"))) {
        CAPTURE(rec["case"].get<std::string>());
        glass::Llama2cRng rng(rec["seed"].get<std::uint64_t>());
        const auto coins = rec["coins"].get<std::vector<double>>();
        const auto states = rec["rng_state_after_each_draw"].get<std::vector<std::uint64_t>>();
        REQUIRE(coins.size() == states.size());
        for (size_t i = 0; i < coins.size(); ++i) {
            const float coin = rng.next_f32();
            REQUIRE(rng.state() == states[i]);
            REQUIRE(std::abs(coin - coins[i]) <= 1e-8);  // coins are printed with 9 digits
        }
    }
}

TEST_CASE("seeded sampling equals llama2.c token for token") {
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_sampling.jsonl"))) {
        CAPTURE(rec["case"].get<std::string>());
        glass::CpuSession session(test::shipped());
        const std::vector<int> prompt_ids = test::ids_of(rec["prompt_ids"]);
        const auto r = glass::generate(session, test::shipped_tok(), rec["prompt"].get<std::string>(),
                                       test::golden_options(rec));
        CHECK(r.prompt_ids == prompt_ids);
        CHECK(r.generated_ids == test::ids_of(rec["generated_ids"]));
        CHECK((r.stop_reason == glass::StopReason::bos) == rec["stopped_on_bos"].get<bool>());
    }
}

TEST_CASE("greedy takes the largest logit; ties go to the lowest id; temperature 0 is greedy") {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
    CHECK(glass::sample_argmax(logits) == 1);
    glass::Llama2cRng rng(7);
    glass::SamplingParams greedy;
    greedy.temperature = 0.0f;
    CHECK(glass::sample(logits, greedy, rng) == 1);
    CHECK(rng.state() == 7);  // greedy consumes no random number, as in llama2.c
}

TEST_CASE("invalid sampling parameters and non-finite logits are errors naming the value") {
    glass::Llama2cRng rng(1);
    const std::vector<float> logits = {1.0f, 2.0f};
    auto with = [](float t, float p, int k, float m) {
        return glass::SamplingParams{.temperature = t, .top_p = p, .top_k = k, .min_p = m};
    };
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(-0.5f, 1, 0, 0), rng), doctest::Contains("-0.5"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(NAN, 1, 0, 0), rng), doctest::Contains("nan"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(1, 0.0f, 0, 0), rng), doctest::Contains("top-p"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(1, 1.5f, 0, 0), rng), doctest::Contains("1.5"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(1, NAN, 0, 0), rng), doctest::Contains("top-p"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(1, 1, -3, 0), rng), doctest::Contains("-3"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(logits, with(1, 1, 0, 1.5f), rng), doctest::Contains("1.5"), glass::Error);
    const std::vector<float> bad = {1.0f, NAN, 0.0f};
    CHECK_THROWS_WITH_AS(glass::sample(bad, with(1, 1, 0, 0), rng), doctest::Contains("token 1"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::sample(bad, with(0, 1, 0, 0), rng), doctest::Contains("nan"), glass::Error);
    const std::vector<float> inf = {1.0f, INFINITY};
    CHECK_THROWS_WITH_AS(glass::sample(inf, with(1, 0.9f, 0, 0), rng), doctest::Contains("inf"), glass::Error);
}

TEST_CASE("top-p edge cases (pitfall 7)") {
    using glass::Candidate;
    auto kept_ids = [](std::vector<Candidate> c) {
        std::vector<int> ids;
        for (const auto& x : c) ids.push_back(x.id);
        return ids;
    };
    const std::vector<float> probs = {0.1f, 0.5f, 0.25f, 0.15f};
    SUBCASE("the token that crosses p is kept") {
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 0.6f);  // 0.5 < 0.6, 0.5 + 0.25 > 0.6
        CHECK(kept_ids(c) == std::vector<int>{1, 2});
    }
    SUBCASE("top_p = 1 keeps everything") {
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 1.0f);
        CHECK(c.size() == 4);
    }
    SUBCASE("a tiny top_p keeps exactly the most probable token") {
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 1e-6f);
        CHECK(kept_ids(c) == std::vector<int>{1});
    }
    SUBCASE("ties keep id order") {
        const std::vector<float> tied = {0.25f, 0.25f, 0.25f, 0.25f};
        auto c = glass::sorted_candidates(tied);
        CHECK(kept_ids(c) == std::vector<int>{0, 1, 2, 3});
        glass::keep_top_p(c, 0.3f);
        CHECK(kept_ids(c) == std::vector<int>{0, 1});
    }
    SUBCASE("an fp32 cumulative sum that never exceeds p stays in bounds") {
        // Sum of these in fp32 is below 0.9999999 (and below 1): the walk ends without crossing.
        std::vector<float> flat(1000, 0.000999f);
        auto c = glass::sorted_candidates(flat);
        glass::keep_top_p(c, 0.9999999f);
        CHECK(c.size() == 1000);
        CHECK(glass::draw(c, 0.9999999f) == c.back().id);  // never past the end
    }
    SUBCASE("top-k then top-p renormalises before the nucleus") {
        // After top-2 {0.5, 0.25} renormalise to {2/3, 1/3}; p = 0.6 then keeps only id 1.
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_k(c, 2);
        CHECK(c[0].p == doctest::Approx(2.0 / 3.0));
        glass::keep_top_p(c, 0.6f);
        CHECK(kept_ids(c) == std::vector<int>{1});
    }
    SUBCASE("C12: top-p 0.9 on Paris .80 / Lyon .10 / Rome .05 / Berlin .05, both rules") {
        for (auto rule : {glass::NucleusRule::reaches_p, glass::NucleusRule::exceeds_p_llama2c}) {
            auto c = glass::sorted_candidates(std::vector<float>{0.80f, 0.10f, 0.05f, 0.05f});
            glass::keep_top_p(c, 0.9f, rule);
            // reaches_p: 0.8 + 0.1 reaches 0.9. exceeds_p_llama2c: only because 0.8f + 0.1f rounds
            // to 0.90000004f > 0.9f (= 0.89999998f).
            REQUIRE(kept_ids(c) == std::vector<int>{0, 1});
            glass::renormalize(c);
            CHECK(c[0].p == doctest::Approx(0.889).epsilon(0.001));
            CHECK(c[1].p == doctest::Approx(0.111).epsilon(0.005));
        }
    }
    SUBCASE("the textbook rule: same edge cases") {
        const auto reaches = glass::NucleusRule::reaches_p;
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 0.6f, reaches);
        CHECK(kept_ids(c) == std::vector<int>{1, 2});
        c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 1.0f, reaches);
        CHECK(c.size() == 4);
        c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, 1e-6f, reaches);
        CHECK(kept_ids(c) == std::vector<int>{1});
        std::vector<float> flat(1000, 0.000999f);  // the fp32 sum never reaches p: keep all, in bounds
        c = glass::sorted_candidates(flat);
        glass::keep_top_p(c, 0.9999999f, reaches);
        CHECK(c.size() == 1000);
    }
}

TEST_CASE("top-p: a running sum landing exactly on top_p is where the two rules part") {
    using glass::NucleusRule;
    auto kept = [](const std::vector<float>& probs, float top_p, NucleusRule rule) {
        auto c = glass::sorted_candidates(probs);
        glass::keep_top_p(c, top_p, rule);
        std::vector<int> ids;
        for (const auto& x : c) ids.push_back(x.id);
        return ids;
    };
    // Halves, quarters and eighths are exact binary fractions, so these sums have no rounding at
    // all: checked at run time (volatile, so the compiler cannot fold them).
    volatile float half = 0.5f, quarter = 0.25f, eighth = 0.125f;
    REQUIRE(half + quarter == 0.75f);
    REQUIRE(half + quarter + eighth == 0.875f);
    const std::vector<float> probs = {0.125f, 0.5f, 0.125f, 0.25f};  // descending: ids 1, 3, 0, 2

    SUBCASE("the second running sum equals top_p = 0.75") {
        // reaches_p stops at the token that makes the sum 0.75 (flip >= to > and it keeps 3)
        CHECK(kept(probs, 0.75f, NucleusRule::reaches_p) == std::vector<int>{1, 3});
        // llama2.c needs the sum to exceed 0.75: one more token (flip > to >= and it keeps 2).
        // Its cutoff (1 - 0.75)/3 = 0.083 drops none of them.
        CHECK(kept(probs, 0.75f, NucleusRule::exceeds_p_llama2c) == std::vector<int>{1, 3, 0});
        CHECK(glass::SamplingParams{}.nucleus == NucleusRule::exceeds_p_llama2c);  // the default
    }
    SUBCASE("the first running sum equals top_p = 0.5") {
        CHECK(kept(probs, 0.5f, NucleusRule::reaches_p) == std::vector<int>{1});
        CHECK(kept(probs, 0.5f, NucleusRule::exceeds_p_llama2c) == std::vector<int>{1, 3});
    }
    SUBCASE("the third running sum equals top_p = 0.875") {
        CHECK(kept(probs, 0.875f, NucleusRule::reaches_p) == std::vector<int>{1, 3, 0});
        CHECK(kept(probs, 0.875f, NucleusRule::exceeds_p_llama2c) == std::vector<int>{1, 3, 0, 2});
    }
    SUBCASE("just off the landing the rules agree") {
        for (float p : {0.74f, 0.76f})
            CHECK(kept(probs, p, NucleusRule::reaches_p) == kept(probs, p, NucleusRule::exceeds_p_llama2c));
    }
    SUBCASE("through sample(): which tokens can ever be drawn") {
        // log(p) logits give back p exactly here (checked), so sample() sees the landing too.
        std::vector<float> logits;
        for (float p : probs) logits.push_back(std::log(p));
        REQUIRE(glass::probabilities(logits, 1.0f) == probs);
        for (auto rule : {NucleusRule::reaches_p, NucleusRule::exceeds_p_llama2c}) {
            glass::SamplingParams params;
            params.top_p = 0.75f;
            params.nucleus = rule;
            glass::Llama2cRng rng(99);
            std::vector<int> counts(4, 0);
            for (int i = 0; i < 4000; ++i) ++counts[size_t(glass::sample(logits, params, rng))];
            CHECK(counts[2] == 0);  // the last eighth: never kept
            if (rule == NucleusRule::reaches_p) CHECK(counts[0] == 0);
            else CHECK(counts[0] > 300);  // kept: 1/7 of the draws, ~571 ± 22
        }
    }
}

TEST_CASE("sampling_distribution is what sample() draws from; T = 0 is greedy's one-hot") {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
    glass::SamplingParams params;
    SUBCASE("temperature 0: all mass on sample_argmax, lowest id on a tie") {
        params.temperature = 0.0f;
        CHECK(glass::sampling_distribution(logits, params) == std::vector<float>{0, 1, 0, 0, 0});
    }
    SUBCASE("no truncation: softmax at T") {
        params.temperature = 0.5f;
        CHECK(glass::sampling_distribution(logits, params) == glass::probabilities(logits, 0.5f));
    }
    SUBCASE("truncation: the kept tokens renormalized, the rest 0") {
        // softmax at T = 1, descending: ids 1 and 3 (0.379 each), 4 (0.139), 0 (0.084), 2 (0.019).
        // top-p 0.7 keeps {1, 3}: 0.379 is short of 0.7, 0.757 passes it under both rules.
        const std::vector<double> expected = {0, 0.5, 0, 0.5, 0};
        params.top_p = 0.7f;
        for (auto rule : {glass::NucleusRule::reaches_p, glass::NucleusRule::exceeds_p_llama2c}) {
            params.nucleus = rule;
            const std::vector<float> d = glass::sampling_distribution(logits, params);
            for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == doctest::Approx(expected[i]).epsilon(1e-6));
        }
    }
    SUBCASE("and draws follow it") {
        params.top_k = 3;
        const std::vector<float> d = glass::sampling_distribution(logits, params);
        glass::Llama2cRng rng(5);
        std::vector<int> counts(d.size(), 0);
        const int n = 100000;
        for (int i = 0; i < n; ++i) ++counts[size_t(glass::sample(logits, params, rng))];
        for (size_t i = 0; i < d.size(); ++i) {  // within 4 binomial sigmas
            CAPTURE(i);
            CHECK(std::abs(counts[i] - n * d[i]) <= 4 * std::sqrt(n * d[i] * (1 - d[i])) + 1e-9);
        }
    }
}

namespace {

// Draws n samples and checks every token's count is within 4σ of n·p (binomial σ).
void check_distribution(const std::vector<float>& logits, const glass::SamplingParams& params,
                        const std::vector<double>& expected, int n = 100000) {
    glass::Llama2cRng rng(12345);
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) counts[static_cast<size_t>(glass::sample(logits, params, rng))]++;
    for (size_t id = 0; id < expected.size(); ++id) {
        const double mean = n * expected[id];
        const double sigma = std::sqrt(n * expected[id] * (1 - expected[id]));
        CAPTURE(id);
        CAPTURE(counts[id]);
        CAPTURE(mean);
        if (expected[id] == 0.0) CHECK(counts[id] == 0);
        else CHECK(std::abs(counts[id] - mean) <= 4 * sigma);
    }
}

// softmax(l / T) in double: the target distribution, computed independently of glass.
std::vector<double> softmax_d(const std::vector<float>& logits, double t) {
    std::vector<double> p(logits.size());
    double mx = *std::max_element(logits.begin(), logits.end()) / t, sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] / t - mx);
    for (double& x : p) x /= sum;
    return p;
}

std::vector<double> keep_and_renormalise(std::vector<double> p, const std::vector<int>& keep) {
    std::vector<double> q(p.size(), 0.0);
    double sum = 0;
    for (int id : keep) sum += p[static_cast<size_t>(id)];
    for (int id : keep) q[static_cast<size_t>(id)] = p[static_cast<size_t>(id)] / sum;
    return q;
}

}  // namespace

TEST_CASE("100k seeded draws follow the target distribution within 4 sigma") {
    const std::vector<float> logits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.4f};
    // probabilities at T = 1, descending: id1 .33, id4 .20, id6 .15, id0 .07, id2 .04, ...
    SUBCASE("temperature 1") {
        check_distribution(logits, {1.0f, 1.0f, 0, 0}, softmax_d(logits, 1.0));
    }
    SUBCASE("temperature 0.5 sharpens, 2.0 flattens") {
        check_distribution(logits, {0.5f, 1.0f, 0, 0}, softmax_d(logits, 0.5));
        check_distribution(logits, {2.0f, 1.0f, 0, 0}, softmax_d(logits, 2.0));
    }
    SUBCASE("top-k 3") {
        check_distribution(logits, {1.0f, 1.0f, 3, 0}, keep_and_renormalise(softmax_d(logits, 1), {1, 4, 6}));
    }
    SUBCASE("top-p 0.7, both rules") {
        // cumulative in descending order: id1, +id4, +id6 crosses 0.7 -> keep {1, 4, 6}
        auto p = softmax_d(logits, 1.0);
        REQUIRE(p[1] + p[4] < 0.7);
        REQUIRE(p[1] + p[4] + p[6] > 0.7);
        check_distribution(logits, {1.0f, 0.7f, 0, 0}, keep_and_renormalise(p, {1, 4, 6}));
        check_distribution(logits, {1.0f, 0.7f, 0, 0, glass::NucleusRule::reaches_p}, keep_and_renormalise(p, {1, 4, 6}));
    }
    SUBCASE("min-p 0.3") {
        // keep p >= 0.3 · p_max: ids whose logit is within ln(1/0.3) ≈ 1.204 of the max (2.5)
        check_distribution(logits, {1.0f, 1.0f, 0, 0.3f}, keep_and_renormalise(softmax_d(logits, 1), {1, 4, 6}));
    }
    SUBCASE("min-p 0.1 with temperature 1.5") {
        auto p = softmax_d(logits, 1.5);
        std::vector<int> keep;
        const double pmax = *std::max_element(p.begin(), p.end());
        for (int i = 0; i < 8; ++i)
            if (p[static_cast<size_t>(i)] >= 0.1 * pmax) keep.push_back(i);
        check_distribution(logits, {1.5f, 1.0f, 0, 0.1f}, keep_and_renormalise(p, keep));
    }
}

}  // namespace test_sampling
