// examples/args.hpp — how the numbered examples read their command-line arguments.
//
// Every example runs with no arguments; arguments only change what it shows (the "Try this"
// steps of the walkthroughs). A bad argument is reported like any glass error: one line on
// stderr naming the offending value, exit status 1.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "glass/errors.hpp"

namespace example {

/// An integer argument in [lo, hi]; anything else (a word, "12x", out of range) fails naming it.
inline int int_arg(const char* text, const char* what, long lo, long hi) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < lo || v > hi)
        glass::fail(what, " '", text, "' is not an integer in [", lo, ", ", hi, "]");
    return static_cast<int>(v);
}

/// A finite number argument in [lo, hi].
inline double number_arg(const char* text, const char* what, double lo, double hi) {
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
        glass::fail(what, " '", text, "' is not a number in [", lo, ", ", hi, "]");
    return v;
}

/// main() of an example: runs `body`, and turns a glass::Error (a bad argument, a file that
/// cannot be read or written) into "error: ..." on stderr and exit status 1.
inline int run_reporting_errors(int (*body)(int, char**), int argc, char** argv) {
    try {
        return body(argc, argv);
    } catch (const glass::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

}  // namespace example
