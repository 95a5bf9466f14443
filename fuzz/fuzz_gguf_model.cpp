// fuzz/fuzz_gguf_model.cpp — a GGUF model file (load_gguf_model: the tensor table, every tensor's
// name, shape, type and bytes checked against the config its metadata implies, ggml's types
// dequantized), read through an in-memory file. When it loads, one step of the reference forward
// pass runs on it (forward_step.hpp); then the file is loaded again with its weights left in
// their stored blocks and the fast path packs every matrix from those bytes in its own panel
// type (`stored`: Q4_K/Q5_K/Q6_K into packed_kquants.hpp's panels), the reader of blocks a
// forged file reaches last.
#include "forward_step.hpp"
#include "fuzz_common.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/formats/gguf_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::Model m = glass::load_gguf_model(file.path());
        glass_fuzz::forward_step(m, size);
        const glass::Model stored = glass::load_gguf_model(file.path(), glass::LoadWeights::as_stored);
        const glass::fast::FastOptions options{.threads = 1, .weights = glass::fast::stored_weight_type(stored),
                                               .portable_kernels = true};
        glass::fast::FastModel packed(stored, options, glass::fast::SingleRow::matvec);
        FUZZ_CHECK(packed.weight_bytes() > 0, "a packed model of %lld bytes", static_cast<long long>(packed.weight_bytes()));
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
