// The figure-drawing examples (12_kv_cache_growth: C8/C9, 13_roofline: C7): the numbers they print
// against values this file computes on its own (the claims' arithmetic, the checkpoint file's
// header and size), and the SVG they write: well-formed XML, the expected elements, and geometry
// that says what the numbers say (line slopes, ridge points).
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"
#include "xml_reader.hpp"

namespace test_figures {  // this file's own names (tests are built in unity batches)

using test::value_of;
using test::number;
using test::read_file;
using test::temp_dir;
using namespace test::xml;  // parse_xml, of_kind, points_of, attr_number

namespace {

// A printed value with `decimals` digits after the point equals `expected` to that rounding.
void check_printed(const std::string& out, const std::string& label, double expected, int decimals) {
    const double printed = number(out, label);
    const double half_step = 0.5 * std::pow(10.0, -decimals) * (1 + 1e-9);
    INFO(label << ": printed " << printed << ", expected " << expected);
    CHECK(std::fabs(printed - expected) <= half_step);
}

// The shipped checkpoint's 7-int header, read here from the file (not through glass).
struct Header {
    std::int64_t dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};
Header shipped_header() {
    std::ifstream in(test::shipped_model(), std::ios::binary);
    std::int32_t h[7] = {};
    in.read(reinterpret_cast<char*>(h), sizeof h);
    REQUIRE(in.good());
    return {h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -std::int64_t{h[5]} : h[5], h[6]};
}

}  // namespace

TEST_CASE("parse_xml rejects what is not well-formed (so the SVG checks below can fail)") {
    CHECK(parse_xml("<svg><line x=\"1\"/></svg>").size() == 2);
    CHECK_THROWS(parse_xml("<svg><g></svg>"));
    CHECK_THROWS(parse_xml("<svg x=1></svg>"));
    CHECK_THROWS(parse_xml("<svg>a & b</svg>"));
    CHECK_THROWS(parse_xml("<svg></svg><svg></svg>"));
    CHECK_THROWS(parse_xml("<svg><text>unclosed"));
}

TEST_CASE("example 12_kv_cache_growth: C8, C9, the real allocation, and the chart") {
    const std::string dir = temp_dir("kv");
    const std::string svg_path = dir + "/kv.svg";
    const test::Run r = test::run(test::bin_dir() + "/12_kv_cache_growth " + test::sh(svg_path));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);

    // C8: Llama-2-7B, 32 layers, 32 KV heads of 128, fp16: 2·32·32·128·2 bytes per token.
    const std::int64_t llama2 = 2LL * 32 * 32 * 128 * 2, llama3 = 2LL * 32 * 8 * 128 * 2;
    CHECK(llama2 == 524288);  // the article's figure
    CHECK(llama3 == 131072);  // 128 KiB, C9
    CHECK(number(r.out, "C8 llama-2-7b kv bytes per token") == llama2);
    CHECK(number(r.out, "C8 llama-2-7b kv bytes for 4000 tokens") == 4000.0 * llama2);
    // "4,000 tokens ≈ 2.1 GB": printed as "(2.10 GB)" after the byte count.
    CHECK(value_of(r.out, "C8 llama-2-7b kv bytes for 4000 tokens").find("(2.10 GB)") != std::string::npos);
    CHECK(number(r.out, "C9 llama-3-8b kv bytes per token") == llama3);
    CHECK(number(r.out, "C9 ratio llama-2-7b / llama-3-8b") == 4);
    // Per storage type: fp32 twice fp16; int8 one byte per value plus a 4-byte scale per (layer,
    // KV head) for K and for V: 2·32·32·(128 + 4) for Llama 2 7B.
    CHECK(value_of(r.out, "C8 llama-2-7b kv bytes per token fp32 fp16 int8") ==
          std::to_string(2 * llama2) + " " + std::to_string(llama2) + " " + std::to_string(2LL * 32 * 32 * (128 + 4)));
    CHECK(value_of(r.out, "C9 llama-3-8b kv bytes per token fp32 fp16 int8") ==
          std::to_string(2 * llama3) + " " + std::to_string(llama3) + " " + std::to_string(2LL * 32 * 8 * (128 + 4)));

    // The shipped model, from the checkpoint's own header: fp32 values.
    const Header h = shipped_header();
    const std::int64_t per_token = 2 * h.layers * h.kv_heads * (h.dim / h.heads) * 4;
    CHECK(number(r.out, "shipped kv bytes per token") == per_token);
    CHECK(number(r.out, "shipped context window") == h.seq_len);
    CHECK(number(r.out, "shipped cache allocated (bytes of all K and V matrices)") == per_token * h.seq_len);
    CHECK(value_of(r.out, "allocation equals formula") == "yes");
    // Prefill of "Once upon a time": as many positions as llama2.c's prompt ids; then +1 per step.
    std::int64_t n_prompt = 0;
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl")))
        if (g["prompt"] == "Once upon a time") n_prompt = static_cast<std::int64_t>(g["prompt_ids"].size());
    REQUIRE(n_prompt > 0);
    CHECK(value_of(r.out, "after prefill") ==
          std::to_string(n_prompt) + " tokens, " + std::to_string(n_prompt * per_token) + " bytes used");
    for (int step = 1; step <= 3; ++step)
        CHECK(value_of(r.out, "after decode step " + std::to_string(step)) ==
              std::to_string(n_prompt + step) + " tokens, " +
                  std::to_string((n_prompt + step) * per_token) + " bytes used");
    const std::int64_t int8_per_token = 2 * h.layers * h.kv_heads * (h.dim / h.heads + 4);
    CHECK(value_of(r.out, "int8 cache after prefill") ==
          std::to_string(n_prompt) + " tokens, " + std::to_string(n_prompt * int8_per_token) + " bytes used");
    CHECK(value_of(r.out, "svg written") == svg_path);

    // The chart: well-formed, one straight line per model starting at (0 tokens, 0 bytes), the
    // Llama-2 line 4x as steep as the Llama 3 one, and the 4,000-token marker on the Llama-2 line.
    std::vector<Element> all;
    REQUIRE_NOTHROW(all = parse_xml(read_file(svg_path)));
    REQUIRE(all.front().name == "svg");
    CHECK(all.front().attributes.at("xmlns") == "http://www.w3.org/2000/svg");
    const std::vector<Element> lines = of_kind(all, "polyline");
    REQUIRE(lines.size() == 2);
    CHECK(attr_number(lines[0], "data-bytes-per-token") == llama2);
    CHECK(attr_number(lines[1], "data-bytes-per-token") == llama3);
    std::vector<double> rise;  // pixels climbed from 0 to the last point
    for (const Element& line : lines) {
        const auto p = points_of(line);
        REQUIRE(p.size() >= 3);
        const double slope = (p.back().second - p.front().second) / (p.back().first - p.front().first);
        for (size_t i = 1; i + 1 < p.size(); ++i) {
            // Straight: every point on the line through the ends (coordinates printed to 0.01 px).
            const double expected_y = p.front().second + slope * (p[i].first - p.front().first);
            CHECK(std::fabs(p[i].second - expected_y) < 0.02);
        }
        rise.push_back(p.front().second - p.back().second);
    }
    CHECK(points_of(lines[0]).front() == points_of(lines[1]).front());  // both start at zero
    // Rises are ~317 px and ~79 px, each rounded to 0.01 px: a ratio within 1e-3 of 4.
    CHECK(std::fabs(rise[0] / rise[1] - 4.0) < 1e-3);
    const std::vector<Element> marks = of_kind(all, "circle");
    REQUIRE(marks.size() == 1);
    CHECK(attr_number(marks[0], "data-tokens") == 4000);
    const auto p = points_of(lines[0]);
    const double t = (attr_number(marks[0], "cx") - p.front().first) / (p.back().first - p.front().first);
    CHECK(std::fabs(t - 0.5) < 1e-3);  // 4,000 of 8,000 tokens
    CHECK(std::fabs(attr_number(marks[0], "cy") - (p.front().second - 0.5 * rise[0])) < 0.02);
    CHECK(of_kind(all, "text").size() >= 10);  // title, tick labels, axis titles, line labels
    std::filesystem::remove_all(dir);
}

TEST_CASE("example 12_kv_cache_growth: --add prints and draws one more model") {
    const std::string dir = temp_dir("kv_add");
    const std::string svg_path = dir + "/kv.svg";
    // Llama-2-70B: 80 layers, 8 KV heads of 128, fp16.
    const test::Run r = test::run(test::bin_dir() + "/12_kv_cache_growth --add llama-2-70b 80 8 128 2 " + test::sh(svg_path));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const std::int64_t per_token = 2LL * 80 * 8 * 128 * 2;
    CHECK(per_token == 327680);
    CHECK(value_of(r.out, "added llama-2-70b") == "layers 80, kv heads 8, head_dim 128, bytes per value 2");
    CHECK(number(r.out, "added llama-2-70b kv bytes per token") == per_token);
    CHECK(value_of(r.out, "added llama-2-70b kv bytes for 4000 tokens") ==
          std::to_string(4000 * per_token) + " (1.31 GB)");
    CHECK(number(r.out, "C8 llama-2-7b kv bytes per token") == 524288);  // the article's two stay
    std::vector<Element> all;
    REQUIRE_NOTHROW(all = parse_xml(read_file(svg_path)));
    const std::vector<Element> lines = of_kind(all, "polyline");
    REQUIRE(lines.size() == 3);
    CHECK(lines[2].attributes.at("data-model") == "llama-2-70b");
    CHECK(attr_number(lines[2], "data-bytes-per-token") == per_token);
    // A model whose line would leave the chart makes the axis taller: the top point stays inside.
    const test::Run big = test::run(test::bin_dir() + "/12_kv_cache_growth --add big 80 64 128 2 " + test::sh(svg_path));
    REQUIRE(big.exit_code == 0);
    REQUIRE_NOTHROW(all = parse_xml(read_file(svg_path)));
    for (const auto& [x, y] : points_of(of_kind(all, "polyline").at(2))) CHECK(y >= 0);
    std::filesystem::remove_all(dir);

    for (const char* bad : {"--add x 0 8 128 2", "--add x 80 8 128", "--add x 80 eight 128 2"}) {
        const test::Run b = test::run(test::bin_dir() + "/12_kv_cache_growth " + bad);
        CHECK(b.exit_code == 1);
        CHECK(b.err.find("error:") != std::string::npos);
    }
}

TEST_CASE("example 12_kv_cache_growth: by default the chart goes beside the program; bad paths are errors") {
    const std::string dir = temp_dir("kv_default");
    // Run from a scratch directory: nothing may be written there.
    const test::Run r = test::run("cd " + test::sh(dir) + " && " + test::bin_dir() + "/12_kv_cache_growth");
    REQUIRE(r.exit_code == 0);
    const std::filesystem::path expected = std::filesystem::canonical(test::bin_dir()) / "kv_cache_growth.svg";
    CHECK(value_of(r.out, "svg written") == expected.string());
    CHECK(std::filesystem::exists(expected));
    CHECK(std::filesystem::is_empty(dir));
    std::filesystem::remove_all(dir);

    const test::Run bad = test::run(test::bin_dir() + "/12_kv_cache_growth /nonexistent/dir/kv.svg");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("/nonexistent/dir/kv.svg") != std::string::npos);
}

// The value of one property in a style="a:b;c:d" attribute ("" when absent).
static std::string style_of(const Element& e, const std::string& property) {
    const std::string style = e.attributes.count("style") ? e.attributes.at("style") : "";
    std::istringstream parts(style);
    for (std::string part; std::getline(parts, part, ';');)
        if (part.rfind(property + ":", 0) == 0) return part.substr(property.size() + 1);
    return "";
}

// Characters of a UTF-8 string (not bytes).
static size_t characters(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// The C7 lines of 13_roofline for `bytes_per_weight` bytes per weight, derived here.
static void check_c7(const std::string& out, double bytes_per_weight) {
    CAPTURE(bytes_per_weight);
    const double bytes = 7e9 * bytes_per_weight;
    CHECK(number(out, "C7 weight bytes per token") == bytes);
    check_printed(out, "C7 H100 time per token ms", bytes / 3.35e12 * 1e3, 2);
    check_printed(out, "C7 H100 tokens/s bound", 3.35e12 / bytes, 1);
    check_printed(out, "C7 H200 time per token ms", bytes / 4.8e12 * 1e3, 2);
    check_printed(out, "C7 H200 tokens/s bound", 4.8e12 / bytes, 1);
    // With the KV cache a 4,096-token Llama-2-7B conversation holds: 2 (K, V) · 32 layers ·
    // 32 KV heads · 128 · 2 bytes (fp16) per cached token, every one read at every step.
    const double kv = 2.0 * 32 * 32 * 128 * 2 * 4096;
    CHECK(kv == 2147483648.0);  // 2^31: 2.15 GB
    CHECK(number(out, "C7 kv bytes read per token at 4096 tokens") == kv);
    CHECK(number(out, "C7 weights + kv bytes per token") == bytes + kv);
    check_printed(out, "C7 H100 at 4096 tokens, time per token ms", (bytes + kv) / 3.35e12 * 1e3, 2);
    check_printed(out, "C7 H100 at 4096 tokens, tokens/s bound", 3.35e12 / (bytes + kv), 1);
    check_printed(out, "C7 H200 at 4096 tokens, time per token ms", (bytes + kv) / 4.8e12 * 1e3, 2);
    check_printed(out, "C7 H200 at 4096 tokens, tokens/s bound", 4.8e12 / (bytes + kv), 1);
    // The roofline: 2 FLOPs per weight over bytes_per_weight bytes.
    check_printed(out, "roofline decode intensity FLOPs/byte", 2 / bytes_per_weight, 1);
    check_printed(out, "roofline prefill 1000 tokens intensity FLOPs/byte", 2000 / bytes_per_weight, 1);
}

TEST_CASE("example 13_roofline: C7 arithmetic with and without the KV cache, the roofline's answer, this machine, and the chart") {
    const std::string dir = temp_dir("roof");
    const std::string svg_path = dir + "/roof.svg";
    const test::Run r = test::run(test::bin_dir() + "/13_roofline " + test::sh(svg_path));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);

    // C7: 7e9 weights x 2 bytes = 14 GB read per token. H100 3.35 TB/s, H200 4.8 TB/s.
    CHECK(value_of(r.out, "C7 model") == "7B parameters, fp16, bytes per weight 2");
    check_c7(r.out, 2);
    CHECK(std::fabs(number(r.out, "C7 H100 time per token ms") - 4.2) < 0.05);  // the article's "≈ 4.2 ms"
    CHECK(std::fabs(number(r.out, "C7 H100 tokens/s bound") - 240) < 1);        // "≈ 240"

    // Roofline: decode does 2 FLOPs per 2-byte weight = 1 FLOP/byte, so at 1 FLOP/byte the
    // attainable rate is bandwidth x 1, i.e. the same tokens/s as the bandwidth bound.
    CHECK(value_of(r.out, "roofline H100 peak TFLOP/s").find("ridge FLOPs/byte: 295.2") != std::string::npos);
    CHECK(value_of(r.out, "roofline H200 peak TFLOP/s").find("ridge FLOPs/byte: 206.0") != std::string::npos);
    CHECK(value_of(r.out, "roofline H100 decode attainable TFLOP/s") == "3.35 -> tokens/s: 239.3");
    CHECK(value_of(r.out, "roofline H200 decode attainable TFLOP/s") == "4.80 -> tokens/s: 342.9");
    CHECK(r.out.find("roofline H100 prefill is compute-bound") != std::string::npos);
    CHECK(r.out.find("roofline H200 prefill is compute-bound") != std::string::npos);

    // This machine: stories110M's shape (dim 768, hidden 2048, 12 layers, 12 heads and KV heads,
    // vocab 32,000, shared classifier), fp32. Per decoded token every layer matrix and norm, the
    // final norm and the classifier (= the embedding table) are read once.
    const std::int64_t d = 768, h = 2048, L = 12, vocab = 32000;
    const std::int64_t per_layer = 2 * d + 4 * d * d + 3 * h * d;  // norms, wq wk wv wo, w1 w2 w3
    const std::int64_t weight_bytes = 4 * (L * per_layer + d + vocab * d);
    CHECK(weight_bytes == 438119424);
    CHECK(number(r.out, "random stories110M weight bytes per token") == weight_bytes);
    CHECK(weight_bytes > 10 * (std::int64_t{32} << 20));  // more than ten times this machine's 32 MB L3
    // Measured numbers vary; check only that they are positive and consistent with each other, up
    // to the rounding of what is printed: bandwidth to 0.1 GB/s (so bandwidth / weight bytes moves
    // by at most 0.05e9 / weight_bytes), tokens/s to 0.1 (+-0.05), the ratio to 0.01 (+-0.005).
    // Bounds of the rounding, not of the machine: they hold on a slow (sanitized) build too.
    const double bandwidth = number(r.out, "measured read bandwidth GB/s (one core)") * 1e9;
    const double bound = number(r.out, "bound tokens/s (bandwidth / weight bytes)");
    const double decode = number(r.out, "measured decode tokens/s (8 steps)");
    CHECK(bandwidth > 0);
    CHECK(decode > 0);
    REQUIRE(bound > 0.1);
    CHECK(std::fabs(bound - bandwidth / weight_bytes) <= 0.05e9 / weight_bytes + 0.05 + 1e-9);
    const double ratio = decode / bound;  // each side within 0.05 of the unrounded value
    CHECK(std::fabs(number(r.out, "measured decode / bound") - ratio) <= 0.005 + 0.05 * (1 + ratio) / (bound - 0.05) + 1e-9);
    CHECK(value_of(r.out, "svg written") == svg_path);

    // The chart: log-log with the same pixels per decade on both axes, so a bandwidth roof
    // (FLOP/s = bandwidth x intensity) climbs at exactly 45 degrees, then runs flat at the peak.
    std::vector<Element> all;
    REQUIRE_NOTHROW(all = parse_xml(read_file(svg_path)));
    REQUIRE(all.front().name == "svg");
    const Element& root = all.front();
    const double per_decade = attr_number(root, "data-px-per-decade");
    const std::vector<Element> roofs = of_kind(all, "polyline");
    REQUIRE(roofs.size() == 2);
    CHECK(roofs[0].attributes.at("data-gpu") == "H100");
    CHECK(roofs[1].attributes.at("data-gpu") == "H200");
    CHECK(attr_number(roofs[0], "data-bandwidth-bytes-per-s") == 3.35e12);
    CHECK(attr_number(roofs[1], "data-bandwidth-bytes-per-s") == 4.8e12);
    std::vector<double> ridge_x, flat_y;
    for (const Element& roof : roofs) {
        const auto p = points_of(roof);
        REQUIRE(p.size() == 3);
        // Slope in pixels: -1 (y grows downward), to the 0.01 px rounding of the coordinates.
        CHECK(std::fabs((p[1].second - p[0].second) / (p[1].first - p[0].first) + 1) < 1e-3);
        CHECK(p[1].second == p[2].second);  // flat roof
        // The ridge sits at peak / bandwidth FLOPs per byte: check its decade distance from the
        // left end of the line, which is at 0.1 FLOPs per byte.
        const double ridge = attr_number(roof, "data-peak-flops") / attr_number(roof, "data-bandwidth-bytes-per-s");
        CHECK(std::fabs((p[1].first - p[0].first) / per_decade - (std::log10(ridge) - std::log10(0.1))) < 1e-3);
        ridge_x.push_back(p[1].first);
        flat_y.push_back(p[1].second);
    }
    CHECK(flat_y[0] == flat_y[1]);  // the same peak compute
    // H200's extra bandwidth moves its ridge left by log10(4.8 / 3.35) decades.
    CHECK(std::fabs((ridge_x[0] - ridge_x[1]) / per_decade - std::log10(4.8 / 3.35)) < 1e-3);
    // Four operating points (decode and prefill on each roof), each on its roof, in its colour.
    const std::vector<Element> points = of_kind(all, "circle");
    REQUIRE(points.size() == 4);
    for (const Element& c : points) {
        const Element& roof = roofs[c.attributes.at("data-gpu") == "H100" ? 0 : 1];
        const auto p = points_of(roof);
        const double x = attr_number(c, "cx"), y = attr_number(c, "cy");
        const double roof_y = x <= p[1].first ? p[0].second - (x - p[0].first) : p[1].second;
        CHECK(std::fabs(y - roof_y) < 0.03);
        CHECK(style_of(c, "fill") == style_of(roof, "stroke"));
    }

    // Each roof has its own colour, and the flat parts (which coincide) differ in dash pattern,
    // so both stay visible.
    CHECK(!style_of(roofs[0], "stroke").empty());
    CHECK(style_of(roofs[0], "stroke") != style_of(roofs[1], "stroke"));
    CHECK(style_of(roofs[0], "stroke-dasharray") != style_of(roofs[1], "stroke-dasharray"));
    // A key: per GPU, a swatch drawn like its roof and a text that names it.
    for (const Element& roof : roofs) {
        const std::string gpu = roof.attributes.at("data-gpu");
        int swatches = 0, texts = 0;
        for (const Element& e : all) {
            if (!e.attributes.count("data-key") || e.attributes.at("data-key") != gpu) continue;
            if (e.name == "line") {
                ++swatches;
                CHECK(style_of(e, "stroke") == style_of(roof, "stroke"));
                CHECK(style_of(e, "stroke-dasharray") == style_of(roof, "stroke-dasharray"));
            }
            if (e.name == "text") {
                ++texts;
                CHECK(e.text.rfind(gpu + ":", 0) == 0);
            }
        }
        CHECK(swatches == 1);
        CHECK(texts == 1);
    }
    // The plot area is where the axes are; every label lies inside it. A label's width is
    // estimated generously at 0.6 x font size per character (sans-serif averages about 0.5).
    const double left = attr_number(root, "data-plot-left"), right = attr_number(root, "data-plot-right");
    const double top = attr_number(root, "data-plot-top"), bottom = attr_number(root, "data-plot-bottom");
    CHECK(right - left == doctest::Approx(5 * per_decade));  // 0.1 .. 10^4 FLOPs per byte
    CHECK(bottom - top == doctest::Approx(5 * per_decade));  // 0.1 .. 10^4 TFLOP/s
    int axes = 0;
    for (const Element& l : of_kind(all, "line"))
        if (style_of(l, "stroke") == "black" &&
            ((attr_number(l, "x1") == left && attr_number(l, "x2") == left && attr_number(l, "y1") == top &&
              attr_number(l, "y2") == bottom) ||
             (attr_number(l, "y1") == bottom && attr_number(l, "y2") == bottom && attr_number(l, "x1") == left &&
              attr_number(l, "x2") == right)))
            ++axes;
    CHECK(axes == 2);
    int labels = 0;
    for (const Element& t : of_kind(all, "text")) {
        if (!t.attributes.count("data-label")) continue;
        ++labels;
        INFO("label: " << t.text);
        const double size = attr_number(t, "font-size"), width = 0.6 * size * static_cast<double>(characters(t.text));
        const std::string anchor = t.attributes.at("text-anchor");
        const double x = attr_number(t, "x"), y = attr_number(t, "y");
        const double x0 = anchor == "start" ? x : anchor == "middle" ? x - width / 2 : x - width;
        CHECK(x0 >= left);
        CHECK(x0 + width <= right);
        CHECK(y - size >= top);
        CHECK(y <= bottom);
    }
    CHECK(labels == 4);  // two key lines, the decode point, the prefill point
    std::filesystem::remove_all(dir);
}

TEST_CASE("example 13_roofline: --bytes-per-weight moves every C7 figure; bad values are errors") {
    const std::string dir = temp_dir("roof_int8");
    const test::Run r = test::run(test::bin_dir() + "/13_roofline --bytes-per-weight 1 " + test::sh(dir + "/r.svg"));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(value_of(r.out, "C7 model") == "7B parameters, int8, bytes per weight 1");
    check_c7(r.out, 1);
    check_printed(r.out, "C7 H100 tokens/s bound", 478.6, 1);  // the walkthrough's prediction
    std::filesystem::remove_all(dir);

    for (const char* bad : {"3", "two", ""}) {
        const test::Run b = test::run(test::bin_dir() + "/13_roofline --bytes-per-weight " + bad);
        CHECK(b.exit_code == 1);
        CHECK(b.err.find("--bytes-per-weight") != std::string::npos);
    }
}

}  // namespace test_figures
