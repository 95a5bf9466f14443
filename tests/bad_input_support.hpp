// Helpers for the tests that feed a loader or a session bad input: the file's bytes, read and
// patched here independently, a temporary file holding them, and the glass::Error message that
// must name the problem.
#pragma once

#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "glass/glass.hpp"

namespace test {

inline std::vector<char> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file under /tmp with a unique name, removed when the test is done.
struct TempFile {
    std::string path;
    explicit TempFile(const std::vector<char>& bytes, const std::string& suffix = ".bin") {
        static int counter = 0;
        path = "/tmp/glass_test_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + suffix;
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        REQUIRE_MESSAGE(out.good(), "cannot write " << path);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.close();
        REQUIRE(std::filesystem::file_size(path) == bytes.size());
    }
    ~TempFile() { std::remove(path.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
};

// The message of the glass::Error `f` throws; fails the test if it throws nothing or anything else.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const glass::Error& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL("expected a glass::Error, got another exception: " << e.what());
    } catch (...) {
        FAIL("expected a glass::Error, got a non-std exception");
    }
    FAIL("expected a glass::Error, but nothing was thrown");
    return {};
}

// Whether `message` contains the integer `v` as a whole number (not as part of a longer one).
inline bool mentions(const std::string& message, long long v) {
    const std::string s = std::to_string(v);
    size_t at = 0;
    while ((at = message.find(s, at)) != std::string::npos) {
        const bool left_ok = at == 0 || !(std::isdigit(static_cast<unsigned char>(message[at - 1])) ||
                                          (v >= 0 && message[at - 1] == '-'));
        const size_t end = at + s.size();
        const bool right_ok = end >= message.size() || !std::isdigit(static_cast<unsigned char>(message[end]));
        if (left_ok && right_ok) return true;
        ++at;
    }
    return false;
}
inline bool contains(const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
}

inline std::int32_t i32_at(const std::vector<char>& b, size_t at) {
    std::int32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
}
inline void put_i32(std::vector<char>& b, size_t at, std::int32_t v) { std::memcpy(b.data() + at, &v, 4); }
inline float f32_at(const std::vector<char>& b, size_t at) {
    float v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
}

}  // namespace test
