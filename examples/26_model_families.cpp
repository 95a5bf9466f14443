// 26_model_families — the families people download, side by side: Llama 2, Llama 3, Mistral,
// Qwen2, Qwen3, Gemma 2 and Gemma 3 differ from each other in a handful of lines, each switched
// on by one ModelConfig field and written once in its stage's header (config.hpp lists them).
// This program builds a small model of each family with random weights and shows what each
// difference does to the numbers.
//
// In:  small_family_config(family) for the seven families (fast/random_model.hpp: dim 64, 4 query
//      heads on 2 KV heads, every delta of the family switched on, a sliding window of 5 or 6
//      where the family has one); random_family_model(config, seed 26); the prompt: 16 token ids
//      (17 · i + 5) mod 96.
// Out: 1. each family's shape (head_dim, the width of the queries q_dim = n_heads · head_dim)
//         and the deltas from Llama 2 it uses (family_deltas());
//      2. layer 0 of each, run by the one reference block (transformer_block): the size of the
//         residual stream (RMS of the last row) going in, after the attention half and after the
//         MLP half, and the attention weight the last position (15) gives to position 0 and to
//         itself, averaged over heads (a sliding window of 5 or 6 gives position 0 exactly 0);
//      3. each delta's weight in the result: the Gemma 3 and Qwen2 models run again with one
//         delta switched back to Llama 2's way (same weights), and the change of the last
//         position's logits, ‖changed − original‖ / ‖original‖.
// Everything printed is computed; tests/test_model_families.cpp recomputes it.
//
// Usage: 26_model_families [FAMILY ...]   (default: all seven)
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/transformer.hpp"

namespace {

const std::vector<std::string> kFamilies = {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};

std::vector<int> prompt_ids() {
    std::vector<int> ids;
    for (int i = 0; i < 16; ++i) ids.push_back((17 * i + 5) % 96);
    return ids;
}

double rms(const glass::RowMatrix& x, Eigen::Index row) {
    return std::sqrt(static_cast<double>(x.row(row).squaredNorm()) / static_cast<double>(x.cols()));
}

// 2. Layer 0 over the prompt, through the same block and cache adapter transformer_forward uses.
void show_layer0(const std::string& family) {
    const glass::ModelConfig c = glass::fast::small_family_config(family);
    const glass::Model m = glass::fast::random_family_model(c, 26);
    const std::vector<int> ids = prompt_ids();
    const int n = static_cast<int>(ids.size());
    glass::KVCache cache(c);
    glass::RowMatrix x = glass::embed_tokens(m.embedding_table(), ids, c.embedding_scale);  // [n, dim]
    const double in = rms(x, n - 1);
    glass::LayerTrace trace;
    glass::transformer_block(c, m.layers[0], 0, x, cache, &trace);
    double to_first = 0, to_self = 0;
    for (const glass::RowMatrix& w : trace.attention) {  // [n, n] per head
        to_first += w(n - 1, 0) / c.n_heads;
        to_self += w(n - 1, n - 1) / c.n_heads;
    }
    const double after_attention = trace.residual_norm_after_attention(n - 1) / std::sqrt(static_cast<double>(c.dim));
    const double after_mlp = trace.residual_norm_after_mlp(n - 1) / std::sqrt(static_cast<double>(c.dim));
    std::printf("  %-8s  %8.4f  %15.4f  %9.4f  %12.4f  %12.4f\n", family.c_str(), in, after_attention, after_mlp,
                to_first, to_self);
}

std::vector<float> last_logits(const glass::Model& m) {
    glass::KVCache cache(m.config);
    return glass::transformer_forward(m, cache, prompt_ids());
}

double relative_change(const std::vector<float>& changed, const std::vector<float>& original) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < original.size(); ++i) {
        diff += (double(changed[i]) - original[i]) * (double(changed[i]) - original[i]);
        norm += double(original[i]) * original[i];
    }
    return std::sqrt(diff / norm);
}

// 3. One delta switched off at a time: `off` edits a copy of the config; the weights are the same
// (norm gains are rebuilt from the same draws: random_family_model stores them for the offset).
void show_deltas(const std::string& family) {
    const glass::ModelConfig c = glass::fast::small_family_config(family);
    const std::vector<float> original = last_logits(glass::fast::random_family_model(c, 26));
    struct Off {
        const char* name;
        void (*apply)(glass::ModelConfig&);
    };
    const Off offs[] = {
        {"qkv_bias", [](glass::ModelConfig& k) { k.qkv_bias = false; }},
        {"qk_norm", [](glass::ModelConfig& k) { k.qk_norm = false; }},
        {"sandwich_norms", [](glass::ModelConfig& k) { k.sandwich_norms = false; }},
        {"gelu_tanh -> silu", [](glass::ModelConfig& k) { k.mlp_activation = glass::MlpActivation::silu; }},
        {"embedding_scale -> 1", [](glass::ModelConfig& k) { k.embedding_scale = 1.0f; }},
        {"attention_scale -> 1/sqrt(head_dim)", [](glass::ModelConfig& k) { k.attention_scale = 0.0f; }},
        {"sliding_window -> none", [](glass::ModelConfig& k) { k.sliding_window = 0; }},
        {"rope_theta_local -> rope_theta", [](glass::ModelConfig& k) { k.rope_theta_local = 0.0f; }},
        {"rope_scaling -> none", [](glass::ModelConfig& k) { k.rope_scaling = {}; }},
        {"half_split -> adjacent_pairs", [](glass::ModelConfig& k) { k.rope_layout = glass::RopeLayout::adjacent_pairs; }},
    };
    std::printf("\n  %s: %s\n", family.c_str(), "logits change with one delta switched back to Llama 2's way");
    for (const Off& off : offs) {
        glass::ModelConfig k = c;
        off.apply(k);
        if (glass::family_deltas(k) == glass::family_deltas(c) && k.rope_layout == c.rope_layout) continue;  // not this family's
        // Weights that only a delta uses (q/k norm gains, sandwich gains) are simply not read
        // without it; biases are dropped from the layers.
        glass::Model same_weights = glass::fast::random_family_model(c, 26);
        same_weights.config = k;
        if (!k.qkv_bias)
            for (glass::LayerWeights& w : same_weights.layers) {
                std::destroy_at(&w.bq), std::construct_at(&w.bq, nullptr, 0);
                std::destroy_at(&w.bk), std::construct_at(&w.bk, nullptr, 0);
                std::destroy_at(&w.bv), std::construct_at(&w.bv, nullptr, 0);
            }
        std::printf("    %-36s %.4f\n", off.name, relative_change(last_logits(same_weights), original));
    }
}

int run(int argc, char** argv) {
    std::vector<std::string> families;
    for (int i = 1; i < argc; ++i) {
        glass::fast::small_family_config(argv[i]);  // refuses an unknown family, naming the known ones
        families.push_back(argv[i]);
    }
    if (families.empty()) families = kFamilies;

    std::printf("1. The families (dim 64, 4 query heads on 2 KV heads; random weights)\n\n");
    std::printf("  %-8s  %8s  %5s  %s\n", "family", "head_dim", "q_dim", "deltas from Llama 2");
    for (const std::string& f : families) {
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        std::string deltas;
        for (const std::string& d : glass::family_deltas(c)) deltas += (deltas.empty() ? "" : ", ") + d;
        if (c.rope_layout == glass::RopeLayout::half_split) deltas += (deltas.empty() ? "" : ", ") + std::string("half_split");
        std::printf("  %-8s  %8d  %5d  %s\n", f.c_str(), c.head_dim, c.q_dim(), deltas.empty() ? "-" : deltas.c_str());
    }

    std::printf("\n2. Layer 0 over a 16-token prompt: RMS of the last row, and where position 15 looks\n\n");
    std::printf("  %-8s  %8s  %15s  %9s  %12s  %12s\n", "family", "RMS in", "after attention", "after MLP",
                "weight on 0", "weight on 15");
    for (const std::string& f : families) show_layer0(f);

    std::printf("\n3. What each delta weighs: the last position's logits, one delta switched off\n");
    for (const std::string& f : families)
        if (f == "gemma3" || f == "qwen2") show_deltas(f);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
