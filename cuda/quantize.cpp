/// \file
/// \brief cuda/quantize.cpp — the host half of q8/q4 weights on the GPU: a fp32 matrix is cut into
/// glass/quantize.hpp's blocks by the CPU's own glass::quantize, and its two arrays are uploaded.
/// ```text
/// In:  host fp32 W [rows, cols], WeightType::q8_0 or q4_0.
/// Out: one device buffer: the integers [rows][row_bytes] first (offset 0, so 16-byte aligned as
///      quantize.cu's loads need), then the fp16 scale bits [rows][blocks]; a DeviceMatrix whose
///      `data` and `scales` point into it.
/// ```
/// Quantizing on the host, with the function the CPU reference uses, means the device holds the
/// CPU's integers and scales bit for bit: CudaSession with q8 weights and CpuSession on
/// glass::quantized_model() read the same numbers, and differ only in the order of the sums.
#include <cstring>

#include "glass/quantize.hpp"
#include "glass_cuda.hpp"

namespace glass::cuda {

static QuantFormat quant_format(WeightType type) {
    if (!is_quantized(type)) fail(to_string(type), " is not a quantized type (q8, q4)");
    return type == WeightType::q8_0 ? QuantFormat::q8_0 : QuantFormat::q4_0;
}

double quantized_bytes_per_weight(WeightType type) { return bytes_per_weight(quant_format(type)); }

std::int64_t matrix_bytes(const DeviceMatrix& w) {
    if (!is_quantized(w.type)) return std::int64_t{w.rows} * w.cols * (w.type == WeightType::f32 ? 4 : 2);
    const std::int64_t blocks = (w.cols + kQuantBlock - 1) / kQuantBlock;  // QuantizedMatrix::bytes()'s count
    return std::int64_t{w.rows} * blocks * quant_block_bytes(quant_format(w.type));
}

OwnedMatrix upload_quantized(const float* host, int rows, int cols, WeightType type) {
    if (!is_quantized(type)) fail("upload_quantized: ", to_string(type), " is not a quantized type (q8, q4)");
    if (rows < 1 || cols < 1) fail("upload_quantized: shape [", rows, ", ", cols, "] is empty");
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
