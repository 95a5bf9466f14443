// fuzz/fuzz_checkpoint.cpp — a llama2.c checkpoint (load_llama2c_checkpoint: header checks,
// exact file size, mmap, weight views), read through an in-memory file. When it loads, the file
// must be exactly as long as its header says, and one step of the reference forward pass runs on
// it (bounded: the harness skips models whose KV cache or work would be large, a limit of this
// harness, not of glass); the logits must be one per vocabulary entry.
#include <algorithm>

#include "fuzz_common.hpp"
#include "glass/checkpoint.hpp"
#include "glass/transformer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::Model m = glass::load_llama2c_checkpoint(file.path());
        const glass::ModelConfig& c = m.config;
        FUZZ_CHECK(glass::llama2c_file_bytes(c) == static_cast<std::int64_t>(size), "loaded a %zu-byte file whose header implies %lld bytes",
                   size, static_cast<long long>(glass::llama2c_file_bytes(c)));
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
