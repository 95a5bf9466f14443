// 07_prefill — journey step 6: the whole prompt goes through the model in one pass.
//
// In:  the prompt "Once upon a time" (or argv[1]) -> ids [n_prompt] with tok512 (BOS first);
//      the shipped model (dim 64, 5 layers, 4 KV heads of width 8: kv_dim 32); a second prompt of
//      the same number of tokens (argv[2]; by default the first one with its last token replaced
//      by " day", or by " time" when it already ends in " day").
// Out: the KV cache after one CpuSession::prefill call — every layer holds K and V rows
//      0 .. n_prompt-1 ([n_prompt, kv_dim] each) — and the last position's logits [vocab = 512],
//      from which greedy decoding picks the first new token;
//      one matrix product written as plain loops: layer 0's keys K = xn Wkᵀ, [n_prompt, 64] times
//      [64, 32], against the same product by Eigen;
//      C6: the second prompt prefilled too, and its cache compared with the first one's, number
//      by number, in every layer: rows before the first differing token against rows from it on.
//
// Three things to notice:
//   - one call fills all layers for all prompt positions; there is one cache length for all;
//   - the first new token is chosen but NOT yet in the cache: its K and V are computed only when
//     it is fed back in at the first decode step (10_decode), at position n_prompt;
//   - changing a token changes no K or V row before it, in any layer (C6): the causal mask keeps
//     later tokens out of earlier rows, which is why those rows can be cached.
//
// Usage: 07_prefill [PROMPT [OTHER_PROMPT]]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/embedding.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/kv_cache.hpp"
#include "glass/rmsnorm.hpp"
#include "glass/tensor.hpp"
#include "glass/transformer.hpp"

// Euclidean length of one cached row (zero if the row was never written).
template <typename Row>
static double norm_of(const Row& row) {
    double sum = 0;
    for (Eigen::Index i = 0; i < row.size(); ++i) sum += static_cast<double>(row(i)) * row(i);
    return std::sqrt(sum);
}

static int run(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;

    const std::string prompt = argc > 1 ? argv[1] : "Once upon a time";
    const std::vector<int> ids = tok.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    // The second prompt for C6: given, or this one with the last token swapped.
    std::vector<int> other_ids = ids;
    if (argc > 2) {
        other_ids = tok.encode(argv[2], /*add_bos=*/true, /*add_eos=*/false);
        // Same length, so every matrix product has the same shape in both runs and even the
        // rounding is the same: the rows before the change must then be bitwise equal.
        if (other_ids.size() != ids.size())
            glass::fail("the other prompt has ", other_ids.size(), " tokens, the prompt ", ids.size(),
                        ": C6 compares two prompts of the same length");
    } else {
        const int day = tok.find(" day"), time = tok.find(" time");
        other_ids.back() = other_ids.back() == day ? time : day;
    }
    const int n_prompt = static_cast<int>(ids.size());

    std::printf("prompt: %s\n", prompt.c_str());
    std::printf("prompt ids:");
    for (int id : ids) std::printf(" %d", id);
    std::printf("\n");
    std::printf("prompt tokens: %d\n", n_prompt);
    std::printf("model: dim %d, layers %d, heads %d, kv heads %d, kv_dim %d\n", c.dim, c.n_layers,
                c.n_heads, c.n_kv_heads, c.kv_dim());

    // One pass over every prompt position, every layer.
    glass::CpuSession session(model);
    std::printf("cache length before prefill: %d\n", session.cache().length());
    const std::span<const float> logits = session.prefill(ids);
    const glass::KVCache& cache = session.cache();
    std::printf("cache length after prefill: %d\n", cache.length());

    // Every layer now holds rows 0..n_prompt-1; row n_prompt is still all zeros.
    for (int layer = 0; layer < c.n_layers; ++layer) {
        const auto keys = cache.keys(layer, n_prompt + 1);  // one row past what was written
        const auto values = cache.values(layer, n_prompt + 1);
        int rows_written = 0;
        for (int r = 0; r < n_prompt + 1; ++r)
            if (norm_of(keys.row(r)) > 0 && norm_of(values.row(r)) > 0) ++rows_written;
        std::printf("layer %d: rows written %d, |K row 0| %.4f, |K row %d| %.4f, |K row %d| %.4f, "
                    "|V row %d| %.4f\n",
                    layer, rows_written, norm_of(keys.row(0)), n_prompt - 1,
                    norm_of(keys.row(n_prompt - 1)), n_prompt, norm_of(keys.row(n_prompt)),
                    n_prompt, norm_of(values.row(n_prompt)));
    }

    // Greedy: the id with the largest logit (the first one on a tie).
    int best = 0;
    for (int i = 1; i < c.vocab_size; ++i)
        if (logits[i] > logits[best]) best = i;
    std::printf("logits shape: [%d]\n", static_cast<int>(logits.size()));
    std::printf("first token id: %d\n", best);
    std::printf("first token piece: \"%s\"\n", tok.piece(best).c_str());
    std::printf("first token logit: %.6f\n", logits[best]);

    // The chosen token has no K/V yet: the cache still ends at the prompt.
    std::printf("first token cached: %s (cache length %d, prompt length %d)\n",
                cache.length() == n_prompt + 1 ? "yes" : "no", cache.length(), n_prompt);
    std::printf("its K/V will be written at position: %d\n", session.position());

    // ---- One matrix product as loops: layer 0's keys before RoPE, K = xn Wkᵀ ----
    // xn [n, dim] is layer 0's normalized input; Wk is stored [out = kv_dim, in = dim], so
    // K[t][o] = sum over i of xn[t][i] · Wk[o][i]: one dot product per output number.
    const glass::LayerWeights& w0 = model.layers[0];
    const glass::RowMatrix xn = glass::rmsnorm(glass::embed_tokens(model.embedding_table(), ids),
                                               w0.rms_att, c.norm_eps);  // [n, dim]
    glass::RowMatrix k_loops(n_prompt, c.kv_dim());                     // [n, kv_dim]
    long multiply_adds = 0;
    for (int t = 0; t < n_prompt; ++t) {
        for (int o = 0; o < c.kv_dim(); ++o) {
            float sum = 0.0f;
            for (int i = 0; i < c.dim; ++i) {
                sum += xn(t, i) * w0.wk(o, i);
                ++multiply_adds;
            }
            k_loops(t, o) = sum;
        }
    }
    const glass::RowMatrix k_eigen = xn * w0.wk.transpose();  // the same product, as transformer_block does it
    std::printf("\nK = xn Wk^T of layer 0, by loops: [%d, %d] x [%d, %d] -> [%d, %d], %ld multiply-adds\n",
                n_prompt, c.dim, c.dim, c.kv_dim(), n_prompt, c.kv_dim(), multiply_adds);
    std::printf("K row %d first 4, loops:", n_prompt - 1);
    for (int o = 0; o < 4; ++o) std::printf(" %.6f", k_loops(n_prompt - 1, o));
    std::printf("\nK row %d first 4, Eigen:", n_prompt - 1);
    for (int o = 0; o < 4; ++o) std::printf(" %.6f", k_eigen(n_prompt - 1, o));
    const float loop_diff = (k_loops - k_eigen).cwiseAbs().maxCoeff();
    std::printf("\nloops vs Eigen, max abs difference: %.1e\n", loop_diff);
    std::printf("loops equal Eigen (within 1e-5): %s\n", loop_diff <= 1e-5f ? "yes" : "no");

    // ---- C6: a later token cannot change an earlier row ----
    std::string other_text;
    for (size_t i = 1; i < other_ids.size(); ++i) other_text += tok.decode(other_ids[i - 1], other_ids[i]);
    std::printf("\nC6 other prompt: %s\n", other_text.c_str());
    std::printf("C6 other prompt ids:");
    for (int id : other_ids) std::printf(" %d", id);
    std::printf("\n");
    const int shared = n_prompt;  // rows both caches hold
    int first_diff = 0;  // the first position where the two prompts differ
    while (first_diff < shared && ids[static_cast<size_t>(first_diff)] == other_ids[static_cast<size_t>(first_diff)])
        ++first_diff;
    std::printf("C6 first position where the ids differ: %d\n", first_diff);
    glass::CpuSession other(model);
    other.prefill(other_ids);
    bool earlier_rows_unchanged = true;
    for (int layer = 0; layer < c.n_layers; ++layer) {
        // Count, per part, how many numbers are bitwise equal (before first_diff) or differ (after).
        int same_k = 0, same_v = 0, changed_k = 0, changed_v = 0;
        const auto k_a = cache.keys(layer, shared), k_b = other.cache().keys(layer, shared);
        const auto v_a = cache.values(layer, shared), v_b = other.cache().values(layer, shared);
        for (int r = 0; r < shared; ++r)
            for (int i = 0; i < c.kv_dim(); ++i) {
                const bool k_equal = k_a(r, i) == k_b(r, i), v_equal = v_a(r, i) == v_b(r, i);
                if (r < first_diff) {
                    same_k += k_equal;
                    same_v += v_equal;
                } else {
                    changed_k += !k_equal;
                    changed_v += !v_equal;
                }
            }
        const int before = first_diff * c.kv_dim(), after = (shared - first_diff) * c.kv_dim();
        if (same_k != before || same_v != before) earlier_rows_unchanged = false;
        std::printf("C6 layer %d: rows 0..%d unchanged K %d of %d, V %d of %d; rows %d..%d changed K %d of %d, "
                    "V %d of %d\n",
                    layer, first_diff - 1, same_k, before, same_v, before, first_diff, shared - 1, changed_k,
                    after, changed_v, after);
    }
    std::printf("C6 rows 0..%d bitwise identical in every layer: %s\n", first_diff - 1,
                earlier_rows_unchanged ? "yes" : "no");
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
