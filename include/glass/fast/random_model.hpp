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
#include "glass/tensor.hpp"

namespace glass::fast {

// The llama2.c header of a named shape. stories* share the classifier with the embedding
// (as the released checkpoints do); TinyLlama has its own classifier and 4 KV heads (GQA).
inline ModelConfig shape_config(const std::string& name) {
    ModelConfig c;
    auto set = [&c](int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq, bool shared) {
        c.dim = dim; c.hidden_dim = hidden; c.n_layers = layers; c.n_heads = heads;
        c.n_kv_heads = kv_heads; c.vocab_size = vocab; c.seq_len = seq; c.shared_classifier = shared;
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
    for (std::int64_t i = 0; i < std::int64_t{c.seq_len} * c.head_dim(); ++i) emit(0.0f);  // legacy RoPE tables
    if (!c.shared_classifier) matrix(std::int64_t{c.vocab_size} * d, d);
}

inline void header_of(const ModelConfig& c, std::int32_t h[7]) {
    h[0] = c.dim; h[1] = c.hidden_dim; h[2] = c.n_layers; h[3] = c.n_heads; h[4] = c.n_kv_heads;
    h[5] = c.shared_classifier ? c.vocab_size : -c.vocab_size; h[6] = c.seq_len;
}

// Writes a llama2.c legacy checkpoint of shape c with random weights to `path`.
inline void write_random_checkpoint(const ModelConfig& c, const std::string& path, std::uint64_t seed) {
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
    auto floats = std::make_shared<std::vector<float>>();
    floats->reserve(static_cast<size_t>((llama2c_file_bytes(c) - 28) / 4));
    random_weights(c, seed, [&](float v) { floats->push_back(v); });
    const float* data = floats->data();
    return model_from_llama2c_bytes(c, data, std::move(floats));
}

}  // namespace glass::fast
