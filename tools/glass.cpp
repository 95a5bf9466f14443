// glass — the command-line front end.
//
//   glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]
//                  [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//                  [--stop STR]... [--json [--top-logprobs K]] [--roofline] [--device cpu|cuda] ...
//                  [--draft layers:N|ngram[:N]|MODEL [--draft-k K]]
//   glass chat [-m MODEL] [-t TOKENIZER] [--chat-template FILE] [--system TEXT] [--max-new-tokens N]
//              [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--json]
//   glass chat-template [-m MODEL] [--template FILE] --messages FILE.json [--tools FILE.json] ...
//   glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] SOURCE    SOURCE: [--] TEXT | -f FILE | -
//   glass tokenize --tiktoken FILE [--pattern r50k|cl100k|o200k] [--json] SOURCE
//                  (also --gpt2 encoder.json vocab.bpe, --hf tokenizer.json, --gguf FILE.gguf)
//   glass explain [-m MODEL] [-t TOKENIZER] -p PROMPT [-n N] [--layer L] [--head H] [--brief]
//                 [--json] [--html FILE] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//   glass bench -m FILE [--threads N] [--prompt-len P] [--gen N] [--runs R] [--weights W] [--probes] [--json]
//   glass serve [-m MODEL] [-t TOKENIZER] [--host H] [--port P] [--api-key KEY] [--threads N] ...
//   glass loadgen --url URL [--clients C] [--requests N] [--stream] [--json] ...
//   glass random-model --shape NAME -o FILE [--seed S]
//   glass export-gguf [-m MODEL] [--type f32|f16|q8_0|q4_0] -o FILE.gguf
//   glass quantize -m MODEL.gguf --type q4_k_m|q5_k_m|q6_k|q8_0|q4_0|... -o OUT.gguf
//   glass --help | glass COMMAND --help | glass --version
//
// Every command's usage text lives in the table below; `glass COMMAND --help` (or -h) prints its
// entry, `glass --help` and a bare `glass` print them all. Errors go to stderr as one line naming
// the problem and the offending value; exit status 1 for bad input, 2 for bad usage.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli.hpp"

namespace {

struct Command {
    const char* name;
    int (*run)(int argc, char** argv);
    const char* usage;  // the lines under "usage:", indented by two spaces
};

const Command kCommands[] = {
    {"generate", cli::cmd_generate,
     "  glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]\n"
     "                 [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
     "                 [--stop STR]... [--json [--top-logprobs K]] [--roofline] [--device cpu|cuda]\n"
     "                 [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored] [--threads N] [--cuda-graph]\n"
     "                 [--kv fp32|int8] [--activations fp32|int8] [--cuda-attention standard|flash]\n"
     "                 [--draft layers:N|ngram[:N]|MODEL [--draft-k K]] [--context N] [--tp N] [--pp N]\n"
     "                 [--rank-memory BYTES]\n"
     "      -m: a llama2.c checkpoint, a .gguf file or a Hugging Face folder (glass inspect MODEL\n"
     "      says what is in it); a GGUF or a folder brings its own tokenizer (-t overrides it).\n"
     "      --context N: the context window (16 to the model's own; default the model's, at\n"
     "      most 4096: the KV cache is sized by it). The same in chat, explain, bench, serve.\n"
     "      The fast path keeps a file's weights in their stored types (Q4_0 -> q4, BF16 -> bf16;\n"
     "      a Q4_K_M file's Q4_K and Q6_K matrices each in its own: `stored`) unless --precision\n"
     "      asks for another.\n"
     "      -n STEPS counts positions including the prompt (as llama2.c's run.c); default 256.\n"
     "      Defaults: the shipped model and tokenizer, temperature 1.0, top-p 0.9 (run.c's),\n"
     "      seed from the clock. --temperature 0 is greedy. --roofline also measures read\n"
     "      bandwidth and prints the decode speed limit it implies (C7) for the weights plus\n"
     "      the K/V rows each step reads (--json: a \"roofline\" object). --device cuda runs the\n"
     "      model on the GPU (built with CUDA only); --precision sets the weights' storage;\n"
     "      --cuda-graph records one decode step as a CUDA graph and replays it per token;\n"
     "      --cuda-attention flash: FlashAttention kernels for prefill and long-cache decode.\n"
     "      On the CPU, --threads or --precision selects the fast path (fast/fast_session.hpp)\n"
     "      instead of the plain reference; q8 (Q8_0 blocks) is CPU-only. --kv int8 keeps the\n"
     "      KV cache in int8 (CPU and CUDA). --activations int8 (integer weights: q8, q4, the\n"
     "      k-quants) rounds decode's inputs to int8 blocks too and multiplies integers (VNNI\n"
     "      where the CPU has it). --top-logprobs K (0..20) adds to the --json record each\n"
     "      step's log-probability of the chosen token and of the K most likely ones (the\n"
     "      model's own, temperature 1, before truncation).\n"
     "      --draft: speculative decoding (C15), on every backend: a draft proposes K tokens\n"
     "      (default 4, at most 16) and the model checks them in one pass; greedy output is\n"
     "      unchanged, sampled output keeps its distribution. The draft is the model's first N\n"
     "      layers (layers:N), prompt lookup of the last N tokens (ngram, ngram:N; N = 3), or a\n"
     "      smaller llama2.c checkpoint with the same vocabulary. --json adds draft_proposed,\n"
     "      draft_accepted, acceptance_rate and target_passes.\n"
     "      --tp N: tensor parallelism (dist/tensor_parallel.hpp) on the CPU: every layer's\n"
     "      heads and MLP rows split over N ranks, two all-reduces per layer; the reference's\n"
     "      layers, or with --threads/--precision the fast path's on each rank (--threads per\n"
     "      rank). Started by mpirun with N processes, each rank is a process (Open MPI; only\n"
     "      rank 0 prints); without mpirun the ranks are N threads of this process.\n"
     "      --pp N: pipeline parallelism (dist/pipeline_parallel.hpp): the layers dealt out to\n"
     "      N ranks in order, the residual stream sent from stage to stage; launched the same way.\n"
     "      Both: a grid of tp × pp ranks, each stage a tensor-parallel group.\n"
     "      --rank-memory BYTES: what one rank may hold (its weights and its KV cache for the\n"
     "      whole context); a rank over it is refused, naming the bytes (one rank: tp = pp = 1).\n"},
    {"chat", cli::cmd_chat,
     "  glass chat [-m MODEL] [-t TOKENIZER] [--chat-template FILE] [--set NAME=JSON]...\n"
     "             [--system TEXT] [--max-new-tokens N] [--temperature T] [--top-p P]\n"
     "             [--top-k K] [--min-p P] [--seed S] [--json] [--context N]\n"
     "      A conversation read from stdin, one user turn per line (pipe a file, or type; an\n"
     "      empty line is skipped, end of input ends the chat). Every turn renders the whole\n"
     "      conversation as one prompt. A model with a chat template (GGUF, tokenizer_config.json;\n"
     "      --chat-template FILE overrides; --set passes variables such as enable_thinking=false)\n"
     "      gets its own layout (the chat-template command prints it); the reply ends at the\n"
     "      model's end-of-turn ids; the KV cache of the earlier turns is kept, so only the new tokens\n"
     "      are prefilled (\"cached_tokens\" in --json). A model without one (llama2.c) gets plain\n"
     "      text, prefilled from scratch every turn, so the prompt and its TTFT grow (C16):\n"
     "          SYSTEM\\n                     (only with --system)\n"
     "          User: TURN 1\\n\n"
     "          Assistant: REPLY 1\\n\n"
     "          User: TURN 2\\n\n"
     "          Assistant:                   <- the model continues from here\n"
     "      and a reply ends at a newline or BOS/EOS. Either way at most --max-new-tokens\n"
     "      (default 64). The shipped stories260K is a story model, not a chat model: it answers\n"
     "      with stories. Replies stream to stdout, one line per turn; each turn's prompt tokens\n"
     "      and TTFT go to stderr, or with --json as one JSON object per turn on stdout after the\n"
     "      reply's line. Sampling as generate (temperature 1, top-p 0.9, --temperature 0 is\n"
     "      greedy); turn k samples with seed S + k - 1.\n"},
    {"tokenize", cli::cmd_tokenize,
     "  glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] SOURCE\n"
     "  glass tokenize --tiktoken FILE [--pattern r50k|cl100k|o200k] [--json] SOURCE\n"
     "  glass tokenize --gpt2 encoder.json vocab.bpe [--json] SOURCE\n"
     "  glass tokenize --hf tokenizer.json [--json] SOURCE\n"
     "  glass tokenize --gguf FILE.gguf [--json] SOURCE     (llama.cpp vocabularies)\n"
     "      Pieces and ids of a text. SOURCE is [--] TEXT, or -f FILE (its bytes), or - (the\n"
     "      bytes of stdin); a file or stdin carries any bytes, NUL included (an argument\n"
     "      cannot). Default tokenizer: the shipped tok512. Vocabulary = every entry of the\n"
     "      file. --tiktoken takes the split pattern from the file name (r50k_base, p50k_base,\n"
     "      p50k_edit: r50k; cl100k_base: cl100k; o200k_base: o200k); --pattern overrides it,\n"
     "      and is needed for any other name. --tiktoken: special-token text is plain text;\n"
     "      --hf: it is the special token.\n"},
    {"explain", cli::cmd_explain,
     "  glass explain [-m MODEL] [-t TOKENIZER] -p PROMPT [-n N] [--layer L] [--head H]\n"
     "                [--brief] [--json] [--html FILE] [--chat [--system TEXT] [--chat-template FILE]]\n"
     "                [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
     "      --chat: PROMPT is a user message, laid out by the model's chat template (or FILE):\n"
     "      the rendered text and its tokens, special tokens and all, are what is explained.\n"
     "      The journey of one request, labelled with the README's stage numbers:\n"
     "      [1 tokenization] pieces and ids; [2 embedding] embedding rows; [6 prefill] and\n"
     "      [8 decode step N]: each layer's residual norms and each head's most-attended\n"
     "      positions (3 position, 4 attention and 5 MLP run inside every layer), the KV cache\n"
     "      bytes; [7 sampling] the top-5 next tokens and the draw. -n N = decode steps after the\n"
     "      prefill (default 4). Greedy unless --temperature > 0 (then top-p 0.9, seed 42 by\n"
     "      default); when sampling, the top-5 shows the model's probability (T = 1) beside the\n"
     "      distribution the draw used (after temperature and truncation, renormalized), and the\n"
     "      coin lands in the latter. --layer L / --head H print only that layer / head; --brief\n"
     "      drops the embedding rows and per-layer lines (pieces, top-5, decision, cache bytes).\n"
     "      --json adds all the data as one JSON object on the last line (the filters do not\n"
     "      apply to it); --html FILE writes a self-contained attention explorer page.\n"},
    {"bench", cli::cmd_bench,
     "  glass bench -m FILE [--threads N] [--prompt-len P] [--gen N] [--runs R]\n"
     "              [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored] [--kv fp32|int8]\n"
     "              [--activations fp32|int8]\n"
     "              [--probes] [--json]\n"
     "      Prefill and decode tokens/s of the fast CPU path (median of R >= 5 runs);\n"
     "      --probes adds read-bandwidth and FMA-peak probes and the ratios to them, and a\n"
     "      read of the model's matrices in decode's own parallel regions; and each run against\n"
     "      a probe pass taken beside it (the *_paired ratios, steadier on a shared machine).\n"
     "      --activations int8 (q8, q4, the k-quants): decode multiplies int8 inputs by the\n"
     "      integer weights.\n"},
    {"serve-bench", cli::cmd_serve_bench,
     "  glass serve-bench (-m FILE | --shape NAME [--context N]) [--backend fast|reference|cuda]\n"
     "                    [--threads N] [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored]\n"
     "                    [--kv fp32|int8]\n"
     "                    [--requests N] [--rate R]\n"
     "                    [--prompt-len A:B] [--gen A:B] [--shared-prefix T] [--block-size B]\n"
     "                    [--pool-blocks N] [--budget T] [--max-running N] [--no-prefix-cache]\n"
     "                    [--no-chunked-prefill] [--seed S] [--batch-sweep [--unpaired]] [--chat-turns N]\n"
     "                    [--stall] [--long-prompt N] [--decoders N] [--json]\n"
     "                    [--draft layers:N|ngram[:N]|MODEL [--draft-k K]]\n"
     "      The serving engine under load: N requests with Poisson arrivals (rate R per second),\n"
     "      random prompts and fixed lengths: throughput, TTFT/TPOT p50/p99, largest inter-token\n"
     "      gap, KV memory held vs used (C17), prefix-cache hits. --batch-sweep: decode tokens/s\n"
     "      at batch 1..64 and the FMA peak (C20; on the fast backend also each batch's roofline\n"
     "      from the read and FMA probes, and batch B / batch 1 from steps taken in turn on a\n"
     "      second copy of the backend, which --unpaired leaves out where memory is short);\n"
     "      --chat-turns N: TTFT per turn of a chat that\n"
     "      re-sends its history, prefix cache off and on (C16); --stall: the largest gap of\n"
     "      --decoders N (8) while a --long-prompt N (2000) token prompt arrives, chunked prefill\n"
     "      off and on (C18). --shape builds a random-weight model of that shape in memory\n"
     "      (--context sets its window). --kv int8: the KV pool in int8 with a scale per KV head\n"
     "      and position (about a quarter of the bytes; C17's figures count them). --draft: speculative decoding in the engine (C15), each\n"
     "      request with its own draft; the load runs again without it, and a C15 line compares\n"
     "      steps, tokens/s and TPOT (--json: draft_proposed, draft_accepted, acceptance_rate,\n"
     "      steps_without_draft, throughput_tokens_per_s_without_draft). --json adds one JSON\n"
     "      object as the last line. The engine: --block-size B (16 positions a KV block),\n"
     "      --pool-blocks N (0: four context windows' worth), --budget T (256 tokens a step),\n"
     "      --max-running N (64 requests in a batch); the model, backend and engine flags are\n"
     "      glass serve's too.\n"},
    {"serve", cli::cmd_serve,
     "  glass serve [-m MODEL | --shape NAME [--context N]] [-t TOKENIZER] [--host H] [--port P]\n"
     "              [--api-key KEY]\n"
     "              [--backend fast|reference|cuda] [--threads N]\n"
     "              [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored]\n"
     "              [--kv fp32|int8] [--max-queue N] [--block-size B] [--pool-blocks N] [--budget T]\n"
     "              [--max-running N] [--no-prefix-cache] [--no-chunked-prefill] [--shutdown-timeout S]\n"
     "              [--draft layers:N|ngram[:N]|MODEL [--draft-k K]] [--chat-template FILE]\n"
     "      An OpenAI-compatible HTTP server on the batching engine: POST /v1/completions and\n"
     "      /v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models,\n"
     "      GET /health. Concurrent requests share the engine's steps. Defaults: the shipped\n"
     "      model, host 127.0.0.1, port 8000 (0 = any free port; the first line on stdout is\n"
     "      \"listening on http://HOST:PORT\"), the fast backend on every core (--backend cuda: the\n"
     "      GPU, at --precision; reference: the plain CPU reference). --api-key: the\n"
     "      /v1 routes want \"Authorization: Bearer KEY\". --max-queue N (64): requests in\n"
     "      flight at most; the next gets 503. The model, backend and engine flags are\n"
     "      serve-bench's: --block-size B (16 positions a KV block), --pool-blocks N (0: four\n"
     "      context windows' worth), --budget T (256 tokens a step), --max-running N (64\n"
     "      requests in a batch), --no-prefix-cache, --no-chunked-prefill, --kv.\n"
     "      SIGINT/SIGTERM: new requests get 503, those in flight get --shutdown-timeout S\n"
     "      seconds (10) to finish, the rest are cancelled; exit 0. One log line per request\n"
     "      on stderr. Chats go through the model's own chat template (GGUF, tokenizer_config.json;\n"
     "      --chat-template FILE overrides; \"tools\" and \"chat_template_kwargs\" are passed to\n"
     "      it); a model without one uses a plain layout (include/glass/serve/openai_chat.hpp). --shape NAME\n"
     "      serves random weights of that shape (as serve-bench; for glass loadgen); its\n"
     "      vocabulary is not tok512's, so token i reads \" i\": send prompts as token ids.\n"
     "      --draft: speculative decoding inside the engine, as generate's (drafted tokens count\n"
     "      against --budget).\n"
     "      --tp N, --pp N, --micro-batches M, --rank-memory BYTES: the backend split over a grid\n"
     "      of ranks (as generate's; mpirun processes or threads), rank 0 serving: the reference\n"
     "      by default, --backend fast for the fast path on each rank (--threads per rank; by\n"
     "      default the cores shared out among the ranks), --backend cuda for each rank's part\n"
     "      on its GPU (NCCL all-reduces between GPUs).\n"},
    {"loadgen", cli::cmd_loadgen,
     "  glass loadgen --url URL [--clients C] [--requests N] [--stream] [--json]\n"
     "                [--prompt-len P] [--max-tokens M] [--temperature T] [--seed S]\n"
     "                [--api-key KEY] [--chat] [--timeout SEC]\n"
     "      Load on a server on this machine (the URL's host must be 127.0.0.1, localhost or\n"
     "      [::1]): C clients (1), each sending its next request when the last is answered,\n"
     "      N requests (8) in all to /v1/completions: P-token prompts (32) as token ids, seeded\n"
     "      (S, 1), greedy (T 0), \"ignore_eos\", M new tokens (32). --chat sends P-word user\n"
     "      messages to /v1/chat/completions instead. Reports ok and errors (by status), wall\n"
     "      time, generated tokens/s, requests/s, latency p50/p99 and, with --stream, TTFT and\n"
     "      TPOT p50/p99. --json adds one JSON object as the last line (fields: the top of\n"
     "      tools/cmd_loadgen.cpp). Exit status 1 when any request failed.\n"},
    {"chat-template", cli::cmd_chat_template,
     "  glass chat-template [-m MODEL] [--template FILE] --messages FILE.json [--tools FILE.json]\n"
     "                      [--generation-prompt | --no-generation-prompt] [--bos-token S]\n"
     "                      [--eos-token S] [--set NAME=JSON]... [--now ISO-8601] [--ids]\n"
     "      Prints the conversation exactly as the model reads it, nothing added: the model's own\n"
     "      chat template (GGUF tokenizer.chat_template, a folder's chat_template.jinja or\n"
     "      tokenizer_config.json) or --template FILE (with -m: the model's BOS/EOS texts),\n"
     "      rendered as Hugging Face renders it.\n"
     "      --messages -: standard input. Variables: messages, tools (only with --tools),\n"
     "      add_generation_prompt (default on), bos_token / eos_token (the model's; the flags\n"
     "      override), each --set NAME=JSON (enable_thinking=false), strftime_now at --now\n"
     "      (default the clock, UTC). --ids (with -m): the prompt's token ids instead, special\n"
     "      tokens recognised, no BOS added (the template writes it). Exit 1 when the template\n"
     "      refuses the conversation (raise_exception; its message on stderr).\n"},
    {"inspect", cli::cmd_inspect,
     "  glass inspect MODEL [--json]\n"
     "      What a model holds, from its headers (a .gguf, a Hugging Face folder or a llama2.c\n"
     "      .bin): the architecture, every config value and where it came from, the tensors (name,\n"
     "      type, shape as [rows, cols], bytes), bytes per weight, the embedding table's size (C2),\n"
     "      KV bytes per token, and the family deltas from Llama 2 the model uses.\n"},
    {"random-model", cli::cmd_random_model,
     "  glass random-model --shape stories15M|stories110M|tinyllama1b -o FILE [--seed S]\n"
     "      A llama2.c checkpoint of that shape with random weights (for benchmarks).\n"},
    {"export-gguf", cli::cmd_export_gguf,
     "  glass export-gguf [-m MODEL] [--type f32|f16|q8_0|q4_0] -o FILE.gguf\n"
     "      The model as a GGUF file llama.cpp loads (architecture \"llama\", a placeholder\n"
     "      vocabulary: token ids go in and out unchanged); q8_0 / q4_0 hold glass's own\n"
     "      integers and scales (rows must be a multiple of 32 long). Default type f32.\n"},
    {"quantize", cli::cmd_quantize,
     "  glass quantize -m MODEL.gguf --type TYPE -o OUT.gguf [--json]\n"
     "      A GGUF model rewritten in another file type, as llama.cpp's llama-quantize does:\n"
     "      TYPE q4_k_m, q5_k_m, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, f16 or f32. Q4_K_M / Q5_K_M\n"
     "      mix types as llama-quantize chooses them (output and some attn_v / ffn_down in Q6_K);\n"
     "      metadata and 1-D tensors are copied. Start from an F32, F16 or BF16 file: quantizing\n"
     "      a quantized one stacks two roundings. Prints the tensors per type and the sizes.\n"},
};

std::string command_names() {
    std::string names;
    for (const Command& c : kCommands) names += (names.empty() ? "" : ", ") + std::string(c.name);
    return names;
}

void print_usage() {
    std::cout << "glass " GLASS_VERSION " — an LLM inference engine you can see through\n\nusage:\n";
    for (const Command& c : kCommands) std::cout << c.usage;
    std::cout << "  glass COMMAND --help    that command's usage (also -h)\n"
                 "  glass --version         the version\n";
}

}  // namespace

std::string cli::usage_of(const std::string& command) {
    for (const Command& c : kCommands)
        if (command == c.name) return std::string("usage:\n") + c.usage;
    return "";
}

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command.empty() || command == "--help" || command == "-h" || command == "help") {
            if (command == "help" && argc > 2) {  // glass help COMMAND
                const std::string usage = cli::usage_of(argv[2]);
                if (usage.empty()) throw cli::UsageError("unknown command '" + std::string(argv[2]) + "' (" + command_names() + ")");
                std::cout << usage;
                return 0;
            }
            print_usage();
            return 0;
        }
        if (command == "--version" || command == "-V") {
            std::cout << "glass " GLASS_VERSION "\n";
            return 0;
        }
        for (const Command& c : kCommands)
            if (command == c.name) return c.run(argc, argv);
        throw cli::UsageError("unknown command '" + command + "' (" + command_names() + "; see glass --help)");
    } catch (const cli::HelpRequested& h) {
        std::cout << cli::usage_of(h.command);
        return 0;
    } catch (const cli::UsageError& e) {
        std::fprintf(stderr, "glass: usage error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass: error: %s\n", e.what());
        return 1;
    }
}
