/// \file
/// \brief cuda/kv_cache.cpp — journey step 6/8 on the GPU: the KV cache in device memory.
/// ```text
/// Layout as glass::KVCache (kv_cache.hpp): [layer][position, kv_head, head_dim]. K and V are
/// each one allocation of n_layers · seq_len · kv_dim values, made once; layer l starts at
/// l · seq_len · kv_dim. fp32: floats. int8 (KvType::int8): int8 values, plus for K and for V one
/// fp32 scale per (position, KV head), [layer][seq_len, n_kv_heads] (layer l at l · seq_len ·
/// n_kv_heads): head_dim + 4 bytes per (position, KV head), kv_bytes_per_token(c, int8) per token.
/// Only the bookkeeping (length, the write rule) lives on the host, and the rule itself is
/// glass::check_kv_write, shared with the CPU cache.
/// ```
#include "glass/kv_cache.hpp"

#include "glass_cuda.hpp"

namespace glass::cuda {

void allocate_kv_rows(KvType type, std::size_t rows, int kv_dim, int n_kv_heads, DeviceBuffer& keys,
                      DeviceBuffer& values, DeviceBuffer& key_scales, DeviceBuffer& value_scales) {
    for (DeviceBuffer* b : {&keys, &values, &key_scales, &value_scales}) *b = DeviceBuffer();  // free the old storage first
    const std::size_t n = rows * static_cast<std::size_t>(kv_dim);
    if (type == KvType::fp32) {
        keys = DeviceBuffer(n * sizeof(float));
        values = DeviceBuffer(n * sizeof(float));
        poison(keys.f32(), n);
        poison(values.f32(), n);
        return;
    }
    const std::size_t scales = rows * static_cast<std::size_t>(n_kv_heads);
    keys = DeviceBuffer(n);
    values = DeviceBuffer(n);
    key_scales = DeviceBuffer(scales * sizeof(float));
    value_scales = DeviceBuffer(scales * sizeof(float));
    poison(key_scales.f32(), scales);
    poison(value_scales.f32(), scales);
}

DeviceKVCache::DeviceKVCache(const ModelConfig& c, KvType type)
    : type_(type), n_layers_(c.n_layers), capacity_(c.seq_len), kv_dim_(c.kv_dim()), n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim) {
    allocate_kv_rows(type_, static_cast<std::size_t>(n_layers_) * static_cast<std::size_t>(capacity_), kv_dim_,
                     n_kv_heads_, keys_, values_, key_scales_, value_scales_);
}

std::size_t DeviceKVCache::layer_offset(int layer) const {
    if (layer < 0 || layer >= n_layers_)
        fail("KV cache: layer ", layer, " is outside [0, ", n_layers_, ")");
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(capacity_) *
           static_cast<std::size_t>(kv_dim_);
}

void DeviceKVCache::write(int layer, IntArg start_pos, const float* d_k, const float* d_v, int n_new) {
    const std::size_t base = layer_offset(layer);
    if (!start_pos.on_device()) check_kv_write(length_, capacity_, start_pos.value, n_new);
    if (type_ == KvType::fp32) {
        kv_write(keys_.f32() + base, values_.f32() + base, d_k, d_v, n_new, kv_dim_, start_pos);
        return;
    }
    const std::size_t scale_base = base / static_cast<std::size_t>(head_dim_);  // n_kv_heads per row
    kv_write_int8(static_cast<std::int8_t*>(keys_.data()) + base, key_scales_.f32() + scale_base,
                  static_cast<std::int8_t*>(values_.data()) + base, value_scales_.f32() + scale_base, d_k, d_v, n_new,
                  n_kv_heads_, head_dim_, start_pos);
}

void DeviceKVCache::advance(int n_new) { length_ += n_new; }

void DeviceKVCache::rewind(int position) {
    check_rewind(position, length_);
    length_ = position;
}

const float* DeviceKVCache::keys(int layer) const {
    if (type_ != KvType::fp32) fail("DeviceKVCache::keys: the cache is ", to_string(type_), "; use key_rows()");
    return keys_.f32() + layer_offset(layer);
}
const float* DeviceKVCache::values(int layer) const {
    if (type_ != KvType::fp32) fail("DeviceKVCache::values: the cache is ", to_string(type_), "; use value_rows()");
    return values_.f32() + layer_offset(layer);
}

KvRows DeviceKVCache::key_rows(int layer) const {
    const std::size_t base = layer_offset(layer);
    if (type_ == KvType::fp32) return KvRows::fp32(keys_.f32() + base);
    return KvRows::int8(static_cast<const std::int8_t*>(keys_.data()) + base,
                        key_scales_.f32() + base / static_cast<std::size_t>(head_dim_));
}
KvRows DeviceKVCache::value_rows(int layer) const {
    const std::size_t base = layer_offset(layer);
    if (type_ == KvType::fp32) return KvRows::fp32(values_.f32() + base);
    return KvRows::int8(static_cast<const std::int8_t*>(values_.data()) + base,
                        value_scales_.f32() + base / static_cast<std::size_t>(head_dim_));
}

}  // namespace glass::cuda
