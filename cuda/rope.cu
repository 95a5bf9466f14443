/// \file
/// \brief cuda/rope.cu — journey step 3 on the GPU: rotate q or k by position (see glass/rope.hpp).
/// ```text
/// In:  x [n_tokens, n_heads * head_dim], row t at position start_pos + t (start_pos may be read
///      from device memory when the kernel runs: IntArg, for the decode graph) — or, for a
///      serving step whose rows belong to several requests, at positions[t] (rope_rows);
///      frequencies [head_dim / 2] = glass::rope_frequency(i, head_dim, theta), made on the host.
/// Out: x rotated in place; pair i of every head turned by angle pos · frequency[i].
///
/// One thread per (token, head, pair): it reads its two numbers, rotates, writes them back; no two
/// threads touch the same number. The angle is the same fp32 product as on the CPU (the frequency
/// table is bit-identical, being computed by the same host function); cosf/sinf are CUDA's
/// full-range versions (within 2 ulp; this file must never be built with --use_fast_math).
/// ```
#include <vector>

#include "common.cuh"

namespace glass::cuda {

// positions: null (row t at start_pos + t) or one position per row, in device memory.
__global__ void rope_kernel(float* x, int n_tokens, int n_heads, int head_dim, IntArg start_pos,
                            const int* positions, const float* frequencies, bool adjacent_pairs) {
    const int half = head_dim / 2;
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= std::int64_t{n_tokens} * n_heads * half) return;
    const int pair = static_cast<int>(i % half);
    const int head = static_cast<int>((i / half) % n_heads);
    const std::int64_t t = i / (std::int64_t{half} * n_heads);
    float* v = x + t * n_heads * head_dim + std::int64_t{head} * head_dim;  // this head's vector
    const std::int64_t pos = positions ? positions[t] : value_of(start_pos) + t;
    const float angle = static_cast<float>(pos) * frequencies[pair];
    const float c = cosf(angle), s = sinf(angle);
    const int a = adjacent_pairs ? 2 * pair : pair;
    const int b = adjacent_pairs ? 2 * pair + 1 : pair + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
}

void rope(float* d_x, int n_tokens, int n_heads, int head_dim, IntArg start_pos,
          const float* d_frequencies, RopeLayout layout) {
    if (n_tokens < 1 || n_heads < 1 || head_dim < 2 || head_dim % 2 != 0 ||
        (!start_pos.on_device() && start_pos.value < 0))
        fail("rope: bad shape: ", n_tokens, " tokens, ", n_heads, " heads, head_dim ", head_dim,
             ", start_pos ", start_pos.value, " (head_dim must be even and >= 2)");
    const std::int64_t n = std::int64_t{n_tokens} * n_heads * (head_dim / 2);
    rope_kernel<<<grid_for(n, 256), 256>>>(d_x, n_tokens, n_heads, head_dim, start_pos, nullptr,
                                           d_frequencies, layout == RopeLayout::adjacent_pairs);
    CHECK_LAUNCH("rope_kernel");
}

void rope_rows(float* d_x, int n_rows, int n_heads, int head_dim, const int* d_positions,
               const float* d_frequencies, RopeLayout layout) {
    if (n_rows < 1 || n_heads < 1 || head_dim < 2 || head_dim % 2 != 0 || !d_positions)
        fail("rope_rows: bad shape: ", n_rows, " rows, ", n_heads, " heads, head_dim ", head_dim,
             d_positions ? "" : ", no positions", " (head_dim must be even and >= 2)");
    const std::int64_t n = std::int64_t{n_rows} * n_heads * (head_dim / 2);
    rope_kernel<<<grid_for(n, 256), 256>>>(d_x, n_rows, n_heads, head_dim, IntArg(0), d_positions, d_frequencies,
                                           layout == RopeLayout::adjacent_pairs);
    CHECK_LAUNCH("rope_kernel (rope_rows)");
}

}  // namespace glass::cuda
