// explain_dom_check JSON DOM POSITION [LAYER] — checks what a real browser rendered from `glass explain --html`.
//
// In:  JSON      the last line of `glass explain --json` from the same run (printed by C++ straight
//                from the explanation; the page instead parses its embedded copy and draws with
//                JavaScript, so the two reach the numbers by different paths);
//      DOM       the page's DOM after its scripts ran, token POSITION was clicked and layer LAYER's
//                triangles were chosen (chromium --dump-dom page.html#click=POSITION&layer=LAYER);
//      POSITION  the clicked token; LAYER the layer of the triangles (default 0).
// Checks: the clicked token is the selected one; the heatmap has exactly n_layers · n_heads ·
// (POSITION + 1) cells, one per (layer, head, earlier position), each holding the weight --json
// reports and its head's KV head; each head's row sums to 1; the GQA boxes list, for every KV head,
// exactly the query heads that read it (h / (n_heads / n_kv_heads), worked out here from the model's
// shape, and agreeing with --json's kv_head of every head); the triangles: one per head of LAYER,
// each with a weight cell for every (query q, key k <= q) holding --json's attention[q][LAYER][h][k]
// and an empty masked cell for every k > q, the clicked row outlined; the KV-cache chart has one
// point per step with the bytes --json reports and stretches to the page (viewBox, width 100%); the
// top-5 bars carry --json's probabilities, the model's and the draw's. Exit 0 when all hold, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dom_check.hpp"

namespace {

using dom_check::check;
using dom_check::failures;
using dom_check::read_file;

// Every opening tag named `tag` whose class attribute contains `cls`, as attribute -> value.
std::vector<std::map<std::string, std::string>> elements(const std::string& dom, const std::string& tag,
                                                         const std::string& cls) {
    std::vector<std::map<std::string, std::string>> found;
    const std::regex tag_re("<" + tag + "\\b[^>]*>");
    const std::regex attr_re("([a-zA-Z-]+)=\"([^\"]*)\"");
    for (auto it = std::sregex_iterator(dom.begin(), dom.end(), tag_re); it != std::sregex_iterator(); ++it) {
        const std::string t = it->str();
        std::map<std::string, std::string> attrs;
        for (auto a = std::sregex_iterator(t.begin(), t.end(), attr_re); a != std::sregex_iterator(); ++a)
            attrs[(*a)[1]] = (*a)[2];
        std::istringstream classes(attrs["class"]);
        for (std::string c; classes >> c;)
            if (c == cls) {
                found.push_back(attrs);
                break;
            }
    }
    return found;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::cerr << "usage: explain_dom_check EXPLAIN.json DOM.html POSITION [LAYER]\n";
        return 2;
    }
    const nlohmann::json j = nlohmann::json::parse(read_file(argv[1]));
    const std::string dom = read_file(argv[2]);
    const int position = std::stoi(argv[3]);
    const int layer = argc == 5 ? std::stoi(argv[4]) : 0;
    const int n_layers = j["model"]["n_layers"], n_heads = j["model"]["n_heads"];
    const int n_kv_heads = j["model"]["n_kv_heads"];
    const int heads_per_kv = n_heads / n_kv_heads;
    const auto& attention = j["attention"];
    if (position < 0 || position >= static_cast<int>(attention.size())) {
        std::cerr << "position " << position << " has no attention in the JSON (0.." << attention.size() - 1 << ")\n";
        return 1;
    }

    // The click selected the token.
    const auto tokens = elements(dom, "button", "token");
    check(tokens.size() == j["tokens"].size(), "token buttons: " + std::to_string(tokens.size()) +
                                                   ", --json has " + std::to_string(j["tokens"].size()));
    const auto selected = elements(dom, "button", "selected");
    check(selected.size() == 1 && selected[0].at("data-position") == std::to_string(position),
          "the clicked token " + std::to_string(position) + " is not the (only) selected one");
    check(dom.find("data-selected=\"" + std::to_string(position) + "\"") != std::string::npos,
          "the heatmap is not drawn for position " + std::to_string(position));
    check(dom.find("<p id=\"error\"></p>") != std::string::npos, "the page shows an error");

    // The heatmap: one cell per (layer, head, key position), each with --json's weight.
    const auto cells = elements(dom, "td", "cell");
    const size_t expected = static_cast<size_t>(n_layers) * n_heads * (position + 1);
    check(cells.size() == expected, "heatmap cells: " + std::to_string(cells.size()) + ", expected " +
                                        std::to_string(n_layers) + " layers x " + std::to_string(n_heads) +
                                        " heads x " + std::to_string(position + 1) + " positions = " +
                                        std::to_string(expected));
    std::set<std::tuple<int, int, int>> seen;
    std::map<std::pair<int, int>, double> row_sums;
    double max_diff = 0;
    for (const auto& c : cells) {
        const int l = std::stoi(c.at("data-layer")), h = std::stoi(c.at("data-head")), k = std::stoi(c.at("data-key"));
        const double shown = std::stod(c.at("data-weight"));
        check(c.count("data-kv-head") && c.at("data-kv-head") == std::to_string(h / heads_per_kv),
              "heatmap cell of head " + std::to_string(h) + " is not marked with KV head " + std::to_string(h / heads_per_kv));
        const bool in_range = l >= 0 && l < n_layers && h >= 0 && h < n_heads && k >= 0 && k <= position;
        check(in_range, "cell outside the causal block: layer " + std::to_string(l) + " head " +
                            std::to_string(h) + " position " + std::to_string(k));
        if (!in_range) continue;
        check(seen.insert({l, h, k}).second, "duplicate cell " + std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(k));
        // Both sides print the same fp32 weight as a shortest round-trip decimal of the same double
        // (C++ JSON writer, JavaScript String()), so they agree exactly; 1e-12 only absorbs parsing.
        const double want = attention[position][l][h][k].get<double>();
        max_diff = std::max(max_diff, std::fabs(shown - want));
        check(std::fabs(shown - want) <= 1e-12, "cell layer " + std::to_string(l) + " head " + std::to_string(h) +
                                                    " position " + std::to_string(k) + " shows " + c.at("data-weight") +
                                                    ", --json says " + std::to_string(want));
        row_sums[{l, h}] += shown;
    }
    for (const auto& [lh, sum] : row_sums)  // softmax rows: fp32 rounding of ~position terms
        check(std::fabs(sum - 1.0) <= 1e-5, "layer " + std::to_string(lh.first) + " head " +
                                                std::to_string(lh.second) + " weights sum to " + std::to_string(sum));

    // The GQA groups: KV head g is read by query heads g·heads_per_kv .. (g+1)·heads_per_kv - 1.
    // --json says the same per head (kv_head), from explain's own bookkeeping.
    const auto groups = elements(dom, "div", "kv-group");
    check(groups.size() == static_cast<size_t>(n_kv_heads),
          "GQA boxes: " + std::to_string(groups.size()) + ", KV heads: " + std::to_string(n_kv_heads));
    for (size_t g = 0; g < groups.size(); ++g) {
        std::string want;
        for (int h = 0; h < n_heads; ++h)
            if (h / heads_per_kv == static_cast<int>(g)) want += (want.empty() ? "" : " ") + std::to_string(h);
        check(groups[g].at("data-kv-head") == std::to_string(g) && groups[g].at("data-heads") == want,
              "GQA box " + std::to_string(g) + " lists heads '" + groups[g].at("data-heads") + "', expected '" + want + "'");
    }
    const auto chips = elements(dom, "span", "q-head");
    check(chips.size() == static_cast<size_t>(n_heads), "query head chips: " + std::to_string(chips.size()));
    for (const auto& chip : chips) {
        const int h = std::stoi(chip.at("data-head"));
        const auto& json_kv = j["steps"][0]["layers"][0]["heads"][h]["kv_head"];
        check(chip.at("data-kv-head") == std::to_string(h / heads_per_kv) && json_kv == h / heads_per_kv,
              "head " + std::to_string(h) + " is in KV group " + chip.at("data-kv-head") + " (--json: " + json_kv.dump() + ")");
    }

    // The triangles: every head of LAYER, every (query, key) of the fed positions.
    const int fed = static_cast<int>(attention.size());
    const int shown_positions = std::min(fed, 160);  // the page's kTriangleLimit
    check(dom.find("id=\"triangles\" data-layer=\"" + std::to_string(layer) + "\"") != std::string::npos,
          "the triangles are not drawn for layer " + std::to_string(layer));
    const auto active = elements(dom, "button", "active");
    check(active.size() == 1 && active[0].at("data-layer") == std::to_string(layer),
          "layer " + std::to_string(layer) + "'s button is not the (only) active one");
    const auto triangles = elements(dom, "div", "triangle");
    check(triangles.size() == static_cast<size_t>(n_heads), "triangles: " + std::to_string(triangles.size()) +
                                                                ", heads: " + std::to_string(n_heads));
    for (size_t h = 0; h < triangles.size(); ++h)
        check(triangles[h].at("data-layer") == std::to_string(layer) && triangles[h].at("data-head") == std::to_string(h) &&
                  triangles[h].at("data-kv-head") == std::to_string(h / heads_per_kv),
              "triangle " + std::to_string(h) + " is labelled layer " + triangles[h].at("data-layer") + " head " +
                  triangles[h].at("data-head") + " kv " + triangles[h].at("data-kv-head"));
    // Lower triangle and diagonal: weights; above the diagonal: masked, with no weight.
    const auto tri_cells = elements(dom, "div", "tri-cell");
    const auto masked = elements(dom, "div", "masked");
    const size_t n = static_cast<size_t>(shown_positions);
    check(tri_cells.size() == n_heads * n * (n + 1) / 2,
          "triangle weight cells: " + std::to_string(tri_cells.size()) + ", expected " + std::to_string(n_heads) +
              " heads x " + std::to_string(n * (n + 1) / 2));
    check(masked.size() == n_heads * n * (n - 1) / 2,
          "masked cells: " + std::to_string(masked.size()) + ", expected " + std::to_string(n_heads) + " heads x " +
              std::to_string(n * (n - 1) / 2));
    size_t current = 0;
    double tri_max_diff = 0;
    std::set<std::tuple<int, int, int>> tri_seen;
    for (const auto& c : tri_cells) {
        const int h = std::stoi(c.at("data-head"));
        const int q = std::stoi(c.at("data-query")), k = std::stoi(c.at("data-key"));
        if (!(q >= 0 && q < shown_positions && k >= 0 && k <= q && h >= 0 && h < n_heads)) {
            check(false, "triangle cell (" + std::to_string(q) + ", " + std::to_string(k) + ") is outside the lower triangle");
            continue;
        }
        check(tri_seen.insert({h, q, k}).second, "duplicate triangle cell head " + std::to_string(h) + " (" +
                                                     std::to_string(q) + ", " + std::to_string(k) + ")");
        const double want = attention[q][layer][h][k].get<double>();  // same exactness as the heatmap
        tri_max_diff = std::max(tri_max_diff, std::fabs(std::stod(c.at("data-weight")) - want));
        const bool outlined = c.at("class").find("current") != std::string::npos;
        check(outlined == (q == position), "triangle cell (" + std::to_string(q) + ", " + std::to_string(k) +
                                               ") outline does not follow the clicked token " + std::to_string(position));
        current += outlined;
    }
    check(tri_max_diff <= 1e-12, "triangle weights differ from --json by up to " + std::to_string(tri_max_diff));
    for (const auto& c : masked)
        check(std::stoi(c.at("data-key")) > std::stoi(c.at("data-query")) && !c.count("data-weight"),
              "masked cell (" + c.at("data-query") + ", " + c.at("data-key") + ") is not above the diagonal, or has a weight");
    if (position < shown_positions)
        check(current == static_cast<size_t>(n_heads) * (position + 1),
              "outlined triangle cells: " + std::to_string(current) + ", expected the clicked row in every head");

    // The KV cache chart: a point per step, at --json's token count and bytes.
    const auto points = elements(dom, "circle", "kv-point");
    check(points.size() == j["steps"].size(), "KV chart points: " + std::to_string(points.size()) +
                                                  ", steps: " + std::to_string(j["steps"].size()));
    for (size_t i = 0; i < points.size() && i < j["steps"].size(); ++i) {
        const auto& kv = j["steps"][i]["kv_cache"];
        check(points[i].at("data-tokens") == std::to_string(kv["tokens"].get<int>()) &&
                  points[i].at("data-bytes") == std::to_string(kv["cache_bytes_used"].get<long long>()),
              "KV point " + std::to_string(i) + " is (" + points[i].at("data-tokens") + ", " +
                  points[i].at("data-bytes") + "), --json says (" + kv["tokens"].dump() + ", " +
                  kv["cache_bytes_used"].dump() + ")");
    }

    check(dom.find("<svg viewBox=") != std::string::npos && dom.find("width=\"100%\"") != std::string::npos,
          "the KV chart does not scale to the page (no viewBox, or width is not 100%)");

    // The top-5 bars of every step: the model's probability and the draw's.
    const auto bars = elements(dom, "div", "topk-bar");
    size_t n_bars = 0;
    for (const auto& s : j["steps"]) n_bars += s["top5"].size();
    check(bars.size() == n_bars, "top-k bars: " + std::to_string(bars.size()) + ", expected " + std::to_string(n_bars));
    for (const auto& b : bars) {
        const auto& step = j["steps"][std::stoul(b.at("data-step"))];
        bool matched = false;
        for (const auto& t : step["top5"])
            matched |= std::to_string(t["id"].get<int>()) == b.at("data-id") &&
                       std::fabs(std::stod(b.at("data-probability")) - t["probability"].get<double>()) <= 1e-12 &&
                       std::fabs(std::stod(b.at("data-draw-probability")) - t["draw_probability"].get<double>()) <= 1e-12;
        check(matched, "top-k bar step " + b.at("data-step") + " id " + b.at("data-id") + " p " +
                           b.at("data-probability") + " draw p " + b.at("data-draw-probability") +
                           " is not in --json's top5");
    }
    // Sampling: the bar's width is the draw's probability (the coin lands in that distribution).
    if (j["sampling"]["temperature"].get<double>() > 0) {
        const auto model_bars = elements(dom, "div", "model-bar");
        check(model_bars.size() == n_bars, "model-probability bars: " + std::to_string(model_bars.size()) +
                                               ", expected " + std::to_string(n_bars));
    }

    std::printf("%s: position %d: %zu heatmap cells (%d layers x %d heads x %d positions), max |weight - json| %.3g; "
                "%zu GQA groups; layer %d: %zu triangle cells + %zu masked; %zu KV points; %zu top-k bars\n",
                failures ? "FAILED" : "ok", position, cells.size(), n_layers, n_heads, position + 1, max_diff,
                groups.size(), layer, tri_cells.size(), masked.size(), points.size(), bars.size());
    return failures ? 1 : 0;
}
