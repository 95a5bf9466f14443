// glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT — journey step 1 on the command line.
#include <iostream>

#include "cli.hpp"
#include "glass/tokenizer.hpp"

namespace cli {

int cmd_tokenize(int argc, char** argv) {
    Flags flags("tokenize", {{"-t", true}, {"--bos", false}, {"--eos", false}, {"--json", false}});
    flags.parse(argc, argv, 2);
    if (flags.positional().size() != 1)
        throw UsageError("glass tokenize takes exactly one TEXT argument (got " +
                         std::to_string(flags.positional().size()) + "); use -- before text starting with '-'");
    const auto tok = glass::Llama2cTokenizer::load(flags.get("-t", kDefaultTokenizer));
    const std::vector<int> ids = tok.encode(flags.positional()[0], flags.has("--bos"), flags.has("--eos"));
    if (flags.has("--json")) {
        nlohmann::json pieces = nlohmann::json::array();
        for (int id : ids) pieces.push_back(tok.piece(id));
        std::cout << dump({{"ids", ids}, {"pieces", pieces}}) << "\n";
        return 0;
    }
    std::printf("%zu tokens\n%6s %7s  %s\n", ids.size(), "index", "id", "piece");
    for (size_t i = 0; i < ids.size(); ++i)
        std::printf("%6zu %7d  %s\n", i, ids[i], quoted(tok.piece(ids[i])).c_str());
    return 0;
}

}  // namespace cli
