// glass — the command-line front end.
//
//   glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]
//                  [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
//                  [--stop STR]... [--json]
//   glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT
//
// Errors go to stderr as one line naming the problem and the offending value; exit status 1 for
// bad input, 2 for bad usage.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/glass.hpp"

namespace {

const std::string kDefaultModel = std::string(GLASS_MODELS_DIR) + "/stories260K.bin";
const std::string kDefaultTokenizer = std::string(GLASS_MODELS_DIR) + "/tok512.bin";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A tiny flag parser: every flag is declared with whether it takes a value; anything else is an
// error that names the flag.
class Flags {
public:
    Flags(std::string command, std::map<std::string, bool> takes_value)
        : command_(std::move(command)), takes_value_(std::move(takes_value)) {}

    void parse(int argc, char** argv, int first) {
        bool only_positional = false;
        for (int i = first; i < argc; ++i) {
            std::string arg = argv[i];
            if (only_positional || arg.empty() || arg[0] != '-' || arg == "-") {
                positional_.push_back(arg);
                continue;
            }
            if (arg == "--") {
                only_positional = true;
                continue;
            }
            auto it = takes_value_.find(arg);
            if (it == takes_value_.end())
                throw UsageError("unknown flag '" + arg + "' for glass " + command_ + " (see glass --help)");
            if (it->second) {
                if (i + 1 >= argc) throw UsageError("flag " + arg + " needs a value");
                values_[arg].push_back(argv[++i]);
            } else {
                values_[arg].push_back("");
            }
        }
    }

    bool has(const std::string& f) const { return values_.count(f) > 0; }
    std::string get(const std::string& f, const std::string& fallback) const {
        return has(f) ? values_.at(f).back() : fallback;
    }
    std::vector<std::string> all(const std::string& f) const {
        return has(f) ? values_.at(f) : std::vector<std::string>{};
    }
    const std::vector<std::string>& positional() const { return positional_; }

    template <typename T>
    std::optional<T> number(const std::string& f) const {
        if (!has(f)) return std::nullopt;
        const std::string& s = values_.at(f).back();
        T v{};
        const char* end = s.data() + s.size();
        auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (ec != std::errc() || ptr != end || s.empty())
            throw UsageError("invalid value '" + s + "' for " + f);
        return v;
    }

private:
    std::string command_;
    std::map<std::string, bool> takes_value_;
    std::map<std::string, std::vector<std::string>> values_;
    std::vector<std::string> positional_;
};

void print_usage() {
    std::cout <<
        "glass — an LLM inference engine you can see through\n\n"
        "usage:\n"
        "  glass generate [-m MODEL] [-t TOKENIZER] -p PROMPT [-n STEPS | --max-new-tokens N]\n"
        "                 [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
        "                 [--stop STR]... [--json]\n"
        "      -n STEPS counts positions including the prompt (as llama2.c's run.c); default 256.\n"
        "      Defaults: the shipped model and tokenizer, temperature 1.0, top-p 0.9 (run.c's),\n"
        "      seed from the clock. --temperature 0 is greedy.\n"
        "  glass tokenize [-t TOKENIZER] [--bos] [--eos] [--json] [--] TEXT\n"
        "      Pieces and ids of TEXT (any bytes). Vocabulary = every entry of the file.\n";
}

// A piece shown between quotes with non-printable bytes escaped.
std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
        else if (c < 0x20 || c == 0x7f) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); out += b; }
        else out += static_cast<char>(c);
    }
    return out + "\"";
}

nlohmann::json::string_t dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

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

int cmd_generate(int argc, char** argv) {
    Flags flags("generate", {{"-m", true}, {"-t", true}, {"-p", true}, {"-n", true},
                             {"--max-new-tokens", true}, {"--temperature", true}, {"--top-p", true},
                             {"--top-k", true}, {"--min-p", true}, {"--seed", true},
                             {"--stop", true}, {"--json", false}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty())
        throw UsageError("unexpected argument '" + flags.positional()[0] + "' (the prompt goes after -p)");
    if (!flags.has("-p")) throw UsageError("glass generate needs a prompt: -p PROMPT");
    if (flags.has("-n") && flags.has("--max-new-tokens"))
        throw UsageError("give -n STEPS or --max-new-tokens N, not both");

    glass::GenerateOptions options;
    options.sampling.temperature = flags.number<float>("--temperature").value_or(1.0f);
    options.sampling.top_p = flags.number<float>("--top-p").value_or(0.9f);
    options.sampling.top_k = flags.number<int>("--top-k").value_or(0);
    options.sampling.min_p = flags.number<float>("--min-p").value_or(0.0f);
    glass::validate(options.sampling);
    options.seed = flags.number<std::uint64_t>("--seed").value_or(
        static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
    options.stop_strings = flags.all("--stop");
    const auto steps = flags.number<int>("-n");
    const auto max_new = flags.number<int>("--max-new-tokens");
    if (steps && *steps <= 0) throw UsageError("-n (steps) must be > 0, got " + std::to_string(*steps));
    if (max_new && *max_new <= 0)
        throw UsageError("--max-new-tokens must be > 0, got " + std::to_string(*max_new));

    const glass::Model model = glass::load_llama2c_checkpoint(flags.get("-m", kDefaultModel));
    const std::string tok_path = flags.get("-t", kDefaultTokenizer);
    const auto tok = glass::Llama2cTokenizer::load(tok_path, model.config.vocab_size);
    const std::string prompt = flags.get("-p", "");
    const int n_prompt = static_cast<int>(tok.encode(prompt, true, false).size());
    options.max_new_tokens = max_new ? *max_new : glass::new_tokens_for_steps(steps.value_or(256), n_prompt);
    if (options.max_new_tokens == 0)
        std::fprintf(stderr, "glass: -n %d leaves no room to generate after a %d-token prompt\n",
                     steps.value_or(256), n_prompt);

    glass::CpuSession session(model);
    std::cout << glass::utf8::sanitize(prompt) << std::flush;
    const glass::GenerateResult r = glass::generate(session, tok, prompt, options, [](std::string_view text) {
        std::cout << text << std::flush;
    });
    std::cout << "\n";

    const glass::GenerationMetrics& m = r.metrics;
    std::fprintf(stderr,
                 "[%d prompt tokens, %d generated, stop: %s] TTFT %.2f ms | TPOT %.3f ms | "
                 "%.1f tokens/s decode | %.1f tokens/s end to end\n",
                 m.prompt_tokens, m.generated_tokens, glass::to_string(r.stop_reason), m.ttft_ms,
                 m.tpot_ms, m.decode_tokens_per_s, m.tokens_per_s);
    if (flags.has("--json")) {
        nlohmann::json j = {
            {"prompt", prompt},
            {"prompt_ids", r.prompt_ids},
            {"generated_ids", r.generated_ids},
            {"text", r.text},
            {"full_text", glass::utf8::sanitize(prompt) + r.text},
            {"stop_reason", glass::to_string(r.stop_reason)},
            {"seed", options.seed},
            {"temperature", options.sampling.temperature},
            {"top_p", options.sampling.top_p},
            {"top_k", options.sampling.top_k},
            {"min_p", options.sampling.min_p},
            {"prompt_tokens", m.prompt_tokens},
            {"generated_tokens", m.generated_tokens},
            {"ttft_ms", m.ttft_ms},
            {"tpot_ms", m.tpot_ms},
            {"tokens_per_s", m.tokens_per_s},
            {"decode_tokens_per_s", m.decode_tokens_per_s},
            {"prefill_tokens_per_s", m.prefill_tokens_per_s},
            {"kv_bytes_per_token", m.kv_bytes_per_token},
            {"weight_bytes_per_token", m.weight_bytes_per_token},
        };
        std::cout << dump(j) << "\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "generate") return cmd_generate(argc, argv);
        if (command == "tokenize") return cmd_tokenize(argc, argv);
        if (command == "--help" || command == "-h" || command == "help") {
            print_usage();
            return 0;
        }
        throw UsageError(command.empty() ? "no command given (generate, tokenize)"
                                         : "unknown command '" + command + "' (generate, tokenize)");
    } catch (const UsageError& e) {
        std::fprintf(stderr, "glass: usage error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass: error: %s\n", e.what());
        return 1;
    }
}
