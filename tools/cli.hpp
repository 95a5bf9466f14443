// tools/cli.hpp — what every `glass` subcommand shares: flag parsing, defaults, output helpers.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/checkpoint.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/kv_cache.hpp"
#include "glass/sampling.hpp"

namespace cli {

inline const std::string kDefaultModel = std::string(GLASS_MODELS_DIR) + "/stories260K.bin";
inline const std::string kDefaultTokenizer = std::string(GLASS_MODELS_DIR) + "/tok512.bin";

// Bad usage (unknown flag, missing value): exit status 2. Bad input (glass::Error): status 1.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// `glass COMMAND --help` (or -h): main prints that command's usage to stdout and exits 0.
struct HelpRequested {
    std::string command;
};

// The usage text of one subcommand (tools/glass.cpp holds them all, in one table).
std::string usage_of(const std::string& command);

// A tiny flag parser: every flag is declared with whether it takes a value; anything else is an
// error that names the flag. -h and --help are every command's: they ask for its usage, and win
// over any other problem on the line (`glass generate --bogus --help` prints the usage).
class Flags {
public:
    Flags(std::string command, std::map<std::string, bool> takes_value)
        : command_(std::move(command)), takes_value_(std::move(takes_value)) {}

    void parse(int argc, char** argv, int first) {
        bool only_positional = false, help = false;
        std::string error;  // the first problem, reported once we know no help was asked for
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
            if (arg == "-h" || arg == "--help") {
                help = true;
                continue;
            }
            auto it = takes_value_.find(arg);
            if (it == takes_value_.end()) {
                if (error.empty())
                    error = "unknown flag '" + arg + "' for glass " + command_ + " (see glass " + command_ + " --help)";
                continue;
            }
            if (it->second) {
                if (i + 1 >= argc) {
                    if (error.empty()) error = "flag " + arg + " needs a value";
                    continue;
                }
                values_[arg].push_back(argv[++i]);
            } else {
                values_[arg].push_back("");
            }
        }
        if (help) throw HelpRequested{command_};
        if (!error.empty()) throw UsageError(error);
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

// --temperature (default `temperature`: 1 samples, explain's 0 is greedy), --top-p (0.9), --top-k
// (0: off), --min-p (0: off), checked together (sampling.hpp's validate names a bad value).
inline glass::SamplingParams sampling_from_flags(const Flags& flags, float temperature = 1.0f) {
    glass::SamplingParams p;
    p.temperature = flags.number<float>("--temperature").value_or(temperature);
    p.top_p = flags.number<float>("--top-p").value_or(0.9f);
    p.top_k = flags.number<int>("--top-k").value_or(0);
    p.min_p = flags.number<float>("--min-p").value_or(0.0f);
    glass::validate(p);
    return p;
}

// --seed N, else the clock (a new draw every run).
inline std::uint64_t seed_from_flags(const Flags& flags) {
    return flags.number<std::uint64_t>("--seed").value_or(
        static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
}

// --kv fp32|int8 (default fp32): how the KV cache stores keys and values (kv_cache.hpp).
// A bad name is a usage error (exit 2), as for every other flag.
inline glass::KvType kv_from_flags(const Flags& flags) {
    const std::string name = flags.get("--kv", "fp32");
    if (name != "fp32" && name != "int8") throw UsageError("--kv must be fp32 or int8, got '" + name + "'");
    return glass::kv_type_from_string(name);
}

// --activations fp32|int8 (default fp32): whether decode rounds its inputs to int8 blocks and
// multiplies integers (FastOptions::int8_activations), which takes integer weights (q8, q4, the
// k-quants).
inline bool int8_activations_from_flags(const Flags& flags, const std::string& precision) {
    const std::string name = flags.get("--activations", "fp32");
    if (name != "fp32" && name != "int8") throw UsageError("--activations must be fp32 or int8, got '" + name + "'");
    // No --precision: the file's own types decide, and FastModel refuses a float matrix by name.
    if (name == "int8" && !precision.empty() && precision != "stored" &&
        !glass::fast::has_integer_weights(glass::fast::weight_type_from_string(precision)))
        throw UsageError("--activations int8 multiplies integer weights: give --precision q8, q4, q4_k, q5_k or q6_k (or a "
                         "quantized file's own types), not " + precision);
    return name == "int8";
}

// A piece shown between quotes with non-printable bytes escaped.
inline std::string quoted(const std::string& s) {
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

// A float parameter as the decimal the user typed (0.9, not 0.8999999761581421).
inline double as_decimal(float x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(x));
    return std::strtod(buf, nullptr);
}

inline nlohmann::json::string_t dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The subcommands (one file each: tools/cmd_NAME.cpp). argv[1] is the command name.
int cmd_generate(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);         // tools/cmd_bench.cpp (speed issue)
int cmd_random_model(int argc, char** argv);  // tools/cmd_random_model.cpp
int cmd_export_gguf(int argc, char** argv);   // tools/cmd_export_gguf.cpp
int cmd_quantize(int argc, char** argv);      // tools/cmd_quantize.cpp
int cmd_explain(int argc, char** argv);
int cmd_serve_bench(int argc, char** argv);  // tools/cmd_serve_bench.cpp
int cmd_serve(int argc, char** argv);        // tools/cmd_serve.cpp
int cmd_loadgen(int argc, char** argv);      // tools/cmd_loadgen.cpp
int cmd_chat(int argc, char** argv);          // tools/cmd_chat.cpp
int cmd_inspect(int argc, char** argv);       // tools/cmd_inspect.cpp
int cmd_chat_template(int argc, char** argv); // tools/cmd_chat_template.cpp

// The context window a model file runs with: --context N (16 to the model's own), else the
// model's own capped at kDefaultContext (llama.cpp's default as well), with a note on stderr.
// Llama 3.x files declare 131072 positions, and the KV cache and RoPE tables are sized by the
// window: 8.6 GB of fp32 keys and values for Llama 3.2 1B at 131072.
inline constexpr int kDefaultContext = 4096;
inline void context_from_flags(const Flags& flags, glass::Model& m) {
    const int declared = m.config.seq_len, lowest = std::min(16, declared);
    if (const auto ctx = flags.number<int>("--context")) {
        if (*ctx < lowest || *ctx > declared)
            throw UsageError("--context must be in [" + std::to_string(lowest) + ", " + std::to_string(declared) +
                             "] (the model's context length), got " + std::to_string(*ctx));
        m.config.seq_len = *ctx;
    } else if (declared > kDefaultContext) {
        m.config.seq_len = kDefaultContext;
        std::fprintf(stderr, "glass: a context window of %d positions, of the model's %d (--context N for more)\n",
                     kDefaultContext, declared);
    }
}

}  // namespace cli
