/// \file
/// \brief cuda/paged_attention.cu — the serving step's K/V pool on the GPU: rows written through
/// their slots, attention read through block tables (the CUDA twin of the pool and the attention
/// of glass/serve/paged_transformer.hpp).
/// ```text
/// A step's rows come from several requests, each at its own positions (PagedRows, paged.hpp):
///   q        [n_rows, n_heads * head_dim]   rotated; row r at position pos(r) of its request
///   k, v     [n_rows, kv_dim]               the rows' own keys and values
///   pool     keys, values [num_blocks · block_size, kv_dim]   (one layer)
///   position p of row r's request lives in pool row  table[p / block_size] · block_size + p % block_size
///
/// paged_kv_write: pool row slots[r] = k, v row r (slots[r] is the pool row of pos(r)). One
///   thread per number. It runs before the attention, so a prompt chunk's rows see each other.
/// paged_kv_write_int8 (KvType::int8): the pool is int8 [num_blocks · block_size, kv_dim] plus
///   scales [num_blocks · block_size, n_kv_heads] for K and for V; pool row slots[r] =
///   quantize_kv_row (glass/kv_cache.hpp) of k, v row r, one warp per (row, KV head), exactly the
///   CPU pool's integers and scales (common.cuh's warp_quantize_int8).
/// Then row r attends to positions 0 .. pos(r) of its own request (causal per request; query
/// head h reads KV head h / (n_heads / n_kv_heads)), in one of three ways (CudaPagedOptions::
/// attention, paged.hpp), all giving
///   out      [n_rows, n_heads * head_dim]   softmax(q_h · K_gᵀ · scale) · V_g over 0 .. pos(r)
///
/// Naive (paged_attention_naive): attention.cu's three steps with one more lookup per key —
///   1. scores [n_rows, n_heads, max_keys] = q_h · k_g(j) · scale for j <= pos(r), -inf after
///   2. softmax over each row (softmax.cu)
///   3. out = weights · V, one thread per output number, keys 0 .. pos(r) in order
/// Per row (paged_attention): one block per (row, head) walks its request's blocks, as
///   attention_decode walks the cache: threads split the keys for the scores and the softmax's
///   max and sum, then split head_dim for the weighted sum, block by block of the table
///   (coalesced reads of V rows). Scores go to a scratch row of max_keys floats per (row, head).
///
/// Flash (paged_flash_attention): one block of kPagedFlashThreads (128) threads per (row, head),
///   and no score ever goes to global memory (no scratch at all). The block walks positions
///   0 .. pos(r) in tiles of 128 consecutive positions (tile t = positions 128t .. 128t + 127,
///   each looked up in the block table, so a tile may span several KV blocks), keeping the online
///   softmax state of glass/flash_attention.hpp — running max m, running sum l and the
///   unnormalised output o[head_dim] — exactly as flash_attention.cu's tiled kernel does per row:
///     a. thread j: s[j] = q_h · k(128t + j) · scale                      (shared, 128 floats)
///     b. every thread: m' = max(m, max_j s[j]), c = exp(m − m')            (0 on the first tile)
///     c. thread j: p[j] = exp(s[j] − m')                                  (shared, 128 floats)
///     d. every thread: l = l · c + Σ_j p[j]; thread d: o[d] = o[d] · c + Σ_j p[j] · v(128t + j)[d]
///   then out[r, h] = o / l. head_dim ≤ 256 (each thread owns output numbers d = tid, tid + 128).
///   Two barriers per tile; s, p and the tile's pool rows sit in separate shared arrays so that
///   a step never overwrites what a slower thread may still read.
///
/// All three attentions read fp32 or int8 pools through one kernel body each: a template over
/// common.cuh's row reader, which gives back scale · (float)q for int8 (the CPU pool's values).
///
/// Batch invariance. The engine's tests demand that a request's tokens equal the request run
/// alone, so no number a row gets may depend on the rest of the batch. Here nothing does: which
/// keys a thread takes, and in which order the sums run, depend on pos(r) and the fixed block
/// size only. In the naive softmax the row is max_keys wide (the batch's longest), but the masked
/// tail adds exact zeros to the sums and leaves the maximum alone, so the width changes nothing.
/// In the flash kernel the tiles are fixed by pos(r) alone (multiples of 128 positions), every
/// dot product runs d = 0 .. head_dim − 1 in one thread, and every thread sums the tile's maximum,
/// l and its o[d] serially in position order; max_keys, n_rows and the other rows never enter
/// (nor, but for which pool rows are read, the block size).
/// ```
#include "common.cuh"
#include "paged.hpp"

namespace glass::cuda {

// The pool row of position `pos` of the request whose block table is `table` (the device twin
// of glass::serve::pool_row).
__device__ __forceinline__ std::int64_t pool_row_of(const int* table, int block_size, int pos) {
    return std::int64_t{table[pos / block_size]} * block_size + pos % block_size;
}

// ---- the write -----------------------------------------------------------------------------------

// One thread per number of k and v: row r goes to pool row slots[r].
__global__ void paged_kv_write_kernel(float* pool_keys, float* pool_values, const float* k, const float* v,
                                      int n_rows, int kv_dim, const int* slots) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into k, v
    if (i >= std::int64_t{n_rows} * kv_dim) return;
    const std::int64_t r = i / kv_dim, column = i % kv_dim;
    const std::int64_t at = std::int64_t{slots[r]} * kv_dim + column;
    pool_keys[at] = k[i];
    pool_values[at] = v[i];
}

void paged_kv_write(float* d_pool_keys, float* d_pool_values, const float* d_k, const float* d_v, int kv_dim,
                    const PagedRows& rows) {
    if (rows.n_rows < 1 || kv_dim < 1) fail("paged_kv_write: ", rows.n_rows, " rows of ", kv_dim, " floats");
    const std::int64_t n = std::int64_t{rows.n_rows} * kv_dim;
    paged_kv_write_kernel<<<grid_for(n, 256), 256>>>(d_pool_keys, d_pool_values, d_k, d_v, rows.n_rows, kv_dim,
                                                      rows.slots);
    CHECK_LAUNCH("paged_kv_write_kernel");
}

constexpr int kQuantizeWarps = 4;  // warps per block of paged_kv_write_int8_kernel

// Warp w (of the whole grid) quantizes group w = (row r, KV head g) of k and of v into pool row
// slots[r]. A warp past the last group returns whole, so every shuffle sees all 32 lanes.
__global__ void paged_kv_write_int8_kernel(std::int8_t* pool_keys, float* key_scales, std::int8_t* pool_values,
                                           float* value_scales, const float* k, const float* v, int n_rows,
                                           int n_kv_heads, int head_dim, const int* slots) {
    const std::int64_t group = blockIdx.x * std::int64_t{kQuantizeWarps} + threadIdx.x / 32;
    if (group >= std::int64_t{n_rows} * n_kv_heads) return;
    const std::int64_t r = group / n_kv_heads, g = group % n_kv_heads;
    const std::int64_t slot = slots[r];
    const std::int64_t kv_dim = std::int64_t{n_kv_heads} * head_dim;
    const std::int64_t from = r * kv_dim + g * head_dim, to = slot * kv_dim + g * head_dim;
    warp_quantize_int8(k + from, head_dim, pool_keys + to, key_scales + slot * n_kv_heads + g);
    warp_quantize_int8(v + from, head_dim, pool_values + to, value_scales + slot * n_kv_heads + g);
}

void paged_kv_write_int8(std::int8_t* d_pool_keys, float* d_pool_key_scales, std::int8_t* d_pool_values,
                         float* d_pool_value_scales, const float* d_k, const float* d_v, int n_kv_heads, int head_dim,
                         const PagedRows& rows) {
    if (rows.n_rows < 1 || n_kv_heads < 1 || head_dim < 1)
        fail("paged_kv_write_int8: ", rows.n_rows, " rows of ", n_kv_heads, " KV heads of ", head_dim);
    const std::int64_t groups = std::int64_t{rows.n_rows} * n_kv_heads;
    paged_kv_write_int8_kernel<<<grid_for(groups, kQuantizeWarps), kQuantizeWarps * 32>>>(
        d_pool_keys, d_pool_key_scales, d_pool_values, d_pool_value_scales, d_k, d_v, rows.n_rows, n_kv_heads,
        head_dim, rows.slots);
    CHECK_LAUNCH("paged_kv_write_int8_kernel");
}

// ---- naive ---------------------------------------------------------------------------------------

// scores [n_rows, n_heads, max_keys]; one thread per score.
template <class Rows>
__global__ void paged_scores_kernel(const float* q, Rows pool_keys, PagedRows rows, int n_heads,
                                    int n_kv_heads, int head_dim, float scale, float* scores) {
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{rows.n_rows} * n_heads * rows.max_keys) return;
    const int j = static_cast<int>(idx % rows.max_keys);                          // key position
    const int h = static_cast<int>((idx / rows.max_keys) % n_heads);              // query head
    const int r = static_cast<int>(idx / (std::int64_t{rows.max_keys} * n_heads));  // row
    const int g = h / (n_heads / n_kv_heads);                                     // its KV head
    if (j > rows.positions[r]) {  // causal mask, per request: its future (and past its end)
        scores[idx] = -INFINITY;
        return;
    }
    const int* table = rows.block_ids + rows.table_start[r];
    const float* q_row = q + (std::int64_t{r} * n_heads + h) * head_dim;
    const auto k_row = pool_keys.row(pool_row_of(table, rows.block_size, j), g);
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += q_row[d] * k_row[d];
    scores[idx] = dot * scale;
}

// out [n_rows, n_heads, head_dim]; one thread per output number, keys in order.
template <class Rows>
__global__ void paged_values_kernel(const float* weights, Rows pool_values, PagedRows rows, int n_heads,
                                    int n_kv_heads, int head_dim, float* out) {
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{rows.n_rows} * n_heads * head_dim) return;
    const int d = static_cast<int>(idx % head_dim);
    const int h = static_cast<int>((idx / head_dim) % n_heads);
    const int r = static_cast<int>(idx / (std::int64_t{head_dim} * n_heads));
    const int g = h / (n_heads / n_kv_heads);
    const int* table = rows.block_ids + rows.table_start[r];
    const float* w_row = weights + (std::int64_t{r} * n_heads + h) * rows.max_keys;
    float sum = 0.0f;
    for (int j = 0; j <= rows.positions[r]; ++j)  // masked weights are exactly 0: not read
        sum += w_row[j] * pool_values.row(pool_row_of(table, rows.block_size, j), g)[d];
    out[idx] = sum;
}

static void check_paged(const PagedRows& rows, const AttentionDims& s) {
    if (s.n_heads < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("paged attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads,
             " (head_dim ", s.head_dim, ")");
    if (rows.n_rows < 1 || rows.block_size < 1 || rows.max_keys < 1)
        fail("paged attention: ", rows.n_rows, " rows, block size ", rows.block_size, ", ", rows.max_keys,
             " keys at most");
}

template <class Rows>
static void paged_attention_naive_launch(const float* d_q, Rows d_pool_keys, Rows d_pool_values,
                                         const PagedRows& rows, const AttentionDims& dims, float scale,
                                         float* d_scores, float* d_out) {
    const std::int64_t n_scores = std::int64_t{rows.n_rows} * dims.n_heads * rows.max_keys;
    paged_scores_kernel<<<grid_for(n_scores, 256), 256>>>(d_q, d_pool_keys, rows, dims.n_heads, dims.n_kv_heads,
                                                          dims.head_dim, scale, d_scores);
    CHECK_LAUNCH("paged_scores_kernel");
    softmax_rows(d_scores, rows.n_rows * dims.n_heads, rows.max_keys);
    const std::int64_t n_out = std::int64_t{rows.n_rows} * dims.n_heads * dims.head_dim;
    paged_values_kernel<<<grid_for(n_out, 256), 256>>>(d_scores, d_pool_values, rows, dims.n_heads,
                                                       dims.n_kv_heads, dims.head_dim, d_out);
    CHECK_LAUNCH("paged_values_kernel");
}

void paged_attention_naive(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                           float* d_out) {
    check_paged(rows, dims);
    check_kv_rows(pool_keys, pool_values, "paged_attention_naive");
    with_kv_readers(pool_keys, pool_values, dims, [&](auto key_rows, auto value_rows) {
        paged_attention_naive_launch(d_q, key_rows, value_rows, rows, dims, scale, d_scores, d_out);
    });
}

void paged_attention_naive(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                           float* d_out) {
    paged_attention_naive(d_q, KvRows::fp32(d_pool_keys), KvRows::fp32(d_pool_values), rows, dims, scale, d_scores,
                          d_out);
}

// ---- one block per (row, head) -------------------------------------------------------------------

constexpr int kPagedThreads = 128;

// grid: n_rows · n_heads blocks, block b = (row b / n_heads, head b % n_heads); dynamic shared
// memory: head_dim floats (the query).
template <class Rows>
__global__ void paged_attention_kernel(const float* q, Rows pool_keys, Rows pool_values,
                                       PagedRows rows, int n_heads, int n_kv_heads, int head_dim, float scale,
                                       float* scores, float* out) {
    extern __shared__ float q_head[];  // [head_dim]
    __shared__ float partials[32];
    const int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads, g = h / (n_heads / n_kv_heads);
    const int n_k = rows.positions[r] + 1;  // causal: positions 0 .. pos(r) of its own request
    const int block_size = rows.block_size;
    const int* table = rows.block_ids + rows.table_start[r];
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        q_head[d] = q[(std::int64_t{r} * n_heads + h) * head_dim + d];
    __syncthreads();

    // 1. a score for every key, and the largest this thread wrote. Key j is offset j % block_size
    //    of block table[j / block_size].
    float* s = scores + std::int64_t{blockIdx.x} * rows.max_keys;
    float thread_max = -INFINITY;
    for (int j = threadIdx.x; j < n_k; j += blockDim.x) {
        const auto k_row = pool_keys.row(pool_row_of(table, block_size, j), g);
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
        s[j] = dot * scale;
        thread_max = fmaxf(thread_max, s[j]);
    }

    // 2. exponentials and their sum (common.cuh); its last barrier publishes every s[j].
    const float sum = block_exp_sum(s, n_k, thread_max, partials);

    // 3. weighted sum of values, walking the table block by block: thread d owns output number d.
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int first = 0; first < n_k; first += block_size) {  // positions first .. first + block_size - 1
            const std::int64_t block_row = std::int64_t{table[first / block_size]} * block_size;
            const int in_block = min(block_size, n_k - first);
            for (int o = 0; o < in_block; ++o) acc += s[first + o] * pool_values.row(block_row + o, g)[d];
        }
        out[(std::int64_t{r} * n_heads + h) * head_dim + d] = acc / sum;
    }
}

template <class Rows>
static void paged_attention_launch(const float* d_q, Rows d_pool_keys, Rows d_pool_values, const PagedRows& rows,
                                   const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    const std::size_t shared_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
    const std::int64_t blocks = std::int64_t{rows.n_rows} * dims.n_heads;
    paged_attention_kernel<<<grid_for(blocks, 1), kPagedThreads, shared_bytes>>>(
        d_q, d_pool_keys, d_pool_values, rows, dims.n_heads, dims.n_kv_heads, dims.head_dim, scale, d_scores, d_out);
    CHECK_LAUNCH("paged_attention_kernel");
}

void paged_attention(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values, const PagedRows& rows,
                     const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    check_paged(rows, dims);
    check_kv_rows(pool_keys, pool_values, "paged_attention");
    if (static_cast<std::size_t>(dims.head_dim) * sizeof(float) > 48 * 1024)
        fail("paged_attention: head_dim ", dims.head_dim, " is too large");
    with_kv_readers(pool_keys, pool_values, dims, [&](auto key_rows, auto value_rows) {
        paged_attention_launch(d_q, key_rows, value_rows, rows, dims, scale, d_scores, d_out);
    });
}

void paged_attention(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                     const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                     float* d_out) {
    paged_attention(d_q, KvRows::fp32(d_pool_keys), KvRows::fp32(d_pool_values), rows, dims, scale, d_scores, d_out);
}

// ---- flash: online softmax, one block per (row, head) -------------------------------------------

constexpr int kPagedFlashThreads = 128;  // threads per block, and positions per tile
constexpr int kPagedFlashMaxHeadDim = 256;
constexpr int kPagedFlashOutPerThread = kPagedFlashMaxHeadDim / kPagedFlashThreads;  // o[] per thread

// grid: n_rows · n_heads blocks, block b = (row b / n_heads, head b % n_heads), kPagedFlashThreads
// threads; dynamic shared memory: head_dim floats (the query).
template <class Rows>
__global__ void paged_flash_attention_kernel(const float* q, Rows pool_keys, Rows pool_values, PagedRows rows,
                                             int n_heads, int n_kv_heads, int head_dim, float scale, float* out) {
    extern __shared__ float q_head[];  // [head_dim]
    __shared__ float s[kPagedFlashThreads];                  // the tile's scores
    __shared__ float p[kPagedFlashThreads];                  // exp(s[j] - m'), written in step c
    __shared__ std::int64_t pool_rows[kPagedFlashThreads];  // the tile's pool rows, written in step c
    const int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads, g = h / (n_heads / n_kv_heads);
    const int n_k = rows.positions[r] + 1;  // causal: positions 0 .. pos(r) of its own request
    const int* table = rows.block_ids + rows.table_start[r];
    const int tid = threadIdx.x;
    for (int d = tid; d < head_dim; d += blockDim.x) q_head[d] = q[(std::int64_t{r} * n_heads + h) * head_dim + d];
    __syncthreads();

    // The online softmax state: identical in every thread (each computes m and l itself, in the
    // same order); o[i] is output number tid + i · blockDim.x.
    float m = -INFINITY, l = 0.0f;
    float o[kPagedFlashOutPerThread];
    for (int i = 0; i < kPagedFlashOutPerThread; ++i) o[i] = 0.0f;

    for (int j0 = 0; j0 < n_k; j0 += kPagedFlashThreads) {  // positions j0 .. j0 + cols - 1
        const int cols = min(kPagedFlashThreads, n_k - j0);
        // a. thread tid scores position j0 + tid (the next tile's a runs after this tile's c barrier,
        //    so no thread still reads s then).
        std::int64_t my_row = 0;
        if (tid < cols) {
            my_row = pool_row_of(table, rows.block_size, j0 + tid);
            const auto k_row = pool_keys.row(my_row, g);
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
            s[tid] = dot * scale;
        }
        __syncthreads();
        // b. the new running max and the correction of what was summed so far.
        float tile_max = -INFINITY;
        for (int j = 0; j < cols; ++j) tile_max = fmaxf(tile_max, s[j]);
        const float m_new = fmaxf(m, tile_max);
        const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
        // c. the tile's weights, and its pool rows for the values (p and pool_rows are read in d
        //    of this tile only; the next tile writes them after its a barrier).
        if (tid < cols) {
            p[tid] = expf(s[tid] - m_new);
            pool_rows[tid] = my_row;
        }
        __syncthreads();
        // d. every thread: l; thread tid: its output numbers. Positions in order.
        l *= correction;
        for (int j = 0; j < cols; ++j) l += p[j];
        for (int i = 0; i < kPagedFlashOutPerThread; ++i) o[i] *= correction;
        for (int j = 0; j < cols; ++j) {
            const auto v_row = pool_values.row(pool_rows[j], g);
            for (int i = 0; i < kPagedFlashOutPerThread; ++i) {
                const int d = tid + i * kPagedFlashThreads;
                if (d < head_dim) o[i] += p[j] * v_row[d];
            }
        }
        m = m_new;
    }
    for (int i = 0; i < kPagedFlashOutPerThread; ++i) {
        const int d = tid + i * kPagedFlashThreads;
        if (d < head_dim) out[(std::int64_t{r} * n_heads + h) * head_dim + d] = o[i] / l;
    }
}

template <class Rows>
static void paged_flash_attention_launch(const float* d_q, Rows d_pool_keys, Rows d_pool_values,
                                         const PagedRows& rows, const AttentionDims& dims, float scale, float* d_out) {
    const std::size_t shared_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
    const std::int64_t blocks = std::int64_t{rows.n_rows} * dims.n_heads;
    paged_flash_attention_kernel<<<grid_for(blocks, 1), kPagedFlashThreads, shared_bytes>>>(
        d_q, d_pool_keys, d_pool_values, rows, dims.n_heads, dims.n_kv_heads, dims.head_dim, scale, d_out);
    CHECK_LAUNCH("paged_flash_attention_kernel");
}

void paged_flash_attention(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_out) {
    check_paged(rows, dims);
    check_kv_rows(pool_keys, pool_values, "paged_flash_attention");
    if (dims.head_dim > kPagedFlashMaxHeadDim)
        fail("paged_flash_attention: head_dim ", dims.head_dim, " is above the kernel's ", kPagedFlashMaxHeadDim);
    with_kv_readers(pool_keys, pool_values, dims, [&](auto key_rows, auto value_rows) {
        paged_flash_attention_launch(d_q, key_rows, value_rows, rows, dims, scale, d_out);
    });
}

void paged_flash_attention(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_out) {
    paged_flash_attention(d_q, KvRows::fp32(d_pool_keys), KvRows::fp32(d_pool_values), rows, dims, scale, d_out);
}

}  // namespace glass::cuda
