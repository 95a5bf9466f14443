/// \file
/// \brief cuda/kv_cache.cu — the kernels that store K and V (the device cache's host bookkeeping
/// is in kv_cache.cpp): each new row of K and V into its cache row, as fp32 or quantized to int8,
/// for one sequence's cache and a serving batch's pool alike.
/// ```text
/// In:  k, v [n_rows, kv_dim] (kv_dim = n_kv_heads · head_dim); where the rows sit (RowPlacement:
///      one sequence from start_pos, its cache row = its position; or a batch, pool row slots[r]).
/// fp32 (kv_write_rows):       keys, values [cache rows, kv_dim] of one layer; row write_row(r) = k, v row r.
/// int8 (kv_write_rows_int8):  keys, values [cache rows, kv_dim] int8 and key_scales, value_scales
///                             [cache rows, n_kv_heads] fp32 of one layer; the same rows =
///                             quantize_kv_row (glass/kv_cache.hpp) of k, v: per (row, KV head) one
///                             scale s and head_dim integers. One warp per (row, KV head)
///                             (common.cuh's warp_quantize_int8): exactly the CPU's integers.
/// Kernels rather than a cudaMemcpy: the start position may be an IntArg read on the device, so
/// that the decode graph appends each new token's K and V at a position the host updates between
/// replays; a batch's rows go to scattered pool rows.
/// ```
#include "common.cuh"

namespace glass::cuda {

// One thread per float of the new rows: cache row loc.write_row(r) gets k/v row r.
template <class Locator>
__global__ void kv_write_kernel(float* keys, float* values, const float* k, const float* v, int n_rows, int kv_dim,
                                Locator loc) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into k, v
    if (i >= std::int64_t{n_rows} * kv_dim) return;
    const int r = static_cast<int>(i / kv_dim);
    const std::int64_t at = loc.write_row(r) * kv_dim + i % kv_dim;
    keys[at] = k[i];
    values[at] = v[i];
}

void kv_write_rows(float* d_keys, float* d_values, const float* d_k, const float* d_v, int kv_dim,
                   const RowPlacement& rows) {
    if (rows.n_rows < 1 || kv_dim < 1) fail("kv_write: ", rows.n_rows, " rows of ", kv_dim, " floats");
    const std::int64_t n = std::int64_t{rows.n_rows} * kv_dim;
    with_locator(rows, [&](auto loc) {
        kv_write_kernel<<<grid_for(n, 256), 256>>>(d_keys, d_values, d_k, d_v, rows.n_rows, kv_dim, loc);
        CHECK_LAUNCH("kv_write_kernel");
    });
}

constexpr int kQuantizeWarps = 4;  // warps per block of kv_write_int8_kernel

// Warp w (of the whole grid) quantizes group w = (row r, KV head g) of k and of v into cache row
// loc.write_row(r). A warp past the last group returns whole, so every shuffle sees all 32 lanes.
template <class Locator>
__global__ void kv_write_int8_kernel(std::int8_t* keys, float* key_scales, std::int8_t* values, float* value_scales,
                                     const float* k, const float* v, int n_rows, int n_kv_heads, int head_dim,
                                     Locator loc) {
    const std::int64_t group = blockIdx.x * std::int64_t{kQuantizeWarps} + threadIdx.x / 32;
    if (group >= std::int64_t{n_rows} * n_kv_heads) return;
    const std::int64_t r = group / n_kv_heads, g = group % n_kv_heads;
    const std::int64_t row = loc.write_row(static_cast<int>(r));  // the cache row it goes to
    const std::int64_t kv_dim = std::int64_t{n_kv_heads} * head_dim;
    const std::int64_t from = r * kv_dim + g * head_dim, to = row * kv_dim + g * head_dim;
    warp_quantize_int8(k + from, head_dim, keys + to, key_scales + row * n_kv_heads + g);
    warp_quantize_int8(v + from, head_dim, values + to, value_scales + row * n_kv_heads + g);
}

void kv_write_rows_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                        const float* d_k, const float* d_v, int n_kv_heads, int head_dim, const RowPlacement& rows) {
    if (rows.n_rows < 1 || n_kv_heads < 1 || head_dim < 1)
        fail("kv_write_int8: ", rows.n_rows, " rows of ", n_kv_heads, " KV heads of ", head_dim);
    const std::int64_t groups = std::int64_t{rows.n_rows} * n_kv_heads;
    with_locator(rows, [&](auto loc) {
        kv_write_int8_kernel<<<grid_for(groups, kQuantizeWarps), kQuantizeWarps * 32>>>(
            d_keys, d_key_scales, d_values, d_value_scales, d_k, d_v, rows.n_rows, n_kv_heads, head_dim, loc);
        CHECK_LAUNCH("kv_write_int8_kernel");
    });
}

void kv_write(float* d_keys, float* d_values, const float* d_k, const float* d_v, int n_new, int kv_dim,
              IntArg start_pos) {
    kv_write_rows(d_keys, d_values, d_k, d_v, kv_dim, RowPlacement::sequence(n_new, start_pos));
}

void kv_write_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                   const float* d_k, const float* d_v, int n_new, int n_kv_heads, int head_dim, IntArg start_pos) {
    kv_write_rows_int8(d_keys, d_key_scales, d_values, d_value_scales, d_k, d_v, n_kv_heads, head_dim,
                       RowPlacement::sequence(n_new, start_pos));
}

}  // namespace glass::cuda
