// fuzz/fuzz_hf_tokenizer.cpp — a Hugging Face tokenizer.json (load_hf_tokenizer, read through an
// in-memory file; no tokenizer_config.json beside it), then encode/decode on the probe text:
// the byte-level round trip, or ids in range for SentencePiece style (tokenizer_checks.hpp).
#include "fuzz_common.hpp"
#include "glass/formats/hf_loader.hpp"
#include "tokenizer_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const std::unique_ptr<glass::Tokenizer> t = glass::load_hf_tokenizer(file.path());
        glass_fuzz::check_any(*t, glass_fuzz::kProbeText);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
