// The walkthroughs (walkthroughs/NN-title.md) stay true: every output block they show is re-run
// here and must match what the example prints today, every relative link must point at a file
// that exists, every cited line must exist, and a link whose text names an identifier must land
// on lines that contain it. The format is documented in walkthroughs/README.md:
//
//   ```console
//   $ build/bin/07_prefill "Once upon a time"      <- one command, run from the repository root
//   prompt: Once upon a time                       <- its complete stdout, line for line
//   timing ttft ms: ‹volatile›                     <- ‹volatile› matches one run of non-blanks
//   ```
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace test_walkthroughs {  // this file's own names (tests are built in unity batches)

namespace fs = std::filesystem;

namespace {

const std::string kVolatile = "‹volatile›";

fs::path source_dir() { return fs::path(__FILE__).parent_path().parent_path(); }

std::vector<std::string> read_lines(const fs::path& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

void trim_trailing_blank_lines(std::vector<std::string>& lines) {
    while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string::npos) lines.pop_back();
}

// The numbered walkthroughs, in journey order.
std::vector<fs::path> walkthroughs() {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(source_dir() / "walkthroughs")) {
        const std::string name = e.path().filename().string();
        if (!std::regex_match(name, std::regex(R"(\d\d-[a-z0-9-]+\.md)"))) continue;
#ifdef GLASS_WITHOUT_CUDA_EMULATOR
        if (name.rfind("14-", 0) == 0) continue;  // its example needs the CUDA emulator, not built
#endif
        found.push_back(e.path());
    }
    std::sort(found.begin(), found.end());
    return found;
}

// examples/NN_name.cpp -> "NN_name"
std::vector<std::string> examples() {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(source_dir() / "examples")) {
        const std::string name = e.path().filename().string();
        if (!std::regex_match(name, std::regex(R"(\d\d_[a-z0-9_]+\.cpp)"))) continue;
#ifdef GLASS_WITHOUT_CUDA_EMULATOR
        if (name.rfind("14_", 0) == 0) continue;
#endif
        found.push_back(e.path().stem().string());
    }
    std::sort(found.begin(), found.end());
    return found;
}

struct ConsoleBlock {
    int line = 0;                        // 1-based line of the opening fence
    std::string command;                 // after "$ "
    std::vector<std::string> expected;   // the output lines shown
};

std::vector<ConsoleBlock> console_blocks(const std::vector<std::string>& lines) {
    std::vector<ConsoleBlock> blocks;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (lines[i] != "```console") continue;
        ConsoleBlock b;
        b.line = static_cast<int>(i) + 1;
        size_t j = i + 1;
        const bool has_command = j < lines.size() && lines[j].rfind("$ ", 0) == 0;
        REQUIRE_MESSAGE(has_command, "console block at line " << b.line << " must start with '$ command'");
        b.command = lines[j].substr(2);
        for (++j; j < lines.size() && lines[j] != "```"; ++j) b.expected.push_back(lines[j]);
        REQUIRE_MESSAGE(j < lines.size(), "console block at line " << b.line << " is not closed");
        blocks.push_back(b);
        i = j;
    }
    return blocks;
}

// One shown line against one real line: exact, except that each ‹volatile› stands for one run
// of non-blank characters.
bool line_matches(const std::string& shown, const std::string& real) {
    if (shown.find(kVolatile) == std::string::npos) return shown == real;
    std::string pattern;
    size_t at = 0;
    while (true) {
        const size_t v = shown.find(kVolatile, at);
        const std::string literal = shown.substr(at, v == std::string::npos ? std::string::npos : v - at);
        for (char c : literal) {
            if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) pattern += '\\';
            pattern += c;
        }
        if (v == std::string::npos) break;
        pattern += "\\S+";
        at = v + kVolatile.size();
    }
    return std::regex_match(real, std::regex(pattern));
}

// Runs a shown command ("build/bin/NAME args") from the repository root, as the reader does
// (relative paths such as data/harbour.txt resolve there); returns stdout.
std::string run_shown(const std::string& command) {
    const std::string prefix = "build/bin/";
    REQUIRE_MESSAGE(command.rfind(prefix, 0) == 0, "commands start with build/bin/: " << command);
    const test::Run r = test::run("cd " + test::sh(source_dir().string()) + " && " + test::bin_dir() + "/" +
                                  command.substr(prefix.size()));
    INFO("command: " << command << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return r.out;
}

struct Link {
    int line;
    std::string text;
    std::string target;
};

std::vector<Link> relative_links(const std::vector<std::string>& lines) {
    std::vector<Link> links;
    const std::regex link(R"(\[([^\]]*)\]\(([^)\s]+)\))");
    bool in_code = false;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].rfind("```", 0) == 0) in_code = !in_code;
        if (in_code) continue;
        for (std::sregex_iterator m(lines[i].begin(), lines[i].end(), link), end; m != end; ++m) {
            const std::string target = (*m)[2];
            if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target[0] == '#')
                continue;
            links.push_back({static_cast<int>(i) + 1, (*m)[1], target});
        }
    }
    return links;
}

// Every relative link of a markdown file: the target exists; "#L10" or "#L10-L20" lies inside the
// file; a link text written as code (`name`, `name()`, `Class::name`) occurs on the cited lines.
void check_links(const fs::path& md) {
    const std::vector<std::string> lines = read_lines(md);
    for (const Link& l : relative_links(lines)) {
        INFO(md.filename().string() << ":" << l.line << ": [" << l.text << "](" << l.target << ")");
        const size_t hash = l.target.find('#');
        const fs::path file = md.parent_path() / l.target.substr(0, hash);
        REQUIRE(fs::exists(file));
        if (hash == std::string::npos || fs::is_directory(file)) continue;
        std::smatch m;
        const std::string anchor = l.target.substr(hash + 1);
        if (!std::regex_match(anchor, m, std::regex(R"(L(\d+)(?:-L(\d+))?)"))) continue;
        const int first = std::stoi(m[1]);
        const int last = m[2].matched ? std::stoi(m[2]) : first;
        const std::vector<std::string> target_lines = read_lines(file);
        CHECK(first >= 1);
        CHECK(first <= last);
        REQUIRE(last <= static_cast<int>(target_lines.size()));
        if (l.text.size() > 2 && l.text.front() == '`' && l.text.back() == '`') {
            std::string name = l.text.substr(1, l.text.size() - 2);
            if (name.size() > 2 && name.compare(name.size() - 2, 2, "()") == 0) name.resize(name.size() - 2);
            if (const size_t colons = name.rfind("::"); colons != std::string::npos) name = name.substr(colons + 2);
            // Near the top of the range: a range that has drifted down past a definition fails
            // even while the name still occurs further inside it.
            bool found = false;
            for (int k = first; k <= std::min(last, first + 2); ++k)
                if (target_lines[k - 1].find(name) != std::string::npos) found = true;
            CHECK_MESSAGE(found, "`" << name << "` is not on the first lines of " << first << "-" << last << " of " << file);
        }
    }
}

}  // namespace

TEST_CASE("line_matches: exact lines, and ‹volatile› stands for one word only") {
    CHECK(line_matches("a: 1", "a: 1"));
    CHECK_FALSE(line_matches("a: 1", "a: 2"));
    CHECK(line_matches("t ms: ‹volatile›", "t ms: 0.226"));
    CHECK_FALSE(line_matches("t ms: ‹volatile›", "t ms: 0.226 extra"));
    CHECK_FALSE(line_matches("t ms: ‹volatile›", "t ms: "));
    CHECK(line_matches("x (y) ‹volatile› [z]", "x (y) 3.5 [z]"));
    CHECK_FALSE(line_matches("x (y) ‹volatile› [z]", "x (y) 3.5 [q]"));
}

TEST_CASE("every example has a walkthrough, and every walkthrough belongs to an example") {
    const std::vector<std::string> names = examples();
    const std::vector<fs::path> docs = walkthroughs();
    REQUIRE(!docs.empty());
    std::set<std::string> numbers_with_docs;
    for (const fs::path& d : docs) numbers_with_docs.insert(d.filename().string().substr(0, 2));
    for (const std::string& n : names)
        CHECK_MESSAGE(numbers_with_docs.count(n.substr(0, 2)),
                      "example " << n << " has no walkthrough walkthroughs/" << n.substr(0, 2) << "-*.md");
    for (const fs::path& d : docs) {
        const std::string nn = d.filename().string().substr(0, 2);
        CHECK_MESSAGE(std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.substr(0, 2) == nn; }),
                      d.filename() << " has no example examples/" << nn << "_*.cpp");
    }
}

TEST_CASE("every walkthrough has the five parts, and runs its own example") {
    for (const fs::path& md : walkthroughs()) {
        INFO(md.filename());
        const std::vector<std::string> lines = read_lines(md);
        for (const char* heading : {"## The question", "## Run it", "## Where the work happens", "## Try this"})
            CHECK_MESSAGE(std::find(lines.begin(), lines.end(), heading) != lines.end(), "missing '" << heading << "'");
        const std::string nn = md.filename().string().substr(0, 2);
        bool runs_own = false;
        for (const ConsoleBlock& b : console_blocks(lines))
            if (b.command.rfind("build/bin/" + nn + "_", 0) == 0) runs_own = true;
        CHECK_MESSAGE(runs_own, "no console block runs build/bin/" << nn << "_*");
    }
}

TEST_CASE("every output block shown in a walkthrough is what the example prints today") {
    for (const fs::path& md : walkthroughs()) {
        for (const ConsoleBlock& b : console_blocks(read_lines(md))) {
            INFO(md.filename().string() << ":" << b.line << ": $ " << b.command);
            std::vector<std::string> real = split_lines(run_shown(b.command));
            std::vector<std::string> shown = b.expected;
            trim_trailing_blank_lines(real);
            trim_trailing_blank_lines(shown);
            for (size_t i = 0; i < std::max(real.size(), shown.size()); ++i) {
                const std::string s = i < shown.size() ? shown[i] : "<no more lines shown>";
                const std::string r = i < real.size() ? real[i] : "<no more lines printed>";
                CHECK_MESSAGE(line_matches(s, r), "output line " << i + 1 << "\n  shown:   " << s << "\n  printed: " << r);
                if (!line_matches(s, r)) break;  // one mismatch per block is enough to read
            }
        }
    }
}

TEST_CASE("relative links in walkthroughs and doc pages point at real files and lines") {
    std::vector<fs::path> pages = walkthroughs();
    pages.push_back(source_dir() / "walkthroughs" / "README.md");
    for (const auto& e : fs::directory_iterator(source_dir() / "docs" / "pages"))
        if (e.path().extension() == ".md") pages.push_back(e.path());
    for (const fs::path& md : pages) check_links(md);
}

TEST_CASE("each walkthrough ends with links to the previous and next ones, in number order") {
    std::vector<fs::path> pages;  // all of them, also those whose example is not built here
    for (const auto& e : fs::directory_iterator(source_dir() / "walkthroughs"))
        if (std::regex_match(e.path().filename().string(), std::regex(R"(\d\d-[a-z0-9-]+\.md)"))) pages.push_back(e.path());
    std::sort(pages.begin(), pages.end());
    REQUIRE(pages.size() >= 2);
    const auto title = [](const fs::path& p) {  // "# 05 · Attention ..." -> "05 · Attention ..."
        const std::string first = read_lines(p).at(0);
        REQUIRE_MESSAGE(first.rfind("# ", 0) == 0, p.filename() << " does not open with a '# NN · title' line");
        return first.substr(2);
    };
    for (size_t i = 0; i < pages.size(); ++i) {
        INFO(pages[i].filename());
        CHECK(title(pages[i]).substr(0, 2) == pages[i].filename().string().substr(0, 2));
        std::vector<std::string> lines = read_lines(pages[i]);
        trim_trailing_blank_lines(lines);
        std::string expected;
        if (i > 0) expected += "← [" + title(pages[i - 1]) + "](" + pages[i - 1].filename().string() + ") · ";
        expected += "[all walkthroughs](README.md)";
        if (i + 1 < pages.size()) expected += " · [" + title(pages[i + 1]) + "](" + pages[i + 1].filename().string() + ") →";
        REQUIRE(!lines.empty());
        CHECK(lines.back() == expected);
    }
}

TEST_CASE("glass.hpp includes every header of include/glass, each once") {
    const fs::path root = source_dir() / "include";
    std::string all;
    for (const std::string& line : read_lines(root / "glass" / "glass.hpp")) all += line + "\n";
    for (const auto& e : fs::recursive_directory_iterator(root / "glass")) {
        if (e.path().extension() != ".hpp" || e.path().filename() == "glass.hpp") continue;
        const std::string include = "#include \"" + fs::relative(e.path(), root).generic_string() + "\"";
        const size_t first = all.find(include);
        CHECK_MESSAGE(first != std::string::npos, "glass.hpp does not include " << include);
        CHECK_MESSAGE(all.find(include, first + 1) == std::string::npos, include << " appears twice in glass.hpp");
    }
}

}  // namespace test_walkthroughs
