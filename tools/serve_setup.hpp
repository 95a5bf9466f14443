// What `glass serve` and `glass serve-bench` both set up before the engine runs, from the same
// flags (each command adds its own to these):
//
//   model     -m FILE (llama2.c, GGUF or a folder) or --shape NAME: random weights of that shape,
//             made in memory; --context N
//   backend   --backend fast|reference (fast), --threads N (every core), --precision TYPE (what
//             the file stores), --kv fp32|int8 (fp32)
//   engine    --block-size B (16), --pool-blocks N (0: four context windows' worth), --budget T
//             (256 tokens a step), --max-running N (64 requests in a batch), --no-prefix-cache,
//             --no-chunked-prefill, --draft SPEC [--draft-k K] (speculative decoding)
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "draft_setup.hpp"
#include "glass/glass.hpp"

namespace cli {

// The flags above (true: the flag takes a value), with a command's own added.
inline std::map<std::string, bool> with_engine_flags(std::map<std::string, bool> own) {
    own.insert({{"-m", true}, {"--shape", true}, {"--context", true}, {"--backend", true}, {"--threads", true},
                {"--precision", true}, {"--kv", true}, {"--block-size", true}, {"--pool-blocks", true},
                {"--budget", true}, {"--max-running", true}, {"--no-prefix-cache", false},
                {"--no-chunked-prefill", false}, {"--draft", true}, {"--draft-k", true}});
    return own;
}

// --backend and --threads, checked before anything is loaded.
struct BackendChoice {
    std::string name;  // "fast" or "reference"
    int threads = 1;   // the fast backend's
};

inline BackendChoice backend_from_flags(const Flags& flags) {
    BackendChoice b{.name = flags.get("--backend", "fast"),
                    .threads = flags.number<int>("--threads").value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))};
    if (b.name != "fast" && b.name != "reference") throw UsageError("--backend must be fast or reference, got '" + b.name + "'");
    if (b.name == "reference" && (flags.has("--threads") || flags.has("--precision")))
        throw UsageError("--threads and --precision apply to --backend fast");
    if (b.threads < 1 || b.threads > 256) throw UsageError("--threads must be in [1, 256], got " + std::to_string(b.threads));
    return b;
}

// The engine's options (all but the draft, which needs the model: engine_draft_from_flags).
inline glass::serve::EngineOptions engine_options_from_flags(const Flags& flags) {
    glass::serve::EngineOptions eo;
    eo.block_size = flags.number<int>("--block-size").value_or(eo.block_size);
    eo.num_blocks = flags.number<int>("--pool-blocks").value_or(eo.num_blocks);
    eo.prefix_caching = !flags.has("--no-prefix-cache");
    eo.scheduler.max_tokens_per_step = flags.number<int>("--budget").value_or(eo.scheduler.max_tokens_per_step);
    eo.scheduler.max_running = flags.number<int>("--max-running").value_or(eo.scheduler.max_running);
    eo.scheduler.chunked_prefill = !flags.has("--no-chunked-prefill");
    if (eo.block_size < 1) throw UsageError("--block-size must be >= 1, got " + std::to_string(eo.block_size));
    if (eo.num_blocks < 0)
        throw UsageError("--pool-blocks must be >= 1 (or 0: four context windows' worth), got " + std::to_string(eo.num_blocks));
    if (eo.scheduler.max_tokens_per_step < 1)
        throw UsageError("--budget must be >= 1, got " + std::to_string(eo.scheduler.max_tokens_per_step));
    if (eo.scheduler.max_running < 1)
        throw UsageError("--max-running must be >= 1, got " + std::to_string(eo.scheduler.max_running));
    return eo;
}

// --shape NAME's configuration, its context window changed by --context N when given.
inline glass::ModelConfig shape_config_from_flags(const Flags& flags) {
    glass::ModelConfig c = glass::fast::shape_config(flags.get("--shape", ""));
    if (const auto ctx = flags.number<int>("--context")) {
        if (*ctx < 16 || *ctx > 65536) throw UsageError("--context must be in [16, 65536], got " + std::to_string(*ctx));
        c.seq_len = *ctx;
    }
    return c;
}

// The model: with --shape, random weights of that shape drawn from `seed`; else the file at
// `path` (the fast backend packs from the stored blocks), its window set by --context.
inline glass::Model model_from_flags(const Flags& flags, const BackendChoice& backend, const std::string& path,
                                     std::uint64_t seed) {
    if (flags.has("--shape")) return glass::fast::random_model_in_memory(shape_config_from_flags(flags), seed);
    glass::Model m = glass::load_model(path, backend.name == "fast" ? glass::LoadWeights::as_stored : glass::LoadWeights::fp32);
    context_from_flags(flags, m);
    return m;
}

// --precision (default: the type the file stores its matrices in, fp32 for llama2.c and shapes).
inline std::string precision_from_flags(const Flags& flags, const glass::Model& model) {
    return flags.get("--precision", glass::fast::to_string(glass::fast::stored_weight_type(model)));
}

// The fast path's options: threads, weights at `precision`, --kv (which the reference backend
// takes too).
inline glass::fast::FastOptions fast_options_from_flags(const Flags& flags, const BackendChoice& backend,
                                                        const std::string& precision) {
    glass::fast::FastOptions fo;
    fo.threads = backend.threads;
    fo.weights = glass::fast::weight_type_from_string(precision);
    fo.kv = kv_from_flags(flags);
    return fo;
}

// The backend named by --backend (already checked to be "fast" or "reference"); fast_options.kv
// (--kv) applies to both.
inline std::unique_ptr<glass::serve::PagedBackend> make_paged_backend(const std::string& name, const glass::Model& model,
                                                                      const glass::fast::FastOptions& fast_options) {
    if (name == "reference") return std::make_unique<glass::serve::CpuPagedBackend>(model, fast_options.kv);
    return std::make_unique<glass::fast::FastPagedBackend>(model, fast_options);
}

// --draft SPEC [--draft-k K] into the engine's options (speculative decoding in the engine). Each
// request's model draft runs in a one-thread session of the backend's kind, beside the batched
// target pass. Without --draft, only checks that --draft-k is not given alone.
inline void engine_draft_from_flags(const Flags& flags, const std::string& backend_name, const glass::Model& model,
                                    glass::fast::FastOptions fast_options,
                                    std::vector<std::unique_ptr<glass::Model>>& keep_alive,
                                    glass::serve::EngineOptions& eo) {
    const int k = draft_k_from_flags(flags);
    if (!flags.has("--draft")) return;
    fast_options.threads = 1;
    eo.draft_k = k;
    eo.make_drafter = drafter_factory(flags.get("--draft", ""), model, keep_alive,
                                      [backend_name, fast_options](const glass::Model& m) -> std::unique_ptr<glass::Session> {
                                          if (backend_name == "reference") return std::make_unique<glass::CpuSession>(m, fast_options.kv);
                                          return std::make_unique<glass::fast::FastCpuSession>(m, fast_options);
                                      });
}

}  // namespace cli
