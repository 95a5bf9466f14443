// fuzz/fuzz_gpt2.cpp — GPT-2's encoder.json + vocab.bpe (load_gpt2). One input holds both
// files: encoder.json, then kSeparator, then vocab.bpe. Then the byte-level round trip on the
// probe text (tokenizer_checks.hpp).
#include "fuzz_common.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "tokenizer_checks.hpp"

// (make_seeds.cpp writes the same separator)
constexpr std::string_view kSeparator = "\n=== vocab.bpe ===\n";

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    const auto [encoder_json, vocab_bpe] =
        glass_fuzz::split_at(std::string_view(reinterpret_cast<const char*>(data), size), kSeparator);
    const glass_fuzz::MemFile encoder_file(encoder_json), merges_file(vocab_bpe);
    try {
        const glass::ByteLevelBpe t = glass::load_gpt2(encoder_file.path(), merges_file.path());
        glass_fuzz::check_byte_level(t, glass_fuzz::kProbeText);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
