// glass — the command-line front end.
//
//   glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]
//                  [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//                  [--stop STR]... [--json]
//   glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT
//   glass explain [-m MODEL] [-t TOKENIZER] -p PROMPT [-n N] [--json] [--html FILE]
//   glass bench -m FILE [--threads N] [--prompt-len P] [--gen N] [--weights W] [--json]
//   glass random-model --shape NAME -o FILE [--seed S]
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
        "                 [--stop STR]... [--json] [--roofline] [--device cpu|cuda]\n"
        "                 [--precision fp32|fp16|bf16|q8] [--threads N] [--cuda-graph]\n"
        "      -n STEPS counts positions including the prompt (as llama2.c's run.c); default 256.\n"
        "      Defaults: the shipped model and tokenizer, temperature 1.0, top-p 0.9 (run.c's),\n"
        "      seed from the clock. --temperature 0 is greedy. --roofline also measures read\n"
        "      bandwidth and prints the decode speed limit it implies (C7). --device cuda runs the\n"
        "      model on the GPU (built with CUDA only); --precision sets the weights' storage;\n"
        "      --cuda-graph records one decode step as a CUDA graph and replays it per token.\n"
        "      On the CPU, --threads or --precision selects the fast path (fast/fast_session.hpp)\n"
        "      instead of the plain reference; q8 (Q8_0 blocks) is CPU-only.\n"
        "  glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT\n"
        "  glass tokenize --tiktoken FILE --pattern r50k|cl100k|o200k [--json] [--] TEXT\n"
        "  glass tokenize --gpt2 encoder.json vocab.bpe [--json] [--] TEXT\n"
        "  glass tokenize --hf tokenizer.json [--json] [--] TEXT\n"
        "  glass tokenize --gguf FILE.gguf [--json] [--] TEXT   (llama.cpp vocabulary files)\n"
        "      Pieces and ids of TEXT (any bytes). Vocabulary = every entry of the file.\n"
        "      --tiktoken: special-token text is plain text; --hf: it is the special token.\n"
        "  glass explain [-m MODEL] [-t TOKENIZER] -p PROMPT [-n N] [--json] [--html FILE]\n"
        "                [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
        "      The journey of one request, stage by stage: pieces and ids, embedding rows, each\n"
        "      head's most-attended positions and the residual norms per layer, the top-5 next\n"
        "      tokens, the sampling decision, the KV cache bytes. -n N = decode steps after the\n"
        "      prefill (default 4). Greedy unless --temperature > 0 (then top-p 0.9, seed 42 by\n"
        "      default). --json adds the same data as one JSON object on the last line; --html\n"
        "      FILE writes a self-contained attention explorer page.\n"
        "  glass bench -m FILE [--threads N] [--prompt-len P] [--gen N] [--runs R]\n"
        "              [--weights fp32|fp16|bf16|q8] [--probes] [--json]\n"
        "      Prefill and decode tokens/s of the fast CPU path (median of R >= 5 runs);\n"
        "      --probes adds read-bandwidth and FMA-peak probes and the ratios to them.\n"
        "  glass random-model --shape stories15M|stories110M|tinyllama1b -o FILE [--seed S]\n"
        "      A llama2.c checkpoint of that shape with random weights (for benchmarks).\n";
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "generate") return cli::cmd_generate(argc, argv);
        if (command == "tokenize") return cli::cmd_tokenize(argc, argv);
        if (command == "explain") return cli::cmd_explain(argc, argv);
        if (command == "bench") return cli::cmd_bench(argc, argv);
        if (command == "random-model") return cli::cmd_random_model(argc, argv);
        if (command == "--help" || command == "-h" || command == "help") {
            print_usage();
            return 0;
        }
        throw cli::UsageError(command.empty() ? "no command given (generate, tokenize, explain, bench, random-model)"
                                         : "unknown command '" + command + "' (generate, tokenize, explain, bench, random-model)");
    } catch (const cli::UsageError& e) {
        std::fprintf(stderr, "glass: usage error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass: error: %s\n", e.what());
        return 1;
    }
}
