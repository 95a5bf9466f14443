// What `glass serve` and `glass serve-bench` both set up before the engine runs: a model of a
// named shape with random weights (--shape NAME [--context N]), and the paged backend that
// computes its steps (--backend fast|reference).
#pragma once

#include <memory>
#include <string>

#include "cli.hpp"
#include "draft_setup.hpp"
#include "glass/glass.hpp"

namespace cli {

// --shape NAME's configuration, its context window changed by --context N when given.
inline glass::ModelConfig shape_config_from_flags(const Flags& flags) {
    glass::ModelConfig c = glass::fast::shape_config(flags.get("--shape", ""));
    if (const auto ctx = flags.number<int>("--context")) {
        if (*ctx < 16 || *ctx > 65536) throw UsageError("--context must be in [16, 65536], got " + std::to_string(*ctx));
        c.seq_len = *ctx;
    }
    return c;
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
