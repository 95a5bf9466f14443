// emulator/tests/emulator_kernels.hpp — the launchers of emulator_kernels.cu (device pointers in).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace emulator_test {
cudaError_t reverse(const float* d_in, float* d_out, int blocks, int bx, int by);
cudaError_t shuffles(const int* d_in, int* d_out);  // out: 5 ints per lane, 32 lanes
cudaError_t dynamic_shared(float* d_out, int n);
cudaError_t divergent_barrier(float* d_out);     // 32 floats
cudaError_t shuffle_after_return(float* d_out);  // 64 floats
cudaError_t mask_beyond_block(float* d_out);     // 16 floats
cudaError_t late_barrier(float* d_out);          // 32 floats
cudaError_t overrun(const float* d_in, float* d_out, int n);  // reads d_in[n]: never returns
cudaError_t launch_noop(unsigned grid_x, unsigned grid_y, unsigned block_x, unsigned block_y, std::size_t shared);
// For graph capture: out[i] += add + *d_extra (d_extra read when the kernel runs), i < n, on
// `stream` (this file is built without --default-stream per-thread: stream 0 is the legacy one).
cudaError_t add_to(float* d_out, int n, float add, const float* d_extra, cudaStream_t stream);
}  // namespace emulator_test
