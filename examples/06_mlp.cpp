// 06_mlp — journey step 5: the MLP (SwiGLU) of one layer, on one real row of the shipped model.
//
// In:  the shipped model (dim 64, hidden 172: W1 and W3 [172, 64], W2 [64, 172]); a prompt
//      (default "Once upon a time", BOS first), a layer (default 0) and a position (default: the
//      last one). The row the MLP gets there is the one the real forward pass gives it: the
//      residual stream after that layer's attention, RMS-normalized with the layer's MLP gain.
// Out: for that row x [1, 64]:
//        gate = x W1ᵀ [1, 172]       one score per hidden unit
//        up   = x W3ᵀ [1, 172]       one candidate value per hidden unit
//        h    = silu(gate) ⊙ up      silu(g) = g·σ(g) decides how much of each value passes
//        out  = h W2ᵀ [1, 64]        back to the residual width
//      a few units of each, how many units the gate nearly closes (|silu(gate)| < 0.1), and
//      the largest difference between these steps and glass::swiglu_mlp over the whole prompt.
//
// Every position goes through the MLP on its own: no row looks at another one here (that was
// attention's job), so the same row always gives the same output.
//
// Usage: 06_mlp [LAYER [PROMPT [POSITION]]]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/attention.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/embedding.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/kv_cache.hpp"
#include "glass/mlp.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/rope.hpp"
#include "glass/tensor.hpp"
#include "glass/transformer.hpp"

// The rows layer `layer`'s MLP receives for the prompt `ids` [n, dim]: the layers below run as
// transformer_block runs them, then this layer's attention half, written out the same way.
static glass::RowMatrix mlp_input(const glass::Model& model, int layer, const std::vector<int>& ids) {
    const glass::ModelConfig& c = model.config;
    glass::KVCache cache(c);
    glass::RowMatrix x = glass::embed_tokens(model.embedding_table(), ids);  // [n, dim]
    for (int l = 0; l < layer; ++l) glass::transformer_block(c, model.layers[l], l, x, cache);

    const glass::LayerWeights& w = model.layers[layer];
    const glass::RowMatrix xn = glass::rmsnorm(x, w.rms_att, c.norm_eps);
    glass::RowMatrix q = xn * w.wq.transpose();  // [n, dim]
    glass::RowMatrix k = xn * w.wk.transpose();  // [n, kv_dim]
    const glass::RowMatrix v = xn * w.wv.transpose();
    glass::apply_rope(q, c.n_heads, c.head_dim, 0, c.rope_theta, c.rope_layout);
    glass::apply_rope(k, c.n_kv_heads, c.head_dim, 0, c.rope_theta, c.rope_layout);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    x += glass::causal_attention(q, k, v, 0, {c.n_heads, c.n_kv_heads, c.head_dim}, scale) *
         w.wo.transpose();
    return glass::rmsnorm(x, w.rms_ffn, c.norm_eps);  // [n, dim]: what the MLP gets
}

static int run(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;

    const int layer = argc > 1 ? example::int_arg(argv[1], "layer", 0, c.n_layers - 1) : 0;
    const std::string prompt = argc > 2 ? argv[2] : "Once upon a time";
    const std::vector<int> ids = tok.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const int n = static_cast<int>(ids.size());
    if (n > c.seq_len) glass::fail("prompt of ", n, " tokens is longer than the context window of ", c.seq_len);
    const int position = argc > 3 ? example::int_arg(argv[3], "position", 0, n - 1) : n - 1;

    std::printf("model: dim %d, hidden %d; W1, W3 [%d, %d], W2 [%d, %d]\n", c.dim, c.hidden_dim,
                c.hidden_dim, c.dim, c.dim, c.hidden_dim);
    std::printf("prompt: %s (%d tokens)\n", prompt.c_str(), n);
    std::printf("layer: %d\n", layer);
    std::printf("position: %d (\"%s\")\n", position, tok.piece(ids[static_cast<size_t>(position)]).c_str());

    const glass::RowMatrix all_rows = mlp_input(model, layer, ids);     // [n, dim]
    const glass::RowMatrix x = all_rows.row(position);                  // [1, dim]
    const glass::LayerWeights& w = model.layers[layer];
    std::printf("x, first 6 of %d:", c.dim);
    for (int i = 0; i < 6; ++i) std::printf(" %.6f", x(0, i));
    std::printf("\n");

    // The MLP, one step per line.
    const glass::RowMatrix gate = x * w.w1.transpose();  // [1, hidden]
    const glass::RowMatrix up = x * w.w3.transpose();    // [1, hidden]
    glass::RowMatrix h(1, c.hidden_dim);                 // [1, hidden]
    for (int i = 0; i < c.hidden_dim; ++i) h(0, i) = glass::silu(gate(0, i)) * up(0, i);
    const glass::RowMatrix out = h * w.w2.transpose();   // [1, dim]

    std::printf("%6s %10s %11s %10s %10s\n", "unit", "gate", "silu(gate)", "up", "h");
    for (int i = 0; i < 8; ++i)
        std::printf("%6d %10.6f %11.6f %10.6f %10.6f\n", i, gate(0, i), glass::silu(gate(0, i)), up(0, i), h(0, i));

    int nearly_closed = 0, negative_gate = 0;
    int widest = 0;  // the unit that passes the most: largest |h|
    for (int i = 0; i < c.hidden_dim; ++i) {
        if (std::fabs(glass::silu(gate(0, i))) < 0.1f) ++nearly_closed;
        if (gate(0, i) < 0) ++negative_gate;
        if (std::fabs(h(0, i)) > std::fabs(h(0, widest))) widest = i;
    }
    std::printf("units with gate < 0: %d of %d\n", negative_gate, c.hidden_dim);
    std::printf("units the gate nearly closes (|silu(gate)| < 0.1): %d of %d\n", nearly_closed, c.hidden_dim);
    std::printf("largest |h|: unit %d, gate %.6f, silu(gate) %.6f, up %.6f, h %.6f\n", widest, gate(0, widest),
                glass::silu(gate(0, widest)), up(0, widest), h(0, widest));
    std::printf("out, first 6 of %d:", c.dim);
    for (int i = 0; i < 6; ++i) std::printf(" %.6f", out(0, i));
    std::printf("\n");

    // The library's MLP over every row of the prompt at once; our row must come out the same.
    const glass::RowMatrix library = glass::swiglu_mlp(all_rows, w.w1, w.w2, w.w3);  // [n, dim]
    const float diff = (library.row(position) - out.row(0)).cwiseAbs().maxCoeff();
    std::printf("steps vs glass::swiglu_mlp (all %d rows at once), max abs difference: %.1e\n", n, diff);
    std::printf("steps equal glass::swiglu_mlp (within 1e-5): %s\n", diff <= 1e-5f ? "yes" : "no");
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
