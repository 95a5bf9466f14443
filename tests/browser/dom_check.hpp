// dom_check.hpp — the small pieces every browser check (explain_dom_check, serve_dom_check)
// shares: a failure counter that `check` bumps with a message on stderr, and reading a file whole.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace dom_check {

inline int failures = 0;  // the program exits 1 when this is not 0

inline void check(bool ok, const std::string& what) {
    if (!ok) {
        ++failures;
        std::cerr << "FAIL: " << what << "\n";
    }
}

// The whole file; exits 1 when it cannot be read.
inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cerr << "cannot read " << path << "\n";
        std::exit(1);
    }
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace dom_check
