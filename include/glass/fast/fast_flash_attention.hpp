/// \file
/// \brief glass/fast/fast_flash_attention.hpp — flash_attention (flash_attention.hpp) made fast on the CPU: threads, big tiles, no masking arithmetic.
/// ```text
/// The same tiles and the same online softmax as the reference, with three changes:
///   - work items are (query head, query tile) pairs, shared out over a ThreadPool; each thread
///     keeps its own scratch (one S tile, O, m, l), allocated once per call;
///   - tiles of 64 x 64 by default: S is 16 KB, a K or V tile 16 KB at head_dim 64, so a tile's
///     products run out of L1/L2 as Eigen matrix products (packed, vectorised);
///   - a row only exponentiates the keys it may see (no -inf entries, no exp of them): the
///     causal mask is a shorter row, which also lets Eigen's vectorised exp run on full spans.
/// In:  q [n_q, ldq] (head h at columns h·head_dim ..), keys / values [n_q + start_pos, ldkv]
///      (KV head g at columns g·head_dim ..), row-major, rows ldq / ldkv floats apart.
/// Out: out [n_q, ldo], head h at columns h·head_dim .., causal_attention's result.
/// Extra memory: threads · (tile_q · tile_k + tile_q · (head_dim + 2)) floats, independent of n.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "glass/flash_attention.hpp"
#include "glass/fast/thread_pool.hpp"

namespace glass::fast {

inline void flash_attention(const float* q, long ldq, const float* keys, const float* values, long ldkv, int n_q,
                            int start_pos, const AttentionShape& s, float scale, float* out, long ldo,
                            ThreadPool& pool, FlashTiles tiles = {64, 64}) {
    if (s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0 || s.head_dim < 1)
        fail("attention: n_heads ", s.n_heads, " is not a multiple of n_kv_heads ", s.n_kv_heads);
    if (tiles.q < 1 || tiles.k < 1) fail("flash attention: tile sizes must be >= 1, got ", tiles.q, " x ", tiles.k);
    if (n_q < 1 || start_pos < 0) fail("flash attention: ", n_q, " queries starting at ", start_pos);
    using Stride = Eigen::OuterStride<>;
    using ConstBlock = Eigen::Map<const RowMatrix, 0, Stride>;
    const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
    const int n_k = start_pos + n_q;
    const int q_tiles = (n_q + tiles.q - 1) / tiles.q;

    struct Scratch {
        RowMatrix S, O;
        Eigen::VectorXf m, l;
    };
    std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
    for (Scratch& t : scratch) {
        t.S.resize(tiles.q, tiles.k);
        t.O.resize(tiles.q, hd);
        t.m.resize(tiles.q);
        t.l.resize(tiles.q);
    }
    auto job = [&](int item, int thread) {
        Scratch& t = scratch[static_cast<size_t>(thread)];
        const int h = item / q_tiles, i0 = (item % q_tiles) * tiles.q;
        const int g = h / group;
        const int rows = std::min(tiles.q, n_q - i0);
        const int last_visible = start_pos + i0 + rows - 1;
        const ConstBlock Q(q + static_cast<long>(i0) * ldq + h * hd, rows, hd, Stride(ldq));
        t.m.setConstant(-std::numeric_limits<float>::infinity());
        t.l.setZero();
        t.O.topRows(rows).setZero();
        for (int j0 = 0; j0 <= last_visible; j0 += tiles.k) {  // tiles past the diagonal: never touched
            const int cols = std::min(tiles.k, n_k - j0);
            const ConstBlock K(keys + static_cast<long>(j0) * ldkv + g * hd, cols, hd, Stride(ldkv));
            const ConstBlock V(values + static_cast<long>(j0) * ldkv + g * hd, cols, hd, Stride(ldkv));
            auto S = t.S.topLeftCorner(rows, cols);
            S.noalias() = (Q * K.transpose()) * scale;
            for (int r = 0; r < rows; ++r) {
                const int seen = std::min(cols, start_pos + i0 + r + 1 - j0);  // keys of this tile it may see
                if (seen <= 0) continue;
                auto p = S.row(r).head(seen);
                const float m_new = std::max(t.m(r), p.maxCoeff());
                const float correction = std::exp(t.m(r) - m_new);
                p = (p.array() - m_new).exp().matrix();
                t.l(r) = correction * t.l(r) + p.sum();
                t.O.row(r) = correction * t.O.row(r) + p * V.topRows(seen);
                t.m(r) = m_new;
            }
        }
        for (int r = 0; r < rows; ++r) {
            Eigen::Map<Eigen::RowVectorXf> o(out + static_cast<long>(i0 + r) * ldo + h * hd, hd);
            o = t.O.row(r) / t.l(r);
        }
    };
    pool.run(s.n_heads * q_tiles, job);
}

}  // namespace glass::fast
