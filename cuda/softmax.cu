/// \file
/// \brief cuda/softmax.cu — scores → probabilities on the GPU (see glass/softmax.hpp).
/// ```text
/// In:  x [rows, n] (entries may be -inf: masked).
/// Out: x in place, each row exp(x - max) / Σ exp(x - max); masked entries become exactly 0.
///
/// naive: one thread per row, three loops in order, exactly the CPU's steps.
/// fast:  one block per row: threads stride over the row; block-wide max, then block-wide sum.
/// A row with no finite entry has no distribution; the CPU refuses it, and here it becomes NaN
/// (exp(-inf - -inf)), which every comparison and the sampler's finiteness check then reject.
/// ```
#include "common.cuh"

namespace glass::cuda {

__global__ void softmax_rows_naive_kernel(float* x, int rows, int n) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* row = x + std::int64_t{r} * n;
    float max_value = -INFINITY;
    for (int i = 0; i < n; ++i) max_value = fmaxf(max_value, row[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        row[i] = expf(row[i] - max_value);
        sum += row[i];
    }
    for (int i = 0; i < n; ++i) row[i] /= sum;
}

constexpr int kSoftmaxThreads = 256;

__global__ void softmax_rows_kernel(float* x, int n) {
    __shared__ float partials[32];
    float* row = x + std::int64_t{blockIdx.x} * n;  // one block per row
    float max_value = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) max_value = fmaxf(max_value, row[i]);
    max_value = block_max(max_value, partials);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(row[i] - max_value);
        row[i] = e;
        sum += e;
    }
    sum = block_sum(sum, partials);
    for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] /= sum;  // each thread its own entries
}

static void check_shape(int rows, int n) {
    if (rows < 1 || n < 1) fail("softmax: shape [", rows, ", ", n, "] is empty");
}

void softmax_rows_naive(float* d_x, int rows, int n) {
    check_shape(rows, n);
    softmax_rows_naive_kernel<<<grid_for(rows, 64), 64>>>(d_x, rows, n);
    CHECK_LAUNCH("softmax_rows_naive_kernel");
}

void softmax_rows(float* d_x, int rows, int n) {
    check_shape(rows, n);
    softmax_rows_kernel<<<static_cast<unsigned>(rows), kSoftmaxThreads>>>(d_x, n);
    CHECK_LAUNCH("softmax_rows_kernel");
}

}  // namespace glass::cuda
