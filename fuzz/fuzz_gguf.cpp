// fuzz/fuzz_gguf.cpp — a GGUF file: header, metadata (read_gguf_metadata) and the vocabulary in
// it (load_gguf_tokenizer: "gpt2" byte-level or "llama" SentencePiece), read through an in-memory
// file; then encode/decode on the probe text (tokenizer_checks.hpp).
#include "fuzz_common.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "tokenizer_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    try {
        const glass::GgufFile f = glass::read_gguf_metadata(file.path());
        if (!f.has("tokenizer.ggml.tokens")) return 0;
        const std::unique_ptr<glass::Tokenizer> t = glass::load_gguf_tokenizer(file.path());
        glass_fuzz::check_any(*t, glass_fuzz::kProbeText);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
