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

using test::value_of;

namespace {

// The first number after "label: ".
double number(const std::string& out, const std::string& label) {
    const std::string v = value_of(out, label);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    REQUIRE_MESSAGE(end != v.c_str(), "no number after '" << label << ": ' in '" << v << "'");
    return x;
}

// A printed value with `decimals` digits after the point equals `expected` to that rounding.
void check_printed(const std::string& out, const std::string& label, double expected, int decimals) {
    const double printed = number(out, label);
    const double half_step = 0.5 * std::pow(10.0, -decimals) * (1 + 1e-9);
    INFO(label << ": printed " << printed << ", expected " << expected);
    CHECK(std::fabs(printed - expected) <= half_step);
}

// ---- A small XML reader: enough to prove an SVG file is well-formed and to list its elements ----
struct Element {
    std::string name;
    std::map<std::string, std::string> attributes;
};

// Parses the whole document; throws std::runtime_error on any malformed construct (unbalanced or crossed
// tags, unquoted or repeated attributes, a bare '&' or '<' in text, text after the root).
std::vector<Element> parse_xml(const std::string& doc) {
    std::vector<Element> elements;
    std::vector<std::string> open;
    size_t i = 0;
    bool root_closed = false;
    const auto fail_at = [&](const std::string& why) {
        throw std::runtime_error("malformed XML at byte " + std::to_string(i) + ": " + why);
    };
    const auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':'; };
    while (i < doc.size()) {
        if (doc[i] != '<') {
            const size_t next = doc.find('<', i);
            const std::string text = doc.substr(i, next == std::string::npos ? std::string::npos : next - i);
            for (size_t k = 0; k < text.size(); ++k)
                if (text[k] == '&' && text.find(';', k) == std::string::npos) fail_at("bare '&'");
            if ((open.empty()) && text.find_first_not_of(" \t\r\n") != std::string::npos)
                fail_at("text outside the root element");
            if (next == std::string::npos) break;
            i = next;
            continue;
        }
        if (doc.compare(i, 5, "<?xml") == 0) {
            const size_t end = doc.find("?>", i);
            if (end == std::string::npos || !elements.empty()) fail_at("bad XML declaration");
            i = end + 2;
            continue;
        }
        if (doc.compare(i, 2, "</") == 0) {
            size_t k = i + 2;
            while (k < doc.size() && is_name(doc[k])) ++k;
            const std::string name = doc.substr(i + 2, k - i - 2);
            if (k >= doc.size() || doc[k] != '>') fail_at("bad closing tag");
            if (open.empty() || open.back() != name) fail_at("closing </" + name + "> does not match");
            open.pop_back();
            if (open.empty()) root_closed = true;
            i = k + 1;
            continue;
        }
        if (root_closed) fail_at("a second root element");
        Element e;
        size_t k = i + 1;
        while (k < doc.size() && is_name(doc[k])) ++k;
        e.name = doc.substr(i + 1, k - i - 1);
        if (e.name.empty()) fail_at("'<' not followed by a tag name");
        while (true) {
            while (k < doc.size() && std::isspace(static_cast<unsigned char>(doc[k]))) ++k;
            if (k >= doc.size()) fail_at("unterminated tag <" + e.name);
            if (doc[k] == '>' || doc.compare(k, 2, "/>") == 0) break;
            const size_t name_start = k;
            while (k < doc.size() && is_name(doc[k])) ++k;
            const std::string attr = doc.substr(name_start, k - name_start);
            if (attr.empty() || k + 1 >= doc.size() || doc[k] != '=' || doc[k + 1] != '"')
                fail_at("attribute of <" + e.name + "> is not name=\"value\"");
            const size_t value_end = doc.find('"', k + 2);
            if (value_end == std::string::npos) fail_at("unterminated attribute value");
            const std::string value = doc.substr(k + 2, value_end - k - 2);
            if (value.find('<') != std::string::npos) fail_at("'<' inside an attribute value");
            if (!e.attributes.emplace(attr, value).second) fail_at("repeated attribute " + attr);
            k = value_end + 1;
        }
        const bool self_closing = doc[k] == '/';
        if (open.empty() && !elements.empty()) fail_at("a second root element");
        elements.push_back(e);
        if (!self_closing) open.push_back(e.name);
        else if (open.empty()) root_closed = true;
        i = k + (self_closing ? 2 : 1);
    }
    if (!open.empty()) fail_at("the document ends with <" + open.back() + "> still open");
    if (!root_closed) fail_at("no root element");
    return elements;
}

std::vector<Element> of_kind(const std::vector<Element>& all, const std::string& name) {
    std::vector<Element> v;
    for (const Element& e : all)
        if (e.name == name) v.push_back(e);
    return v;
}

std::vector<std::pair<double, double>> points_of(const Element& polyline) {
    std::vector<std::pair<double, double>> pts;
    std::istringstream in(polyline.attributes.at("points"));
    for (std::string pair; in >> pair;) {
        const size_t comma = pair.find(',');
        REQUIRE(comma != std::string::npos);
        pts.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
    }
    return pts;
}

double attr_number(const Element& e, const std::string& name) {
    REQUIRE_MESSAGE(e.attributes.count(name), "<" << e.name << "> has no " << name);
    return std::stod(e.attributes.at(name));
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh directory for one test's files.
std::string temp_dir(const std::string& tag) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("glass_figures_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir.string();
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

TEST_CASE("example 13_roofline: C7 arithmetic, the roofline's answer, this machine, and the chart") {
    const std::string dir = temp_dir("roof");
    const std::string svg_path = dir + "/roof.svg";
    const test::Run r = test::run(test::bin_dir() + "/13_roofline " + test::sh(svg_path));
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 0);

    // C7: 7e9 weights x 2 bytes = 14 GB read per token. H100 3.35 TB/s, H200 4.8 TB/s.
    const double bytes = 7e9 * 2;
    CHECK(number(r.out, "C7 weight bytes per token") == bytes);
    check_printed(r.out, "C7 H100 time per token ms", 14e9 / 3.35e12 * 1e3, 2);  // 4.18 ("≈ 4.2 ms")
    check_printed(r.out, "C7 H100 tokens/s bound", 3.35e12 / 14e9, 1);           // 239.3 ("≈ 240")
    CHECK(std::fabs(number(r.out, "C7 H100 time per token ms") - 4.2) < 0.05);
    CHECK(std::fabs(number(r.out, "C7 H100 tokens/s bound") - 240) < 1);
    check_printed(r.out, "C7 H200 time per token ms", 14e9 / 4.8e12 * 1e3, 2);
    check_printed(r.out, "C7 H200 tokens/s bound", 4.8e12 / 14e9, 1);

    // Roofline: decode does 2 FLOPs per 2-byte weight = 1 FLOP/byte, so at 1 FLOP/byte the
    // attainable rate is bandwidth x 1, i.e. the same tokens/s as the bandwidth bound.
    check_printed(r.out, "roofline decode intensity FLOPs/byte", 1.0, 1);
    check_printed(r.out, "roofline prefill 1000 tokens intensity FLOPs/byte", 1000.0, 1);
    CHECK(value_of(r.out, "roofline H100 peak TFLOP/s").find("ridge FLOPs/byte: 295.2") != std::string::npos);
    CHECK(value_of(r.out, "roofline H200 peak TFLOP/s").find("ridge FLOPs/byte: 206.0") != std::string::npos);
    CHECK(value_of(r.out, "roofline H100 decode attainable TFLOP/s") == "3.35 -> tokens/s: 239.3");
    CHECK(value_of(r.out, "roofline H200 decode attainable TFLOP/s") == "4.80 -> tokens/s: 342.9");
    CHECK(r.out.find("roofline H100 prefill is compute-bound") != std::string::npos);
    CHECK(r.out.find("roofline H200 prefill is compute-bound") != std::string::npos);

    // The shipped model reads every weight except the embedding table once per token. From the
    // file size: everything after the 28-byte header, minus the legacy RoPE tables
    // (seq_len x head_dim floats); the shared classifier is the embedding table, read in full.
    const Header h = shipped_header();
    const std::int64_t file_bytes = static_cast<std::int64_t>(std::filesystem::file_size(test::shipped_model()));
    const std::int64_t weight_bytes = file_bytes - 28 - 4 * h.seq_len * (h.dim / h.heads);
    CHECK(number(r.out, "shipped weight bytes per token") == weight_bytes);
    // Measured numbers vary; check only that they are positive and consistent with each other
    // (bandwidth is printed with 0.1 GB/s resolution, so 1% covers the rounding above ~5 GB/s).
    const double bandwidth = number(r.out, "measured read bandwidth GB/s (one core)") * 1e9;
    const double bound = number(r.out, "measured shipped bound tokens/s");
    const double decode = number(r.out, "measured shipped decode tokens/s");
    CHECK(bandwidth > 0);
    CHECK(decode > 0);
    CHECK(std::fabs(bound - bandwidth / weight_bytes) <= 0.01 * bound + 1);
    CHECK(std::fabs(number(r.out, "measured decode / bound") - decode / bound) <= 0.01 * decode / bound + 0.01);
    CHECK(value_of(r.out, "svg written") == svg_path);

    // The chart: log-log with the same pixels per decade on both axes, so a bandwidth roof
    // (FLOP/s = bandwidth x intensity) climbs at exactly 45 degrees, then runs flat at the peak.
    std::vector<Element> all;
    REQUIRE_NOTHROW(all = parse_xml(read_file(svg_path)));
    REQUIRE(all.front().name == "svg");
    const double per_decade = attr_number(all.front(), "data-px-per-decade");
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
    // Four operating points (decode and prefill on each roof), each on its roof.
    const std::vector<Element> points = of_kind(all, "circle");
    REQUIRE(points.size() == 4);
    for (const Element& c : points) {
        const auto p = points_of(roofs[c.attributes.at("data-gpu") == "H100" ? 0 : 1]);
        const double x = attr_number(c, "cx"), y = attr_number(c, "cy");
        const double roof_y = x <= p[1].first ? p[0].second - (x - p[0].first) : p[1].second;
        CHECK(std::fabs(y - roof_y) < 0.03);
    }
    std::filesystem::remove_all(dir);
}
