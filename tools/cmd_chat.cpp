// glass chat — a conversation, one user turn per line of stdin, the whole history re-sent each turn.
//
//   glass chat [-m MODEL] [-t TOKENIZER] [--system TEXT] [--max-new-tokens N]
//              [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--json]
//
// Like llama2.c's run.c chat mode, with one difference that is the point here: run.c keeps its KV
// cache between turns, glass chat does not. Every turn renders the whole conversation as one
// prompt and runs glass::generate on it, which resets the session and prefills every token again.
// A server without prefix caching does exactly that, so the prompt (and the TTFT, the prefill's
// time) grows with the history turn by turn: figure C16. Prefix caching would keep the shared
// prefix's K/V and prefill only the new turn.
//
// The chat template is plain text (the shipped stories260K is a story model, not a chat model: it
// was never trained on any template, so none would make it answer questions; this one is easy to
// read and cheap in tokens):
//
//   SYSTEM\n                   only with --system
//   User: TURN 1\n
//   Assistant: REPLY 1\n       the reply as generated (its leading space comes from the model)
//   User: TURN 2\n
//   Assistant:                 the prompt ends here; the model continues
//
// One BOS starts the prompt (glass::generate adds it). A reply ends at its first newline (a stop
// string: one reply, one line), at BOS/EOS, or after --max-new-tokens (default 64). Turn k samples
// with seed S + k - 1, so a seeded conversation repeats exactly.
//
// Output: each reply streams to stdout and ends with a newline. Per turn, one line on stderr with
// the prompt's token count, TTFT and decode speed; with --json instead one JSON object per turn on
// stdout, right after the reply's line.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "cli.hpp"
#include "glass/glass.hpp"

namespace cli {

int cmd_chat(int argc, char** argv) {
    Flags flags("chat", {{"-m", true}, {"-t", true}, {"--system", true}, {"--max-new-tokens", true},
                         {"--temperature", true}, {"--top-p", true}, {"--top-k", true}, {"--min-p", true},
                         {"--seed", true}, {"--json", false}, {"--context", true}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty())
        throw UsageError("unexpected argument '" + flags.positional()[0] + "' (glass chat reads the turns from stdin)");

    glass::GenerateOptions options;
    options.sampling.temperature = flags.number<float>("--temperature").value_or(1.0f);
    options.sampling.top_p = flags.number<float>("--top-p").value_or(0.9f);
    options.sampling.top_k = flags.number<int>("--top-k").value_or(0);
    options.sampling.min_p = flags.number<float>("--min-p").value_or(0.0f);
    glass::validate(options.sampling);
    const std::uint64_t seed = flags.number<std::uint64_t>("--seed").value_or(
        static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
    options.max_new_tokens = flags.number<int>("--max-new-tokens").value_or(64);
    if (options.max_new_tokens <= 0)
        throw UsageError("--max-new-tokens must be > 0, got " + std::to_string(options.max_new_tokens));
    options.stop_strings = {"\n"};  // one reply, one line
    const bool json = flags.has("--json");

    // -m: a llama2.c checkpoint, a GGUF or a Hugging Face folder, with its own tokenizer (-t
    // overrides it). The template below stays plain text: a model's own chat template is the
    // chat-templates issue's.
    const std::string model_path = flags.get("-m", kDefaultModel);
    glass::Model model = glass::load_model(model_path);
    context_from_flags(flags, model);
    const std::unique_ptr<glass::Tokenizer> tok_owned =
        glass::load_model_tokenizer(model_path, model, flags.get("-t", ""), kDefaultTokenizer);
    const glass::Tokenizer& tok = *tok_owned;
    glass::CpuSession session(model);

    const bool interactive = ::isatty(STDIN_FILENO);
    if (interactive)
        std::fprintf(stderr, "glass chat: one turn per line, Ctrl-D ends. The shipped model writes stories; it "
                             "is not a chat model.\n");
    std::string history = flags.has("--system") ? flags.get("--system", "") + "\n" : "";
    int turn = 0;
    for (std::string line;;) {
        if (interactive) std::fprintf(stderr, "> ");
        if (!std::getline(std::cin, line)) break;
        if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
        if (line.empty()) continue;
        ++turn;

        // The whole conversation, rendered again and prefilled from scratch.
        const std::string prompt = history + "User: " + line + "\nAssistant:";
        const int n_prompt = static_cast<int>(tok.encode(prompt, tok.adds_bos(), false).size());
        if (n_prompt > model.config.seq_len)
            glass::fail("turn ", turn, ": the conversation is ", n_prompt, " tokens, more than the context window of ",
                        model.config.seq_len, " (glass chat keeps the whole history; start a new chat)");
        options.seed = seed + static_cast<std::uint64_t>(turn - 1);
        const glass::GenerateResult r = glass::generate(session, tok, prompt, options, [](std::string_view text) {
            std::cout << text << std::flush;
        });
        std::cout << "\n" << std::flush;
        history = prompt + r.text + "\n";

        const glass::GenerationMetrics& m = r.metrics;
        const char* stop = r.stop_reason == glass::StopReason::stop_string ? "newline" : glass::to_string(r.stop_reason);
        if (json) {
            std::cout << dump({{"turn", turn},
                               {"prompt_tokens", m.prompt_tokens},
                               {"prompt_ids", r.prompt_ids},
                               {"generated_ids", r.generated_ids},
                               {"reply", r.text},
                               {"stop_reason", stop},
                               {"seed", options.seed},
                               {"ttft_ms", m.ttft_ms},
                               {"tpot_ms", m.tpot_ms},
                               {"generated_tokens", m.generated_tokens},
                               {"prefill_tokens_per_s", m.prefill_tokens_per_s}})
                      << "\n" << std::flush;
        } else {
            std::fprintf(stderr,
                         "[turn %d: %d prompt tokens (the whole history, prefilled again), TTFT %.2f ms | "
                         "%d generated, TPOT %.3f ms, stop: %s]\n",
                         turn, m.prompt_tokens, m.ttft_ms, m.generated_tokens, m.tpot_ms, stop);
        }
    }
    return 0;
}

}  // namespace cli
