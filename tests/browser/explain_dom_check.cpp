// explain_dom_check JSON DOM POSITION — checks what a real browser rendered from `glass explain --html`.
//
// In:  JSON      the last line of `glass explain --json` from the same run (printed by C++ straight
//                from the explanation; the page instead parses its embedded copy and draws with
//                JavaScript, so the two reach the numbers by different paths);
//      DOM       the page's DOM after its scripts ran and token POSITION was clicked
//                (chromium --dump-dom page.html#click=POSITION);
//      POSITION  the clicked token.
// Checks: the clicked token is the selected one; the heatmap has exactly n_layers · n_heads ·
// (POSITION + 1) cells, one per (layer, head, earlier position), each holding the weight --json
// reports; each head's row sums to 1; the KV-cache chart has one point per step with the bytes
// --json reports; the top-5 bars carry --json's probabilities. Exit 0 when all hold, 1 otherwise.
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

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
    if (!ok) {
        ++failures;
        std::cerr << "FAIL: " << what << "\n";
    }
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cerr << "cannot read " << path << "\n";
        std::exit(1);
    }
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

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
    if (argc != 4) {
        std::cerr << "usage: explain_dom_check EXPLAIN.json DOM.html POSITION\n";
        return 2;
    }
    const nlohmann::json j = nlohmann::json::parse(read_file(argv[1]));
    const std::string dom = read_file(argv[2]);
    const int position = std::stoi(argv[3]);
    const int n_layers = j["model"]["n_layers"], n_heads = j["model"]["n_heads"];
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

    // The top-5 bars of every step.
    const auto bars = elements(dom, "div", "topk-bar");
    size_t n_bars = 0;
    for (const auto& s : j["steps"]) n_bars += s["top5"].size();
    check(bars.size() == n_bars, "top-k bars: " + std::to_string(bars.size()) + ", expected " + std::to_string(n_bars));
    for (const auto& b : bars) {
        const auto& step = j["steps"][std::stoul(b.at("data-step"))];
        bool matched = false;
        for (const auto& t : step["top5"])
            matched |= std::to_string(t["id"].get<int>()) == b.at("data-id") &&
                       std::fabs(std::stod(b.at("data-probability")) - t["probability"].get<double>()) <= 1e-12;
        check(matched, "top-k bar step " + b.at("data-step") + " id " + b.at("data-id") + " p " +
                           b.at("data-probability") + " is not in --json's top5");
    }

    std::printf("%s: position %d: %zu heatmap cells (%d layers x %d heads x %d positions), max |weight - json| %.3g; "
                "%zu KV points; %zu top-k bars\n",
                failures ? "FAILED" : "ok", position, cells.size(), n_layers, n_heads, position + 1, max_diff,
                points.size(), bars.size());
    return failures ? 1 : 0;
}
