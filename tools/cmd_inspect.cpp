// glass inspect — what is inside a model file (GGUF, Hugging Face folder, llama2.c), read from its header: the architecture, every config
// value and where it came from, the tensor table, bytes per weight, KV bytes per token, and which
// family deltas (config.hpp) the model uses. The article's C2 — the embedding table's size — from
// a real file.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "cli.hpp"
#include "glass/formats/model_files.hpp"

namespace cli {

namespace {

struct TensorRow {
    std::string name, type;
    std::vector<std::int64_t> shape;  // row-major: [rows, cols] for a matrix
    std::int64_t bytes = 0;
};

// 8 · bytes / weights: the stored type's cost (Q4_K 4.5, Q6_K 6.5625, F16 16), from the bytes.
double bits_per_weight(const TensorRow& t) {
    std::int64_t n = 1;
    for (const std::int64_t d : t.shape) n *= d;
    return t.bytes > 0 && n > 0 ? 8.0 * static_cast<double>(t.bytes) / static_cast<double>(n) : 0.0;
}

const char* to_string(glass::RopeLayout l) {
    return l == glass::RopeLayout::adjacent_pairs ? "adjacent_pairs" : "half_split";
}
const char* to_string(glass::RopeScalingType t) {
    switch (t) {
        case glass::RopeScalingType::none: return "none";
        case glass::RopeScalingType::linear: return "linear";
        case glass::RopeScalingType::llama3: return "llama3";
        case glass::RopeScalingType::per_pair: return "per_pair";
    }
    return "?";
}

nlohmann::json config_json(const glass::ModelConfig& c) {
    return {
        {"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"vocab_size", c.vocab_size}, {"seq_len", c.seq_len},
        {"shared_classifier", c.shared_classifier}, {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps},
        {"rope_layout", to_string(c.rope_layout)},
        {"rope_scaling", to_string(c.rope_scaling.type)}, {"rope_scaling_factor", c.rope_scaling.factor},
        {"qkv_bias", c.qkv_bias}, {"qk_norm", c.qk_norm}, {"norm_weight_offset", c.norm_weight_offset},
        {"sandwich_norms", c.sandwich_norms},
        {"mlp_activation", c.mlp_activation == glass::MlpActivation::silu ? "silu" : "gelu_tanh"},
        {"embedding_scale", c.embedding_scale}, {"attention_scale", c.attention_score_scale()},
        {"attn_logit_softcap", c.attn_logit_softcap}, {"final_logit_softcap", c.final_logit_softcap},
        {"sliding_window", c.sliding_window}, {"sliding_window_pattern", c.sliding_window_pattern},
        {"rope_theta_local", c.rope_theta_local},
    };
}

// A llama2.c checkpoint's arrays, named as GGUF names them (all F32).
std::vector<TensorRow> llama2c_tensors(const glass::ModelConfig& c) {
    std::vector<TensorRow> rows;
    const auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
        std::int64_t n = 1;
        for (const std::int64_t d : shape) n *= d;
        rows.push_back({name, "F32", std::move(shape), 4 * n});
    };
    add("token_embd.weight", {c.vocab_size, c.dim});
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(b + "attn_norm.weight", {c.dim});
        add(b + "attn_q.weight", {c.q_dim(), c.dim});
        add(b + "attn_k.weight", {c.kv_dim(), c.dim});
        add(b + "attn_v.weight", {c.kv_dim(), c.dim});
        add(b + "attn_output.weight", {c.dim, c.q_dim()});
        add(b + "ffn_norm.weight", {c.dim});
        add(b + "ffn_gate.weight", {c.hidden_dim, c.dim});
        add(b + "ffn_down.weight", {c.dim, c.hidden_dim});
        add(b + "ffn_up.weight", {c.hidden_dim, c.dim});
    }
    add("output_norm.weight", {c.dim});
    if (!c.shared_classifier) add("output.weight", {c.vocab_size, c.dim});
    return rows;
}

// What inspect reports of one file, read from its header: nothing is dequantized or read beyond it.
struct ModelHeader {
    glass::ModelConfig config;
    glass::ConfigSources sources;  // config field -> where its value came from
    std::string architecture;
    std::vector<TensorRow> tensors;
};

ModelHeader read_gguf_header(const std::string& path) {
    ModelHeader h;
    const glass::GgufModelFile g = glass::open_gguf_model(path);
    try {
        h.config = glass::gguf_model_config(g, &h.sources);
    } catch (const glass::Error& e) {
        glass::fail("GGUF file '", path, "': ", e.what());
    }
    h.architecture = g.meta.get_string("general.architecture", "");
    for (const glass::GgufTensorInfo& t : g.tensors) {
        std::vector<std::int64_t> shape(t.ne.rbegin(), t.ne.rend());  // ggml's ne is innermost first
        std::int64_t n = 1;
        for (const std::int64_t d : t.ne) n *= d;
        const glass::GgmlBlock b = glass::ggml_block_of(t.type);
        h.tensors.push_back({t.name, glass::ggml_type_name(t.type), shape, b.weights ? glass::ggml_bytes(t.type, n) : -1});
    }
    return h;
}

ModelHeader read_llama2c_header(const std::string& path) {
    ModelHeader h;
    h.config = glass::load_llama2c_checkpoint(path).config;
    h.architecture = "llama (llama2.c checkpoint)";
    for (const char* field : {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"})
        h.sources[field] = "llama2.c header";
    h.sources["shared_classifier"] = "llama2.c header (sign of vocab_size)";
    h.sources["head_dim"] = "dim / n_heads";
    h.tensors = llama2c_tensors(h.config);
    return h;
}

// A Hugging Face folder's weight files: model.safetensors, else the shards its index names.
std::vector<std::string> safetensors_files(const std::string& path) {
    struct stat st {};
    if (::stat((path + "/model.safetensors").c_str(), &st) == 0) return {"model.safetensors"};
    std::set<std::string> shards;
    const nlohmann::json index = glass::detail::read_json_file(path + "/model.safetensors.index.json");
    for (const auto& [name, shard] : index.at("weight_map").items()) shards.insert(shard.get<std::string>());
    return {shards.begin(), shards.end()};
}

// Which config.json key each config field is read from (the rest come from model_type's defaults).
glass::ConfigSources hf_config_sources(const nlohmann::json& text) {
    const std::map<std::string, std::string> keys = {
        {"dim", "hidden_size"}, {"hidden_dim", "intermediate_size"}, {"n_layers", "num_hidden_layers"},
        {"n_heads", "num_attention_heads"}, {"n_kv_heads", "num_key_value_heads"}, {"head_dim", "head_dim"},
        {"seq_len", "max_position_embeddings"}, {"norm_eps", "rms_norm_eps"}, {"rope_theta", "rope_theta"},
        {"shared_classifier", "tie_word_embeddings"}, {"rope_scaling", "rope_scaling"},
        {"sliding_window", "sliding_window"}, {"attn_logit_softcap", "attn_logit_softcapping"},
        {"final_logit_softcap", "final_logit_softcapping"}, {"rope_theta_local", "rope_local_base_freq"}};
    glass::ConfigSources sources;
    for (const auto& [field, key] : keys)
        sources[field] = text.contains(key) && !text[key].is_null() ? "config.json " + key : "default / model_type";
    sources["vocab_size"] = "tensor embed_tokens.weight (rows)";
    return sources;
}

// A Hugging Face folder: config.json and the safetensors headers.
ModelHeader read_hf_folder_header(const std::string& path) {
    ModelHeader h;
    const nlohmann::json root = glass::detail::read_json_file(path + "/config.json");
    const nlohmann::json& text = root.contains("text_config") ? root["text_config"] : root;
    int vocab_rows = 0;
    for (const std::string& file : safetensors_files(path)) {
        const glass::SafetensorsFile f = glass::open_safetensors(path + "/" + file);
        for (const auto& [name, t] : f.tensors) {
            h.tensors.push_back({name, t.dtype, t.shape, static_cast<std::int64_t>(t.bytes.size())});
            if (name.size() >= 23 && name.compare(name.size() - 23, 23, "embed_tokens.weight") == 0 && !t.shape.empty())
                vocab_rows = static_cast<int>(t.shape[0]);
        }
    }
    h.config = glass::hf_model_config(root, vocab_rows);
    h.architecture = text.value("model_type", "") + " (" +
                     (root.contains("architectures") ? root["architectures"][0].get<std::string>() : std::string("?")) + ")";
    h.sources = hf_config_sources(text);
    return h;
}

// The figures: bytes per weight over the matrices, the embedding table (C2), KV per token.
struct ModelFigures {
    std::int64_t weights = 0, weight_bytes = 0, embedding_bytes = 0;
    double bytes_per_weight = 0;
    std::vector<std::string> deltas;  // family deltas from Llama 2
    std::int64_t kv_per_token = 0;    // fp32 keys and values
};

ModelFigures model_figures(const ModelHeader& h) {
    ModelFigures f;
    for (const TensorRow& t : h.tensors) {
        std::int64_t n = 1;
        for (const std::int64_t d : t.shape) n *= d;
        f.weights += n;
        f.weight_bytes += std::max<std::int64_t>(t.bytes, 0);
        if (t.name == "token_embd.weight") f.embedding_bytes = t.bytes;
    }
    f.bytes_per_weight = f.weights ? static_cast<double>(f.weight_bytes) / static_cast<double>(f.weights) : 0.0;
    f.deltas = glass::family_deltas(h.config);
    f.kv_per_token = glass::kv_bytes_per_token(h.config, glass::KvType::fp32);
    return f;
}

void print_inspect_json(const std::string& path, glass::ModelFileKind kind, const ModelHeader& h, const ModelFigures& f) {
    nlohmann::json tj = nlohmann::json::array();
    for (const TensorRow& t : h.tensors)
        tj.push_back({{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"bytes", t.bytes}, {"bits_per_weight", bits_per_weight(t)}});
    nlohmann::json j = {{"model", path}, {"format", glass::to_string(kind)}, {"architecture", h.architecture},
                        {"config", config_json(h.config)}, {"config_sources", h.sources}, {"tensors", tj},
                        {"parameters", f.weights}, {"bytes", f.weight_bytes}, {"bytes_per_weight", f.bytes_per_weight},
                        {"embedding_table_bytes", f.embedding_bytes}, {"kv_bytes_per_token_fp32", f.kv_per_token},
                        {"family_deltas", f.deltas}};
    std::cout << j.dump() << "\n";
}

void print_tensor_table(const std::vector<TensorRow>& tensors) {
    std::printf("\n%zu tensors (shape row-major, [rows, cols]):\n", tensors.size());
    for (const TensorRow& t : tensors) {
        std::string shape;
        for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
        std::printf("  %-32s %-6s [%s] %lld bytes, %.4g bits per weight\n", t.name.c_str(), t.type.c_str(), shape.c_str(),
                    static_cast<long long>(t.bytes), bits_per_weight(t));
    }
    std::map<std::string, int> types;  // a k-quant mix (Q4_K_M: Q4_K, Q6_K, F32) shows its parts
    for (const TensorRow& t : tensors) ++types[t.type];
    std::printf("tensor types:");
    for (const auto& [type, count] : types) std::printf(" %s x %d", type.c_str(), count);
    std::printf("\n");
}

void print_inspect_text(const std::string& path, glass::ModelFileKind kind, const ModelHeader& h, const ModelFigures& f) {
    const glass::ModelConfig& c = h.config;
    std::printf("%s: %s, architecture %s\n\nconfig (value, from):\n", path.c_str(), glass::to_string(kind), h.architecture.c_str());
    const nlohmann::json config = config_json(c);  // items() of a temporary would dangle in the loop
    for (const auto& [name, value] : config.items()) {
        const auto it = h.sources.find(name);
        std::printf("  %-22s %-16s %s\n", name.c_str(), value.dump().c_str(), it == h.sources.end() ? "" : it->second.c_str());
    }
    std::printf("\nfamily deltas from Llama 2: %s\n", f.deltas.empty() ? "none" : "");
    for (const std::string& d : f.deltas) std::printf("  %s\n", d.c_str());
    print_tensor_table(h.tensors);
    std::printf("\n%lld parameters, %.1f MB, %.3f bytes (%.3f bits) per weight\n", static_cast<long long>(f.weights),
                static_cast<double>(f.weight_bytes) / 1e6, f.bytes_per_weight, 8 * f.bytes_per_weight);
    std::printf("embedding table (C2): %d x %d = %lld weights, %.1f MB as stored\n", c.vocab_size, c.dim,
                static_cast<long long>(c.vocab_size) * c.dim, static_cast<double>(f.embedding_bytes) / 1e6);
    std::printf("KV cache: %lld bytes per token in fp32 (2 x %d layers x %d KV heads x %d)\n",
                static_cast<long long>(f.kv_per_token), c.n_layers, c.n_kv_heads, c.head_dim);
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
    Flags flags("inspect", {{"--json", false}});
    flags.parse(argc, argv, 2);
    if (flags.positional().size() != 1) throw UsageError("glass inspect needs one model: glass inspect MODEL [--json]");
    const std::string path = flags.positional()[0];

    const glass::ModelFileKind kind = glass::model_file_kind(path);
    const ModelHeader header = kind == glass::ModelFileKind::gguf      ? read_gguf_header(path)
                               : kind == glass::ModelFileKind::llama2c ? read_llama2c_header(path)
                                                                       : read_hf_folder_header(path);
    const ModelFigures figures = model_figures(header);
    if (flags.has("--json"))
        print_inspect_json(path, kind, header, figures);
    else
        print_inspect_text(path, kind, header, figures);
    return 0;
}

}  // namespace cli
