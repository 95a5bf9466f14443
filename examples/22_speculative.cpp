// 22_speculative — speculative decoding: guess several tokens cheaply, check them in one pass (C15).
//
// In:  the shipped model (stories260K, 5 layers) and tok512; the prompt "Once upon a time",
//      greedy, 60 new tokens; a draft of the model's own first N layers (default 4) proposing
//      k tokens per round (default 4).
// Out: every round of the generation: what the draft proposed, which of it the model kept, and
//      the token the model's own pass added; then the result against plain greedy decoding (the
//      same ids?) and what it cost: target passes, drafted and accepted tokens.
//      Then C15's claim for sampling, on made-up distributions over 10 tokens: the first token
//      each round emits follows the target's distribution p under the exact rule, and the
//      draft's q under a wrong rule that accepts every draft.
//
// Usage: 22_speculative [k [layers]]      k in [1, 16], layers in [1, 4]
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/speculative.hpp"
#include "glass/transformer.hpp"

namespace {

// Text with its newlines shown as \n, so that each round stays on one line.
std::string shown(std::string s) {
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', at + 2)) s.replace(at, 1, "\\n");
    return s;
}

// "text" of each id after the one before it, quoted, separated by " | ".
std::string pieces(const glass::Llama2cTokenizer& tok, int prev, const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) {
        s += (s.empty() ? "\"" : " | \"") + shown(tok.decode(prev, id)) + "\"";
        prev = id;
    }
    return s.empty() ? "(nothing)" : s;
}

// Total variation distance 1/2 sum |a - b|.
double total_variation(const std::vector<double>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - double(b[i]));
    return d / 2;
}

std::vector<float> made_up_distribution(std::mt19937& rng, int n) {
    std::vector<float> p(static_cast<size_t>(n));
    float sum = 0;
    for (float& x : p) {
        const float u = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        sum += x = u * u * u;
    }
    for (float& x : p) x /= sum;
    return p;
}

// How often each token comes first out of a round, over `rounds` rounds: target p_0..p_k (as
// logits ln p), drafts drawn from q_1..q_k.
std::vector<double> first_emitted(const std::vector<std::vector<float>>& p, const std::vector<std::vector<float>>& q,
                                  int rounds, glass::AcceptRule rule) {
    std::vector<float> logits;
    for (const auto& row : p)
        for (float x : row) logits.push_back(std::log(x));
    const int vocab = static_cast<int>(p[0].size());
    glass::Llama2cRng rule_rng(7), draft_rng(8);
    std::vector<double> freq(static_cast<size_t>(vocab), 0.0);
    for (int r = 0; r < rounds; ++r) {
        glass::Draft d;
        for (const auto& qi : q) {
            d.tokens.push_back(glass::draw_in_id_order(qi, draft_rng.next_f32()));
            d.q.push_back(qi);
        }
        freq[static_cast<size_t>(glass::judge_draft(logits, vocab, d, {}, rule_rng, rule).emitted[0])] += 1.0 / rounds;
    }
    return freq;
}

}  // namespace

static int run(int argc, char** argv) {
    const int k = argc > 1 ? example::int_arg(argv[1], "k", 1, 16) : 4;
    const int n_layers = argc > 2 ? example::int_arg(argv[2], "layers", 1, 4) : 4;

    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const auto tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", model.config.vocab_size);
    const std::string prompt = "Once upon a time";
    glass::GenerateOptions options;
    options.sampling.temperature = 0;  // greedy: speculation must give exactly these tokens
    options.max_new_tokens = 60;

    std::printf("C15: speculative decoding on the shipped model (stories260K, %d layers), greedy\n", model.config.n_layers);
    std::printf("prompt: %s\n", prompt.c_str());
    std::printf("draft: the model's first %d layers, with its final norm and classifier; k = %d tokens per round\n",
                n_layers, k);

    glass::CpuSession target(model);
    const glass::Model draft_model = glass::first_layers(model, n_layers);
    glass::ModelDrafter drafter(std::make_unique<glass::CpuSession>(draft_model), "layers:" + std::to_string(n_layers));
    const glass::SpeculativeResult s = glass::generate_speculative(target, drafter, tok, prompt, options, {.k = k});

    // Each round: the draft's guesses, how many the model kept, and the model's own token.
    std::printf("\n");
    int prev = s.result.prompt_ids.back(), round_no = 0;
    std::printf("round 0 (prefill): the model's own: %s\n",
                pieces(tok, prev, {s.result.generated_ids.at(0)}).c_str());
    prev = s.result.generated_ids.at(0);
    for (const glass::SpeculativeRound& r : s.stats.rounds) {
        const std::vector<int> kept(r.emitted.begin(), r.emitted.begin() + r.accepted);
        std::printf("round %d: drafted %s -> kept %d/%zu, then the model's own: %s\n", ++round_no,
                    pieces(tok, prev, r.drafted).c_str(), r.accepted, r.drafted.size(),
                    pieces(tok, kept.empty() ? prev : kept.back(), {r.emitted.back()}).c_str());
        prev = r.emitted.back();
    }

    // The same request without a draft: one target pass per token.
    glass::CpuSession plain_session(model);
    const glass::GenerateResult plain = glass::generate(plain_session, tok, prompt, options);
    const int n = static_cast<int>(s.result.generated_ids.size());
    std::printf("\ntext: %s\n", shown(prompt + s.result.text).c_str());
    std::printf("generated tokens: %d\n", n);
    std::printf("identical to plain greedy: %s\n", s.result.generated_ids == plain.generated_ids ? "yes" : "NO");
    // Plain: the prefill gives the first token, one decode pass each of the others.
    std::printf("target passes, plain: %d\n", static_cast<int>(plain.generated_ids.size()));
    std::printf("target passes, speculative: %d\n", s.stats.target_passes);
    std::printf("drafted tokens: %lld\n", static_cast<long long>(s.stats.proposed));
    std::printf("accepted tokens: %lld\n", static_cast<long long>(s.stats.accepted));
    std::printf("acceptance rate: %.3f\n", s.stats.acceptance_rate());
    std::printf("tokens per target pass: %.3f\n", double(n) / s.stats.target_passes);
    // A pass of the draft reads n_layers/5 of the layers' weights (plus the shared classifier).
    std::printf("draft weight bytes per token / target's: %.3f\n",
                double(draft_model.weight_bytes) / double(model.weight_bytes));

    // C15 for sampling: made-up p (target, 3 positions) and q (draft, 2 positions) over 10 tokens.
    std::mt19937 rng(2026);
    std::vector<std::vector<float>> p, q;
    for (int i = 0; i < 3; ++i) p.push_back(made_up_distribution(rng, 10));
    for (int i = 0; i < 2; ++i) q.push_back(made_up_distribution(rng, 10));
    const int rounds = 100000;
    const std::vector<double> exact = first_emitted(p, q, rounds, glass::AcceptRule::exact);
    const std::vector<double> wrong = first_emitted(p, q, rounds, glass::AcceptRule::always_accept);
    std::printf("\nC15 sampling: 10 tokens, k = 2, %d rounds; distance = total variation (0 = identical, 1 = disjoint)\n", rounds);
    std::printf("distance between the target's p and the draft's q: %.4f\n",
                total_variation(std::vector<double>(q[0].begin(), q[0].end()), p[0]));
    std::printf("first token per round, exact rule, distance to p: %.4f\n", total_variation(exact, p[0]));
    std::printf("first token per round, accept-every-draft rule, distance to p: %.4f\n", total_variation(wrong, p[0]));
    std::printf("first token per round, accept-every-draft rule, distance to q: %.4f\n", total_variation(wrong, q[0]));
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
