/// \file
/// \brief glass/formats/gguf_model.hpp — journey step 0 for the files people download: a model
/// from a GGUF file (llama.cpp's format), for the Llama, Mistral, Qwen2, Qwen3 and Gemma 2/3
/// families.
/// ```text
/// In:  a .gguf file (gguf.hpp reads its header): metadata keys "ARCH.*" (ARCH =
///      general.architecture) and tensors "token_embd", "blk.N.attn_q", ... in their stored types.
/// Out: a Model (checkpoint.hpp): its ModelConfig (the family deltas set from the architecture,
///      config.hpp) and fp32 views of every weight — straight into the mapped file for F32
///      tensors, dequantized once into memory for the others (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
///      Q5_1, Q4_K, Q5_K, Q6_K: ggml_quants.hpp) — or, loaded
///      LoadWeights::as_stored, those matrices left in their blocks for the fast path to pack.
///
/// Metadata -> ModelConfig (ARCH = llama, qwen2, qwen3, gemma2, gemma3):
///   ARCH.embedding_length dim; .feed_forward_length hidden_dim; .block_count n_layers;
///   .attention.head_count n_heads; .attention.head_count_kv n_kv_heads (default n_heads);
///   .attention.key_length head_dim (default dim / n_heads); .attention.layer_norm_rms_epsilon;
///   .rope.freq_base rope_theta; .context_length seq_len; vocab_size = token_embd's rows.
/// Tensor names -> LayerWeights (a GGUF tensor with ne = [in, out] holds the bytes of the
/// row-major [out, in] matrix, exactly what an Eigen view of [out, in] reads):
///   token_embd, output_norm, output (absent: tied to token_embd), rope_freqs (Llama 3.1+);
///   blk.N.attn_norm rms_att, .attn_q/_k/_v/_output wq wk wv wo, .attn_q/_k/_v.bias (Qwen2),
///   .attn_q_norm/.attn_k_norm (Qwen3, Gemma 3), .ffn_norm rms_ffn, .ffn_gate w1, .ffn_down w2,
///   .ffn_up w3, .post_attention_norm and .post_ffw_norm (Gemma 2/3).
/// What the converter already did, so glass does not do it again: llama's q/k rows are permuted
/// to adjacent-pair RoPE (the other architectures keep half-split rotation); Gemma's norm gains
/// are stored as w+1 (so norm_weight_offset stays 0 here, where a Hugging Face folder has 1).
///
/// Quantized blocks: ggml_quants.hpp draws each layout (Q8_0 ... Q6_K) and dequantizes it
/// exactly as ggml does. A Q4_K_M file mixes types (Q4_K, Q6_K, F32 norms): each tensor is read
/// in its own. Other types (Q2_K, Q3_K, the IQ family) are refused by name.
///
/// The file is untrusted: every tensor must lie inside it, have the shape the config implies and
/// a type glass reads, or glass::Error names the tensor, its shape or type, and what was expected.
/// ```
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/formats/gguf.hpp"
#include "glass/ggml_quants.hpp"
#include "glass/half.hpp"

namespace glass {

/// A GGUF model file, mapped: its header and where each tensor's bytes are.
struct GgufModelFile {
    std::string path;
    MappedFile file;
    GgufFile meta;
    std::vector<GgufTensorInfo> tensors;
    std::uint64_t data_offset = 0;
    std::map<std::string, size_t> index;  ///< tensor name -> position in `tensors`

    const GgufTensorInfo* find(const std::string& name) const {
        const auto it = index.find(name);
        return it == index.end() ? nullptr : &tensors[it->second];
    }
    /// The tensor's bytes, checked to lie inside the file.
    std::span<const char> bytes_of(const GgufTensorInfo& t) const {
        std::int64_t count = 1;
        for (const std::int64_t n : t.ne) {
            if (count > (std::int64_t{1} << 40) / n) fail("tensor '", t.name, "' is too large");
            count *= n;
        }
        const GgmlBlock b = ggml_block_of(t.type);
        if (b.weights == 0)
            fail("tensor '", t.name, "' has type ", ggml_type_name(t.type), ", which glass does not read yet (",
                 ggml_supported_types(), ")");
        if (t.ne[0] % b.weights != 0)
            fail("tensor '", t.name, "' rows of ", t.ne[0], " weights are not whole ", ggml_type_name(t.type),
                 " blocks of ", b.weights);
        const std::uint64_t n = static_cast<std::uint64_t>(ggml_bytes(t.type, count));
        const std::uint64_t size = file.bytes.size();
        if (data_offset > size || t.offset > size - data_offset || n > size - data_offset - t.offset)
            fail("tensor '", t.name, "' (", n, " bytes at offset ", t.offset, ") lies past the end of the file (",
                 size, " bytes): truncated?");
        return file.bytes.subspan(data_offset + t.offset, n);
    }
};

/// Maps a GGUF file and reads its header and tensor table.
inline GgufModelFile open_gguf_model(const std::string& path) {
    GgufModelFile f;
    f.path = path;
    f.file = map_file(path);
    try {
        f.meta = parse_gguf(f.file.bytes, &f.tensors, &f.data_offset);
    } catch (const Error& e) {
        fail("GGUF file '", path, "': ", e.what());
    }
    for (size_t i = 0; i < f.tensors.size(); ++i)
        if (!f.index.emplace(f.tensors[i].name, i).second) fail("GGUF file '", path, "': tensor '", f.tensors[i].name, "' appears twice");
    return f;
}

namespace detail {

/// An integer hyperparameter "ARCH.key", range-checked.
inline int gguf_hparam(const GgufFile& f, const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = f.has(key) ? f.get<std::int64_t>(key) : fallback;
    if (v == -1 && fallback == -1) fail("missing metadata key '", key, "'");
    if (v < lo || v > hi) fail("metadata ", key, " = ", v, " is outside [", lo, ", ", hi, "]");
    return static_cast<int>(v);
}
inline float gguf_float(const GgufFile& f, const std::string& key, float fallback) {
    return f.has(key) ? static_cast<float>(f.get<double>(key)) : fallback;
}

}  // namespace detail

/// The architectures glass reads from GGUF, as a list for error messages.
inline const char* gguf_supported_architectures() { return "llama, qwen2, qwen3, gemma2, gemma3"; }

/// Where each config value came from ("llama.embedding_length", "default", "architecture gemma3",
/// ...), by ModelConfig field name: what `glass inspect` shows beside each value.
using ConfigSources = std::map<std::string, std::string>;

/// \brief ModelConfig from a GGUF header: the shape from "ARCH.*" keys, the family deltas from
/// the architecture (what llama.cpp's loader does for each, llama-model.cpp). `sources`
/// (optional) receives where each value came from.
inline ModelConfig gguf_model_config(const GgufModelFile& g, ConfigSources* sources = nullptr) {
    const GgufFile& f = g.meta;
    ConfigSources from;
    const std::string arch = f.get_string("general.architecture", "");
    if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "gemma2" && arch != "gemma3")
        fail("architecture '", arch, "' is not supported (", gguf_supported_architectures(), ")");
    using detail::gguf_hparam;
    const std::string a = arch + ".";
    ModelConfig c;
    c.dim = gguf_hparam(f, a + "embedding_length", -1, 1, 1 << 16);
    c.hidden_dim = gguf_hparam(f, a + "feed_forward_length", -1, 1, 1 << 18);
    c.n_layers = gguf_hparam(f, a + "block_count", -1, 1, 1024);
    c.n_heads = gguf_hparam(f, a + "attention.head_count", -1, 1, 1024);
    c.n_kv_heads = gguf_hparam(f, a + "attention.head_count_kv", c.n_heads, 1, c.n_heads);
    c.head_dim = gguf_hparam(f, a + "attention.key_length", c.dim / c.n_heads, 2, 1 << 12);
    const int value_dim = gguf_hparam(f, a + "attention.value_length", c.head_dim, 1, 1 << 12);
    if (value_dim != c.head_dim) fail(a, "attention.value_length ", value_dim, " differs from key_length ", c.head_dim);
    if (c.head_dim % 2 != 0) fail("head_dim ", c.head_dim, " is odd; RoPE rotates pairs");
    if (c.n_heads % c.n_kv_heads != 0) fail("n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads);
    c.seq_len = gguf_hparam(f, a + "context_length", -1, 1, 1 << 22);
    c.norm_eps = detail::gguf_float(f, a + "attention.layer_norm_rms_epsilon", 1e-5f);
    c.rope_theta = detail::gguf_float(f, a + "rope.freq_base", 10000.0f);
    const GgufTensorInfo* embd = g.find("token_embd.weight");
    if (!embd || embd->ne.size() != 2) fail("tensor 'token_embd.weight' is missing or not a matrix");
    c.vocab_size = static_cast<int>(embd->ne[1]);
    c.shared_classifier = g.find("output.weight") == nullptr;

    // The family deltas: llama's GGUF q/k rows are already in adjacent-pair order; the others
    // rotate halves (llama.cpp's NEOX rope type).
    if (arch != "llama") c.rope_layout = RopeLayout::half_split;
    if (arch == "qwen2") c.qkv_bias = true;
    if (arch == "qwen3" || arch == "gemma3") c.qk_norm = true;
    if (arch == "gemma2" || arch == "gemma3") {
        c.mlp_activation = MlpActivation::gelu_tanh;
        c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
        c.sandwich_norms = true;  // norms stored as w + 1 by the converter: offset stays 0
        c.sliding_window = gguf_hparam(f, a + "attention.sliding_window", 0, 0, 1 << 22);
        // llama.cpp: 1/√head_dim, but 1/√(dim / n_heads) for the 27B models (their
        // query_pre_attn_scalar), recognised by their layer count (46 for Gemma 2, 62 for Gemma 3).
        const bool is_27b = (arch == "gemma2" && c.n_layers == 46) || (arch == "gemma3" && c.n_layers == 62);
        if (is_27b) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
    }
    if (arch == "gemma2") {
        c.attn_logit_softcap = detail::gguf_float(f, a + "attn_logit_softcapping", 50.0f);
        c.final_logit_softcap = detail::gguf_float(f, a + "final_logit_softcapping", 30.0f);
        c.sliding_window_pattern = 2;  // llama.cpp: every other layer local, starting with layer 0
    }
    if (arch == "gemma3") {
        c.sliding_window_pattern = 6;    // llama.cpp: 5 local layers, then 1 global
        c.rope_theta_local = 10000.0f;   // llama.cpp's fixed base of the local layers
    }
    // RoPE scaling written as metadata (linear); Llama 3.1's llama3 rule comes as rope_freqs.
    if (f.get_string(a + "rope.scaling.type", "none") == "linear") {
        c.rope_scaling.type = RopeScalingType::linear;
        c.rope_scaling.factor = detail::gguf_float(f, a + "rope.scaling.factor", 1.0f);
    }
    if (const GgufTensorInfo* t = g.find("rope_freqs.weight")) {
        if (t->ne.size() != 1 || t->ne[0] != c.head_dim / 2 || t->type != 0)
            fail("tensor 'rope_freqs.weight' should be F32 [", c.head_dim / 2, "]");
        const std::span<const char> b = g.bytes_of(*t);
        c.rope_scaling.type = RopeScalingType::per_pair;
        c.rope_scaling.divisors.resize(static_cast<size_t>(c.head_dim / 2));
        std::memcpy(c.rope_scaling.divisors.data(), b.data(), b.size());
    }
    // Where each value came from: a key when the file had it, else the rule that set it.
    const auto key_or = [&](const char* field, const std::string& key, const std::string& otherwise) {
        from[field] = f.has(key) ? key : otherwise;
    };
    key_or("dim", a + "embedding_length", "");
    key_or("hidden_dim", a + "feed_forward_length", "");
    key_or("n_layers", a + "block_count", "");
    key_or("n_heads", a + "attention.head_count", "");
    key_or("n_kv_heads", a + "attention.head_count_kv", "default: n_heads");
    key_or("head_dim", a + "attention.key_length", "default: dim / n_heads");
    key_or("seq_len", a + "context_length", "");
    key_or("norm_eps", a + "attention.layer_norm_rms_epsilon", "default");
    key_or("rope_theta", a + "rope.freq_base", "default");
    from["vocab_size"] = "tensor token_embd.weight (rows)";
    from["shared_classifier"] = c.shared_classifier ? "no output.weight tensor" : "output.weight tensor";
    const std::string by_arch = "architecture " + arch;
    for (const char* field : {"rope_layout", "qkv_bias", "qk_norm", "norm_weight_offset", "sandwich_norms",
                              "mlp_activation", "embedding_scale", "attention_scale", "final_logit_softcap",
                              "attn_logit_softcap", "sliding_window_pattern", "rope_theta_local"})
        from[field] = by_arch;
    key_or("sliding_window", a + "attention.sliding_window", by_arch);
    if (arch == "gemma2") {
        key_or("attn_logit_softcap", a + "attn_logit_softcapping", "default for gemma2");
        key_or("final_logit_softcap", a + "final_logit_softcapping", "default for gemma2");
    }
    from["rope_scaling"] = g.find("rope_freqs.weight") ? "tensor rope_freqs.weight"
                           : f.has(a + "rope.scaling.type") ? a + "rope.scaling.type" : "default: none";
    if (sources) *sources = std::move(from);
    return c;
}

namespace detail {

/// The fp32 values of GGUF tensors: views into the mapping for F32, dequantized copies for the
/// rest; also keeps the mapping alive (Model::storage).
struct GgufWeights {
    std::shared_ptr<const void> mapping;
    std::vector<std::unique_ptr<std::vector<float>>> owned;
};

}  // namespace detail

/// \brief Loads a GGUF model: config (gguf_model_config) and every weight, checked by name,
/// shape and type. `how`: fp32 widens every non-F32 matrix once (what the reference reads);
/// as_stored leaves them in the file's blocks (Model::fp32_weights false; StoredMatrix), for the
/// fast path to pack from. Either way each matrix's stored bytes are recorded. Throws
/// glass::Error naming the file and the problem; nothing big is allocated before the header and
/// the tensor table have been checked.
inline Model load_gguf_model(const std::string& path, LoadWeights how = LoadWeights::fp32) {
    const GgufModelFile g = open_gguf_model(path);
    try {
        const ModelConfig c = gguf_model_config(g);
        auto weights = std::make_shared<detail::GgufWeights>();
        weights->mapping = g.file.mapping;
        std::int64_t bytes_read_per_token = 0;
        bool all_fp32 = true;

        // Checks name, shape and type first (for every tensor, before any is dequantized).
        const auto tensor = [&](const std::string& name, std::int64_t rows, std::int64_t cols) -> const GgufTensorInfo& {
            const GgufTensorInfo* t = g.find(name);
            if (!t) fail("tensor '", name, "' is missing (expected [", rows, ", ", cols, "])");
            const bool vector = rows == 1;
            const bool shape_ok = vector ? (t->ne.size() == 1 && t->ne[0] == cols)
                                         : (t->ne.size() == 2 && t->ne[0] == cols && t->ne[1] == rows);
            if (!shape_ok) {
                std::string got;
                for (size_t d = 0; d < t->ne.size(); ++d) got += (d ? ", " : "") + std::to_string(t->ne[d]);
                fail("tensor '", name, "' has ne [", got, "]; expected ", vector ? "[" + std::to_string(cols) + "]"
                     : "[" + std::to_string(cols) + ", " + std::to_string(rows) + "] (in, out)");
            }
            g.bytes_of(*t);  // type readable, bytes inside the file
            return *t;
        };
        // The fp32 values of a checked tensor; null for a matrix left in its stored type.
        const auto floats = [&](const GgufTensorInfo& t, bool counts_per_token, bool matrix) -> const float* {
            const std::span<const char> b = g.bytes_of(t);
            if (counts_per_token) bytes_read_per_token += static_cast<std::int64_t>(b.size());
            if (t.type == 0 && reinterpret_cast<std::uintptr_t>(b.data()) % alignof(float) == 0)
                return reinterpret_cast<const float*>(b.data());  // F32: used where it lies
            if (matrix && how == LoadWeights::as_stored && t.type != 0) {
                all_fp32 = false;
                return nullptr;
            }
            std::int64_t count = 1;
            for (const std::int64_t n : t.ne) count *= n;
            auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(count));
            ggml_to_float(t.type, b.data(), count, values->data());
            weights->owned.push_back(std::move(values));
            return weights->owned.back()->data();
        };
        const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
        const auto stored = [&](const std::string& name) {
            const GgufTensorInfo& t = *g.find(name);
            return StoredMatrix{t.type, g.bytes_of(t).data(), true};
        };
        const auto matrix = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
            return ConstMatrixMap(floats(tensor(name, rows, cols), true, true), rows, cols);
        };
        const auto vector = [&](const std::string& name, std::int64_t n) {
            return ConstVectorMap(floats(tensor(name, 1, n), true, false), n);
        };
        const auto optional_vector = [&](const std::string& name, std::int64_t n, bool wanted) {
            if (!wanted) {
                if (g.find(name)) fail("tensor '", name, "' is present but the architecture does not use it");
                return ConstVectorMap(nullptr, 0);
            }
            return vector(name, n);
        };

        Model m;
        m.config = c;
        m.token_embedding = floats(tensor("token_embd.weight", V, d), c.shared_classifier, true);
        m.stored_embedding = stored("token_embd.weight");
        m.rms_final = vector("output_norm.weight", d).data();
        m.classifier = c.shared_classifier ? m.token_embedding : matrix("output.weight", V, d).data();
        m.stored_classifier = c.shared_classifier ? m.stored_embedding : stored("output.weight");
        for (int l = 0; l < c.n_layers; ++l) {
            const std::string b = "blk." + std::to_string(l) + ".";
            m.layers.push_back(LayerWeights{
                .rms_att = vector(b + "attn_norm.weight", d),
                .wq = matrix(b + "attn_q.weight", q, d),
                .wk = matrix(b + "attn_k.weight", kv, d),
                .wv = matrix(b + "attn_v.weight", kv, d),
                .wo = matrix(b + "attn_output.weight", d, q),
                .rms_ffn = vector(b + "ffn_norm.weight", d),
                .w1 = matrix(b + "ffn_gate.weight", h, d),
                .w2 = matrix(b + "ffn_down.weight", d, h),
                .w3 = matrix(b + "ffn_up.weight", h, d),
                .bq = optional_vector(b + "attn_q.bias", q, c.qkv_bias),
                .bk = optional_vector(b + "attn_k.bias", kv, c.qkv_bias),
                .bv = optional_vector(b + "attn_v.bias", kv, c.qkv_bias),
                .q_norm = optional_vector(b + "attn_q_norm.weight", c.head_dim, c.qk_norm),
                .k_norm = optional_vector(b + "attn_k_norm.weight", c.head_dim, c.qk_norm),
                .post_attention_norm = optional_vector(b + "post_attention_norm.weight", d, c.sandwich_norms),
                .post_mlp_norm = optional_vector(b + "post_ffw_norm.weight", d, c.sandwich_norms),
                .stored = {stored(b + "attn_q.weight"), stored(b + "attn_k.weight"), stored(b + "attn_v.weight"),
                           stored(b + "attn_output.weight"), stored(b + "ffn_gate.weight"),
                           stored(b + "ffn_down.weight"), stored(b + "ffn_up.weight")},
            });
        }
        m.weight_bytes = bytes_read_per_token;
        m.fp32_weights = all_fp32;
        m.storage = std::move(weights);
        return m;
    } catch (const Error& e) {
        fail("GGUF file '", path, "': ", e.what());
    }
}

}  // namespace glass
