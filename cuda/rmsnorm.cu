/// \file
/// \brief cuda/rmsnorm.cu — RMSNorm on the GPU (see glass/rmsnorm.hpp).
/// ```text
/// In:  x [n_tokens, dim]; gain [dim] (fp32).
/// Out: y [n_tokens, dim], y = gain ⊙ x / sqrt(mean(x²) + eps), row by row.
///
/// naive: one thread per row, summing in order exactly like the CPU loop (slow: one thread does
///        a whole row). fast: one block per row; threads stride over the row, then a block-wide
///        sum. Only the order of the additions differs from the CPU.
/// ```
#include "common.cuh"

namespace glass::cuda {

__global__ void rmsnorm_naive_kernel(const float* x, const float* gain, int n_tokens, int dim,
                                     float eps, float* y) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;  // the row
    if (t >= n_tokens) return;
    const float* row = x + std::int64_t{t} * dim;
    float sum_sq = 0.0f;
    for (int i = 0; i < dim; ++i) sum_sq += row[i] * row[i];
    const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
    float* out = y + std::int64_t{t} * dim;
    for (int i = 0; i < dim; ++i) out[i] = gain[i] * (inv_rms * row[i]);
}

constexpr int kRmsnormThreads = 256;

__global__ void rmsnorm_kernel(const float* x, const float* gain, int dim, float eps, float* y) {
    __shared__ float partials[32];
    const float* row = x + std::int64_t{blockIdx.x} * dim;  // one block per row
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) sum_sq += row[i] * row[i];
    sum_sq = block_sum(sum_sq, partials);
    const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
    float* out = y + std::int64_t{blockIdx.x} * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] = gain[i] * (inv_rms * row[i]);
}

static void check_shape(int n_tokens, int dim) {
    if (n_tokens < 1 || dim < 1) fail("rmsnorm: shape [", n_tokens, ", ", dim, "] is empty");
}

void rmsnorm_naive(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y) {
    check_shape(n_tokens, dim);
    rmsnorm_naive_kernel<<<grid_for(n_tokens, 64), 64>>>(d_x, d_gain, n_tokens, dim, eps, d_y);
    CHECK_LAUNCH("rmsnorm_naive_kernel");
}

void rmsnorm(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y) {
    check_shape(n_tokens, dim);
    rmsnorm_kernel<<<static_cast<unsigned>(n_tokens), kRmsnormThreads>>>(d_x, d_gain, dim, eps, d_y);
    CHECK_LAUNCH("rmsnorm_kernel");
}

}  // namespace glass::cuda
