/// \file
/// \brief glass/fast/random_model.hpp — checkpoints of real model shapes filled with random weights.
/// ```text
/// Speed depends on shapes, not on what the weights say, so the benchmarks use llama2.c-format
/// files with the shapes of stories15M, stories110M and TinyLlama-1.1B without downloading them.
/// Weights are uniform with standard deviation 1/√fan_in (so each product keeps the activation
/// scale), norm gains are 1, embeddings have std 0.5/√dim: every activation and logit stays a
/// modest finite number through any number of layers (the residual stream grows like √layers).
/// ```
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/rope.hpp"
#include "glass/tensor.hpp"

namespace glass::fast {

// The llama2.c header of a named shape. stories* share the classifier with the embedding
// (as the released checkpoints do); TinyLlama has its own classifier and 4 KV heads (GQA).
inline ModelConfig shape_config(const std::string& name) {
    ModelConfig c;
    auto set = [&c](int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq, bool shared) {
        c.dim = dim; c.hidden_dim = hidden; c.n_layers = layers; c.n_heads = heads;
        c.n_kv_heads = kv_heads; c.vocab_size = vocab; c.seq_len = seq; c.shared_classifier = shared;
        c.head_dim = dim / heads;
    };
    if (name == "stories15M") set(288, 768, 6, 6, 6, 32000, 256, true);
    else if (name == "stories110M") set(768, 2048, 12, 12, 12, 32000, 1024, true);
    else if (name == "tinyllama1b") set(2048, 5632, 22, 32, 4, 32000, 2048, false);
    else fail("unknown shape '", name, "' (stories15M, stories110M, tinyllama1b)");
    return c;
}

// A [rows, cols] matrix of independent normal(0, spread) numbers, filled row by row from rng:
// the activations of the attention tests, benchmarks and examples.
inline RowMatrix random_normal_matrix(int rows, int cols, std::mt19937& rng, float spread = 1.0f) {
    std::normal_distribution<float> normal(0.0f, spread);
    RowMatrix m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
}

// A small, fast generator (xorshift64*): uniform floats in [-1, 1).
struct RandomFloats {
    std::uint64_t state;
    explicit RandomFloats(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
    float next() {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        const std::uint32_t bits = static_cast<std::uint32_t>((state * 0x2545F4914F6CDD1Dull) >> 40);
        return static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f;  // 24 random bits
    }
};

// Calls emit(float) for every weight of a checkpoint of shape c, in file order (after the header).
template <typename Emit>
void random_weights(const ModelConfig& c, std::uint64_t seed, Emit&& emit) {
    RandomFloats rng(seed);
    const std::int64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
    const float uniform_std = 1.0f / std::sqrt(3.0f);  // std of uniform [-1, 1)
    auto matrix = [&](std::int64_t count, std::int64_t fan_in) {
        const float a = 1.0f / (std::sqrt(static_cast<float>(fan_in)) * uniform_std);
        for (std::int64_t i = 0; i < count; ++i) emit(a * rng.next());
    };
    auto ones = [&](std::int64_t count) { for (std::int64_t i = 0; i < count; ++i) emit(1.0f); };
    matrix(std::int64_t{c.vocab_size} * d, 4 * d);  // embedding: std 0.5/√dim
    ones(L * d);                                    // rms_att
    matrix(L * d * d, d);                           // wq
    matrix(L * kv * d, d);                          // wk
    matrix(L * kv * d, d);                          // wv
    matrix(L * d * d, d);                           // wo
    ones(L * d);                                    // rms_ffn
    matrix(L * h * d, d);                           // w1
    matrix(L * d * h, h);                           // w2
    matrix(L * h * d, d);                           // w3
    ones(d);                                        // rms_final
    for (std::int64_t i = 0; i < std::int64_t{c.seq_len} * c.head_dim; ++i) emit(0.0f);  // legacy RoPE tables
    if (!c.shared_classifier) matrix(std::int64_t{c.vocab_size} * d, d);
}

inline void header_of(const ModelConfig& c, std::int32_t h[7]) {
    h[0] = c.dim; h[1] = c.hidden_dim; h[2] = c.n_layers; h[3] = c.n_heads; h[4] = c.n_kv_heads;
    h[5] = c.shared_classifier ? c.vocab_size : -c.vocab_size; h[6] = c.seq_len;
}

// Writes a llama2.c legacy checkpoint of shape c with random weights to `path`.
inline void write_random_checkpoint(const ModelConfig& c, const std::string& path, std::uint64_t seed) {
    require_llama2_architecture(c, "a llama2.c checkpoint");
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot create '", path, "': ", std::strerror(errno));
    std::int32_t header[7];
    header_of(c, header);
    bool ok = std::fwrite(header, 4, 7, f) == 7;
    std::vector<float> buffer;
    buffer.reserve(1 << 20);
    random_weights(c, seed, [&](float v) {
        buffer.push_back(v);
        if (buffer.size() == buffer.capacity()) {
            ok = ok && std::fwrite(buffer.data(), 4, buffer.size(), f) == buffer.size();
            buffer.clear();
        }
    });
    ok = ok && std::fwrite(buffer.data(), 4, buffer.size(), f) == buffer.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) fail("writing '", path, "' failed (disk full?): ", std::strerror(errno));
}

// The same, in memory, as a loaded Model (tests use small custom shapes this way).
inline Model random_model_in_memory(const ModelConfig& c, std::uint64_t seed) {
    require_llama2_architecture(c, "a llama2.c checkpoint");
    auto floats = std::make_shared<std::vector<float>>();
    floats->reserve(static_cast<size_t>((llama2c_file_bytes(c) - 28) / 4));
    random_weights(c, seed, [&](float v) { floats->push_back(v); });
    const float* data = floats->data();
    return model_from_llama2c_bytes(c, data, std::move(floats));
}

/// Small configs of each family glass runs, every delta of the family switched on, sized for
/// tests (dim 64, grouped-query attention, a sliding window shorter than a test prompt):
/// llama2, llama3 (rope_scaling llama3), mistral (window 6), qwen2 (q/k/v bias, half-split RoPE,
/// base 1e6), qwen3 (+ per-head q/k norm, head_dim 32 ≠ 64/4), gemma2 (√dim embeddings, GELU-tanh,
/// x·(1+w) norms, sandwich norms, soft-caps 50/30, every other layer local), gemma3 (per-head
/// norms, 5 local : 1 global, local RoPE base 1e4, linear scaling on global layers).
inline ModelConfig small_family_config(const std::string& family) {
    ModelConfig c = llama2_config(64, 128, 2, 4, 2, 96, 64);
    if (family == "llama2") return c;
    if (family == "llama3") {
        c.rope_theta = 500000.0f;
        c.rope_scaling = llama3_rope_scaling();
        c.rope_scaling.original_context = 16;  // so that it bites on a test prompt
        return c;
    }
    if (family == "mistral") { c.sliding_window = 6; return c; }
    c.rope_layout = RopeLayout::half_split;
    c.rope_theta = 1000000.0f;
    if (family == "qwen2") { c.qkv_bias = true; return c; }
    if (family == "qwen3") { c.qk_norm = true; c.head_dim = 32; c.shared_classifier = false; return c; }
    // Gemma: GELU-tanh, √dim embeddings, (1+w) norms, sandwich norms, a head_dim of its own.
    c.mlp_activation = MlpActivation::gelu_tanh;
    c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
    c.norm_weight_offset = 1.0f;
    c.sandwich_norms = true;
    c.head_dim = 32;
    c.attention_scale = 1.0f / std::sqrt(24.0f);  // query_pre_attn_scalar 24 ≠ head_dim
    c.norm_eps = 1e-6f;
    if (family == "gemma2") {
        c.n_layers = 4;
        c.attn_logit_softcap = 50.0f;
        c.final_logit_softcap = 30.0f;
        c.sliding_window = 5;
        c.sliding_window_pattern = 2;
        return c;
    }
    if (family == "gemma3") {
        c.n_layers = 6;
        c.qk_norm = true;
        c.sliding_window = 5;
        c.sliding_window_pattern = 6;
        c.rope_theta_local = 10000.0f;
        c.rope_scaling.type = RopeScalingType::linear;
        c.rope_scaling.factor = 8.0f;
        return c;
    }
    fail("unknown family '", family, "' (llama2, llama3, mistral, qwen2, qwen3, gemma2, gemma3)");
}

/// \brief A model of any architecture ModelConfig describes, random weights, in memory.
///
/// The same recipe as random_weights (uniform, std 1/√fan_in; embeddings std 0.5/√dim) for every
/// matrix, plus the tensors the family deltas need: biases (small, std 0.1), per-head and sandwich
/// norm gains (1 + small noise, so a wrong gain shows). Norm gains are stored as the config
/// expects them: with norm_weight_offset 1 (Gemma's Hugging Face form) a gain of g is stored as
/// g - 1. Deterministic in `seed`.
inline Model random_family_model(const ModelConfig& c, std::uint64_t seed) {
    RandomFloats rng(seed);
    auto floats = std::make_shared<std::vector<float>>();
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // offset, count of each tensor
    const float uniform_std = 1.0f / std::sqrt(3.0f);
    auto matrix = [&](std::int64_t count, std::int64_t fan_in) {
        spans.emplace_back(static_cast<std::int64_t>(floats->size()), count);
        const float a = 1.0f / (std::sqrt(static_cast<float>(fan_in)) * uniform_std);
        for (std::int64_t i = 0; i < count; ++i) floats->push_back(a * rng.next());
        return spans.size() - 1;
    };
    auto gain = [&](std::int64_t count, float noise) {
        spans.emplace_back(static_cast<std::int64_t>(floats->size()), count);
        for (std::int64_t i = 0; i < count; ++i) floats->push_back(1.0f + noise * rng.next() - c.norm_weight_offset);
        return spans.size() - 1;
    };
    const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
    struct Ids { size_t rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, bq, bk, bv, qn, kn, pan, pmn; };
    const size_t embedding = matrix(V * d, 4 * d);
    std::vector<Ids> layer_ids;
    const size_t none = SIZE_MAX;
    for (int l = 0; l < c.n_layers; ++l) {
        Ids t{};
        t.rms_att = gain(d, 0.1f);
        t.wq = matrix(q * d, d);
        t.wk = matrix(kv * d, d);
        t.wv = matrix(kv * d, d);
        t.wo = matrix(d * q, q);
        t.rms_ffn = gain(d, 0.1f);
        t.w1 = matrix(h * d, d);
        t.w2 = matrix(d * h, h);
        t.w3 = matrix(h * d, d);
        t.bq = c.qkv_bias ? matrix(q, 300) : none;  // std 1/√300 · √3 ≈ 0.1
        t.bk = c.qkv_bias ? matrix(kv, 300) : none;
        t.bv = c.qkv_bias ? matrix(kv, 300) : none;
        t.qn = c.qk_norm ? gain(c.head_dim, 0.2f) : none;
        t.kn = c.qk_norm ? gain(c.head_dim, 0.2f) : none;
        t.pan = c.sandwich_norms ? gain(d, 0.1f) : none;
        t.pmn = c.sandwich_norms ? gain(d, 0.1f) : none;
        layer_ids.push_back(t);
    }
    const size_t final_norm = gain(d, 0.1f);
    const size_t classifier = c.shared_classifier ? embedding : matrix(V * d, d);

    // Views, now that the buffer no longer moves.
    const float* base = floats->data();
    auto at = [&](size_t id) { return base + spans[id].first; };
    auto vec = [&](size_t id) { return id == none ? ConstVectorMap(nullptr, 0) : ConstVectorMap(at(id), spans[id].second); };
    Model m;
    m.config = c;
    m.token_embedding = at(embedding);
    m.rms_final = at(final_norm);
    m.classifier = at(classifier);
    for (const Ids& t : layer_ids)
        m.layers.push_back(LayerWeights{
            .rms_att = vec(t.rms_att),
            .wq = ConstMatrixMap(at(t.wq), q, d),
            .wk = ConstMatrixMap(at(t.wk), kv, d),
            .wv = ConstMatrixMap(at(t.wv), kv, d),
            .wo = ConstMatrixMap(at(t.wo), d, q),
            .rms_ffn = vec(t.rms_ffn),
            .w1 = ConstMatrixMap(at(t.w1), h, d),
            .w2 = ConstMatrixMap(at(t.w2), d, h),
            .w3 = ConstMatrixMap(at(t.w3), h, d),
            .bq = vec(t.bq), .bk = vec(t.bk), .bv = vec(t.bv),
            .q_norm = vec(t.qn), .k_norm = vec(t.kn),
            .post_attention_norm = vec(t.pan), .post_mlp_norm = vec(t.pmn),
        });
    std::int64_t weight_floats = static_cast<std::int64_t>(floats->size()) - (c.shared_classifier ? 0 : V * d);
    m.weight_bytes = 4 * weight_floats;  // every layer, the final norm and the classifier
    m.storage = std::move(floats);
    return m;
}

}  // namespace glass::fast
