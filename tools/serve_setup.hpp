// What `glass serve` and `glass serve-bench` both set up before the engine runs: a model of a
// named shape with random weights (--shape NAME [--context N]), and the paged backend that
// computes its steps (--backend fast|reference).
#pragma once

#include <memory>
#include <string>

#include "cli.hpp"
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

// The backend named by --backend (already checked to be "fast" or "reference").
inline std::unique_ptr<glass::serve::PagedBackend> make_paged_backend(const std::string& name, const glass::Model& model,
                                                                      const glass::fast::FastOptions& fast_options) {
    if (name == "reference") return std::make_unique<glass::serve::CpuPagedBackend>(model);
    return std::make_unique<glass::fast::FastPagedBackend>(model, fast_options);
}

}  // namespace cli
