// bench_table — every speed figure of the fast CPU path as a ratio to a ceiling measured in the
// same process: read bandwidth for decode, FMA peak for prefill (journey step 9).
//
//   bench_table [--runs R] SPEC...     SPEC = MODEL_FILE:THREADS:PRECISION:PROMPT_LEN:GEN[:NAME]
// e.g. bench_table /tmp/tl1b.bin:2:fp32:512:16:tinyllama1b
//
// Prints one markdown table row per SPEC: median tokens/s [min – max] of R runs for prefill and
// decode, achieved GB/s and GFLOP/s, their ratios to the probes with the same thread count,
// and llama.cpp's figures for the same shape (measured on this kind of machine, see the issue).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_session.hpp"

namespace {

// llama.cpp CPU decode tokens/s on the same shapes, 2 vCPU Zen 4 (issue 6): {1 thread, 2 threads}.
const std::map<std::string, std::map<std::string, std::pair<double, double>>> kLlamaCppDecode = {
    {"stories110M", {{"fp32", {51.5, 70.2}}, {"q8", {178, 220}}}},
    {"tinyllama1b", {{"fp32", {5.7, 9.1}}, {"q8", {17.5, 26.4}}}},
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i)
        if (i == s.size() || s[i] == sep) {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    return parts;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        int runs = 5;
        std::vector<std::string> specs;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--runs" && i + 1 < argc) runs = std::stoi(argv[++i]);
            else specs.push_back(a);
        }
        if (specs.empty() || runs < 5) {
            std::fprintf(stderr, "usage: bench_table [--runs R>=5] MODEL:THREADS:PRECISION:PROMPT:GEN[:NAME]...\n");
            return 2;
        }
        // Which kernels (GLASS_KERNELS forces a set) on which CPU: every row depends on both.
        const glass::fast::Kernels kernels = glass::fast::best_kernels();
        std::printf("kernels: %s (%s), int8 dot products: %s; CPU: %s (%s)\n", kernels.name, kernels.isa,
                    kernels.int8_dot, glass::fast::cpu_model_name().c_str(), glass::fast::cpu_feature_list().c_str());
        // Probes first, once per thread count used.
        std::map<int, glass::fast::Stat> bandwidth, peak;
        for (const auto& spec : specs) {
            const int t = std::stoi(split(spec, ':').at(1));
            if (bandwidth.count(t)) continue;
            bandwidth[t] = glass::fast::read_bandwidth_probe(t);
            peak[t] = glass::fast::fma_peak_probe(t);
            std::printf("probe, %d thread(s): read bandwidth %.1f GB/s [%.1f – %.1f] (1 GiB sum); "
                        "FMA peak %.1f GFLOP/s [%.1f – %.1f]\n",
                        t, bandwidth[t].median / 1e9, bandwidth[t].min / 1e9, bandwidth[t].max / 1e9,
                        peak[t].median / 1e9, peak[t].min / 1e9, peak[t].max / 1e9);
            std::fflush(stdout);
        }
        std::printf("\n| shape | weights | threads | decode tok/s median [range] | GB/s | %% of read BW "
                    "| llama.cpp decode | prefill tok/s (prompt) median [range] | GFLOP/s | %% of FMA peak |\n"
                    "|---|---|---|---|---|---|---|---|---|---|\n");
        std::fflush(stdout);
        for (const auto& spec : specs) {
            const auto p = split(spec, ':');
            if (p.size() < 5) glass::fail("bad spec '", spec, "' (MODEL:THREADS:PRECISION:PROMPT:GEN[:NAME])");
            const int threads = std::stoi(p[1]), prompt = std::stoi(p[3]), gen = std::stoi(p[4]);
            const auto type = glass::fast::weight_type_from_string(p[2]);
            const std::string name = p.size() > 5 ? p[5] : p[0];
            const glass::Model model = glass::load_llama2c_checkpoint(p[0]);
            glass::fast::FastCpuSession session(model, {.threads = threads, .weights = type, .prefill_chunk = 512});
            const auto s = glass::fast::measure_phases(session, prompt, gen, runs);
            // Read per decoded token: every weight, and the K/V rows cached so far (fp32 cache).
            const double bytes = static_cast<double>(session.weight_bytes()) +
                                 glass::fast::decode_cache_bytes_per_token(model.config, glass::KvType::fp32, prompt, gen);
            const double flops = glass::fast::prefill_flops(model.config, prompt) / prompt * s.prefill_tokens_per_s.median;
            std::string reference = "–";
            if (auto shape = kLlamaCppDecode.find(name); shape != kLlamaCppDecode.end())
                if (auto r = shape->second.find(glass::fast::to_string(type)); r != shape->second.end())
                    if (threads == 1 || threads == 2) {
                        char buf[64];
                        const double v = threads == 1 ? r->second.first : r->second.second;
                        std::snprintf(buf, sizeof buf, "%.1f (glass %.2f×)", v, s.decode_tokens_per_s.median / v);
                        reference = buf;
                    }
            std::printf("| %s | %s | %d | %.2f [%.2f – %.2f] | %.1f | %.0f %% | %s | %.1f (%d) [%.1f – %.1f] | %.1f | %.0f %% |\n",
                        name.c_str(), glass::fast::to_string(type), threads, s.decode_tokens_per_s.median,
                        s.decode_tokens_per_s.min, s.decode_tokens_per_s.max, bytes * s.decode_tokens_per_s.median / 1e9,
                        100 * bytes * s.decode_tokens_per_s.median / bandwidth[threads].median, reference.c_str(),
                        s.prefill_tokens_per_s.median, prompt, s.prefill_tokens_per_s.min, s.prefill_tokens_per_s.max,
                        flops / 1e9, 100 * flops / peak[threads].median);
            std::fflush(stdout);
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_table: error: %s\n", e.what());
        return 1;
    }
}
