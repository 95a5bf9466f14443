/// \file
/// \brief cuda/device_matrix.hpp — weight matrices on the device: how one is stored (WeightType),
/// a view of one (DeviceMatrix), an owned upload (OwnedMatrix) and conversions between types.
/// Plain C++ (no CUDA types), defined in device.cu and quantize.cpp; glass_cuda.hpp includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "device.hpp"

namespace glass::cuda {

// ---- Weights -----------------------------------------------------------------------------------

// How a weight matrix is stored on the device. Arithmetic is always fp32; f16/bf16 only halve the
// bytes read (the decode bottleneck), rounded to nearest even. q8_0/q4_0 are glass/quantize.hpp's
// blocks of 32 with one fp16 scale (1.0625 / 0.5625 bytes per weight), widened inside the kernel.
// q4_k/q5_k/q6_k are ggml's k-quant super-blocks of 256 weights (glass/ggml_quants.hpp: 4.5, 5.5
// and 6.5625 bits, i.e. 0.5625, 0.6875 and 0.8203125 bytes per weight), widened inside the kernel.
enum class WeightType { f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k };
const char* to_string(WeightType t);  // "fp32", "fp16", "bf16", "q8", "q4", "q4_k", "q5_k", "q6_k"
WeightType weight_type_from_string(const std::string& name);  // those, or "f32"/"f16"/"q8_0"/"q4_0"
double bytes_per_weight(WeightType t);                         // scales included for the integer types
double quantized_bytes_per_weight(WeightType t);               // the integer types only (quantize.cpp)
inline bool is_quantized(WeightType t) { return t == WeightType::q8_0 || t == WeightType::q4_0; }
inline bool is_k_quant(WeightType t) { return t == WeightType::q4_k || t == WeightType::q5_k || t == WeightType::q6_k; }
// Weights stored as small integers and scales (q8/q4 or a k-quant): quantized on the host at
// upload, never converted on the device, never an embedding table.
inline bool has_integer_weights(WeightType t) { return is_quantized(t) || is_k_quant(t); }

// A row-major [rows, cols] matrix in device memory. f32/f16/bf16: `data` holds rows · cols values.
// q8_0/q4_0: `data` holds the integers [rows][row_bytes] (16-byte aligned) and `scales` the fp16
// scale bits [rows][blocks], exactly a QuantizedMatrix's two arrays (quantized_view, glass_cuda.hpp).
// q4_k/q5_k/q6_k: `data` holds ggml's super-blocks as a GGUF file stores them, row after row
// ([rows][cols / 256] blocks, scales inside each block), `scales` is unused (kquant_view, glass_cuda.hpp).
struct DeviceMatrix {
    const void* data = nullptr;
    WeightType type = WeightType::f32;
    int rows = 0;
    int cols = 0;
    const std::uint16_t* scales = nullptr;  // q8_0/q4_0 only
};

// fp32 device floats -> the same values stored as `type` (n values), and back to fp32. The round
// trip gives the CPU reference the exact weights a f16/bf16 kernel sees.
void convert_weights(const float* d_src, void* d_dst, std::size_t n, WeightType type);
void widen_weights(const void* d_src, float* d_dst, std::size_t n, WeightType type);

// An owned device copy of a host fp32 matrix [rows, cols], stored as `type` (q8_0/q4_0: quantized
// on the host by glass::quantize, quantize.cpp, so the device holds the CPU's integers and scales;
// q4_k/q5_k/q6_k: by glass::ggml_from_float, so it holds the blocks a GGUF of that type would).
struct OwnedMatrix {
    DeviceBuffer buffer;
    DeviceMatrix view;
};
OwnedMatrix upload_matrix(const float* host, int rows, int cols, WeightType type);
// The integer types only. A k-quant needs cols a multiple of 256 (whole super-blocks per row).
OwnedMatrix upload_quantized(const float* host, int rows, int cols, WeightType type);
std::int64_t matrix_bytes(const DeviceMatrix& w);  // bytes of its values as stored (scales included)

}  // namespace glass::cuda
