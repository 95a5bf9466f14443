// fuzz/fuzz_tiktoken.cpp — a .tiktoken rank file (load_tiktoken, read through an in-memory
// file), with the split pattern and special tokens of r50k, cl100k or o200k (chosen by the
// input's length), then the byte-level round trip on the probe text (tokenizer_checks.hpp).
#include "fuzz_common.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "tokenizer_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const glass_fuzz::MemFile file(data, size);
    static const char* const kEncodings[] = {"r50k", "cl100k", "o200k"};
    try {
        const glass::ByteLevelBpe t = glass::load_tiktoken(file.path(), kEncodings[size % 3]);
        glass_fuzz::check_byte_level(t, glass_fuzz::kProbeText);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
