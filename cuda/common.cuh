/// \file
/// \brief cuda/common.cuh — what every .cu file shares: checked CUDA calls and launches,
/// bounds-checked indexing helpers, weight loads for fp32/fp16/bf16, block-wide reductions and
/// the softmax step the attention kernels share.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "glass/errors.hpp"
#include "glass_cuda.hpp"

namespace glass::cuda {

// CUDA_CHECK(cudaMemcpy(...)): throws glass::Error naming the call, file and line.
#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        const cudaError_t glass_status_ = (call);                                          \
        if (glass_status_ != cudaSuccess)                                                  \
            ::glass::fail("CUDA call ", #call, " failed at ", __FILE__, ":", __LINE__, ": ", \
                          cudaGetErrorName(glass_status_), " (", cudaGetErrorString(glass_status_), ")"); \
    } while (0)

// After kernel<<<grid, block>>>(...): CHECK_LAUNCH("kernel_name"). Catches bad launch
// configurations at once; with GLASS_CUDA_SYNC=1 it also waits, so a fault inside the kernel is
// reported here, naming it, instead of at some later call.
void check_launch(const char* kernel, const char* file, int line);
#define CHECK_LAUNCH(kernel_name) ::glass::cuda::check_launch(kernel_name, __FILE__, __LINE__)

// Blocks of `threads` threads covering n items (n >= 1), as an unsigned grid size; fails rather
// than launch a grid larger than CUDA allows.
unsigned grid_for(std::int64_t n, int threads);

// An IntArg's value, read when the kernel runs (glass_cuda.hpp says why).
__device__ __forceinline__ int value_of(IntArg a) { return a.device ? *a.device : a.value; }

// ---- Weight loads: every kernel computes in fp32, whatever the storage type. ---------------------
__device__ __forceinline__ float load_weight(const float* w, std::int64_t i) { return w[i]; }
__device__ __forceinline__ float load_weight(const __half* w, std::int64_t i) { return __half2float(w[i]); }
__device__ __forceinline__ float load_weight(const __nv_bfloat16* w, std::int64_t i) {
    return __bfloat162float(w[i]);
}

// ---- Block-wide reductions (blockDim.x a multiple of 32, at most 1024) --------------------------
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // complete in lane 0
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}
// Every thread passes its partial value and gets the block's total back. `shared` holds 32 floats.
// Ends with a barrier, so the same `shared` may be reused by the next call.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < n_warps; ++w) total += shared[w];  // every thread, same order
    __syncthreads();
    return total;
}
__device__ __forceinline__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_max(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float best = -INFINITY;
    for (int w = 0; w < n_warps; ++w) best = fmaxf(best, shared[w]);
    __syncthreads();
    return best;
}

// ---- Attention's softmax, one block per row of scores -------------------------------------------
// The part every attention kernel shares once its threads have computed their scores s[j] (each
// thread its own j = threadIdx.x, + blockDim.x, ...; how they found the keys is the kernel's own
// business) and `thread_max`, the largest score each thread wrote: s[j] becomes exp(s[j] − max) in
// place for j < n (same split of j, so each thread reads what it wrote) and every thread gets back
// their sum; dividing by it is left to the weighted sum of values. Ends with a barrier, so every
// s[j] is then visible to the whole block. `shared` holds 32 floats.
__device__ __forceinline__ float block_exp_sum(float* s, int n, float thread_max, float* shared) {
    const float max_value = block_max(thread_max, shared);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        s[j] = expf(s[j] - max_value);
        sum += s[j];
    }
    return block_sum(sum, shared);
}

}  // namespace glass::cuda
