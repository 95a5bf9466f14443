// tests/cuda/test_cuda_ops_sampling.cpp — token choice: argmax and sampling (temperature, top-p, top-k,
// min-p, both nucleus rules) against the host's choice for the same coins.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

namespace {

// Logits spaced at least 6/vocab apart (a random permutation of a ramp): no two probabilities are
// within rounding of each other, so CPU and GPU must agree on every token.
std::vector<float> separated_logits(Rng& rng, int vocab) {
    std::vector<int> rank(static_cast<std::size_t>(vocab));
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    std::vector<float> logits(rank.size());
    for (std::size_t i = 0; i < rank.size(); ++i) logits[i] = 6.0f * float(rank[i]) / float(vocab) - 3.0f;
    return logits;
}

}  // namespace

void add_sampling(std::vector<Case>& cases) {
    for (int vocab : {1, 2, 512, 32000, 128256})
        cases.push_back({fmt("argmax(vocab=%d, ties -> lowest id)", vocab), 0.0, vocab > 100000, [vocab](Rng& rng) {
            std::vector<float> logits = random_floats(rng, std::size_t(vocab));
            if (vocab > 2) {  // the maximum twice: the lower id must win
                std::uniform_int_distribution<int> pick(0, vocab - 1);
                const int a = pick(rng), b = pick(rng);
                logits[std::size_t(a)] = logits[std::size_t(b)] = 10.0f;
            }
            gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
            gc::DeviceSampler sampler(vocab);
            return double(sampler.argmax(d.f32()) != glass::sample_argmax(logits));
        }});
    using glass::NucleusRule;
    struct P { float temperature, top_p; int top_k; float min_p; NucleusRule nucleus = NucleusRule::exceeds_p_llama2c; };
    const P params[] = {P{1.0f, 1.0f, 0, 0.0f}, P{1.0f, 0.9f, 0, 0.0f}, P{0.7f, 0.95f, 0, 0.0f},
                        P{1.0f, 1.0f, 40, 0.0f}, P{1.0f, 1.0f, 0, 0.05f}, P{1.2f, 0.8f, 50, 0.0f},
                        P{0.9f, 0.9f, 20, 0.02f}, P{0.0f, 0.9f, 0, 0.0f},
                        P{1.0f, 0.9f, 0, 0.0f, NucleusRule::reaches_p}, P{0.7f, 0.95f, 0, 0.0f, NucleusRule::reaches_p},
                        P{0.9f, 0.9f, 20, 0.02f, NucleusRule::reaches_p}};
    const auto rule_name = [](NucleusRule r) { return r == NucleusRule::reaches_p ? ", reaches_p" : ""; };
    for (int vocab : {1, 2, 512, 32000})
        for (P p : params)
            cases.push_back({fmt("sample(vocab=%d, T=%g, top_p=%g, top_k=%d, min_p=%g%s; draws, mismatches)",
                                 vocab, double(p.temperature), double(p.top_p), p.top_k, double(p.min_p),
                                 rule_name(p.nucleus)),
                             0.0, vocab >= 32000, [vocab, p](Rng& rng) {
                const glass::SamplingParams params{.temperature = p.temperature, .top_p = p.top_p, .top_k = p.top_k,
                                                   .min_p = p.min_p, .nucleus = p.nucleus};
                glass::Llama2cRng cpu_rng(1234), gpu_rng(1234);  // same seed: same coins
                gc::DeviceSampler sampler(vocab);
                int mismatches = 0;
                for (int draw = 0; draw < g_sample_draws; ++draw) {
                    const std::vector<float> logits = separated_logits(rng, vocab);
                    gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
                    mismatches += sampler.sample(d.f32(), params, gpu_rng) != glass::sample(logits, params, cpu_rng);
                }
                if (cpu_rng.state() != gpu_rng.state()) mismatches += 1000;  // a different number of draws
                return double(mismatches);
            }});
    // A running sum that lands exactly on top_p: 0.5 + 0.25 = 0.75 with no rounding, where the two
    // rules keep different sets (reaches_p {0.5, 0.25}, llama2.c {0.5, 0.25, 0.125}). Every draw
    // must match the host's; under llama2.c's rule some draws must land on the third token, so a
    // flipped comparison on the device cannot hide. The logits are ln p; the host's softmax gives
    // p back exactly (checked: a failure to do so fails the row with 2000).
    for (NucleusRule rule : {NucleusRule::reaches_p, NucleusRule::exceeds_p_llama2c})
        cases.push_back({fmt("sample(exact landing: p 0.5/0.25/0.125/0.125, top_p=0.75%s; mismatches)",
                             rule == NucleusRule::reaches_p ? ", reaches_p" : ", exceeds_p_llama2c"),
                         0.0, false, [rule](Rng&) {
            const std::vector<float> probs = {0.125f, 0.5f, 0.125f, 0.25f};  // descending: ids 1, 3, 0, 2
            std::vector<float> logits;
            for (float x : probs) logits.push_back(std::log(x));
            if (glass::probabilities(logits, 1.0f) != probs) return 2000.0;
            glass::SamplingParams params;
            params.top_p = 0.75f;
            params.nucleus = rule;
            gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
            gc::DeviceSampler sampler(4);
            glass::Llama2cRng cpu_rng(77), gpu_rng(77);
            int mismatches = 0, third = 0;
            for (int draw = 0; draw < 64; ++draw) {
                const int host = glass::sample(logits, params, cpu_rng);
                mismatches += sampler.sample(d.f32(), params, gpu_rng) != host;
                third += host == 0;
            }
            const bool third_kept = rule == NucleusRule::exceeds_p_llama2c;
            if ((third > 0) != third_kept) mismatches += 1000;  // the host itself broke the rule
            return double(mismatches);
        }});
    cases.push_back({"sample(non-finite logit -> glass::Error naming it)", 0.0, false, [](Rng& rng) {
        std::vector<float> logits = random_floats(rng, 100);
        logits[37] = NAN;
        gc::DeviceBuffer d = gc::to_device(std::span<const float>(logits));
        gc::DeviceSampler sampler(100);
        glass::Llama2cRng coin(1);
        int refused = 0;
        for (float t : {0.0f, 1.0f}) {
            try {
                sampler.sample(d.f32(), {t, 0.9f, 0, 0.0f}, coin);
            } catch (const glass::Error& e) {
                refused += std::strstr(e.what(), "token 37") != nullptr;
            }
        }
        return double(2 - refused);
    }});
}

}  // namespace cuda_ops_test
