/// \file
/// \brief cuda/kv_cache.cpp — journey step 6/8 on the GPU: the KV cache in device memory.
/// ```text
/// Layout as glass::KVCache (kv_cache.hpp): [layer][position, kv_head, head_dim], fp32. K and V are
/// each one allocation of n_layers · seq_len · kv_dim floats, made once; layer l starts at
/// l · seq_len · kv_dim. Only the bookkeeping (length, the write rule) lives on the host, and the
/// rule itself is glass::check_kv_write, shared with the CPU cache.
/// ```
#include "glass/kv_cache.hpp"

#include "glass_cuda.hpp"

namespace glass::cuda {

DeviceKVCache::DeviceKVCache(const ModelConfig& c)
    : n_layers_(c.n_layers), capacity_(c.seq_len), kv_dim_(c.kv_dim()) {
    const std::size_t floats = static_cast<std::size_t>(n_layers_) * static_cast<std::size_t>(capacity_) *
                               static_cast<std::size_t>(kv_dim_);
    keys_ = DeviceBuffer(floats * sizeof(float));
    values_ = DeviceBuffer(floats * sizeof(float));
    // Rows past length() are never read; NaN there makes any read that strays past it visible.
    poison(keys_.f32(), floats);
    poison(values_.f32(), floats);
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
    kv_write(keys_.f32() + base, values_.f32() + base, d_k, d_v, n_new, kv_dim_, start_pos);
}

void DeviceKVCache::advance(int n_new) { length_ += n_new; }

void DeviceKVCache::rewind(int position) {
    check_rewind(position, length_);
    length_ = position;
}

const float* DeviceKVCache::keys(int layer) const { return keys_.f32() + layer_offset(layer); }
const float* DeviceKVCache::values(int layer) const { return values_.f32() + layer_offset(layer); }

}  // namespace glass::cuda
