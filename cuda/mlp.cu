/// \file
/// \brief cuda/mlp.cu — journey step 5 on the GPU (see glass/mlp.hpp), the residual add, and the
/// elementwise steps of the model families.
/// ```text
/// mlp():    x [n_tokens, dim] -> out [n_tokens, dim] = ( act(x W1ᵀ) ⊙ (x W3ᵀ) ) W2ᵀ
///           three matmuls (matmul.cu) around one elementwise kernel:
/// swiglu(): gate [n] = silu(gate) ⊙ up, one thread per number, silu(g) = g · 1/(1 + e^-g) in the
///           CPU's order of operations.
/// geglu():  gate [n] = gelu_tanh(gate) ⊙ up (Gemma), gelu_tanh as glass/mlp.hpp writes it.
/// residual_add(): x [n] += y [n], one thread per number: the residual stream keeps each layer's
///           input and adds what attention or the MLP computed.
/// add_bias_rows(), scale_values(), soft_cap(): one thread per number, the CPU's arithmetic.
/// sum_rank_slices(): one thread per number, the ranks' partial sums added in rank order.
/// ```
#include "common.cuh"

namespace glass::cuda {

__global__ void swiglu_kernel(float* gate, const float* up, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
}

__global__ void geglu_kernel(float* gate, const float* up, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    const float sqrt_2_over_pi = 0.7978845608028654f;
    gate[i] = 0.5f * g * (1.0f + tanhf(sqrt_2_over_pi * (g + 0.044715f * g * g * g))) * up[i];
}

__global__ void add_bias_rows_kernel(float* x, const float* bias, int width, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] += bias[i % width];
}

__global__ void scale_values_kernel(float* x, std::int64_t n, float factor) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] *= factor;
}

__global__ void soft_cap_kernel(float* x, std::int64_t n, float cap) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void residual_add_kernel(float* x, const float* y, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void sum_rank_slices_kernel(const float* all, int ranks, std::int64_t n, float* out) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= n) return;
    float sum = all[i];  // rank 0's value, then ranks 1, 2, ... added in order
    for (int r = 1; r < ranks; ++r) sum += all[r * n + i];
    out[i] = sum;
}

void swiglu(float* d_gate, const float* d_up, std::int64_t n) {
    swiglu_kernel<<<grid_for(n, 256), 256>>>(d_gate, d_up, n);
    CHECK_LAUNCH("swiglu_kernel");
}

void geglu(float* d_gate, const float* d_up, std::int64_t n) {
    geglu_kernel<<<grid_for(n, 256), 256>>>(d_gate, d_up, n);
    CHECK_LAUNCH("geglu_kernel");
}

void add_bias_rows(float* d_x, const float* d_bias, int n_rows, int width) {
    if (n_rows < 1 || width < 1) fail("add_bias_rows: shape [", n_rows, ", ", width, "] is empty");
    const std::int64_t n = std::int64_t{n_rows} * width;
    add_bias_rows_kernel<<<grid_for(n, 256), 256>>>(d_x, d_bias, width, n);
    CHECK_LAUNCH("add_bias_rows_kernel");
}

void scale_values(float* d_x, std::int64_t n, float factor) {
    scale_values_kernel<<<grid_for(n, 256), 256>>>(d_x, n, factor);
    CHECK_LAUNCH("scale_values_kernel");
}

void soft_cap(float* d_x, std::int64_t n, float cap) {
    if (!(cap > 0.0f)) fail("soft_cap: the cap must be > 0, got ", cap);
    soft_cap_kernel<<<grid_for(n, 256), 256>>>(d_x, n, cap);
    CHECK_LAUNCH("soft_cap_kernel");
}

void sum_rank_slices(const float* d_all, int ranks, std::int64_t n, float* d_out) {
    if (ranks < 1 || n < 0) fail("sum_rank_slices: ", ranks, " ranks of ", n, " numbers");
    if (n == 0) return;
    sum_rank_slices_kernel<<<grid_for(n, 256), 256>>>(d_all, ranks, n, d_out);
    CHECK_LAUNCH("sum_rank_slices_kernel");
}

void residual_add(float* d_x, const float* d_y, std::int64_t n) {
    residual_add_kernel<<<grid_for(n, 256), 256>>>(d_x, d_y, n);
    CHECK_LAUNCH("residual_add_kernel");
}

void mlp(MatmulKernel kernel, const float* d_x, int n_tokens, const DeviceMatrix& w1,
         const DeviceMatrix& w2, const DeviceMatrix& w3, float* d_gate, float* d_up, float* d_out,
         MlpActivation activation) {
    if (w1.rows != w3.rows || w1.cols != w3.cols || w2.rows != w1.cols || w2.cols != w1.rows)
        fail("mlp: W1 [", w1.rows, ", ", w1.cols, "], W3 [", w3.rows, ", ", w3.cols, "] and W2 [",
             w2.rows, ", ", w2.cols, "] do not fit together");
    matmul(kernel, d_x, n_tokens, w1, d_gate);  // [n_tokens, hidden]
    matmul(kernel, d_x, n_tokens, w3, d_up);    // [n_tokens, hidden]
    if (activation == MlpActivation::gelu_tanh)
        geglu(d_gate, d_up, std::int64_t{n_tokens} * w1.rows);
    else
        swiglu(d_gate, d_up, std::int64_t{n_tokens} * w1.rows);
    matmul(kernel, d_gate, n_tokens, w2, d_out);  // [n_tokens, dim]
}

}  // namespace glass::cuda
