// fuzz/fuzz_checkpoint.cpp — a llama2.c checkpoint (load_llama2c_checkpoint: header checks,
// exact file size, mmap, weight views), read through an in-memory file. When it loads, the file
// must be exactly as long as its header says, and one step of the reference forward pass runs on
// it (bounded: the harness skips models whose KV cache or work would be large, a limit of this
// harness, not of glass); the logits must be one per vocabulary entry.
#include "forward_step.hpp"
#include "fuzz_common.hpp"
#include "glass/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::Model m = glass::load_llama2c_checkpoint(file.path());
        const glass::ModelConfig& c = m.config;
        FUZZ_CHECK(glass::llama2c_file_bytes(c) == static_cast<std::int64_t>(size), "loaded a %zu-byte file whose header implies %lld bytes",
                   size, static_cast<long long>(glass::llama2c_file_bytes(c)));
        glass_fuzz::forward_step(m, size);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
