// Helpers shared by the tests: where files are, reading the goldens, running programs.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <span>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "glass/glass.hpp"
#include "relative_error.hpp"

namespace test {

inline std::string shared_dir() { return GLASS_SHARED_DIR; }
inline std::string models_dir() { return GLASS_MODELS_DIR; }
inline std::string bin_dir() { return GLASS_BIN_DIR; }
inline std::string shipped_model() { return models_dir() + "/stories260K.bin"; }
inline std::string shipped_tokenizer() { return models_dir() + "/tok512.bin"; }
inline std::string golden(const std::string& name) { return shared_dir() + "/goldens/" + name; }

// Every line of a JSON Lines file. Fails the test (not silently empty) if the file is missing.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "missing ground-truth file " << path);
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    REQUIRE_MESSAGE(!rows.empty(), "empty ground-truth file " << path);
    return rows;
}

// The shipped model, loaded once for all tests.
inline const glass::Model& shipped() {
    static const glass::Model model = glass::load_llama2c_checkpoint(shipped_model());
    return model;
}
inline const glass::Llama2cTokenizer& shipped_tok() {
    static const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(shipped_tokenizer(), 512);
    return tok;
}

struct Run {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};

// Runs a shell command; captures stdout and stderr separately.
inline Run run(const std::string& command) {
    static int counter = 0;
    const std::string err_path = "/tmp/glass_test_stderr_" + std::to_string(::getpid()) + "_" +
                                 std::to_string(counter++);
    Run r;
    FILE* pipe = ::popen((command + " 2>" + err_path).c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream err(err_path);
    r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
    std::remove(err_path.c_str());
    return r;
}

// Single-quotes a string for the shell.
inline std::string sh(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

inline std::vector<int> ids_of(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

// The generate() options that reproduce one llama2.c golden record (stories260K_greedy.jsonl or
// stories260K_sampling.jsonl): its temperature (0 = greedy), top-p, seed and -n steps.
inline glass::GenerateOptions golden_options(const nlohmann::json& rec) {
    glass::GenerateOptions options;
    options.sampling.temperature = rec["temperature"].get<float>();
    options.sampling.top_p = rec["topp"].get<float>();
    options.seed = rec.value("seed", std::uint64_t{0});
    options.max_new_tokens =
        glass::new_tokens_for_steps(rec["steps"].get<int>(), static_cast<int>(rec["prompt_ids"].size()));
    return options;
}

// The rest of the line of a program's output that starts with "label: " (examples print their
// results that way). Fails the test if there is no such line.
inline std::string value_of(const std::string& out, const std::string& label) {
    const std::string key = label + ": ";
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(key, 0) == 0) return line.substr(key.size());
    FAIL("no line starting with '" << key << "' in the output:\n" << out);
    return {};
}

// The first number after "label: " (fails the test if the rest of the line does not start with one).
inline double number(const std::string& out, const std::string& label) {
    const std::string v = value_of(out, label);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    REQUIRE_MESSAGE(end != v.c_str(), "no number after '" << label << ": ' in '" << v << "'");
    return x;
}

// Runs build/bin/NAME with ARGS; the example must succeed (its stderr is shown if it does not).
inline Run run_example(const std::string& name, const std::string& args = "") {
    Run r = run(bin_dir() + "/" + name + (args.empty() ? "" : " " + args));
    INFO(name << " " << args << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
}

// The whole file, bytes as they are.
inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh directory for one test's files, named by the tag and this process; removed, with
// everything in it, when the test program exits (a crash leaves it behind to look at).
inline std::string temp_dir(const std::string& tag) {
    struct Made {
        std::set<std::filesystem::path> dirs;
        ~Made() {
            std::error_code ignored;  // a file still open elsewhere must not turn exit into a throw
            for (const auto& d : dirs) std::filesystem::remove_all(d, ignored);
        }
    };
    static Made made;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("glass_test_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    made.dirs.insert(dir);
    return dir.string();
}

}  // namespace test
