// 19_chunked_prefill — serving: a long prompt no longer stalls everyone else's decoding once it is
// cut into chunks (C18), measured and drawn as a chart.
//
// In:  a model with stories15M's shape and random weights (--shape stories110M: the shape the
//      serving targets were set for; --shape stories260K: the shipped model's, seconds on any CPU),
//      its context window raised to hold the long prompt, served by the fast CPU path; --decoders
//      requests (default 8) with 16-token prompts; after 3 steps, when all of them are decoding, a
//      --prompt-len-token prompt (default 2,000) arrives; the run ends 4 steps after the long
//      request's first token (the decoders are then cancelled). A token budget of --budget
//      positions per step (default 256); blocks of 16.
// Out: the same run with chunked prefill off and on: steps, how many steps computed part of the
//      long prompt, the most tokens one step computed, tokens each decoder got, the decoders'
//      largest and mean gap between two of their tokens, the long prompt's TTFT, and the tokens
//      computed per second; the serving targets (largest gap on <= 1/4 of off; tokens/s within
//      10 %) and whether they held this time; an SVG of the gaps.
//
// Why. The decoders get a token every step either way: they are running, so the scheduler gives
// each its one token before it looks at the waiting prompt. What they wait for is the step itself.
// Without chunking the long prompt is taken whole, and the step that carries it computes 2,000
// positions plus the decoders' 8: every decoder's next token comes after all of it. With chunking
// the prompt gets only what is left of the budget each step (256 - 8 = 248 positions), so it
// takes ceil(2000 / 248) = 9 steps and no step is longer than a budget's worth. The total work is
// the same, so the throughput barely moves; the long prompt's own first token comes a little later.
//
// Timings change from run to run and machine to machine; the step and token counts do not.
//
// Usage: 19_chunked_prefill [--shape stories260K|stories15M|stories110M] [--threads N]
//                           [--decoders N] [--prompt-len N] [--budget N] [chart.svg]
//   --threads     threads of the fast path, 1..64 (default 2)
//   --decoders    requests decoding when the long prompt arrives, 1..32 (default 8)
//   --prompt-len  tokens of the long prompt, 16..8192 (default 2000)
//   --budget      tokens one step may compute, 16 x decoders..8192 (default 256): every decoder's
//                 16-token prompt fits the first step, and a step always has room for the long prompt
//   chart.svg     default: chunked_prefill.svg beside this program, i.e. build/bin/chunked_prefill.svg
#include <cstdio>
#include <string>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/serve/engine.hpp"
#include "glass/tokenize/number_tokenizer.hpp"
#include "serve_measure.hpp"  // the benchmarks' harness (bench/measure/)
#include "serving.hpp"
#include "svg.hpp"

// "8", or "7..8" when the decoders did not all get the same number of tokens.
static std::string tokens_each(const serve_measure::StallResult& r) {
    if (r.decoder_tokens_min == r.decoder_tokens_max) return std::to_string(r.decoder_tokens_min);
    return std::to_string(r.decoder_tokens_min) + ".." + std::to_string(r.decoder_tokens_max);
}

static void print_row(const char* label, const serve_measure::StallResult& r) {
    std::printf("%s: %d | %d | %d | %s | %.2f | %.2f | %.2f | %.1f\n", label, r.steps, r.long_prompt_steps,
                r.largest_step_tokens, tokens_each(r).c_str(), r.max_gap_ms, r.mean_gap_ms, r.long_prompt_ttft_ms,
                r.throughput_tokens_per_s);
}

static int run(int argc, char** argv) {
    serving::Common common;
    common.svg_path = svg::default_path("chunked_prefill.svg");
    int decoders = 8, prompt_len = 2000, budget = 256;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool flag = a.rfind("--", 0) == 0;
        if (serving::common_arg(common, argc, argv, i)) continue;
        if (flag && i + 1 >= argc) glass::fail("'", a, "' needs a value");
        if (a == "--decoders") decoders = example::int_arg(argv[++i], "decoders", 1, 32);
        else if (a == "--prompt-len") prompt_len = example::int_arg(argv[++i], "prompt length", 16, 8192);
        else if (a == "--budget") budget = example::int_arg(argv[++i], "budget", 1, 8192);
        else if (flag) glass::fail("unknown option '", a, "'");
        else common.svg_path = a;
    }
    if (budget < 16 * decoders)
        glass::fail("budget ", budget, " is less than 16 x ", decoders, " decoders = ", 16 * decoders,
                    " (their prompts must fit one step)");
    const int after = 4;  // steps after the long request's first token (measure_stall's default)
    // The long prompt rounded up to a multiple of 256, plus 256: room for its new tokens and the
    // decoders' growing sequences.
    const int context = (prompt_len + 255) / 256 * 256 + 256;
    const glass::ModelConfig shape = serving::shape_config(common.shape);
    const glass::ModelConfig c = serving::shape_with_context(common.shape, context);
    const int block_size = 16;

    std::printf("C18: a %d-token prompt arrives while %d sequences decode, with and without chunked prefill\n", prompt_len,
                decoders);
    serving::print_model(common.shape, c);
    std::printf("context window: %d tokens (%s's is %d; raised to hold the long prompt)\n", c.seq_len,
                common.shape.c_str(), shape.seq_len);
    std::printf("engine: fast CPU path, %d threads, block size %d, budget %d tokens per step\n", common.threads,
                block_size, budget);
    std::printf("workload: %d decoders with 16-token prompts; after 3 steps a %d-token prompt arrives; "
                "the run ends %d steps after its first token\n",
                decoders, prompt_len, after);

    const glass::Model model = glass::fast::random_model_in_memory(c, /*seed=*/1);
    const glass::NumberTokenizer tok(c.vocab_size);
    glass::fast::FastPagedBackend backend(model, serving::fast_options(common.threads));
    serving::warm_up(backend, tok, prompt_len + decoders);  // the largest step either run makes

    glass::serve::EngineOptions on;
    on.block_size = block_size;
    on.num_blocks = 2 * (c.seq_len / block_size);  // two context windows: the long prompt and the decoders
    on.scheduler.max_tokens_per_step = budget;
    glass::serve::EngineOptions off = on;
    off.scheduler.chunked_prefill = false;
    const serve_measure::StallResult whole = serve_measure::measure_stall(backend, tok, off, decoders, prompt_len, after);
    const serve_measure::StallResult chunked = serve_measure::measure_stall(backend, tok, on, decoders, prompt_len, after);

    std::printf("\ncolumns: steps | steps computing the long prompt | largest step tokens | tokens per decoder | "
                "largest gap ms | mean gap ms | long prompt TTFT ms | tokens/s\n");
    print_row("chunked prefill off", whole);
    print_row("chunked prefill on", chunked);
    const double gap_ratio = chunked.max_gap_ms / whole.max_gap_ms;
    const double throughput_ratio = chunked.throughput_tokens_per_s / whole.throughput_tokens_per_s;
    std::printf("\nlargest gap on / off: %.2f\n", gap_ratio);
    std::printf("tokens/s on / off: %.2f\n", throughput_ratio);
    std::printf("\ntarget largest gap on / off <= 0.25: %.2f, %s\n", gap_ratio, serving::verdict(gap_ratio <= 0.25));
    std::printf("target tokens/s on / off within 10 %%: %.2f, %s\n", throughput_ratio,
                serving::verdict(throughput_ratio >= 0.9 && throughput_ratio <= 1.1));

    serving::BarChart chart;
    chart.figure = "C18";
    chart.title = "Decoders' gaps between tokens while a long prompt arrives";
    chart.x_label = std::to_string(decoders) + " decoders, a " + std::to_string(prompt_len) + "-token prompt, budget " +
                    std::to_string(budget);
    chart.y_label = "gap ms";
    chart.series = {"chunked prefill off", "chunked prefill on"};
    chart.groups = {"largest gap", "mean gap"};
    chart.values = {{whole.max_gap_ms, chunked.max_gap_ms}, {whole.mean_gap_ms, chunked.mean_gap_ms}};
    serving::draw(chart, common.svg_path);
    std::printf("\nsvg written: %s\n", common.svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
