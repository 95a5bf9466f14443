// 13_roofline — journey step 9: why decode is memory-bound (C7), drawn as a roofline.
//
// In:  a 7B-parameter model in fp16 (2 bytes per weight); the memory bandwidth of an H100
//      (3.35 TB/s) and an H200 (4.8 TB/s) and their dense fp16 tensor-core peak (989 TFLOP/s,
//      NVIDIA's SXM datasheets); this machine's measured read bandwidth; the shipped model.
// Out: the decode speed limit  tokens/s <= bandwidth / bytes read per token  for each GPU, the
//      same answer read off a roofline, this machine's numbers, and an SVG roofline chart.
//
// Decoding one token multiplies every weight once (2 FLOPs: a multiply and an add) and has to
// bring every weight in from memory (2 bytes in fp16): 1 FLOP per byte. A GPU can do ~300 FLOPs
// in the time one byte arrives, so during decode the arithmetic units mostly wait for memory.
// Prefill of n prompt tokens reuses each weight n times: n FLOPs per byte, compute-bound.
//
// Measured numbers (bandwidth, tokens/s) change from run to run and machine to machine.
//
// Usage: 13_roofline [roofline.svg]   (default: roofline.svg beside this program,
//                                      i.e. build/bin/roofline.svg)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/glass.hpp"
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
static void draw_roofline(const std::vector<Gpu>& gpus, double decode_intensity,
                          double prefill_intensity, const std::string& path) {
    const double per_decade = 100, left = 90, top = 65, decades = 5;
    const double bottom = top + decades * per_decade, right = left + decades * per_decade;
    const auto px = [&](double intensity) { return left + per_decade * (std::log10(intensity) + 1); };
    const auto py = [&](double flops) { return bottom - per_decade * (std::log10(flops / 1e12) + 1); };

    svg::Svg s;
    s.width = 760;
    s.height = 660;
    s.root_attributes = "data-figure=\"C7\" data-px-per-decade=\"100\"";
    s.text(340, 25, "Roofline: decode at batch 1 sits far left of the ridge (memory-bound)", "middle", 15);
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

    const char* colours[] = {"#2471a3", "#c0392b"};
    for (size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        const double ridge = g.peak / g.bandwidth;  // where the slope meets the flat roof
        char facts[160];
        std::snprintf(facts, sizeof facts,
                      "data-gpu=\"%s\" data-bandwidth-bytes-per-s=\"%.6g\" data-peak-flops=\"%.6g\"",
                      g.name, g.bandwidth, g.peak);
        s.polyline({{px(0.1), py(attainable_flops(g, 0.1))},
                    {px(ridge), py(g.peak)},
                    {px(1e4), py(g.peak)}},
                   std::string("stroke:") + colours[i] + ";stroke-width:2", facts);
        // The two operating points on this roof.
        for (double intensity : {decode_intensity, prefill_intensity}) {
            char point[80];
            std::snprintf(point, sizeof point, "data-gpu=\"%s\" data-intensity=\"%g\"", g.name, intensity);
            s.circle(px(intensity), py(attainable_flops(g, intensity)), 5,
                     std::string("fill:") + colours[i], point);
        }
        char label[120];
        std::snprintf(label, sizeof label, "%s: %.2f TB/s, ridge at %.0f FLOPs/byte", g.name,
                      g.bandwidth / 1e12, ridge);
        s.text(px(ridge) + 10, py(g.peak) - 10 - 18 * static_cast<double>(i), label, "start", 12);
    }
    s.text(px(decode_intensity) + 10, py(attainable_flops(gpus[0], decode_intensity)) + 20,
           "decode, batch 1 (1 FLOP/byte)");
    s.text(px(prefill_intensity), py(gpus[0].peak) + 25, "prefill, 1,000 tokens", "middle");
    s.save(path);
}

static int run(int argc, char** argv) {
    const std::string svg_path = argc > 1 ? argv[1] : svg::default_path("roofline.svg");

    // ---- C7: a 7B model in fp16 ----
    const double parameters = 7e9;
    const double bytes_per_token = parameters * 2;  // every fp16 weight is read once per token
    const std::vector<Gpu> gpus = {{"H100", 3.35e12, 989e12}, {"H200", 4.8e12, 989e12}};
    std::printf("C7 model: 7B parameters, fp16\n");
    std::printf("C7 weight bytes per token: %.0f (%.1f GB)\n", bytes_per_token, bytes_per_token / 1e9);
    for (const Gpu& g : gpus) {
        const double seconds = bytes_per_token / g.bandwidth;  // one full read of the weights
        std::printf("C7 %s bandwidth TB/s: %.2f\n", g.name, g.bandwidth / 1e12);
        std::printf("C7 %s time per token ms: %.2f\n", g.name, seconds * 1e3);
        std::printf("C7 %s tokens/s bound: %.1f\n", g.name,
                    glass::bandwidth_bound_tokens_per_s(bytes_per_token, g.bandwidth));
    }

    // ---- The same answer from the roofline ----
    const double flops_per_token = parameters * 2;                 // a multiply and an add per weight
    const double decode_intensity = flops_per_token / bytes_per_token;  // 1 FLOP per byte
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

    // ---- This machine and the shipped model (measured: changes from run to run) ----
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    std::printf("\nshipped weight bytes per token: %lld\n", static_cast<long long>(model.weight_bytes));
    const double bandwidth = glass::measure_read_bandwidth();
    const double bound = glass::bandwidth_bound_tokens_per_s(model.weight_bytes, bandwidth);
    std::printf("measured read bandwidth GB/s (one core): %.1f\n", bandwidth / 1e9);
    std::printf("measured shipped bound tokens/s: %.0f\n", bound);

    glass::CpuSession session(model);
    glass::GenerateOptions options;
    options.sampling.temperature = 0.0f;
    options.max_new_tokens = 200;
    options.stop_on_bos = false;  // keep going for all 200 tokens: a steadier measurement
    const glass::GenerateResult r = glass::generate(session, tok, "Once upon a time", options);
    std::printf("measured shipped decode tokens/s: %.0f\n", r.metrics.decode_tokens_per_s);
    std::printf("measured decode / bound: %.2f\n", r.metrics.decode_tokens_per_s / bound);

    draw_roofline(gpus, decode_intensity, prefill_intensity, svg_path);
    std::printf("\nsvg written: %s\n", svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const glass::Error& e) {  // e.g. an SVG path that cannot be written
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
