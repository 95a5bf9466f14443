// glass chat-template — a conversation rendered through a model's chat template, byte for byte.
//
//   glass chat-template [-m MODEL] [--template FILE] --messages FILE.json [--tools FILE.json]
//                       [--generation-prompt | --no-generation-prompt] [--bos-token S] [--eos-token S]
//                       [--set NAME=JSON]... [--now ISO-8601] [--ids]
//
// Prints exactly the text the model would read, nothing added (no newline at the end): the
// template the model carries (GGUF tokenizer.chat_template, a folder's chat_template.jinja or
// tokenizer_config.json) or --template FILE (with -m too: the model's BOS/EOS texts and
// tokenizer), rendered with Hugging Face's variables: messages,
// tools (undefined without --tools), add_generation_prompt (default on), bos_token / eos_token
// (the model's texts; --bos-token / --eos-token override), every --set NAME=JSON
// (enable_thinking=false, date_string="26 Jul 2024") and strftime_now at --now (default: the clock,
// UTC). --ids (with -m) prints the prompt's token ids instead, one JSON array: the text tokenized
// with special tokens recognised and no BOS added (the template writes it).
//
// Exit status: 0 rendered; 1 when the template refuses the conversation (raise_exception: its own
// message on stderr), cannot be parsed, or an input file is bad; 2 for usage errors.
#include <chrono>
#include <iostream>
#include <iterator>
#include <string>

#include "chat_setup.hpp"
#include "cli.hpp"
#include "glass/chat/chat_template.hpp"
#include "glass/chat/model_template.hpp"
#include "glass/glass.hpp"

namespace cli {

namespace {

std::string read_input(const std::string& path) {
    if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
    return glass::read_file_bytes(path, "file");
}

// "2026-12-04", "2026-12-04T09:30", "2026-12-04T09:30:15Z", "2026-12-04 09:30:15+01:00": seconds
// since 1970 (UTC). A date without a zone is UTC.
std::int64_t parse_iso8601(const std::string& s) {
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, consumed = 0;
    const auto bad = [&] { return UsageError("--now must be an ISO-8601 date or time (2026-12-04T09:30:00Z), got '" + s + "'"); };
    if (std::sscanf(s.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &consumed) != 3 || consumed != 10) throw bad();
    size_t at = 10;
    if (at < s.size() && (s[at] == 'T' || s[at] == ' ')) {
        int n = 0;
        if (std::sscanf(s.c_str() + at + 1, "%2d:%2d%n", &h, &mi, &n) != 2 || n != 5) throw bad();
        at += 6;
        if (at < s.size() && s[at] == ':') {
            if (std::sscanf(s.c_str() + at + 1, "%2d%n", &sec, &n) != 1 || n != 2) throw bad();
            at += 3;
        }
    }
    int offset_minutes = 0;
    if (at < s.size() && s[at] == 'Z') ++at;
    else if (at < s.size() && (s[at] == '+' || s[at] == '-')) {
        int oh = 0, om = 0, n = 0;
        if (std::sscanf(s.c_str() + at + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59) throw bad();
        offset_minutes = (s[at] == '+' ? 1 : -1) * (oh * 60 + om);
        at += 6;
    }
    const std::chrono::year_month_day date{std::chrono::year{y}, std::chrono::month(static_cast<unsigned>(mo)),
                                           std::chrono::day(static_cast<unsigned>(d))};
    if (at != s.size() || !date.ok() || h > 23 || mi > 59 || sec > 60) throw bad();
    const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
    return days * 86400 + h * 3600 + mi * 60 + sec - offset_minutes * 60;
}

// The template and its BOS/EOS texts: --template FILE (with -m too: the model's BOS/EOS texts),
// else the one -m MODEL carries.
glass::chat::ModelChatTemplate template_from_flags(const Flags& flags) {
    if (!flags.has("-m") && !flags.has("--template")) throw UsageError("give -m MODEL or --template FILE (or both)");
    const std::string model = flags.get("-m", "");
    if (flags.has("--template")) {
        const auto [bos, eos] = model.empty() ? std::pair<std::string, std::string>() : glass::chat::model_special_texts(model);
        return glass::chat::chat_template_from_file(flags.get("--template", ""), bos, eos);
    }
    std::optional<glass::chat::ModelChatTemplate> t = glass::chat::find_model_chat_template(model);
    if (!t)
        glass::fail("model '", model, "' (", glass::to_string(glass::model_file_kind(model)),
                    ") carries no chat template; give one with --template FILE");
    return *t;
}

}  // namespace

int cmd_chat_template(int argc, char** argv) {
    Flags flags("chat-template", {{"-m", true}, {"--template", true}, {"--messages", true}, {"--tools", true},
                                  {"--generation-prompt", false}, {"--no-generation-prompt", false},
                                  {"--bos-token", true}, {"--eos-token", true}, {"--set", true}, {"--now", true},
                                  {"--ids", false}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (!flags.has("--messages")) throw UsageError("--messages FILE.json is required (- reads standard input)");
    if (flags.has("--generation-prompt") && flags.has("--no-generation-prompt"))
        throw UsageError("--generation-prompt and --no-generation-prompt contradict each other");
    if (flags.has("--ids") && !flags.has("-m")) throw UsageError("--ids needs -m MODEL (its tokenizer)");
    const std::optional<std::int64_t> now =
        flags.has("--now") ? std::optional(parse_iso8601(flags.get("--now", ""))) : std::nullopt;
    nlohmann::ordered_json extra = template_variables_from_flags(flags);

    const glass::chat::ModelChatTemplate source = template_from_flags(flags);
    glass::chat::ChatInputs in{
        .messages = glass::parse_untrusted_ordered_json(read_input(flags.get("--messages", "")), "--messages"),
        .tools = std::nullopt,
        .add_generation_prompt = !flags.has("--no-generation-prompt"),
        .bos_token = flags.get("--bos-token", source.bos_token),
        .eos_token = flags.get("--eos-token", source.eos_token),
        .extra = std::move(extra),
        .now_unix_seconds = now};
    if (!in.messages.is_array())
        glass::fail("--messages: the conversation must be a JSON list of messages, got ", in.messages.type_name());
    if (flags.has("--tools")) {
        in.tools = glass::parse_untrusted_ordered_json(read_input(flags.get("--tools", "")), "--tools");
        if (!in.tools->is_array()) glass::fail("--tools: must be a JSON list of tools, got ", in.tools->type_name());
    }

    const glass::chat::ChatTemplate chat_template(source.source, "chat template " + source.origin);
    const std::string prompt = chat_template.render(in);
    if (!flags.has("--ids")) {
        std::cout << prompt << std::flush;
        return 0;
    }
    // The model's own tokenizer (the weights are not needed to tokenize).
    const std::string model = flags.get("-m", "");
    const std::unique_ptr<glass::Tokenizer> tok = glass::model_file_kind(model) == glass::ModelFileKind::gguf
                                                      ? glass::load_gguf_tokenizer(model)
                                                      : glass::load_hf_tokenizer(model + "/tokenizer.json");
    std::cout << nlohmann::json(glass::chat::chat_prompt_ids(*tok, prompt)).dump() << "\n";
    return 0;
}

}  // namespace cli
