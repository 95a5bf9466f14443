// speculative_bench — when speculative decoding pays (issue 15, C15): tokens/s with and without
// a draft, measured in the same process (the plain run is the peer every ratio is taken to).
//
//   speculative_bench [--runs R] [--threads T] [--tokens N] [--shape NAME]
//
// Part 1, the shipped model (stories260K) on the fast CPU path, greedy from "Once upon a time":
// plain decoding, the model's first layers as the draft (layers:4, layers:3) and prompt lookup
// (ngram:3), k = 4: target passes per token, acceptance, tokens/s.
// Part 2, a big shape with random weights (stories110M by default), where a pass is limited by
// reading the weights: an oracle draft that costs nothing and proposes the plain run's own next
// token with probability a (else a wrong one), k = 4, a = 0.5 .. 0.9. Tokens per pass should
// follow (1 - a^(k+1)) / (1 - a); the speedup is that, less what a (k+1)-row pass costs over a
// 1-row one.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/speculative.hpp"

namespace {

// Proposes the true continuation (a run without speculation) token by token, each right with
// probability `a`; the first wrong guess is the truth + 1, and greedy verification stops there.
class OracleDrafter : public glass::Drafter {
public:
    OracleDrafter(std::vector<int> truth, double a, int vocab) : truth_(std::move(truth)), a_(a), vocab_(vocab) {}
    std::string name() const override { return "oracle"; }
    glass::Draft propose(std::span<const int> ids, int k, const glass::SamplingParams&, glass::Llama2cRng&) override {
        glass::Draft d;
        for (size_t pos = ids.size(); d.tokens.size() < static_cast<size_t>(k) && pos < truth_.size(); ++pos) {
            const bool right = std::uniform_real_distribution<double>(0, 1)(rng_) < a_;
            d.tokens.push_back(right ? truth_[pos] : (truth_[pos] + 1) % vocab_);
            if (!right) break;  // the rest would be judged after a rejection: never
        }
        return d;
    }

private:
    std::vector<int> truth_;  // prompt + the plain run's tokens
    double a_;
    int vocab_;
    std::mt19937 rng_{1};
};

struct Row {
    double tokens_per_s = 0, passes_per_token = 0, acceptance = 0;
    int tokens = 0;
    glass::fast::Stat rate;
};

// Median tokens/s over `runs` runs of one configuration (draft == nullptr: plain generate).
Row measure(glass::Session& target, const std::function<std::unique_ptr<glass::Drafter>()>& make_drafter,
            const glass::Tokenizer& tok, const std::vector<int>& prompt, const glass::GenerateOptions& options, int k,
            int runs) {
    Row row;
    std::vector<double> rates;
    for (int r = -1; r < runs; ++r) {  // run -1 warms up (caches, page faults) and is not counted
        std::unique_ptr<glass::Drafter> drafter = make_drafter ? make_drafter() : nullptr;
        const auto t0 = std::chrono::steady_clock::now();
        glass::SpeculativeResult s;
        if (drafter) s = glass::generate_speculative_from_ids(target, *drafter, tok, prompt, options, {.k = k});
        else s.result = glass::generate_from_ids(target, tok, prompt, options);
        const double seconds = glass::fast::seconds_since(t0);
        row.tokens = static_cast<int>(s.result.generated_ids.size());
        if (r >= 0) rates.push_back(row.tokens / seconds);
        row.passes_per_token = drafter ? double(s.stats.target_passes) / row.tokens : 1.0;
        row.acceptance = s.stats.acceptance_rate();
    }
    row.rate = glass::fast::stat_of(rates);
    row.tokens_per_s = row.rate.median;
    return row;
}

void print_row(const char* name, const Row& r, double plain, bool drafted = true) {
    std::printf("| %s | %d | %.3f | %s | %.1f [%.1f – %.1f] | %.2f |\n", name, r.tokens, r.passes_per_token,
                drafted ? std::to_string(r.acceptance).substr(0, 5).c_str() : "—", r.tokens_per_s, r.rate.min,
                r.rate.max, r.tokens_per_s / plain);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        int runs = 5, threads = 2, tokens = 200;
        std::string shape = "stories110M";
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
            else if (a == "--threads" && i + 1 < argc) threads = std::stoi(argv[++i]);
            else if (a == "--tokens" && i + 1 < argc) tokens = std::stoi(argv[++i]);
            else if (a == "--shape" && i + 1 < argc) shape = argv[++i];
            else {
                std::fprintf(stderr, "usage: speculative_bench [--runs R] [--threads T] [--tokens N] [--shape NAME]\n");
                return 2;
            }
        }
        const int k = 4;
        glass::fast::FastOptions fast;
        fast.threads = threads;
        glass::GenerateOptions options;
        options.sampling.temperature = 0;
        options.max_new_tokens = tokens;
        options.stop_on_bos = options.stop_on_eos = false;  // every run generates `tokens`

        // ---- Part 1: the shipped model ----
        const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
        const auto tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", model.config.vocab_size);
        const std::vector<int> prompt = tok.encode("Once upon a time", true, false);
        glass::fast::FastCpuSession target(model, fast);
        std::printf("Part 1: stories260K, fast CPU path, %d thread(s), fp32, greedy, %d tokens, k = %d, median of %d runs\n\n",
                    threads, tokens, k, runs);
        std::printf("| draft | tokens | target passes per token | acceptance | tokens/s [min – max] | vs plain |\n|---|---:|---:|---:|---:|---:|\n");
        const Row plain = measure(target, nullptr, tok, prompt, options, k, runs);
        print_row("none (plain decoding)", plain, plain.tokens_per_s, false);
        std::vector<std::unique_ptr<glass::Model>> drafts;
        for (const int layers : {4, 3}) {
            drafts.push_back(std::make_unique<glass::Model>(glass::first_layers(model, layers)));
            const glass::Model& d = *drafts.back();
            const Row r = measure(target, [&] {
                return std::make_unique<glass::ModelDrafter>(std::make_unique<glass::fast::FastCpuSession>(d, fast), "layers");
            }, tok, prompt, options, k, runs);
            print_row(("layers:" + std::to_string(layers)).c_str(), r, plain.tokens_per_s);
        }
        print_row("ngram:3", measure(target, [] { return std::make_unique<glass::NgramDrafter>(3); }, tok, prompt,
                                     options, k, runs), plain.tokens_per_s);

        // ---- Part 2: a big shape, an oracle draft ----
        const glass::ModelConfig c = glass::fast::shape_config(shape);
        const glass::Model big = glass::fast::random_model_in_memory(c, 1);
        // Llama 2's 32,000-piece tokenizer (../shared) for the shapes with that vocabulary; the text is never read.
        const auto big_tok = glass::Llama2cTokenizer::load(std::string(GLASS_SHARED_DIR) + "/models/tokenizer.bin", c.vocab_size);
        glass::fast::FastCpuSession big_target(big, fast);
        const std::vector<int> big_prompt = {1, 500, 600, 700};
        glass::GenerateOptions big_options = options;
        big_options.max_new_tokens = std::min(tokens, c.seq_len - 8);
        std::printf("\nPart 2: %s shape (random weights, %.0f MB of fp32 weights), fast CPU path, %d thread(s), greedy, "
                    "%d tokens, k = %d, an oracle draft right with probability a (it costs nothing)\n\n",
                    shape.c_str(), big.weight_bytes / 1e6, threads, big_options.max_new_tokens, k);
        std::printf("| draft | tokens | target passes per token | acceptance | tokens/s [min – max] | vs plain | tokens per pass, theory |\n"
                    "|---|---:|---:|---:|---:|---:|---:|\n");
        const glass::GenerateResult truth_run = glass::generate_from_ids(big_target, big_tok, big_prompt, big_options);
        std::vector<int> truth = big_prompt;
        truth.insert(truth.end(), truth_run.generated_ids.begin(), truth_run.generated_ids.end());
        const Row big_plain = measure(big_target, nullptr, big_tok, big_prompt, big_options, k, runs);
        std::printf("| none (plain decoding) | %d | 1.000 | — | %.1f [%.1f – %.1f] | 1.00 | 1.00 |\n", big_plain.tokens,
                    big_plain.tokens_per_s, big_plain.rate.min, big_plain.rate.max);
        for (const double a : {0.5, 0.6, 0.7, 0.8, 0.9}) {
            const Row r = measure(big_target, [&] { return std::make_unique<OracleDrafter>(truth, a, c.vocab_size); },
                                  big_tok, big_prompt, big_options, k, runs);
            const double theory = (1 - std::pow(a, k + 1)) / (1 - a);
            std::printf("| oracle a = %.1f | %d | %.3f | %.3f | %.1f [%.1f – %.1f] | %.2f | %.2f |\n", a, r.tokens,
                        r.passes_per_token, r.acceptance, r.tokens_per_s, r.rate.min, r.rate.max,
                        r.tokens_per_s / big_plain.tokens_per_s, theory);
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "speculative_bench: %s\n", e.what());
        return 1;
    }
}
