// Reading what the numbered examples print (labelled lines of words and numbers), for the
// test_examples_*.cpp files. `number` here takes the first word after "label: " that parses as a
// number; test::number only a number at the start of the value.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace test::example_output {

// Every line that starts with `prefix`.
inline std::vector<std::string> lines_starting(const std::string& out, const std::string& prefix) {
    std::vector<std::string> found;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(prefix, 0) == 0) found.push_back(line);
    return found;
}

// All whitespace-separated words of s that parse completely as numbers, in order.
inline std::vector<double> numbers(const std::string& s) {
    std::vector<double> v;
    std::istringstream words(s);
    for (std::string w; words >> w;) {
        char* end = nullptr;
        const double x = std::strtod(w.c_str(), &end);
        if (end != w.c_str() && *end == '\0') v.push_back(x);
    }
    return v;
}

inline std::vector<int> ints(const std::string& s) {
    std::vector<int> v;
    for (double x : numbers(s)) v.push_back(static_cast<int>(x));
    return v;
}

inline double number(const std::string& out, const std::string& label) {
    const std::vector<double> v = numbers(test::value_of(out, label));
    REQUIRE_MESSAGE(!v.empty(), "no number after '" << label << ": '");
    return v.front();
}

inline test::Run run_example(const std::string& name, const std::string& args = "") {
    test::Run r = test::run(test::bin_dir() + "/" + name + (args.empty() ? "" : " " + args));
    INFO(name << " stderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    return r;
}

// The greedy golden (llama2.c's run.c) for a prompt and step count.
inline nlohmann::json greedy_golden(const std::string& prompt, int steps) {
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl")))
        if (g["prompt"] == prompt && g["steps"] == steps) return g;
    FAIL("no greedy golden for '" << prompt << "' with " << steps << " steps");
    return {};
}

}  // namespace test::example_output
