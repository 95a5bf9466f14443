/// \file
/// \brief cuda/rope.cu — journey step 3 on the GPU: rotate q or k by position (see glass/rope.hpp).
/// ```text
/// In:  x [n_rows, n_heads * head_dim], row t at its position, as a RowPlacement says: one
///      sequence's rows (rope: from start_pos, which may be read from device memory when the
///      kernel runs, for the decode graph), or a serving step's rows of several requests
///      (rope_rows: positions[t]); one kernel over common.cuh's locators serves both;
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

// One thread per (row, head, pair); row t at loc.position(t).
template <class Locator>
__global__ void rope_kernel(float* x, int n_rows, int n_heads, int head_dim, Locator loc, const float* frequencies,
                            bool adjacent_pairs) {
    const int half = head_dim / 2;
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i >= std::int64_t{n_rows} * n_heads * half) return;
    const int pair = static_cast<int>(i % half);
    const int head = static_cast<int>((i / half) % n_heads);
    const int t = static_cast<int>(i / (std::int64_t{half} * n_heads));
    float* v = x + std::int64_t{t} * n_heads * head_dim + std::int64_t{head} * head_dim;  // this head's vector
    const float angle = static_cast<float>(loc.position(t)) * frequencies[pair];
    const float c = cosf(angle), s = sinf(angle);
    const int a = adjacent_pairs ? 2 * pair : pair;
    const int b = adjacent_pairs ? 2 * pair + 1 : pair + half;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
}

void rope_rows(float* d_x, int n_heads, int head_dim, const RowPlacement& rows, const float* d_frequencies,
               RopeLayout layout) {
    if (rows.n_rows < 1 || n_heads < 1 || head_dim < 2 || head_dim % 2 != 0)
        fail("rope: bad shape: ", rows.n_rows, " rows, ", n_heads, " heads, head_dim ", head_dim,
             " (head_dim must be even and >= 2)");
    const std::int64_t n = std::int64_t{rows.n_rows} * n_heads * (head_dim / 2);
    with_locator(rows, [&](auto loc) {
        rope_kernel<<<grid_for(n, 256), 256>>>(d_x, rows.n_rows, n_heads, head_dim, loc, d_frequencies,
                                               layout == RopeLayout::adjacent_pairs);
        CHECK_LAUNCH("rope_kernel");
    });
}

void rope(float* d_x, int n_tokens, int n_heads, int head_dim, IntArg start_pos,
          const float* d_frequencies, RopeLayout layout) {
    if (!start_pos.on_device() && start_pos.value < 0) fail("rope: start_pos ", start_pos.value, " is negative");
    rope_rows(d_x, n_heads, head_dim, RowPlacement::sequence(n_tokens, start_pos), d_frequencies, layout);
}

void rope_rows(float* d_x, int n_rows, int n_heads, int head_dim, const int* d_positions,
               const float* d_frequencies, RopeLayout layout) {
    if (!d_positions) fail("rope_rows: no positions");
    RowPlacement rows;
    rows.n_rows = n_rows;
    rows.positions = d_positions;  // only positions: RoPE asks nothing else of a batch
    rope_rows(d_x, n_heads, head_dim, rows, d_frequencies, layout);
}

}  // namespace glass::cuda
