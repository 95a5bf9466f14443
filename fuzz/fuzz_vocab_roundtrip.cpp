// fuzz/fuzz_vocab_roundtrip.cpp — encode/decode of arbitrary bytes on every real vocabulary in
// ../shared (GLASS_SHARED_DIR): llama2.c's tok512.bin and tokenizer.bin, the three .tiktoken
// files, GPT-2's encoder.json + vocab.bpe, the Hugging Face gpt2/llama3/qwen3 tokenizer.json,
// and llama.cpp's vocab GGUFs. Input byte 0 picks the vocabulary, the rest is the text.
// Properties (tokenizer_checks.hpp):
//   byte-level BPE (tiktoken, GPT-2, HF, GGUF "gpt2"): decode(encode(t)) == t for any bytes
//     (Qwen3: == nfc(t)); DeepSeek's vocabularies lack a few bytes and may refuse them (Error).
//   SentencePiece with byte fallback (tok512, tokenizer.bin, GGUF llama-spm, phi-3):
//     decode(encode(t, BOS)) == t for any bytes, "▁" read as a space in "▁" vocabularies.
// Vocabularies load on first use (seconds each under the sanitizers); GLASS_FUZZ_VOCABS=a,b
// limits the run to those names (scripts/fuzz --smoke does).
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "tokenizer_checks.hpp"

namespace {

const std::string kShared = GLASS_SHARED_DIR;

using Loader = std::unique_ptr<glass::Tokenizer> (*)();

struct Vocab {
    std::string name;
    Loader load;
    std::unique_ptr<glass::Tokenizer> tokenizer;  // loaded on first use
    bool promise_roundtrip;                       // SentencePiece: full byte fallback
};

template <typename T>
std::unique_ptr<glass::Tokenizer> boxed(T t) {
    return std::make_unique<T>(std::move(t));
}
std::unique_ptr<glass::Tokenizer> gguf(const char* name) {
    return glass::load_gguf_tokenizer(kShared + "/tokenizers/llamacpp/ggml-vocab-" + name + ".gguf");
}

std::vector<std::pair<std::string, Loader>> all_vocabs() {
    return {
        {"tok512", [] { return boxed(glass::Llama2cTokenizer::load(kShared + "/models/tok512.bin")); }},
        {"tokenizer.bin", [] { return boxed(glass::Llama2cTokenizer::load(kShared + "/models/tokenizer.bin")); }},
        {"r50k", [] { return boxed(glass::load_tiktoken(kShared + "/tokenizers/tiktoken/r50k_base.tiktoken", "r50k")); }},
        {"cl100k", [] { return boxed(glass::load_tiktoken(kShared + "/tokenizers/tiktoken/cl100k_base.tiktoken", "cl100k")); }},
        {"o200k", [] { return boxed(glass::load_tiktoken(kShared + "/tokenizers/tiktoken/o200k_base.tiktoken", "o200k")); }},
        {"gpt2", [] { return boxed(glass::load_gpt2(kShared + "/tokenizers/gpt2/encoder.json", kShared + "/tokenizers/gpt2/vocab.bpe")); }},
        {"hf-gpt2", [] { return glass::load_hf_tokenizer(kShared + "/tokenizers/hf/gpt2/tokenizer.json"); }},
        {"hf-llama3", [] { return glass::load_hf_tokenizer(kShared + "/tokenizers/hf/llama3/tokenizer.json"); }},
        {"hf-qwen3", [] { return glass::load_hf_tokenizer(kShared + "/tokenizers/hf/qwen3/tokenizer.json"); }},
        {"gguf-deepseek-coder", [] { return gguf("deepseek-coder"); }},
        {"gguf-deepseek-llm", [] { return gguf("deepseek-llm"); }},
        {"gguf-falcon", [] { return gguf("falcon"); }},
        {"gguf-gpt-2", [] { return gguf("gpt-2"); }},
        {"gguf-llama-spm", [] { return gguf("llama-spm"); }},
        {"gguf-mpt", [] { return gguf("mpt"); }},
        {"gguf-phi-3", [] { return gguf("phi-3"); }},
        {"gguf-refact", [] { return gguf("refact"); }},
        {"gguf-starcoder", [] { return gguf("starcoder"); }},
    };
}

std::vector<Vocab> vocabs;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* only = std::getenv("GLASS_FUZZ_VOCABS");
    if (only && !*only) only = nullptr;  // set but empty: all
    const std::string wanted = only ? "," + std::string(only) + "," : "";
    for (const auto& [name, load] : all_vocabs())
        if (wanted.empty() || wanted.find("," + name + ",") != std::string::npos) vocabs.push_back(Vocab{name, load, nullptr, false});
    if (vocabs.empty()) {
        std::fprintf(stderr, "GLASS_FUZZ_VOCABS='%s' names no vocabulary\n", only);
        std::abort();
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    if (size == 0) return 0;
    Vocab& v = vocabs[data[0] % vocabs.size()];
    if (!v.tokenizer) {  // a real file that does not load is a failure, not bad input
        v.tokenizer = v.load();
        if (auto* s = dynamic_cast<const glass::SentencePieceBpe*>(v.tokenizer.get()))
            v.promise_roundtrip = glass_fuzz::full_byte_fallback(*s);
        std::fprintf(stderr, "loaded %s: %d ids%s\n", v.name.c_str(), v.tokenizer->vocab_size(),
                     v.promise_roundtrip ? ", SentencePiece with full byte fallback" : "");
    }
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    if (auto* b = dynamic_cast<const glass::ByteLevelBpe*>(v.tokenizer.get()))
        glass_fuzz::check_byte_level(*b, text);
    else if (auto* s = dynamic_cast<const glass::SentencePieceBpe*>(v.tokenizer.get()))
        glass_fuzz::check_sentencepiece(*s, text, v.promise_roundtrip);
    else
        FUZZ_CHECK(false, "%s: unknown tokenizer family", v.name.c_str());
    return 0;
}
