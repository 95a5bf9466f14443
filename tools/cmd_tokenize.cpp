// glass tokenize — journey step 1 on the command line.
//
//   glass tokenize [-t TOKENIZER.bin] [--bos] [--eos] [--json] [--] TEXT     llama2.c vocabulary
//   glass tokenize --tiktoken FILE --pattern r50k|cl100k|o200k [--json] [--] TEXT
//                  (tiktoken's ordinary encoding: special-token text is plain text)
//   glass tokenize --gpt2 encoder.json vocab.bpe [--json] [--] TEXT
//   glass tokenize --gguf FILE.gguf [--json] [--] TEXT
//                  (llama.cpp's tokenize without special-token parsing; user-defined tokens match)
//   glass tokenize --hf tokenizer.json [--json] [--] TEXT
//                  (Hugging Face's encode with add_special_tokens=False: special-token text in
//                  TEXT becomes the special token; the file's normalizer applies)
// --json prints {"ids":[...]} (plus "pieces" for llama2.c vocabularies). TEXT may be any bytes.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "glass/tokenizer.hpp"

namespace cli {

int cmd_tokenize(int argc, char** argv) {
    Flags flags("tokenize", {{"-t", true}, {"--bos", false}, {"--eos", false}, {"--json", false},
                             {"--tiktoken", true}, {"--pattern", true}, {"--gpt2", true}, {"--hf", true},
                             {"--gguf", true}});
    flags.parse(argc, argv, 2);
    const int sources = flags.has("-t") + flags.has("--tiktoken") + flags.has("--gpt2") + flags.has("--hf") +
                        flags.has("--gguf");
    if (sources > 1) throw UsageError("give one of -t, --tiktoken, --gpt2, --hf, --gguf (got " + std::to_string(sources) + ")");
    if (flags.has("--pattern") && !flags.has("--tiktoken"))
        throw UsageError("--pattern goes with --tiktoken FILE");

    // --gpt2 takes two files: the flag's value is encoder.json, the next argument vocab.bpe.
    std::vector<std::string> positional = flags.positional();
    std::string vocab_bpe;
    if (flags.has("--gpt2")) {
        if (positional.empty()) throw UsageError("--gpt2 needs two files: --gpt2 encoder.json vocab.bpe");
        vocab_bpe = positional.front();
        positional.erase(positional.begin());
    }
    if (positional.size() != 1)
        throw UsageError("glass tokenize takes exactly one TEXT argument (got " +
                         std::to_string(positional.size()) + "); use -- before text starting with '-'");
    const std::string& text = positional[0];
    const bool bos = flags.has("--bos"), eos = flags.has("--eos");

    std::unique_ptr<glass::Tokenizer> tok;
    std::vector<int> ids;
    if (flags.has("--tiktoken")) {
        if (!flags.has("--pattern")) throw UsageError("--tiktoken needs --pattern r50k|cl100k|o200k");
        const std::string pattern = flags.get("--pattern", "");
        if (pattern != "r50k" && pattern != "cl100k" && pattern != "o200k")
            throw UsageError("--pattern must be r50k, cl100k or o200k (got '" + pattern + "')");
        tok = std::make_unique<glass::ByteLevelBpe>(glass::load_tiktoken(flags.get("--tiktoken", ""), pattern));
        ids = tok->encode(text, bos, eos);
    } else if (flags.has("--gpt2")) {
        tok = std::make_unique<glass::ByteLevelBpe>(glass::load_gpt2(flags.get("--gpt2", ""), vocab_bpe));
        ids = tok->encode(text, bos, eos);
    } else if (flags.has("--gguf")) {
        tok = glass::load_gguf_tokenizer(flags.get("--gguf", ""));
        ids = tok->encode(text, bos, eos);
    } else if (flags.has("--hf")) {
        tok = glass::load_hf_tokenizer(flags.get("--hf", ""));
        if (bos && tok->bos_id() < 0) glass::fail("tokenizer.json '", flags.get("--hf", ""), "' names no BOS token");
        if (eos && tok->eos_id() < 0) glass::fail("tokenizer.json '", flags.get("--hf", ""), "' names no EOS token");
        if (bos) ids.push_back(tok->bos_id());
        const std::vector<int> body = tok->encode_with_specials(text);
        ids.insert(ids.end(), body.begin(), body.end());
        if (eos) ids.push_back(tok->eos_id());
    } else {
        tok = std::make_unique<glass::Llama2cTokenizer>(glass::Llama2cTokenizer::load(flags.get("-t", kDefaultTokenizer)));
        ids = tok->encode(text, bos, eos);
        if (flags.has("--json")) {
            nlohmann::json pieces = nlohmann::json::array();
            for (int id : ids) pieces.push_back(tok->piece(id));
            std::cout << dump({{"ids", ids}, {"pieces", pieces}}) << "\n";
            return 0;
        }
    }
    if (flags.has("--json")) {
        std::cout << dump({{"ids", ids}}) << "\n";
        return 0;
    }
    std::printf("%zu tokens\n%6s %7s  %s\n", ids.size(), "index", "id", "piece");
    for (size_t i = 0; i < ids.size(); ++i)
        std::printf("%6zu %7d  %s\n", i, ids[i], quoted(tok->piece(ids[i])).c_str());
    return 0;
}

}  // namespace cli
