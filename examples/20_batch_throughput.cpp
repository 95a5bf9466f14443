// 20_batch_throughput — serving: one pass over the weights serves every request in the batch, so
// decode throughput grows with the batch until compute limits it (C20), measured and drawn.
//
// In:  a model with stories15M's shape and random weights (--shape stories110M: the shape the
//      serving targets were set for; --shape stories260K: the shipped model's), served by the fast
//      CPU path on --threads threads (default 2); for each batch size B = 1, 2, 4, ... up to
//      --max-batch (default 64): B requests with --prompt-len-token prompts (default 16) are
//      prefilled, then --steps decode steps (default 8) in which all B decode are timed.
// Out: the weight bytes one step reads and the FLOPs of one decoded token; this machine's FMA peak
//      with the same threads, measured now; per batch size the step time, decode tokens/s, the
//      ratio to batch 1, the FLOP/s that makes and its share of the FMA peak; the batch whose
//      FMAs, at peak, take as long as batch 1's step; the serving targets (batch 16 >= 8x batch 1;
//      batch 64 >= 50 % of the FMA peak) and whether they held this time; an SVG of tokens/s per
//      batch size under the compute ceiling.
//
// Why. A decode step of one request reads every weight from memory to do 2 FLOPs with it: memory,
// not arithmetic, sets its speed (walkthrough 13). B requests decoding together are B rows of one
// product: each loaded piece of a weight matrix is used for all B rows while it sits in the cache,
// so a step of B tokens reads the weights once, like a step of one, and costs little more until
// the FMA units, not memory, are what is busy. Then tokens/s stops growing: the ceiling is the FMA
// peak divided by the FLOPs of a token. Where the bend comes: batch 1's step is about one read of
// the weights; B tokens' FMAs take B x FLOPs per token / peak; the two meet at the "ridge batch" printed.
//
// Timings change from run to run and machine to machine; the batch sizes and FLOP counts do not.
//
// Usage: 20_batch_throughput [--shape stories260K|stories15M|stories110M] [--threads N] [--max-batch N]
//                            [--steps N] [--prompt-len N] [chart.svg]
//   --threads    threads of the fast path and of the FMA probe, 1..64 (default 2)
//   --max-batch  the largest batch, 1..256 (default 64); the batches are the powers of 2 up to it
//   --steps      timed decode steps per batch size, 1..1000 (default 8)
//   --prompt-len tokens of each request's prompt, 1..256 (default 16). The prefills are not timed
//                but are most of the work: --prompt-len 1 --steps 2 takes seconds on any CPU.
//   chart.svg    default: batch_throughput.svg beside this program, i.e. build/bin/batch_throughput.svg
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/tokenize/number_tokenizer.hpp"
#include "serve_measure.hpp"  // the benchmarks' harness (bench/measure/)
#include "serving.hpp"
#include "svg.hpp"

static int run(int argc, char** argv) {
    serving::Common common;
    common.svg_path = svg::default_path("batch_throughput.svg");
    int max_batch = 64, steps = 8, prompt_len = 16;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool flag = a.rfind("--", 0) == 0;
        if (serving::common_arg(common, argc, argv, i)) continue;
        if (flag && i + 1 >= argc) glass::fail("'", a, "' needs a value");
        if (a == "--max-batch") max_batch = example::int_arg(argv[++i], "max batch", 1, 256);
        else if (a == "--steps") steps = example::int_arg(argv[++i], "steps", 1, 1000);
        else if (a == "--prompt-len") prompt_len = example::int_arg(argv[++i], "prompt length", 1, 256);
        else if (flag) glass::fail("unknown option '", a, "'");
        else common.svg_path = a;
    }
    // A request holds its prompt, one warm-up token and the timed ones (measure_decode_batch).
    const glass::ModelConfig c = serving::shape_with_context(common.shape, prompt_len + steps + 2);

    std::printf("C20: decode throughput at batch 1, 2, 4, ... %d: one pass over the weights serves the whole batch\n",
                max_batch);
    serving::print_model(common.shape, c);
    const glass::Model model = glass::fast::random_model_in_memory(c, /*seed=*/1);
    const glass::NumberTokenizer tok(c.vocab_size);
    glass::fast::FastPagedBackend backend(model, serving::fast_options(common.threads));
    // 2 FLOPs (a multiply and an add) per weight of the layers and the classifier, and attention
    // over one position: the same count `glass serve-bench` uses.
    const double flops_per_token = glass::fast::prefill_flops(c, 1);
    std::printf("weight bytes read per step: %lld (%.1f MB, fp32)\n", static_cast<long long>(backend.weight_bytes()),
                static_cast<double>(backend.weight_bytes()) / 1e6);
    std::printf("FLOPs per decoded token: %.0f\n", flops_per_token);
    std::printf("engine: fast CPU path, %d threads; each request: a %d-token prompt, then %d timed decode steps\n",
                common.threads, prompt_len, steps);
    // FLOP/s of the FMAs of the kernel set the fast path runs here (glass/fast/kernels.hpp)
    const double peak = glass::fast::fma_peak_probe(common.threads).median;
    std::printf("FMA peak GFLOP/s (%d threads, median of 7 passes): %.1f\n", common.threads, peak / 1e9);

    std::printf("\ncolumns: step ms (median) | decode tokens/s | x batch 1 | GFLOP/s | %% of FMA peak\n");
    serving::BarChart chart;
    chart.figure = "C20";
    chart.title = "Decode tokens/s by batch size: one pass over the weights serves the batch";
    chart.x_label = "batch (requests decoding together)";
    chart.y_label = "decode tokens/s";
    chart.series = {"decode tokens/s"};
    double base = 0, base_step_ms = 0, at16 = 0, at64 = 0;
    for (int b = 1; b <= max_batch; b *= 2) {
        const serve_measure::BatchPoint p = serve_measure::measure_decode_batch(backend, tok, b, steps, prompt_len);
        if (b == 1) base = p.decode_tokens_per_s, base_step_ms = p.step_ms;
        const double flops = p.decode_tokens_per_s * flops_per_token;
        char of_peak[16] = "n/a";
        if (peak > 0) std::snprintf(of_peak, sizeof of_peak, "%.1f", 100 * flops / peak);
        std::printf("batch %d: %.3f | %.1f | %.2f | %.1f | %s\n", b, p.step_ms, p.decode_tokens_per_s,
                    p.decode_tokens_per_s / base, flops / 1e9, of_peak);
        if (b == 16) at16 = p.decode_tokens_per_s / base;
        if (b == 64) at64 = flops / peak;
        chart.groups.push_back(std::to_string(b));
        chart.values.push_back({p.decode_tokens_per_s});
    }

    // Batch 1's step is about the time one read of the weights takes; a step's FMAs take
    // batch x FLOPs per token / peak at best. Past the batch where the two are equal, compute,
    // not memory, sets the pace (the roofline's ridge, walkthrough 13, counted in requests).
    if (peak > 0)
        std::printf("\nridge batch (FMAs at peak take as long as batch 1's step): %.1f\n",
                    base_step_ms / (1000 * flops_per_token / peak));
    std::printf("\n");
    if (max_batch >= 16)
        std::printf("target batch 16 >= 8x batch 1: %.2f, %s\n", at16, serving::verdict(at16 >= 8));
    else
        std::printf("target batch 16 >= 8x batch 1: not measured (max batch %d)\n", max_batch);
    if (max_batch >= 64 && peak > 0)
        std::printf("target batch 64 >= 50 %% of FMA peak: %.1f %%, %s\n", 100 * at64, serving::verdict(at64 >= 0.5));
    else
        std::printf("target batch 64 >= 50 %% of FMA peak: not measured (%s)\n",
                    peak > 0 ? ("max batch " + std::to_string(max_batch)).c_str() : "no FMA peak");

    if (peak > 0) {
        chart.reference = peak / flops_per_token;
        char label[80];
        std::snprintf(label, sizeof label, "FMA peak / FLOPs per token = %.0f tokens/s", chart.reference);
        chart.reference_label = label;
    }
    serving::draw(chart, common.svg_path);
    std::printf("\nsvg written: %s\n", common.svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
