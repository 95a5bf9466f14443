// serve_dom_check STATE.json METRICS.txt DOM.html EXPECTED.json — checks what a real browser
// rendered from glass serve's live page (GET /).
//
// In:  STATE     GET /v1/engine/state, fetched after the browser was done (the engine was idle
//                since the page's last poll, so the page drew this same state);
//      METRICS   GET /metrics from the same moment;
//      DOM       the page's DOM after its scripts ran (chromium --dump-dom ".../?ask=TEXT&...");
//      EXPECTED  the API's own non-streaming answer to the same greedy chat request.
// Checks: the chat box is there and the answer the page streamed into it equals EXPECTED's
// message content, tagged with its response id; the step view has one row per recent step (newest
// first) and each row's cells say exactly who decoded, who prefilled which chunk and who waited;
// the block grid has one cell per block (glass_kv_blocks_total) with each block's ref count,
// owners and cached flag, shared blocks (ref count 2 or more) marked; the request table has one
// row per live and recent request, the asked one with its TTFT and TPOT. Exit 0 when all hold.
// With --in-flight (see check_in_flight): the page read while requests run.
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
#include <vector>

#include <nlohmann/json.hpp>

#include "dom_check.hpp"

namespace {

using json = nlohmann::json;
using Attrs = std::map<std::string, std::string>;

using dom_check::check;
using dom_check::failures;
using dom_check::read_file;

// Text as the DOM serializer escaped it, back to the characters.
std::string unescape(std::string s) {
    const std::vector<std::pair<std::string, std::string>> entities = {
        {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&nbsp;", "\xC2\xA0"}, {"&amp;", "&"}};  // &amp; last
    for (const auto& [from, to] : entities)
        for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
    return s;
}

struct Element {
    Attrs attrs;
    size_t end_of_tag;  // just after the opening tag's '>'
};

// Every opening tag named `tag` (in dom[from, to)) whose class attribute holds `cls` ("" = any).
std::vector<Element> elements(const std::string& dom, const std::string& tag, const std::string& cls, size_t from = 0,
                              size_t to = std::string::npos) {
    std::vector<Element> found;
    const std::regex tag_re("<" + tag + "\\b[^>]*>");
    const std::regex attr_re("([a-zA-Z-]+)=\"([^\"]*)\"");
    const auto begin = dom.begin() + static_cast<std::ptrdiff_t>(from);
    const auto end = to == std::string::npos ? dom.end() : dom.begin() + static_cast<std::ptrdiff_t>(to);
    for (auto it = std::sregex_iterator(begin, end, tag_re); it != std::sregex_iterator(); ++it) {
        const std::string t = it->str();
        Attrs attrs;
        for (auto a = std::sregex_iterator(t.begin(), t.end(), attr_re); a != std::sregex_iterator(); ++a)
            attrs[(*a)[1]] = unescape((*a)[2]);
        bool match = cls.empty();
        std::istringstream classes(attrs["class"]);
        for (std::string c; classes >> c;) match = match || c == cls;
        if (match) found.push_back({attrs, from + static_cast<size_t>(it->position()) + t.size()});
    }
    return found;
}

bool has_class(const Attrs& a, const std::string& cls) {
    std::istringstream classes(a.count("class") ? a.at("class") : "");
    for (std::string c; classes >> c;)
        if (c == cls) return true;
    return false;
}

// The text up to the next '<' after an opening tag (the element's text when it has no children).
std::string text_after(const std::string& dom, const Element& e) {
    return unescape(dom.substr(e.end_of_tag, dom.find('<', e.end_of_tag) - e.end_of_tag));
}

bool has_id(const std::string& dom, const std::string& id) { return dom.find("id=\"" + id + "\"") != std::string::npos; }

std::string owners_text(const json& owners) {
    std::string s;
    for (const json& o : owners) s += (s.empty() ? "" : " ") + std::to_string(o.get<int>());
    return s;
}

double metric(const std::string& text, const std::string& name) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    std::cerr << "no metric " << name << "\n";
    std::exit(1);
}

// --in-flight METRICS DOM: the page read while requests that share a prefix run. The numbers
// move while the browser reads, so this checks what must hold at any moment: one cell per block,
// some held (each with as many owners as its ref count), some shared and marked, decodes in the
// step view, running requests in the table.
int check_in_flight(const std::string& metrics, const std::string& dom) {
    const std::vector<Element> blocks = elements(dom, "div", "block");
    const double total = metric(metrics, "glass_kv_blocks_total");
    check(static_cast<double>(blocks.size()) == total, "block cells " + std::to_string(blocks.size()) + " == glass_kv_blocks_total " +
                                                           std::to_string(static_cast<int>(total)));
    int held = 0, shared = 0;
    for (const Element& b : blocks) {
        const int ref = std::stoi(b.attrs.at("data-ref"));
        std::istringstream owners(b.attrs.at("data-owners"));
        int n_owners = 0;
        for (std::string o; owners >> o;) ++n_owners;
        check(n_owners == ref, "block " + b.attrs.at("data-block") + ": owners == ref count");
        check(has_class(b.attrs, "shared") == (ref >= 2), "block " + b.attrs.at("data-block") + ": shared iff ref count >= 2");
        held += ref > 0;
        shared += ref >= 2;
    }
    check(held > 0, "some blocks are held by the running requests");
    check(shared > 0, "the shared prefix's blocks are marked shared");
    int decodes = 0;
    for (const Element& td : elements(dom, "td", "decode")) decodes += td.attrs.count("data-id") > 0;
    check(!elements(dom, "tr", "step-row").empty(), "step rows");
    check(decodes > 0, "decode cells in the step view");
    int running = 0;
    for (const Element& td : elements(dom, "td", "status")) running += text_after(dom, td) == "running";
    check(running >= 2, "at least 2 running requests in the table, got " + std::to_string(running));
    if (failures == 0) std::cout << "serve_dom_check --in-flight: " << held << " blocks held, " << shared << " shared, " << running
                                  << " requests running\n";
    return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::string(argv[1]) == "--in-flight") return check_in_flight(read_file(argv[2]), read_file(argv[3]));
    if (argc != 5) {
        std::cerr << "usage: serve_dom_check STATE.json METRICS.txt DOM.html EXPECTED.json\n"
                     "       serve_dom_check --in-flight METRICS.txt DOM.html\n";
        return 2;
    }
    const json state = json::parse(read_file(argv[1]));
    const std::string metrics = read_file(argv[2]);
    const std::string dom = read_file(argv[3]);
    const json expected = json::parse(read_file(argv[4]));

    // The chat box, and the answer the page streamed into it.
    for (const char* id : {"chat-log", "chat-form", "chat-input", "chat-send", "api-key", "step-table", "block-grid", "request-table"})
        check(has_id(dom, id), std::string("an element with id ") + id);
    check(dom.find("data-ask-done=\"yes\"") != std::string::npos, "the page finished its ?ask request (body data-ask-done)");
    const std::vector<Element> answers = elements(dom, "div", "assistant");
    check(!answers.empty(), "an assistant message in the chat log");
    std::string asked_name;
    if (!answers.empty()) {
        const Element& answer = answers.back();
        const std::vector<Element> texts = elements(dom, "span", "text", answer.end_of_tag);
        const std::string got = texts.empty() ? "" : text_after(dom, texts.front());
        const std::string want = expected["choices"][0]["message"]["content"];
        check(!want.empty(), "the API's answer is not empty");
        check(got == want, "streamed answer '" + got + "' == the API's '" + want + "'");
        asked_name = answer.attrs.count("data-request") ? answer.attrs.at("data-request") : "";
        check(asked_name.rfind("chatcmpl-", 0) == 0, "the answer carries its response id, got '" + asked_name + "'");
    }

    // The step view: rows newest first, one per recent step.
    const json& steps = state["recent_steps"];
    const std::vector<Element> rows = elements(dom, "tr", "step-row");
    check(!steps.empty(), "the engine reports recent steps");
    check(rows.size() == steps.size(), "step rows " + std::to_string(rows.size()) + " == recent steps " + std::to_string(steps.size()));
    std::set<int> asked_ids;  // engine ids of the asked request (by name, from the state)
    for (const json& r : state["recent_finished"])
        if (r["name"] == asked_name) asked_ids.insert(r["id"].get<int>());
    check(asked_ids.size() == 1, "the asked request " + asked_name + " is among the recent finished ones");
    bool asked_prefilled = false;
    for (size_t i = 0; i < rows.size() && i < steps.size(); ++i) {
        const json& s = steps[steps.size() - 1 - i];
        const std::string where = "step " + std::to_string(s["step"].get<long>());
        check(rows[i].attrs.at("data-step") == std::to_string(s["step"].get<long>()), where + ": row order");
        const size_t row_end = dom.find("</tr>", rows[i].end_of_tag);
        std::map<int, Attrs> cells;
        for (const Element& td : elements(dom, "td", "", rows[i].end_of_tag, row_end))
            if (td.attrs.count("data-id")) cells[std::stoi(td.attrs.at("data-id"))] = td.attrs;
        size_t expected_cells = 0;
        for (const json& c : s["prefill"]) {
            ++expected_cells;
            const int id = c["id"];
            asked_prefilled = asked_prefilled || asked_ids.count(id);
            check(cells.count(id) && has_class(cells[id], "prefill") && cells[id]["data-start"] == std::to_string(c["start"].get<int>()) &&
                      cells[id]["data-n"] == std::to_string(c["n"].get<int>()),
                  where + ": request " + std::to_string(id) + " prefills [" + std::to_string(c["start"].get<int>()) + ", +" +
                      std::to_string(c["n"].get<int>()) + ")");
        }
        for (const json& d : s["decode"]) {
            ++expected_cells;
            check(cells.count(d.get<int>()) && has_class(cells[d.get<int>()], "decode"), where + ": request " + d.dump() + " decodes");
        }
        for (const json& w : s["waiting"]) {
            ++expected_cells;
            const int id = w;
            check(cells.count(id) && (has_class(cells[id], "waiting") || has_class(cells[id], "preempted")),
                  where + ": request " + w.dump() + " waits");
        }
        check(cells.size() == expected_cells, where + ": " + std::to_string(cells.size()) + " marked cells, " +
                                                  std::to_string(expected_cells) + " expected");
    }
    check(asked_prefilled, "the asked request's prefill is in the step view");

    // The block grid: one cell per block, as the pool says.
    const std::vector<Element> blocks = elements(dom, "div", "block");
    const double total = metric(metrics, "glass_kv_blocks_total");
    check(static_cast<double>(blocks.size()) == total, "block cells " + std::to_string(blocks.size()) + " == glass_kv_blocks_total " +
                                                           std::to_string(static_cast<int>(total)));
    check(state["blocks"].size() == blocks.size(), "block cells == blocks in the state");
    int cached_cells = 0;
    for (size_t b = 0; b < blocks.size() && b < state["blocks"].size(); ++b) {
        const json& want = state["blocks"][b];
        const Attrs& a = blocks[b].attrs;
        const std::string where = "block " + std::to_string(b);
        check(a.count("data-block") && a.at("data-block") == std::to_string(b), where + ": in order");
        check(a.count("data-ref") && a.at("data-ref") == std::to_string(want["ref_count"].get<int>()), where + ": ref count");
        check(a.count("data-owners") && a.at("data-owners") == owners_text(want["owners"]), where + ": owners");
        check(has_class(a, "shared") == (want["ref_count"].get<int>() >= 2), where + ": marked shared iff ref count >= 2");
        const bool cached_free = want["ref_count"] == 0 && want["cached"] == true;
        check(has_class(a, "cached") == cached_free, where + ": marked cached iff free and cached");
        cached_cells += cached_free;
    }
    check(cached_cells == static_cast<int>(metric(metrics, "glass_kv_blocks_cached")), "cached cells == glass_kv_blocks_cached");
    check(cached_cells > 0, "the chats left cached blocks to show");

    // The request table: live ones, then the recent finished, newest first; the asked one's times.
    const std::vector<Element> requests = elements(dom, "tr", "request-row");
    check(requests.size() == state["live"].size() + state["recent_finished"].size(), "one table row per live and recent request");
    bool asked_row = false;
    for (const Element& r : requests) {
        if (!r.attrs.count("data-name") || r.attrs.at("data-name") != asked_name) continue;
        asked_row = true;
        const size_t row_end = dom.find("</tr>", r.end_of_tag);
        json want;
        for (const json& f : state["recent_finished"])
            if (f["name"] == asked_name) want = f;
        for (const Element& td : elements(dom, "td", "", r.end_of_tag, row_end)) {
            const std::string cls = td.attrs.count("class") ? td.attrs.at("class") : "";
            if (cls != "ttft" && cls != "tpot" && cls != "generated") continue;
            const double shown = std::stod(text_after(dom, td));
            const double value = cls == "generated" ? want["generated_tokens"].get<double>() : want[cls + "_ms"].get<double>();
            // Shown with 2 (TTFT) or 3 (TPOT) decimals: within half of the last digit.
            check(std::abs(shown - value) <= (cls == "ttft" ? 0.005 : 0.0005) + 1e-12, asked_name + " " + cls + " shown " +
                                                                                         std::to_string(shown) + ", state " + std::to_string(value));
        }
    }
    check(asked_row, "a table row for the asked request " + asked_name);

    if (failures == 0) std::cout << "serve_dom_check: the page shows the engine state and the streamed answer\n";
    return failures == 0 ? 0 : 1;
}
