/// \file
/// \brief glass/kv_cache.hpp — journey step 6/8: remember every position's keys and values.
/// ```text
/// Layout: [layer][position, kv_head, head_dim] — per layer one [seq_len, kv_dim] matrix for K and
/// one for V, allocated once for the whole context window. Row p holds position p.
///
/// Why it works: with a causal mask, position p's K and V depend only on tokens 0..p, so they never
/// change once computed (C6). Prefill writes rows 0..n_prompt-1 of every layer; each decode step
/// writes exactly one row, at position == current length (never length+1: that would leave a hole
/// and shift RoPE), then attends over rows 0..length.
///
/// Size: 2 (K and V) · n_layers · n_kv_heads · head_dim · bytes per value, per token (C8, C9).
/// ```
#pragma once

#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/tensor.hpp"

namespace glass {

// The one rule of writing to a cache (shared with the CUDA twin, cuda/kv_cache.cpp): new rows go
// exactly at the current length, and must fit in the context window.
inline void check_kv_write(int length, int capacity, int start_pos, std::int64_t n_new) {
    if (start_pos != length)
        fail("KV cache: writing position ", start_pos, " but the cache holds ", length,
             " positions (the next must be ", length, ")");
    if (start_pos + n_new > capacity)
        fail("KV cache: position ", start_pos + n_new - 1, " is past the context window of ", capacity);
}

class KVCache {
public:
    explicit KVCache(const ModelConfig& c)
        : keys_(c.n_layers, RowMatrix::Zero(c.seq_len, c.kv_dim())),
          values_(c.n_layers, RowMatrix::Zero(c.seq_len, c.kv_dim())),
          capacity_(c.seq_len) {}

    int length() const { return length_; }      // positions filled (same in every layer)
    int capacity() const { return capacity_; }  // the context window

    // Store k, v [n_new, kv_dim] for positions start_pos .. start_pos + n_new - 1 of one layer.
    void write(int layer, int start_pos, const RowMatrix& k, const RowMatrix& v) {
        check(layer, 0);
        check_kv_write(length_, capacity_, start_pos, k.rows());
        keys_[layer].middleRows(start_pos, k.rows()) = k;
        values_[layer].middleRows(start_pos, v.rows()) = v;
    }

    // After every layer has written its rows for this step, the new positions count.
    void advance(int n_new) { length_ += n_new; }

    // Rows 0 .. n-1 of one layer: [n, kv_dim].
    auto keys(int layer, int n) const { return keys_[check(layer, n)].topRows(n); }
    auto values(int layer, int n) const { return values_[check(layer, n)].topRows(n); }

    void clear() { length_ = 0; }

    // Bytes of K and V in use right now (fp32), and reserved in total.
    std::int64_t bytes_used(const ModelConfig& c) const { return c.kv_bytes_per_token() * length_; }
    std::int64_t bytes_reserved() const {
        std::int64_t total = 0;
        for (const auto& m : keys_) total += 2 * static_cast<std::int64_t>(m.size()) * sizeof(float);
        return total;
    }

private:
    size_t check(int layer, int n) const {
        if (layer < 0 || layer >= static_cast<int>(keys_.size()) || n < 0 || n > capacity_)
            fail("KV cache: rows 0..", n - 1, " of layer ", layer, " are outside [", keys_.size(),
                 " layers, ", capacity_, " positions]");
        return static_cast<size_t>(layer);
    }

    std::vector<RowMatrix> keys_;    // [layer] -> [seq_len, kv_dim]
    std::vector<RowMatrix> values_;  // [layer] -> [seq_len, kv_dim]
    int capacity_ = 0;
    int length_ = 0;
};

}  // namespace glass
