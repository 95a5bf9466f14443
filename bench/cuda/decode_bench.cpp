// bench/cuda/decode_bench.cpp — decode speed on the GPU against the GPU's own copy bandwidth.
//
// Decoding one token reads every weight once (plus the KV cache so far), so its ceiling is memory
// bandwidth: tokens/s <= bandwidth / bytes per token. This program measures the ceiling in the same
// run (a device-to-device copy, bytes read + written) and reports each configuration against it.
//
// usage: glass_cuda_bench MODEL.bin [--label NAME] [--precision fp32|fp16|bf16|q8|q4]... [--matmul K]
//                         [--graph off|on|both] [--kv fp32|int8] [--tokens N] [--copy-mib M] [--profile]
// --graph: decode with kernel launches (off), by CUDA graph replay (on), or each in turn (both, the
// default): the difference is the launch overhead a graph removes. --profile brackets the timed
// decode steps with profiler_start/stop, for `ncu --profile-from-start off` (its timings are then
// the profiler's, not the bench's). --kv: the KV cache's storage (CudaOptions::kv; int8 reads
// head_dim + 4 bytes per KV head and position instead of 4 · head_dim).
// Prints one "RESULT key=value ..." line per precision and graph setting (scripts/gpu-check turns
// them into a table).
// Exit 77 when there is no CUDA device.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "cuda_session.hpp"

namespace gc = glass::cuda;

int main(int argc, char** argv) {
    try {
        std::string model_path, label = "model", matmul = "auto", graph = "both", kv = "fp32";
        std::vector<std::string> precisions;
        int tokens = 128, copy_mib = 1024;
        bool profile = false;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            const auto value = [&]() -> std::string {
                if (i + 1 >= argc) glass::fail("flag ", a, " needs a value");
                return argv[++i];
            };
            if (a == "--label") label = value();
            else if (a == "--precision") precisions.push_back(value());
            else if (a == "--matmul") matmul = value();
            else if (a == "--graph") graph = value();
            else if (a == "--kv") kv = value();
            else if (a == "--tokens") tokens = std::stoi(value());
            else if (a == "--copy-mib") copy_mib = std::stoi(value());
            else if (a == "--profile") profile = true;
            else if (!a.empty() && a[0] != '-' && model_path.empty()) model_path = a;
            else glass::fail("unknown argument '", a, "'");
        }
        if (model_path.empty()) glass::fail("usage: glass_cuda_bench MODEL.bin [--label NAME] [--precision P]...");
        if (tokens < 1) glass::fail("--tokens must be >= 1, got ", tokens);
        if (kv != "fp32" && kv != "int8") glass::fail("--kv must be fp32 or int8, got '", kv, "'");
        const glass::KvType kv_type = kv == "int8" ? glass::KvType::int8 : glass::KvType::fp32;
        if (graph != "off" && graph != "on" && graph != "both") glass::fail("--graph must be off, on or both, got '", graph, "'");
        std::vector<bool> graph_settings;
        if (graph != "on") graph_settings.push_back(false);
        if (graph != "off") graph_settings.push_back(true);
        if (precisions.empty()) precisions = {"fp32", "fp16"};
        std::string why;
        if (!gc::device_present(&why)) {
            std::printf("SKIPPED: no CUDA device (%s)\n", why.c_str());
            return 77;
        }

        const double copy_bandwidth = gc::measure_copy_bandwidth(std::size_t(copy_mib) << 20, 20);
        std::printf("device %s: device-to-device copy %.0f GB/s (read + write, %d MiB x 20)\n",
                    gc::device_name().c_str(), copy_bandwidth / 1e9, copy_mib);

        const glass::Model model = glass::load_llama2c_checkpoint(model_path);
        const glass::ModelConfig& c = model.config;
        const int n_prompt = 16, warmup = 8;
        if (n_prompt + warmup + tokens > c.seq_len)
            glass::fail("--tokens ", tokens, " does not fit the context window of ", c.seq_len);
        std::vector<int> prompt(n_prompt);
        for (int i = 0; i < n_prompt; ++i) prompt[std::size_t(i)] = i == 0 ? 1 : (7 * i + 3) % c.vocab_size;

        for (const std::string& precision : precisions) {
            for (const bool use_graph : graph_settings) {
                gc::CudaOptions options;
                options.weights = gc::weight_type_from_string(precision);
                options.matmul = gc::matmul_kernel_from_string(matmul);
                options.graph = use_graph;
                options.kv = kv_type;
                gc::CudaSession session(model, options);  // warm-up below: the graph is captured there
                std::span<const float> logits = session.prefill(prompt);
                for (int i = 0; i < warmup; ++i) logits = session.decode(glass::sample_argmax(logits));
                const int start_position = session.position();
                if (profile) gc::profiler_start();
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < tokens; ++i) logits = session.decode(glass::sample_argmax(logits));  // decode waits for the GPU
                const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (profile) gc::profiler_stop();
                const double tokens_per_s = tokens / seconds;
                // Bytes one decode step reads: every weight, plus the K/V rows attended (mean position).
                const double mean_position = start_position + (tokens + 1) / 2.0;
                const double bytes = double(session.weight_bytes()) + double(glass::kv_bytes_per_token(c, kv_type)) * mean_position;
                const double achieved = bytes * tokens_per_s;
                std::printf("RESULT model=%s precision=%s matmul=%s graph=%s kv=%s tokens=%d tok_s=%.1f ms_per_token=%.4f "
                            "mb_per_token=%.1f achieved_gb_s=%.1f copy_gb_s=%.1f fraction_of_copy=%.3f\n",
                            label.c_str(), precision.c_str(), matmul.c_str(), use_graph ? "on" : "off", kv.c_str(), tokens, tokens_per_s,
                            1000.0 / tokens_per_s, bytes / 1e6, achieved / 1e9, copy_bandwidth / 1e9,
                            achieved / copy_bandwidth);
                std::fflush(stdout);
            }
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass_cuda_bench: error: %s\n", e.what());
        return 1;
    }
}
