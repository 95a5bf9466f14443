// 01_tokenize — journey step 1: text -> pieces -> integer ids (and back).
//
// In:  the sentence "What is the capital of France?" and three vocabularies:
//        - tok512: the 512-piece vocabulary the shipped story model was trained with;
//        - GPT-4's cl100k_base, a byte-level vocabulary of 100,256 ordinary tokens plus 5
//          special ones (tiktoken file in ../shared/tokenizers/tiktoken/), when present;
//        - Llama 2's 32,000-piece vocabulary (../shared/models/tokenizer.bin, or argv[1]),
//          when present.
// Out: for each vocabulary, the ids [n_tokens] (BOS first) and the piece each id stands for,
//      then decode(ids), which must give the sentence back.
//
// The point to look at: the same text becomes very different id sequences. A big vocabulary has
// whole words with their leading space (" capital"); a small one spells words out of fragments.
// A model only understands the ids of the vocabulary it was trained with.
//
// Usage: 01_tokenize [path/to/llama2/tokenizer.bin]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/tokenizer.hpp"
#include "glass/formats/tiktoken_loader.hpp"

// A piece between quotes, with newlines and other control bytes made visible.
static std::string quoted(const std::string& piece) {
    std::string out = "\"";
    for (unsigned char c : piece) {
        if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            out += hex;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

// Encode, show every (id, piece) pair, decode again. `name` prefixes every printed label.
// Any vocabulary works through the one Tokenizer interface; only whether a BOS goes first differs
// (llama2.c-style vocabularies start every sequence with one, byte-level ones do not).
static void show(const char* name, const glass::Tokenizer& tok, const std::string& text, bool add_bos) {
    const std::vector<int> ids = tok.encode(text, add_bos, /*add_eos=*/false);

    std::printf("%s vocabulary size: %d\n", name, tok.vocab_size());
    std::printf("%s token count: %zu%s\n", name, ids.size(), add_bos ? " (BOS included)" : "");
    std::printf("%s ids:", name);
    for (int id : ids) std::printf(" %d", id);
    std::printf("\n");

    std::printf("  %5s  %6s  %s\n", "index", "id", "piece");
    for (size_t i = 0; i < ids.size(); ++i)
        std::printf("  %5zu  %6d  %s\n", i, ids[i], quoted(tok.piece(ids[i])).c_str());

    // Decoding: concatenate each token's bytes; BOS adds nothing, and the space that encode put
    // in front of the first word (the "dummy prefix") is dropped again right after BOS.
    std::string decoded;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int prev = i == 0 ? -1 : ids[i - 1];
        if (ids[i] != tok.bos_id()) decoded += tok.decode(prev, ids[i]);
    }
    std::printf("%s decoded: %s\n", name, decoded.c_str());
    std::printf("%s round trip: %s\n\n", name, decoded == text ? "yes" : "NO");
}

int main(int argc, char** argv) {
    const std::string text = "What is the capital of France?";
    std::printf("text: %s\n\n", text.c_str());

    // 1. The shipped 512-piece vocabulary.
    const std::string tok512_path = std::string(GLASS_MODELS_DIR) + "/tok512.bin";
    const glass::Llama2cTokenizer tok512 = glass::Llama2cTokenizer::load(tok512_path);
    std::printf("tok512 file: %s\n", tok512_path.c_str());
    show("tok512", tok512, text, /*add_bos=*/true);

    // 2. GPT-4's cl100k_base: the split regex cuts " capital" off as a word, and the whole word
    //    is one token. (Not shipped with glass either.)
    const std::string cl100k_path = std::string(GLASS_SHARED_DIR) + "/tokenizers/tiktoken/cl100k_base.tiktoken";
    std::printf("cl100k file: %s\n", cl100k_path.c_str());
    if (std::ifstream(cl100k_path).good()) {
        const glass::ByteLevelBpe cl100k = glass::load_tiktoken(cl100k_path, "cl100k");
        // Its ids run from 0 to 100,276, but not every id is an ordinary token: the file holds
        // 100,256 of them, tiktoken adds 5 special ones (<|endoftext|> = 100257, ...) above
        // those, and the ids between the specials are left unused.
        int ordinary = 0, special = 0;
        for (int id = 0; id < cl100k.vocab_size(); ++id) {
            if (cl100k.is_special(id)) ++special;
            else if (id < static_cast<int>(cl100k.vocab().tokens.size()) && !cl100k.vocab().tokens[id].empty()) ++ordinary;
        }
        std::printf("cl100k vocabulary: %d ordinary tokens, %d special tokens, %d unused ids (%d ids in all)\n",
                    ordinary, special, cl100k.vocab_size() - ordinary - special, cl100k.vocab_size());
        show("cl100k", cl100k, text, /*add_bos=*/false);
    } else {
        std::printf("cl100k skipped: file not found\n\n");
    }

    // 3. Llama 2's 32,000-piece vocabulary — not shipped with glass, so it may be absent.
    const std::string llama2_path =
        argc > 1 ? argv[1] : std::string(GLASS_SHARED_DIR) + "/models/tokenizer.bin";
    if (!std::ifstream(llama2_path).good()) {
        std::printf("llama2 file: %s\n", llama2_path.c_str());
        std::printf("llama2 skipped: file not found (pass the path of Llama 2's tokenizer.bin, "
                    "llama2.c format, as the first argument)\n");
        return 0;
    }
    const glass::Llama2cTokenizer llama2 = glass::Llama2cTokenizer::load(llama2_path);
    std::printf("llama2 file: %s\n", llama2_path.c_str());
    show("llama2", llama2, text, /*add_bos=*/true);
    return 0;
}
