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

    // --gpt2 takes two files: the flag's value is encoder.json, the next argument vocab.bpe.
    std::vector<std::string> positional = flags.positional();
    std::string vocab_bpe;
    if (flags.has("--gpt2")) {
        if (positional.empty()) throw UsageError("--gpt2 needs two files: --gpt2 encoder.json vocab.bpe");
        vocab_bpe = positional.front();
        positional.erase(positional.begin());
    }
    std::string text;
    if (flags.has("-f")) {
        if (!positional.empty())
            throw UsageError("give the text one way: -f FILE or TEXT, not both (got -f and '" + positional[0] + "')");
        const std::string path = flags.get("-f", "");
        std::ifstream in(path, std::ios::binary);
        if (!in) glass::fail("cannot read the text file '", path, "': ", std::strerror(errno));
        text = read_all(in, "'" + path + "'");
    } else {
        if (positional.size() != 1)
            throw UsageError("glass tokenize takes exactly one TEXT argument (got " +
                             std::to_string(positional.size()) +
                             "); use -- before text starting with '-', -f FILE for a file, - for stdin");
        text = positional[0] == "-" ? read_all(std::cin, "stdin") : positional[0];
    }
    const bool bos = flags.has("--bos"), eos = flags.has("--eos");

    std::unique_ptr<glass::Tokenizer> tok;
    std::vector<int> ids;
    if (flags.has("--tiktoken")) {
        const std::string file = flags.get("--tiktoken", "");
        const std::string pattern = flags.has("--pattern") ? flags.get("--pattern", "") : pattern_from_file_name(file);
        if (pattern != "r50k" && pattern != "cl100k" && pattern != "o200k")
            throw UsageError("--pattern must be r50k, cl100k or o200k (got '" + pattern + "')");
        tok = std::make_unique<glass::ByteLevelBpe>(glass::load_tiktoken(file, pattern));
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
