/// \file
/// \brief cuda/mlp.cu — journey step 5 on the GPU (see glass/mlp.hpp), and the residual add.
/// ```text
/// mlp():    x [n_tokens, dim] -> out [n_tokens, dim] = ( silu(x W1ᵀ) ⊙ (x W3ᵀ) ) W2ᵀ
///           three matmuls (matmul.cu) around one elementwise kernel:
/// swiglu(): gate [n] = silu(gate) ⊙ up, one thread per number, silu(g) = g · 1/(1 + e^-g) in the
///           CPU's order of operations.
/// residual_add(): x [n] += y [n], one thread per number: the residual stream keeps each layer's
///           input and adds what attention or the MLP computed.
/// ```
#include "common.cuh"

namespace glass::cuda {

__global__ void swiglu_kernel(float* gate, const float* up, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
}

__global__ void residual_add_kernel(float* x, const float* y, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] += y[i];
}

void swiglu(float* d_gate, const float* d_up, std::int64_t n) {
    swiglu_kernel<<<grid_for(n, 256), 256>>>(d_gate, d_up, n);
    CHECK_LAUNCH("swiglu_kernel");
}

void residual_add(float* d_x, const float* d_y, std::int64_t n) {
    residual_add_kernel<<<grid_for(n, 256), 256>>>(d_x, d_y, n);
    CHECK_LAUNCH("residual_add_kernel");
}

void mlp(MatmulKernel kernel, const float* d_x, int n_tokens, const DeviceMatrix& w1,
         const DeviceMatrix& w2, const DeviceMatrix& w3, float* d_gate, float* d_up, float* d_out) {
    if (w1.rows != w3.rows || w1.cols != w3.cols || w2.rows != w1.cols || w2.cols != w1.rows)
        fail("mlp: W1 [", w1.rows, ", ", w1.cols, "], W3 [", w3.rows, ", ", w3.cols, "] and W2 [",
             w2.rows, ", ", w2.cols, "] do not fit together");
    matmul(kernel, d_x, n_tokens, w1, d_gate);  // [n_tokens, hidden]
    matmul(kernel, d_x, n_tokens, w3, d_up);    // [n_tokens, hidden]
    swiglu(d_gate, d_up, std::int64_t{n_tokens} * w1.rows);
    matmul(kernel, d_gate, n_tokens, w2, d_out);  // [n_tokens, dim]
}

}  // namespace glass::cuda
