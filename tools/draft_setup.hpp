// --draft SPEC and --draft-k K, as `glass generate`, `glass serve-bench` and `glass serve` read
// them (speculative decoding, speculative.hpp): SPEC is layers:N (the target's first N layers),
// ngram or ngram:N (prompt lookup), or the path of a llama2.c checkpoint with the target's
// vocabulary (a smaller model).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "glass/glass.hpp"

namespace cli {

// --draft-k, checked: tokens drafted per round (default 4). Given without --draft it is an error.
inline int draft_k_from_flags(const Flags& flags) {
    const int k = flags.number<int>("--draft-k").value_or(4);
    if (flags.has("--draft-k") && !flags.has("--draft")) throw UsageError("--draft-k applies with --draft");
    if (k < 1 || k > 16) throw UsageError("--draft-k must be in [1, 16], got " + std::to_string(k));
    return k;
}

// Makes drafters for SPEC: each call of the result is a new drafter (the serving engine gives
// every request its own; a model draft keeps its own K/V). Draft models are loaded (or cut from
// the target) once, here, and kept in `keep_alive`; `session_for` runs one where the target runs.
inline std::function<std::unique_ptr<glass::Drafter>()> drafter_factory(
    const std::string& spec, const glass::Model& target, std::vector<std::unique_ptr<glass::Model>>& keep_alive,
    std::function<std::unique_ptr<glass::Session>(const glass::Model&)> session_for) {
    const auto number_after = [&](std::size_t colon) {
        const std::string n = spec.substr(colon + 1);
        if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
            throw UsageError("--draft " + spec + ": expected a number after ':'");
        return std::stoi(n);
    };
    if (spec == "ngram" || spec.starts_with("ngram:")) {
        const int n = spec == "ngram" ? 3 : number_after(5);
        glass::NgramDrafter check(n);  // refuses a bad N now, not at the first request
        return [n] { return std::make_unique<glass::NgramDrafter>(n); };
    }
    if (spec.starts_with("layers:")) {
        keep_alive.push_back(std::make_unique<glass::Model>(glass::first_layers(target, number_after(6))));
    } else {
        keep_alive.push_back(std::make_unique<glass::Model>(glass::load_model(spec)));  // llama2.c, GGUF or a folder
        const glass::Model& draft = *keep_alive.back();
        if (draft.config.vocab_size != target.config.vocab_size)
            glass::fail("--draft ", spec, ": its vocabulary has ", draft.config.vocab_size, " tokens, the target's ",
                        target.config.vocab_size, " (a draft model must share the target's tokenizer)");
    }
    const glass::Model* draft = keep_alive.back().get();
    return [draft, spec, session_for = std::move(session_for)] {
        return std::make_unique<glass::ModelDrafter>(session_for(*draft), spec);
    };
}

}  // namespace cli
