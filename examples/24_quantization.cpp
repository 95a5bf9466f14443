// 24_quantization — the toolbox's quantization (C14): what 8 and 4 bits per weight cost in bytes
// and in quality.
//
// In:  the formats of glass/quantize.hpp (blocks of 32 weights, one fp16 scale each); the shape of
//      a 7B model (Llama 2 7B: dim 4096, hidden 11008, 32 layers, vocab 32000, own classifier);
//      the shipped model and tok512; llama2.c's greedy goldens from ../shared (when present: the
//      prompts and run.c's continuations; otherwise six prompts and fp32's own continuations).
// Out: 1. bytes per block and per weight of each format, from the block layout;
//      2. C14: the 7B model's size at fp16 / int8 / int4, its parameters counted from the shape;
//      3. one block by hand: 8 weights, the scale, the integers, what comes back, the error;
//      4. the shipped model at fp32 / q8 / q4 (quantized_model: every matrix but the embedding
//         rounded to d·q), each continuation fed back token by token: the largest logit error
//         relative to fp32's largest logit, how many continuations greedy decoding reproduces
//         (and where the first one breaks, with fp32's top-1 − top-2 margin there: a small
//         margin is what a small error can flip), and the mean negative log-likelihood of the
//         continuations' tokens (lower = the model finds its fp32 text likelier) with exp of it
//         (perplexity).
//
// Usage: 24_quantization [GOLDENS.jsonl]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/quantize.hpp"
#include "glass/sampling.hpp"
#include "glass/transformer.hpp"

namespace {

std::vector<float> copy(std::span<const float> logits) { return {logits.begin(), logits.end()}; }

struct Continuation {
    std::string name;
    std::vector<int> prompt_ids, generated_ids;
};

// The goldens' prompts and run.c's greedy continuations, or (no file) fp32's own for six prompts.
std::vector<Continuation> continuations(const std::string& path, const glass::Model& model,
                                        const glass::Llama2cTokenizer& tok) {
    std::vector<Continuation> out;
    std::ifstream in(path);
    if (in) {
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json g = nlohmann::json::parse(line);
            Continuation c{g["case"], g["prompt_ids"].get<std::vector<int>>(), g["generated_ids"].get<std::vector<int>>()};
            if (!c.generated_ids.empty()) out.push_back(std::move(c));
        }
        std::printf("continuations: %zu from %s (run.c, greedy)\n", out.size(), path.c_str());
        return out;
    }
    std::printf("continuations: %s not found; fp32's own greedy continuations of six prompts\n", path.c_str());
    for (const char* prompt : {"Once upon a time", "Lily went to the park", "The cat", "A", "She went to the café",
                               "The dog was happy"}) {
        glass::CpuSession session(model);
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.max_new_tokens = 64;
        const glass::GenerateResult r = glass::generate(session, tok, prompt, o);
        out.push_back({prompt, r.prompt_ids, r.generated_ids});
    }
    return out;
}

struct Scores {
    double worst_logit_error = 0;   // max |logit − fp32 logit| / max |fp32 logit|, over every step
    int identical = 0;              // continuations greedy decoding reproduces whole
    int first_break = -1;           // earliest step where one breaks (-1: none)
    std::string first_break_case;
    double margin_there = 0;        // fp32's top-1 − top-2 logit at that step
    double nll_sum = 0;             // Σ −log p(token) over every continuation token
    long tokens = 0;
};

// Feeds each continuation through `model`, token by token, comparing with fp32's logits (`fp32`
// null: this is fp32, record its logits into `record`).
Scores score(const glass::Model& model, const std::vector<Continuation>& texts,
             std::vector<std::vector<std::vector<float>>>* record, const std::vector<std::vector<std::vector<float>>>* fp32) {
    Scores s;
    for (size_t c = 0; c < texts.size(); ++c) {
        glass::CpuSession session(model);
        std::vector<float> logits = copy(session.prefill(texts[c].prompt_ids));
        bool broken = false;
        if (record) record->emplace_back();
        for (size_t i = 0; i < texts[c].generated_ids.size(); ++i) {
            const int want = texts[c].generated_ids[i];
            // −log softmax(logits)[want], with the maximum subtracted first.
            double max = logits[0];
            for (float v : logits) max = std::max(max, double(v));
            double sum = 0;
            for (float v : logits) sum += std::exp(double(v) - max);
            s.nll_sum += -(double(logits[size_t(want)]) - max - std::log(sum));
            ++s.tokens;
            if (record) record->back().push_back(logits);
            if (fp32) {
                const std::vector<float>& ref = (*fp32)[c][i];
                double err = 0, scale = 0;
                for (size_t v = 0; v < ref.size(); ++v) {
                    err = std::max(err, std::fabs(double(logits[v]) - ref[v]));
                    scale = std::max(scale, std::fabs(double(ref[v])));
                }
                s.worst_logit_error = std::max(s.worst_logit_error, err / scale);
            }
            if (!broken && glass::sample_argmax(logits) != want) {
                broken = true;
                if (s.first_break < 0 || int(i) < s.first_break) {
                    s.first_break = int(i);
                    s.first_break_case = texts[c].name;
                    if (fp32) {  // fp32's own top two there
                        std::vector<float> ref = (*fp32)[c][i];
                        std::partial_sort(ref.begin(), ref.begin() + 2, ref.end(), std::greater<float>());
                        s.margin_there = double(ref[0]) - ref[1];
                    }
                }
            }
            if (i + 1 < texts[c].generated_ids.size()) logits = copy(session.decode(want));
        }
        if (!broken) ++s.identical;
    }
    return s;
}

int run(int argc, char** argv) {
    if (argc > 2) glass::fail("usage: 24_quantization [GOLDENS.jsonl]");
    const std::string goldens = argc > 1 ? argv[1] : std::string(GLASS_SHARED_DIR) + "/goldens/stories260K_greedy.jsonl";

    std::printf("1. The formats, from their blocks of %d weights\n", glass::kQuantBlock);
    std::printf("   %-6s %16s %17s %16s\n", "format", "bytes per block", "bytes per weight", "bits per weight");
    struct Row { const char* name; int block_bytes; };
    const Row formats[] = {{"fp32", 4 * glass::kQuantBlock}, {"fp16", 2 * glass::kQuantBlock},
                           {"q8", glass::quant_block_bytes(glass::QuantFormat::q8_0)},
                           {"q4", glass::quant_block_bytes(glass::QuantFormat::q4_0)}};
    for (const Row& r : formats)
        std::printf("   %-6s %16d %17.4f %16.2f\n", r.name, r.block_bytes, double(r.block_bytes) / glass::kQuantBlock,
                    8.0 * r.block_bytes / glass::kQuantBlock);

    const std::int64_t d = 4096, h = 11008, L = 32, V = 32000;
    const std::int64_t params = L * (4 * d * d + 3 * d * h + 2 * d) + 2 * V * d + d;
    std::printf("\n2. C14: a 7B model (Llama 2 7B's shape: %lld parameters)\n", static_cast<long long>(params));
    std::printf("fp16 size: %.2f GB\n", params * 2.0 / 1e9);
    std::printf("int8 (q8) size: %.2f GB\n", params * glass::bytes_per_weight(glass::QuantFormat::q8_0) / 1e9);
    std::printf("int4 (q4) size: %.2f GB\n", params * glass::bytes_per_weight(glass::QuantFormat::q4_0) / 1e9);
    std::printf("(the article: about 14, 7 and 3.5 GB \"plus scales\": the scales are the 0.0625 bytes per weight)\n");

    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);

    std::printf("\n3. One block by hand: layer 0's W_q, row 0, inputs 0-7 (of the block's 32)\n");
    const glass::RowMatrix wq_row = model.layers[0].wq.topRows(1);
    std::printf("weights:");
    for (int k = 0; k < 8; ++k) std::printf(" %.4f", wq_row(0, k));
    std::printf("\nblock max |w|: %.4f\n", wq_row.leftCols(glass::kQuantBlock).cwiseAbs().maxCoeff());
    for (const glass::QuantFormat f : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0}) {
        const glass::QuantizedMatrix q = glass::quantize(wq_row, f);
        std::printf("%s scale d = max / %d: %.6f\n", glass::to_string(f), glass::quant_max(f), q.scale(0, 0));
        std::printf("%s integers q:", glass::to_string(f));
        for (int k = 0; k < 8; ++k) std::printf(" %d", q.q(0, k));
        std::printf("\n%s d*q:", glass::to_string(f));
        for (int k = 0; k < 8; ++k) std::printf(" %.4f", q.at(0, k));
        float worst = 0;
        for (int k = 0; k < glass::kQuantBlock; ++k) worst = std::max(worst, std::fabs(q.at(0, k) - wq_row(0, k)));
        std::printf("\n%s largest error in the block (at most d/2): %.6f\n", glass::to_string(f), worst);
    }

    std::printf("\n4. The shipped model (stories260K) in each format\n   ");
    const std::vector<Continuation> texts = continuations(goldens, model, tok);
    std::int64_t matrix_params = std::int64_t{model.config.vocab_size} * model.config.dim;  // the classifier
    for (const auto& l : model.layers)
        matrix_params += l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() + l.w1.size() + l.w2.size() + l.w3.size();
    std::vector<std::vector<std::vector<float>>> fp32_logits;
    const Scores base = score(model, texts, &fp32_logits, nullptr);
    std::printf("   %-6s %14s %22s %21s %34s %10s %11s\n", "format", "matrix bytes", "logit error (relative)",
                "greedy identical", "first break: step, case, fp32 margin", "mean NLL", "perplexity");
    auto print = [&](const char* name, double bytes_per_weight, const Scores& s) {
        char brk[160] = "none";
        if (s.first_break >= 0)
            std::snprintf(brk, sizeof brk, "%d, %s, %.4f", s.first_break, s.first_break_case.c_str(), s.margin_there);
        std::printf("   %-6s %14.0f %22.3g %14d of %3zu %34s %10.4f %11.4f\n", name,
                    matrix_params * bytes_per_weight, s.worst_logit_error, s.identical, texts.size(), brk,
                    s.nll_sum / s.tokens, std::exp(s.nll_sum / s.tokens));
    };
    print("fp32", 4.0, base);
    for (const glass::QuantFormat f : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0})
        print(glass::to_string(f), glass::bytes_per_weight(f),
              score(glass::quantized_model(model, f), texts, nullptr, &fp32_logits));
    std::printf("   (%ld continuation tokens; fp32 breaks nowhere when the continuations are its own or run.c's)\n",
                base.tokens);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
