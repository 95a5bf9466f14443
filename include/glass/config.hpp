/// \file
/// \brief glass/config.hpp — the shape of a model: every size the other stages are built from.
/// ```text
/// A decoder-only transformer is fully described (for inference) by a handful of integers.
/// For the shipped stories260K model they are: dim 64, hidden_dim 172, 5 layers, 8 query heads,
/// 4 KV heads, vocabulary 512, context 512. Everything else derives from them.
/// ```
#pragma once

#include <cstdint>

namespace glass {

/// How RoPE pairs up the dimensions of a head (see rope.hpp).
enum class RopeLayout {
    adjacent_pairs,  ///< (0,1) (2,3) ... — Meta's original code and llama2.c checkpoints
    half_split,      ///< (0,d/2) (1,d/2+1) ... — Hugging Face "rotate_half" checkpoints
};

struct ModelConfig {
    int dim = 0;          ///< d_model: width of the residual stream
    int hidden_dim = 0;   ///< width of the MLP's inner layer
    int n_layers = 0;     ///< transformer blocks stacked
    int n_heads = 0;      ///< query heads
    int n_kv_heads = 0;   ///< key/value heads (< n_heads means grouped-query attention)
    int vocab_size = 0;   ///< rows of the embedding table, columns of the logits
    int seq_len = 0;      ///< context window: the most positions one sequence may use
    bool shared_classifier = true;  ///< output projection reuses the embedding table
    float rope_theta = 10000.0f;    ///< RoPE base frequency
    float norm_eps = 1e-5f;         ///< RMSNorm epsilon
    RopeLayout rope_layout = RopeLayout::adjacent_pairs;

    int head_dim() const { return dim / n_heads; }
    int kv_dim() const { return n_kv_heads * head_dim(); }       // width of one K (or V) row
    int heads_per_kv_head() const { return n_heads / n_kv_heads; }  // GQA group size

    // Bytes one position adds to the KV cache: K and V, every layer, every KV head (fp32 here).
    std::int64_t kv_bytes_per_token(int bytes_per_value = 4) const {
        return std::int64_t{2} * n_layers * n_kv_heads * head_dim() * bytes_per_value;
    }
};

/// How cached keys and values are stored (kv_cache.hpp): fp32, or int8 with one fp32 scale per
/// KV head and position.
enum class KvType { fp32, int8 };
inline const char* to_string(KvType t) { return t == KvType::fp32 ? "fp32" : "int8"; }

/// Bytes one position adds to the cache: fp32 2 · n_layers · kv_dim · 4; int8 2 · n_layers ·
/// n_kv_heads · (head_dim + 4): one byte per value and one fp32 scale per KV head.
inline std::int64_t kv_bytes_per_token(const ModelConfig& c, KvType t) {
    if (t == KvType::fp32) return c.kv_bytes_per_token(4);
    return std::int64_t{2} * c.n_layers * c.n_kv_heads * (c.head_dim() + 4);
}

}  // namespace glass
