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
///     q, k, v = rmsnorm(x) Wqᵀ, Wkᵀ, Wvᵀ     row by row             [N, dim], [N, kv_dim]
///     rotate row r of q and k by pos(r)
///     write k, v row r into the pool row of (e(r), pos(r))
///     att row r = attention of q row r over positions 0..pos(r) of e(r)   (causal, per entry)
///     x += att Woᵀ;  x += MLP(rmsnorm(x))        row by row
///   logits = rmsnorm(x[last row of e]) Wclsᵀ   for each entry that wants them
///
/// Every product here is done one row at a time, with the same calls transformer.hpp makes for
/// one decoded token. That costs speed (the fast path does the batch in one pass over the
/// weights) and buys batch invariance: what a token gets never depends on who else is in the
/// batch, how its prompt was cut into chunks, or whether its prefix came from the cache. So the
/// engine's output equals a request run alone, bit for bit, and tests can demand exactly that.
///
/// PagedKVPool is the pool's storage here:  keys[layer], values[layer]  [num_blocks · block_size, kv_dim].
/// With KvType::int8 every written row is rounded to what an int8 cache holds (one scale per KV
/// head, kv_cache.hpp), exactly as KVCache does: the numbers every backend's int8 pool must give.
/// (PagedSession, in paged_backend.hpp, runs one sequence alone over this backend.)
/// ```
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "glass/attention.hpp"
#include "glass/checkpoint.hpp"
#include "glass/embedding.hpp"
#include "glass/kv_cache.hpp"
#include "glass/mlp.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/rope.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/tensor.hpp"

namespace glass::serve {

/// K and V of every layer, as blocks (CPU reference storage).
class PagedKVPool {
public:
    PagedKVPool() = default;
    PagedKVPool(const ModelConfig& c, int num_blocks, int block_size, KvType type = KvType::fp32)
        : num_blocks_(num_blocks), block_size_(block_size), type_(type), n_kv_heads_(c.n_kv_heads),
          head_dim_(c.head_dim()) {
        if (num_blocks < 1 || block_size < 1) fail("KV pool of ", num_blocks, " blocks of ", block_size, " positions");
        check_kv_cache_fits(c, std::int64_t{num_blocks} * block_size, sizeof(float), "KV pool");
        const Eigen::Index rows = static_cast<Eigen::Index>(num_blocks) * block_size;
        keys_.assign(static_cast<size_t>(c.n_layers), RowMatrix::Zero(rows, c.kv_dim()));
        values_.assign(static_cast<size_t>(c.n_layers), RowMatrix::Zero(rows, c.kv_dim()));
    }

    int num_blocks() const { return num_blocks_; }
    int block_size() const { return block_size_; }
    KvType type() const { return type_; }
    /// Bytes allocated (fp32 here, whatever the type: this reference keeps the values s · q).
    std::int64_t bytes() const {
        std::int64_t total = 0;
        for (const RowMatrix& m : keys_) total += 2 * static_cast<std::int64_t>(m.size()) * sizeof(float);
        return total;
    }

    /// Stores k, v [kv_dim] of position `pos`.
    void write(int layer, std::span<const int> table, int pos, const Eigen::Ref<const Eigen::RowVectorXf>& k,
               const Eigen::Ref<const Eigen::RowVectorXf>& v) {
        const Eigen::Index row = pool_row(table, block_size_, pos);
        auto key = keys_[static_cast<size_t>(layer)].row(row);
        auto value = values_[static_cast<size_t>(layer)].row(row);
        key = k;
        value = v;
        if (type_ == KvType::int8) {
            round_kv_row_to_int8(key.data(), n_kv_heads_, head_dim_);
            round_kv_row_to_int8(value.data(), n_kv_heads_, head_dim_);
        }
    }

    /// Positions 0 .. n-1 of one sequence, copied out of their blocks into one matrix [n, kv_dim]
    /// (the reference gathers; a fast kernel reads the blocks in place).
    RowMatrix gather_keys(int layer, std::span<const int> table, int n) const { return gather(keys_, layer, table, n); }
    RowMatrix gather_values(int layer, std::span<const int> table, int n) const { return gather(values_, layer, table, n); }

private:
    RowMatrix gather(const std::vector<RowMatrix>& store, int layer, std::span<const int> table, int n) const {
        const RowMatrix& m = store[static_cast<size_t>(layer)];
        RowMatrix out(n, m.cols());
        for (int p = 0; p < n; ++p) out.row(p) = m.row(pool_row(table, block_size_, p));
        return out;
    }

    int num_blocks_ = 0;
    int block_size_ = 0;
    KvType type_ = KvType::fp32;
    int n_kv_heads_ = 0, head_dim_ = 0;
    std::vector<RowMatrix> keys_;    // [layer] -> [num_blocks * block_size, kv_dim]
    std::vector<RowMatrix> values_;  // [layer] -> [num_blocks * block_size, kv_dim]
};


/// y = x Wᵀ computed row by row ([n, in] -> [n, out]): each row exactly as a lone decoded token's.
template <typename W>
RowMatrix rowwise_product(const RowMatrix& x, const W& w) {
    RowMatrix y(x.rows(), w.rows());
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
        const RowMatrix row = x.row(r);  // [1, in], as transformer.hpp holds a decoded token
        y.row(r) = row * w.transpose();
    }
    return y;
}

/// One forward pass over the batch; returns logits [n_rows, vocab] for the rows append_logit_rows names.
inline std::vector<float> paged_forward(const Model& m, PagedKVPool& pool, std::span<const BatchEntry> batch) {
    const ModelConfig& c = m.config;
    check_batch(c, batch, pool.num_blocks(), pool.block_size());

    // Which entry and position each stacked row belongs to.
    std::vector<int> ids, entry_of, pos_of;
    for (size_t e = 0; e < batch.size(); ++e)
        for (size_t t = 0; t < batch[e].tokens.size(); ++t) {
            ids.push_back(batch[e].tokens[t]);
            entry_of.push_back(static_cast<int>(e));
            pos_of.push_back(batch[e].start + static_cast<int>(t));
        }
    const Eigen::Index N = static_cast<Eigen::Index>(ids.size());
    const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));

    RowMatrix x = embed_tokens(m.embedding_table(), ids);  // [N, dim]
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& w = m.layers[static_cast<size_t>(l)];
        const RowMatrix xn = rmsnorm(x, w.rms_att, c.norm_eps);
        RowMatrix q = rowwise_product(xn, w.wq);  // [N, dim]
        RowMatrix k = rowwise_product(xn, w.wk);  // [N, kv_dim]
        const RowMatrix v = rowwise_product(xn, w.wv);
        for (Eigen::Index r = 0; r < N; ++r) {
            RowMatrix qr = q.row(r), kr = k.row(r);  // one position each
            apply_rope(qr, c.n_heads, c.head_dim(), pos_of[size_t(r)], c.rope_theta, c.rope_layout);
            apply_rope(kr, c.n_kv_heads, c.head_dim(), pos_of[size_t(r)], c.rope_theta, c.rope_layout);
            q.row(r) = qr;
            pool.write(l, batch[size_t(entry_of[size_t(r)])].block_table, pos_of[size_t(r)], kr, v.row(r));
        }
        // Attention: each entry reads its own blocks; each row sees positions 0..pos(r).
        RowMatrix att(N, c.dim);
        Eigen::Index r = 0;
        for (const BatchEntry& e : batch) {
            const int end = e.start + static_cast<int>(e.tokens.size());
            const RowMatrix keys = pool.gather_keys(l, e.block_table, end);      // [end, kv_dim]
            const RowMatrix values = pool.gather_values(l, e.block_table, end);  // [end, kv_dim]
            for (int pos = e.start; pos < end; ++pos, ++r) {
                const RowMatrix qr = q.row(r);
                att.row(r) = causal_attention(qr, keys.topRows(pos + 1), values.topRows(pos + 1), pos, shape, scale);
            }
        }
        x += rowwise_product(att, w.wo);
        const RowMatrix xn2 = rmsnorm(x, w.rms_ffn, c.norm_eps);
        for (Eigen::Index i = 0; i < N; ++i) {
            const RowMatrix row = xn2.row(i);
            x.row(i) += swiglu_mlp(row, w.w1, w.w2, w.w3);
        }
    }

    // The final norm and the classifier, for the rows whose logits are wanted.
    std::vector<int> wanted;
    int first = 0;
    for (const BatchEntry& e : batch) {
        append_logit_rows(e, first, wanted);
        first += static_cast<int>(e.tokens.size());
    }
    std::vector<float> logits;
    for (const int r : wanted) {
        const RowMatrix h = rmsnorm(x.row(r), m.final_norm(), c.norm_eps);      // [1, dim]
        const Eigen::RowVectorXf row = h * m.output_classifier().transpose();  // [1, vocab]
        logits.insert(logits.end(), row.data(), row.data() + row.size());
    }
    return logits;
}

/// The CPU reference as a PagedBackend; `kv` int8: the pool keeps what an int8 cache holds.
class CpuPagedBackend : public PagedBackend {
public:
    explicit CpuPagedBackend(const Model& model, KvType kv = KvType::fp32) : model_(model), kv_(kv) {}
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

private:
    const Model& model_;
    KvType kv_;
    PagedKVPool pool_;
    std::vector<float> logits_;
};

}  // namespace glass::serve
