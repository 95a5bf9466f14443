/// \file
/// \brief glass/serve/paged_kv_pool.hpp — the CPU reference's KV pool: every layer's keys and values, in blocks.
/// ```text
/// The block manager (block_manager.hpp) hands out block ids; this is where the rows live:
///
///   keys[layer], values[layer]     [num_blocks · block_size, kv_dim]
///   position p of a sequence       row  block_table[p / block_size] · block_size + p % block_size
///
/// With KvType::int8 every written row is rounded to what an int8 cache holds (one scale per KV
/// head, kv_cache.hpp), exactly as KVCache does, and the scales are kept beside the rows, so a
/// row can leave for another pool as codes and scales (kv_shipment.hpp) and arrive bit for bit.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/kv_cache.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/tensor.hpp"

namespace glass::serve {

/// A config with only what the KV cache's size depends on (layers, KV heads, head_dim).
inline ModelConfig kv_shape(int n_layers, int n_kv_heads, int head_dim) {
    ModelConfig c;
    c.n_layers = n_layers;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = head_dim;
    return c;
}

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
        if (type == KvType::int8) {  // the scales too, so a row can leave as int8 codes (kv_shipment.hpp)
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
        return bytes_for(kv_shape(n_layers(), n_kv_heads_, head_dim_), num_blocks_, block_size_, type_);
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

    // --- one stored row, for shipping a sequence's blocks to another pool (kv_shipment.hpp) ---
    int n_layers() const { return static_cast<int>(keys_.size()); }
    int n_kv_heads() const { return n_kv_heads_; }
    int head_dim() const { return head_dim_; }
    int kv_dim() const { return n_kv_heads_ * head_dim_; }
    /// The values stored for position `pos` of layer `layer` (int8: s · q)  [kv_dim].
    std::span<const float> row(KvPart part, int layer, std::span<const int> table, int pos) const {
        const RowMatrix& m = (part == KvPart::key ? keys_ : values_)[static_cast<size_t>(layer)];
        return {m.row(pool_row(table, block_size_, pos)).data(), static_cast<size_t>(kv_dim())};
    }
    /// int8 pools: the row's scale per KV head  [n_kv_heads].
    std::span<const float> row_scales(KvPart part, int layer, std::span<const int> table, int pos) const {
        return scales_of(part, layer, pool_row(table, block_size_, pos));
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
    std::span<const float> scales_of(KvPart part, int layer, Eigen::Index row) const {
        const std::vector<float>& s = (part == KvPart::key ? key_scales_ : value_scales_)[static_cast<size_t>(layer)];
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

}  // namespace glass::serve
