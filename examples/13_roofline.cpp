// 13_roofline — journey step 9: why decode is memory-bound (C7), drawn as a roofline.
//
// In:  a 7B-parameter model, 2 bytes per weight (fp16; --bytes-per-weight changes it); its KV
//      cache at 4,096 tokens (Llama-2-7B, fp16: 524,288 bytes per token, walkthrough 12); the
//      memory bandwidth of an H100 (3.35 TB/s) and an H200 (4.8 TB/s) and their dense fp16
//      tensor-core peak (989 TFLOP/s, NVIDIA's SXM datasheets); on this machine, a model with
//      stories110M's shape and random weights, made in memory (438 MB of fp32 weights: far more
//      than a CPU's caches), and the measured read bandwidth of one core.
// Out: the decode speed limit  tokens/s <= bandwidth / bytes read per token  for each GPU, first
//      for the weights alone and then with the KV cache a 4,096-token conversation adds; the same
//      answer read off a roofline; a few measured decode steps of the 110M model against its
//      bound; and an SVG roofline chart.
//
// Decoding one token multiplies every weight once (2 FLOPs: a multiply and an add) and has to
// bring every weight in from memory (2 bytes in fp16): 1 FLOP per byte. A GPU can do ~300 FLOPs
// in the time one byte arrives, so during decode the arithmetic units mostly wait for memory.
// Prefill of n prompt tokens reuses each weight n times: n FLOPs per byte, compute-bound.
//
// Measured numbers (bandwidth, tokens/s) change from run to run and machine to machine.
//
// Usage: 13_roofline [--bytes-per-weight N] [roofline.svg]
//   --bytes-per-weight  0.5 (int4), 1 (int8), 2 (fp16, the default) or 4 (fp32) for the 7B model
//   roofline.svg        default: roofline.svg beside this program, i.e. build/bin/roofline.svg
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/metrics.hpp"
#include "glass/transformer.hpp"
#include "svg.hpp"

struct Gpu {
    const char* name;
    double bandwidth;  // bytes/s of memory (HBM) bandwidth
    double peak;       // FLOP/s, dense fp16 on tensor cores
};

// The roofline: what a kernel doing `intensity` FLOPs per byte it reads can reach at best.
static double attainable_flops(const Gpu& g, double intensity) {
    return std::min(g.peak, g.bandwidth * intensity);
}

// Log-log chart: x = FLOPs per byte (0.1 .. 10^4), y = TFLOP/s (0.1 .. 10^4), 100 px per decade.
// Every label sits inside the plot area (marked data-label); a key names each roof's colour.
static void draw_roofline(const std::vector<Gpu>& gpus, double decode_intensity,
                          double prefill_intensity, const std::string& path) {
    const double per_decade = 100, left = 90, top = 65, decades = 5;
    const double bottom = top + decades * per_decade, right = left + decades * per_decade;
    const auto px = [&](double intensity) { return left + per_decade * (std::log10(intensity) + 1); };
    const auto py = [&](double flops) { return bottom - per_decade * (std::log10(flops / 1e12) + 1); };

    svg::Svg s;
    s.width = 640;
    s.height = 660;
    char root[200];
    std::snprintf(root, sizeof root,
                  "data-figure=\"C7\" data-px-per-decade=\"100\" data-plot-left=\"%g\" data-plot-top=\"%g\" "
                  "data-plot-right=\"%g\" data-plot-bottom=\"%g\"",
                  left, top, right, bottom);
    s.root_attributes = root;
    s.text(320, 25, "Roofline: decode at batch 1 sits far left of the ridge", "middle", 15);
    for (int d = -1; d <= 4; ++d) {
        const double v = std::pow(10.0, d);
        const std::string label = d < 0 ? "0.1" : std::to_string(static_cast<long long>(v));
        s.line(px(v), top, px(v), bottom + 5, "stroke:#ddd");
        s.text(px(v), bottom + 20, label, "middle");
        s.line(left - 5, py(v * 1e12), right, py(v * 1e12), "stroke:#ddd");
        s.text(left - 10, py(v * 1e12) + 4, label, "end");
    }
    s.line(left, bottom, right, bottom, "stroke:black");  // axes over the grid
    s.line(left, top, left, bottom, "stroke:black");
    s.text((left + right) / 2, bottom + 45, "arithmetic intensity (FLOPs per byte read, log scale)",
           "middle", 13);
    s.text(25, top - 20, "TFLOP/s (log scale)", "start", 13);

    // One colour per GPU; the second roof is dashed, so where both run flat at the same peak
    // the first still shows through.
    const char* colours[] = {"#2471a3", "#c0392b"};
    const char* dashes[] = {"", ";stroke-dasharray:8 5"};
    for (size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        const double ridge = g.peak / g.bandwidth;  // where the slope meets the flat roof
        const std::string style = std::string("stroke:") + colours[i] + ";stroke-width:2" + dashes[i];
        char facts[160];
        std::snprintf(facts, sizeof facts,
                      "data-gpu=\"%s\" data-bandwidth-bytes-per-s=\"%.6g\" data-peak-flops=\"%.6g\"",
                      g.name, g.bandwidth, g.peak);
        s.polyline({{px(0.1), py(attainable_flops(g, 0.1))},
                    {px(ridge), py(g.peak)},
                    {px(1e4), py(g.peak)}},
                   style, facts);
        // The two operating points on this roof.
        for (double intensity : {decode_intensity, prefill_intensity}) {
            char point[80];
            std::snprintf(point, sizeof point, "data-gpu=\"%s\" data-intensity=\"%g\"", g.name, intensity);
            s.circle(px(intensity), py(attainable_flops(g, intensity)), 5,
                     std::string("fill:") + colours[i], point);
        }
        // The key, top left inside the plot (the roofs never reach there): a swatch and a line of text.
        const double key_y = top + 20 + 20 * static_cast<double>(i);
        const std::string key = std::string("data-key=\"") + g.name + "\"";
        s.line(left + 10, key_y - 4, left + 40, key_y - 4, style, key);
        char label[120];
        std::snprintf(label, sizeof label, "%s: %.2f TB/s, %.0f TFLOP/s, ridge at %.0f FLOPs/byte", g.name,
                      g.bandwidth / 1e12, g.peak / 1e12, ridge);
        s.text(left + 48, key_y, label, "start", 12, key + " data-label=\"key\"");
    }
    char decode_label[80];
    std::snprintf(decode_label, sizeof decode_label, "decode, batch 1: %g FLOPs per byte", decode_intensity);
    s.text(px(decode_intensity) + 10, py(attainable_flops(gpus[0], decode_intensity)) + 20, decode_label,
           "start", 12, "data-label=\"decode\"");
    s.text(px(prefill_intensity), py(gpus[0].peak) + 25, "prefill, 1,000 tokens", "middle", 12,
           "data-label=\"prefill\"");
    s.save(path);
}

// Greedy: the id with the largest logit.
static int argmax(std::span<const float> logits) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(logits.size()); ++i)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int run(int argc, char** argv) {
    double bytes_per_weight = 2;  // fp16
    std::string svg_path = svg::default_path("roofline.svg");
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--bytes-per-weight") {
            if (i + 1 >= argc) glass::fail("--bytes-per-weight needs a value: 0.5, 1, 2 or 4");
            const std::string v = argv[++i];
            if (v == "0.5") bytes_per_weight = 0.5;
            else if (v == "1") bytes_per_weight = 1;
            else if (v == "2") bytes_per_weight = 2;
            else if (v == "4") bytes_per_weight = 4;
            else glass::fail("--bytes-per-weight '", v, "' is not one of 0.5, 1, 2, 4");
        } else {
            svg_path = argv[i];
        }
    }
    const char* format = bytes_per_weight == 0.5 ? "int4" : bytes_per_weight == 1 ? "int8"
                         : bytes_per_weight == 2 ? "fp16" : "fp32";

    // ---- C7: a 7B model ----
    const double parameters = 7e9;
    const double bytes_per_token = parameters * bytes_per_weight;  // every weight is read once per token
    const std::vector<Gpu> gpus = {{"H100", 3.35e12, 989e12}, {"H200", 4.8e12, 989e12}};
    std::printf("C7 model: 7B parameters, %s, bytes per weight %g\n", format, bytes_per_weight);
    std::printf("C7 weight bytes per token: %.0f (%.1f GB)\n", bytes_per_token, bytes_per_token / 1e9);
    for (const Gpu& g : gpus) {
        const double seconds = bytes_per_token / g.bandwidth;  // one full read of the weights
        std::printf("C7 %s bandwidth TB/s: %.2f\n", g.name, g.bandwidth / 1e12);
        std::printf("C7 %s time per token ms: %.2f\n", g.name, seconds * 1e3);
        std::printf("C7 %s tokens/s bound: %.1f\n", g.name,
                    glass::bandwidth_bound_tokens_per_s(bytes_per_token, g.bandwidth));
    }

    // ---- C7 again, with the KV cache: each step also reads every cached K and V row ----
    const int context = 4096;
    const std::int64_t kv_per_token = glass::kv_cache_bytes_per_token(32, 32, 128, 2);  // Llama-2-7B, fp16
    const double kv_bytes = static_cast<double>(kv_per_token) * context;
    const double total_bytes = bytes_per_token + kv_bytes;
    std::printf("\nC7 kv cache: Llama-2-7B, fp16, %lld bytes per cached token\n", static_cast<long long>(kv_per_token));
    std::printf("C7 kv bytes read per token at %d tokens: %.0f (%.2f GB)\n", context, kv_bytes, kv_bytes / 1e9);
    std::printf("C7 weights + kv bytes per token: %.0f (%.2f GB)\n", total_bytes, total_bytes / 1e9);
    for (const Gpu& g : gpus) {
        std::printf("C7 %s at %d tokens, time per token ms: %.2f\n", g.name, context, total_bytes / g.bandwidth * 1e3);
        std::printf("C7 %s at %d tokens, tokens/s bound: %.1f\n", g.name, context,
                    glass::bandwidth_bound_tokens_per_s(total_bytes, g.bandwidth));
    }

    // ---- The same answer from the roofline ----
    const double flops_per_token = parameters * 2;                 // a multiply and an add per weight
    const double decode_intensity = flops_per_token / bytes_per_token;  // 1 FLOP per byte in fp16
    const double prefill_intensity = 1000 * decode_intensity;       // 1,000 tokens share each read
    std::printf("\nroofline decode intensity FLOPs/byte: %.1f\n", decode_intensity);
    std::printf("roofline prefill 1000 tokens intensity FLOPs/byte: %.1f\n", prefill_intensity);
    for (const Gpu& g : gpus) {
        const double decode_flops = attainable_flops(g, decode_intensity);
        std::printf("roofline %s peak TFLOP/s: %.0f, ridge FLOPs/byte: %.1f\n", g.name, g.peak / 1e12,
                    g.peak / g.bandwidth);
        std::printf("roofline %s decode attainable TFLOP/s: %.2f -> tokens/s: %.1f\n", g.name,
                    decode_flops / 1e12, decode_flops / flops_per_token);
        std::printf("roofline %s decode uses %.2f%% of peak compute\n", g.name,
                    100.0 * decode_flops / g.peak);
        std::printf("roofline %s prefill is %s-bound\n", g.name,
                    g.bandwidth * prefill_intensity >= g.peak ? "compute" : "memory");
    }

    // ---- This machine: a model far bigger than the caches (measured: changes from run to run) ----
    // stories110M's shape with random weights: speed depends on the shape, not on the values.
    const glass::ModelConfig shape = glass::fast::shape_config("stories110M");
    const glass::Model big = glass::fast::random_model_in_memory(shape, /*seed=*/1);
    std::printf("\nthis machine: stories110M's shape, random weights (dim %d, %d layers, hidden %d, vocab %d)\n",
                shape.dim, shape.n_layers, shape.hidden_dim, shape.vocab_size);
    std::printf("random stories110M weight bytes per token: %lld (%.1f MB, fp32)\n",
                static_cast<long long>(big.weight_bytes), static_cast<double>(big.weight_bytes) / 1e6);
    const double bandwidth = glass::measure_read_bandwidth();
    const double bound = glass::bandwidth_bound_tokens_per_s(static_cast<double>(big.weight_bytes), bandwidth);
    std::printf("measured read bandwidth GB/s (one core): %.1f\n", bandwidth / 1e9);
    std::printf("bound tokens/s (bandwidth / weight bytes): %.1f\n", bound);

    glass::CpuSession session(big);
    const int bos = 1;
    int next = argmax(session.prefill(std::vector<int>{bos}));
    const int steps = 8;
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) next = argmax(session.decode(next));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double measured = steps / seconds;
    std::printf("measured decode tokens/s (%d steps): %.1f\n", steps, measured);
    std::printf("measured decode / bound: %.2f\n", measured / bound);

    draw_roofline(gpus, decode_intensity, prefill_intensity, svg_path);
    std::printf("\nsvg written: %s\n", svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
