// glass tokenize — journey step 1 on the command line.
//
//   glass tokenize [-t TOKENIZER.bin] [--bos] [--eos] [--json] SOURCE      llama2.c vocabulary
//   glass tokenize --tiktoken FILE [--pattern r50k|cl100k|o200k] [--json] SOURCE
//                  (tiktoken's ordinary encoding: special-token text is plain text; the pattern
//                  comes from the file's standard name unless --pattern is given)
//   glass tokenize --gpt2 encoder.json vocab.bpe [--json] SOURCE
//   glass tokenize --gguf FILE.gguf [--json] SOURCE
//                  (llama.cpp's tokenize without special-token parsing; user-defined tokens match)
//   glass tokenize --hf tokenizer.json [--json] SOURCE
//                  (Hugging Face's encode with add_special_tokens=False: special-token text in
//                  TEXT becomes the special token; the file's normalizer applies)
// SOURCE: [--] TEXT, or -f FILE (its bytes), or - (stdin's bytes). A file or stdin can hold any
// bytes, NUL included; an argument cannot hold NUL.
// --json prints {"ids":[...]} (plus "pieces" for llama2.c vocabularies).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "glass/tokenizer.hpp"

namespace cli {
namespace {

std::string read_all(std::istream& in, const std::string& what) {
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (in.bad()) glass::fail("reading ", what, " failed: ", std::strerror(errno));
    return bytes.str();
}

// tiktoken's standard file names -> the split pattern of that encoding (tiktoken_ext/openai_public.py:
// p50k_base and p50k_edit reuse r50k's pattern). An unknown name needs --pattern.
std::string pattern_from_file_name(const std::string& path) {
    std::string name = path.substr(path.find_last_of('/') + 1);  // npos + 1 == 0: no folder
    if (const size_t dot = name.find('.'); dot != std::string::npos) name.resize(dot);
    if (name == "r50k_base" || name == "p50k_base" || name == "p50k_edit") return "r50k";
    if (name == "cl100k_base") return "cl100k";
    if (name == "o200k_base") return "o200k";
    throw UsageError("cannot tell the split pattern from the file name '" + path +
                     "' (known: r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base); pass "
                     "--pattern r50k|cl100k|o200k");
}

// The text to tokenize (from TEXT, -f FILE or - for stdin) and, with --gpt2, the vocab.bpe path.
struct TokenizeInput {
    std::string text, vocab_bpe;
};

TokenizeInput input_from_flags(const Flags& flags) {
    // --gpt2 takes two files: the flag's value is encoder.json, the next argument vocab.bpe.
    std::vector<std::string> positional = flags.positional();
    TokenizeInput input;
    if (flags.has("--gpt2")) {
        if (positional.empty()) throw UsageError("--gpt2 needs two files: --gpt2 encoder.json vocab.bpe");
        input.vocab_bpe = positional.front();
        positional.erase(positional.begin());
    }
    if (flags.has("-f")) {
        if (!positional.empty())
            throw UsageError("give the text one way: -f FILE or TEXT, not both (got -f and '" + positional[0] + "')");
        const std::string path = flags.get("-f", "");
        std::ifstream in(path, std::ios::binary);
        if (!in) glass::fail("cannot read the text file '", path, "': ", std::strerror(errno));
        input.text = read_all(in, "'" + path + "'");
    } else {
        if (positional.size() != 1)
            throw UsageError("glass tokenize takes exactly one TEXT argument (got " +
                             std::to_string(positional.size()) +
                             "); use -- before text starting with '-', -f FILE for a file, - for stdin");
        input.text = positional[0] == "-" ? read_all(std::cin, "stdin") : positional[0];
    }
    return input;
}

// --hf: Hugging Face's encode with add_special_tokens=False, BOS/EOS added only when asked.
std::vector<int> encode_hf(const glass::Tokenizer& tok, const Flags& flags, const std::string& text, bool bos, bool eos) {
    if (bos && tok.bos_id() < 0) glass::fail("tokenizer.json '", flags.get("--hf", ""), "' names no BOS token");
    if (eos && tok.eos_id() < 0) glass::fail("tokenizer.json '", flags.get("--hf", ""), "' names no EOS token");
    std::vector<int> ids;
    if (bos) ids.push_back(tok.bos_id());
    const std::vector<int> body = tok.encode_with_specials(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (eos) ids.push_back(tok.eos_id());
    return ids;
}

// The tokenizer the flags name (-t, --tiktoken, --gpt2, --gguf, --hf; the default llama2.c one).
std::unique_ptr<glass::Tokenizer> tokenizer_from_vocab_flags(const Flags& flags, const std::string& vocab_bpe) {
    if (flags.has("--tiktoken")) {
        const std::string file = flags.get("--tiktoken", "");
        const std::string pattern = flags.has("--pattern") ? flags.get("--pattern", "") : pattern_from_file_name(file);
        if (pattern != "r50k" && pattern != "cl100k" && pattern != "o200k")
            throw UsageError("--pattern must be r50k, cl100k or o200k (got '" + pattern + "')");
        return std::make_unique<glass::ByteLevelBpe>(glass::load_tiktoken(file, pattern));
    }
    if (flags.has("--gpt2")) return std::make_unique<glass::ByteLevelBpe>(glass::load_gpt2(flags.get("--gpt2", ""), vocab_bpe));
    if (flags.has("--gguf")) return glass::load_gguf_tokenizer(flags.get("--gguf", ""));
    if (flags.has("--hf")) return glass::load_hf_tokenizer(flags.get("--hf", ""));
    return std::make_unique<glass::Llama2cTokenizer>(glass::Llama2cTokenizer::load(flags.get("-t", kDefaultTokenizer)));
}

// {"ids": [...]}, with "pieces" for a llama2.c vocabulary; else a table of index, id and piece.
void print_tokens(const Flags& flags, const glass::Tokenizer& tok, const std::vector<int>& ids) {
    const bool llama2c = !flags.has("--tiktoken") && !flags.has("--gpt2") && !flags.has("--gguf") && !flags.has("--hf");
    if (flags.has("--json") && llama2c) {
        nlohmann::json pieces = nlohmann::json::array();
        for (int id : ids) pieces.push_back(tok.piece(id));
        std::cout << dump({{"ids", ids}, {"pieces", pieces}}) << "\n";
        return;
    }
    if (flags.has("--json")) {
        std::cout << dump({{"ids", ids}}) << "\n";
        return;
    }
    std::printf("%zu tokens\n%6s %7s  %s\n", ids.size(), "index", "id", "piece");
    for (size_t i = 0; i < ids.size(); ++i)
        std::printf("%6zu %7d  %s\n", i, ids[i], quoted(tok.piece(ids[i])).c_str());
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
    Flags flags("tokenize", {{"-t", true}, {"--bos", false}, {"--eos", false}, {"--json", false},
                             {"--tiktoken", true}, {"--pattern", true}, {"--gpt2", true}, {"--hf", true},
                             {"--gguf", true}, {"-f", true}});
    flags.parse(argc, argv, 2);
    const int sources = flags.has("-t") + flags.has("--tiktoken") + flags.has("--gpt2") + flags.has("--hf") +
                        flags.has("--gguf");
    if (sources > 1) throw UsageError("give one of -t, --tiktoken, --gpt2, --hf, --gguf (got " + std::to_string(sources) + ")");
    if (flags.has("--pattern") && !flags.has("--tiktoken"))
        throw UsageError("--pattern goes with --tiktoken FILE");

    const TokenizeInput input = input_from_flags(flags);
    const bool bos = flags.has("--bos"), eos = flags.has("--eos");
    const std::unique_ptr<glass::Tokenizer> tok = tokenizer_from_vocab_flags(flags, input.vocab_bpe);
    const std::vector<int> ids = flags.has("--hf") ? encode_hf(*tok, flags, input.text, bos, eos)
                                                   : tok->encode(input.text, bos, eos);
    print_tokens(flags, *tok, ids);
    return 0;
}

}  // namespace cli
