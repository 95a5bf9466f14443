// fuzz/fuzz_common.hpp — what every harness shares: inputs as files, input splitting, checks.
//
// A harness passes when the code under test either succeeds (and the properties it checks
// hold) or throws glass::Error (bad input, reported clearly). Anything else fails the run:
// a crash, an AddressSanitizer or UBSan report, an uncaught exception of any other type
// (std::bad_alloc included: it escapes LLVMFuzzerTestOneInput and aborts), a hang (-timeout),
// an allocation over -malloc_limit_mb, or a failed FUZZ_CHECK.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "glass/errors.hpp"

namespace glass_fuzz {

// A property that must hold: prints what failed and aborts (libFuzzer saves the input).
#define FUZZ_CHECK(cond, ...)                                                             \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, "  " __VA_ARGS__);                                       \
            std::fprintf(stderr, "\n");                                                   \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

// A glass::Error is an accepted outcome; with GLASS_FUZZ_VERBOSE=1 in the environment it is
// printed (to see why a seed is refused: `GLASS_FUZZ_VERBOSE=1 build-fuzz/bin/fuzz_x FILE`).
inline void refused(const glass::Error& e) {
    static const bool verbose = std::getenv("GLASS_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "glass::Error: %.300s\n", e.what());
}

// Bytes in memory given a path, for loaders that only take a path: an anonymous in-memory file
// (memfd) named /proc/self/fd/N. Nothing touches the disk; the file is gone when this is.
class MemFile {
public:
    MemFile(const void* data, size_t size) {
        fd_ = ::memfd_create("glass-fuzz", 0);
        if (fd_ < 0) { std::perror("memfd_create"); std::abort(); }
        const char* p = static_cast<const char*>(data);
        while (size > 0) {
            const ssize_t n = ::write(fd_, p, size);
            if (n <= 0) { std::perror("write to memfd"); std::abort(); }
            p += n;
            size -= static_cast<size_t>(n);
        }
    }
    MemFile(std::string_view bytes) : MemFile(bytes.data(), bytes.size()) {}
    ~MemFile() { ::close(fd_); }
    MemFile(const MemFile&) = delete;
    MemFile& operator=(const MemFile&) = delete;
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
    int fd_ = -1;
};

// Splits `input` at the first `separator`: (before, after). No separator: (input, "").
inline std::pair<std::string_view, std::string_view> split_at(std::string_view input, std::string_view separator) {
    const size_t at = input.find(separator);
    if (at == std::string_view::npos) return {input, {}};
    return {input.substr(0, at), input.substr(at + separator.size())};
}

// Text every fuzzed vocabulary is asked to encode: ASCII words, digits, contractions, spaces and
// newlines, accented Latin, CJK, an emoji, invalid UTF-8, a special token's text.
inline constexpr std::string_view kProbeText =
    "Once upon a time, it's 2026: \"don't\"  stop!\n\n\tIl était une fois ümlaut "
    "日本語 🙂 \xff\xfe\xc3 <|endoftext|> <s></s> end  ";

// True when `s` is valid UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
inline bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        int n = 0;
        std::uint32_t cp = 0;
        if (c < 0x80) { ++i; continue; }
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return false;
        if (i + static_cast<size_t>(n) >= s.size()) return false;  // the character is cut off
        for (int k = 1; k <= n; ++k) {
            const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += static_cast<size_t>(n) + 1;
    }
    return true;
}

}  // namespace glass_fuzz
