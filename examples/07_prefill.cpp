// 07_prefill — journey step 6: the whole prompt goes through the model in one pass.
//
// In:  the prompt "Once upon a time" (or argv[1]) -> ids [n_prompt] with tok512 (BOS first);
//      the shipped model (dim 64, 5 layers, 4 KV heads of width 8: kv_dim 32).
// Out: the KV cache after one CpuSession::prefill call — every layer holds K and V rows
//      0 .. n_prompt-1 ([n_prompt, kv_dim] each) — and the last position's logits [vocab = 512],
//      from which greedy decoding picks the first new token.
//
// Two things to notice:
//   - one call fills all layers for all prompt positions; there is one cache length for all;
//   - the first new token is chosen but NOT yet in the cache: its K and V are computed only when
//     it is fed back in at the first decode step (10_decode), at position n_prompt.
//
// Usage: 07_prefill [prompt]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "glass/glass.hpp"

// Euclidean length of one cached row (zero if the row was never written).
template <typename Row>
static double norm_of(const Row& row) {
    double sum = 0;
    for (Eigen::Index i = 0; i < row.size(); ++i) sum += static_cast<double>(row(i)) * row(i);
    return std::sqrt(sum);
}

int main(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;

    const std::string prompt = argc > 1 ? argv[1] : "Once upon a time";
    const std::vector<int> ids = tok.encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
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
    return 0;
}
