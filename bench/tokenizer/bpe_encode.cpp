// bench_bpe_encode — how fast byte-level BPE encodes, and how that changes with input size.
//
// In:  cl100k_base.tiktoken (../shared/tokenizers/tiktoken/) and an English prose file
//      (argv[1]; default /usr/share/common-licenses/GPL-3, which every Debian system has).
// Out: tables of MB/s (best of several runs) for
//      1. prose of growing size (10 kB .. 10 MB, the file repeated): full encode next to the
//         regex split alone, the ceiling encode cannot beat (it has to split first);
//      2. one long "word" (random letters a-j, no split point): the heap merge against the
//         plain rescan, whose time grows with the square of the length.
// Constant MB/s down a column = time linear in input size.
//
// Usage: bench_bpe_encode [prose.txt] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/formats/tiktoken_loader.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best wall time of `runs` calls of f (at least one).
template <typename F>
double best_seconds(int runs, const F& f) {
    double best = 1e30;
    for (int i = 0; i < runs; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, seconds_since(t0));
    }
    return best;
}

std::string repeat_to(const std::string& text, size_t n) {
    std::string out;
    while (out.size() < n) out += text;
    out.resize(n);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string prose_path = "/usr/share/common-licenses/GPL-3";
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") quick = true;
        else prose_path = a;
    }
    const std::string cl100k_path = std::string(GLASS_SHARED_DIR) + "/tokenizers/tiktoken/cl100k_base.tiktoken";
    try {
        auto t0 = std::chrono::steady_clock::now();
        const glass::ByteLevelBpe tok = glass::load_tiktoken(cl100k_path, "cl100k");
        std::printf("cl100k loaded in %.2f s (%zu merge pairs)\n", seconds_since(t0), tok.pair_merges().size());
        const std::string prose = glass::read_file_bytes(prose_path, "prose file");
        std::printf("prose: %s (%zu bytes, repeated to each size)\n\n", prose_path.c_str(), prose.size());

        const glass::Pretokenizer split({glass::kSplitCl100k});
        std::printf("1. English prose, cl100k\n");
        std::printf("%10s %10s %12s %12s %10s %12s\n", "bytes", "tokens", "encode MB/s", "split MB/s",
                    "encode/split", "bytes/token");
        std::vector<size_t> sizes = {10'000, 100'000, 1'000'000, 10'000'000};
        if (quick) sizes.pop_back();
        for (size_t n : sizes) {
            const std::string text = repeat_to(prose, n);
            const int runs = n >= 10'000'000 ? 3 : 9;  // best of several: the machine is shared
            size_t tokens = 0, pieces = 0;
            const double t_enc = best_seconds(runs, [&] { tokens = tok.encode(text, false, false).size(); });
            const double t_split = best_seconds(runs, [&] {
                pieces = 0;
                split.for_each_piece(text, [&](std::string_view) { ++pieces; });
            });
            std::printf("%10zu %10zu %12.2f %12.2f %10.2f %12.2f\n", n, tokens, n / t_enc / 1e6, n / t_split / 1e6,
                        t_split / t_enc, static_cast<double>(n) / tokens);
        }

        std::printf("\n2. One long word (random letters a-j, no split point), cl100k merges\n");
        std::printf("%10s %10s %14s %14s\n", "bytes", "tokens", "heap MB/s", "naive MB/s");
        std::mt19937 rng(1);
        std::vector<size_t> word_sizes = {1'000, 10'000, 30'000, 100'000, 1'000'000};
        if (quick) word_sizes.pop_back();
        for (size_t n : word_sizes) {
            std::string word;
            while (word.size() < n) word += "abcdefghij"[rng() % 10];
            std::vector<int> bytes;
            for (unsigned char c : word) bytes.push_back(tok.find(std::string(1, static_cast<char>(c))));
            const auto lookup = [&](int l, int r) { return tok.pair_merges().find(l, r); };
            size_t tokens = 0;
            const double t_heap = best_seconds(3, [&] {
                std::vector<int> ids = bytes;
                glass::bpe_merge_heap(ids, lookup);
                tokens = ids.size();
            });
            std::printf("%10zu %10zu %14.2f ", n, tokens, n / t_heap / 1e6);
            if (n <= 30'000) {  // the rescan is O(n^2): 100 kB would take minutes
                const double t_naive = best_seconds(1, [&] {
                    std::vector<int> ids = bytes;
                    glass::bpe_merge_naive(ids, lookup);
                });
                std::printf("%14.3f\n", n / t_naive / 1e6);
            } else {
                std::printf("%14s\n", "(too slow)");
            }
        }
        // The whole encode path on a 100 kB word (split + whole-word lookup + heap merge).
        const std::string big(100'000, 'x');
        const double t_big = best_seconds(3, [&] { (void)tok.encode(big, false, false); });
        std::printf("\nencode of 100 kB 'xxx...': %.2f ms (%.2f MB/s)\n", t_big * 1e3, big.size() / t_big / 1e6);
    } catch (const glass::Error& e) {
        std::fprintf(stderr, "bench_bpe_encode: %s\n", e.what());
        return 1;
    }
    return 0;
}
