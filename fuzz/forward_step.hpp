// fuzz/forward_step.hpp — what the model-file harnesses (fuzz_checkpoint, fuzz_gguf_model) do with a
// model that loaded: one step of the reference forward pass over two ids, bounded (a model whose
// KV cache would pass 64 MiB is skipped, a limit of the harness, not of glass); the logits must
// be one per vocabulary entry.
#pragma once

#include <algorithm>
#include <span>

#include "fuzz_common.hpp"
#include "glass/transformer.hpp"

namespace glass_fuzz {

inline void forward_step(const glass::Model& m, size_t input_size) {
    const glass::ModelConfig& c = m.config;
    constexpr std::int64_t kMaxKvBytes = 64 << 20;
    if (c.kv_bytes_per_token() * c.seq_len > kMaxKvBytes) return;
    glass::CpuSession session(m);
    const int ids[2] = {static_cast<int>(input_size % static_cast<size_t>(c.vocab_size)), 0};
    const std::span<const float> logits = session.prefill(std::span<const int>(ids, std::min(2, c.seq_len)));
    FUZZ_CHECK(logits.size() == static_cast<size_t>(c.vocab_size), "%zu logits for a vocabulary of %d", logits.size(),
               c.vocab_size);
}

}  // namespace glass_fuzz
