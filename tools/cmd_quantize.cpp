// glass quantize — a GGUF model rewritten in another file type (Q4_K_M, Q5_K_M, Q6_K, Q8_0, ...),
// as llama.cpp's llama-quantize does (formats/gguf_quantize.hpp).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "glass/formats/gguf_quantize.hpp"
#include "glass/formats/model_files.hpp"

namespace cli {

int cmd_quantize(int argc, char** argv) {
    Flags flags("quantize", {{"-m", true}, {"--type", true}, {"-o", true}, {"--json", false}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (!flags.has("-m")) throw UsageError("glass quantize needs a GGUF model: -m MODEL.gguf");
    if (!flags.has("-o")) throw UsageError("glass quantize needs an output file: -o OUT.gguf");
    if (!flags.has("--type")) throw UsageError("glass quantize needs --type (q4_k_m, q5_k_m, q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, f16, f32)");
    std::string type = flags.get("--type", "");
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    const std::string in = flags.get("-m", ""), out = flags.get("-o", "");
    if (glass::model_file_kind(in) != glass::ModelFileKind::gguf)
        glass::fail("glass quantize reads GGUF files; '", in, "' is not one (a llama2.c checkpoint: glass export-gguf first)");
    glass::llama_file_type_number(type);  // an unknown type is named before anything is read
    const glass::GgufQuantizeReport r = glass::quantize_gguf(in, out, type);
    if (flags.has("--json")) {
        std::cout << nlohmann::json{{"input", in}, {"output", out}, {"type", type}, {"tensors_by_type", r.tensors_by_type},
                                    {"bytes_in", r.bytes_in}, {"bytes_out", r.bytes_out}}
                         .dump()
                  << "\n";
        return 0;
    }
    std::printf("wrote %s (%s): %.1f MB from %.1f MB; tensors:", out.c_str(), type.c_str(), static_cast<double>(r.bytes_out) / 1e6,
                static_cast<double>(r.bytes_in) / 1e6);
    for (const auto& [t, n] : r.tensors_by_type) std::printf(" %s x %d", t.c_str(), n);
    std::printf("\n");
    return 0;
}

}  // namespace cli
