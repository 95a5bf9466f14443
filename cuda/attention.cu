/// \file
/// \brief cuda/attention.cu — journey step 4 on the GPU (see glass/attention.hpp for the maths), for
/// one sequence's cache and for a serving batch's paged pool, each kernel written once.
/// ```text
/// In:  q [n_rows, n_heads * head_dim] (rotated); row r sits at position pos(r) and sees keys
///      0 .. pos(r) of its own sequence (causal);
///      keys, values: one layer's cache rows [rows, n_kv_heads * head_dim] (fp32, or int8 with
///      scales [rows, n_kv_heads]);
///      where the rows sit (RowPlacement, device_kv_cache.hpp): one sequence (pos(r) = start + r, key
///      position p is cache row p) or a serving batch (pos(r) from the step, key position p of
///      row r's request is pool row table[p / block_size] · block_size + p % block_size).
/// Out: out [n_rows, n_heads * head_dim], each head's softmax-weighted sum of values.
/// Query head h reads KV head g = h / (n_heads / n_kv_heads) (GQA: consecutive heads share).
///
/// Every kernel is one template over two small readers from common.cuh: the row reader (F32Rows /
/// Int8Rows: int8 comes back as scale · (float)q, the CPU's dequantized value) and the locator
/// (SequenceLocator / BatchLocator: where row r's keys are). So the contiguous cache of
/// CudaSession and the paged pool of CudaPagedBackend run the same three kernels.
///
/// Naive (attention_rows_naive, any rows; the version to read first): three kernels —
///   1. scores [n_rows, n_heads, max_keys] = q_h · k_g(p) · scale (soft-capped, Gemma 2) for the
///      p a row sees, -inf for the others: after pos(r), and with a sliding window before
///      pos(r) − window + 1
///   2. softmax over each row (softmax.cu)
///   3. out = weights · V, one thread per output number, the keys it sees in order
///   Its scores are n_rows · n_heads · max_keys floats: 512 MB for 32 heads over 2,048 positions,
///   which is why fused "flash" attention exists.
/// Per row (attention_rows; CudaSession's decode, the batch's per_row): one block per (row, head)
///   does all three: threads split the keys for the scores and the softmax's max and sum (its
///   scores in a scratch row of max_keys floats), then split head_dim for the weighted sum
///   (coalesced reads of V rows).
/// Flash per row (attention_rows_flash): one block of kFlashRowThreads (128) threads per (row,
///   head), and no score ever goes to global memory. The block walks the positions f .. pos(r) it
///   sees (f = 0, or the start of its sliding window) in tiles of 128 consecutive positions (tile
///   t = positions t0 .. t0 + 127 with t0 = f + 128t, each looked up through the locator, so a
///   tile may span several pool blocks), keeping the online softmax state of
///   glass/flash_attention.hpp — running max m, running sum l and the unnormalised output
///   o[head_dim]:
///     a. thread j: s[j] = q_h · k(t0 + j) · scale (soft-capped)          (shared, 128 floats)
///     b. every thread: m' = max(m, max_j s[j]), c = exp(m − m')            (0 on the first tile)
///     c. thread j: p[j] = exp(s[j] − m')                                  (shared, 128 floats)
///     d. every thread: l = l · c + Σ_j p[j]; thread d: o[d] = o[d] · c + Σ_j p[j] · v(t0 + j)[d]
///   then out[r, h] = o / l. head_dim ≤ 256 (each thread owns output numbers d = tid, tid + 128).
///   Two barriers per tile; s, p and the tile's cache rows sit in separate shared arrays so that
///   a step never overwrites what a slower thread may still read.
/// (flash_attention.cu holds the other flash kernels: query tiles sharing K/V tiles for one
/// sequence's prefill, and split-K decode.)
///
/// Batch invariance. The serving engine's tests demand that a request's tokens equal the request
/// run alone, so no number a row gets may depend on the rest of the batch. Here nothing does:
/// which keys a thread takes, and in which order the sums run, depend on pos(r) only. In the naive
/// softmax the row is max_keys wide (the batch's longest), but the masked tail adds exact zeros
/// to the sums and leaves the maximum alone, so the width changes nothing. In the flash kernel
/// the tiles are fixed by pos(r) and the window alone, every dot product runs
/// d = 0 .. head_dim − 1 in one thread, and every thread sums the tile's maximum, l and its o[d]
/// serially in position order.
/// ```
#include "common.cuh"

namespace glass::cuda {

// ---- naive ---------------------------------------------------------------------------------------

// scores [n_rows, n_heads, width]; one thread per score.
template <class Rows, class Locator>
__global__ void attention_scores_kernel(const float* q, Rows keys, Locator loc, int n_rows, int n_heads,
                                        int n_kv_heads, int head_dim, float scale, int window, float softcap,
                                        float* scores) {
    const int width = loc.width();
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{n_rows} * n_heads * width) return;
    const int j = static_cast<int>(idx % width);                          // key position
    const int h = static_cast<int>((idx / width) % n_heads);              // query head
    const int r = static_cast<int>(idx / (std::int64_t{width} * n_heads));  // row
    const int g = h / (n_heads / n_kv_heads);                             // its KV head
    const int pos = loc.position(r);
    // causal mask: its future (and, in a batch, past its request's end); a window hides the far past
    if (j > pos || j < first_visible_key(pos, window)) {
        scores[idx] = -INFINITY;
        return;
    }
    const float* q_row = q + (std::int64_t{r} * n_heads + h) * head_dim;
    const auto k_row = keys.row(loc.key_row(r, j), g);
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += q_row[d] * k_row[d];
    scores[idx] = attention_score(dot, scale, softcap);
}

// out [n_rows, n_heads, head_dim]; one thread per output number, keys in order.
template <class Rows, class Locator>
__global__ void attention_values_kernel(const float* weights, Rows values, Locator loc, int n_rows, int n_heads,
                                        int n_kv_heads, int head_dim, int window, float* out) {
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{n_rows} * n_heads * head_dim) return;
    const int d = static_cast<int>(idx % head_dim);
    const int h = static_cast<int>((idx / head_dim) % n_heads);
    const int r = static_cast<int>(idx / (std::int64_t{head_dim} * n_heads));
    const int g = h / (n_heads / n_kv_heads);
    const float* w_row = weights + (std::int64_t{r} * n_heads + h) * loc.width();
    float sum = 0.0f;
    const int pos = loc.position(r);
    for (int j = first_visible_key(pos, window); j <= pos; ++j)  // masked weights are exactly 0: not read
        sum += w_row[j] * values.row(loc.key_row(r, j), g)[d];
    out[idx] = sum;
}

static void check_rows(const RowPlacement& rows, const AttentionDims& s, const char* what) {
    if (s.n_heads < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail(what, ": n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads, " (head_dim ",
             s.head_dim, ")");
    if (rows.n_rows < 1 || (rows.batch() && (rows.block_size < 1 || rows.max_keys < 1)))
        fail(what, ": ", rows.n_rows, " rows, ", rows.max_keys, " keys at most",
             rows.batch() ? ", block size " : "", rows.batch() ? std::to_string(rows.block_size) : "");
}

void check_kv_rows(const KvRows& keys, const KvRows& values, const char* what) {
    const auto set = [](const KvRows& r) {
        return r.type() == KvType::fp32 ? r.f32 != nullptr : r.q != nullptr && r.scales != nullptr;
    };
    if (!set(keys) || !set(values) || keys.type() != values.type())
        fail(what, ": keys (", to_string(keys.type()), ") and values (", to_string(values.type()),
             ") must both be given, of one type, int8 with its scales");
}

void attention_rows_naive(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                          const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    check_rows(rows, dims, "attention_naive");
    if (rows.max_keys < 1) fail("attention_naive: the scores' width (max_keys) must be known on the host");
    check_kv_rows(keys, values, "attention_naive");
    const std::int64_t n_scores = std::int64_t{rows.n_rows} * dims.n_heads * rows.max_keys;
    const std::int64_t n_out = std::int64_t{rows.n_rows} * dims.n_heads * dims.head_dim;
    with_locator(rows, [&](auto loc) {
        with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
            attention_scores_kernel<<<grid_for(n_scores, 256), 256>>>(d_q, key_rows, loc, rows.n_rows, dims.n_heads,
                                                                      dims.n_kv_heads, dims.head_dim, scale, dims.window,
                                                                      dims.softcap, d_scores);
            CHECK_LAUNCH("attention_scores_kernel");
            softmax_rows(d_scores, rows.n_rows * dims.n_heads, rows.max_keys);
            attention_values_kernel<<<grid_for(n_out, 256), 256>>>(d_scores, value_rows, loc, rows.n_rows,
                                                                   dims.n_heads, dims.n_kv_heads, dims.head_dim,
                                                                   dims.window, d_out);
            CHECK_LAUNCH("attention_values_kernel");
        });
    });
}

// ---- one block per (row, head) -------------------------------------------------------------------

constexpr int kRowThreads = 128;

// grid: n_rows · n_heads blocks, block b = (row b / n_heads, head b % n_heads); dynamic shared
// memory: head_dim floats (the query).
template <class Rows, class Locator>
__global__ void attention_row_kernel(const float* q, Rows keys, Rows values, Locator loc, int n_heads, int n_kv_heads,
                                     int head_dim, float scale, int window, float softcap, float* scores, float* out) {
    extern __shared__ float q_head[];  // [head_dim]
    __shared__ float partials[32];
    const int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads, g = h / (n_heads / n_kv_heads);
    // causal: positions first .. pos(r) of its own sequence (first = 0 unless a window hides some)
    const int first = first_visible_key(loc.position(r), window);
    const int n_k = loc.position(r) + 1 - first;  // keys seen; s[j] and its value are position first + j
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        q_head[d] = q[(std::int64_t{r} * n_heads + h) * head_dim + d];
    __syncthreads();

    // 1. a score for every key, and the largest this thread wrote.
    float* s = scores + std::int64_t{blockIdx.x} * loc.width();
    float thread_max = -INFINITY;
    for (int j = threadIdx.x; j < n_k; j += blockDim.x) {
        const auto k_row = keys.row(loc.key_row(r, first + j), g);
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
        s[j] = attention_score(dot, scale, softcap);
        thread_max = fmaxf(thread_max, s[j]);
    }

    // 2. exponentials and their sum (common.cuh); its last barrier publishes every s[j].
    const float sum = block_exp_sum(s, n_k, thread_max, partials);

    // 3. weighted sum of values: thread d owns output number d (loop if head_dim > threads).
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n_k; ++j) acc += s[j] * values.row(loc.key_row(r, first + j), g)[d];
        out[(std::int64_t{r} * n_heads + h) * head_dim + d] = acc / sum;
    }
}

void attention_rows(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                    const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    check_rows(rows, dims, "attention_rows");
    check_kv_rows(keys, values, "attention_rows");
    if (static_cast<std::size_t>(dims.head_dim) * sizeof(float) > 48 * 1024)
        fail("attention_rows: head_dim ", dims.head_dim, " is too large");
    const std::size_t shared_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
    const std::int64_t blocks = std::int64_t{rows.n_rows} * dims.n_heads;
    with_locator(rows, [&](auto loc) {
        with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
            attention_row_kernel<<<grid_for(blocks, 1), kRowThreads, shared_bytes>>>(
                d_q, key_rows, value_rows, loc, dims.n_heads, dims.n_kv_heads, dims.head_dim, scale, dims.window,
                dims.softcap, d_scores, d_out);
            CHECK_LAUNCH("attention_row_kernel");
        });
    });
}

// ---- flash, one block per (row, head): online softmax ---------------------------------------------

constexpr int kFlashRowThreads = 128;  // threads per block, and positions per tile
constexpr int kFlashRowMaxHeadDim = 256;
constexpr int kFlashRowOutPerThread = kFlashRowMaxHeadDim / kFlashRowThreads;  // o[] per thread

// grid: n_rows · n_heads blocks, block b = (row b / n_heads, head b % n_heads), kFlashRowThreads
// threads; dynamic shared memory: head_dim floats (the query).
template <class Rows, class Locator>
__global__ void attention_row_flash_kernel(const float* q, Rows keys, Rows values, Locator loc, int n_heads,
                                           int n_kv_heads, int head_dim, float scale, int window, float softcap,
                                           float* out) {
    extern __shared__ float q_head[];  // [head_dim]
    __shared__ float s[kFlashRowThreads];                  // the tile's scores
    __shared__ float p[kFlashRowThreads];                  // exp(s[j] - m'), written in step c
    __shared__ std::int64_t key_rows[kFlashRowThreads];    // the tile's cache rows, written in step c
    const int r = blockIdx.x / n_heads, h = blockIdx.x % n_heads, g = h / (n_heads / n_kv_heads);
    const int n_k = loc.position(r) + 1;  // causal: positions first .. pos(r) of its own sequence
    const int first = first_visible_key(loc.position(r), window);
    const int tid = threadIdx.x;
    for (int d = tid; d < head_dim; d += blockDim.x) q_head[d] = q[(std::int64_t{r} * n_heads + h) * head_dim + d];
    __syncthreads();

    // The online softmax state: identical in every thread (each computes m and l itself, in the
    // same order); o[i] is output number tid + i · blockDim.x.
    float m = -INFINITY, l = 0.0f;
    float o[kFlashRowOutPerThread];
    for (int i = 0; i < kFlashRowOutPerThread; ++i) o[i] = 0.0f;

    for (int j0 = first; j0 < n_k; j0 += kFlashRowThreads) {  // positions j0 .. j0 + cols - 1
        const int cols = min(kFlashRowThreads, n_k - j0);
        // a. thread tid scores position j0 + tid (the next tile's a runs after this tile's c barrier,
        //    so no thread still reads s then).
        std::int64_t my_row = 0;
        if (tid < cols) {
            my_row = loc.key_row(r, j0 + tid);
            const auto k_row = keys.row(my_row, g);
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
            s[tid] = attention_score(dot, scale, softcap);
        }
        __syncthreads();
        // b. the new running max and the correction of what was summed so far.
        float tile_max = -INFINITY;
        for (int j = 0; j < cols; ++j) tile_max = fmaxf(tile_max, s[j]);
        const float m_new = fmaxf(m, tile_max);
        const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
        // c. the tile's weights, and its cache rows for the values (p and key_rows are read in d
        //    of this tile only; the next tile writes them after its a barrier).
        if (tid < cols) {
            p[tid] = expf(s[tid] - m_new);
            key_rows[tid] = my_row;
        }
        __syncthreads();
        // d. every thread: l; thread tid: its output numbers. Positions in order.
        l *= correction;
        for (int j = 0; j < cols; ++j) l += p[j];
        for (int i = 0; i < kFlashRowOutPerThread; ++i) o[i] *= correction;
        for (int j = 0; j < cols; ++j) {
            const auto v_row = values.row(key_rows[j], g);
            for (int i = 0; i < kFlashRowOutPerThread; ++i) {
                const int d = tid + i * kFlashRowThreads;
                if (d < head_dim) o[i] += p[j] * v_row[d];
            }
        }
        m = m_new;
    }
    for (int i = 0; i < kFlashRowOutPerThread; ++i) {
        const int d = tid + i * kFlashRowThreads;
        if (d < head_dim) out[(std::int64_t{r} * n_heads + h) * head_dim + d] = o[i] / l;
    }
}

void attention_rows_flash(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                          const AttentionDims& dims, float scale, float* d_out) {
    check_rows(rows, dims, "attention_rows_flash");
    check_kv_rows(keys, values, "attention_rows_flash");
    if (dims.head_dim > kFlashRowMaxHeadDim)
        fail("attention_rows_flash: head_dim ", dims.head_dim, " is above the kernel's ", kFlashRowMaxHeadDim);
    const std::size_t shared_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
    const std::int64_t blocks = std::int64_t{rows.n_rows} * dims.n_heads;
    with_locator(rows, [&](auto loc) {
        with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
            attention_row_flash_kernel<<<grid_for(blocks, 1), kFlashRowThreads, shared_bytes>>>(
                d_q, key_rows, value_rows, loc, dims.n_heads, dims.n_kv_heads, dims.head_dim, scale, dims.window,
                dims.softcap, d_out);
            CHECK_LAUNCH("attention_row_flash_kernel");
        });
    });
}

// ---- one sequence, spelled out -------------------------------------------------------------------

void attention_naive(const float* d_q, const KvRows& keys, const KvRows& values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    if (n_q < 1 || start_pos < 0) fail("attention: ", n_q, " queries starting at ", start_pos);
    attention_rows_naive(d_q, keys, values, RowPlacement::sequence(n_q, start_pos), dims, scale, d_scores, d_out);
}

void attention_naive(const float* d_q, const float* d_keys, const float* d_values, int n_q,
                     int start_pos, const AttentionDims& dims, float scale, float* d_scores,
                     float* d_out) {
    attention_naive(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_q, start_pos, dims, scale, d_scores, d_out);
}

void attention_decode(const float* d_q, const KvRows& keys, const KvRows& values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    if (!n_k.on_device() && n_k.value < 1) fail("attention_decode: ", n_k.value, " keys");  // a device n_k: the caller checked it
    attention_rows(d_q, keys, values, RowPlacement::sequence_ending(1, n_k), dims, scale, d_scores, d_out);
}

void attention_decode(const float* d_q, const float* d_keys, const float* d_values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    attention_decode(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_k, dims, scale, d_scores, d_out);
}

}  // namespace glass::cuda
