/// \file
/// \brief cuda/common.cuh — what every .cu file shares: checked CUDA calls and launches,
/// bounds-checked indexing helpers, weight loads for fp32/fp16/bf16, block-wide reductions,
/// the softmax step the attention kernels share, the K/V readers and int8 quantizer of the
/// caches (fp32 rows, or int8 rows + scales: one kernel body reads either), and the locators of a
/// pass's rows (one sequence's cache, or a serving batch's pool: one kernel body serves both).
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

// An IntArg's value, read when the kernel runs (device.hpp says why).
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

// ---- Attention's rules (AttentionDims: glass/attention.hpp's arithmetic) ----------------------
// One score from its dot product q·k: times the scale, then with a soft-cap (Gemma 2) squeezed
// into (−cap, cap) by cap · tanh(s / cap).
__device__ __forceinline__ float attention_score(float dot, float scale, float softcap) {
    const float s = dot * scale;
    return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}
// The first position a query at `position` sees: 0, or with a sliding window the window − 1
// positions before its own (a local layer of Mistral or Gemma).
__device__ __forceinline__ int first_visible_key(int position, int window) {
    return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}

// ---- Cached K/V rows, fp32 or int8 -------------------------------------------------------------
// An attention kernel is written once, as a template over its Rows type, and reads key (or value)
// j of KV head g as `rows.row(j, g)[d]`. Rows are [n, n_kv_heads * head_dim]; int8 rows carry one
// scale per (row, KV head), scales [n, n_kv_heads], and read back as scale · (float)q — the fp32
// product the CPU's int8 cache stores (glass/kv_cache.hpp's dequantize_kv_row), so both sides
// attend over the same numbers.
struct F32Row {
    const float* p;
    __device__ __forceinline__ float operator[](int d) const { return p[d]; }
};
struct F32Rows {
    const float* data;
    int n_kv_heads, head_dim;
    __device__ __forceinline__ F32Row row(std::int64_t j, int g) const {
        return {data + j * (std::int64_t{n_kv_heads} * head_dim) + std::int64_t{g} * head_dim};
    }
};
struct Int8Row {
    const std::int8_t* p;
    float scale;
    __device__ __forceinline__ float operator[](int d) const { return scale * static_cast<float>(p[d]); }
};
struct Int8Rows {
    const std::int8_t* data;
    const float* scales;
    int n_kv_heads, head_dim;
    __device__ __forceinline__ Int8Row row(std::int64_t j, int g) const {
        return {data + j * (std::int64_t{n_kv_heads} * head_dim) + std::int64_t{g} * head_dim,
                scales[j * n_kv_heads + g]};
    }
};
// Host side: the device reader of a KvRows (device_kv_cache.hpp).
inline F32Rows f32_rows(const KvRows& r, int n_kv_heads, int head_dim) { return {r.f32, n_kv_heads, head_dim}; }
inline Int8Rows int8_rows(const KvRows& r, int n_kv_heads, int head_dim) {
    return {r.q, r.scales, n_kv_heads, head_dim};
}
// Keys and values must both be set and of one type; `what` names the caller.
void check_kv_rows(const KvRows& keys, const KvRows& values, const char* what);
// Calls launch(key reader, value reader) with the readers of their type (both F32Rows or both
// Int8Rows): each attention's host function launches its one templated kernel through this.
template <typename Launch>
void with_kv_readers(const KvRows& keys, const KvRows& values, const AttentionDims& dims, Launch&& launch) {
    if (keys.type() == KvType::int8)
        launch(int8_rows(keys, dims.n_kv_heads, dims.head_dim), int8_rows(values, dims.n_kv_heads, dims.head_dim));
    else
        launch(f32_rows(keys, dims.n_kv_heads, dims.head_dim), f32_rows(values, dims.n_kv_heads, dims.head_dim));
}

// ---- Where the rows of a pass sit (RowPlacement, device_kv_cache.hpp) -----------------------------
// A kernel over the rows of a forward pass (RoPE, the K/V write, attention) is written once, as a
// template over its locator, and asks it four things:
//   position(r)    the position of row r: it sees keys 0 .. position(r) of its own sequence
//   write_row(r)   the cache (or pool) row where row r's own K and V go
//   key_row(r, p)  the cache (or pool) row holding position p of row r's sequence
//   width()        the keys a row of scores is laid out for (a batch: max_keys; one sequence:
//                  the keys its last row sees, start + n_rows)
// SequenceLocator: one sequence in its own cache (CudaSession): position p is cache row p; a row
// of scores is as wide as the keys its last row sees (read on the device under the decode graph).
struct SequenceLocator {
    IntArg base;  // row r is at value_of(base) + shift + r
    int shift, n_rows;
    __device__ __forceinline__ int position(int r) const { return value_of(base) + shift + r; }
    __device__ __forceinline__ std::int64_t write_row(int r) const { return position(r); }
    __device__ __forceinline__ std::int64_t key_row(int /*r*/, int p) const { return p; }
    __device__ __forceinline__ int width() const { return position(n_rows - 1) + 1; }
};
// BatchLocator: a serving step (CudaPagedBackend): rows of several requests, K/V in pool blocks;
// position p of row r's request is offset p % block_size of block table[p / block_size] (the
// device twin of glass::serve::pool_row).
struct BatchLocator {
    const int* positions;
    const int* slots;
    const int* table_start;
    const int* block_ids;
    int block_size, max_keys;
    __device__ __forceinline__ int position(int r) const { return positions[r]; }
    __device__ __forceinline__ std::int64_t write_row(int r) const { return slots[r]; }
    __device__ __forceinline__ std::int64_t key_row(int r, int p) const {
        return std::int64_t{block_ids[table_start[r] + p / block_size]} * block_size + p % block_size;
    }
    __device__ __forceinline__ int width() const { return max_keys; }
};
// Calls launch(locator) with the locator of `rows`: each host function launches its one
// templated kernel through this (as with_kv_readers does for the storage type).
template <typename Launch>
void with_locator(const RowPlacement& rows, Launch&& launch) {
    if (rows.batch())
        launch(BatchLocator{rows.positions, rows.slots, rows.table_start, rows.block_ids, rows.block_size,
                            rows.max_keys});
    else
        launch(SequenceLocator{rows.base, rows.shift, rows.n_rows});
}

// One warp quantizes one group x [n] (a cached row's slice of one KV head) exactly as glass's
// int8_scale / to_int8 (glass/int8.hpp): s = max |x| / 127, NaN if any value is not finite;
// q = clamp(rint(x / s), -127, 127), 0 when s is 0 or NaN. Lanes split x; the maximum and the
// "not finite" flag go round the warp by shuffles (a maximum does not depend on the order, so s
// is the CPU's bit for bit); x / s is IEEE division (never fast math) and rintf rounds half to
// even like std::nearbyint. Every lane of the warp must call it; lane 0 writes the scale.
__device__ __forceinline__ void warp_quantize_int8(const float* x, int n, std::int8_t* q, float* scale) {
    const int lane = threadIdx.x % 32;
    float amax = 0.0f;
    int not_finite = 0;
    for (int i = lane; i < n; i += 32) {
        const float a = fabsf(x[i]);
        if (!(a < INFINITY)) not_finite = 1;  // inf or NaN
        amax = fmaxf(amax, a);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        not_finite |= __shfl_xor_sync(0xffffffffu, not_finite, offset);
    }
    const float s = not_finite ? NAN : amax / 127.0f;
    for (int i = lane; i < n; i += 32)
        q[i] = static_cast<std::int8_t>(s > 0.0f ? fminf(fmaxf(rintf(x[i] / s), -127.0f), 127.0f) : 0.0f);
    if (lane == 0) *scale = s;
}

}  // namespace glass::cuda
