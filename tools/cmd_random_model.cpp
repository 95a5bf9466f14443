// glass random-model — a checkpoint with a real model's shape and random weights (for bench/).
#include <iostream>

#include "cli.hpp"
#include "glass/fast/random_model.hpp"

namespace cli {

int cmd_random_model(int argc, char** argv) {
    Flags flags("random-model", {{"--shape", true}, {"-o", true}, {"--seed", true}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (!flags.has("--shape")) throw UsageError("glass random-model needs --shape stories15M|stories110M|tinyllama1b");
    if (!flags.has("-o")) throw UsageError("glass random-model needs an output file: -o FILE");
    const auto seed = flags.number<std::uint64_t>("--seed").value_or(1);
    const glass::ModelConfig c = glass::fast::shape_config(flags.get("--shape", ""));
    const std::string path = flags.get("-o", "");
    glass::fast::write_random_checkpoint(c, path, seed);
    std::fprintf(stderr, "wrote %s: dim %d, hidden %d, %d layers, %d/%d heads, vocab %d, seq %d (%.2f GB)\n",
                 path.c_str(), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
                 c.seq_len, static_cast<double>(glass::llama2c_file_bytes(c)) / 1e9);
    return 0;
}

}  // namespace cli
