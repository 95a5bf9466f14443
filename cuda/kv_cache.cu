/// \file
/// \brief cuda/kv_cache.cu — the one kernel of the device KV cache (the class itself, host
/// bookkeeping, is in kv_cache.cpp): append n_new rows of K and V to one layer's cache.
/// ```text
/// In:  k, v [n_new, kv_dim]; keys, values [seq_len, kv_dim] of one layer; start_pos.
/// Out: keys, values rows start_pos .. start_pos + n_new - 1.
/// A kernel rather than a cudaMemcpy: start_pos may be an IntArg read on the device, so that the
/// decode graph appends each new token's K and V at a position the host updates between replays.
/// ```
#include "common.cuh"

namespace glass::cuda {

// One thread per float of the new rows: out row start_pos + r gets k/v row r.
__global__ void kv_write_kernel(float* keys, float* values, const float* k, const float* v,
                                int n_new, int kv_dim, IntArg start_pos) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into k, v
    if (i >= std::int64_t{n_new} * kv_dim) return;
    const std::int64_t at = std::int64_t{value_of(start_pos)} * kv_dim + i;
    keys[at] = k[i];
    values[at] = v[i];
}

void kv_write(float* d_keys, float* d_values, const float* d_k, const float* d_v, int n_new, int kv_dim,
              IntArg start_pos) {
    if (n_new < 1 || kv_dim < 1) fail("kv_write: ", n_new, " rows of ", kv_dim, " floats");
    const std::int64_t n = std::int64_t{n_new} * kv_dim;
    kv_write_kernel<<<grid_for(n, 256), 256>>>(d_keys, d_values, d_k, d_v, n_new, kv_dim, start_pos);
    CHECK_LAUNCH("kv_write_kernel");
}

}  // namespace glass::cuda
