/// \file
/// \brief cuda/device_kv_cache.hpp — K and V on the device: where each row of a forward pass sits
/// (RowPlacement), the cache rows an attention kernel reads (KvRows), the kernels that write them
/// (kv_write*) and one sequence's cache (DeviceKVCache). Plain C++ (no CUDA types), defined in
/// kv_cache.cu and kv_cache.cpp; glass_cuda.hpp includes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "glass/config.hpp"
#include "device.hpp"

namespace glass::cuda {

// ---- Where the rows of a forward pass sit --------------------------------------------------------
//
// RoPE, the K/V write and attention need, for each row r of a pass, its position, the cache row
// its own K/V go to, and the cache rows of the keys it sees. One description serves CudaSession's
// single sequence and CudaPagedBackend's serving batch, so each of those kernels is written once
// (the device side reads it through a locator, common.cuh):
//   one sequence (RowPlacement::sequence): row r at position start + r; the cache row of
//     position p is p (K/V rows of one layer [seq_len, kv_dim], as DeviceKVCache keeps them);
//   a serving batch (paged.hpp's plan_step): row r at positions[r] of its request; its K/V go to
//     pool row slots[r]; position p of its request is pool row
//     block_ids[table_start[r] + p / block_size] · block_size + p % block_size.
struct RowPlacement {
    int n_rows = 0;
    // One sequence: row r at value(base) + shift + r. `base` may be read on the device when the
    // kernel runs (the decode graph): the start position (shift 0) or the key count after the
    // pass (shift -n_rows), whichever the caller holds.
    IntArg base = 0;
    int shift = 0;
    int max_keys = 0;     // the most keys any row sees: the width of a row of scores (naive attention)
    int block_size = 0;   // a batch: positions per pool block
    const int* positions = nullptr;    // a batch: [n_rows] device ints, each row's position
    const int* slots = nullptr;        // a batch: [n_rows] the pool row of the row's own K/V
    const int* table_start = nullptr;  // a batch: [n_rows] where its request's table starts in block_ids
    const int* block_ids = nullptr;    // a batch: every request's block table, one after another
    bool batch() const { return positions != nullptr; }
    // n_rows rows of one sequence at positions start .. start + n_rows - 1.
    static RowPlacement sequence(int n_rows, IntArg start) {
        RowPlacement p;
        p.n_rows = n_rows;
        p.base = start;
        p.max_keys = start.on_device() ? 0 : start.value + n_rows;  // on the device: unknown to the host
        return p;
    }
    // The same, given the key count after the pass (n_keys = start + n_rows) instead of start.
    static RowPlacement sequence_ending(int n_rows, IntArg n_keys) {
        RowPlacement p = sequence(n_rows, n_keys);
        p.shift = -n_rows;
        p.max_keys = n_keys.on_device() ? 0 : n_keys.value;
        return p;
    }
};

// The keys (or values) an attention kernel reads: one layer's cache rows [n_k, n_kv_heads * head_dim]
// (or a pool's, paged.hpp) in device memory, as fp32, or as int8 with one fp32 scale per (row, KV
// head) — scales [n_k, n_kv_heads], the layout of kv_write_int8() — which the kernels read as
// scale · (float)q, the value the CPU's int8 cache gives back (glass/kv_cache.hpp). Reading int8
// directly is the point of it: a decode step reads a quarter of the bytes of fp32.
struct KvRows {
    KvType storage = KvType::fp32;
    const float* f32 = nullptr;         // fp32 rows
    const std::int8_t* q = nullptr;     // int8 rows
    const float* scales = nullptr;      // int8: [rows, n_kv_heads]
    static KvRows fp32(const float* d_rows) {
        KvRows r;
        r.f32 = d_rows;
        return r;
    }
    static KvRows int8(const std::int8_t* d_rows, const float* d_scales) {
        KvRows r;
        r.storage = KvType::int8;
        r.q = d_rows;
        r.scales = d_scales;
        return r;
    }
    KvType type() const { return storage; }
};

// ---- The KV cache in device memory -------------------------------------------------------------

// kv_cache.cu — the cache (or pool) row of each row r of k, v [n_rows, kv_dim] (RowPlacement:
// position end - n_rows + r of one sequence, or a batch's slots[r]) = that row.
void kv_write_rows(float* d_keys, float* d_values, const float* d_k, const float* d_v, int kv_dim,
                   const RowPlacement& rows);
// The int8 twin: each row quantized per KV head (quantize_kv_row, glass/kv_cache.hpp) into the
// int8 rows [cache rows, n_kv_heads * head_dim] and scales [cache rows, n_kv_heads].
void kv_write_rows_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                        const float* d_k, const float* d_v, int n_kv_heads, int head_dim, const RowPlacement& rows);
// One sequence: keys, values [seq_len, kv_dim] (one layer) rows start_pos .. start_pos + n_new - 1
// = k, v [n_new, kv_dim].
void kv_write(float* d_keys, float* d_values, const float* d_k, const float* d_v, int n_new, int kv_dim,
              IntArg start_pos);

// kv_cache.cu — the int8 twin (KvType::int8): rows start_pos .. start_pos + n_new - 1 of keys,
// values [seq_len, n_kv_heads * head_dim] int8 and of key_scales, value_scales [seq_len, n_kv_heads]
// = quantize_kv_row (glass/kv_cache.hpp) of each row of k, v [n_new, n_kv_heads * head_dim]: per
// (row, KV head) s = max |x| / 127 (NaN if a value is not finite), q = round-half-even(x / s)
// clamped to ±127 (0 when s is 0 or NaN) — the CPU's integers and scales exactly.
void kv_write_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                   const float* d_k, const float* d_v, int n_new, int n_kv_heads, int head_dim, IntArg start_pos);

// K and V storage for `rows` cache rows of `kv_dim` values (kv_cache.cpp), shared by the session's
// cache and the paged pool: fp32 floats, or int8 bytes plus one fp32 scale per (row, KV head) for
// each. Previous buffers are freed first. Unwritten rows read as NaN: NaN values (fp32) or NaN
// scales (int8; NaN · q is NaN, q = 0 included), so a read that strays past them shows.
void allocate_kv_rows(KvType type, std::size_t rows, int kv_dim, int n_kv_heads, DeviceBuffer& keys,
                      DeviceBuffer& values, DeviceBuffer& key_scales, DeviceBuffer& value_scales);

// Same layout as glass::KVCache: [layer][position, kv_head, head_dim], one [seq_len, kv_dim] block
// per layer for K and one for V, allocated once. Same rules (checked on the host). fp32, or with
// KvType::int8 int8 blocks plus scales [layer][seq_len, n_kv_heads] for K and for V (the CPU's
// KVCache(c, KvType::int8) holds exactly their dequantized values). Unwritten rows are NaN (fp32)
// or have NaN scales (int8).
class DeviceKVCache {
public:
    explicit DeviceKVCache(const ModelConfig& c, KvType type = KvType::fp32);
    KvType type() const { return type_; }
    int length() const { return length_; }
    int capacity() const { return capacity_; }
    // Copy k, v (device, [n_new, kv_dim]) into rows start_pos .. start_pos + n_new - 1 of `layer`.
    // With start_pos on the device (a graph), the caller checks check_kv_write before each replay.
    void write(int layer, IntArg start_pos, const float* d_k, const float* d_v, int n_new);
    void advance(int n_new);
    void clear() { length_ = 0; }
    void rewind(int position);  // speculative decoding's rollback: the length goes back
    const float* keys(int layer) const;    // fp32 only: [seq_len, kv_dim] (rows 0..length-1 valid)
    const float* values(int layer) const;
    KvRows key_rows(int layer) const;      // either type, as the attention kernels read it
    KvRows value_rows(int layer) const;
    std::int64_t bytes_used(const ModelConfig& c) const { return kv_bytes_per_token(c, type_) * length_; }

private:
    std::size_t layer_offset(int layer) const;  // values into one [seq_len, kv_dim] block
    KvType type_ = KvType::fp32;
    DeviceBuffer keys_, values_;                 // fp32 or int8 [layer][seq_len, kv_dim]
    DeviceBuffer key_scales_, value_scales_;     // int8 only: [layer][seq_len, n_kv_heads]
    int n_layers_ = 0, capacity_ = 0, kv_dim_ = 0, n_kv_heads_ = 0, head_dim_ = 0, length_ = 0;
};

}  // namespace glass::cuda
