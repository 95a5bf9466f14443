/// \file
/// \brief cuda/attention.cu — journey step 4 on the GPU (see glass/attention.hpp for the maths).
/// ```text
/// In:  q [n_q, n_heads * head_dim] (rotated), row i at position start_pos + i;
///      keys, values [n_k, n_kv_heads * head_dim], n_k = start_pos + n_q (the cache rows so far).
/// Out: out [n_q, n_heads * head_dim], each head's softmax-weighted sum of values.
/// Query head h reads KV head g = h / (n_heads / n_kv_heads) (GQA: consecutive heads share).
/// Keys and values are fp32, or int8 with scales [n_k, n_kv_heads] (KvType::int8, the cache of
/// kv_write_int8): every kernel below is one template over common.cuh's row reader (F32Rows /
/// Int8Rows), which gives back scale · (float)q for int8, the CPU's dequantized value; decode then
/// reads a quarter of the bytes.
///
/// Naive (any n_q; prefill): three kernels, the textbook steps made visible —
///   1. scores [n_heads, n_q, n_k] = Q_h K_gᵀ · scale, with -inf where key j > start_pos + i
///   2. softmax over each row (softmax.cu)
///   3. out = weights · V_g, one thread per output number
/// Its scores matrix is n_heads · n_q · n_k floats: 512 MB for 32 heads over 2,048 positions, which
/// is why fused "flash" attention exists; this is the version to read first.
///
/// Decode (n_q = 1, the newest position sees every cached key): one block per query head does all
/// three steps, its scores in a [n_heads, n_k] scratch row: threads split the keys for scores and
/// the softmax reductions, then split head_dim for the weighted sum (coalesced reads of V rows).
/// ```
#include "common.cuh"

namespace glass::cuda {

// ---- naive -------------------------------------------------------------------------------------

template <class Rows>
__global__ void attention_scores_kernel(const float* q, Rows keys, int n_q, int n_k,
                                        int start_pos, int n_heads, int n_kv_heads, int head_dim,
                                        float scale, float* scores) {
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{n_heads} * n_q * n_k) return;
    const int j = static_cast<int>(idx % n_k);                  // key position
    const int i = static_cast<int>((idx / n_k) % n_q);          // query row
    const int h = static_cast<int>(idx / (std::int64_t{n_k} * n_q));  // query head
    const int g = h / (n_heads / n_kv_heads);                   // its KV head
    if (j > start_pos + i) {  // causal mask: the future is invisible
        scores[idx] = -INFINITY;
        return;
    }
    const float* q_row = q + std::int64_t{i} * n_heads * head_dim + std::int64_t{h} * head_dim;
    const auto k_row = keys.row(j, g);
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += q_row[d] * k_row[d];
    scores[idx] = dot * scale;
}

template <class Rows>
__global__ void attention_values_kernel(const float* weights, Rows values, int n_q, int n_k,
                                        int start_pos, int n_heads, int n_kv_heads, int head_dim,
                                        float* out) {
    const std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (idx >= std::int64_t{n_q} * n_heads * head_dim) return;  // idx walks out [n_q, n_heads, head_dim]
    const int d = static_cast<int>(idx % head_dim);
    const int h = static_cast<int>((idx / head_dim) % n_heads);
    const int i = static_cast<int>(idx / (std::int64_t{head_dim} * n_heads));
    const int g = h / (n_heads / n_kv_heads);
    const float* w_row = weights + (std::int64_t{h} * n_q + i) * n_k;
    const int last_visible = min(start_pos + i, n_k - 1);  // masked weights are exactly 0
    float sum = 0.0f;
    for (int j = 0; j <= last_visible; ++j)
        sum += w_row[j] * values.row(j, g)[d];
    out[idx] = sum;
}

static void check_dims(const AttentionDims& s, int n_q, int n_k) {
    if (s.n_heads < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads,
             " (head_dim ", s.head_dim, ")");
    if (n_q < 1 || n_k < n_q) fail("attention: ", n_q, " queries over ", n_k, " keys");
}

void check_kv_rows(const KvRows& keys, const KvRows& values, const char* what) {
    const auto set = [](const KvRows& r) {
        return r.type() == KvType::fp32 ? r.f32 != nullptr : r.q != nullptr && r.scales != nullptr;
    };
    if (!set(keys) || !set(values) || keys.type() != values.type())
        fail(what, ": keys (", to_string(keys.type()), ") and values (", to_string(values.type()),
             ") must both be given, of one type, int8 with its scales");
}

template <class Rows>
static void attention_naive_launch(const float* d_q, Rows d_keys, Rows d_values, int n_q, int start_pos,
                                   const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    const int n_k = start_pos + n_q;
    const std::int64_t n_scores = std::int64_t{dims.n_heads} * n_q * n_k;
    attention_scores_kernel<<<grid_for(n_scores, 256), 256>>>(d_q, d_keys, n_q, n_k, start_pos,
                                                              dims.n_heads, dims.n_kv_heads,
                                                              dims.head_dim, scale, d_scores);
    CHECK_LAUNCH("attention_scores_kernel");
    softmax_rows(d_scores, dims.n_heads * n_q, n_k);
    const std::int64_t n_out = std::int64_t{n_q} * dims.n_heads * dims.head_dim;
    attention_values_kernel<<<grid_for(n_out, 256), 256>>>(d_scores, d_values, n_q, n_k, start_pos,
                                                           dims.n_heads, dims.n_kv_heads,
                                                           dims.head_dim, d_out);
    CHECK_LAUNCH("attention_values_kernel");
}

void attention_naive(const float* d_q, const KvRows& keys, const KvRows& values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    check_dims(dims, n_q, start_pos + n_q);
    check_kv_rows(keys, values, "attention_naive");
    with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
        attention_naive_launch(d_q, key_rows, value_rows, n_q, start_pos, dims, scale, d_scores, d_out);
    });
}

void attention_naive(const float* d_q, const float* d_keys, const float* d_values, int n_q,
                     int start_pos, const AttentionDims& dims, float scale, float* d_scores,
                     float* d_out) {
    attention_naive(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_q, start_pos, dims, scale, d_scores, d_out);
}

// ---- decode ------------------------------------------------------------------------------------

constexpr int kDecodeThreads = 256;

// grid: one block per query head; dynamic shared memory: head_dim floats (the query).
template <class Rows>
__global__ void attention_decode_kernel(const float* q, Rows keys, Rows values,
                                        IntArg n_keys, int n_heads, int n_kv_heads, int head_dim,
                                        float scale, float* scores, float* out) {
    extern __shared__ float q_head[];  // [head_dim]
    __shared__ float partials[32];
    const int n_k = value_of(n_keys);  // from device memory under the decode graph
    const int h = blockIdx.x, g = h / (n_heads / n_kv_heads);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_head[d] = q[std::int64_t{h} * head_dim + d];
    __syncthreads();

    // 1. scores for every cached key, and the largest this thread wrote.
    float* s = scores + std::int64_t{h} * n_k;
    float thread_max = -INFINITY;
    for (int j = threadIdx.x; j < n_k; j += blockDim.x) {
        const auto k_row = keys.row(j, g);
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q_head[d] * k_row[d];
        s[j] = dot * scale;
        thread_max = fmaxf(thread_max, s[j]);
    }

    // 2. exponentials and their sum (common.cuh); its last barrier publishes every s[j].
    const float sum = block_exp_sum(s, n_k, thread_max, partials);

    // 3. weighted sum of values: thread d owns output number d (loop if head_dim > threads).
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n_k; ++j) acc += s[j] * values.row(j, g)[d];
        out[std::int64_t{h} * head_dim + d] = acc / sum;
    }
}

template <class Rows>
static void attention_decode_launch(const float* d_q, Rows d_keys, Rows d_values, IntArg n_k,
                                    const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    const std::size_t shared_bytes = static_cast<std::size_t>(dims.head_dim) * sizeof(float);
    attention_decode_kernel<<<static_cast<unsigned>(dims.n_heads), kDecodeThreads, shared_bytes>>>(
        d_q, d_keys, d_values, n_k, dims.n_heads, dims.n_kv_heads, dims.head_dim, scale, d_scores, d_out);
    CHECK_LAUNCH("attention_decode_kernel");
}

void attention_decode(const float* d_q, const KvRows& keys, const KvRows& values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    check_dims(dims, 1, n_k.on_device() ? 1 : n_k.value);  // a device n_k: the caller checked it
    check_kv_rows(keys, values, "attention_decode");
    if (static_cast<std::size_t>(dims.head_dim) * sizeof(float) > 48 * 1024)
        fail("attention_decode: head_dim ", dims.head_dim, " is too large");
    with_kv_readers(keys, values, dims, [&](auto key_rows, auto value_rows) {
        attention_decode_launch(d_q, key_rows, value_rows, n_k, dims, scale, d_scores, d_out);
    });
}

void attention_decode(const float* d_q, const float* d_keys, const float* d_values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out) {
    attention_decode(d_q, KvRows::fp32(d_keys), KvRows::fp32(d_values), n_k, dims, scale, d_scores, d_out);
}

}  // namespace glass::cuda
