// 23_flash_attention — C19: attention computed tile by tile gives the same result without ever
// holding the [n_q, n_k] score matrix, so the memory traffic of the scores disappears.
//
// Usage: 23_flash_attention [TILE [chart.svg]]
//   TILE (1..8, default 3): keys per tile in part 1's walk; chart.svg default: flash_attention.svg
//   beside this program (build/bin/).
//
// 1. The online softmax by hand, on one query row: the running maximum m, the running sum l and
//    the unnormalised output o, tile by tile, against softmax-then-weighted-sum.
// 2. glass::flash_attention against glass::causal_attention (attention.hpp) on random inputs of
//    stories110M's attention shape, for a prefill, a chunk and a decode step, and the tiles it
//    computed and skipped.
// 3. The bytes of intermediate scores the three-step attention moves through memory per layer as
//    the sequence grows (stories110M and tinyllama1b's head counts), against the tiled version's
//    fixed scratch; drawn to chart.svg.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/flash_attention.hpp"
#include "svg.hpp"

namespace {

double relative_error(const glass::RowMatrix& got, const glass::RowMatrix& want) {
    return double((got - want).norm() / want.norm());
}

// ---- 1. The online softmax on one row ----------------------------------------------------------

void online_softmax_by_hand(int tile) {
    // One query's scores against 8 keys, and each key's value (head_dim 1, to keep it readable).
    const std::vector<float> scores = {1.0f, 3.0f, 0.5f, 4.0f, 2.0f, -1.0f, 5.0f, 0.0f};
    const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
    std::printf("1. The online softmax on one query row (8 keys, tiles of %d)\n", tile);
    std::printf("scores:");
    for (float s : scores) std::printf(" %g", s);
    std::printf("\nvalues:");
    for (float v : values) std::printf(" %g", v);
    std::printf("\n");

    float m = -INFINITY, l = 0.0f, o = 0.0f;  // running max, running sum, unnormalised output
    for (int j0 = 0, t = 1; j0 < static_cast<int>(scores.size()); j0 += tile, ++t) {
        const int j1 = std::min(j0 + tile, static_cast<int>(scores.size()));
        float tile_max = -INFINITY;
        for (int j = j0; j < j1; ++j) tile_max = std::max(tile_max, scores[size_t(j)]);
        const float m_new = std::max(m, tile_max);
        const float correction = std::exp(m - m_new);  // what the old sums are worth under the new max
        l *= correction;
        o *= correction;
        for (int j = j0; j < j1; ++j) {
            const float p = std::exp(scores[size_t(j)] - m_new);
            l += p;
            o += p * values[size_t(j)];
        }
        m = m_new;
        std::printf("tile %d (keys %d-%d): m = %.4f, correction = %.6f, l = %.6f, o = %.6f, o / l = %.6f\n", t, j0,
                    j1 - 1, m, correction, l, o, o / l);
    }
    // The three-step way: softmax over the whole row, then the weighted sum.
    std::vector<float> weights = scores;
    glass::softmax_inplace(weights.data(), static_cast<int>(weights.size()));
    float three_step = 0.0f;
    for (size_t j = 0; j < values.size(); ++j) three_step += weights[j] * values[j];
    std::printf("online result o / l: %.6f\n", o / l);
    std::printf("three-step result (softmax, then the weighted sum): %.6f\n\n", three_step);
}

// ---- 2. The real thing, against the three-step attention ---------------------------------------

void against_three_step() {
    const glass::AttentionShape shape{12, 4, 64};  // stories110M's 12 heads of 64, here 3 per KV head
    const float scale = 1.0f / std::sqrt(64.0f);
    const glass::FlashTiles tiles{16, 32};
    std::mt19937 rng(2026);
    std::printf("2. flash_attention vs causal_attention (12 query heads of 64 over 4 KV heads; tiles %d x %d)\n",
                tiles.q, tiles.k);
    struct Run { const char* label; int start, n_q; };
    glass::FlashCounts prefill_counts;
    for (const Run r : {Run{"prefill of 300 positions", 0, 300}, Run{"chunk of 64 positions after 200", 200, 64},
                        Run{"decode at position 511", 511, 1}}) {
        const int n_k = r.start + r.n_q;
        const glass::RowMatrix q = glass::fast::random_normal_matrix(r.n_q, 12 * 64, rng);
        const glass::RowMatrix k = glass::fast::random_normal_matrix(n_k, 4 * 64, rng), v = glass::fast::random_normal_matrix(n_k, 4 * 64, rng);
        glass::FlashCounts counts;
        const glass::RowMatrix flash = glass::flash_attention(q, k, v, r.start, shape, scale, tiles, &counts);
        const glass::RowMatrix three_step = glass::causal_attention(q, k, v, r.start, shape, scale);
        std::printf("%s, relative error: %.2e\n", r.label, relative_error(flash, three_step));
        if (r.start == 0) prefill_counts = counts;
    }
    std::printf("prefill tiles computed: %lld\n", static_cast<long long>(prefill_counts.tiles_computed));
    std::printf("prefill tiles skipped (after the diagonal): %lld\n",
                static_cast<long long>(prefill_counts.tiles_skipped));
    std::printf("prefill scores computed: %lld of 12 x 300 x 300 = %lld\n",
                static_cast<long long>(prefill_counts.scores_computed), 12LL * 300 * 300);
    std::printf("scratch floats held at once: %lld\n\n", static_cast<long long>(prefill_counts.scratch_floats));
}

// ---- 3. Memory traffic of the scores ------------------------------------------------------------

struct Shape {
    const char* name;
    int n_heads;
};

void draw_chart(const std::vector<Shape>& shapes, const std::vector<int>& lengths, std::int64_t scratch_bytes,
                const std::string& path) {
    const double left = 90, right = 700, top = 50, bottom = 380;
    const double max_n = lengths.back();
    double max_gb = 0;
    for (const Shape& s : shapes) max_gb = std::max(max_gb, glass::naive_score_bytes(s.n_heads, lengths.back(), lengths.back()) / 1e9);
    max_gb = std::ceil(max_gb / 5) * 5;
    const auto px = [&](double n) { return left + (right - left) * n / max_n; };
    const auto py = [&](double gb) { return bottom - (bottom - top) * gb / max_gb; };
    svg::Svg s;
    s.width = 740;
    s.height = 450;
    s.root_attributes = "data-figure=\"C19\"";
    s.text(370, 25, "Score traffic per layer: three-step attention vs tiled (FlashAttention), fp32", "middle", 15);
    for (int n = 0; n <= lengths.back(); n += 1024) {
        s.line(px(n), bottom, px(n), bottom + 5, "stroke:black");
        s.text(px(n), bottom + 20, std::to_string(n), "middle");
    }
    const double step = svg::nice_step(max_gb, 6);
    for (double gb = 0; gb <= max_gb + 1e-9; gb += step) {
        s.line(left - 5, py(gb), right, py(gb), "stroke:#ddd");
        char label[16];
        std::snprintf(label, sizeof label, "%g", gb);
        s.text(left - 10, py(gb) + 4, label, "end");
    }
    s.line(left, bottom, right, bottom, "stroke:black");
    s.line(left, top, left, bottom, "stroke:black");
    s.text((left + right) / 2, bottom + 45, "positions (a prefill of n tokens: n queries over n keys)", "middle", 13);
    s.text(25, (top + bottom) / 2, "GB", "middle", 13);
    const char* colours[] = {"#c0392b", "#2471a3"};
    for (size_t i = 0; i < shapes.size(); ++i) {
        std::vector<std::pair<double, double>> points;
        for (int n = 0; n <= lengths.back(); n += 256)
            points.push_back({px(n), py(glass::naive_score_bytes(shapes[i].n_heads, n, n) / 1e9)});
        s.polyline(points, std::string("stroke:") + colours[i % 2] + ";stroke-width:2",
                   "data-shape=\"" + std::string(shapes[i].name) + "\" data-heads=\"" +
                       std::to_string(shapes[i].n_heads) + "\"");
        const double end_gb = glass::naive_score_bytes(shapes[i].n_heads, lengths.back(), lengths.back()) / 1e9;
        s.text(right - 5, py(end_gb) - 8, std::string(shapes[i].name) + " three-step: " + svg::num(end_gb) + " GB", "end");
    }
    s.polyline({{px(0), py(0)}, {px(max_n), py(0)}}, "stroke:#1e8449;stroke-width:3",
               "data-series=\"tiled\" data-scratch-bytes=\"" + std::to_string(scratch_bytes) + "\"");
    s.text(right - 5, py(0) - 8, "tiled: no score traffic, " + std::to_string(scratch_bytes / 1024) + " KiB scratch per worker",
           "end");
    s.save(path);
}

int run(int argc, char** argv) {
    if (argc > 3) glass::fail("usage: 23_flash_attention [TILE [chart.svg]]");
    const int tile = argc > 1 ? example::int_arg(argv[1], "TILE (keys per tile in part 1)", 1, 8) : 3;
    const std::string svg_path = argc > 2 ? argv[2] : svg::default_path("flash_attention.svg");

    std::printf("C19 FlashAttention: attention tile by tile, never holding the [n_q, n_k] scores\n\n");
    online_softmax_by_hand(tile);
    against_three_step();

    const std::vector<Shape> shapes = {{"stories110M", 12}, {"tinyllama1b", 32}};
    const std::vector<int> lengths = {512, 1024, 2048, 4096, 8192};
    const glass::FlashTiles tiles{64, 64};
    const int head_dim = 64;  // both shapes
    const std::int64_t scratch_bytes = 4 * (std::int64_t{tiles.q} * tiles.k + std::int64_t{tiles.q} * (head_dim + 2));
    std::printf("3. Intermediate scores moved through memory per layer, fp32 (S written, read and written by the\n"
                "softmax, read by S V; a prefill of n positions), and the tiled version's scratch (%d x %d tiles)\n",
                tiles.q, tiles.k);
    std::printf("| positions | stories110M three-step MB | tinyllama1b three-step MB | tiled score traffic | tiled scratch per worker |\n");
    std::printf("|---:|---:|---:|---:|---:|\n");
    for (int n : lengths)
        std::printf("| %d | %.1f | %.1f | 0 | %lld bytes |\n", n, glass::naive_score_bytes(12, n, n) / 1e6,
                    glass::naive_score_bytes(32, n, n) / 1e6, static_cast<long long>(scratch_bytes));
    std::printf("stories110M three-step MB at 8192: %.1f\n", glass::naive_score_bytes(12, 8192, 8192) / 1e6);
    std::printf("tiled scratch bytes per worker: %lld\n", static_cast<long long>(scratch_bytes));
    draw_chart(shapes, lengths, scratch_bytes, svg_path);
    std::printf("\nsvg written: %s\n", svg_path.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
