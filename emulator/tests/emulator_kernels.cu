// emulator/tests/emulator_kernels.cu — small kernels that test the CUDA emulator itself
// (test_emulator.cpp): some compute something whose answer depends on barrier and shuffle
// semantics being right, the others break a rule that a GPU would hang on or leave undefined,
// and the emulator must refuse them with a message that says what happened.
// Compiled only for the emulator (translated by emulator/translate.cmake, like cuda/*.cu).
#include <cuda_runtime.h>

#include "emulator_kernels.hpp"

namespace emulator_test {

// ---- kernels that are correct -------------------------------------------------------------------

// out[i] = in[n - 1 - i] within one block, through shared memory: right only if the barrier
// really waits for every thread's write.
__global__ void reverse_kernel(const float* in, float* out, int n) {
    __shared__ float staged[1024];
    const int i = threadIdx.x + threadIdx.y * blockDim.x;  // 2-D blocks: linear thread index
    staged[i] = in[blockIdx.x * n + i];
    __syncthreads();
    out[blockIdx.x * n + i] = staged[n - 1 - i];
}

// Per lane: [shfl_down by 1, shfl_up by 3, shfl_xor 5, shfl from lane 7, warp sum via xor].
__global__ void shuffles_kernel(const int* in, int* out) {
    const int i = threadIdx.x, v = in[i];
    out[5 * i + 0] = __shfl_down_sync(0xffffffffu, v, 1);
    out[5 * i + 1] = __shfl_up_sync(0xffffffffu, v, 3);
    out[5 * i + 2] = __shfl_xor_sync(0xffffffffu, v, 5);
    out[5 * i + 3] = __shfl_sync(0xffffffffu, v, 7);
    int sum = v;
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    out[5 * i + 4] = sum;
}

// Dynamic shared memory, sized at launch.
__global__ void dynamic_shared_kernel(float* out, int n) {
    extern __shared__ float scratch[];
    scratch[threadIdx.x] = static_cast<float>(threadIdx.x) * 2.0f;
    __syncthreads();
    out[threadIdx.x] = scratch[(threadIdx.x + 1) % n];
}

// ---- kernels that break the rules -----------------------------------------------------------------

// Half the block returns before a barrier the other half waits at.
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// Lanes 16..31 return; lanes 0..15 then shuffle with a full mask.
__global__ void shuffle_after_return_kernel(float* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 8);
}

// A full mask in a block of 16 threads: lanes 16..31 do not exist.
__global__ void mask_beyond_block_kernel(float* out) {
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

// Block 0 never synchronizes, later blocks do.
__global__ void late_barrier_kernel(float* out) {
    if (blockIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// Reads one element past the end of `in` (n floats): thread n - 1 reads in[n].
__global__ void overrun_kernel(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i + 1];
}

__global__ void noop_kernel(float* out) {
    if (out) out[0] = 0.0f;
}

// ---- host side -------------------------------------------------------------------------------------

cudaError_t reverse(const float* d_in, float* d_out, int blocks, int bx, int by) {
    reverse_kernel<<<blocks, dim3(bx, by)>>>(d_in, d_out, bx * by);
    return cudaGetLastError();
}
cudaError_t shuffles(const int* d_in, int* d_out) {
    shuffles_kernel<<<1, 32>>>(d_in, d_out);
    return cudaGetLastError();
}
cudaError_t dynamic_shared(float* d_out, int n) {
    dynamic_shared_kernel<<<1, n, n * sizeof(float)>>>(d_out, n);
    return cudaGetLastError();
}
cudaError_t divergent_barrier(float* d_out) {
    divergent_barrier_kernel<<<1, 32>>>(d_out);
    return cudaGetLastError();
}
cudaError_t shuffle_after_return(float* d_out) {
    shuffle_after_return_kernel<<<1, 64>>>(d_out);
    return cudaGetLastError();
}
cudaError_t mask_beyond_block(float* d_out) {
    mask_beyond_block_kernel<<<1, 16>>>(d_out);
    return cudaGetLastError();
}
cudaError_t late_barrier(float* d_out) {
    late_barrier_kernel<<<3, 32>>>(d_out);
    return cudaGetLastError();
}
cudaError_t overrun(const float* d_in, float* d_out, int n) {
    overrun_kernel<<<(n + 31) / 32, 32>>>(d_in, d_out, n);
    return cudaGetLastError();
}
cudaError_t launch_noop(unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y, std::size_t shared) {
    noop_kernel<<<dim3(grid_x, grid_y), dim3(block_x, block_y), shared>>>(nullptr);
    return cudaGetLastError();
}


__global__ void add_to_kernel(float* out, int n, float add, const float* extra) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += add + *extra;
}
cudaError_t add_to(float* d_out, int n, float add, const float* d_extra, cudaStream_t stream) {
    add_to_kernel<<<(n + 63) / 64, 64, 0, stream>>>(d_out, n, add, d_extra);
    return cudaGetLastError();
}

}  // namespace emulator_test
