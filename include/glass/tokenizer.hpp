/// \file
/// \brief glass/tokenizer.hpp — journey step 1: text -> pieces -> integer ids, and back.
/// ```text
/// In:  text (any bytes).
/// Out: token ids [n_tokens]; decoding maps ids back to bytes.
///
/// One interface, two families of vocabularies (tokenize/), read from many file formats (formats/):
///   tokenize/sentencepiece_bpe.hpp  SentencePiece-style BPE over characters, byte fallback:
///                                   Llama 2, TinyLlama, llama2.c's models
///   tokenize/byte_level_bpe.hpp     byte-level BPE: GPT-2, tiktoken (cl100k, o200k), Llama 3, Qwen
///     tokenize/pretokenize.hpp        the regex split into words (PCRE2)
///     tokenize/byte_level.hpp         GPT-2's printable stand-ins for bytes
///     tokenize/normalize.hpp          NFC
///   tokenize/bpe_merge.hpp          the merge loop both families share (rank = -score for SentencePiece)
///   tokenize/special_tokens.hpp     "`<|endoftext|>`" & co. written in text
///   tokenize/bpe_train.hpp          where a vocabulary comes from: BPE training
///   formats/llama2c_tokenizer.hpp   llama2.c's tokenizer.bin (Llama2cTokenizer)
///   formats/tiktoken_loader.hpp     .tiktoken rank files, GPT-2 encoder.json + vocab.bpe
///   formats/hf_loader.hpp           Hugging Face tokenizer.json (both families)
///   formats/gguf.hpp, gguf_vocab.hpp  llama.cpp's GGUF files and the vocabularies inside them
///   formats/bpe_train_file.hpp      a trained vocabulary saved as a .tiktoken file
/// The generate loop only sees the Tokenizer interface below, so it takes any of them.
/// ```
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glass {

// What the generate loop needs from any tokenizer.
class Tokenizer {
public:
    virtual ~Tokenizer() = default;
    virtual int vocab_size() const = 0;
    virtual int bos_id() const = 0;  // -1 when the vocabulary has none
    virtual int eos_id() const = 0;
    // Whether a prompt starts with BOS (generate() asks): true for Llama 2 and the shipped model;
    // a GGUF says so in tokenizer.ggml.add_bos_token (Qwen: false).
    virtual bool adds_bos() const { return bos_id() >= 0; }
    // Text that spells a special token ("<|endoftext|>") is ordinary text here: encoding user
    // text never produces a special token.
    virtual std::vector<int> encode(std::string_view text, bool add_bos, bool add_eos) const = 0;
    // Hugging Face's encode(text, add_special_tokens=False): special-token text in `text` DOES
    // become the special token. Only for text the caller trusts (a chat template, a test).
    // Vocabularies without special-token text encode it as ordinary text.
    virtual std::vector<int> encode_with_specials(std::string_view text) const {
        return encode(text, false, false);
    }
    // The bytes token `id` contributes to the text when it follows `prev_id`.
    virtual std::string decode(int prev_id, int id) const = 0;
    // The piece as stored in the vocabulary (for display).
    virtual std::string piece(int id) const = 0;

    // Whether `id` ends a reply: EOS, or another of the model's end-of-generation tokens. A chat
    // model ends its turn with a token of its own instead of EOS: <|eot_id|> (Llama 3 Instruct),
    // <|im_end|> (Qwen), <end_of_turn> (Gemma). generate() and the serving engine stop there.
    bool ends_generation(int id) const {
        return id == eos_id() || std::find(more_ends_.begin(), more_ends_.end(), id) != more_ends_.end();
    }
    // EOS and the others, ascending. The model's loader adds the others (model_files.hpp: a GGUF's
    // tokenizer.ggml.eot/eom_token_id and the texts of is_end_of_turn_text; a Hugging Face
    // folder's generation_config.json eos_token_id, a number or a list).
    std::vector<int> end_of_generation_ids() const {
        std::vector<int> ids = more_ends_;
        if (eos_id() >= 0 && !ends_generation_besides_eos(eos_id())) ids.push_back(eos_id());
        std::sort(ids.begin(), ids.end());
        return ids;
    }
    // Adds ids that end a reply (negative ones, "none", and repeats are skipped).
    void add_end_of_generation_ids(std::span<const int> ids) {
        for (int id : ids)
            if (id >= 0 && !ends_generation_besides_eos(id)) more_ends_.push_back(id);
    }

private:
    bool ends_generation_besides_eos(int id) const {
        return std::find(more_ends_.begin(), more_ends_.end(), id) != more_ends_.end();
    }
    std::vector<int> more_ends_;  // end-of-generation ids other than (or besides) eos_id()
};

/// Token texts that end a chat model's turn. A GGUF names EOS, and at most one EOT and one EOM
/// token, by id; llama.cpp's loader (src/llama-vocab.cpp, special_eog_ids) also treats every
/// token spelled like one of these as end-of-generation, and glass follows it for GGUF files.
inline bool is_end_of_turn_text(std::string_view piece) {
    static constexpr std::string_view kTexts[] = {
        "<|eot_id|>",     "<|eom_id|>",      // Llama 3.x Instruct (end of turn, end of message)
        "<|im_end|>",                        // ChatML: Qwen, SmolLM
        "<|end|>",                           // Phi-3
        "<end_of_turn>",                     // Gemma
        "<|endoftext|>",  "<|end_of_text|>", // GPT-2 style and Llama 3 base; Granite
        "<EOT>",          "_<EOT>",          // CodeLlama infill
        "<｜end▁of▁sentence｜>",             // DeepSeek
        "<end_of_utterance>",                // SmolDocling
    };
    return std::find(std::begin(kTexts), std::end(kTexts), piece) != std::end(kTexts);
}

}  // namespace glass
