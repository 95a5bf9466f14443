// glass chat — a conversation, one user turn per line of stdin, the whole history re-rendered each turn.
//
//   glass chat [-m MODEL] [-t TOKENIZER] [--chat-template FILE] [--set NAME=JSON]... [--system TEXT]
//              [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//              [--json] [--context N]
//
// Every turn renders the whole conversation as one prompt. Two layouts:
//
// The model's own chat template (a GGUF's tokenizer.chat_template, a folder's tokenizer_config.json,
// or --chat-template FILE; glass/chat/): the messages [{"role": "system", ...}, {"role": "user",
// ...}, {"role": "assistant", ...}, ...] rendered as Hugging Face renders them, with the
// generation prompt, and tokenized with special tokens recognised and no BOS added (the template
// writes it). --set NAME=JSON passes more variables (enable_thinking=false). A reply ends at the
// model's end-of-generation ids (<|im_end|>, <|eot_id|>, <end_of_turn>, EOS) or after
// --max-new-tokens. The session keeps its KV cache between turns: the next prompt starts with the
// tokens already cached (the earlier turns, as the template renders them again), so only the new
// part is prefilled, as prefix caching does in the server: "cached_tokens" per turn.
//
// Models without a template (llama2.c checkpoints; the shipped stories260K is a story model,
// trained on no chat format): plain text, easy to read and cheap in tokens, and prefilled from
// scratch every turn, as a server without prefix caching would, so the prompt and its TTFT grow
// with the history turn by turn: figure C16.
//
//   SYSTEM\n                   only with --system
//   User: TURN 1\n
//   Assistant: REPLY 1\n       the reply as generated (its leading space comes from the model)
//   User: TURN 2\n
//   Assistant:                 the prompt ends here; the model continues
//
// One BOS starts that prompt (glass::generate adds it). A reply ends at its first newline (a stop
// string: one reply, one line), at BOS/EOS, or after --max-new-tokens (default 64).
//
// Turn k samples with seed S + k - 1, so a seeded conversation repeats exactly. Output: each reply
// streams to stdout and ends with a newline. Per turn, one line on stderr with the prompt's token
// count, TTFT and decode speed; with --json instead one JSON object per turn on stdout, right after
// the reply's line.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>

#include "chat_setup.hpp"
#include "cli.hpp"
#include "glass/glass.hpp"

namespace cli {

namespace {

// The conversation so far, and the prompt it makes for the next turn in either layout.
class Conversation {
public:
    Conversation(glass::serve::openai::ChatFormat format, nlohmann::ordered_json variables, const std::string& system)
        : format_(std::move(format)), variables_(std::move(variables)) {
        if (system.empty()) return;
        if (has_template()) messages_.push_back({{"role", "system"}, {"content", system}});
        else plain_ = system + "\n";
    }
    bool has_template() const { return format_.chat_template != nullptr; }

    // The prompt with `user_turn` added: its text and ids (BOS first for the plain layout; the
    // template writes its own).
    std::pair<std::string, std::vector<int>> prompt_with(const std::string& user_turn, const glass::Tokenizer& tok) {
        if (!has_template()) {
            const std::string text = plain_ + "User: " + user_turn + "\nAssistant:";
            return {text, tok.encode(text, tok.adds_bos(), false)};
        }
        messages_.push_back({{"role", "user"}, {"content", user_turn}});
        const std::string text = format_.chat_template->render({.messages = messages_,
                                                                 .tools = std::nullopt,
                                                                 .add_generation_prompt = true,
                                                                 .bos_token = format_.bos_token,
                                                                 .eos_token = format_.eos_token,
                                                                 .extra = variables_,
                                                                 .now_unix_seconds = std::nullopt});
        return {text, glass::chat::chat_prompt_ids(tok, text)};
    }
    void add_reply(const std::string& prompt, const std::string& reply) {
        if (has_template()) messages_.push_back({{"role", "assistant"}, {"content", reply}});
        else plain_ = prompt + reply + "\n";
    }

private:
    glass::serve::openai::ChatFormat format_;
    nlohmann::ordered_json variables_;
    nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
    std::string plain_;  // the plain layout's history
};

// How many leading ids of `prompt` the session already holds (`cached`), leaving at least the
// prompt's last position to compute.
int reusable_prefix(const std::vector<int>& cached, const std::vector<int>& prompt) {
    const size_t limit = std::min(cached.size(), prompt.size() - 1);
    size_t n = 0;
    while (n < limit && cached[n] == prompt[n]) ++n;
    return static_cast<int>(n);
}

// One turn's numbers: a JSON object on stdout (--json), else one line on stderr.
void report_turn(int turn, const glass::GenerateResult& r, const glass::GenerateOptions& options, bool json) {
    const glass::GenerationMetrics& m = r.metrics;
    const char* stop = r.stop_reason == glass::StopReason::stop_string ? "newline" : glass::to_string(r.stop_reason);
    if (json) {
        std::cout << dump({{"turn", turn},
                           {"prompt_tokens", m.prompt_tokens},
                           {"cached_tokens", options.cached_prompt_tokens},
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
        return;
    }
    const std::string cached = options.cached_prompt_tokens > 0
                                   ? std::to_string(options.cached_prompt_tokens) + " of them cached from the last turn"
                                   : "the whole history, prefilled again";
    std::fprintf(stderr, "[turn %d: %d prompt tokens (%s), TTFT %.2f ms | %d generated, TPOT %.3f ms, stop: %s]\n", turn,
                 m.prompt_tokens, cached.c_str(), m.ttft_ms, m.generated_tokens, m.tpot_ms, stop);
}

// The sampling and length of every turn; turn k samples with seed + k - 1.
struct ChatOptions {
    glass::GenerateOptions generate;
    std::uint64_t seed = 0;
    bool json = false;  // one JSON object per turn on stdout
};

ChatOptions chat_options_from_flags(const Flags& flags) {
    ChatOptions o;
    glass::GenerateOptions& g = o.generate;
    g.sampling = sampling_from_flags(flags);
    o.seed = seed_from_flags(flags);
    g.max_new_tokens = flags.number<int>("--max-new-tokens").value_or(64);
    if (g.max_new_tokens <= 0)
        throw UsageError("--max-new-tokens must be > 0, got " + std::to_string(g.max_new_tokens));
    o.json = flags.has("--json");
    return o;
}

// What stays from turn to turn: the conversation, the session and the ids whose K/V it holds.
struct ChatState {
    Conversation conversation;
    glass::CpuSession& session;
    const glass::Tokenizer& tok;
    int seq_len;
    std::vector<int> cached_ids;  // the template layout's reusable prefix
};

// One turn: the whole conversation rendered again with `line` (the template layout reuses the
// cached prefix), the reply streamed and added to it.
void chat_turn(int turn, const std::string& line, ChatState& chat, ChatOptions& o) {
    auto [prompt, prompt_ids] = chat.conversation.prompt_with(line, chat.tok);
    const int n_prompt = static_cast<int>(prompt_ids.size());
    if (n_prompt == 0) glass::fail("turn ", turn, ": the chat template rendered the conversation as no text at all");
    if (n_prompt > chat.seq_len)
        glass::fail("turn ", turn, ": the conversation is ", n_prompt, " tokens, more than the context window of ",
                    chat.seq_len, " (glass chat keeps the whole history; start a new chat)");
    o.generate.seed = o.seed + static_cast<std::uint64_t>(turn - 1);
    o.generate.cached_prompt_tokens = chat.conversation.has_template() ? reusable_prefix(chat.cached_ids, prompt_ids) : 0;
    const glass::GenerateResult r = glass::generate_from_ids(chat.session, chat.tok, prompt_ids, o.generate,
                                                             [](std::string_view text) { std::cout << text << std::flush; });
    std::cout << "\n" << std::flush;
    chat.conversation.add_reply(prompt, r.text);
    chat.cached_ids = r.prompt_ids;  // + every generated token but the last (sampled, never fed back)
    if (!r.generated_ids.empty())
        chat.cached_ids.insert(chat.cached_ids.end(), r.generated_ids.begin(), r.generated_ids.end() - 1);
    report_turn(turn, r, o.generate, o.json);
}

// One turn per non-empty line of stdin, until it ends.
void chat_loop(ChatState& chat, ChatOptions& o) {
    const bool interactive = ::isatty(STDIN_FILENO);
    if (interactive)
        std::fprintf(stderr, chat.conversation.has_template()
                                 ? "glass chat: one turn per line, Ctrl-D ends.\n"
                                 : "glass chat: one turn per line, Ctrl-D ends. This model has no chat "
                                   "template (the shipped one writes stories).\n");
    int turn = 0;
    for (std::string line;;) {
        if (interactive) std::fprintf(stderr, "> ");
        if (!std::getline(std::cin, line)) break;
        if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
        if (line.empty()) continue;
        chat_turn(++turn, line, chat, o);
    }
}

}  // namespace

int cmd_chat(int argc, char** argv) {
    Flags flags("chat", {{"-m", true}, {"-t", true}, {"--system", true}, {"--max-new-tokens", true},
                         {"--temperature", true}, {"--top-p", true}, {"--top-k", true}, {"--min-p", true},
                         {"--seed", true}, {"--json", false}, {"--context", true}, {"--chat-template", true},
                         {"--set", true}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty())
        throw UsageError("unexpected argument '" + flags.positional()[0] + "' (glass chat reads the turns from stdin)");
    ChatOptions options = chat_options_from_flags(flags);
    nlohmann::ordered_json variables = template_variables_from_flags(flags);

    // -m: a llama2.c checkpoint, a GGUF or a Hugging Face folder, with its own tokenizer (-t
    // overrides it) and its own chat template (--chat-template overrides it).
    const std::string model_path = flags.get("-m", kDefaultModel);
    glass::Model model = glass::load_model(model_path);
    context_from_flags(flags, model);
    const std::unique_ptr<glass::Tokenizer> tok_owned =
        glass::load_model_tokenizer(model_path, model, flags.get("-t", ""), kDefaultTokenizer);
    const glass::Tokenizer& tok = *tok_owned;
    Conversation conversation(chat_format_from_flags(flags, model_path, tok), std::move(variables), flags.get("--system", ""));
    if (!conversation.has_template() && flags.has("--set"))
        throw UsageError("--set gives a chat template variables; this model has none (give --chat-template FILE)");
    if (!conversation.has_template()) options.generate.stop_strings = {"\n"};  // the plain layout: one reply, one line
    glass::CpuSession session(model);

    ChatState chat{.conversation = std::move(conversation), .session = session, .tok = tok,
                   .seq_len = model.config.seq_len, .cached_ids = {}};
    chat_loop(chat, options);
    return 0;
}

}  // namespace cli
