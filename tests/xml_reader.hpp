// A small XML reader for the tests of examples that draw SVG figures: enough to prove a file is
// well-formed and to list its elements with their attributes. (The same reader as in
// test_figures.cpp, kept in one header for the figure tests that came after it.)
#pragma once

#include <cctype>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

namespace test::xml {

struct Element {
    std::string name;
    std::map<std::string, std::string> attributes;
    std::string text;  // the character data directly inside it (entities left as written)
};

// Parses the whole document; throws std::runtime_error on any malformed construct (unbalanced or crossed
// tags, unquoted or repeated attributes, a bare '&' or '<' in text, text after the root).
inline std::vector<Element> parse_xml(const std::string& doc) {
    std::vector<Element> elements;
    std::vector<std::string> open;
    std::vector<size_t> open_index;  // where each open element sits in `elements`
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
            if (!open.empty()) elements[open_index.back()].text += text;
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
            open_index.pop_back();
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
        if (!self_closing) {
            open.push_back(e.name);
            open_index.push_back(elements.size() - 1);
        }
        else if (open.empty()) root_closed = true;
        i = k + (self_closing ? 2 : 1);
    }
    if (!open.empty()) fail_at("the document ends with <" + open.back() + "> still open");
    if (!root_closed) fail_at("no root element");
    return elements;
}

inline std::vector<Element> of_kind(const std::vector<Element>& all, const std::string& name) {
    std::vector<Element> v;
    for (const Element& e : all)
        if (e.name == name) v.push_back(e);
    return v;
}

inline std::vector<std::pair<double, double>> points_of(const Element& polyline) {
    std::vector<std::pair<double, double>> pts;
    std::istringstream in(polyline.attributes.at("points"));
    for (std::string pair; in >> pair;) {
        const size_t comma = pair.find(',');
        REQUIRE(comma != std::string::npos);
        pts.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
    }
    return pts;
}

inline double attr_number(const Element& e, const std::string& name) {
    REQUIRE_MESSAGE(e.attributes.count(name), "<" << e.name << "> has no " << name);
    return std::stod(e.attributes.at(name));
}

}  // namespace test::xml
