// ggml_blocks: glass's reading and writing of ggml's quantized blocks (include/glass/ggml_quants.hpp),
// as a command for tests/families/check_dequantize.py, which compares it with llama.cpp's gguf-py.
//   ggml_blocks dequantize TYPE IN OUT   IN: whole blocks of ggml type TYPE (a number); OUT: fp32
//   ggml_blocks quantize TYPE IN OUT     IN: fp32 (a multiple of the block's weights); OUT: blocks
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "glass/ggml_quants_write.hpp"

namespace {

std::vector<char> read_file(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) glass::fail("cannot read ", path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const char* path, const void* data, size_t n) {
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    if (!out) glass::fail("cannot write ", path);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc != 5) glass::fail("usage: ggml_blocks dequantize|quantize TYPE IN OUT");
        const std::string mode = argv[1];
        const auto type = static_cast<std::uint32_t>(std::stoul(argv[2]));
        const glass::GgmlBlock block = glass::ggml_block_of(type);
        if (block.weights == 0) glass::fail("type ", glass::ggml_type_name(type), " is not one glass reads");
        const std::vector<char> in = read_file(argv[3]);
        if (mode == "dequantize") {
            if (in.size() % static_cast<size_t>(block.bytes) != 0) glass::fail(in.size(), " bytes are not whole blocks");
            std::vector<float> out(in.size() / static_cast<size_t>(block.bytes) * static_cast<size_t>(block.weights));
            glass::ggml_to_float(type, in.data(), static_cast<std::int64_t>(out.size()), out.data());
            write_file(argv[4], out.data(), out.size() * sizeof(float));
        } else if (mode == "quantize") {
            std::vector<float> x(in.size() / sizeof(float));
            std::memcpy(x.data(), in.data(), x.size() * sizeof(float));
            std::vector<char> out(static_cast<size_t>(glass::ggml_bytes(type, static_cast<std::int64_t>(x.size()))));
            glass::ggml_from_float(type, x.data(), static_cast<std::int64_t>(x.size()), out.data());
            write_file(argv[4], out.data(), out.size());
        } else {
            glass::fail("unknown mode '", mode, "' (dequantize, quantize)");
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ggml_blocks: %s\n", e.what());
        return 1;
    }
}
