/// \file
/// \brief glass/checkpoint.hpp — journey step 0: get the trained weights into memory.
/// ```text
/// In:  a llama2.c checkpoint file ("legacy" format, as exported by llama2.c and shipped in
///      models/stories260K.bin).
/// Out: a Model: the ModelConfig plus read-only Eigen views of every weight, straight into the
///      mmap'd file (no copy, no parsing of floats).
///
/// File layout (all little-endian):
///   7 × int32 header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
///     (a negative vocab_size means the output classifier is stored separately at the end)
///   fp32 arrays, in this order:
///     token_embedding [vocab, dim]
///     rms_att  [layers, dim]            wq [layers, dim, dim]      wk [layers, kv_dim, dim]
///     wv [layers, kv_dim, dim]          wo [layers, dim, dim]      rms_ffn [layers, dim]
///     w1 [layers, hidden, dim]          w2 [layers, dim, hidden]   w3 [layers, hidden, dim]
///     rms_final [dim]
///     2 × seq_len × head_dim/2 legacy RoPE tables (skipped: rope.hpp computes the angles)
///     wcls [vocab, dim]                 (only when vocab_size was negative)
///
/// The header is untrusted input: every size is range-checked, the total is computed without
/// overflow, and the file must be exactly as long as the header says.
/// ```
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// A weight matrix as its file stores it, row after row, in one of GGUF's types (gguf_model.hpp:
/// 0 F32, 1 F16, 30 BF16, 8 Q8_0, 2 Q4_0; safetensors' F16/BF16 are the same bytes). The fast
/// path packs its panels from these bytes, so a BF16 or Q4_0 file is never widened to fp32.
struct StoredMatrix {
    std::uint32_t type = 0;       ///< the ggml type of `bytes`
    const char* bytes = nullptr;  ///< null: nothing recorded (a llama2.c checkpoint: use the fp32 view)
    bool in_file = false;         ///< `bytes` lie in the read-only file mapping (not a copy in memory)
};

/// What a loader makes of weights that are not fp32 in the file (load_model's second argument).
enum class LoadWeights {
    fp32,       ///< widened once into fp32 copies: what the reference and CUDA paths read
    as_stored,  ///< left in the file's type (StoredMatrix); the fp32 views of those matrices are
                ///< null, so only the fast path (which packs from the stored bytes) can run it
};

/// One transformer block's weights. Matrices are [out, in]: y = W x.
struct LayerWeights {
    ConstVectorMap rms_att;  ///< [dim]            RMSNorm gain before attention
    ConstMatrixMap wq;       ///< [q_dim, dim]      x -> queries (all heads side by side)
    ConstMatrixMap wk;       ///< [kv_dim, dim]     x -> keys    (KV heads side by side)
    ConstMatrixMap wv;       ///< [kv_dim, dim]     x -> values
    ConstMatrixMap wo;       ///< [dim, q_dim]      concatenated heads -> residual stream
    ConstVectorMap rms_ffn;  ///< [dim]            RMSNorm gain before the MLP
    ConstMatrixMap w1;       ///< [hidden, dim]     gate projection
    ConstMatrixMap w2;       ///< [dim, hidden]     down projection
    ConstMatrixMap w3;       ///< [hidden, dim]     up projection

    // Family deltas: empty (size 0) unless the config asks for them (config.hpp says who does).
    ConstVectorMap bq{nullptr, 0};                   ///< [q_dim]   query bias (qkv_bias: Qwen2)
    ConstVectorMap bk{nullptr, 0};                   ///< [kv_dim]  key bias
    ConstVectorMap bv{nullptr, 0};                   ///< [kv_dim]  value bias
    ConstVectorMap q_norm{nullptr, 0};               ///< [head_dim] per-head gain on q (qk_norm: Qwen3, Gemma 3)
    ConstVectorMap k_norm{nullptr, 0};               ///< [head_dim] per-head gain on k
    ConstVectorMap post_attention_norm{nullptr, 0};  ///< [dim] gain on attention's output (sandwich_norms: Gemma)
    ConstVectorMap post_mlp_norm{nullptr, 0};        ///< [dim] gain on the MLP's output

    /// The matrices above as the file stores them (GGUF, safetensors); empty for llama2.c.
    struct Stored {
        StoredMatrix wq, wk, wv, wo, w1, w2, w3;
    } stored = {};
};

/// The whole model: shapes plus views of every weight. Owns the mapping; move-only.
struct Model {
    ModelConfig config;
    std::vector<LayerWeights> layers;
    const float* token_embedding = nullptr;  ///< [vocab, dim]
    const float* rms_final = nullptr;        ///< [dim]
    const float* classifier = nullptr;       ///< [vocab, dim] (== token_embedding when shared)
    std::shared_ptr<const void> storage;     ///< keeps the mmap (or an owned buffer) alive
    std::int64_t weight_bytes = 0;           ///< bytes of weights read per forward position
    StoredMatrix stored_embedding = {};      ///< token_embedding as stored (GGUF, safetensors)
    StoredMatrix stored_classifier = {};     ///< classifier as stored
    /// False when loaded with LoadWeights::as_stored and some matrix is not fp32 in the file:
    /// then its fp32 view is null and only the fast path can run the model.
    bool fp32_weights = true;

    ConstMatrixMap embedding_table() const {
        return ConstMatrixMap(token_embedding, config.vocab_size, config.dim);
    }
    ConstMatrixMap output_classifier() const {
        return ConstMatrixMap(classifier, config.vocab_size, config.dim);
    }
    ConstVectorMap final_norm() const { return ConstVectorMap(rms_final, config.dim); }
};

/// Refuses a model whose weights were left in their stored type (LoadWeights::as_stored) on a
/// path that reads fp32 views: `who` names the path.
inline void require_fp32_weights(const Model& m, const char* who) {
    if (!m.fp32_weights)
        fail(who, " reads fp32 weights, but this model was loaded with its weights in their stored type "
             "(LoadWeights::as_stored): load it with LoadWeights::fp32, or run it on the fast path");
}

namespace detail {

/// a * b with an error instead of silent wrap-around.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) fail("checkpoint header: size of ", what, " overflows");
    return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) fail("checkpoint header: total size overflows");
    return r;
}

}  // namespace detail

/// Reads and validates the 7-int header. Limits are generous (far beyond any model glass can
/// run) but finite, so a corrupted header cannot make us compute absurd sizes.
inline ModelConfig parse_llama2c_header(const std::int32_t h[7]) {
    if (h[0] == 0x616b3432)  // "ak42": llama2.c's newer export --version 1/2 format
        fail("checkpoint uses llama2.c's versioned format (magic 'ak42'); only the legacy "
             "format (export.py --version 0) is supported");
    ModelConfig c;
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.shared_classifier = h[5] > 0;
    // A negative vocab_size flags a separate classifier; check its magnitude in 64 bits so that
    // INT32_MIN is reported as itself, not as a wrapped-around value.
    const std::int64_t vocab_magnitude = h[5] < 0 ? -static_cast<std::int64_t>(h[5]) : h[5];
    if (vocab_magnitude < 1 || vocab_magnitude > (1 << 22))
        fail("checkpoint header: vocab_size = ", h[5], " is outside [1, ", 1 << 22,
             "] (negative means a separate classifier)");
    c.vocab_size = static_cast<int>(vocab_magnitude);
    c.seq_len = h[6];
    auto check_range = [](const char* name, std::int64_t v, std::int64_t hi) {
        if (v < 1 || v > hi) fail("checkpoint header: ", name, " = ", v, " is outside [1, ", hi, "]");
    };
    check_range("dim", c.dim, 1 << 16);
    check_range("hidden_dim", c.hidden_dim, 1 << 18);
    check_range("n_layers", c.n_layers, 1024);
    check_range("n_heads", c.n_heads, 1024);
    check_range("n_kv_heads", c.n_kv_heads, 1024);
    check_range("seq_len", c.seq_len, 1 << 22);
    if (c.dim % c.n_heads != 0)
        fail("checkpoint header: dim ", c.dim, " is not divisible by n_heads ", c.n_heads);
    if (c.n_heads % c.n_kv_heads != 0)
        fail("checkpoint header: n_heads ", c.n_heads, " is not a multiple of n_kv_heads ",
             c.n_kv_heads);
    c.head_dim = c.dim / c.n_heads;
    if (c.head_dim % 2 != 0)
        fail("checkpoint header: head_dim ", c.head_dim, " is odd; RoPE rotates pairs");
    return c;
}

/// Number of bytes a legacy llama2.c checkpoint with this config must have.
inline std::int64_t llama2c_file_bytes(const ModelConfig& c) {
    using detail::checked_add;
    using detail::checked_mul;
    const std::int64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
    std::int64_t floats = checked_mul(c.vocab_size, d, "token_embedding");
    std::int64_t per_layer = 0;
    per_layer = checked_add(per_layer, 2 * d);                           // rms_att, rms_ffn
    per_layer = checked_add(per_layer, checked_mul(d, d, "wq") * 2);     // wq, wo
    per_layer = checked_add(per_layer, checked_mul(kv, d, "wk") * 2);    // wk, wv
    per_layer = checked_add(per_layer, checked_mul(h, d, "w1") * 3);     // w1, w2, w3
    floats = checked_add(floats, checked_mul(L, per_layer, "layers"));
    floats = checked_add(floats, d);                                     // rms_final
    floats = checked_add(floats, checked_mul(c.seq_len, c.head_dim, "rope tables"));
    if (!c.shared_classifier) floats = checked_add(floats, checked_mul(c.vocab_size, d, "wcls"));
    return checked_add(28, checked_mul(floats, 4, "weights"));
}

/// Builds the weight views over `data` (which must hold llama2c_file_bytes(config) bytes).
inline Model model_from_llama2c_bytes(const ModelConfig& c, const float* weights,
                                      std::shared_ptr<const void> storage) {
    Model m;
    m.config = c;
    m.storage = std::move(storage);
    const std::int64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
    const float* p = weights;
    m.token_embedding = p;
    p += std::int64_t{c.vocab_size} * d;
    const float* rms_att = p;  p += L * d;
    const float* wq = p;       p += L * d * d;
    const float* wk = p;       p += L * kv * d;
    const float* wv = p;       p += L * kv * d;
    const float* wo = p;       p += L * d * d;
    const float* rms_ffn = p;  p += L * d;
    const float* w1 = p;       p += L * h * d;
    const float* w2 = p;       p += L * d * h;
    const float* w3 = p;       p += L * h * d;
    m.rms_final = p;           p += d;
    p += std::int64_t{c.seq_len} * c.head_dim;  // legacy freq_cis_real + freq_cis_imag
    m.classifier = c.shared_classifier ? m.token_embedding : p;
    for (std::int64_t l = 0; l < L; ++l) {
        m.layers.push_back(LayerWeights{
            ConstVectorMap(rms_att + l * d, d),
            ConstMatrixMap(wq + l * d * d, d, d),
            ConstMatrixMap(wk + l * kv * d, kv, d),
            ConstMatrixMap(wv + l * kv * d, kv, d),
            ConstMatrixMap(wo + l * d * d, d, d),
            ConstVectorMap(rms_ffn + l * d, d),
            ConstMatrixMap(w1 + l * h * d, h, d),
            ConstMatrixMap(w2 + l * d * h, d, h),
            ConstMatrixMap(w3 + l * h * d, h, d),
        });
    }
    // Bytes of weights one decoded position streams from memory: every layer matrix and norm,
    // the final norm and the classifier (the embedding lookup itself reads one row only).
    const std::int64_t per_layer = 2 * d + 2 * d * d + 2 * kv * d + 3 * h * d;
    m.weight_bytes = 4 * (L * per_layer + d + std::int64_t{c.vocab_size} * d);
    return m;
}

/// Opens, validates and maps a checkpoint. Throws glass::Error naming the file and the problem.
inline Model load_llama2c_checkpoint(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open model file '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("model file '", path, "' is not a regular file");
    }
    const std::int64_t file_bytes = st.st_size;
    std::int32_t header[7] = {};
    if (file_bytes < 28 || ::pread(fd, header, 28, 0) != 28) {
        ::close(fd);
        fail("model file '", path, "' is ", file_bytes, " bytes: too short for the 28-byte header");
    }
    ModelConfig config;
    std::int64_t expected = 0;
    try {
        config = parse_llama2c_header(header);
        expected = llama2c_file_bytes(config);
    } catch (const Error& e) {
        ::close(fd);
        fail("model file '", path, "': ", e.what());
    }
    if (expected != file_bytes) {
        ::close(fd);
        fail("model file '", path, "' is ", file_bytes, " bytes but its header (dim ", config.dim,
             ", hidden ", config.hidden_dim, ", layers ", config.n_layers, ", heads ",
             config.n_heads, "/", config.n_kv_heads, ", vocab ", config.vocab_size, ", seq_len ",
             config.seq_len, ") implies ", expected, " bytes: truncated or not a llama2.c checkpoint");
    }
    void* data = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) fail("cannot mmap model file '", path, "': ", std::strerror(errno));
    std::shared_ptr<const void> storage(data, [file_bytes](const void* p) {
        ::munmap(const_cast<void*>(p), static_cast<size_t>(file_bytes));
    });
    const float* weights = reinterpret_cast<const float*>(static_cast<const char*>(data) + 28);
    return model_from_llama2c_bytes(config, weights, std::move(storage));
}

}  // namespace glass
