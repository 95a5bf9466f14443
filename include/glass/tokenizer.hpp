/// \file
/// \brief glass/tokenizer.hpp — journey step 1: text -> pieces -> integer ids, and back.
/// \verbatim
/// In:  text (any bytes).
/// Out: token ids [n_tokens]; decoding maps ids back to bytes.
///
/// One interface, several vocabulary families, each in its own header:
///   sentencepiece_bpe.hpp  SentencePiece-style BPE over characters with byte fallback:
///                          llama2.c's tokenizer.bin (Llama2cTokenizer), Llama 2, TinyLlama.
///   byte_level_bpe.hpp     byte-level BPE: GPT-2, tiktoken (cl100k, o200k), Llama 3, Qwen.
///     pretokenize.hpp        the regex split into words (PCRE2)
///     byte_level.hpp         GPT-2's printable stand-ins for bytes
///     normalize.hpp          NFC
///     tiktoken_loader.hpp    .tiktoken rank files, GPT-2 encoder.json + vocab.bpe
///     hf_loader.hpp          Hugging Face tokenizer.json (both families)
///   bpe_merge.hpp          the merge loop both families share (rank = -score for SentencePiece)
///   special_tokens.hpp     "<|endoftext|>" & co. written in text
/// The generate loop only sees the Tokenizer interface below, so it takes any of them.
/// \endverbatim
#pragma once

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
};

}  // namespace glass

// The llama2.c vocabulary every existing caller uses (Llama2cTokenizer) lives here:
#include "glass/sentencepiece_bpe.hpp"
