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
///
/// In int8 (KvType::int8, C14's idea applied to the cache): each new row of one KV head
/// [head_dim] gets its own scale s = max |x| / 127 and is kept as the integers round(x / s):
/// head_dim + 4 bytes per (token, KV head) instead of 4 · head_dim. Attention then reads s · q.
/// This reference keeps exactly those values, s · q, in its fp32 matrices (so every backend's
/// int8 cache can be compared with it); the fast path (fast_session.hpp) keeps the int8 bytes.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/int8.hpp"
#include "glass/memory_budget.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// KvType and kv_bytes_per_token(c, type) live in config.hpp (the CUDA header needs them without Eigen).
inline KvType kv_type_from_string(const std::string& s) {
    if (s == "fp32") return KvType::fp32;
    if (s == "int8") return KvType::int8;
    fail("unknown KV cache type '", s, "' (fp32, int8)");
}

/// One cached row x [n_kv_heads · head_dim] -> int8 q [same] and one scale per KV head
/// (scales [n_kv_heads]): s_g = max |x_g| / 127, q = round(x / s_g). Error ≤ s_g / 2. A head
/// slice holding NaN or inf gets s_g = NaN (int8.hpp), so NaN reaches the logits check.
inline void quantize_kv_row(const float* x, int n_kv_heads, int head_dim, std::int8_t* q, float* scales) {
    for (int g = 0; g < n_kv_heads; ++g) {
        const std::int64_t at = std::int64_t{g} * head_dim;
        scales[g] = int8_scale(x + at, head_dim);
        for (int i = 0; i < head_dim; ++i) q[at + i] = to_int8(x[at + i], scales[g]);
    }
}
/// The row back: x'[g·head_dim + i] = s_g · q.
inline void dequantize_kv_row(const std::int8_t* q, const float* scales, int n_kv_heads, int head_dim, float* x) {
    for (int g = 0; g < n_kv_heads; ++g)
        for (int i = 0; i < head_dim; ++i) {
            const std::int64_t at = std::int64_t{g} * head_dim + i;
            x[at] = scales[g] * static_cast<float>(q[at]);
        }
}
/// x -> the values an int8 cache gives back for it (quantize, then dequantize), in place.
inline void round_kv_row_to_int8(float* x, int n_kv_heads, int head_dim) {
    for (int g = 0; g < n_kv_heads; ++g) {
        float* xg = x + std::int64_t{g} * head_dim;
        const float s = int8_scale(xg, head_dim);
        for (int i = 0; i < head_dim; ++i) xg[i] = s * static_cast<float>(to_int8(xg[i], s));
    }
}

/// \brief Bytes of K and V for `positions` positions of every layer — 2 · n_layers · positions ·
/// n_kv_heads · head_dim · `bytes_per_value` — checked BEFORE anything is allocated.
///
/// Computed in 64 bits with overflow checks. A header can be valid and still ask for more than
/// the machine has (1024 layers × 4M positions); then glass::Error names the size in GiB and the
/// fields that imply it, instead of an allocation failing (or thrashing) much later.
/// `what` says where the positions come from: "context window (seq_len)", "KV pool", ...
inline std::int64_t check_kv_cache_fits(const ModelConfig& c, std::int64_t positions, int bytes_per_value,
                                        const char* what) {
    std::int64_t bytes = 2 * std::int64_t{bytes_per_value};
    const std::int64_t factors[] = {c.n_layers, positions, c.n_kv_heads, c.head_dim};
    bool overflow = false;
    for (std::int64_t f : factors) overflow = overflow || f < 0 || __builtin_mul_overflow(bytes, f, &bytes);
    const std::string what_needs = std::string("the KV cache for the ") + what;
    const std::string how = " (2 x n_layers " + std::to_string(c.n_layers) + " x " + std::to_string(positions) +
                            " positions x n_kv_heads " + std::to_string(c.n_kv_heads) + " x head_dim " +
                            std::to_string(c.head_dim) + " x " + std::to_string(bytes_per_value) + " bytes)";
    if (overflow) fail(what_needs, " needs more than 8 EiB", how);
    check_fits_in_memory(bytes, what_needs, how);
    return bytes;
}

/// \brief The one rule of writing to a cache: new rows go exactly at the current length, and must
/// fit in the context window.
///
/// Shared with the CUDA twin's cache (cuda/kv_cache.cpp). `n_new` rows at `start_pos` into a cache
/// holding `length` of `capacity` positions; otherwise glass::Error names the position.
inline void check_kv_write(int length, int capacity, int start_pos, std::int64_t n_new) {
    if (start_pos != length)
        fail("KV cache: writing position ", start_pos, " but the cache holds ", length,
             " positions (the next must be ", length, ")");
    if (start_pos + n_new > capacity)
        fail("KV cache: position ", start_pos + n_new - 1, " is past the context window of ", capacity);
}

/// A cache holding `length` positions can go back to any of 0..length, not forward.
inline void check_rewind(int position, int length) {
    if (position < 0 || position > length)
        fail("KV cache: cannot rewind to position ", position, ": it holds positions 0..", length - 1);
}

/// \brief The KV cache of one sequence on the CPU: per layer, K and V as `[seq_len, kv_dim]`
/// matrices, row p for position p.
///
/// A forward pass writes its new rows in every layer (write), reads rows `0 .. n-1` (keys,
/// values), and only then counts them (advance), so every layer of one pass sees the same length.
class KVCache {
public:
    /// Allocates, once, K and V for every position of the context window (`c.seq_len`).
    /// (The size is checked first: check_kv_cache_fits runs before either vector exists.)
    /// `type` int8: every written row is rounded to what an int8 cache holds (see the top).
    explicit KVCache(const ModelConfig& c, KvType type = KvType::fp32)
        : keys_((check_kv_cache_fits(c, c.seq_len, sizeof(float), "context window (seq_len)"), c.n_layers),
                RowMatrix::Zero(c.seq_len, c.kv_dim())),
          values_(c.n_layers, RowMatrix::Zero(c.seq_len, c.kv_dim())),
          capacity_(c.seq_len),
          type_(type),
          n_kv_heads_(c.n_kv_heads),
          head_dim_(c.head_dim) {}

    KvType type() const { return type_; }

    int length() const { return length_; }      ///< positions filled (same in every layer)
    int capacity() const { return capacity_; }  ///< the context window

    /// \brief Stores `k`, `v` `[n_new, kv_dim]` at positions `start_pos .. start_pos + n_new - 1` of
    /// one layer.
    ///
    /// `start_pos` must equal length() (check_kv_write): no holes, no rewrites.
    void write(int layer, int start_pos, const RowMatrix& k, const RowMatrix& v) {
        check(layer, 0);
        check_kv_write(length_, capacity_, start_pos, k.rows());
        keys_[layer].middleRows(start_pos, k.rows()) = k;
        values_[layer].middleRows(start_pos, v.rows()) = v;
        if (type_ == KvType::int8)
            for (Eigen::Index r = start_pos; r < start_pos + k.rows(); ++r) {
                round_kv_row_to_int8(keys_[layer].row(r).data(), n_kv_heads_, head_dim_);
                round_kv_row_to_int8(values_[layer].row(r).data(), n_kv_heads_, head_dim_);
            }
    }

    /// After every layer has written its rows for this step, the new positions count.
    void advance(int n_new) { length_ += n_new; }

    /// Keys of positions `0 .. n-1` of one layer: a view `[n, kv_dim]`.
    auto keys(int layer, int n) const { return keys_[check(layer, n)].topRows(n); }
    /// Values of positions `0 .. n-1` of one layer: a view `[n, kv_dim]`.
    auto values(int layer, int n) const { return values_[check(layer, n)].topRows(n); }

    /// Forgets every position (a new sequence); the memory stays allocated.
    void clear() { length_ = 0; }

    /// Forgets positions `position ..` (speculative decoding's rollback of rejected drafts): the
    /// length goes back and the next write lands at `position`; no row is copied or cleared.
    void rewind(int position) {
        check_rewind(position, length_);
        length_ = position;
    }

    /// Bytes of K and V in use right now, as the cache's type stores them: `kv_bytes_per_token`
    /// times length().
    std::int64_t bytes_used(const ModelConfig& c) const { return kv_bytes_per_token(c, type_) * length_; }
    /// Bytes of K and V allocated for the whole context window.
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
    KvType type_ = KvType::fp32;
    int n_kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace glass
