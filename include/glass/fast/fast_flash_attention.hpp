/// \file
/// \brief glass/fast/fast_flash_attention.hpp — flash_attention (flash_attention.hpp) made fast on the CPU: threads, AVX-512 tiles.
/// ```text
/// The same tiles and the same online softmax as the reference, computed with the fast path's
/// attention kernels (kernels.hpp: AVX-512 where the CPU has it, plain loops otherwise):
///   - work items are (query head, query tile of tile_q rows) pairs over a ThreadPool; each
///     thread keeps its own scratch, allocated once per call;
///   - per key tile, the thread copies the tile's keys transposed into Kᵀ_tile [head_dim,
///     tile_k] (16 KB at 64 x 64): it then stays in L1 while every block of 4 query rows of the
///     query tile uses it, which is what the score-row attention of fast_session.hpp (the
///     whole K read once per 4 queries) cannot do;
///   - per block of ≤ 4 rows: S = Q Kᵀ_tile · scale (attention_scores), per row the new maximum,
///     S = e^(S − m') over the keys the row sees (exp_shift; later keys 0), T = S V_tile
///     (attention_mix), then O = c · O + T and l = c · l + Σ S with c = e^(m − m').
/// In:  q [n_q, ldq] (head h at columns h·head_dim ..), keys / values [start_pos + n_q, ldkv]
///      (KV head g at columns g·head_dim ..), row-major, rows ldq / ldkv floats apart.
/// Out: out [n_q, ldo], head h at columns h·head_dim .., causal_attention's result.
/// Extra memory: threads · (head_dim · tile_k + 4 · tile_k + tile_q · (head_dim + 2) + 4 · head_dim)
/// floats, independent of n.
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

inline void flash_attention(const float* q, long ldq, const float* keys, const float* values, long ldkv, int n_q,
                            int start_pos, const AttentionShape& s, float scale, float* out, long ldo,
                            ThreadPool& pool, const Kernels& k, FlashTiles tiles = {256, 128}) {
    if (s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads);
    if (tiles.q < 1 || tiles.k < 1) fail("flash attention: tile sizes must be >= 1, got ", tiles.q, " x ", tiles.k);
    if (n_q < 1 || start_pos < 0) fail("flash attention: ", n_q, " queries starting at ", start_pos);
    const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads, tk = tiles.k;
    const int n_k = start_pos + n_q;
    const int q_tiles = (n_q + tiles.q - 1) / tiles.q;
    constexpr int kRows = kAttentionRows;  // rows per kernel call (≤ 4)

    // One thread's scratch: Kᵀ tile | S block | T block | O tile | m | l.
    const std::size_t kt_floats = std::size_t(hd) * tk, s_floats = std::size_t(kRows) * tk,
                      t_floats = std::size_t(kRows) * hd, o_floats = std::size_t(tiles.q) * hd;
    const std::size_t per_thread = kt_floats + s_floats + t_floats + o_floats + 2 * std::size_t(tiles.q);
    std::vector<float> scratch(per_thread * static_cast<std::size_t>(pool.size()));

    auto job = [&](int item, int thread) {
        float* kt = scratch.data() + per_thread * static_cast<std::size_t>(thread);
        float* S = kt + kt_floats;
        float* T = S + s_floats;
        float* O = T + t_floats;
        float* m = O + o_floats;
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
            for (int j = 0; j < cols; ++j)  // Kᵀ_tile[d][j] = K[j0 + j][g·hd + d]
                for (int d = 0; d < hd; ++d) kt[std::size_t(d) * tk + j] = keys[(j0 + j) * ldkv + g * hd + d];
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
                    float tile_max = row[0];
                    for (int j = 1; j < seen; ++j) tile_max = std::max(tile_max, row[j]);
                    const float m_new = std::max(mr, tile_max);
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

}  // namespace glass::fast
