/// \file
/// \brief glass/flash_attention.hpp — journey step 4 again, tile by tile: attention that never holds the [n_q, n_k] scores.
/// ```text
/// attention.hpp computes, per query head, the whole score matrix S = Q Kᵀ · scale [n_q, n_k],
/// then softmax over each row, then S V. At 8,192 positions S is 256 MB per head, written once
/// and read and rewritten by the softmax and read again by S V: the memory traffic, not the
/// arithmetic, sets the time. FlashAttention computes the same output in tiles:
///
/// In:  the same as causal_attention (attention.hpp):
///      q      [n_q, n_heads * head_dim]      rotated queries, row i at position start_pos + i
///      keys   [n_k, n_kv_heads * head_dim]   n_k = start_pos + n_q
///      values [n_k, n_kv_heads * head_dim]
/// Out: [n_q, n_heads * head_dim], equal to causal_attention's up to fp32 rounding.
///
/// For each query head h (KV head g = h / group) and each tile of tile_q query rows:
///   m = -inf, l = 0, O = 0                   per row: running max, running sum, unnormalised output
///   for each tile of tile_k keys that some row of the tile may see (later tiles: skipped):
///     S = Q_tile K_tileᵀ · scale            [tile_q, tile_k]  the only scores that ever exist
///     mask keys after each row's position   (-inf)
///     per row r with a visible key here:
///       m' = max(m_r, max_j S_rj)
///       c  = exp(m_r - m')                  rescales what was summed under the old maximum
///       P  = exp(S_r - m')                  [tile_k], masked keys give exactly 0
///       l_r = c · l_r + Σ_j P_j
///       O_r = c · O_r + P V_tile            [head_dim]
///       m_r = m'
///   out rows = O_r / l_r
///
/// Why it is exact: after any number of tiles, O_r / l_r is the softmax-weighted sum over the
/// keys seen so far (every term carries the factor exp(-m_r) of the current maximum, which
/// cancels in the ratio). A row that sees no key of a tile skips it: its m stays, and
/// exp(-inf - (-inf)) = NaN never happens (pitfall 8). The scratch is one S tile and m, l, O for
/// one query tile: O(tile_q · (tile_k + head_dim)) floats, whatever n_q and n_k are.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "glass/attention.hpp"
#include "glass/errors.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// Tile sizes: query rows per tile and keys per tile.
struct FlashTiles {
    int q = 16;
    int k = 32;
};

/// What one flash_attention call did, counted as it ran (for the example and the tests).
struct FlashCounts {
    std::int64_t tiles_computed = 0;     ///< (head, query tile, key tile) triples whose S was computed
    std::int64_t tiles_skipped = 0;      ///< triples entirely after the causal diagonal: never touched
    std::int64_t scores_computed = 0;    ///< dot products q·k, masked ones inside computed tiles included
    std::int64_t scratch_floats = 0;     ///< the scratch held at once: an S tile plus m, l and O
};

/// Bytes of intermediate scores the three-step attention (attention.hpp, cuda/attention.cu's
/// naive kernels) moves through memory: S [n_heads, n_q, n_k] in fp32 is written by Q Kᵀ, read
/// and written back by the softmax, and read by S V — four passes.
inline std::int64_t naive_score_bytes(int n_heads, std::int64_t n_q, std::int64_t n_k) {
    return 4 * std::int64_t{4} * n_heads * n_q * n_k;
}

/// \brief causal_attention() computed tile by tile with the online softmax (see the file's comment).
///
/// Same arguments and result as causal_attention (attention.hpp); `tiles` sets the tile sizes;
/// `counts`, when given, receives what was computed and skipped. Throws glass::Error for head
/// counts that do not divide, a cache of the wrong length, or tile sizes below 1.
inline RowMatrix flash_attention(const RowMatrix& q, const Eigen::Ref<const RowMatrix>& keys,
                                 const Eigen::Ref<const RowMatrix>& values, int start_pos, const AttentionShape& s,
                                 float scale, FlashTiles tiles = {}, FlashCounts* counts = nullptr) {
    if (s.window != 0 || s.logit_softcap != 0.0f)
        fail("flash attention: a sliding window (", s.window, ") or score soft-cap (", s.logit_softcap,
             ") is not implemented here; causal_attention has both");
    if (s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads);
    if (keys.rows() != start_pos + q.rows() || values.rows() != keys.rows())
        fail("attention: ", keys.rows(), " cached keys for ", q.rows(), " queries starting at ", start_pos,
             " (expected ", start_pos + q.rows(), ")");
    if (tiles.q < 1 || tiles.k < 1) fail("flash attention: tile sizes must be >= 1, got ", tiles.q, " x ", tiles.k);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int group = s.n_heads / s.n_kv_heads;
    const int hd = s.head_dim;
    const int n_q = static_cast<int>(q.rows()), n_k = static_cast<int>(keys.rows());
    RowMatrix out(n_q, static_cast<Eigen::Index>(s.n_heads) * hd);
    FlashCounts c;
    c.scratch_floats = std::int64_t{tiles.q} * tiles.k + std::int64_t{tiles.q} * (hd + 2);

    RowMatrix S(tiles.q, tiles.k), O(tiles.q, hd);  // the scratch: one score tile, one output tile
    Eigen::VectorXf m(tiles.q), l(tiles.q);
    for (int h = 0; h < s.n_heads; ++h) {
        const int g = h / group;
        for (int i0 = 0; i0 < n_q; i0 += tiles.q) {
            const int rows = std::min(tiles.q, n_q - i0);
            const int last_visible = start_pos + i0 + rows - 1;  // the tile's last row sees keys 0..this
            m.setConstant(neg_inf);
            l.setZero();
            O.setZero();
            for (int j0 = 0; j0 < n_k; j0 += tiles.k) {
                if (j0 > last_visible) {  // every row of the query tile is before every key here
                    ++c.tiles_skipped;
                    continue;
                }
                const int cols = std::min(tiles.k, n_k - j0);
                ++c.tiles_computed;
                c.scores_computed += std::int64_t{rows} * cols;
                auto s_tile = S.topLeftCorner(rows, cols);
                s_tile.noalias() = q.block(i0, h * hd, rows, hd) * keys.block(j0, g * hd, cols, hd).transpose();
                s_tile *= scale;
                for (int r = 0; r < rows; ++r) {
                    const int visible = start_pos + i0 + r;  // this row sees keys 0..visible
                    for (int j = std::max(0, visible + 1 - j0); j < cols; ++j) s_tile(r, j) = neg_inf;
                    const float tile_max = s_tile.row(r).maxCoeff();
                    if (tile_max == neg_inf) continue;  // nothing visible in this tile for this row
                    const float m_new = std::max(m(r), tile_max);
                    const float correction = std::exp(m(r) - m_new);  // 0 on the row's first tile
                    auto p = s_tile.row(r);
                    for (int j = 0; j < cols; ++j) p(j) = std::exp(p(j) - m_new);  // masked: exp(-inf) = 0
                    l(r) = correction * l(r) + p.sum();
                    O.row(r) = correction * O.row(r) + p * values.block(j0, g * hd, cols, hd);
                    m(r) = m_new;
                }
            }
            for (int r = 0; r < rows; ++r) out.block(i0 + r, h * hd, 1, hd) = O.row(r) / l(r);
        }
    }
    if (counts) *counts = c;
    return out;
}

}  // namespace glass
