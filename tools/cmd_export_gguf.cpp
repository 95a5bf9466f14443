// glass export-gguf — a llama2.c checkpoint as a GGUF file for llama.cpp, the weights in f32,
// q8_0 or q4_0 blocks of quantize.hpp (formats/gguf_export.hpp), so llama.cpp runs exactly the
// numbers glass runs (scripts/llama-cpp-compare).
#include "cli.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/gguf_export.hpp"

namespace cli {

int cmd_export_gguf(int argc, char** argv) {
    Flags flags("export-gguf", {{"-m", true}, {"--type", true}, {"-o", true}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (!flags.has("-o")) throw UsageError("glass export-gguf needs an output file: -o FILE.gguf");
    const std::string type_name = flags.get("--type", "f32");
    if (type_name != "f32" && type_name != "f16" && type_name != "q8_0" && type_name != "q4_0")
        throw UsageError("--type must be f32, f16, q8_0 or q4_0, got '" + type_name + "'");
    const auto type = type_name == "f32"    ? glass::GgufTensorType::f32
                      : type_name == "f16"  ? glass::GgufTensorType::f16
                      : type_name == "q8_0" ? glass::GgufTensorType::q8_0
                                            : glass::GgufTensorType::q4_0;
    const std::string model_path = flags.get("-m", kDefaultModel), out = flags.get("-o", "");
    const glass::Model model = glass::load_llama2c_checkpoint(model_path);
    glass::write_gguf(model, type, out);
    std::fprintf(stderr, "wrote %s: %s, %s tensors\n", out.c_str(), model_path.c_str(), type_name.c_str());
    return 0;
}

}  // namespace cli
