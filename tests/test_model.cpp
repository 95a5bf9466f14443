// The forward pass on the real model: equal to llama2.c's run.c (the goldens), cached decode equal
// to recomputation (C5), causality of K/V (C6), and the cache's positions (pitfall 9).
#include <cmath>

#include "test_support.hpp"

namespace test_model {  // this file's own names (tests are built in unity batches)

namespace {

std::vector<int> greedy_generate(const std::vector<int>& prompt_ids, int steps) {
    glass::CpuSession session(test::shipped());
    std::vector<int> out;
    const int max_new = glass::new_tokens_for_steps(steps, static_cast<int>(prompt_ids.size()));
    if (max_new == 0) return out;
    std::span<const float> logits = session.prefill(prompt_ids);
    while (true) {
        const int next = glass::sample_argmax(logits);
        out.push_back(next);
        if (next == 1 || static_cast<int>(out.size()) == max_new) break;  // run.c stops on BOS
        logits = session.decode(next);
    }
    return out;
}

double max_relative_error(std::span<const float> got, std::span<const float> want) {
    // ‖got − want‖∞ / ‖want‖∞: relative to the logits' scale, so near-zero logits do not blow up.
    double diff = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
    return diff / scale;
}

}  // namespace

TEST_CASE("first-step logits equal llama2.c's within 1e-4 absolute") {
    // The goldens' README: differently optimised builds of run.c itself differ by ~2e-5.
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_first_step_logits.jsonl"))) {
        CAPTURE(rec["case"].get<std::string>());
        const std::vector<int> prompt_ids = test::ids_of(rec["prompt_ids"]);
        CHECK(test::shipped_tok().encode(rec["prompt"].get<std::string>(), true, false) == prompt_ids);
        glass::CpuSession session(test::shipped());
        const std::span<const float> logits = session.prefill(prompt_ids);
        const auto want = rec["logits"].get<std::vector<float>>();
        REQUIRE(logits.size() == want.size());
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(logits[i]) - want[i]));
        CHECK(worst <= 1e-4);
    }
}

TEST_CASE("greedy generation equals every llama2.c golden token for token") {
    int records = 0;
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        CAPTURE(rec["case"].get<std::string>());
        const std::vector<int> prompt_ids = test::ids_of(rec["prompt_ids"]);
        REQUIRE(test::shipped_tok().encode(rec["prompt"].get<std::string>(), true, false) == prompt_ids);
        CHECK(greedy_generate(prompt_ids, rec["steps"].get<int>()) == test::ids_of(rec["generated_ids"]));
        ++records;
    }
    CHECK(records == 36);
}

TEST_CASE("greedy generation through generate() matches the goldens, text included") {
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        const std::string name = rec["case"].get<std::string>();
        if (name.find("_n64") == std::string::npos) continue;  // one length per prompt is enough here
        CAPTURE(name);
        glass::CpuSession session(test::shipped());
        const std::string prompt = rec["prompt"].get<std::string>();
        const glass::GenerateResult r = glass::generate(session, test::shipped_tok(), prompt, test::golden_options(rec));
        CHECK(r.generated_ids == test::ids_of(rec["generated_ids"]));
        // run.c's printed text drops lone non-printable bytes (its safe_printf); compare where it
        // printed every byte, i.e. when the golden text is what we would stream.
        const std::string want = rec["text"].get<std::string>();
        if (want.size() >= prompt.size() && want.compare(0, prompt.size(), prompt) == 0 &&
            name.rfind("emoji", 0) != 0)
            CHECK(prompt + r.text == want);
    }
}

TEST_CASE("C5: KV-cached decode logits equal a full recompute at every step of a 64-token run") {
    const std::vector<int> prompt = test::shipped_tok().encode("Once upon a time", true, false);
    glass::CpuSession cached(test::shipped());
    std::vector<int> sequence = prompt;
    std::span<const float> logits = cached.prefill(prompt);
    double worst = 0;
    for (int step = 0; step < 64; ++step) {
        const int next = glass::sample_argmax(logits);
        sequence.push_back(next);
        logits = cached.decode(next);
        glass::CpuSession fresh(test::shipped());
        const std::span<const float> recomputed = fresh.prefill(sequence);  // the whole sequence again
        worst = std::max(worst, max_relative_error(logits, recomputed));
        REQUIRE(cached.position() == static_cast<int>(sequence.size()));
    }
    // fp32, different summation order (matrix–vector vs matrix–matrix): rounding only.
    CHECK(worst <= 1e-5);
    MESSAGE("C5 worst relative error over 64 steps: " << worst);
}

TEST_CASE("C6: changing a later token leaves every earlier position's K and V bit-for-bit unchanged") {
    std::vector<int> a = test::shipped_tok().encode("Once upon a time there was a cat", true, false);
    std::vector<int> b = a;
    const size_t changed = 5;
    b[changed] = (b[changed] + 17) % 512;
    b.back() = (b.back() + 101) % 512;
    glass::CpuSession sa(test::shipped()), sb(test::shipped());
    sa.prefill(a);
    sb.prefill(b);
    const int n = static_cast<int>(a.size());
    for (int l = 0; l < test::shipped().config.n_layers; ++l) {
        const glass::RowMatrix ka = sa.cache().keys(l, n), kb = sb.cache().keys(l, n);
        const glass::RowMatrix va = sa.cache().values(l, n), vb = sb.cache().values(l, n);
        CHECK(ka.topRows(changed) == kb.topRows(changed));  // exact equality, not a tolerance
        CHECK(va.topRows(changed) == vb.topRows(changed));
        CHECK(ka.row(changed) != kb.row(changed));          // the changed position itself differs
    }
}

TEST_CASE("C6 holds across prefill and decode: cache rows written by decode equal prefill's") {
    // Pitfall 9: decode must write position L after a prompt of L tokens (not L+1) and rotate
    // with that position. Prefill of the longer sequence computes the same rows independently.
    const std::vector<int> prompt = test::shipped_tok().encode("Lily went to the park", true, false);
    glass::CpuSession stepwise(test::shipped());
    const int first = glass::sample_argmax(stepwise.prefill(prompt));
    CHECK(stepwise.position() == static_cast<int>(prompt.size()));  // first token not cached yet
    const int second = glass::sample_argmax(stepwise.decode(first));
    stepwise.decode(second);
    std::vector<int> all = prompt;
    all.push_back(first);
    all.push_back(second);
    glass::CpuSession whole(test::shipped());
    whole.prefill(all);
    const int n = static_cast<int>(all.size());
    REQUIRE(stepwise.position() == n);
    for (int l = 0; l < test::shipped().config.n_layers; ++l) {
        const glass::RowMatrix k1 = stepwise.cache().keys(l, n), k2 = whole.cache().keys(l, n);
        const glass::RowMatrix v1 = stepwise.cache().values(l, n), v2 = whole.cache().values(l, n);
        CHECK((k1 - k2).cwiseAbs().maxCoeff() <= 1e-5f * k2.cwiseAbs().maxCoeff());
        CHECK((v1 - v2).cwiseAbs().maxCoeff() <= 1e-5f * v2.cwiseAbs().maxCoeff());
    }
}

TEST_CASE("the cache refuses a hole or a rewrite (pitfall 9)") {
    glass::KVCache cache(test::shipped().config);
    const int kv = test::shipped().config.kv_dim();
    const glass::RowMatrix row = glass::RowMatrix::Ones(1, kv);
    CHECK_THROWS_WITH_AS(cache.write(0, 1, row, row), doctest::Contains("writing position 1"), glass::Error);
    cache.write(0, 0, row, row);
    cache.advance(1);
    CHECK(cache.length() == 1);
    CHECK_THROWS_AS(cache.write(0, 0, row, row), glass::Error);
    CHECK(cache.bytes_used(test::shipped().config) == test::shipped().config.kv_bytes_per_token());
}

}  // namespace test_model
