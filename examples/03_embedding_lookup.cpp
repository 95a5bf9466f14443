// 03_embedding_lookup — journey step 2: ids -> vectors, by looking up rows. No arithmetic.
//
// In:  the shipped model's embedding table [vocab = 512, dim = 64] (the first array of
//      models/stories260K.bin) and one token id (default: the id of " Once" in tok512; or argv[1]).
// Out: the table's row `id` and the vector glass::embed_tokens produces for [id] — [1, 64] —
//      which are the same 64 numbers; then the size of a real table (C2: Llama 3 8B).
//
// Usage: 03_embedding_lookup [token_id]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/embedding.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/tensor.hpp"

static int run(int argc, char** argv) {
    const glass::Model model =
        glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok =
        glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const int vocab = model.config.vocab_size;
    const int dim = model.config.dim;

    const int id = argc > 1 ? example::int_arg(argv[1], "token id", 0, vocab - 1) : tok.find(" Once");

    std::printf("embedding table shape: [%d, %d]\n", vocab, dim);
    std::printf("token id: %d\n", id);
    std::printf("token piece: \"%s\"\n", tok.piece(id).c_str());

    // The table is row-major: row `id` starts id * dim floats into it. That is the whole lookup.
    const float* row = model.token_embedding + static_cast<std::int64_t>(id) * dim;
    std::printf("table row offset in file (bytes): %lld\n",
                static_cast<long long>(28 + 4LL * id * dim));  // after the 7-int32 header

    // The same thing through the library: a batch of one id -> activations [1, dim].
    const std::vector<int> ids = {id};
    const glass::RowMatrix x = glass::embed_tokens(model.embedding_table(), ids);
    std::printf("embedded shape: [%ld, %ld]\n", static_cast<long>(x.rows()), static_cast<long>(x.cols()));

    const int shown = 8;
    std::printf("table row first %d:", shown);
    for (int i = 0; i < shown; ++i) std::printf(" %.9g", row[i]);
    std::printf("\n");
    std::printf("embedded first %d:", shown);
    for (int i = 0; i < shown; ++i) std::printf(" %.9g", x(0, i));
    std::printf("\n");

    int differing = 0;
    for (int i = 0; i < dim; ++i)
        if (x(0, i) != row[i]) ++differing;
    std::printf("values that differ (of %d): %d\n\n", dim, differing);

    // C2: how big such a table is in a real model. Llama 3 8B: 128,256 ids, each a 4,096-wide row.
    const std::int64_t llama3_vocab = 128256;
    const std::int64_t llama3_dim = 4096;
    const std::int64_t params = llama3_vocab * llama3_dim;
    std::printf("shipped model embedding parameters: %lld\n", static_cast<long long>(vocab) * dim);
    std::printf("llama3 8b vocabulary: %lld\n", static_cast<long long>(llama3_vocab));
    std::printf("llama3 8b dim: %lld\n", static_cast<long long>(llama3_dim));
    std::printf("llama3 8b embedding parameters: %lld\n", static_cast<long long>(params));
    std::printf("more than half a billion: %s\n", params > 500000000 ? "yes" : "no");
    std::printf("llama3 8b embedding bytes fp16: %lld (%.2f GB)\n", static_cast<long long>(params * 2),
                static_cast<double>(params * 2) / 1e9);
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
