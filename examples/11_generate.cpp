// 11_generate — journey steps 6–9 together: stream a story and time it (TTFT, TPOT), then the
// latency arithmetic of C10.
//
// In:  the prompt "Once upon a time"; the shipped model and tok512; greedy decoding for
//      llama2.c's "-n 32" (32 positions including the 5 prompt tokens, so 28 new tokens).
// Out: the text as it streams (printed piece by piece from the on_text callback), the generated
//      ids [28], why it stopped, and the measured timings: when each token was chosen (TTFT is the
//      first; TPOT the mean gap after it), the shortest and longest gap, and a wall clock this
//      program reads itself around generate(); then C10 for a bigger request: 1,000 tokens in,
//      200 out, prefill 0.4 s, decode 50 tokens/s.
//
// Timings change from run to run and machine to machine: those lines start with "timing".
//
// Usage: 11_generate [prompt] [steps] [--timestamps]
//   --timestamps  also print every token's time (ms since the request started)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/metrics.hpp"
#include "glass/transformer.hpp"

static int run(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);

    std::vector<std::string> args;
    bool print_timestamps = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--timestamps") print_timestamps = true;
        else args.push_back(argv[i]);
    }
    const std::string prompt = args.size() > 0 ? args[0] : "Once upon a time";
    if (args.size() > 2) glass::fail("usage: 11_generate [prompt] [steps] [--timestamps]; got ", args.size(), " arguments");
    const int steps = args.size() > 1 ? example::int_arg(args[1].c_str(), "steps", 1, 512) : 32;
    const int n_prompt = static_cast<int>(tok.encode(prompt, true, false).size());

    glass::GenerateOptions options;
    options.sampling.temperature = 0.0f;  // greedy: the same story every run
    options.max_new_tokens = glass::new_tokens_for_steps(steps, n_prompt);

    std::printf("prompt: %s\n", prompt.c_str());
    std::printf("max new tokens: %d\n", options.max_new_tokens);

    // Stream: every chunk of finished text is printed the moment generate() hands it over.
    glass::CpuSession session(model);
    std::printf("streamed: %s", prompt.c_str());
    std::fflush(stdout);
    const auto wall_start = std::chrono::steady_clock::now();  // our own clock, around the whole call
    const glass::GenerateResult r =
        glass::generate(session, tok, prompt, options, [](std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        });
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
    std::printf("\n");

    std::printf("generated ids:");
    for (int id : r.generated_ids) std::printf(" %d", id);
    std::printf("\n");
    std::printf("generated tokens: %d\n", r.metrics.generated_tokens);
    std::printf("stop reason: %s\n", glass::to_string(r.stop_reason));
    std::printf("cache length at the end: %d\n", session.position());

    // token_ms[i]: when token i was chosen, in ms since generate() started. TTFT is token_ms[0];
    // the gaps after it are the decode steps, and TPOT is their mean.
    const glass::GenerationMetrics& m = r.metrics;
    double min_gap = 0, max_gap = 0;
    for (size_t i = 1; i < m.token_ms.size(); ++i) {
        const double gap = m.token_ms[i] - m.token_ms[i - 1];
        min_gap = i == 1 ? gap : std::min(min_gap, gap);
        max_gap = std::max(max_gap, gap);
    }
    if (print_timestamps) {
        std::printf("timing token ms:");
        for (double t : m.token_ms) std::printf(" %.4f", t);
        std::printf("\n");
    }
    std::printf("timing ttft ms: %.4f\n", m.ttft_ms);
    std::printf("timing tpot ms: %.4f\n", m.tpot_ms);
    std::printf("timing shortest gap ms: %.4f\n", min_gap);
    std::printf("timing longest gap ms: %.4f\n", max_gap);
    std::printf("timing total ms: %.4f\n", m.total_ms);
    std::printf("timing decode tokens/s: %.1f\n", m.decode_tokens_per_s);
    std::printf("timing wall clock around generate() ms: %.4f\n", wall_ms);
    std::printf("\n");

    // C10: what a user of a big model would feel for one request.
    const int tokens_in = 1000;
    const int tokens_out = 200;
    const double prefill_s = 0.4;          // all 1,000 prompt positions in one pass
    const double decode_tokens_per_s = 50;
    const double ttft_s = prefill_s;       // the first token comes out of prefill
    const double tpot_s = 1.0 / decode_tokens_per_s;
    const double decode_s = (tokens_out - 1) * tpot_s;  // the other 199 tokens, one step each
    const double total_s = glass::request_latency_s(ttft_s, tpot_s, tokens_out);
    std::printf("C10 tokens in: %d\n", tokens_in);
    std::printf("C10 tokens out: %d\n", tokens_out);
    std::printf("C10 ttft s: %.2f\n", ttft_s);
    std::printf("C10 tpot ms: %.1f\n", tpot_s * 1000.0);
    std::printf("C10 remaining tokens: %d\n", tokens_out - 1);
    std::printf("C10 decode s: %.2f\n", decode_s);
    std::printf("C10 total latency s: %.2f\n", total_s);
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
