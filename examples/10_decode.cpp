// 10_decode — journey step 8: one new position per step, reading everything else from the cache.
//
// In:  the prompt "Once upon a time" -> ids [5] (tok512, BOS first); the shipped model.
// Out: for each of 10 decode steps: the position the fed token is written at, the cache length
//      after the step (one more each time), the greedy choice, and a live check of C5:
//      the decode logits [512] against a full recomputation — a fresh session that prefills the
//      whole sequence so far in one pass, without any cache from earlier steps.
//
// Error measure: max_i |decode_i - full_i| / max_i |full_i| — the largest logit difference
// relative to the largest logit. (Dividing each logit by itself would blow up for logits near 0.)
// The two paths differ only in the order fp32 sums are taken (matrix-vector vs matrix-matrix
// products), so the error is rounding-sized: a few 1e-7, and at most 1e-5.
//
// Usage: 10_decode [prompt] [steps]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/transformer.hpp"

// Greedy: the id with the largest logit (the first one on a tie).
static int argmax(std::span<const float> logits) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(logits.size()); ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int run(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);

    const std::string prompt = argc > 1 ? argv[1] : "Once upon a time";
    const int steps = argc > 2 ? example::int_arg(argv[2], "steps", 1, 512) : 10;
    std::vector<int> sequence = tok.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const int n_prompt = static_cast<int>(sequence.size());

    std::printf("prompt: %s\n", prompt.c_str());
    std::printf("prompt tokens: %d\n", n_prompt);

    // Prefill once; its last logits choose the first new token (not yet cached).
    glass::CpuSession session(model);
    int next = argmax(session.prefill(sequence));
    std::printf("after prefill: cache length %d, first token %d \"%s\"\n",
                session.cache().length(), next, tok.piece(next).c_str());
    std::vector<int> generated = {next};
    std::string text = prompt + tok.decode(sequence.back(), next);

    float worst = 0.0f;
    for (int step = 1; step <= steps; ++step) {
        // Feed the last chosen token: its K/V go into row `position` of every layer.
        const int position = session.position();
        const int fed = next;
        const std::span<const float> decoded = session.decode(fed);
        const std::vector<float> decode_logits(decoded.begin(), decoded.end());
        sequence.push_back(fed);

        // C5, checked live: recompute the same logits from scratch, all positions in one pass.
        glass::CpuSession fresh(model);
        const std::span<const float> full = fresh.prefill(sequence);
        float max_diff = 0.0f, max_full = 0.0f;
        for (size_t i = 0; i < full.size(); ++i) {
            max_diff = std::max(max_diff, std::fabs(decode_logits[i] - full[i]));
            max_full = std::max(max_full, std::fabs(full[i]));
        }
        const float rel_err = max_diff / max_full;
        worst = std::max(worst, rel_err);

        next = argmax(decode_logits);
        generated.push_back(next);
        text += tok.decode(fed, next);
        std::printf("step %d: position %d, cache length %d, fed %d, chose %d \"%s\", "
                    "rel err vs recompute %.3g\n",
                    step, position, session.cache().length(), fed, next, tok.piece(next).c_str(),
                    rel_err);
    }

    std::printf("generated ids:");
    for (int id : generated) std::printf(" %d", id);
    std::printf("\n");
    std::printf("text: %s\n", text.c_str());
    std::printf("max rel err: %.3g\n", worst);
    std::printf("decode equals recompute (<= 1e-5): %s\n", worst <= 1e-5f ? "yes" : "NO");
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
