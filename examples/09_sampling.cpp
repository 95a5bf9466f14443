// 09_sampling — journey step 7: from the model's scores to one token (C11, C12, C13).
//
// In:  small made-up distributions over city names, as probabilities p [n] or as logits
//      log(p) [n] (softmax(log p) = p, so the model "meant" exactly p); optionally a top-p
//      value for C12 (default 0.9).
// Out: C11 greedy always picks the most probable token;
//      C12 top-p keeps the smallest most-probable set whose probability reaches top_p (the
//          textbook rule), renormalised. On paper (whole percents) and in fp32 (glass) side by
//          side with llama2.c's rule, which keeps going until the sum exceeds top_p; then a
//          distribution whose running sum lands exactly on top_p even in fp32, where the two
//          rules keep different sets;
//      C13 temperature T rescales logits before softmax: T -> 0 approaches greedy (T = 0 is the
//          one-hot distribution greedy draws from), T = 1 leaves the distribution unchanged,
//          T > 1 flattens it.
//
// Usage: 09_sampling [top_p]      top_p in (0, 1] for C12, e.g. 09_sampling 0.95
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/sampling.hpp"

namespace {

const char* const kTextbook = "textbook rule (sum >= p)";
const char* const kLlama2c = "llama2.c rule (sum > p)";

// The names of the kept candidates, in order.
std::string names_of(const std::vector<glass::Candidate>& kept, const std::vector<std::string>& names) {
    std::string s;
    for (const glass::Candidate& c : kept) s += (s.empty() ? "" : " ") + names[static_cast<size_t>(c.id)];
    return s;
}

// glass's nucleus truncation of `p` (fp32) with one rule.
std::vector<glass::Candidate> nucleus(const std::vector<float>& p, float top_p, glass::NucleusRule rule) {
    std::vector<glass::Candidate> c = glass::sorted_candidates(p);
    glass::keep_top_p(c, top_p, rule);
    return c;
}

// How many of the (descending) percents a rule keeps, on paper: integers, no rounding anywhere.
int kept_on_paper(const std::vector<int>& percent, double top_p_percent, bool reaches) {
    int sum = 0;
    for (size_t i = 0; i < percent.size(); ++i) {
        sum += percent[i];
        if (reaches ? sum >= top_p_percent : sum > top_p_percent) return static_cast<int>(i) + 1;
    }
    return static_cast<int>(percent.size());
}

}  // namespace

static int run(int argc, char** argv) {
    const double top_p_arg = argc > 1 ? example::number_arg(argv[1], "top_p", 1e-6, 1.0) : 0.9;

    // ---- C11: greedy on Paris 0.80 / Lyon 0.15 / Rome 0.05 ----
    const std::vector<std::string> c11_names = {"Paris", "Lyon", "Rome"};
    const std::vector<float> c11_p = {0.80f, 0.15f, 0.05f};
    std::vector<float> c11_logits;
    for (float p : c11_p) c11_logits.push_back(std::log(p));

    glass::SamplingParams greedy;
    greedy.temperature = 0.0f;
    glass::Llama2cRng rng(42);
    const int draws = 1000;
    int paris = 0;
    for (int i = 0; i < draws; ++i)
        if (glass::sample(c11_logits, greedy, rng) == 0) ++paris;
    std::printf("C11 greedy pick: %s\n", c11_names[glass::sample_argmax(c11_logits)].c_str());
    std::printf("C11 greedy picks Paris in: %d of %d\n", paris, draws);

    // For contrast: plain sampling at T = 1 follows the probabilities instead.
    glass::SamplingParams plain;  // temperature 1, no truncation
    std::vector<int> counts(3, 0);
    const int many = 10000;
    for (int i = 0; i < many; ++i) ++counts[glass::sample(c11_logits, plain, rng)];
    std::printf("C11 sampling at T=1, %d draws (seed 42): Paris %.4f Lyon %.4f Rome %.4f\n\n", many,
                counts[0] / double(many), counts[1] / double(many), counts[2] / double(many));

    // ---- C12: top-p on Paris 0.80 / Lyon 0.10 / Rome 0.05 / Berlin 0.05 ----
    const std::vector<std::string> c12_names = {"Paris", "Lyon", "Rome", "Berlin"};
    const std::vector<int> c12_percent = {80, 10, 5, 5};  // already in descending order
    const std::vector<float> c12_p = {0.80f, 0.10f, 0.05f, 0.05f};
    const float top_p = static_cast<float>(top_p_arg);
    const double top_p_percent = std::round(top_p_arg * 1e6) / 1e4;  // 0.9 -> exactly 90

    // On paper: whole percents, so every sum is exact.
    std::printf("C12 top_p: %g\n", top_p_arg);
    std::printf("C12 on paper, running sum in percent:");
    int sum = 0;
    for (int percent : c12_percent) std::printf(" %d", sum += percent);
    std::printf("\n");
    std::vector<glass::Candidate> paper;
    for (size_t i = 0; i < c12_percent.size(); ++i) paper.push_back({static_cast<int>(i), 0.0f});
    for (bool reaches : {true, false}) {
        const int n = kept_on_paper(c12_percent, top_p_percent, reaches);
        const std::vector<glass::Candidate> kept(paper.begin(), paper.begin() + n);
        std::printf("C12 on paper, %s keeps: %s\n", reaches ? kTextbook : kLlama2c, names_of(kept, c12_names).c_str());
    }

    // In fp32, as glass computes it: neither 0.8, 0.1 nor 0.9 is exact, and 0.8f + 0.1f rounds
    // one step above 0.9f. So llama2.c's "exceeds" rule stops at Lyon too, by rounding.
    std::printf("C12 fp32 top_p: %.9g\n", top_p);
    std::printf("C12 fp32 running sum:");
    float cumulative = 0.0f;
    for (const glass::Candidate& c : glass::sorted_candidates(c12_p)) std::printf(" %.9g", cumulative += c.p);
    std::printf("\n");
    std::vector<glass::Candidate> textbook = nucleus(c12_p, top_p, glass::NucleusRule::reaches_p);
    const std::vector<glass::Candidate> llama2c = nucleus(c12_p, top_p, glass::NucleusRule::exceeds_p_llama2c);
    std::printf("C12 fp32, %s keeps: %s\n", kTextbook, names_of(textbook, c12_names).c_str());
    std::printf("C12 fp32, %s keeps: %s\n", kLlama2c, names_of(llama2c, c12_names).c_str());
    glass::renormalize(textbook);
    std::printf("C12 kept count: %zu\n", textbook.size());
    std::printf("C12 renormalized:");
    for (const glass::Candidate& c : textbook) std::printf(" %s %.6f", c12_names[c.id].c_str(), c.p);
    std::printf("\n\n");

    // ---- Where the rules part: a running sum that lands exactly on top_p, even in fp32 ----
    // Halves, quarters and eighths are exact binary fractions, so 0.5 + 0.25 is exactly 0.75.
    const std::vector<float> exact_p = {0.5f, 0.25f, 0.125f, 0.125f};
    const float exact_top_p = 0.75f;
    std::printf("exact distribution:");
    for (size_t i = 0; i < exact_p.size(); ++i) std::printf(" %s %g", c12_names[i].c_str(), exact_p[i]);
    std::printf("\n");
    std::printf("exact top_p: %g\n", exact_top_p);
    std::printf("exact running sum:");
    cumulative = 0.0f;
    for (float p : exact_p) std::printf(" %g", cumulative += p);
    std::printf("\n");
    std::printf("exact, %s keeps: %s\n", kTextbook,
                names_of(nucleus(exact_p, exact_top_p, glass::NucleusRule::reaches_p), c12_names).c_str());
    std::printf("exact, %s keeps: %s\n\n", kLlama2c,
                names_of(nucleus(exact_p, exact_top_p, glass::NucleusRule::exceeds_p_llama2c), c12_names).c_str());

    // ---- C13: temperature, on the logits of C11 ----
    // p_T = softmax(log(p) / T), i.e. proportional to p^(1/T). sampling_distribution() is what
    // sample() draws from; at T = 0 that is greedy's one-hot distribution.
    for (float t : {0.0f, 0.1f, 0.5f, 1.0f, 2.0f, 5.0f}) {
        glass::SamplingParams params;
        params.temperature = t;
        const std::vector<float> p = glass::sampling_distribution(c11_logits, params);
        if (t == 0.0f) std::printf("C13 T=0 (greedy):");
        else std::printf("C13 T=%.1f:", t);
        for (int i = 0; i < 3; ++i) std::printf(" %s %.6f", c11_names[i].c_str(), p[i]);
        std::printf("\n");
    }
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
