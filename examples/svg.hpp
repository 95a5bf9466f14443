// examples/svg.hpp — the few SVG pieces the figure-drawing examples (12, 13, 17-20) need.
//
// Not part of the journey: just enough to turn numbers into a picture you can open in any
// browser. An Svg collects elements as text and writes one self-contained file (no scripts, no
// fonts to fetch). Coordinates are SVG's: x grows to the right, y grows DOWN from the top.
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "glass/errors.hpp"

namespace svg {

// Text goes inside XML: escape the five characters XML reserves.
inline std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

// A round step for about `ticks` intervals up to `max`: 1, 2 or 5 times a power of ten (an axis's
// tick spacing).
inline double nice_step(double max, int ticks) {
    const double raw = max / ticks;
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    for (const double m : {1.0, 2.0, 5.0})
        if (m * power >= raw) return m * power;
    return 10 * power;
}

inline std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

struct Svg {
    int width = 0;
    int height = 0;
    std::string root_attributes;  // extra attributes for <svg ...> (e.g. data-* facts)
    std::vector<std::string> elements;

    void line(double x1, double y1, double x2, double y2, const std::string& style,
              const std::string& attributes = "") {
        elements.push_back("<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) +
                           "\" y2=\"" + num(y2) + "\" style=\"" + style + "\" " + attributes + "/>");
    }
    // A polyline through the points; `attributes` may carry data-* facts about the series.
    void polyline(const std::vector<std::pair<double, double>>& points, const std::string& style,
                  const std::string& attributes = "") {
        std::string p;
        for (const auto& [x, y] : points) {
            if (!p.empty()) p += ' ';
            p += num(x);
            p += ',';
            p += num(y);
        }
        elements.push_back("<polyline points=\"" + p + "\" style=\"fill:none;" + style + "\" " +
                           attributes + "/>");
    }
    void circle(double cx, double cy, double r, const std::string& style,
                const std::string& attributes = "") {
        elements.push_back("<circle cx=\"" + num(cx) + "\" cy=\"" + num(cy) + "\" r=\"" + num(r) +
                           "\" style=\"" + style + "\" " + attributes + "/>");
    }
    // A box with its top-left corner at (x, y): a bar of a bar chart.
    void rect(double x, double y, double w, double h, const std::string& style,
              const std::string& attributes = "") {
        elements.push_back("<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
                           "\" height=\"" + num(h) + "\" style=\"" + style + "\" " + attributes + "/>");
    }
    // anchor: start | middle | end (which point of the text sits at x).
    // `attributes` may carry data-* facts (e.g. which series a label belongs to).
    void text(double x, double y, const std::string& s, const std::string& anchor = "start",
              int size = 12, const std::string& attributes = "") {
        elements.push_back("<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" +
                           std::to_string(size) + "\" text-anchor=\"" + anchor +
                           "\" font-family=\"sans-serif\" " + attributes + ">" + escape(s) + "</text>");
    }

    std::string str() const {
        std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
        out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
               "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
               std::to_string(width) + " " + std::to_string(height) + "\" " + root_attributes + ">\n";
        out += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" +
               std::to_string(height) + "\" style=\"fill:white\"/>\n";
        for (const std::string& e : elements) out += e + "\n";
        return out + "</svg>\n";
    }

    void save(const std::string& path) const {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        if (!f) glass::fail("cannot write SVG file '", path, "'");
        const std::string s = str();
        const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
        if (std::fclose(f) != 0 || !ok) glass::fail("writing SVG file '", path, "' failed");
    }
};

// Where a figure goes when the user names no path: beside the running program (build/bin/, which
// is never committed), so running an example does not litter the source tree.
inline std::string default_path(const std::string& file_name) {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return file_name;  // no /proc: the current directory
    return (exe.parent_path() / file_name).string();
}

}  // namespace svg
