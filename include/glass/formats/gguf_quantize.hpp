/// \file
/// \brief glass/formats/gguf_quantize.hpp — `glass quantize`: a GGUF file rewritten in another file
/// type (Q4_K_M, Q5_K_M, Q6_K, Q8_0, ...), the job of llama.cpp's llama-quantize.
/// ```text
/// In:  a GGUF model file of any architecture glass knows, its matrices in any type glass reads;
///      a file type (ggml_quants.hpp's ggml_file_tensor_type: "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0",
///      "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "F32").
/// Out: a GGUF v3 file with the same metadata (every key copied byte for byte, but
///      general.file_type, set to llama.cpp's number for the new type) and the same tensors in
///      the same order; each matrix in the type the file type gives it (read with ggml_to_float,
///      written with ggml_from_float, a slice of rows at a time), 1-D tensors (norms, biases,
///      rope_freqs) copied as they are. Tensor data aligned as the input's general.alignment.
/// Quantizing an already-quantized file stacks two roundings; start from F32, F16 or BF16.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "glass/errors.hpp"
#include "glass/formats/gguf_export.hpp"
#include "glass/formats/gguf_model.hpp"
#include "glass/ggml_quants_write.hpp"

namespace glass {

/// llama.cpp's general.file_type numbers (llama.h's LLAMA_FTYPE_MOSTLY_*) for the file types.
inline std::uint32_t llama_file_type_number(const std::string& file_type) {
    static const std::map<std::string, std::uint32_t> numbers = {
        {"F32", 0},  {"F16", 1},  {"Q4_0", 2},    {"Q4_1", 3},    {"Q8_0", 7},
        {"Q5_0", 8}, {"Q5_1", 9}, {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"Q6_K", 18}};
    const auto it = numbers.find(file_type);
    if (it == numbers.end()) fail("unknown file type '", file_type, "' (F32, F16, Q8_0, Q6_K, Q5_K_M, Q5_1, Q5_0, Q4_K_M, Q4_1, Q4_0)");
    return it->second;
}

/// What quantize_gguf wrote: tensors per type and the sizes.
struct GgufQuantizeReport {
    std::map<std::string, int> tensors_by_type;
    std::uint64_t bytes_in = 0, bytes_out = 0;
};

namespace detail {

// The metadata entries of a GGUF file as raw bytes (key, type, value), in the file's order.
inline std::vector<std::pair<std::string, std::span<const char>>> gguf_raw_metadata(std::span<const char> bytes) {
    GgufReader r(bytes);
    r.scalar<std::uint32_t>();  // magic
    r.scalar<std::uint32_t>();  // version
    r.scalar<std::uint64_t>();  // tensor count
    const std::uint64_t n = r.scalar<std::uint64_t>();
    std::vector<std::pair<std::string, std::span<const char>>> entries;
    for (std::uint64_t i = 0; i < n; ++i) {
        const size_t start = r.position();
        std::string key = r.string();
        r.value(r.scalar<std::uint32_t>());
        entries.emplace_back(std::move(key), bytes.subspan(start, r.position() - start));
    }
    return entries;
}

// The tensor `t` of `in` as `type`: its own bytes when the type is unchanged, else widened and
// quantized a slice of rows at a time (at most ~16 MB of fp32), appended to `out`.
inline void convert_tensor(const GgufModelFile& in, const GgufTensorInfo& t, std::uint32_t type, std::ofstream& out) {
    const std::span<const char> src = in.bytes_of(t);
    if (type == t.type) {
        out.write(src.data(), static_cast<std::streamsize>(src.size()));
        return;
    }
    const std::int64_t row = t.ne[0];
    std::int64_t rows = 1;
    for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
    if (row % ggml_block_of(type).weights != 0)
        fail("tensor '", t.name, "': rows of ", row, " weights are not whole ", ggml_type_name(type), " blocks");
    const std::int64_t slice = std::max<std::int64_t>(1, (std::int64_t{1} << 22) / row);
    std::vector<float> x;
    std::vector<char> blocks;
    for (std::int64_t r0 = 0; r0 < rows; r0 += slice) {
        const std::int64_t n = std::min(slice, rows - r0) * row;
        x.resize(static_cast<size_t>(n));
        ggml_to_float(t.type, src.data() + ggml_bytes(t.type, r0 * row), n, x.data());
        blocks.resize(static_cast<size_t>(ggml_bytes(type, n)));
        ggml_from_float(type, x.data(), n, blocks.data());
        out.write(blocks.data(), static_cast<std::streamsize>(blocks.size()));
    }
}

}  // namespace detail

/// Rewrites the GGUF model `in_path` as `file_type` into `out_path` (see the file comment).
inline GgufQuantizeReport quantize_gguf(const std::string& in_path, const std::string& out_path, const std::string& file_type) {
    const std::uint32_t ftype = llama_file_type_number(file_type);
    std::error_code ec;
    if (std::filesystem::equivalent(in_path, out_path, ec)) fail("glass quantize: the output '", out_path, "' is the input");
    const GgufModelFile in = open_gguf_model(in_path);
    const int n_layers = gguf_model_config(in).n_layers;  // an architecture glass knows, or refused here
    // Phase 1: each tensor's new type (matrices by the file type's rule; 1-D tensors and norms kept).
    const bool tied = in.find("output.weight") == nullptr;
    std::vector<std::uint32_t> types;
    GgufQuantizeReport report;
    for (const GgufTensorInfo& t : in.tensors) {
        const bool matrix = t.ne.size() == 2 && !(t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, "_norm.weight") == 0);
        const int layer = t.name.rfind("blk.", 0) == 0 ? std::atoi(t.name.c_str() + 4) : -1;
        types.push_back(matrix ? static_cast<std::uint32_t>(ggml_file_tensor_type(file_type, t.name, layer, n_layers, tied, t.ne[0]))
                               : t.type);
        ++report.tensors_by_type[ggml_type_name(types.back())];
    }
    // Phase 2: the header: metadata copied (general.file_type replaced), then the tensor table.
    const std::uint64_t alignment = static_cast<std::uint64_t>(in.meta.get_int("general.alignment", 32));
    detail::GgufBytes h;  // gguf_export.hpp's little-endian writer
    h.b.insert(h.b.end(), {'G', 'G', 'U', 'F'});
    h.put<std::uint32_t>(3);
    h.put<std::uint64_t>(in.tensors.size());
    const auto metadata = detail::gguf_raw_metadata(in.file.bytes);
    const bool has_ftype = in.meta.has("general.file_type");
    h.put<std::uint64_t>(metadata.size() + (has_ftype ? 0 : 1));
    for (const auto& [key, raw] : metadata) {
        if (key != "general.file_type") {
            h.b.insert(h.b.end(), raw.begin(), raw.end());
            continue;
        }
        h.str(key);
        h.put<std::uint32_t>(4);  // uint32
        h.put<std::uint32_t>(ftype);
    }
    if (!has_ftype) h.str("general.file_type"), h.put<std::uint32_t>(4), h.put<std::uint32_t>(ftype);
    std::uint64_t offset = 0;
    for (size_t i = 0; i < in.tensors.size(); ++i) {
        const GgufTensorInfo& t = in.tensors[i];
        h.str(t.name);
        h.put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
        std::int64_t count = 1;
        for (const std::int64_t n : t.ne) h.put<std::uint64_t>(static_cast<std::uint64_t>(n)), count *= n;
        h.put<std::uint32_t>(types[i]);
        h.put<std::uint64_t>(offset);
        offset += (static_cast<std::uint64_t>(ggml_bytes(types[i], count)) + alignment - 1) / alignment * alignment;
    }
    h.b.resize((h.b.size() + alignment - 1) / alignment * alignment, 0);
    // Phase 3: the data, tensor by tensor, each padded to the alignment.
    std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write '", out_path, "'");
    out.write(h.b.data(), static_cast<std::streamsize>(h.b.size()));
    const std::vector<char> zeros(alignment, 0);
    for (size_t i = 0; i < in.tensors.size(); ++i) {
        const std::streamoff start = out.tellp();
        detail::convert_tensor(in, in.tensors[i], types[i], out);
        const std::uint64_t written = static_cast<std::uint64_t>(out.tellp() - start);
        out.write(zeros.data(), static_cast<std::streamsize>((alignment - written % alignment) % alignment));
    }
    if (!out.flush()) fail("writing '", out_path, "' failed (disk full?)");
    report.bytes_in = in.file.bytes.size();
    report.bytes_out = static_cast<std::uint64_t>(out.tellp());
    return report;
}

}  // namespace glass
