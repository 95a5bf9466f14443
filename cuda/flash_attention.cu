/// \file
/// \brief cuda/flash_attention.cu — FlashAttention on the GPU (see glass/flash_attention.hpp for the maths).
/// ```text
/// The same inputs and output as attention.cu's kernels: q [n_q, n_heads * head_dim] (rotated,
/// row i at position start_pos + i), keys/values [n_k, n_kv_heads * head_dim], n_k = start_pos + n_q;
/// out [n_q, n_heads * head_dim]. Neither kernel below writes a score to global memory.
///
/// Tiled (prefill and chunks): grid (query tiles of kFlashRows rows, heads), one thread per query
/// row. The block walks the keys in tiles of tile_k; all its threads copy the tile's K and V rows
/// into shared memory, then each thread updates its own row's running max m, sum l and
/// unnormalised output O (head_dim numbers, in registers/local memory) with the online softmax.
/// Key tiles after the block's last visible position, or (sliding window) before the first
/// position its first row sees, are never loaded. One score tile per
/// thread row (tile_k floats) is all the score storage there is.
///
/// Split-K decode (one query over a long cache): a single block per head would walk all n_k keys
/// alone and leave most of the GPU idle. Instead grid (splits, heads): block (s, h) reduces the
/// keys of its chunk to a partial (m_s, l_s, O_s), written to a small scratch
/// [heads, splits, head_dim + 2]; a second kernel combines the partials of each head:
///   M = max_s m_s,  L = Σ_s l_s · exp(m_s − M),  out = Σ_s O_s · exp(m_s − M) / L
/// (a split with no keys has l_s = 0 and m_s = −inf and contributes nothing; with a sliding window
/// the splits before the window's start have none). n_k may be an IntArg
/// read on the device (the decode graph): the grid is then sized for max_n_k keys and the splits
/// past the n_k it reads are empty.
///
/// Keys and values are fp32, or int8 with scales [n_k, n_kv_heads] (KvType::int8): both kernels are
/// templates over common.cuh's row reader, which gives back scale · (float)q, the CPU's value.
/// CudaSession uses them with CudaOptions::attention = flash (transformer.cpp).
/// ```
#include "common.cuh"

namespace glass::cuda {

namespace {

constexpr int kFlashRows = 32;       // query rows per block: one warp, one row per thread
constexpr int kFlashMaxHeadDim = 256;
constexpr int kFlashMaxTileK = 32;   // keys per tile (fewer when head_dim is large: shared memory)
constexpr int kSplitThreads = 128;   // threads of a split-K decode block

int flash_tile_k(int head_dim) { return head_dim <= 128 ? kFlashMaxTileK : kFlashMaxTileK / 2; }

void check_flash_dims(const AttentionDims& s, int n_q, int n_k) {
    if (s.n_heads < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("flash attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads, " (head_dim ",
             s.head_dim, ")");
    if (s.head_dim > kFlashMaxHeadDim)
        fail("flash attention: head_dim ", s.head_dim, " is above the kernels' ", kFlashMaxHeadDim);
    if (n_q < 1 || n_k < n_q) fail("flash attention: ", n_q, " queries over ", n_k, " keys");
}

}  // namespace

// ---- tiled: prefill and chunks ------------------------------------------------------------------

// grid (ceil(n_q / kFlashRows), n_heads), block kFlashRows; dynamic shared memory: 2 · tile_k · head_dim floats.
template <class Rows>
__global__ void flash_attention_kernel(const float* q, Rows keys, Rows values, int n_q, int start_pos,
                                       int n_heads, int n_kv_heads, int head_dim, int tile_k, float scale, int window,
                                       float softcap, float* out) {
    extern __shared__ float kv_tile[];  // [tile_k, head_dim] of K, then the same of V
    float* k_tile = kv_tile;
    float* v_tile = kv_tile + tile_k * head_dim;
    const int h = blockIdx.y, g = h / (n_heads / n_kv_heads);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's query row
    const bool active = i < n_q;
    const int n_k = start_pos + n_q;
    const int block_rows_end = static_cast<int>((blockIdx.x + 1) * blockDim.x);  // one past the block's last row
    const int block_last = min(start_pos + block_rows_end, n_k) - 1;               // the last key it may see
    // The first key any of its rows sees (its first row's window start); the row's own first key.
    const int block_first = first_visible_key(start_pos + static_cast<int>(blockIdx.x * blockDim.x), window);
    const int row_first = first_visible_key(start_pos + i, window);

    float q_row[kFlashMaxHeadDim], o[kFlashMaxHeadDim], s[kFlashMaxTileK];
    float m = -INFINITY, l = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
        q_row[d] = active ? q[std::int64_t{i} * n_heads * head_dim + std::int64_t{h} * head_dim + d] : 0.0f;
        o[d] = 0.0f;
    }
    for (int j0 = block_first; j0 <= block_last; j0 += tile_k) {
        const int cols = min(tile_k, n_k - j0);
        for (int idx = threadIdx.x; idx < cols * head_dim; idx += blockDim.x) {  // the whole block loads
            const int j = j0 + idx / head_dim, d = idx % head_dim;
            k_tile[idx] = keys.row(j, g)[d];
            v_tile[idx] = values.row(j, g)[d];
        }
        __syncthreads();
        // keys lo .. seen - 1 of this tile are the ones the row sees (window start .. its own position)
        const int lo = active ? max(0, row_first - j0) : 0;
        const int seen = active ? min(cols, start_pos + i + 1 - j0) : 0;
        if (seen > lo) {
            float tile_max = -INFINITY;
            for (int j = lo; j < seen; ++j) {
                float dot = 0.0f;
                for (int d = 0; d < head_dim; ++d) dot += q_row[d] * k_tile[j * head_dim + d];
                s[j] = attention_score(dot, scale, softcap);
                tile_max = fmaxf(tile_max, s[j]);
            }
            const float m_new = fmaxf(m, tile_max);
            const float correction = expf(m - m_new);  // 0 on the row's first tile (m = -inf)
            l *= correction;
            for (int d = 0; d < head_dim; ++d) o[d] *= correction;
            for (int j = lo; j < seen; ++j) {
                const float p = expf(s[j] - m_new);
                l += p;
                for (int d = 0; d < head_dim; ++d) o[d] += p * v_tile[j * head_dim + d];
            }
            m = m_new;
        }
        __syncthreads();  // the next tile overwrites k_tile / v_tile
    }
    if (active)
        for (int d = 0; d < head_dim; ++d)
            out[std::int64_t{i} * n_heads * head_dim + std::int64_t{h} * head_dim + d] = o[d] / l;
}

template <class Rows>
static void flash_attention_launch(const float* d_q, Rows d_keys, Rows d_values, int n_q, int start_pos,
                                   const AttentionDims& dims, float scale, float* d_out) {
    const int tile_k = flash_tile_k(dims.head_dim);
    const std::size_t shared_bytes = 2 * static_cast<std::size_t>(tile_k) * dims.head_dim * sizeof(float);
    const dim3 grid(static_cast<unsigned>((n_q + kFlashRows - 1) / kFlashRows), static_cast<unsigned>(dims.n_heads));
    flash_attention_kernel<<<grid, kFlashRows, shared_bytes>>>(d_q, d_keys, d_values, n_q, start_pos, dims.n_heads,
                                                               dims.n_kv_heads, dims.head_dim, tile_k, scale,
                                                               dims.window, dims.softcap, d_out);
    CHECK_LAUNCH("flash_attention_kernel");
}

void flash_attention(const float* d_q, const KvRows& keys, const KvRows& values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_out) {
    check_flash_dims(dims, n_q, start_pos + n_q);
    check_kv_rows(keys, values, "flash_attention");
    with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
        flash_attention_launch(d_q, key_rows, value_rows, n_q, start_pos, dims, scale, d_out);
    });
}

void flash_attention(const float* d_q, const float* d_keys, const float* d_values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_out) {
    flash_attention(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_q, start_pos, dims, scale, d_out);
}

// ---- split-K decode -----------------------------------------------------------------------------

// grid (splits, n_heads), block kSplitThreads; dynamic shared memory: head_dim + chunk floats.
// partial [n_heads, splits, head_dim + 2]: O_s (head_dim numbers), then m_s, then l_s.
template <class Rows>
__global__ void flash_decode_partial_kernel(const float* q, Rows keys, Rows values, IntArg n_keys, int n_heads,
                                            int n_kv_heads, int head_dim, int chunk, float scale, int window,
                                            float softcap, float* partial) {
    extern __shared__ float shared[];  // q_head [head_dim], then the chunk's scores [chunk]
    __shared__ float reduce[32];
    float* q_head = shared;
    float* s = shared + head_dim;
    const int split = blockIdx.x, h = blockIdx.y, g = h / (n_heads / n_kv_heads);
    const int n_k = value_of(n_keys);  // from device memory under the decode graph
    // Its chunk's keys that the query (position n_k − 1) sees: from j0, past its window's start.
    const int j0 = max(split * chunk, first_visible_key(n_k - 1, window));
    const int cols = max(0, min(split * chunk + chunk, n_k) - j0);
    float* mine = partial + (std::int64_t{h} * gridDim.x + split) * (head_dim + 2);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_head[d] = q[std::int64_t{h} * head_dim + d];
    __syncthreads();

    float thread_max = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const auto k_row = keys.row(j0 + j, g);
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
        s[j] = attention_score(dot, scale, softcap);
        thread_max = fmaxf(thread_max, s[j]);
    }
    const float m = block_max(thread_max, reduce);  // -inf when the chunk has no keys
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    const float l = block_sum(sum, reduce);  // ends with a barrier: every s[j] is visible
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < cols; ++j) acc += s[j] * values.row(j0 + j, g)[d];
        mine[d] = acc;
    }
    if (threadIdx.x == 0) {
        mine[head_dim] = m;
        mine[head_dim + 1] = l;
    }
}

// grid n_heads, block: threads over head_dim.
__global__ void flash_decode_combine_kernel(const float* partial, int splits, int head_dim, float* out) {
    const int h = blockIdx.x;
    const float* p = partial + std::int64_t{h} * splits * (head_dim + 2);
    float big = -INFINITY;
    for (int s = 0; s < splits; ++s) big = fmaxf(big, p[std::int64_t{s} * (head_dim + 2) + head_dim]);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float num = 0.0f, den = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float* part = p + std::int64_t{s} * (head_dim + 2);
            if (!(part[head_dim + 1] > 0.0f)) continue;  // an empty split: m = -inf, nothing to add
            const float w = expf(part[head_dim] - big);
            num += part[d] * w;
            den += part[head_dim + 1] * w;
        }
        out[std::int64_t{h} * head_dim + d] = num / den;
    }
}

int flash_decode_splits(int n_k, int chunk) { return (n_k + chunk - 1) / chunk; }

template <class Rows>
static void flash_decode_launch(const float* d_q, Rows d_keys, Rows d_values, IntArg n_k, int splits,
                                const AttentionDims& dims, float scale, int chunk, float* d_partial, float* d_out) {
    const std::size_t shared_bytes = (static_cast<std::size_t>(dims.head_dim) + chunk) * sizeof(float);
    flash_decode_partial_kernel<<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(dims.n_heads)),
                                  kSplitThreads, shared_bytes>>>(d_q, d_keys, d_values, n_k, dims.n_heads,
                                                                 dims.n_kv_heads, dims.head_dim, chunk, scale,
                                                                 dims.window, dims.softcap, d_partial);
    CHECK_LAUNCH("flash_decode_partial_kernel");
    flash_decode_combine_kernel<<<static_cast<unsigned>(dims.n_heads), 128>>>(d_partial, splits, dims.head_dim, d_out);
    CHECK_LAUNCH("flash_decode_combine_kernel");
}

void flash_decode(const float* d_q, const KvRows& keys, const KvRows& values, IntArg n_k, int max_n_k,
                  const AttentionDims& dims, float scale, int chunk, float* d_partial, float* d_out) {
    if (!n_k.on_device() && n_k.value != max_n_k)
        fail("flash decode: n_k ", n_k.value, " given as a number must equal max_n_k ", max_n_k);
    check_flash_dims(dims, 1, max_n_k);
    check_kv_rows(keys, values, "flash_decode");
    if (chunk < 1 || chunk > 4096) fail("flash decode: chunk of ", chunk, " keys is outside [1, 4096]");
    const int splits = flash_decode_splits(max_n_k, chunk);
    with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
        flash_decode_launch(d_q, key_rows, value_rows, n_k, splits, dims, scale, chunk, d_partial, d_out);
    });
}

void flash_decode(const float* d_q, const float* d_keys, const float* d_values, int n_k, const AttentionDims& dims,
                  float scale, int chunk, float* d_partial, float* d_out) {
    flash_decode(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_k, n_k, dims, scale, chunk, d_partial, d_out);
}

}  // namespace glass::cuda
