// fuzz/fuzz_gguf_model.cpp — a GGUF model file (load_gguf_model: the tensor table, every tensor's
// name, shape, type and bytes checked against the config its metadata implies, ggml's types
// dequantized), read through an in-memory file. When it loads, one step of the reference forward
// pass runs on it (bounded: models whose KV cache would be large are skipped, a limit of this
// harness, not of glass), and the logits must be one per embedding row.
#include <algorithm>

#include "fuzz_common.hpp"
#include "glass/formats/gguf_model.hpp"
#include "glass/transformer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::Model m = glass::load_gguf_model(file.path());
        const glass::ModelConfig& c = m.config;
        constexpr std::int64_t kMaxKvBytes = 64 << 20;
        if (c.kv_bytes_per_token() * c.seq_len > kMaxKvBytes) return 0;
        glass::CpuSession session(m);
        const int ids[2] = {static_cast<int>(size % static_cast<size_t>(c.vocab_size)), 0};
        const std::span<const float> logits = session.prefill(std::span<const int>(ids, std::min(2, c.seq_len)));
        FUZZ_CHECK(logits.size() == static_cast<size_t>(c.vocab_size), "%zu logits for a vocabulary of %d", logits.size(), c.vocab_size);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
