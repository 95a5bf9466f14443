// The examples that generate text (09_sampling, 10_decode, 11_generate): run each and check what
// it prints against llama2.c's goldens in ../shared and the arithmetic of the claims (C5,
// C10-C13), never against the program itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "example_output.hpp"
#include "test_support.hpp"

namespace test_examples_generate {  // this file's own names (tests are built in unity batches)

using test::example_output::greedy_golden;
using test::example_output::ints;
using test::example_output::lines_starting;
using test::example_output::number;
using test::example_output::numbers;
using test::example_output::run_example;
using test::value_of;

TEST_CASE("example 10_decode: the cache grows by one per step and decode equals recompute (C5)") {
    const nlohmann::json g = greedy_golden("Once upon a time", 32);
    const std::vector<int> golden_ids = test::ids_of(g["generated_ids"]);
    const int n_prompt = static_cast<int>(g["prompt_ids"].size());
    const test::Run r = run_example("10_decode");

    CHECK(number(r.out, "prompt tokens") == n_prompt);
    const std::vector<std::string> steps = lines_starting(r.out, "step ");
    REQUIRE(steps.size() == 10);
    // Greedy ids may be compared exactly here: run.c's smallest top-1/top-2 margin over these
    // steps is 0.13 (the golden's min_top1_top2_margin), far above fp32 rounding.
    REQUIRE(golden_ids.size() > steps.size());
    int previous_length = n_prompt;
    for (size_t i = 0; i < steps.size(); ++i) {
        int step = -1, position = -1, length = -1, fed = -1, chose = -1;
        REQUIRE(std::sscanf(steps[i].c_str(), "step %d: position %d, cache length %d, fed %d, chose %d",
                            &step, &position, &length, &fed, &chose) == 5);
        const std::string& line = steps[i];
        const double rel_err = std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
        CHECK(step == static_cast<int>(i) + 1);
        CHECK(position == n_prompt + static_cast<int>(i));  // written at the old length
        CHECK(length == previous_length + 1);                // exactly one row per step
        previous_length = length;
        CHECK(fed == golden_ids[i]);
        CHECK(chose == golden_ids[i + 1]);
        // C5: cached decode vs full recompute differ only in fp32 summation order, ~1e-7
        // relative to the largest logit; 1e-5 is the bound the example promises.
        CHECK(rel_err >= 0);
        CHECK(rel_err <= 1e-5);
    }
    const std::vector<int> generated = ints(value_of(r.out, "generated ids"));
    CHECK(generated == std::vector<int>(golden_ids.begin(), golden_ids.begin() + 11));
    const std::string text = value_of(r.out, "text");
    CHECK(g["text"].get<std::string>().rfind(text, 0) == 0);  // a prefix of run.c's story
    CHECK(number(r.out, "max rel err") <= 1e-5);
}

// Example 09's C12 block for one top_p, against the rules computed here: on paper in whole
// percents, then in fp32 with the same additions glass makes, then the exact-landing distribution.
static void check_example_09_top_p(const std::string& out, double top_p) {
    CAPTURE(top_p);
    const std::vector<std::string> names = {"Paris", "Lyon", "Rome", "Berlin"};  // descending
    const auto first = [&](size_t n) {
        std::string s;
        for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + names[i];
        return s;
    };
    // How many tokens a rule keeps: the first prefix whose running sum reaches (>=) or exceeds (>)
    // the threshold; everything if none does.
    const auto kept = [](const auto& running, auto threshold, bool reaches) {
        for (size_t i = 0; i < running.size(); ++i)
            if (reaches ? running[i] >= threshold : running[i] > threshold) return i + 1;
        return running.size();
    };
    const char* textbook = "textbook rule (sum >= p) keeps";
    const char* llama2c = "llama2.c rule (sum > p) keeps";

    // On paper: 80, 90, 95, 100 percent, exact integers.
    const std::vector<int> paper = {80, 90, 95, 100};
    const int p_percent = static_cast<int>(std::lround(top_p * 100));
    CHECK(ints(value_of(out, "C12 on paper, running sum in percent")) == paper);
    CHECK(value_of(out, std::string("C12 on paper, ") + textbook) == first(kept(paper, p_percent, true)));
    CHECK(value_of(out, std::string("C12 on paper, ") + llama2c) == first(kept(paper, p_percent, false)));
    if (top_p == 0.9) {  // the article's C12 holds on paper with the textbook rule
        CHECK(first(kept(paper, p_percent, true)) == "Paris Lyon");
        CHECK(first(kept(paper, p_percent, false)) == "Paris Lyon Rome");  // "exceeds" needs rounding
    }

    // In fp32: sums of the rounded probabilities, at run time (volatile: no constant folding).
    volatile float p32[4] = {0.80f, 0.10f, 0.05f, 0.05f};
    const float top_p32 = static_cast<float>(top_p);
    std::vector<float> running;
    float sum = 0.0f;
    for (int i = 0; i < 4; ++i) running.push_back(sum += p32[i]);
    // llama2.c's cutoff (1 - p)/(n - 1) drops none of these four, so the plain walk is its rule.
    REQUIRE(0.05f >= (1.0f - top_p32) / 3.0f);
    const std::vector<double> printed_running = numbers(value_of(out, "C12 fp32 running sum"));
    REQUIRE(printed_running.size() == 4);
    for (size_t i = 0; i < 4; ++i)  // %.9g round-trips a float exactly
        CHECK(static_cast<float>(printed_running[i]) == running[i]);
    CHECK(static_cast<float>(number(out, "C12 fp32 top_p")) == top_p32);
    const size_t n_textbook = kept(running, top_p32, true);
    CHECK(value_of(out, std::string("C12 fp32, ") + textbook) == first(n_textbook));
    CHECK(value_of(out, std::string("C12 fp32, ") + llama2c) == first(kept(running, top_p32, false)));
    if (top_p == 0.9) CHECK(running[1] > top_p32);  // why llama2.c's rule also stops at Lyon here

    // Renormalized over the textbook set; 6 printed decimals (±5e-7) of fp32 divisions: 2e-6.
    CHECK(number(out, "C12 kept count") == static_cast<double>(n_textbook));
    const std::string renorm = value_of(out, "C12 renormalized");
    const std::vector<double> kept_p = numbers(renorm);
    REQUIRE(kept_p.size() == n_textbook);
    CHECK(renorm.rfind("Paris", 0) == 0);
    const double kept_mass = paper[n_textbook - 1] / 100.0;
    for (size_t i = 0; i < n_textbook; ++i)
        CHECK(std::fabs(kept_p[i] - (i == 0 ? 0.80 : i == 1 ? 0.10 : 0.05) / kept_mass) < 2e-6);
    if (top_p == 0.9) {  // the article's rounded figures
        CHECK(std::fabs(kept_p[0] - 0.889) < 5e-4);
        CHECK(std::fabs(kept_p[1] - 0.111) < 5e-4);
    }

    // Exact landing: 0.5 + 0.25 is exactly 0.75 in fp32, so the rules keep different sets.
    volatile float e32[4] = {0.5f, 0.25f, 0.125f, 0.125f};
    std::vector<float> exact;
    sum = 0.0f;
    for (int i = 0; i < 4; ++i) exact.push_back(sum += e32[i]);
    REQUIRE(exact[1] == 0.75f);
    CHECK(numbers(value_of(out, "exact distribution")) == std::vector<double>{0.5, 0.25, 0.125, 0.125});
    CHECK(number(out, "exact top_p") == 0.75);
    CHECK(numbers(value_of(out, "exact running sum")) == std::vector<double>(exact.begin(), exact.end()));
    CHECK(value_of(out, std::string("exact, ") + textbook) == first(kept(exact, 0.75f, true)));
    CHECK(value_of(out, std::string("exact, ") + llama2c) == first(kept(exact, 0.75f, false)));
    CHECK(kept(exact, 0.75f, true) == 2);
    CHECK(kept(exact, 0.75f, false) == 3);
}

TEST_CASE("example 09_sampling: C11 greedy, C12 top-p, C13 temperature") {
    const test::Run r = run_example("09_sampling");

    // C11.
    CHECK(value_of(r.out, "C11 greedy pick") == "Paris");
    CHECK(value_of(r.out, "C11 greedy picks Paris in") == "1000 of 1000");
    // T = 1 follows the distribution: 10,000 draws, σ(Paris) = sqrt(0.8·0.2/10⁴) = 0.004, so
    // 0.02 is 5σ (the draw is seeded, so this is a sanity check that cannot flake).
    const std::string line = lines_starting(r.out, "C11 sampling at T=1").at(0);
    const std::vector<double> freq = numbers(line.substr(line.find("Paris")));
    REQUIRE(freq.size() == 3);
    CHECK(std::fabs(freq[0] - 0.80) < 0.02);
    CHECK(std::fabs(freq[1] - 0.15) < 0.02);
    CHECK(std::fabs(freq[2] - 0.05) < 0.02);

    // C12, and where the two nucleus rules part: checked for the default top_p and for the
    // walkthrough's "Try this" value.
    check_example_09_top_p(r.out, 0.9);
    check_example_09_top_p(run_example("09_sampling", "0.95").out, 0.95);

    // C13: softmax(log(p) / T) ∝ p^(1/T), computed here in double.
    const double p[3] = {0.80, 0.15, 0.05};
    const double temps[5] = {0.1, 0.5, 1.0, 2.0, 5.0};
    // At T = 0.1 the printed (6-decimal) values are 1 and 0, so start just outside them.
    double last_paris = 1.0 + 1e-9, last_rome = -1.0, last_entropy = -1.0;
    for (double t : temps) {
        char label[32];
        std::snprintf(label, sizeof label, "C13 T=%.1f", t);
        const std::vector<double> printed = numbers(value_of(r.out, label));
        REQUIRE(printed.size() == 3);
        double expected[3], sum = 0, entropy = 0;
        for (int i = 0; i < 3; ++i) sum += (expected[i] = std::pow(p[i], 1.0 / t));
        for (int i = 0; i < 3; ++i) {
            expected[i] /= sum;
            // fp32 exp/divide (~1e-7 relative) printed with 6 decimals (±5e-7): 2e-6.
            CHECK(std::fabs(printed[i] - expected[i]) < 2e-6);
            if (printed[i] > 0) entropy -= printed[i] * std::log(printed[i]);
        }
        if (t == 1.0)  // T = 1 leaves the distribution as it was
            for (int i = 0; i < 3; ++i) CHECK(std::fabs(printed[i] - p[i]) < 2e-6);
        if (t == 0.1) CHECK(printed[0] > 0.9999);  // T -> 0: nearly greedy
        CHECK(printed[0] < last_paris);            // higher T: the favourite loses mass,
        CHECK(printed[2] > last_rome);             // the least likely gains it,
        CHECK(entropy > last_entropy);             // the distribution flattens
        last_paris = printed[0];
        last_rome = printed[2];
        last_entropy = entropy;
    }
    // T = 0 is greedy: all the mass on the most probable city (found here, not assumed), and the
    // limit the T = 0.1 row is already within 1e-4 of ((0.15/0.8)^10 ≈ 5e-8).
    const std::vector<double> greedy = numbers(value_of(r.out, "C13 T=0 (greedy)"));
    const std::vector<double> cold = numbers(value_of(r.out, "C13 T=0.1"));
    REQUIRE(greedy.size() == 3);
    const int favourite = static_cast<int>(std::max_element(p, p + 3) - p);
    for (int i = 0; i < 3; ++i) {
        CHECK(greedy[static_cast<size_t>(i)] == (i == favourite ? 1.0 : 0.0));
        CHECK(std::fabs(cold[static_cast<size_t>(i)] - greedy[static_cast<size_t>(i)]) < 1e-4);
    }
    CHECK(r.out.find("C13 T=0 (greedy): Paris ") != std::string::npos);  // city names in p's order
}

TEST_CASE("example 11_generate: the streamed story matches llama2.c; C10 arithmetic") {
    const nlohmann::json g = greedy_golden("Once upon a time", 32);
    const test::Run r = run_example("11_generate");

    const int n_prompt = static_cast<int>(g["prompt_ids"].size());
    const int expected_new = g["steps"].get<int>() - n_prompt + 1;  // run.c's -n counts positions
    CHECK(number(r.out, "max new tokens") == expected_new);
    CHECK(ints(value_of(r.out, "generated ids")) == test::ids_of(g["generated_ids"]));
    CHECK(number(r.out, "generated tokens") == expected_new);
    CHECK(value_of(r.out, "stop reason") == "length");
    CHECK(number(r.out, "cache length at the end") == g["n_forward_passes"].get<int>());

    // The streamed text (which may span lines) is everything between "streamed: " and the ids.
    const size_t from = r.out.find("streamed: ");
    const size_t to = r.out.find("\ngenerated ids:");
    REQUIRE(from != std::string::npos);
    REQUIRE(to != std::string::npos);
    CHECK(r.out.substr(from + 10, to - from - 10) == g["text"].get<std::string>());

    // Timings vary run to run, but they must hang together. Printed with 4 decimals (±5e-5 ms).
    const double rounding = 5e-5;
    const auto check_timings = [&](const std::string& out, int n_tokens) {
        const double ttft = number(out, "timing ttft ms"), tpot = number(out, "timing tpot ms");
        const double total = number(out, "timing total ms");
        const double shortest = number(out, "timing shortest gap ms");
        const double longest = number(out, "timing longest gap ms");
        CHECK(ttft > 0);
        CHECK(total >= ttft);
        CHECK(shortest <= tpot + 2 * rounding);  // a mean lies between the extremes
        CHECK(tpot <= longest + 2 * rounding);
        // The program's own clock around generate() includes everything generate() measured.
        CHECK(number(out, "timing wall clock around generate() ms") >= total - 2 * rounding);
        CHECK(number(out, "timing decode tokens/s") == doctest::Approx(1000.0 / tpot).epsilon(0.01));

        const std::vector<std::string> list = lines_starting(out, "timing token ms:");
        if (list.empty()) return;
        const std::vector<double> t = numbers(list.at(0).substr(16));
        REQUIRE(static_cast<int>(t.size()) == n_tokens);
        CHECK(std::fabs(t.front() - ttft) <= rounding);  // the first token's time is TTFT
        CHECK(std::fabs(t.back() - total) <= rounding);  // the last one's, the total
        double gap_sum = 0, min_gap = 1e300, max_gap = 0;
        for (size_t i = 1; i < t.size(); ++i) {
            const double gap = t[i] - t[i - 1];
            CHECK(gap >= 0);  // chosen one after another
            gap_sum += gap;
            min_gap = std::min(min_gap, gap);
            max_gap = std::max(max_gap, gap);
        }
        // TPOT is the mean gap after the first token: each gap here is off by at most 2 · 5e-5,
        // the printed TPOT by 5e-5.
        CHECK(std::fabs(gap_sum / (n_tokens - 1) - tpot) <= 3 * rounding);
        CHECK(std::fabs(min_gap - shortest) <= 3 * rounding);
        CHECK(std::fabs(max_gap - longest) <= 3 * rounding);
    };
    check_timings(r.out, expected_new);
    CHECK(lines_starting(r.out, "timing token ms:").empty());  // only with --timestamps
    const test::Run stamped = run_example("11_generate", "'Once upon a time' 32 --timestamps");
    CHECK(ints(value_of(stamped.out, "generated ids")) == test::ids_of(g["generated_ids"]));
    REQUIRE(lines_starting(stamped.out, "timing token ms:").size() == 1);
    check_timings(stamped.out, expected_new);

    // C10: TTFT = prefill; TPOT = 1/50 s; latency = TTFT + 199 · TPOT. Printed with 2 decimals
    // (1 for milliseconds), hence the tolerances.
    const double ttft = 0.4, tpot = 1.0 / 50, decode = 199 * tpot, total = ttft + decode;
    CHECK(number(r.out, "C10 tokens in") == 1000);
    CHECK(number(r.out, "C10 tokens out") == 200);
    CHECK(std::fabs(number(r.out, "C10 ttft s") - ttft) < 0.005);
    CHECK(std::fabs(number(r.out, "C10 tpot ms") - 1000 * tpot) < 0.05);
    CHECK(number(r.out, "C10 remaining tokens") == 199);
    CHECK(std::fabs(number(r.out, "C10 decode s") - 3.98) < 0.005);
    CHECK(std::fabs(decode - 3.98) < 1e-9);
    CHECK(std::fabs(number(r.out, "C10 total latency s") - 4.38) < 0.005);
    CHECK(std::fabs(total - 4.38) < 1e-9);
}

}  // namespace test_examples_generate
