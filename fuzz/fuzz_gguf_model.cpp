// fuzz/fuzz_gguf_model.cpp — a GGUF model file (load_gguf_model: the tensor table, every tensor's
// name, shape, type and bytes checked against the config its metadata implies, ggml's types
// dequantized), read through an in-memory file. When it loads, one step of the reference forward
// pass runs on it (forward_step.hpp).
#include "forward_step.hpp"
#include "fuzz_common.hpp"
#include "glass/formats/gguf_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::Model m = glass::load_gguf_model(file.path());
        glass_fuzz::forward_step(m, size);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
