/// \file
/// \brief glass/config.hpp — the shape of a model: every size the other stages are built from.
/// ```text
/// A decoder-only transformer is fully described (for inference) by a handful of integers.
/// For the shipped stories260K model they are: dim 64, hidden_dim 172, 5 layers, 8 query heads,
/// 4 KV heads, vocabulary 512, context 512. Everything else derives from them.
/// ```
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "glass/errors.hpp"

namespace glass {

/// How RoPE pairs up the dimensions of a head (see rope.hpp).
enum class RopeLayout {
    adjacent_pairs,  ///< (0,1) (2,3) ... — Meta's original code, llama2.c, llama.cpp's `llama` GGUFs
    half_split,      ///< (0,d/2) (1,d/2+1) ... — Hugging Face "rotate_half"; GGUF qwen2/qwen3/gemma3
};

/// How RoPE's frequencies are stretched for contexts longer than the model was trained on
/// (rope.hpp, rope_scaled_frequency). `none` keeps them.
enum class RopeScalingType {
    none,
    linear,  ///< every frequency / factor (position interpolation; Gemma 3 4B+ global layers)
    llama3,  ///< Llama 3.1+: fast pairs kept, slow pairs / factor, a blend between
    per_pair,  ///< pair i's frequency / divisors[i]: llama3 as a GGUF stores it (rope_freqs)
};

/// The numbers of a RoPE scaling rule ("rope_scaling" in a Hugging Face config.json).
struct RopeScaling {
    RopeScalingType type = RopeScalingType::none;
    float factor = 1.0f;           ///< how many times slower the slowed pairs turn (Llama 3.1: 8)
    float low_freq_factor = 1.0f;  ///< llama3: original_context / this = where slowing is complete (1)
    float high_freq_factor = 4.0f; ///< llama3: original_context / this = where slowing begins (4)
    int original_context = 8192;   ///< llama3: the context length the model was first trained with
    std::vector<float> divisors;   ///< per_pair: [head_dim / 2]
};

/// The MLP's gate nonlinearity (mlp.hpp).
enum class MlpActivation {
    silu,       ///< SwiGLU: Llama, Mistral, Qwen2, Qwen3, SmolLM
    gelu_tanh,  ///< GeGLU with the tanh approximation of GELU: Gemma 2 and 3
};

/// The shape of a model and how its layers differ from Llama 2's. The defaults ARE Llama 2 (and
/// llama2.c's checkpoints): every family field below left at its default reproduces it exactly.
/// Each backend reads each field in one place; the reference header that uses it says which
/// models set it and why.
struct ModelConfig {
    int dim = 0;          ///< d_model: width of the residual stream
    int hidden_dim = 0;   ///< width of the MLP's inner layer
    int n_layers = 0;     ///< transformer blocks stacked
    int n_heads = 0;      ///< query heads
    int n_kv_heads = 0;   ///< key/value heads (< n_heads means grouped-query attention)
    int head_dim = 0;     ///< numbers per head: dim / n_heads in Llama; its own value in Qwen3 and
                          ///< Gemma (Qwen3 0.6B: dim 1024, 16 heads of 128)
    int vocab_size = 0;   ///< rows of the embedding table, columns of the logits
    int seq_len = 0;      ///< context window: the most positions one sequence may use
    bool shared_classifier = true;  ///< output projection reuses the embedding table ("tied")
    float rope_theta = 10000.0f;    ///< RoPE base frequency (Llama 3: 500000, Qwen2: 1e6)
    float norm_eps = 1e-5f;         ///< RMSNorm epsilon
    RopeLayout rope_layout = RopeLayout::adjacent_pairs;

    // ---- Family deltas: how later models differ from Llama 2 (defaults: Llama 2) ----
    RopeScaling rope_scaling;          ///< rope.hpp: Llama 3.1 `llama3`, Gemma 3 `linear` (global layers)
    bool qkv_bias = false;             ///< attention.hpp: Q, K, V projections add a bias (Qwen2)
    bool qk_norm = false;              ///< rmsnorm.hpp: RMSNorm per head on q and k before RoPE (Qwen3, Gemma 3)
    float norm_weight_offset = 0.0f;   ///< rmsnorm.hpp: gain is (offset + w); Gemma's Hugging Face
                                       ///< weights store w for x·(1+w) (1); GGUF stores w+1 (0)
    bool sandwich_norms = false;       ///< transformer.hpp: extra norms after attention and after
                                       ///< the MLP, before the residual add (Gemma 2 and 3)
    MlpActivation mlp_activation = MlpActivation::silu;  ///< mlp.hpp (Gemma: gelu_tanh)
    float embedding_scale = 1.0f;      ///< embedding.hpp: rows × this (Gemma: √dim)
    float attention_scale = 0.0f;      ///< attention.hpp: scores × this; 0 means 1/√head_dim
                                       ///< (Gemma: 1/√query_pre_attn_scalar)
    float attn_logit_softcap = 0.0f;   ///< attention.hpp: scores -> cap·tanh(scores/cap); 0 = off (Gemma 2: 50)
    float final_logit_softcap = 0.0f;  ///< transformer.hpp: logits likewise (Gemma 2: 30)
    int sliding_window = 0;            ///< attention.hpp: a local layer's query sees the last this many
                                       ///< positions; 0 = every layer global (Mistral 7B v0.1: 4096)
    int sliding_window_pattern = 0;    ///< which layers are local: 0 = all (Mistral); P = all but every
                                       ///< P-th (Gemma 2: 2, Gemma 3: 6, i.e. 5 local : 1 global)
    float rope_theta_local = 0.0f;     ///< rope.hpp: base of the local layers; 0 = rope_theta (Gemma 3: 10000)

    /// Token ids the model's files say end a reply, besides the tokenizer's EOS: a Hugging Face
    /// folder's eos_token_id (config.json and generation_config.json; Llama 3.1 Instruct lists
    /// <|end_of_text|>, <|eom_id|> and <|eot_id|>). load_model_tokenizer hands them to the
    /// tokenizer, whose ends_generation() generate() and the engine stop on. Empty for llama2.c
    /// checkpoints; a GGUF's come from its vocabulary (gguf_vocab.hpp).
    std::vector<int> end_of_generation_ids;

    int q_dim() const { return n_heads * head_dim; }       // width of all query heads side by side
    int kv_dim() const { return n_kv_heads * head_dim; }   // width of one K (or V) row
    int heads_per_kv_head() const { return n_heads / n_kv_heads; }  // GQA group size

    /// Does layer `l` attend through a sliding window (a "local" layer)?
    bool layer_is_local(int l) const {
        if (sliding_window <= 0) return false;
        return sliding_window_pattern <= 0 || (l + 1) % sliding_window_pattern != 0;
    }
    /// The positions layer `l`'s queries may see behind them, themselves included; 0 = all.
    int window_of_layer(int l) const { return layer_is_local(l) ? sliding_window : 0; }
    /// RoPE base of layer `l`: Gemma 3's local layers turn faster than its global ones.
    float rope_theta_of_layer(int l) const {
        return layer_is_local(l) && rope_theta_local > 0.0f ? rope_theta_local : rope_theta;
    }
    /// RoPE scaling of layer `l`: Gemma 3 stretches its global layers only.
    RopeScaling rope_scaling_of_layer(int l) const {
        return layer_is_local(l) && rope_theta_local > 0.0f ? RopeScaling{} : rope_scaling;
    }
    /// The factor attention scores are multiplied by.
    float attention_score_scale() const {
        return attention_scale > 0.0f ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
    }
    // Bytes one position adds to the KV cache: K and V, every layer, every KV head (fp32 here).
    std::int64_t kv_bytes_per_token(int bytes_per_value = 4) const {
        return std::int64_t{2} * n_layers * n_kv_heads * head_dim * bytes_per_value;
    }
};

/// The family deltas `c` uses, by name ("qkv_bias", "sliding_window", ...); empty for Llama 2.
/// (`glass inspect` lists them; a backend that lacks one refuses the model with this name.)
inline std::vector<std::string> family_deltas(const ModelConfig& c) {
    const std::pair<bool, std::string_view> fields[] = {
        {c.head_dim * c.n_heads != c.dim, "head_dim != dim / n_heads"},
        {c.rope_scaling.type != RopeScalingType::none, "rope_scaling"},
        {c.qkv_bias, "qkv_bias"},
        {c.qk_norm, "qk_norm"},
        {c.norm_weight_offset != 0.0f, "norm_weight_offset"},
        {c.sandwich_norms, "sandwich_norms"},
        {c.mlp_activation != MlpActivation::silu, "gelu_tanh"},
        {c.embedding_scale != 1.0f, "embedding_scale"},
        {c.attention_scale != 0.0f, "attention_scale"},
        {c.attn_logit_softcap != 0.0f, "attn_logit_softcap"},
        {c.final_logit_softcap != 0.0f, "final_logit_softcap"},
        {c.sliding_window != 0, "sliding_window"},
        {c.rope_theta_local != 0.0f, "rope_theta_local"},
    };
    std::vector<std::string> used;
    for (const auto& [on, name] : fields)
        if (on) used.emplace_back(name);
    return used;
}

/// Throws glass::Error naming every family delta of `c` when `backend` runs Llama 2's
/// architecture only (quantized_model and the llama2.c/GGUF writers).
inline void require_llama2_architecture(const ModelConfig& c, const char* backend) {
    const std::vector<std::string> used = family_deltas(c);
    if (used.empty()) return;
    std::string names;
    for (const std::string& u : used) {
        if (!names.empty()) names += ", ";
        names += u;
    }
    fail(backend, " runs Llama 2's architecture only; this model uses: ", names,
         " (run it on the CPU: the reference, or the fast path with --threads/--precision)");
}

/// A config of Llama 2's architecture from the seven numbers of a llama2.c header
/// (head_dim = dim / n_heads; every family field at its default).
inline ModelConfig llama2_config(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                                 int vocab_size, int seq_len) {
    ModelConfig c;
    c.dim = dim;
    c.hidden_dim = hidden_dim;
    c.n_layers = n_layers;
    c.n_heads = n_heads;
    c.n_kv_heads = n_kv_heads;
    c.head_dim = n_heads > 0 ? dim / n_heads : 0;
    c.vocab_size = vocab_size;
    c.seq_len = seq_len;
    return c;
}

/// How cached keys and values are stored (kv_cache.hpp): fp32, or int8 with one fp32 scale per
/// KV head and position.
enum class KvType { fp32, int8 };
inline const char* to_string(KvType t) { return t == KvType::fp32 ? "fp32" : "int8"; }

/// Bytes one position adds to the cache: fp32 2 · n_layers · kv_dim · 4; int8 2 · n_layers ·
/// n_kv_heads · (head_dim + 4): one byte per value and one fp32 scale per KV head.
inline std::int64_t kv_bytes_per_token(const ModelConfig& c, KvType t) {
    if (t == KvType::fp32) return c.kv_bytes_per_token(4);
    return std::int64_t{2} * c.n_layers * c.n_kv_heads * (c.head_dim + 4);
}

}  // namespace glass
