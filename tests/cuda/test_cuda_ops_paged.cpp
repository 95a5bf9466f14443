// tests/cuda/test_cuda_ops_paged.cpp — serving rows: rope per row, K/V writes into a paged pool
// and the three paged attentions over ragged batches, shared prefixes, int8 pools.
// (rows of the op table that test_cuda_ops.cpp runs; cuda_ops_harness.hpp has the shared pieces)
#include "cuda_ops_harness.hpp"

namespace cuda_ops_test {

void add_rope_rows(std::vector<Case>& cases) {
    struct S { int n, heads, head_dim, max_pos; };
    for (S s : {S{1, 1, 2, 0}, S{7, 3, 64, 4000}, S{33, 8, 128, 2047}, S{300, 4, 64, 511}})
        for (glass::RopeLayout layout : {glass::RopeLayout::adjacent_pairs, glass::RopeLayout::half_split})
            cases.push_back({fmt("rope_rows(%s, n=%d, heads=%d, head_dim=%d, positions on device in 0..%d)",
                                 layout == glass::RopeLayout::adjacent_pairs ? "adjacent" : "half_split", s.n,
                                 s.heads, s.head_dim, s.max_pos),
                             kF32, false, [s, layout](Rng& rng) {
                RowMatrix x = random_matrix(rng, s.n, s.heads * s.head_dim);
                std::uniform_int_distribution<int> pick(0, s.max_pos);
                std::vector<int> positions(static_cast<std::size_t>(s.n));
                for (int& p : positions) p = pick(rng);
                gc::DeviceBuffer d_x = to_device(x), d_positions = gc::to_device(std::span<const int>(positions));
                gc::DeviceBuffer freq = gc::rope_frequencies(s.head_dim, 1e4f);
                gc::rope_rows(d_x.f32(), s.n, s.heads, s.head_dim, d_positions.i32(), freq.f32(), layout);
                for (int r = 0; r < s.n; ++r) {  // the CPU: each row alone, at its own position
                    RowMatrix row = x.row(r);
                    glass::apply_rope(row, s.heads, s.head_dim, positions[std::size_t(r)], 1e4f, layout);
                    x.row(r) = row;
                }
                return relative_error(gc::to_host(d_x.f32(), std::size_t(x.size())), x);
            }});
}

namespace {

// A serving batch over a pool of random K/V: entries (start, n) with block tables drawn from a
// shuffled pool, entries 0 and 1 sharing their first `shared` blocks (a cached prefix: both start
// past it). Pool rows that no table holds, and positions past an entry's end, are NaN, so a read
// through a wrong table entry or past the mask poisons the output.
struct PagedBatch {
    int block_size = 0, num_blocks = 0;
    std::vector<std::pair<int, int>> spans;  // (start, n) per entry
    std::vector<std::vector<int>> tokens, tables;
    std::vector<glass::serve::BatchEntry> entries;
    RowMatrix keys, values;  // the pool of one layer [num_blocks * block_size, kv_dim]
    int n_rows() const {
        int n = 0;
        for (auto [start, count] : spans) n += count;
        return n;
    }
};

PagedBatch make_paged_batch(Rng& rng, int block_size, const std::vector<std::pair<int, int>>& spans, int shared,
                            int kv_dim) {
    PagedBatch b;
    b.block_size = block_size;
    b.spans = spans;
    int needed = 0;
    for (auto [start, n] : spans) needed += (start + n + block_size - 1) / block_size;
    b.num_blocks = needed - shared + 3;  // 3 blocks nobody holds
    std::vector<int> free_ids(static_cast<std::size_t>(b.num_blocks));
    std::iota(free_ids.begin(), free_ids.end(), 0);
    std::shuffle(free_ids.begin(), free_ids.end(), rng);
    std::size_t next = 0;
    for (std::size_t e = 0; e < spans.size(); ++e) {
        const int blocks = (spans[e].first + spans[e].second + block_size - 1) / block_size;
        std::vector<int> table;
        for (int k = 0; k < blocks; ++k)
            table.push_back(e == 1 && k < shared ? b.tables[0][std::size_t(k)] : free_ids[next++]);
        b.tables.push_back(table);
        b.tokens.emplace_back(static_cast<std::size_t>(spans[e].second), 0);
    }
    for (std::size_t e = 0; e < spans.size(); ++e)
        b.entries.push_back({.tokens = b.tokens[e], .start = spans[e].first, .block_table = b.tables[e]});
    const int rows = b.num_blocks * block_size;
    b.keys = random_matrix(rng, rows, kv_dim);
    b.values = random_matrix(rng, rows, kv_dim);
    std::vector<bool> valid(static_cast<std::size_t>(rows), false);
    for (std::size_t e = 0; e < spans.size(); ++e)
        for (int p = 0; p < spans[e].first + spans[e].second; ++p)
            valid[std::size_t(glass::serve::pool_row(b.tables[e], block_size, p))] = true;
    for (int r = 0; r < rows; ++r)
        if (!valid[std::size_t(r)]) {
            b.keys.row(r).setConstant(NAN);
            b.values.row(r).setConstant(NAN);
        }
    return b;
}

// The CPU reference (paged_transformer.hpp's attention): each entry's keys and values gathered
// through its block table, then glass::causal_attention of its rows.
RowMatrix cpu_paged_attention(const PagedBatch& b, const RowMatrix& q, const gc::AttentionDims& d) {
    RowMatrix out(q.rows(), q.cols());
    Eigen::Index row = 0;
    for (std::size_t e = 0; e < b.spans.size(); ++e) {
        const auto [start, n] = b.spans[e];
        RowMatrix keys(start + n, b.keys.cols()), values(start + n, b.keys.cols());
        for (int p = 0; p < start + n; ++p) {
            keys.row(p) = b.keys.row(glass::serve::pool_row(b.tables[e], b.block_size, p));
            values.row(p) = b.values.row(glass::serve::pool_row(b.tables[e], b.block_size, p));
        }
        out.middleRows(row, n) = cpu_attention(q.middleRows(row, n), keys, values, start, d);
        row += n;
    }
    return out;
}

// The three paged attentions, as the rows name them.
const gc::PagedAttention kPagedAttentions[] = {gc::PagedAttention::naive, gc::PagedAttention::per_row,
                                               gc::PagedAttention::flash};
const char* paged_name(gc::PagedAttention a) {
    switch (a) {
    case gc::PagedAttention::naive: return "naive";
    case gc::PagedAttention::per_row: return "block per (row, head)";
    case gc::PagedAttention::flash: return "flash, online softmax";
    }
    return "?";
}

// Runs one of the three paged attentions on the device over `b` (its pool uploaded); out [n_rows, q.cols()].
// int8: the pool goes up in the int8 cache's form (quantize_rows; its NaN rows get NaN scales), and
// `b`'s pool becomes what that dequantizes to, the CPU reference's input.
std::vector<float> gpu_paged_attention(PagedBatch& b, std::span<const glass::serve::BatchEntry> entries,
                                       const RowMatrix& q, const gc::AttentionDims& d, gc::PagedAttention which,
                                       bool int8 = false) {
    const gc::PagedStep step = gc::plan_step(entries, b.block_size);
    gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
    const gc::RowPlacement rows = step.rows(ints.i32());
    gc::DeviceBuffer d_q = to_device(q), keys = to_device(b.keys), values = to_device(b.values);
    gc::KvRows pool_keys = gc::KvRows::fp32(keys.f32()), pool_values = gc::KvRows::fp32(values.f32());
    Int8Kv k8, v8;
    if (int8) {
        k8 = quantize_rows(b.keys, d.n_kv_heads, d.head_dim);
        v8 = quantize_rows(b.values, d.n_kv_heads, d.head_dim);
        pool_keys = k8.up();
        pool_values = v8.up();
        b.keys = k8.dequantized;
        b.values = v8.dequantized;
    }
    gc::DeviceBuffer scores = poisoned(std::size_t(step.n_rows) * d.n_heads * step.max_keys);
    gc::DeviceBuffer out = poisoned(std::size_t(step.n_rows) * q.cols());
    const float scale = 1.0f / std::sqrt(float(d.head_dim));
    switch (which) {
    case gc::PagedAttention::naive:
        gc::attention_rows_naive(d_q.f32(), pool_keys, pool_values, rows, d, scale, scores.f32(), out.f32());
        break;
    case gc::PagedAttention::per_row:
        gc::attention_rows(d_q.f32(), pool_keys, pool_values, rows, d, scale, scores.f32(), out.f32());
        break;
    case gc::PagedAttention::flash:  // no scores: `scores` stays poisoned and unused
        gc::attention_rows_flash(d_q.f32(), pool_keys, pool_values, rows, d, scale, out.f32());
        break;
    }
    return gc::to_host(out.f32(), std::size_t(step.n_rows) * q.cols());
}

struct PagedShape {
    const char* name;
    std::vector<std::pair<int, int>> spans;  // (start, n) per entry
    int shared_positions;                    // entries 0 and 1 share the blocks of these positions
};
const PagedShape kPagedShapes[] = {
    {"decode rows", {{0, 1}, {1, 1}, {37, 1}, {300, 1}, {16, 1}}, 0},
    {"prompt chunks", {{0, 33}, {20, 17}}, 0},
    {"ragged", {{100, 1}, {0, 40}, {13, 7}, {0, 1}, {250, 3}}, 0},
    {"shared prefix", {{64, 5}, {70, 1}, {0, 9}}, 64},
};

}  // namespace

void add_paged(std::vector<Case>& cases) {
    for (int block_size : {1, 16, 5, 7})
        cases.push_back({fmt("kv_write_rows(batch, block=%d, ragged rows, kv_dim=96; whole pool exact)", block_size), 0.0,
                         false, [block_size](Rng& rng) {
            const int kv_dim = 96;
            PagedBatch b = make_paged_batch(rng, block_size, kPagedShapes[2].spans, 0, kv_dim);
            const gc::PagedStep step = gc::plan_step(b.entries, block_size);
            gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
            const RowMatrix k = random_matrix(rng, step.n_rows, kv_dim), v = random_matrix(rng, step.n_rows, kv_dim);
            RowMatrix pool_k = random_matrix(rng, b.num_blocks * block_size, kv_dim), pool_v = pool_k * 2.0f;
            gc::DeviceBuffer d_pool_k = to_device(pool_k), d_pool_v = to_device(pool_v);
            gc::DeviceBuffer d_k = to_device(k), d_v = to_device(v);
            gc::kv_write_rows(d_pool_k.f32(), d_pool_v.f32(), d_k.f32(), d_v.f32(), kv_dim, step.rows(ints.i32()));
            // The CPU: PagedKVPool::write's rule, row by row (every other pool row unchanged).
            Eigen::Index r = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e)
                for (int p = b.spans[e].first; p < b.spans[e].first + b.spans[e].second; ++p, ++r) {
                    pool_k.row(glass::serve::pool_row(b.tables[e], block_size, p)) = k.row(r);
                    pool_v.row(glass::serve::pool_row(b.tables[e], block_size, p)) = v.row(r);
                }
            return relative_error(gc::to_host(d_pool_k.f32(), std::size_t(pool_k.size())), pool_k) +
                   relative_error(gc::to_host(d_pool_v.f32(), std::size_t(pool_v.size())), pool_v);
        }});

    struct H { int heads, kv_heads, head_dim; };
    const H heads[] = {H{4, 4, 64}, H{8, 2, 128}, H{8, 1, 64}, H{6, 3, 128}};  // GQA 1, 4, 8, 2
    const int block_sizes[] = {1, 16, 5, 7};
    // Every row at kF32 (the top of this file). The flash kernel's online softmax also rescales
    // its running sums by exp(m - m') once per 128-position tile (up to 3 tiles here): a few more
    // roundings of ~6e-8 each per output, still far below 1e-5.
    for (int si = 0; si < 4; ++si)
        for (int bi = 0; bi < 4; ++bi)
            for (gc::PagedAttention which : kPagedAttentions) {
                const PagedShape& shape = kPagedShapes[si];
                const int block_size = block_sizes[bi];
                const H h = heads[(si + bi) % 4];  // every shape and every block size meets every head layout
                cases.push_back({fmt("paged_attention(%s, %s, block=%d, heads=%d, kv_heads=%d, head_dim=%d)",
                                     paged_name(which), shape.name, block_size, h.heads, h.kv_heads, h.head_dim),
                                 kF32, false, [shape, block_size, h, which](Rng& rng) {
                    const gc::AttentionDims d{h.heads, h.kv_heads, h.head_dim};
                    PagedBatch b = make_paged_batch(rng, block_size, shape.spans,
                                                          shape.shared_positions / block_size, h.kv_heads * h.head_dim);
                    const RowMatrix q = random_matrix(rng, b.n_rows(), h.heads * h.head_dim);
                    return relative_error(gpu_paged_attention(b, b.entries, q, d, which), cpu_paged_attention(b, q, d));
                }});
            }
    // An int8 pool (KvType::int8): all three attentions against the CPU over the dequantized pool (the
    // same fp32 values: the fp32 rule), on the ragged and the shared-prefix batches, whose NaN
    // rows now come as NaN scales.
    for (int si : {2, 3})
        for (gc::PagedAttention which : kPagedAttentions) {
            const PagedShape& shape = kPagedShapes[si];
            const int block_size = si == 2 ? 5 : 16;
            const H h = si == 2 ? H{8, 2, 64} : H{6, 3, 128};
            cases.push_back({fmt("paged_attention(%s, int8 pool + scales, %s, block=%d, heads=%d, kv_heads=%d, head_dim=%d)",
                                 paged_name(which), shape.name, block_size, h.heads, h.kv_heads, h.head_dim),
                             kF32, false, [shape, block_size, h, which](Rng& rng) {
                const gc::AttentionDims d{h.heads, h.kv_heads, h.head_dim};
                PagedBatch b = make_paged_batch(rng, block_size, shape.spans, shape.shared_positions / block_size,
                                                h.kv_heads * h.head_dim);
                const RowMatrix q = random_matrix(rng, b.n_rows(), h.heads * h.head_dim);
                const std::vector<float> gpu = gpu_paged_attention(b, b.entries, q, d, which, /*int8=*/true);
                return relative_error(gpu, cpu_paged_attention(b, q, d));  // b's pool is now the dequantized one
            }});
        }
    // The family rules (Mistral, Gemma): a sliding window shorter than most rows' keys and a score
    // soft-cap, all three attentions, against causal_attention under the same AttentionShape.
    for (int si : {2, 3})
        for (gc::PagedAttention which : kPagedAttentions) {
            const PagedShape& shape = kPagedShapes[si];
            const int block_size = si == 2 ? 5 : 16;
            const gc::AttentionDims d{8, 2, 64, si == 2 ? 9 : 130, si == 2 ? 50.0f : 3.0f};
            cases.push_back({fmt("paged_attention(%s, window=%d, softcap=%g, %s, block=%d, heads=8, kv_heads=2, head_dim=64)",
                                 paged_name(which), d.window, double(d.softcap), shape.name, block_size),
                             kF32, false, [shape, block_size, d, which](Rng& rng) {
                PagedBatch b = make_paged_batch(rng, block_size, shape.spans, shape.shared_positions / block_size,
                                                d.n_kv_heads * d.head_dim);
                const RowMatrix q = random_matrix(rng, b.n_rows(), d.n_heads * d.head_dim, 2.0f);
                return relative_error(gpu_paged_attention(b, b.entries, q, d, which), cpu_paged_attention(b, q, d));
            }});
        }
    // kv_write_rows_int8 against quantize_kv_row through the slots: the whole int8 pool and its
    // scales exactly (value: how many differ); rows no slot names keep their NaN scales.
    cases.push_back({"kv_write_rows_int8(batch, block=7, ragged rows, kv_heads=3, head_dim=40; whole pool exact)", 0.0, false,
                     [](Rng& rng) {
        const int block_size = 7, kv_heads = 3, head_dim = 40, kv_dim = kv_heads * head_dim;
        PagedBatch b = make_paged_batch(rng, block_size, kPagedShapes[2].spans, 0, kv_dim);
        const gc::PagedStep step = gc::plan_step(b.entries, block_size);
        gc::DeviceBuffer ints = gc::to_device(std::span<const int>(step.ints));
        const RowMatrix k = random_matrix(rng, step.n_rows, kv_dim), v = random_matrix(rng, step.n_rows, kv_dim, 2.0f);
        const int pool_rows = b.num_blocks * block_size;
        const std::size_t values = std::size_t(pool_rows) * kv_dim, scales = std::size_t(pool_rows) * kv_heads;
        gc::DeviceBuffer d_keys(values), d_values(values), d_key_scales = poisoned(scales),
            d_value_scales = poisoned(scales), d_k = to_device(k), d_v = to_device(v);
        gc::kv_write_rows_int8(static_cast<std::int8_t*>(d_keys.data()), d_key_scales.f32(),
                                static_cast<std::int8_t*>(d_values.data()), d_value_scales.f32(), d_k.f32(), d_v.f32(),
                                kv_heads, head_dim, step.rows(ints.i32()));
        double differ = 0;
        for (int which = 0; which < 2; ++which) {
            const Int8Kv want = quantize_rows(which ? v : k, kv_heads, head_dim);  // row r of the step
            std::vector<std::int8_t> q(values);
            gc::download(q.data(), (which ? d_values : d_keys).data(), values);
            const std::vector<float> got = gc::to_host((which ? d_value_scales : d_key_scales).f32(), scales);
            std::vector<bool> written(std::size_t(pool_rows), false);
            Eigen::Index r = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e)
                for (int p = b.spans[e].first; p < b.spans[e].first + b.spans[e].second; ++p, ++r) {
                    const std::size_t slot = std::size_t(glass::serve::pool_row(b.tables[e], block_size, p));
                    written[slot] = true;
                    for (int i = 0; i < kv_dim; ++i)
                        differ += q[slot * kv_dim + std::size_t(i)] != want.q[std::size_t(r) * kv_dim + std::size_t(i)];
                    for (int g = 0; g < kv_heads; ++g)
                        differ += got[slot * kv_heads + std::size_t(g)] != want.scales[std::size_t(r) * kv_heads + std::size_t(g)];
                }
            for (int slot = 0; slot < pool_rows; ++slot)
                if (!written[std::size_t(slot)])
                    for (int g = 0; g < kv_heads; ++g) differ += !std::isnan(got[std::size_t(slot) * kv_heads + std::size_t(g)]);
        }
        return differ;
    }});

    // Long requests: 2,000+ keys through 16-position blocks, decode and a chunk together.
    for (gc::PagedAttention which : kPagedAttentions)
        cases.push_back({fmt("paged_attention(%s, long: decode at 2100 + chunk of 64 at 2000, block=16, heads=8, "
                             "kv_heads=2, head_dim=128)", paged_name(which)),
                         kF32, true, [which](Rng& rng) {
            const gc::AttentionDims d{8, 2, 128};
            PagedBatch b = make_paged_batch(rng, 16, {{2100, 1}, {2000, 64}}, 0, 2 * 128);
            const RowMatrix q = random_matrix(rng, b.n_rows(), 8 * 128);
            return relative_error(gpu_paged_attention(b, b.entries, q, d, which), cpu_paged_attention(b, q, d));
        }});

    // Batch invariance, which the engine's tests rely on: each entry alone gives bit for bit the
    // rows it gets inside the batch (value: how many floats differ).
    for (gc::PagedAttention which : kPagedAttentions)
        cases.push_back({fmt("paged_attention(%s, batch invariance: each entry alone == in the ragged batch, exact)",
                             paged_name(which)),
                         0.0, false, [which](Rng& rng) {
            const gc::AttentionDims d{8, 2, 64};
            PagedBatch b = make_paged_batch(rng, 5, kPagedShapes[2].spans, 0, 2 * 64);
            const RowMatrix q = random_matrix(rng, b.n_rows(), 8 * 64);
            const std::vector<float> together = gpu_paged_attention(b, b.entries, q, d, which);
            double differ = 0;
            Eigen::Index row = 0;
            for (std::size_t e = 0; e < b.entries.size(); ++e) {
                const int n = b.spans[e].second;
                const std::vector<float> alone =
                    gpu_paged_attention(b, {&b.entries[e], 1}, q.middleRows(row, n), d, which);
                for (std::size_t i = 0; i < alone.size(); ++i)
                    differ += alone[i] != together[std::size_t(row) * q.cols() + i];
                row += n;
            }
            return differ;
        }});
    for (gc::MatmulKernel k : {gc::MatmulKernel::naive, gc::MatmulKernel::tiled, gc::MatmulKernel::warp_per_row})
        for (gc::WeightType type : {gc::WeightType::f32, gc::WeightType::f16})
            cases.push_back({fmt("matmul(%s, %s, batch invariance: rows alone and 5..16 == in n=37, exact)",
                                 gc::to_string(k), gc::to_string(type)),
                             0.0, false, [k, type](Rng& rng) {
                const int n = 37, in = 260, out = 100;
                const RowMatrix x = random_matrix(rng, n, in);
                TestWeights w = make_weights(rng, out, in, type, 1.0f / std::sqrt(float(in)));
                gc::DeviceBuffer d_x = to_device(x), y = poisoned(std::size_t(n) * out);
                gc::matmul(k, d_x.f32(), n, w.device.view, y.f32());
                const std::vector<float> together = gc::to_host(y.f32(), std::size_t(n) * out);
                double differ = 0;
                const auto compare = [&](int first, int count) {
                    const RowMatrix part = x.middleRows(first, count);
                    gc::DeviceBuffer d_part = to_device(part), y_part = poisoned(std::size_t(count) * out);
                    gc::matmul(k, d_part.f32(), count, w.device.view, y_part.f32());
                    const std::vector<float> got = gc::to_host(y_part.f32(), std::size_t(count) * out);
                    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != together[std::size_t(first) * out + i];
                };
                for (int t = 0; t < n; ++t) compare(t, 1);
                compare(5, 12);
                return differ;
            }});
}

}  // namespace cuda_ops_test
