// fuzz/fuzz_llama2c_tokenizer.cpp — llama2.c's tokenizer.bin, parsed from memory
// (Llama2cTokenizer::parse), then encode/decode on what it read: the probe text and the input.
// Passes on success or glass::Error; ids must be in range and decodable (tokenizer_checks.hpp).
#include <vector>

#include "fuzz_common.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "tokenizer_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const std::vector<char> bytes(data, data + size);
    try {
        const glass::Llama2cTokenizer t = glass::Llama2cTokenizer::parse(bytes);
        glass_fuzz::check_sentencepiece(t, glass_fuzz::kProbeText, false);
        glass_fuzz::check_sentencepiece(t, std::string_view(bytes.data(), std::min<size_t>(size, 256)), false);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
