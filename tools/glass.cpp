// glass — the command-line front end.
//
//   glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]
//                  [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//                  [--stop STR]... [--json]
//   glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT
//
// Errors go to stderr as one line naming the problem and the offending value; exit status 1 for
// bad input, 2 for bad usage.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli.hpp"

namespace {

void print_usage() {
    std::cout <<
        "glass — an LLM inference engine you can see through\n\n"
        "usage:\n"
        "  glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]\n"
        "                 [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
        "                 [--stop STR]... [--json] [--roofline]\n"
        "      -n STEPS counts positions including the prompt (as llama2.c's run.c); default 256.\n"
        "      Defaults: the shipped model and tokenizer, temperature 1.0, top-p 0.9 (run.c's),\n"
        "      seed from the clock. --temperature 0 is greedy. --roofline also measures read\n"
        "      bandwidth and prints the decode speed limit it implies (C7).\n"
        "  glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT\n"
        "      Pieces and ids of TEXT (any bytes). Vocabulary = every entry of the file.\n";
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "generate") return cli::cmd_generate(argc, argv);
        if (command == "tokenize") return cli::cmd_tokenize(argc, argv);
        if (command == "--help" || command == "-h" || command == "help") {
            print_usage();
            return 0;
        }
        throw cli::UsageError(command.empty() ? "no command given (generate, tokenize)"
                                         : "unknown command '" + command + "' (generate, tokenize)");
    } catch (const cli::UsageError& e) {
        std::fprintf(stderr, "glass: usage error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass: error: %s\n", e.what());
        return 1;
    }
}
