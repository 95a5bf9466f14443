/// \file
/// \brief cuda/quantize.cpp — the host half of integer weights on the GPU: a fp32 matrix is cut into
/// blocks by the CPU's own functions, and the blocks are uploaded as they are.
/// ```text
/// In:  host fp32 W [rows, cols], WeightType::q8_0, q4_0, q4_k, q5_k or q6_k.
/// Out: q8_0/q4_0 (glass::quantize): one device buffer, the integers [rows][row_bytes] first
///      (offset 0, so 16-byte aligned as quantize.cu's loads need), then the fp16 scale bits
///      [rows][blocks]; a DeviceMatrix whose `data` and `scales` point into it.
///      q4_k/q5_k/q6_k (glass::ggml_from_float): one device buffer of ggml super-blocks, row after
///      row [rows][cols / 256], scales inside each block, as a GGUF file stores them; `data` points
///      to it. cols must be whole super-blocks of 256.
/// ```
/// Quantizing on the host, with the function the CPU reference uses, means the device holds the
/// CPU's integers and scales bit for bit: CudaSession with q8 weights and CpuSession on
/// glass::quantized_model() read the same numbers, and differ only in the order of the sums (a
/// k-quant likewise against ggml_to_float of the same blocks).
#include <cstring>
#include <vector>

#include "glass/ggml_quants_write.hpp"
#include "glass/quantize.hpp"
#include "glass_cuda.hpp"

namespace glass::cuda {

static QuantFormat quant_format(WeightType type) {
    if (!is_quantized(type)) fail(to_string(type), " is not a quantized type (q8, q4)");
    return type == WeightType::q8_0 ? QuantFormat::q8_0 : QuantFormat::q4_0;
}

static std::uint32_t ggml_type(WeightType type) {
    if (!is_k_quant(type)) fail(to_string(type), " is not a k-quant type (q4_k, q5_k, q6_k)");
    const GgmlType g = type == WeightType::q4_k ? GgmlType::q4_k : type == WeightType::q5_k ? GgmlType::q5_k : GgmlType::q6_k;
    return static_cast<std::uint32_t>(g);
}

int kquant_block_bytes(WeightType type) { return ggml_block_of(ggml_type(type)).bytes; }

double quantized_bytes_per_weight(WeightType type) {
    if (is_k_quant(type)) return ggml_bits_per_weight(ggml_type(type)) / 8;
    return bytes_per_weight(quant_format(type));
}

std::int64_t matrix_bytes(const DeviceMatrix& w) {
    if (is_k_quant(w.type)) return std::int64_t{w.rows} * ggml_bytes(ggml_type(w.type), w.cols);
    if (!is_quantized(w.type)) return std::int64_t{w.rows} * w.cols * (w.type == WeightType::f32 ? 4 : 2);
    const std::int64_t blocks = (w.cols + kQuantBlock - 1) / kQuantBlock;  // QuantizedMatrix::bytes()'s count
    return std::int64_t{w.rows} * blocks * quant_block_bytes(quant_format(w.type));
}

// The k-quants: every row quantized by ggml_from_float (the rows are contiguous and each a whole
// number of super-blocks, so one call cuts the matrix into [rows][cols / 256] blocks).
static OwnedMatrix upload_k_quant(const float* host, int rows, int cols, WeightType type) {
    if (cols % kSuperBlockSize != 0)
        fail("upload_quantized: ", to_string(type), " stores rows as whole super-blocks of ", kSuperBlockSize,
             " weights; a row of ", cols, " is not (shape [", rows, ", ", cols, "])");
    const std::int64_t count = std::int64_t{rows} * cols;
    std::vector<char> blocks(static_cast<std::size_t>(ggml_bytes(ggml_type(type), count)));
    ggml_from_float(ggml_type(type), host, count, blocks.data());
    OwnedMatrix m;
    m.buffer = DeviceBuffer(blocks.size());
    upload(m.buffer.data(), blocks.data(), blocks.size());
    m.view = DeviceMatrix{m.buffer.data(), type, rows, cols};
    return m;
}

OwnedMatrix upload_quantized(const float* host, int rows, int cols, WeightType type) {
    if (!has_integer_weights(type))
        fail("upload_quantized: ", to_string(type), " is not a quantized type (q8, q4, q4_k, q5_k, q6_k)");
    if (rows < 1 || cols < 1) fail("upload_quantized: shape [", rows, ", ", cols, "] is empty");
    if (is_k_quant(type)) return upload_k_quant(host, rows, cols, type);
    const QuantizedMatrix q = quantize(host, rows, cols, quant_format(type));
    const std::size_t quant_bytes = q.quants.size();
    const std::size_t scale_offset = (quant_bytes + 15) / 16 * 16;  // keep the scales 2-byte aligned too
    OwnedMatrix m;
    m.buffer = DeviceBuffer(scale_offset + q.scales.size() * sizeof(std::uint16_t));
    auto* base = static_cast<std::uint8_t*>(m.buffer.data());
    upload(base, q.quants.data(), quant_bytes);
    upload(base + scale_offset, q.scales.data(), q.scales.size() * sizeof(std::uint16_t));
    m.view = DeviceMatrix{base, type, rows, cols, reinterpret_cast<const std::uint16_t*>(base + scale_offset)};
    return m;
}

}  // namespace glass::cuda
