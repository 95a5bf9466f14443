/// \file
/// \brief cuda/kv_cache.cu — the kernels of the device KV cache (the class itself, host
/// bookkeeping, is in kv_cache.cpp): append n_new rows of K and V to one layer's cache, as fp32 or
/// quantized to int8.
/// ```text
/// In:  k, v [n_new, kv_dim] (kv_dim = n_kv_heads · head_dim); start_pos.
/// fp32 (kv_write):       keys, values [seq_len, kv_dim] of one layer; rows start_pos .. start_pos +
///                        n_new - 1 = k, v.
/// int8 (kv_write_int8):  keys, values [seq_len, kv_dim] int8 and key_scales, value_scales
///                        [seq_len, n_kv_heads] fp32 of one layer; the same rows = quantize_kv_row
///                        (glass/kv_cache.hpp) of k, v: per (row, KV head) one scale s and head_dim
///                        integers. One warp per (row, KV head) (common.cuh's warp_quantize_int8).
/// Kernels rather than a cudaMemcpy: start_pos may be an IntArg read on the device, so that the
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

constexpr int kQuantizeWarps = 4;  // warps per block of kv_write_int8_kernel

// Warp w (of the whole grid) quantizes group w = (row r, KV head g) of k and of v into cache row
// start_pos + r. A warp past the last group returns whole, so every shuffle sees all 32 lanes.
__global__ void kv_write_int8_kernel(std::int8_t* keys, float* key_scales, std::int8_t* values, float* value_scales,
                                     const float* k, const float* v, int n_new, int n_kv_heads, int head_dim,
                                     IntArg start_pos) {
    const std::int64_t group = blockIdx.x * std::int64_t{kQuantizeWarps} + threadIdx.x / 32;
    if (group >= std::int64_t{n_new} * n_kv_heads) return;
    const std::int64_t r = group / n_kv_heads, g = group % n_kv_heads;
    const std::int64_t row = value_of(start_pos) + r;            // the cache row it goes to
    const std::int64_t kv_dim = std::int64_t{n_kv_heads} * head_dim;
    const std::int64_t from = r * kv_dim + g * head_dim, to = row * kv_dim + g * head_dim;
    warp_quantize_int8(k + from, head_dim, keys + to, key_scales + row * n_kv_heads + g);
    warp_quantize_int8(v + from, head_dim, values + to, value_scales + row * n_kv_heads + g);
}

void kv_write_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                   const float* d_k, const float* d_v, int n_new, int n_kv_heads, int head_dim, IntArg start_pos) {
    if (n_new < 1 || n_kv_heads < 1 || head_dim < 1)
        fail("kv_write_int8: ", n_new, " rows of ", n_kv_heads, " KV heads of ", head_dim);
    const std::int64_t groups = std::int64_t{n_new} * n_kv_heads;
    kv_write_int8_kernel<<<grid_for(groups, kQuantizeWarps), kQuantizeWarps * 32>>>(
        d_keys, d_key_scales, d_values, d_value_scales, d_k, d_v, n_new, n_kv_heads, head_dim, start_pos);
    CHECK_LAUNCH("kv_write_int8_kernel");
}

}  // namespace glass::cuda
