/// \file
/// \brief cuda/quantize.cu — products with 8- and 4-bit weights, dequantized inside the kernel (C14).
/// ```text
/// In:  x [n, cols] fp32; W' [rows, cols] in quantize.hpp's blocks: per row, blocks of 32
///      inputs, each one fp16 scale d (scales [rows][blocks]) and 32 integers q (quants
///      [rows][row_bytes]: int8, or two 4-bit q + 8 per byte, input 2j low, 2j + 1 high).
/// Out: y [n, rows] = x · W'ᵀ, y[t][r] = Σ_b d_b · Σ_{k in b} q_k x[t][k], accumulated in fp32.
///
/// The weights never exist in fp32 in memory: each kernel reads the small integers and the
/// scale and widens them in registers, so decode reads 1.0625 (q8) or 0.5625 (q4) bytes per
/// weight instead of 4.
///   naive         one thread per y[t][r], the definition written out (uncoalesced: each thread
///                 walks its own row).
///   warp_per_row  one warp per output row r; lane i takes blocks i, i + 32, ..: 32 lanes read
///                 32 consecutive blocks (1 KB of q8, 512 B of q4) at once, each lane its
///                 block's integers in 16-byte loads, then one multiplication by the block's
///                 scale; a shuffle reduction sums the lanes. Loops over the n rows of x.
/// ```
#include "common.cuh"

namespace glass::cuda {

const char* to_string(QuantType t) { return t == QuantType::q8_0 ? "q8" : "q4"; }

__device__ __forceinline__ int quant_at(const std::uint8_t* row, QuantType type, int k) {
    if (type == QuantType::q8_0) return static_cast<std::int8_t>(row[k]);
    const std::uint8_t byte = row[k / 2];
    return (k % 2 == 0 ? byte & 0x0F : byte >> 4) - 8;
}

// ---- naive -------------------------------------------------------------------------------------

__global__ void quantized_matmul_naive_kernel(const float* x, int n, DeviceQuantMatrix w, float* y) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into y
    if (i >= std::int64_t{n} * w.rows) return;
    const std::int64_t t = i / w.rows;
    const int r = static_cast<int>(i % w.rows);
    const std::uint8_t* row = w.quants + std::int64_t{r} * w.row_bytes;
    const __half* scales = reinterpret_cast<const __half*>(w.scales) + std::int64_t{r} * w.blocks;
    float sum = 0.0f;
    for (int b = 0; b < w.blocks; ++b) {
        float block_sum = 0.0f;
        const int k0 = b * kQuantBlockSize, k1 = min(w.cols, k0 + kQuantBlockSize);
        for (int k = k0; k < k1; ++k) block_sum += static_cast<float>(quant_at(row, w.type, k)) * x[t * w.cols + k];
        sum += __half2float(scales[b]) * block_sum;
    }
    y[i] = sum;
}

// ---- warp per row ------------------------------------------------------------------------------

// Σ q_k · x_k over one whole block of 32 (k0 = 32 · block), from 16-byte loads of the integers.
__device__ __forceinline__ float block_dot_q8(const std::uint8_t* q, const float* x) {
    float s = 0.0f;
    for (int half = 0; half < 2; ++half) {
        const uint4 raw = *reinterpret_cast<const uint4*>(q + 16 * half);
        const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
        for (int w = 0; w < 4; ++w)
            for (int byte = 0; byte < 4; ++byte) {
                const int k = 16 * half + 4 * w + byte;
                s += static_cast<float>(static_cast<std::int8_t>((words[w] >> (8 * byte)) & 0xFF)) * x[k];
            }
    }
    return s;
}
__device__ __forceinline__ float block_dot_q4(const std::uint8_t* q, const float* x) {
    const uint4 raw = *reinterpret_cast<const uint4*>(q);
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
    float s = 0.0f;
    for (int w = 0; w < 4; ++w)
        for (int byte = 0; byte < 4; ++byte) {
            const unsigned v = (words[w] >> (8 * byte)) & 0xFF;
            const int k = 2 * (4 * w + byte);
            s += static_cast<float>(static_cast<int>(v & 0x0F) - 8) * x[k] +
                 static_cast<float>(static_cast<int>(v >> 4) - 8) * x[k + 1];
        }
    return s;
}

constexpr int kQuantWarpsPerBlock = 8;

__global__ void quantized_matmul_warp_per_row_kernel(const float* x, int n, DeviceQuantMatrix w, float* y) {
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * kQuantWarpsPerBlock + threadIdx.x / 32;  // this warp's output row
    if (r >= w.rows) return;  // a whole warp leaves together, so the shuffles below stay full
    const std::uint8_t* row = w.quants + std::int64_t{r} * w.row_bytes;
    const __half* scales = reinterpret_cast<const __half*>(w.scales) + std::int64_t{r} * w.blocks;
    const int block_bytes = w.type == QuantType::q8_0 ? kQuantBlockSize : kQuantBlockSize / 2;
    const int whole = w.cols / kQuantBlockSize;  // blocks with all 32 inputs present
    for (int t = 0; t < n; ++t) {
        const float* xt = x + std::int64_t{t} * w.cols;
        float sum = 0.0f;
        for (int b = lane; b < w.blocks; b += 32) {
            const float* xb = xt + b * kQuantBlockSize;
            float block_sum = 0.0f;
            if (b < whole) {
                block_sum = w.type == QuantType::q8_0 ? block_dot_q8(row + b * block_bytes, xb)
                                                      : block_dot_q4(row + b * block_bytes, xb);
            } else {  // the partial last block: one input at a time
                for (int k = b * kQuantBlockSize; k < w.cols; ++k)
                    block_sum += static_cast<float>(quant_at(row, w.type, k)) * xt[k];
            }
            sum += __half2float(scales[b]) * block_sum;
        }
        sum = warp_sum(sum);
        if (lane == 0) y[std::int64_t{t} * w.rows + r] = sum;
    }
}

// ---- dispatch ----------------------------------------------------------------------------------

DeviceQuantMatrix quantized_view(const DeviceMatrix& w) {
    if (!is_quantized(w.type)) fail("quantized_view: the matrix is ", to_string(w.type), ", not q8 or q4");
    DeviceQuantMatrix q;
    q.quants = static_cast<const std::uint8_t*>(w.data);
    q.scales = w.scales;
    q.type = w.type == WeightType::q8_0 ? QuantType::q8_0 : QuantType::q4_0;
    q.rows = w.rows;
    q.cols = w.cols;
    q.blocks = (w.cols + kQuantBlockSize - 1) / kQuantBlockSize;
    q.row_bytes = q.blocks * (q.type == QuantType::q8_0 ? kQuantBlockSize : kQuantBlockSize / 2);
    return q;
}

static void check_quant_matrix(const char* who, int n, const DeviceQuantMatrix& w) {
    if (n < 1 || w.rows < 1 || w.cols < 1)
        fail(who, ": empty shape: x [", n, ", ", w.cols, "], W [", w.rows, ", ", w.cols, "]");
    const int blocks = (w.cols + kQuantBlockSize - 1) / kQuantBlockSize;
    const int row_bytes = blocks * (w.type == QuantType::q8_0 ? kQuantBlockSize : kQuantBlockSize / 2);
    if (w.blocks != blocks || w.row_bytes != row_bytes)
        fail(who, ": W [", w.rows, ", ", w.cols, "] in ", to_string(w.type), " has ", blocks, " blocks of ", row_bytes,
             " bytes per row, not ", w.blocks, " / ", w.row_bytes);
    if (reinterpret_cast<std::uintptr_t>(w.quants) % 16 != 0)
        fail(who, ": the integers must start on a 16-byte boundary");
}

void quantized_matmul_naive(const float* d_x, int n, const DeviceQuantMatrix& w, float* d_y) {
    check_quant_matrix("quantized_matmul_naive", n, w);
    quantized_matmul_naive_kernel<<<grid_for(std::int64_t{n} * w.rows, 256), 256>>>(d_x, n, w, d_y);
    CHECK_LAUNCH("quantized_matmul_naive_kernel");
}

void quantized_matmul(const float* d_x, int n, const DeviceQuantMatrix& w, float* d_y) {
    check_quant_matrix("quantized_matmul", n, w);
    quantized_matmul_warp_per_row_kernel<<<grid_for(w.rows, kQuantWarpsPerBlock), kQuantWarpsPerBlock * 32>>>(
        d_x, n, w, d_y);
    CHECK_LAUNCH("quantized_matmul_warp_per_row_kernel");
}

}  // namespace glass::cuda
