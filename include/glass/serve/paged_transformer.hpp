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
/// PagedKVPool is the pool's storage here:  keys[layer], values[layer]  [num_blocks · block_size, kv_dim].
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
#include "glass/serve/paged_backend.hpp"
#include "glass/tensor.hpp"
#include "glass/transformer.hpp"

namespace glass::serve {

/// Which of a layer's two cached tensors.
enum class KvPart { key, value };

/// K and V of every layer, as blocks (CPU reference storage).
class PagedKVPool {
public:
    PagedKVPool() = default;
    PagedKVPool(const ModelConfig& c, int num_blocks, int block_size, KvType type = KvType::fp32)
        : num_blocks_(num_blocks), block_size_(block_size), type_(type), n_kv_heads_(c.n_kv_heads),
          head_dim_(c.head_dim) {
        if (num_blocks < 1 || block_size < 1) fail("KV pool of ", num_blocks, " blocks of ", block_size, " positions");
        check_kv_cache_fits(c, std::int64_t{num_blocks} * block_size, sizeof(float), "KV pool");
        const Eigen::Index rows = static_cast<Eigen::Index>(num_blocks) * block_size;
        keys_.assign(static_cast<size_t>(c.n_layers), RowMatrix::Zero(rows, c.kv_dim()));
        values_.assign(static_cast<size_t>(c.n_layers), RowMatrix::Zero(rows, c.kv_dim()));
        if (type == KvType::int8) {  // the scales too, so a row can leave as int8 codes (dist/kv_transfer.hpp)
            const auto n_scales = static_cast<size_t>(rows) * static_cast<size_t>(c.n_kv_heads);
            key_scales_.assign(static_cast<size_t>(c.n_layers), std::vector<float>(n_scales, 0.0f));
            value_scales_.assign(static_cast<size_t>(c.n_layers), std::vector<float>(n_scales, 0.0f));
            codes_.resize(static_cast<size_t>(c.kv_dim()));
        }
    }

    int num_blocks() const { return num_blocks_; }
    int block_size() const { return block_size_; }
    KvType type() const { return type_; }
    /// Bytes allocated: fp32 values whatever the type (this reference keeps an int8 row as the
    /// values s · q), and for int8 the scales beside them.
    std::int64_t bytes() const {
        ModelConfig shape;  // only what the size depends on
        shape.n_layers = n_layers();
        shape.n_kv_heads = n_kv_heads_;
        shape.head_dim = head_dim_;
        return bytes_for(shape, num_blocks_, block_size_, type_);
    }
    /// What bytes() will be for a pool of `num_blocks` blocks of `block_size` for config `c`.
    static std::int64_t bytes_for(const ModelConfig& c, int num_blocks, int block_size, KvType type = KvType::fp32) {
        const std::int64_t per_row = c.kv_dim() + (type == KvType::int8 ? c.n_kv_heads : 0);  // floats
        return 2 * std::int64_t{c.n_layers} * num_blocks * block_size * per_row * std::int64_t{sizeof(float)};
    }

    /// Stores k, v [kv_dim] of position `pos`.
    void write(int layer, std::span<const int> table, int pos, const Eigen::Ref<const Eigen::RowVectorXf>& k,
               const Eigen::Ref<const Eigen::RowVectorXf>& v) {
        const Eigen::Index row = pool_row(table, block_size_, pos);
        auto key = keys_[static_cast<size_t>(layer)].row(row);
        auto value = values_[static_cast<size_t>(layer)].row(row);
        key = k;
        value = v;
        if (type_ == KvType::int8) {  // what an int8 cache gives back, its scales kept beside
            round_to_int8(key.data(), scales_of(KvPart::key, layer, row));
            round_to_int8(value.data(), scales_of(KvPart::value, layer, row));
        }
    }

    // --- one stored row, for shipping a sequence's blocks to another pool (dist/kv_transfer.hpp) ---
    int n_layers() const { return static_cast<int>(keys_.size()); }
    int n_kv_heads() const { return n_kv_heads_; }
    int kv_dim() const { return n_kv_heads_ * head_dim_; }
    /// The values stored for position `pos` of layer `layer` (int8: s · q)  [kv_dim].
    std::span<const float> row(KvPart part, int layer, std::span<const int> table, int pos) const {
        const RowMatrix& m = (part == KvPart::key ? keys_ : values_)[static_cast<size_t>(layer)];
        return {m.row(pool_row(table, block_size_, pos)).data(), static_cast<size_t>(kv_dim())};
    }
    /// int8 pools: the row's scale per KV head  [n_kv_heads].
    std::span<const float> row_scales(KvPart part, int layer, std::span<const int> table, int pos) const {
        return const_cast<PagedKVPool*>(this)->scales_of(part, layer, pool_row(table, block_size_, pos));
    }
    /// Stores a row exactly as given (and, int8, its scales): the receiving side of row()/row_scales().
    void put_row(KvPart part, int layer, std::span<const int> table, int pos, std::span<const float> values,
                 std::span<const float> scales) {
        const Eigen::Index r = pool_row(table, block_size_, pos);
        RowMatrix& m = (part == KvPart::key ? keys_ : values_)[static_cast<size_t>(layer)];
        std::copy(values.begin(), values.end(), m.row(r).data());
        if (type_ == KvType::int8) std::ranges::copy(scales, scales_of(part, layer, r).begin());
    }

    /// Positions 0 .. n-1 of one sequence, copied out of their blocks into one matrix [n, kv_dim]
    /// (the reference gathers; a fast kernel reads the blocks in place).
    RowMatrix gather_keys(int layer, std::span<const int> table, int n) const { return gather(keys_, layer, table, n); }
    RowMatrix gather_values(int layer, std::span<const int> table, int n) const { return gather(values_, layer, table, n); }

private:
    std::span<float> scales_of(KvPart part, int layer, Eigen::Index row) {
        std::vector<float>& s = (part == KvPart::key ? key_scales_ : value_scales_)[static_cast<size_t>(layer)];
        return {s.data() + row * n_kv_heads_, static_cast<size_t>(n_kv_heads_)};
    }
    // x [kv_dim] -> s · q in place, as round_kv_row_to_int8 (kv_cache.hpp), keeping the scales.
    void round_to_int8(float* x, std::span<float> scales) {
        quantize_kv_row(x, n_kv_heads_, head_dim_, codes_.data(), scales.data());
        dequantize_kv_row(codes_.data(), scales.data(), n_kv_heads_, head_dim_, x);
    }
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
    std::vector<std::vector<float>> key_scales_, value_scales_;  // int8: [layer] -> [rows * n_kv_heads]
    std::vector<std::int8_t> codes_;  // int8: one row's codes while it is rounded  [kv_dim]
};


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

private:
    const Model& model_;
    KvType kv_;
    PagedKVPool pool_;
    std::vector<float> logits_;
};

}  // namespace glass::serve
