/// \file
/// \brief glass/serve/paged_transformer.hpp — the forward pass over a batch of requests at different positions.
/// ```text
/// transformer.hpp runs one sequence whose positions are contiguous in its own cache. Here the
/// rows come from several requests, each at its own positions, with K/V in pool blocks:
///
///   rows     every entry's new tokens, stacked                  [N, dim], N = Σ n_entry
///   row r    belongs to entry e(r), at position pos(r)
///   x = embedding rows
///   per layer:
///     q, k, v = rmsnorm(x) Wqᵀ, Wkᵀ, Wvᵀ     row by row             [N, q_dim], [N, kv_dim]
///     rotate row r of q and k by pos(r)
///     write k, v row r into the pool row of (e(r), pos(r))
///     att row r = attention of q row r over positions 0..pos(r) of e(r)   (causal, per entry)
///     x += att Woᵀ;  x += MLP(rmsnorm(x))        row by row
///   logits = rmsnorm(x[last row of e]) Wclsᵀ   for each entry that wants them
///
/// The layers are transformer.hpp's own transformer_block (one body for both), through PagedKv,
/// with every product done one row at a time, as transformer.hpp computes one decoded token.
/// That costs speed (the fast path does the batch in one pass over the weights) and buys batch invariance: what a token gets never depends on who else is in the
/// batch, how its prompt was cut into chunks, or whether its prefix came from the cache. So the
/// engine's output equals a request run alone, bit for bit, and tests can demand exactly that.
///
/// PagedKVPool (paged_kv_pool.hpp) is the pool's storage here:  keys[layer], values[layer]  [num_blocks · block_size, kv_dim].
/// With KvType::int8 every written row is rounded to what an int8 cache holds (one scale per KV
/// head, kv_cache.hpp), exactly as KVCache does: the numbers every backend's int8 pool must give.
/// (PagedSession, in paged_backend.hpp, runs one sequence alone over this backend.)
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/kv_cache.hpp"
#include "glass/serve/kv_shipment.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_kv_pool.hpp"
#include "glass/tensor.hpp"
#include "glass/transformer.hpp"

namespace glass::serve {


/// The pool blocks of the batch's sequences, as transformer_block reads and writes them:
/// sequence s is batch entry s, whose block table maps its positions to pool rows.
/// `first_layer`: the model layer the pool's layer 0 holds (a pipeline stage's pool keeps only
/// its own layers: dist/parallel_paged_backend.hpp); 0 for a whole model.
struct PagedKv {
    PagedKVPool& pool;
    std::span<const BatchEntry> batch;
    int first_layer = 0;
    void write(int layer, int s, int start, const RowMatrix& k, const RowMatrix& v) {
        const std::span<const int> table = batch[static_cast<size_t>(s)].block_table;
        for (Eigen::Index i = 0; i < k.rows(); ++i)
            pool.write(layer - first_layer, table, start + static_cast<int>(i), k.row(i), v.row(i));
    }
    RowMatrix keys(int layer, int s, int n) const {
        return pool.gather_keys(layer - first_layer, batch[static_cast<size_t>(s)].block_table, n);
    }
    RowMatrix values(int layer, int s, int n) const {
        return pool.gather_values(layer - first_layer, batch[static_cast<size_t>(s)].block_table, n);
    }
};

/// One forward pass over the batch; returns logits [n_rows, vocab] for the rows append_logit_rows
/// names. The layers are transformer.hpp's transformer_block, row by row (RowOrder::row_by_row).
inline std::vector<float> paged_forward(const Model& m, PagedKVPool& pool, std::span<const BatchEntry> batch) {
    check_batch(m.config, batch, pool.num_blocks(), pool.block_size());

    // Which rows belong to which entry, and at which positions.
    std::vector<int> ids;
    std::vector<SequenceRows> seqs;
    for (const BatchEntry& e : batch) {
        seqs.push_back({.first = static_cast<int>(ids.size()), .count = static_cast<int>(e.tokens.size()), .start = e.start});
        ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
    }
    PagedKv kv{pool, batch};
    const RowMatrix x = forward_rows(m, ids, seqs, kv, RowOrder::row_by_row);  // [N, dim]

    // The final norm and the classifier, for the rows whose logits are wanted.
    std::vector<int> wanted;
    for (size_t e = 0; e < batch.size(); ++e) append_logit_rows(batch[e], seqs[e].first, wanted);
    RowMatrix rows(static_cast<Eigen::Index>(wanted.size()), m.config.dim);
    for (size_t i = 0; i < wanted.size(); ++i) rows.row(static_cast<Eigen::Index>(i)) = x.row(wanted[i]);
    return classify(m, rows, RowOrder::row_by_row);
}

/// The CPU reference as a PagedBackend; `kv` int8: the pool keeps what an int8 cache holds.
class CpuPagedBackend : public PagedBackend {
public:
    explicit CpuPagedBackend(const Model& model, KvType kv = KvType::fp32) : model_(model), kv_(kv) {
        require_fp32_weights(model, "the reference paged backend");
    }
    const ModelConfig& config() const override { return model_.config; }
    void allocate_pool(int num_blocks, int block_size) override {
        pool_ = PagedKVPool(model_.config, num_blocks, block_size, kv_);
    }
    std::int64_t pool_bytes() const override { return pool_.bytes(); }
    KvType kv_type() const override { return kv_; }
    std::span<const float> forward(std::span<const BatchEntry> batch) override {
        logits_ = paged_forward(model_, pool_, batch);
        return logits_;
    }
    std::int64_t weight_bytes() const override { return model_.weight_bytes; }
    std::vector<std::byte> export_kv(std::span<const int> table, int first, int end) const override {
        return pack_kv_rows(pool_, table, first, end);
    }
    void import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        unpack_kv_rows(pool_, table, first, end, bytes);
    }

private:
    const Model& model_;
    KvType kv_;
    PagedKVPool pool_;
    std::vector<float> logits_;
};

}  // namespace glass::serve
