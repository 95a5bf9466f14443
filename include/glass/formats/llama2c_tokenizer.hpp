/// \file
/// \brief glass/formats/llama2c_tokenizer.hpp — llama2.c's tokenizer.bin, read into a SentencePiece-style vocabulary.
/// ```text
/// In:  the bytes of a tokenizer.bin (llama2.c's export of a SentencePiece model).
/// Out: a Llama2cTokenizer, i.e. a SentencePieceBpe (tokenize/sentencepiece_bpe.hpp) over its pieces.
///
/// Layout: int32 max_token_length; then, for every piece in id order: float32 score,
/// int32 length, `length` bytes of text. Spaces are stored as " " (not "▁"); ids 0/1/2 are
/// <unk>/BOS/EOS. There is no piece count: the file ends after the last piece.
/// ```
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "glass/errors.hpp"
#include "glass/tokenize/sentencepiece_bpe.hpp"

namespace glass {

// llama2.c's tokenizer.bin: int32 max_token_length; then per piece: float32 score, int32 length,
// `length` bytes. Spaces are stored as " ", ids 0/1/2 are <unk>/BOS/EOS.
class Llama2cTokenizer : public SentencePieceBpe {
public:
    // expected_vocab_size < 0: the vocabulary is every entry in the file. Otherwise the file
    // must hold exactly that many pieces (the model's vocabulary).
    static Llama2cTokenizer load(const std::string& path, int expected_vocab_size = -1) {
        std::ifstream in(path, std::ios::binary);
        if (!in) fail("cannot open tokenizer file '", path, "': ", std::strerror(errno));
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        try {
            return parse(bytes, expected_vocab_size);
        } catch (const Error& e) {
            fail("tokenizer file '", path, "': ", e.what());
        }
    }

    static Llama2cTokenizer parse(const std::vector<char>& bytes, int expected_vocab_size = -1) {
        SentencePieceVocab v;
        v.name = "llama2.c tokenizer";
        v.space_mark.assign(1, ' ');  // (not = " ": GCC 12 warns falsely, -Wrestrict, PR105651)
        size_t at = 0;
        std::int32_t max_len = 0;
        if (bytes.size() < 4) fail("file is ", bytes.size(), " bytes: too short for the 4-byte header");
        std::memcpy(&max_len, bytes.data(), 4);
        at = 4;
        if (max_len < 1 || max_len > (1 << 16))
            fail("bad max_token_length header ", max_len, " (expected 1..65536)");
        while (at < bytes.size()) {
            const size_t id = v.pieces.size();
            float score = 0;
            std::int32_t len = 0;
            if (bytes.size() - at < 8) fail("truncated entry for piece ", id, " at byte ", at);
            std::memcpy(&score, bytes.data() + at, 4);
            std::memcpy(&len, bytes.data() + at + 4, 4);
            at += 8;
            if (len < 0 || len > max_len)
                fail("piece ", id, " has length ", len, " outside [0, max_token_length=", max_len, "]");
            if (bytes.size() - at < static_cast<size_t>(len))
                fail("piece ", id, " (", len, " bytes) runs past the end of the file");
            if (std::isnan(score)) fail("piece ", id, " has a NaN score");
            v.pieces.emplace_back(bytes.data() + at, static_cast<size_t>(len));
            v.scores.push_back(score);
            at += static_cast<size_t>(len);
            if (v.pieces.size() > (1u << 22)) fail("more than 4M pieces: not a tokenizer file");
        }
        if (v.pieces.size() < 3) fail("only ", v.pieces.size(), " pieces; need <unk>, BOS, EOS");
        if (expected_vocab_size >= 0 && static_cast<int>(v.pieces.size()) != expected_vocab_size)
            fail("has ", v.pieces.size(), " pieces but the model's vocabulary has ",
                 expected_vocab_size, ": this tokenizer does not belong to this model");
        return Llama2cTokenizer(std::move(v));
    }

private:
    explicit Llama2cTokenizer(SentencePieceVocab v) : SentencePieceBpe(std::move(v)) {}
};

}  // namespace glass
