/// \file
/// \brief glass/formats/hf_model.hpp — journey step 0 for a Hugging Face model folder: config.json
/// plus safetensors, for the Llama, Mistral, Qwen2, Qwen3 and Gemma 2/3 families.
/// ```text
/// In:  a folder: config.json, model.safetensors or model.safetensors.index.json + its shards
///      (and tokenizer.json, read by hf_loader.hpp).
/// Out: a Model (checkpoint.hpp): the ModelConfig from config.json, fp32 views of every weight
///      (F32 tensors where they lie in the mapped file; F16 and BF16 widened once, or loaded
///      LoadWeights::as_stored, left as they are for the fast path to pack: StoredMatrix).
///
/// safetensors: 8-byte little-endian header length N, a JSON header of N bytes
///   {name: {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]},
///    "__metadata__": {...}}, then the data; offsets count from the end of the header.
/// config.json -> ModelConfig (model_type or architectures[0]: llama, mistral, qwen2, qwen3,
///   gemma2, gemma3_text; Gemma 3's larger checkpoints nest these keys in "text_config"):
///   hidden_size dim; intermediate_size hidden_dim; num_hidden_layers; num_attention_heads;
///   num_key_value_heads (default: heads); head_dim (default dim / heads); max_position_embeddings
///   seq_len; rms_norm_eps; rope_theta; rope_scaling {type or rope_type: llama3 | linear}; tie_word_embeddings;
///   Gemma: query_pre_attn_scalar, attn_logit_softcapping, final_logit_softcapping,
///   sliding_window, sliding_window_pattern or layer_types, rope_local_base_freq; Mistral: sliding_window.
/// Two things differ from a GGUF of the same model, and glass does here what llama.cpp's converter
/// does, so the two load into the same numbers: Llama's and Mistral's q_proj / k_proj rows are
/// permuted from half-split RoPE pairs to adjacent pairs (rope.hpp); Gemma's norm gains are
/// stored as w for the formula x·(1 + w), which norm_weight_offset = 1 computes.
/// The files are untrusted: header lengths, offsets, shapes and dtypes are checked before use.
/// ```
#pragma once

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/formats/gguf.hpp"  // MappedFile, map_file
#include "glass/formats/json_input.hpp"
#include "glass/half.hpp"
#include "glass/rope.hpp"

namespace glass {

/// One tensor of a safetensors file: where its bytes are, its dtype and shape.
struct SafetensorsTensor {
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::span<const char> bytes;
};

/// A mapped safetensors file: its tensors by name.
struct SafetensorsFile {
    MappedFile file;
    std::map<std::string, SafetensorsTensor> tensors;
};

/// Bytes per value of a safetensors dtype glass reads; 0 for the others.
inline int safetensors_dtype_bytes(const std::string& dtype) {
    if (dtype == "F32") return 4;
    if (dtype == "F16" || dtype == "BF16") return 2;
    return 0;
}

/// Maps `path` and parses its header; every tensor is checked to lie inside the file with as many
/// bytes as its dtype and shape need.
inline SafetensorsFile open_safetensors(const std::string& path) {
    SafetensorsFile f;
    f.file = map_file(path);
    const std::span<const char> b = f.file.bytes;
    const auto where = [&] { return "safetensors file '" + path + "'"; };
    std::uint64_t n = 0;
    if (b.size() < 8) fail(where(), " is ", b.size(), " bytes: too short for its 8-byte header length");
    std::memcpy(&n, b.data(), 8);
    if (n > b.size() - 8 || n > (std::uint64_t{100} << 20))
        fail(where(), ": header of ", n, " bytes does not fit in the file's ", b.size(), " bytes");
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    } catch (const nlohmann::json::exception& e) {
        fail(where(), ": the header is not JSON (", e.what(), ")");
    }
    if (!header.is_object()) fail(where(), ": the header is not a JSON object");
    const std::span<const char> data = b.subspan(8 + n);
    for (const auto& [name, t] : header.items()) {
        if (name == "__metadata__") continue;
        try {
            SafetensorsTensor tensor;
            tensor.dtype = t.at("dtype").get<std::string>();
            tensor.shape = t.at("shape").get<std::vector<std::int64_t>>();
            const std::vector<std::uint64_t> offsets = t.at("data_offsets").get<std::vector<std::uint64_t>>();
            if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data.size())
                fail("data_offsets outside the data (", data.size(), " bytes)");
            std::int64_t count = 1;
            for (const std::int64_t d : tensor.shape) {
                if (d < 0 || (d > 0 && count > (std::int64_t{1} << 40) / d)) fail("shape dimension ", d);
                count *= d;
            }
            const int size = safetensors_dtype_bytes(tensor.dtype);
            if (size > 0 && static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(size) != offsets[1] - offsets[0])
                fail(count, " ", tensor.dtype, " values but ", offsets[1] - offsets[0], " bytes");
            tensor.bytes = data.subspan(offsets[0], offsets[1] - offsets[0]);
            f.tensors.emplace(name, std::move(tensor));
        } catch (const nlohmann::json::exception& e) {
            fail(where(), ": tensor '", name, "' has a malformed description (", e.what(), ")");
        } catch (const Error& e) {
            fail(where(), ": tensor '", name, "': ", e.what());
        }
    }
    return f;
}

namespace detail {

inline nlohmann::json read_json_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open '", path, "'");
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("'", path, "' is not JSON (", e.what(), ")");
    }
}

/// A number from config.json: required (fallback none) or defaulted, range-checked.
inline double config_number(const nlohmann::json& c, const char* key, std::optional<double> fallback, double lo, double hi) {
    if (!c.contains(key) || c[key].is_null()) {
        if (!fallback) fail("config.json has no \"", key, "\"");
        return *fallback;
    }
    if (!c[key].is_number()) fail("config.json: \"", key, "\" is not a number");
    const double v = c[key].get<double>();
    if (!(v >= lo && v <= hi)) fail("config.json: ", key, " = ", v, " is outside [", lo, ", ", hi, "]");
    return v;
}

}  // namespace detail

/// The families glass reads from config.json, as a list for error messages.
inline const char* hf_supported_model_types() { return "llama, mistral, qwen2, qwen3, gemma2, gemma3_text"; }

/// \brief ModelConfig from a config.json (the text part, when nested). `vocab_rows` is the
/// embedding table's row count (the tensor decides; config.json's vocab_size may be padded).
namespace detail {

/// The ids an `eos_token_id` value names: a number or a list of numbers (null: none).
inline std::vector<int> eos_token_ids(const nlohmann::json& value, const char* file) {
    std::vector<int> ids;
    if (value.is_null()) return ids;
    for (const nlohmann::json& id : value.is_array() ? value : nlohmann::json::array({value})) {
        if (!id.is_number_integer()) fail(file, ": eos_token_id ", describe_json(id), " is not a token id");
        ids.push_back(id.get<int>());
    }
    return ids;
}

/// eos_token_id of a config file, at its top level and in its text_config (either may hold it).
inline std::vector<int> config_eos_token_ids(const nlohmann::json& root, const char* file) {
    std::vector<int> ids;
    for (const nlohmann::json* part : {&root, root.contains("text_config") ? &root["text_config"] : nullptr})
        if (part && part->is_object() && part->contains("eos_token_id")) {
            const std::vector<int> more = eos_token_ids((*part)["eos_token_id"], file);
            ids.insert(ids.end(), more.begin(), more.end());
        }
    return ids;
}

}  // namespace detail

inline ModelConfig hf_model_config(const nlohmann::json& root, int vocab_rows) {
  try {
    if (!root.is_object()) fail("config.json is not a JSON object");
    const nlohmann::json& j = root.contains("text_config") ? root["text_config"] : root;
    if (!j.is_object()) fail("config.json: text_config is not an object");
    std::string type = j.value("model_type", "");
    if (type == "gemma3") type = "gemma3_text";
    if (type != "llama" && type != "mistral" && type != "qwen2" && type != "qwen3" && type != "gemma2" &&
        type != "gemma3_text")
        fail("config.json: model_type '", type, "' is not supported (", hf_supported_model_types(), ")");
    using detail::config_number;
    ModelConfig c;
    c.dim = static_cast<int>(config_number(j, "hidden_size", {}, 1, 1 << 16));
    c.hidden_dim = static_cast<int>(config_number(j, "intermediate_size", {}, 1, 1 << 18));
    c.n_layers = static_cast<int>(config_number(j, "num_hidden_layers", {}, 1, 1024));
    c.n_heads = static_cast<int>(config_number(j, "num_attention_heads", {}, 1, 1024));
    c.n_kv_heads = static_cast<int>(config_number(j, "num_key_value_heads", c.n_heads, 1, c.n_heads));
    c.head_dim = static_cast<int>(config_number(j, "head_dim", c.dim / c.n_heads, 2, 1 << 12));
    if (c.head_dim % 2 != 0) fail("config.json: head_dim ", c.head_dim, " is odd; RoPE rotates pairs");
    if (c.n_heads % c.n_kv_heads != 0) fail("config.json: num_attention_heads ", c.n_heads, " is not a multiple of num_key_value_heads ", c.n_kv_heads);
    c.seq_len = static_cast<int>(config_number(j, "max_position_embeddings", {}, 1, 1 << 22));
    c.norm_eps = static_cast<float>(config_number(j, "rms_norm_eps", 1e-6, 0, 1));
    c.rope_theta = static_cast<float>(config_number(j, "rope_theta", 10000.0, 1, 1e12));
    c.vocab_size = vocab_rows;
    c.end_of_generation_ids = detail::config_eos_token_ids(root, "config.json");
    const bool gemma = type == "gemma2" || type == "gemma3_text";
    c.shared_classifier = j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()
                              ? j["tie_word_embeddings"].get<bool>()
                              : gemma;  // transformers' defaults: Gemma ties, the others do not

    // RoPE scaling, under either key name ("type" in older configs, "rope_type" in newer ones).
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
        const nlohmann::json& s = j["rope_scaling"];
        const std::string kind = s.value("rope_type", s.value("type", ""));
        if (kind == "llama3") {
            c.rope_scaling = llama3_rope_scaling();
            c.rope_scaling.factor = static_cast<float>(config_number(s, "factor", {}, 1e-3, 1e6));
            c.rope_scaling.low_freq_factor = static_cast<float>(config_number(s, "low_freq_factor", {}, 0, 1e6));
            c.rope_scaling.high_freq_factor = static_cast<float>(config_number(s, "high_freq_factor", {}, 0, 1e6));
            c.rope_scaling.original_context = static_cast<int>(config_number(s, "original_max_position_embeddings", {}, 1, 1 << 22));
        } else if (kind == "linear") {
            c.rope_scaling.type = RopeScalingType::linear;
            c.rope_scaling.factor = static_cast<float>(config_number(s, "factor", {}, 1e-3, 1e6));
        } else if (kind != "default" && !kind.empty()) {
            fail("config.json: rope_scaling type '", kind, "' is not supported (llama3, linear)");
        }
    }

    // The family deltas: Hugging Face checkpoints rotate halves; Llama's and Mistral's rows are
    // permuted to adjacent pairs at load (load_hf_model), as llama.cpp's converter does.
    c.rope_layout = type == "llama" || type == "mistral" ? RopeLayout::adjacent_pairs : RopeLayout::half_split;
    if (type == "mistral")  // every layer (Mistral 7B v0.1: 4096; later Mistrals: null)
        c.sliding_window = static_cast<int>(config_number(j, "sliding_window", 0.0, 0, 1 << 22));
    if (type == "qwen2") {
        c.qkv_bias = true;
        if (j.value("use_sliding_window", false)) fail("config.json: Qwen2's use_sliding_window is not supported");
    }
    if (type == "qwen3" || type == "gemma3_text") c.qk_norm = true;
    if (gemma) {
        c.norm_weight_offset = 1.0f;  // weights hold w for x·(1 + w)
        c.sandwich_norms = true;
        c.mlp_activation = MlpActivation::gelu_tanh;
        c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
        const double scalar = config_number(j, "query_pre_attn_scalar", c.head_dim, 1, 1 << 20);
        if (scalar != c.head_dim) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(scalar));
        c.attn_logit_softcap = static_cast<float>(config_number(j, "attn_logit_softcapping", 0.0, 0, 1e6));
        c.final_logit_softcap = static_cast<float>(config_number(j, "final_logit_softcapping", 0.0, 0, 1e6));
        c.sliding_window = static_cast<int>(config_number(j, "sliding_window", 0.0, 0, 1 << 22));
        c.sliding_window_pattern = type == "gemma2" ? 2 : static_cast<int>(config_number(j, "sliding_window_pattern", 6, 1, 1024));
        if (type == "gemma3_text") c.rope_theta_local = static_cast<float>(config_number(j, "rope_local_base_freq", 10000.0, 1, 1e12));
        // layer_types, when given, must be the pattern glass computes (local but every P-th layer).
        if (j.contains("layer_types") && j["layer_types"].is_array()) {
            const auto& types = j["layer_types"];
            if (static_cast<int>(types.size()) != c.n_layers) fail("config.json: layer_types has ", types.size(), " entries for ", c.n_layers, " layers");
            for (int l = 0; l < c.n_layers; ++l)
                if ((types[static_cast<size_t>(l)] == "sliding_attention") != c.layer_is_local(l))
                    fail("config.json: layer_types[", l, "] = ", types[static_cast<size_t>(l)].dump(),
                         " does not follow a sliding window pattern of ", c.sliding_window_pattern);
        }
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    fail("config.json: a value of the wrong type (", e.what(), ")");
  }
}

namespace detail {

/// The fp32 values of safetensors tensors: views into the mappings for F32, widened copies for
/// F16 and BF16; keeps every mapping alive (Model::storage).
struct HfWeights {
    std::vector<std::shared_ptr<const void>> mappings;
    std::vector<std::unique_ptr<std::vector<float>>> owned;
    std::vector<std::unique_ptr<std::vector<char>>> owned_bytes;  // q/k rows reordered, in F16/BF16
};

}  // namespace detail

/// \brief Loads a Hugging Face model folder. Throws glass::Error naming the folder, the file and
/// the problem (a missing field or tensor, a shard the index names that is not there, a dtype or
/// shape glass cannot use).
inline Model load_hf_model(const std::string& dir, LoadWeights how = LoadWeights::fp32) {
    try {
        const nlohmann::json root = detail::read_json_file(dir + "/config.json");
        // The tensors: one file, or the shards the index names.
        std::vector<SafetensorsFile> files;
        std::map<std::string, const SafetensorsTensor*> tensors;
        struct stat st {};
        if (::stat((dir + "/model.safetensors").c_str(), &st) == 0) {
            files.push_back(open_safetensors(dir + "/model.safetensors"));
        } else {
            const nlohmann::json index = detail::read_json_file(dir + "/model.safetensors.index.json");
            if (!index.contains("weight_map") || !index["weight_map"].is_object())
                fail("model.safetensors.index.json has no weight_map object");
            std::set<std::string> shards;
            for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
            for (const std::string& shard : shards) {
                if (shard.find('/') != std::string::npos) fail("model.safetensors.index.json names shard '", shard, "' outside the folder");
                if (::stat((dir + "/" + shard).c_str(), &st) != 0)
                    fail("model.safetensors.index.json names shard '", shard, "', which is not in the folder");
                files.push_back(open_safetensors(dir + "/" + shard));
            }
        }
        for (const SafetensorsFile& f : files)
            for (const auto& [name, t] : f.tensors) tensors[name] = &t;

        // Names: Gemma 3's multimodal checkpoints put the text model under language_model.
        const std::string prefix = tensors.count("language_model.model.embed_tokens.weight") ? "language_model.model." : "model.";
        const auto find = [&](const std::string& name) -> const SafetensorsTensor* {
            const auto it = tensors.find(name);
            return it == tensors.end() ? nullptr : it->second;
        };
        const SafetensorsTensor* embed = find(prefix + "embed_tokens.weight");
        if (!embed || embed->shape.size() != 2) fail("tensor '", prefix, "embed_tokens.weight' is missing or not a matrix");
        if (embed->shape[0] < 1 || embed->shape[0] > (1 << 22))
            fail("tensor '", prefix, "embed_tokens.weight' has ", embed->shape[0], " rows (1 to ", 1 << 22, ")");
        ModelConfig c = hf_model_config(root, static_cast<int>(embed->shape[0]));
        // generation_config.json (optional) names the ids transformers' generate() stops on.
        if (std::ifstream(dir + "/generation_config.json").good()) {
            const std::vector<int> more = detail::config_eos_token_ids(
                detail::read_json_file(dir + "/generation_config.json"), "generation_config.json");
            c.end_of_generation_ids.insert(c.end_of_generation_ids.end(), more.begin(), more.end());
        }
        const bool lm_head = find("lm_head.weight") || find("language_model.lm_head.weight");
        if (!lm_head) c.shared_classifier = true;  // no lm_head tensor: the table is the classifier

        auto weights = std::make_shared<detail::HfWeights>();
        for (const SafetensorsFile& f : files) weights->mappings.push_back(f.file.mapping);
        std::int64_t bytes_read_per_token = 0;
        // One tensor's fp32 values, checked by name, shape and dtype; `permute_heads` > 0 applies
        // the half-split -> adjacent-pair permutation to a q/k matrix of that many heads.
        bool all_fp32 = true;
        StoredMatrix last_stored;  // the stored form of the tensor `floats` read last
        const auto floats = [&](const std::string& name, std::int64_t rows, std::int64_t cols, bool per_token,
                                int permute_heads = 0) -> const float* {
            const SafetensorsTensor* t = find(name);
            if (!t) fail("tensor '", name, "' is missing (expected [", rows, ", ", cols, "])");
            const bool vector = rows == 1;
            const bool ok = vector ? (t->shape.size() == 1 && t->shape[0] == cols)
                                   : (t->shape.size() == 2 && t->shape[0] == rows && t->shape[1] == cols);
            if (!ok) fail("tensor '", name, "' has shape ", nlohmann::json(t->shape).dump(), "; expected ",
                          vector ? "[" + std::to_string(cols) + "]" : "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
            const int size = safetensors_dtype_bytes(t->dtype);
            if (size == 0) fail("tensor '", name, "' has dtype ", t->dtype, ", which glass does not read (F32, F16, BF16)");
            if (per_token) bytes_read_per_token += static_cast<std::int64_t>(t->bytes.size());
            const std::int64_t count = rows * cols;
            const std::uint32_t ggml_type = t->dtype == "F32" ? 0 : t->dtype == "F16" ? 1 : 30;
            last_stored = {ggml_type, t->bytes.data(), true};
            if (how == LoadWeights::as_stored && ggml_type != 0 && rows > 1) {  // a 16-bit matrix stays 16-bit
                all_fp32 = false;
                if (permute_heads > 0) {  // the q/k rows reordered (see below), still 16-bit
                    auto bytes = std::make_unique<std::vector<char>>(t->bytes.size());
                    const int hd = c.head_dim, half = hd / 2;
                    const std::int64_t row_bytes = cols * 2;
                    for (std::int64_t r = 0; r < rows; ++r) {  // adjacent row r comes from half-split row `from`
                        const std::int64_t head = r / hd, i = (r % hd) / 2;
                        const std::int64_t from = head * hd + i + (r % 2 ? half : 0);
                        std::memcpy(bytes->data() + r * row_bytes, t->bytes.data() + from * row_bytes, static_cast<size_t>(row_bytes));
                    }
                    last_stored = {ggml_type, bytes->data(), false};
                    weights->owned_bytes.push_back(std::move(bytes));
                }
                return nullptr;
            }
            if (t->dtype == "F32" && permute_heads == 0 && reinterpret_cast<std::uintptr_t>(t->bytes.data()) % alignof(float) == 0)
                return reinterpret_cast<const float*>(t->bytes.data());  // used where it lies
            auto values = std::make_unique<std::vector<float>>(static_cast<size_t>(count));
            float* v = values->data();
            if (t->dtype == "F32") std::memcpy(v, t->bytes.data(), static_cast<size_t>(count) * 4);
            for (std::int64_t i = 0; i < count && t->dtype != "F32"; ++i) {
                std::uint16_t bits16;
                std::memcpy(&bits16, t->bytes.data() + 2 * i, 2);
                if (t->dtype == "F16") {
                    v[i] = fp16_to_fp32(bits16);
                } else {  // BF16: the top half of an fp32
                    const std::uint32_t bits = std::uint32_t{bits16} << 16;
                    std::memcpy(v + i, &bits, 4);
                }
            }
            if (permute_heads > 0) {  // Llama/Mistral: what llama.cpp's converter does to q_proj, k_proj
                const RowMatrix m = Eigen::Map<const RowMatrix>(v, rows, cols);
                Eigen::Map<RowMatrix>(v, rows, cols) = permute_rows_half_split_to_adjacent(m, permute_heads, c.head_dim);
            }
            weights->owned.push_back(std::move(values));
            if (ggml_type == 0) last_stored = {0, reinterpret_cast<const char*>(weights->owned.back()->data()), false};
            return weights->owned.back()->data();
        };
        const std::int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
        const bool permute = c.rope_layout == RopeLayout::adjacent_pairs;
        const auto matrix = [&](const std::string& name, std::int64_t rows, std::int64_t cols, int permute_heads = 0) {
            return ConstMatrixMap(floats(name, rows, cols, true, permute_heads), rows, cols);
        };
        // A matrix's fp32 view (null when left stored) and its stored form.
        const auto matrix_and_stored = [&](const std::string& name, std::int64_t rows, std::int64_t cols,
                                           StoredMatrix& stored, int permute_heads = 0) {
            const ConstMatrixMap view = matrix(name, rows, cols, permute_heads);
            stored = last_stored;
            return view;
        };
        const auto vector = [&](const std::string& name, std::int64_t n) { return ConstVectorMap(floats(name, 1, n, true), n); };
        const auto optional = [&](const std::string& name, std::int64_t n, bool wanted) {
            return wanted ? vector(name, n) : ConstVectorMap(nullptr, 0);
        };
        const bool gemma = c.sandwich_norms;

        Model m;
        m.config = c;
        m.token_embedding = floats(prefix + "embed_tokens.weight", V, d, c.shared_classifier);
        m.stored_embedding = last_stored;
        m.rms_final = vector(prefix + "norm.weight", d).data();
        m.classifier = c.shared_classifier ? m.token_embedding
                                           : matrix_and_stored(find("lm_head.weight") ? "lm_head.weight" : "language_model.lm_head.weight",
                                                               V, d, m.stored_classifier).data();
        if (c.shared_classifier) m.stored_classifier = m.stored_embedding;
        for (int l = 0; l < c.n_layers; ++l) {
            const std::string b = prefix + "layers." + std::to_string(l) + ".";
            LayerWeights::Stored s;
            m.layers.push_back(LayerWeights{
                .rms_att = vector(b + "input_layernorm.weight", d),
                .wq = matrix_and_stored(b + "self_attn.q_proj.weight", q, d, s.wq, permute ? c.n_heads : 0),
                .wk = matrix_and_stored(b + "self_attn.k_proj.weight", kv, d, s.wk, permute ? c.n_kv_heads : 0),
                .wv = matrix_and_stored(b + "self_attn.v_proj.weight", kv, d, s.wv),
                .wo = matrix_and_stored(b + "self_attn.o_proj.weight", d, q, s.wo),
                // Llama-style models norm before the MLP under the name post_attention_layernorm;
                // Gemma calls that one pre_feedforward_layernorm and uses post_attention_layernorm
                // for the norm of attention's output.
                .rms_ffn = vector(b + (gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), d),
                .w1 = matrix_and_stored(b + "mlp.gate_proj.weight", h, d, s.w1),
                .w2 = matrix_and_stored(b + "mlp.down_proj.weight", d, h, s.w2),
                .w3 = matrix_and_stored(b + "mlp.up_proj.weight", h, d, s.w3),
                .bq = optional(b + "self_attn.q_proj.bias", q, c.qkv_bias),
                .bk = optional(b + "self_attn.k_proj.bias", kv, c.qkv_bias),
                .bv = optional(b + "self_attn.v_proj.bias", kv, c.qkv_bias),
                .q_norm = optional(b + "self_attn.q_norm.weight", c.head_dim, c.qk_norm),
                .k_norm = optional(b + "self_attn.k_norm.weight", c.head_dim, c.qk_norm),
                .post_attention_norm = optional(b + "post_attention_layernorm.weight", d, gemma),
                .post_mlp_norm = optional(b + "post_feedforward_layernorm.weight", d, gemma),
            });
            m.layers.back().stored = s;  // filled while the initializer above ran
        }
        m.weight_bytes = bytes_read_per_token;
        m.fp32_weights = all_fp32;
        m.storage = std::move(weights);
        return m;
    } catch (const Error& e) {
        fail("Hugging Face folder '", dir, "': ", e.what());
    } catch (const nlohmann::json::exception& e) {
        fail("Hugging Face folder '", dir, "': a JSON value of the wrong type (", e.what(), ")");
    }
}

}  // namespace glass
