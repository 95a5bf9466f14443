// 09_sampling — journey step 7: from the model's scores to one token (C11, C12, C13).
//
// In:  small made-up distributions over city names, as probabilities p [n] or as logits
//      log(p) [n] (softmax(log p) = p, so the model "meant" exactly p).
// Out: C11 greedy always picks the most probable token;
//      C12 top-p 0.9 keeps the smallest most-probable set whose mass exceeds 0.9, renormalised;
//      C13 temperature T rescales logits before softmax: T -> 0 approaches greedy, T = 1 leaves
//          the distribution unchanged, T > 1 flattens it.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/glass.hpp"

int main() {
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

    // ---- C12: top-p 0.9 on Paris 0.80 / Lyon 0.10 / Rome 0.05 / Berlin 0.05 ----
    const std::vector<std::string> c12_names = {"Paris", "Lyon", "Rome", "Berlin"};
    const std::vector<float> c12_p = {0.80f, 0.10f, 0.05f, 0.05f};
    const float top_p = 0.9f;

    std::vector<glass::Candidate> candidates = glass::sorted_candidates(c12_p);
    std::printf("C12 top_p: %.9g\n", top_p);
    float cumulative = 0.0f;
    for (const glass::Candidate& c : candidates) {
        cumulative += c.p;
        std::printf("C12 running sum after %s: %.9g (exceeds top_p: %s)\n", c12_names[c.id].c_str(),
                    cumulative, cumulative > top_p ? "yes" : "no");
    }
    // An honest footnote: 0.8 + 0.1 is exactly 0.9 on paper, which does not "exceed" 0.9. In fp32
    // neither 0.8, 0.1 nor 0.9 is exact, and the rounded sum 0.8f + 0.1f lands one step above
    // 0.9f — so the nucleus stops at Lyon, as the article says. The "reaches p" reading gives the
    // same set without relying on rounding.
    std::printf("C12 fp32 0.8f + 0.1f > 0.9f: %s\n", (0.8f + 0.1f > 0.9f) ? "yes" : "no");

    glass::keep_top_p(candidates, top_p);
    glass::renormalize(candidates);
    std::printf("C12 kept:");
    for (const glass::Candidate& c : candidates) std::printf(" %s", c12_names[c.id].c_str());
    std::printf("\n");
    std::printf("C12 kept count: %zu\n", candidates.size());
    std::printf("C12 renormalized:");
    for (const glass::Candidate& c : candidates) std::printf(" %s %.6f", c12_names[c.id].c_str(), c.p);
    std::printf("\n\n");

    // ---- C13: temperature, on the logits of C11 ----
    // p_T = softmax(log(p) / T), i.e. proportional to p^(1/T).
    std::printf("C13 T=0 (greedy): Paris 1.000000 Lyon 0.000000 Rome 0.000000\n");
    for (float t : {0.1f, 0.5f, 1.0f, 2.0f, 5.0f}) {
        const std::vector<float> p = glass::probabilities(c11_logits, t);
        std::printf("C13 T=%.1f:", t);
        for (int i = 0; i < 3; ++i) std::printf(" %s %.6f", c11_names[i].c_str(), p[i]);
        std::printf("\n");
    }
    return 0;
}
