// 12_kv_cache_growth — journey steps 6/8/9: how big the KV cache gets (C8, C9), drawn as a chart.
//
// In:  the shapes of two real models (fp16 cache) and of the shipped one (fp32 cache):
//        Llama-2-7B  32 layers, 32 KV heads, head_dim 128            (C8)
//        Llama 3 8B  32 layers,  8 KV heads, head_dim 128 — GQA      (C9)
//        stories260K  5 layers,  4 KV heads, head_dim 8   — models/stories260K.bin
// Out: bytes per token = 2 (K and V) · layers · KV heads · head_dim · bytes per value, the total
//      for 4,000 tokens, the same per token for an fp32, fp16 and int8 cache (int8: one byte per
//      value plus an fp32 scale per KV head), the shipped model's real glass::KVCache allocation and how its used part
//      grows during prefill and decode, and an SVG chart of KV bytes against tokens.
//
// Every token adds one K row and one V row to every layer, and they stay until the request ends,
// so the cache grows in a straight line with the sequence. Grouped-query attention shrinks the
// slope: Llama 3 8B shares each K/V head among 4 query heads, so it stores a quarter as much.
//
// Usage: 12_kv_cache_growth [--add NAME LAYERS KV_HEADS HEAD_DIM BYTES_PER_VALUE] [chart.svg]
//   --add     one more model, printed after C8 and C9 and drawn as a third line
//   chart.svg default: kv_cache_growth.svg beside this program, i.e. build/bin/kv_cache_growth.svg
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/kv_cache.hpp"
#include "glass/metrics.hpp"
#include "glass/sampling.hpp"
#include "glass/transformer.hpp"
#include "svg.hpp"

struct CacheShape {
    const char* name;
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int bytes_per_value;  // 2 for fp16, 4 for fp32
};

static void print_shape(const char* label, const CacheShape& m) {
    std::printf("%s %s: layers %d, kv heads %d, head_dim %d, bytes per value %d\n", label, m.name,
                m.n_layers, m.n_kv_heads, m.head_dim, m.bytes_per_value);
}

// The chart: bytes (in GB) against tokens, one straight line per model.
static void draw_chart(const std::vector<CacheShape>& models, const std::vector<std::int64_t>& per_token,
                       std::int64_t shipped_per_token, const std::string& path) {
    // The GB axis reaches 4.5, or further when an added model needs it (in whole half-GBs).
    double max_gb = 4.5;
    for (std::int64_t b : per_token) max_gb = std::max(max_gb, std::ceil(2.0 * b * 8000 / 1e9) / 2);
    const double gb_step = max_gb <= 5 ? 0.5 : std::ceil(max_gb / 9);
    const double max_tokens = 8000;
    const double left = 80, right = 700, top = 50, bottom = 390;  // plot area in pixels
    const auto px = [&](double tokens) { return left + (right - left) * tokens / max_tokens; };
    const auto py = [&](double gb) { return bottom - (bottom - top) * gb / max_gb; };

    svg::Svg s;
    s.width = 740;
    s.height = 460;
    s.root_attributes = "data-figure=\"C8 C9\"";
    s.text(370, 25, "KV cache size grows linearly with the tokens of a request (fp16)", "middle", 15);
    // Axes, grid and tick labels.
    for (int t = 0; t <= 8000; t += 1000) {
        s.line(px(t), bottom, px(t), bottom + 5, "stroke:black");
        s.text(px(t), bottom + 20, std::to_string(t), "middle");
    }
    for (double gb = 0; gb <= max_gb + 1e-9; gb += gb_step) {
        char label[16];
        std::snprintf(label, sizeof label, "%g", gb);
        s.line(left - 5, py(gb), right, py(gb), "stroke:#ddd");
        s.text(left - 10, py(gb) + 4, label, "end");
    }
    s.line(left, bottom, right, bottom, "stroke:black");  // axes over the grid
    s.line(left, top, left, bottom, "stroke:black");
    s.text((left + right) / 2, bottom + 45, "tokens in the sequence (prompt + generated)", "middle", 13);
    s.text(20, (top + bottom) / 2, "GB", "middle", 13);

    // One line per model: the cache is exactly bytes_per_token · tokens, so two points would do;
    // we plot every 1,000 tokens.
    const char* colours[] = {"#c0392b", "#2471a3", "#1e8449", "#7d3c98"};
    for (size_t i = 0; i < models.size(); ++i) {
        std::vector<std::pair<double, double>> points;
        for (int t = 0; t <= 8000; t += 1000)
            points.push_back({px(t), py(static_cast<double>(per_token[i]) * t / 1e9)});
        s.polyline(points, std::string("stroke:") + colours[i % 4] + ";stroke-width:2",
                   "data-model=\"" + std::string(models[i].name) + "\" data-bytes-per-token=\"" +
                       std::to_string(per_token[i]) + "\"");
        const double end_gb = static_cast<double>(per_token[i]) * 8000 / 1e9;
        s.text(right - 5, py(end_gb) - 8,
               std::string(models[i].name) + ": " + std::to_string(per_token[i]) + " B per token",
               "end");
    }
    // C8's headline point: Llama-2-7B after 4,000 tokens.
    const double gb_4000 = static_cast<double>(per_token[0]) * 4000 / 1e9;
    s.circle(px(4000), py(gb_4000), 5, "fill:#c0392b", "data-tokens=\"4000\"");
    s.text(px(4000) + 10, py(gb_4000) + 18, "4,000 tokens: " + svg::num(gb_4000) + " GB");
    s.text(left + 10, top + 15,
           "stories260K (fp32): " + std::to_string(shipped_per_token) +
               " B per token — too small to see at this scale");
    s.save(path);
}

static int run(int argc, char** argv) {
    // ---- C8 and C9: real models, fp16 cache (and one more with --add) ----
    std::vector<CacheShape> models = {
        {"llama-2-7b", 32, 32, 128, 2},
        {"llama-3-8b", 32, 8, 128, 2},
    };
    std::string svg_path = svg::default_path("kv_cache_growth.svg");
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--add") {
            if (i + 5 >= argc) glass::fail("--add needs NAME LAYERS KV_HEADS HEAD_DIM BYTES_PER_VALUE");
            models.push_back({argv[i + 1], example::int_arg(argv[i + 2], "layers", 1, 1024),
                              example::int_arg(argv[i + 3], "kv heads", 1, 1024),
                              example::int_arg(argv[i + 4], "head_dim", 1, 4096),
                              example::int_arg(argv[i + 5], "bytes per value", 1, 8)});
            i += 5;
        } else {
            svg_path = argv[i];
        }
    }
    std::vector<std::int64_t> per_token;
    for (size_t i = 0; i < models.size(); ++i) {
        const CacheShape& m = models[i];
        const char* label = i == 0 ? "C8" : i == 1 ? "C9" : "added";
        print_shape(label, m);
        // 2 (K and V) · layers · KV heads · head_dim · bytes per value
        per_token.push_back(glass::kv_cache_bytes_per_token(m.n_layers, m.n_kv_heads, m.head_dim,
                                                            m.bytes_per_value));
        const std::int64_t b = per_token.back();
        std::printf("%s %s kv bytes per token: %lld (%.1f KiB)\n", label, m.name,
                    static_cast<long long>(b), b / 1024.0);
        std::printf("%s %s kv bytes for 4000 tokens: %lld (%.2f GB)\n", label, m.name,
                    static_cast<long long>(4000 * b), 4000.0 * b / 1e9);
        // The same formula per storage type; int8 adds one fp32 scale per KV head (kv_cache.hpp).
        const std::int64_t fp32 = glass::kv_cache_bytes_per_token(m.n_layers, m.n_kv_heads, m.head_dim, 4);
        const std::int64_t fp16 = glass::kv_cache_bytes_per_token(m.n_layers, m.n_kv_heads, m.head_dim, 2);
        const std::int64_t int8 = glass::kv_cache_bytes_per_token(m.n_layers, m.n_kv_heads, m.head_dim, 1) +
                                  glass::kv_cache_bytes_per_token(m.n_layers, m.n_kv_heads, 1, 4);
        std::printf("%s %s kv bytes per token fp32 fp16 int8: %lld %lld %lld\n", label, m.name,
                    static_cast<long long>(fp32), static_cast<long long>(fp16), static_cast<long long>(int8));
    }
    std::printf("C9 ratio llama-2-7b / llama-3-8b: %lld\n\n",
                static_cast<long long>(per_token[0] / per_token[1]));

    // ---- The shipped model: the real allocation ----
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;
    const CacheShape shipped = {"stories260K", c.n_layers, c.n_kv_heads, c.head_dim, 4};
    print_shape("shipped", shipped);
    const std::int64_t shipped_per_token = c.kv_bytes_per_token();  // fp32
    std::printf("shipped kv bytes per token: %lld\n", static_cast<long long>(shipped_per_token));

    // glass allocates the cache once, for the whole context window. Count what is really there:
    // every layer's K and V matrices, [seq_len, kv_dim] floats each.
    glass::CpuSession session(model);
    const glass::KVCache& cache = session.cache();
    std::int64_t allocated = 0;
    for (int layer = 0; layer < c.n_layers; ++layer)
        allocated += (cache.keys(layer, cache.capacity()).size() +
                      cache.values(layer, cache.capacity()).size()) * std::int64_t{sizeof(float)};
    std::printf("shipped context window: %d tokens\n", cache.capacity());
    std::printf("shipped cache allocated (bytes of all K and V matrices): %lld\n",
                static_cast<long long>(allocated));
    std::printf("shipped bytes per token x context window: %lld\n",
                static_cast<long long>(shipped_per_token * cache.capacity()));
    std::printf("allocation equals formula: %s\n",
                allocated == shipped_per_token * cache.capacity() ? "yes" : "NO");

    // The used part grows with every position: prefill adds the whole prompt, decode one row.
    std::vector<int> ids = tok.encode("Once upon a time", /*add_bos=*/true, /*add_eos=*/false);
    const std::span<const float> logits = session.prefill(ids);
    int next = glass::sample_argmax(logits);
    std::printf("after prefill: %d tokens, %lld bytes used\n", session.position(),
                static_cast<long long>(session.kv_bytes_used()));
    for (int step = 1; step <= 3; ++step) {
        next = glass::sample_argmax(session.decode(next));
        std::printf("after decode step %d: %d tokens, %lld bytes used\n", step, session.position(),
                    static_cast<long long>(session.kv_bytes_used()));
    }

    // The same prompt into an int8 cache: one byte per value and a scale per KV head and token.
    glass::CpuSession int8_session(model, glass::KvType::int8);
    int8_session.prefill(ids);
    std::printf("int8 cache after prefill: %d tokens, %lld bytes used\n", int8_session.position(),
                static_cast<long long>(int8_session.kv_bytes_used()));

    draw_chart(models, per_token, shipped_per_token, svg_path);
    std::printf("\nsvg written: %s\n", svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
