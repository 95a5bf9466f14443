// examples/serving.hpp — what the measured serving examples (17, 19, 20) share: a model of a real
// shape with random weights for the fast paged backend, their common arguments, and a bar chart.
//
// Not part of the journey. Speed depends on a model's shape, not on what its weights say, so these
// examples build stories15M's or stories110M's shape (or the shipped stories260K's, which runs in
// seconds on any kernel set) in memory with random weights (glass/fast/random_model.hpp) and serve
// it with the fast CPU path (glass/fast/fast_paged_backend.hpp); glass::NumberTokenizer
// stands in for a vocabulary.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/tokenizer.hpp"
#include "serve_measure.hpp"  // the benchmarks' harness (bench/measure/)
#include "svg.hpp"

namespace serving {

// The arguments every one of the three takes.
struct Common {
    std::string shape = "stories15M";
    int threads = 2;
    std::string svg_path;
};

// Reads --shape and --threads at argv[i] (and its value); true if it was one of them.
inline bool common_arg(Common& c, int argc, char** argv, int& i) {
    const std::string a = argv[i];
    if (a != "--shape" && a != "--threads") return false;
    if (i + 1 >= argc) glass::fail("'", a, "' needs a value");
    const std::string v = argv[++i];
    if (a == "--threads") {
        c.threads = example::int_arg(v.c_str(), "threads", 1, 64);
    } else {
        if (v != "stories260K" && v != "stories15M" && v != "stories110M")
            glass::fail("shape '", v, "' is not stories260K, stories15M or stories110M");
        c.shape = v;
    }
    return true;
}

// A named shape: glass::fast::shape_config's, or stories260K, the shipped model's (its file's
// header: dim 64, hidden 172, 5 layers, 8 heads sharing 4 KV heads, vocab 512, context 512), small
// enough that a walkthrough's run takes seconds even on the plain loops (GLASS_KERNELS=portable).
inline glass::ModelConfig shape_config(const std::string& shape) {
    if (shape != "stories260K") return glass::fast::shape_config(shape);
    glass::ModelConfig c;
    c.dim = 64;
    c.hidden_dim = 172;
    c.n_layers = 5;
    c.n_heads = 8;
    c.n_kv_heads = 4;
    c.vocab_size = 512;
    c.seq_len = 512;
    c.shared_classifier = true;
    c.head_dim = c.dim / c.n_heads;
    return c;
}

// The named shape with its context window raised to at least `min_context` positions.
inline glass::ModelConfig shape_with_context(const std::string& shape, int min_context) {
    glass::ModelConfig c = shape_config(shape);
    c.seq_len = std::max(c.seq_len, min_context);
    return c;
}

inline void print_model(const std::string& shape, const glass::ModelConfig& c) {
    std::printf("model: %s's shape, random weights: dim %d, %d layers, hidden %d, vocab %d\n", shape.c_str(), c.dim,
                c.n_layers, c.hidden_dim, c.vocab_size);
}

// The fast paged backend with fp32 weights on `threads` threads.
inline glass::fast::FastOptions fast_options(int threads) {
    glass::fast::FastOptions o;
    o.threads = threads;
    return o;
}

// Runs one prompt of `rows` tokens through an engine on `backend`, untimed, so the backend's
// buffers have grown to the largest pass a measurement will make (the first pass of a new size
// allocates them) before any clock starts.
inline void warm_up(glass::serve::PagedBackend& backend, const glass::Tokenizer& tok, int rows) {
    glass::serve::EngineOptions eo;
    eo.scheduler.max_tokens_per_step = rows;
    eo.num_blocks = (rows + eo.block_size - 1) / eo.block_size;  // a pool just big enough
    glass::serve::Engine engine(backend, tok, eo);
    std::mt19937 rng(7);
    engine.add_request_ids(serve_measure::random_prompt(rows, backend.config().vocab_size, rng),
                           serve_measure::fixed_length(1));
    engine.run_to_completion();
}

// "held" or "missed": one word, whichever it is.
inline const char* verdict(bool held) { return held ? "held" : "missed"; }

// Bars in groups along x (one group per turn, batch size, ...), one bar per series in each group,
// heights on a linear axis from 0. Each bar carries data-group, data-series and data-value; the
// root carries the plot area and the value at its top (data-max), so a reader of the file can
// turn a bar's height back into its number.
struct BarChart {
    std::string figure;                       // data-figure on the root, e.g. "C16"
    std::string title, x_label, y_label;
    std::vector<std::string> groups;          // label under each group
    std::vector<std::string> series;          // legend entries, one colour each
    std::vector<std::vector<double>> values;  // [group][series]
    double reference = 0;                     // > 0: a dashed horizontal line at this value
    std::string reference_label;
};

inline void draw(const BarChart& chart, const std::string& path) {
    double max_value = chart.reference;
    for (const std::vector<double>& g : chart.values)
        for (double v : g) max_value = std::max(max_value, v);
    if (!(max_value > 0)) max_value = 1;
    const double step = svg::nice_step(max_value * 1.05, 6);
    max_value = std::ceil(max_value * 1.05 / step) * step;  // the axis ends on a tick
    const double left = 80, right = 700, top = 70, bottom = 390;  // plot area in pixels
    const auto py = [&](double v) { return bottom - (bottom - top) * v / max_value; };
    const double group_width = (right - left) / static_cast<double>(chart.groups.size());
    const double bar_width = 0.8 * group_width / static_cast<double>(chart.series.size());

    svg::Svg s;
    s.width = 740;
    s.height = 470;
    s.root_attributes = "data-figure=\"" + chart.figure + "\" data-plot-top=\"" + svg::num(top) +
                        "\" data-plot-bottom=\"" + svg::num(bottom) + "\" data-max=\"" + svg::num(max_value) + "\"";
    s.text(370, 25, chart.title, "middle", 15);
    for (double v = 0; v <= max_value + 1e-9 * max_value; v += step) {
        char label[24];
        std::snprintf(label, sizeof label, "%g", v);
        s.line(left - 5, py(v), right, py(v), "stroke:#ddd");
        s.text(left - 10, py(v) + 4, label, "end");
    }
    const char* colours[] = {"#c0392b", "#2471a3", "#1e8449"};
    for (size_t g = 0; g < chart.groups.size(); ++g) {
        const double x0 = left + group_width * static_cast<double>(g) + 0.1 * group_width;
        for (size_t k = 0; k < chart.series.size(); ++k) {
            const double v = chart.values[g][k];
            char value[32];
            std::snprintf(value, sizeof value, "%.6g", v);
            s.rect(x0 + bar_width * static_cast<double>(k), py(v), bar_width, bottom - py(v),
                   std::string("fill:") + colours[k % 3],
                   "data-group=\"" + svg::escape(chart.groups[g]) + "\" data-series=\"" + svg::escape(chart.series[k]) +
                       "\" data-value=\"" + value + "\"");
        }
        s.text(left + group_width * (static_cast<double>(g) + 0.5), bottom + 20, chart.groups[g], "middle");
    }
    s.line(left, bottom, right, bottom, "stroke:black");  // axes over the grid and bars
    s.line(left, top, left, bottom, "stroke:black");
    s.text((left + right) / 2, bottom + 45, chart.x_label, "middle", 13);
    s.text(left - 70, top - 20, chart.y_label, "start", 13);
    if (chart.reference > 0) {
        char value[32];
        std::snprintf(value, sizeof value, "%.6g", chart.reference);
        s.line(left, py(chart.reference), right, py(chart.reference), "stroke:black;stroke-dasharray:8 4",
               std::string("data-series=\"reference\" data-value=\"") + value + "\"");
        s.text(right - 5, py(chart.reference) - 6, chart.reference_label, "end");
    }
    // The legend, in one row above the plot: a swatch of each series' colour, then its name.
    double x = left + 60;
    for (size_t k = 0; k < chart.series.size(); ++k) {
        s.rect(x, top - 30, 12, 12, std::string("fill:") + colours[k % 3]);
        s.text(x + 18, top - 20, chart.series[k]);
        x += 40 + 7 * static_cast<double>(chart.series[k].size());
    }
    s.save(path);
}

}  // namespace serving
