/// \file
/// \brief glass/fast/fast_flash_attention.hpp — flash_attention (flash_attention.hpp) made fast on the CPU: threads, AVX-512 tiles.
/// ```text
/// The same tiles and the same online softmax as the reference, computed with the fast path's
/// attention kernels (kernels.hpp: AVX-512 where the CPU has it, plain loops otherwise):
///   - the keys are read transposed and cut into key tiles (transpose_keys_tiled: each key once,
///     when it enters the cache); a tile (head_dim x tile_k floats, 32 KB at 64 x 128) stays in
///     L1 while every block of 4 query rows of the query tile uses it, which the score-row
///     attention of fast_session.hpp (the whole K read once per 4 queries) cannot do;
///   - work items are (query head, query tile of tile_q rows) pairs over a ThreadPool; each
///     thread has its own scratch (flash_scratch_floats), which the caller sizes once;
///   - per block of ≤ 4 rows: S = Q Kᵀ_tile · scale (attention_scores), per row the new maximum (row_max),
///     S = e^(S − m') over the keys the row sees (exp_shift; later keys 0), T = S V_tile
///     (attention_mix), then O = c · O + T and l = c · l + Σ S with c = e^(m − m').
/// In:  q [n_q, ldq] (head h at columns h·head_dim ..), keys_t: Kᵀ in key tiles, KV heads
///      head_stride floats apart (transpose_keys_tiled), values [start_pos + n_q, ldkv]
///      (KV head g at columns g·head_dim ..), row-major, rows ldq / ldkv floats apart.
/// Out: out [n_q, ldo], head h at columns h·head_dim .., causal_attention's result.
/// Extra memory: flash_scratch_floats = threads · (4 · tile_k + 4 · head_dim + tile_q · (head_dim + 2))
/// floats, independent of n. (The overload taking keys row-major also allocates Kᵀ: the size
/// of one layer's keys, O(n), never the O(n²) scores.)
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "glass/fast/kernels.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/flash_attention.hpp"

namespace glass::fast {

constexpr int kFlashRows = kAttentionRows;  // query rows per kernel call (≤ 4)

/// Floats of scratch one call needs: per thread an S block [4, tile_k], a T block [4, head_dim],
/// the query tile's O [tile_q, head_dim] and its m, l [tile_q].
inline std::size_t flash_scratch_floats(int threads, int head_dim, FlashTiles tiles) {
    const std::size_t per_thread = std::size_t(kFlashRows) * tiles.k + std::size_t(kFlashRows) * head_dim +
                                   std::size_t(tiles.q) * (head_dim + 2);
    return per_thread * static_cast<std::size_t>(threads);
}

/// Kᵀ cut into key tiles, the layout flash_attention reads: for KV head g and key tile t,
///   keys_t + g·head_stride + t·head_dim·tile_k  holds  [head_dim][tile_k],  element [d][j] =
///   key (t·tile_k + j)'s element g·head_dim + d.
/// Each tile is one contiguous block (32 KB at 64 x 128) that stays in L1 while a query tile uses
/// it. (A plain Kᵀ [head_dim][n] would put a tile's 64 rows n floats apart: at n = 8,192 that
/// is 32 KB apart, all in the same L1 set, and they would evict each other.)
inline std::int64_t tiled_keys_head_stride(int max_keys, int head_dim, int tile_k) {
    return std::int64_t{(max_keys + tile_k - 1) / tile_k} * tile_k * head_dim;
}

/// Fills the key tiles of keys [n_k, ldkv] (row-major) for keys first .. n_k - 1 (the earlier
/// ones are already there: a session adds each prompt chunk's keys to the tiles it keeps). Threads
/// split the (KV head, tile) pairs.
inline void transpose_keys_tiled(const float* keys, long ldkv, int n_k, int n_kv_heads, int head_dim,
                                 int tile_k, float* keys_t, std::int64_t head_stride, ThreadPool& pool, int first = 0) {
    const int first_tile = first / tile_k;
    const int tiles = (n_k + tile_k - 1) / tile_k - first_tile;
    if (tiles <= 0) return;
    auto job = [&](int item, int) {
        const int g = item / tiles, t = first_tile + item % tiles;
        float* kt = keys_t + g * head_stride + std::int64_t{t} * head_dim * tile_k;
        const int j0 = t * tile_k, cols = std::min(tile_k, n_k - j0);
        for (int j = std::max(0, first - j0); j < cols; ++j)
            for (int d = 0; d < head_dim; ++d)
                kt[std::int64_t{d} * tile_k + j] = keys[std::int64_t{j0 + j} * ldkv + g * head_dim + d];
    };
    pool.run(n_kv_heads * tiles, job);
}

inline void check_flash_arguments(int n_q, int start_pos, const AttentionShape& s, FlashTiles tiles) {
    if (s.window != 0 || s.logit_softcap != 0.0f)
        fail("flash attention: a sliding window (", s.window, ") or score soft-cap (", s.logit_softcap,
             ") is not implemented in the fast path yet");
    if (s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads);
    if (tiles.q < 1 || tiles.k < 1) fail("flash attention: tile sizes must be >= 1, got ", tiles.q, " x ", tiles.k);
    if (n_q < 1 || start_pos < 0) fail("flash attention: ", n_q, " queries starting at ", start_pos);
}

/// FlashAttention over the key tiles of transpose_keys_tiled (see the top of the file); scratch
/// holds flash_scratch_floats(pool.size(), ..).
inline void flash_attention(const float* q, long ldq, const float* keys_t, std::int64_t head_stride, const float* values, long ldkv,
                            int n_q, int start_pos, const AttentionShape& s, float scale, float* out, long ldo,
                            ThreadPool& pool, const Kernels& k, FlashTiles tiles, float* scratch) {
    check_flash_arguments(n_q, start_pos, s, tiles);
    const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, tk = tiles.k;
    const int n_k = start_pos + n_q;
    const int q_tiles = (n_q + tiles.q - 1) / tiles.q;
    constexpr int kRows = kFlashRows;
    const std::size_t per_thread = flash_scratch_floats(1, hd, tiles);

    auto job = [&](int item, int thread) {
        // One thread's scratch: S block | T block | O tile | m | l.
        float* S = scratch + per_thread * static_cast<std::size_t>(thread);
        float* T = S + std::size_t(kRows) * tk;
        float* O = T + std::size_t(kRows) * hd;
        float* m = O + std::size_t(tiles.q) * hd;
        float* l = m + tiles.q;
        const int h = item / q_tiles, i0 = (item % q_tiles) * tiles.q;
        const int g = h / group;
        const int rows = std::min(tiles.q, n_q - i0);
        const int last_visible = start_pos + i0 + rows - 1;
        std::fill(O, O + std::size_t(rows) * hd, 0.0f);
        std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
        std::fill(l, l + rows, 0.0f);
        for (int j0 = 0; j0 <= last_visible; j0 += tk) {  // tiles past the diagonal: never touched
            const int cols = std::min(tk, n_k - j0);
            const float* kt = keys_t + g * head_stride + std::int64_t{j0} * hd;  // Kᵀ_tile [hd][tk]
            const float* v_tile = values + j0 * ldkv + g * hd;
            for (int b0 = 0; b0 < rows; b0 += kRows) {
                const int mb = std::min(kRows, rows - b0);
                // Keys of this tile the block's last row may see; earlier rows see fewer.
                const int block_seen = std::min(cols, start_pos + i0 + b0 + mb - j0);
                if (block_seen <= 0) continue;
                k.attention_scores(q + (i0 + b0) * ldq + h * hd, ldq, mb, kt, tk, block_seen, hd, scale, S, tk);
                float correction[kRows];
                for (int r = 0; r < mb; ++r) {
                    float* row = S + std::size_t(r) * tk;
                    const int seen = std::min(block_seen, start_pos + i0 + b0 + r + 1 - j0);
                    float& mr = m[b0 + r];
                    if (seen <= 0) {  // nothing visible here for this row: it keeps its sums (pitfall 8)
                        std::fill(row, row + block_seen, 0.0f);
                        correction[r] = 1.0f;
                        continue;
                    }
                    const float m_new = std::max(mr, k.row_max(row, seen));
                    correction[r] = std::exp(mr - m_new);  // 0 on the row's first tile
                    l[b0 + r] = correction[r] * l[b0 + r] + k.exp_shift(row, seen, m_new);
                    std::fill(row + seen, row + block_seen, 0.0f);  // the causal mask: exactly 0
                    mr = m_new;
                }
                k.attention_mix(S, tk, mb, v_tile, ldkv, block_seen, hd, T, hd);  // T = P V_tile
                for (int r = 0; r < mb; ++r) {
                    float* o = O + std::size_t(b0 + r) * hd;
                    const float* t = T + std::size_t(r) * hd;
                    for (int d = 0; d < hd; ++d) o[d] = correction[r] * o[d] + t[d];
                }
            }
        }
        for (int r = 0; r < rows; ++r) {
            float* dst = out + (i0 + r) * ldo + h * hd;
            const float inv = 1.0f / l[r];
            for (int d = 0; d < hd; ++d) dst[d] = O[std::size_t(r) * hd + d] * inv;
        }
    };
    pool.run(s.n_heads * q_tiles, job);
}

/// The same with the keys row-major, keys [start_pos + n_q, ldkv]: transposes them and sizes
/// the scratch itself (for one-off calls: tests, benchmarks; a session keeps both buffers).
inline void flash_attention(const float* q, long ldq, const float* keys, const float* values, long ldkv, int n_q,
                            int start_pos, const AttentionShape& s, float scale, float* out, long ldo,
                            ThreadPool& pool, const Kernels& k, FlashTiles tiles = {256, 128}) {
    check_flash_arguments(n_q, start_pos, s, tiles);
    const int n_k = start_pos + n_q;
    const std::int64_t head_stride = tiled_keys_head_stride(n_k, s.head_dim, tiles.k);
    std::vector<float> keys_t(static_cast<std::size_t>(head_stride * s.n_kv_heads));
    std::vector<float> scratch(flash_scratch_floats(pool.size(), s.head_dim, tiles));
    transpose_keys_tiled(keys, ldkv, n_k, s.n_kv_heads, s.head_dim, tiles.k, keys_t.data(), head_stride, pool);
    flash_attention(q, ldq, keys_t.data(), head_stride, values, ldkv, n_q, start_pos, s, scale, out, ldo, pool, k,
                    tiles, scratch.data());
}

}  // namespace glass::fast
