// 02_train_bpe — journey step 1, from the other side: learn a BPE vocabulary from a text.
//
// In:  a text file (default: data/harbour.txt, ~23 kB of English prose shipped with glass) and
//      a target vocabulary size (default 512 = the 256 bytes + 256 merges).
// Out: the first merges the trainer learns, as ids and as the bytes they stand for; the final
//      vocabulary size; how many tokens the training text becomes, and the compression ratio
//      (bytes per token) after 0, 16, 64, ... merges; a check that decode(encode(text)) == text.
//      With a third argument, the vocabulary is saved there in tiktoken rank format.
//
// The point to look at: the first merges are the most common neighbours in English inside a
// word — " " + "t" (GPT-2's split keeps a word's leading space with it), "h" + "e" — and later
// merges build on earlier ones (" t" + "he" = " the"), so tokens grow from bytes into pieces
// of words and then whole common words (" the", " and"). Each merge can only shorten the text,
// so bytes per token rises with every one.
//
// Usage: 02_train_bpe [TEXT_FILE [VOCAB_SIZE [OUT.tiktoken]]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/tokenize/bpe_train.hpp"
#include "glass/formats/bpe_train_file.hpp"

// Token bytes between quotes; control bytes and non-ASCII bytes as \xNN (a token may hold
// half of a UTF-8 character, which would not print).
static std::string quoted(const std::string& bytes) {
    std::string out = "\"";
    for (unsigned char c : bytes) {
        if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

static int run(int argc, char** argv) {
    const std::string text_path = argc > 1 ? argv[1] : std::string(GLASS_DATA_DIR) + "/harbour.txt";
    int vocab_size = 512;
    if (argc > 2) vocab_size = example::int_arg(argv[2], "vocabulary size", 256, 1'000'000);
    glass::check_vocab_size(vocab_size);  // below 256: fail before printing anything

    const std::string text = glass::read_file_bytes(text_path, "training text");
    std::printf("training text: %s\n", text_path.c_str());
    std::printf("training text bytes: %zu\n", text.size());
    const std::vector<std::string_view> pieces = glass::bpe_train_split().split(text);
    const std::vector<glass::WeightedChunk> chunks = glass::count_chunks(pieces);
    std::printf("chunks (GPT-2 split): %zu, distinct: %zu\n", pieces.size(), chunks.size());
    std::printf("target vocabulary size: %d\n\n", vocab_size);

    // 1. Train: bytes first, then the most frequent neighbouring pair, again and again.
    const auto start = std::chrono::steady_clock::now();
    const glass::TrainedBpe bpe = glass::train_bpe_file(text_path, vocab_size);
    const double train_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    const int show = std::min<int>(20, static_cast<int>(bpe.merges().size()));
    std::printf("first %d merges (new id = left id + right id -> the new token's bytes):\n", show);
    for (int k = 0; k < show; ++k) {
        const glass::BpePair m = bpe.merges()[k];
        std::printf("merge %d: %d = %d + %d -> %s + %s -> %s\n", k + 1, 256 + k, m.left, m.right,
                    quoted(bpe.bytes_of(m.left)).c_str(), quoted(bpe.bytes_of(m.right)).c_str(),
                    quoted(bpe.bytes_of(256 + k)).c_str());
    }
    std::printf("\nlast merge: %d = %s\n", bpe.vocab_size() - 1, quoted(bpe.bytes_of(bpe.vocab_size() - 1)).c_str());
    std::printf("vocabulary size: %d\n", bpe.vocab_size());
    std::printf("merges learned: %zu\n", bpe.merges().size());
    std::printf("training time: %.1f ms\n\n", train_ms);

    // 2. Compression: how many tokens the training text becomes with the first n merges. The
    //    merges for a smaller vocabulary are the first ones of a larger (training is greedy), so
    //    one training run gives every row.
    std::printf("compression along the way (merges, vocabulary size, tokens, bytes per token):\n");
    std::vector<glass::BpePair> first;
    for (size_t n = 0;; n = n == 0 ? 16 : n * 2) {
        if (n > bpe.merges().size()) n = bpe.merges().size();
        first.assign(bpe.merges().begin(), bpe.merges().begin() + static_cast<long>(n));
        const size_t tokens = glass::TrainedBpe::from_merges(first).encode(text).size();
        std::printf("after %zu merges: %zu %zu %.3f\n", n, 256 + n, tokens,
                    tokens == 0 ? 0.0 : static_cast<double>(text.size()) / static_cast<double>(tokens));
        if (n == bpe.merges().size()) break;
    }

    // 3. The full vocabulary on the training text, and the round trip.
    const std::vector<int> ids = bpe.encode(text);
    std::printf("\ntokens on the training text: %zu\n", ids.size());
    std::printf("compression ratio (bytes per token): %.3f\n",
                ids.empty() ? 0.0 : static_cast<double>(text.size()) / static_cast<double>(ids.size()));
    std::printf("round trip (decode(encode(text)) == text): %s\n", bpe.decode(ids) == text ? "yes" : "NO");

    if (argc > 3) {
        glass::save_trained_bpe(bpe, argv[3]);
        std::printf("saved vocabulary (tiktoken rank format): %s\n", argv[3]);
    }
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
