/// \file
/// \brief glass/formats/gguf_vocab.hpp — journey step 1 for llama.cpp's GGUF vocabularies.
/// ```text
/// In:  a GGUF file's tokenizer metadata (gguf.hpp reads it).
/// Out: a Tokenizer — ByteLevelBpe for "gpt2" vocabularies, SentencePieceBpe for "llama" ones.
///
/// The metadata keys (tokenizer.ggml.*):
///   model       "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE); others are refused
///   pre         which pre-tokenizer split the vocabulary was trained with (byte-level only)
///   tokens      [vocab] token texts (GPT-2 printable bytes for "gpt2", ▁ for spaces for "llama")
///   token_type  [vocab] 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
///   merges      [n] "left right" (byte-level; rank = index)
///   scores      [vocab] (SentencePiece; higher merges first)
///   bos_token_id, eos_token_id, unknown_token_id, add_space_prefix
/// The pre-tokenizer names map to llama.cpp's split rules. Several rules apply in sequence:
/// the first cuts the text, the next cuts each piece again (pretokenize.hpp).
/// ```
#pragma once

#include <cctype>

#include <memory>
#include <string>
#include <vector>

#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/formats/gguf.hpp"
#include "glass/tokenize/sentencepiece_bpe.hpp"
#include "glass/formats/tiktoken_loader.hpp"

namespace glass {

/// llama.cpp's split rules for each `tokenizer.ggml.pre` name (a fact of each vocabulary: the
/// rules it was trained with). Throws for a name glass does not know.
inline std::vector<std::string> gguf_split_patterns(const std::string& pre) {
    // GPT-2's rule without its final "\s+" (text no alternative matches stays a piece anyway).
    const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
    if (pre == "gpt-2" || pre == "mpt" || pre == "olmo" || pre == "jais") return {gpt2};
    if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm")
        return {R"(\p{N})", gpt2};  // every digit alone, then GPT-2's rule
    if (pre == "falcon") return {R"([\p{P}\$\+<=>\^~\|`]+)", gpt2, "[0-9][0-9][0-9]"};
    if (pre == "llama3" || pre == "llama-bpe" || pre == "dbrx" || pre == "smaug-bpe") return {kSplitCl100k};
    if (pre == "qwen2") return {kSplitQwen2};
    if (pre == "deepseek-coder")
        return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"};
    if (pre == "deepseek-llm")
        return {R"([\r\n])",
                // letters of the cased scripts (Latin, Greek, Cyrillic, Armenian, Georgian, ...)
                R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-)"
                R"(\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
                R"(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F})"
                R"(\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-)"
                R"(\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
                R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-)"
                R"(\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-)"
                R"(\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-)"
                R"(\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
                R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-)"
                R"(\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
                R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2})"
                R"(\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
                R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-)"
                R"(\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
                R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
                R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)", R"(\s+$)",
                R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N}+)"};
    fail("GGUF pre-tokenizer '", pre, "' is not supported (known: gpt-2, mpt, starcoder, refact, falcon, "
         "llama-bpe, qwen2, deepseek-coder, deepseek-llm)");
}

/// Builds the tokenizer a GGUF file describes.
/// A GGUF tokenizer's end-of-generation ids besides EOS, as llama.cpp collects them: the EOT and
/// EOM ids when the file names them, and every token spelled like an end of turn
/// (is_end_of_turn_text).
template <typename IdOr>
std::unique_ptr<Tokenizer> with_end_of_generation(std::unique_ptr<Tokenizer> tok, const std::vector<std::string>& tokens,
                                                  IdOr id_or) {
    std::vector<int> ends = {id_or("tokenizer.ggml.eot_token_id", -1), id_or("tokenizer.ggml.eom_token_id", -1)};
    for (size_t id = 0; id < tokens.size(); ++id)
        if (is_end_of_turn_text(tokens[id])) ends.push_back(static_cast<int>(id));
    tok->add_end_of_generation_ids(ends);
    return tok;
}

inline std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
    const GgufFile f = read_gguf_metadata(path);
    const std::string model = f.get_string("tokenizer.ggml.model", "");
    const auto& tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    std::vector<std::int64_t> types(tokens.size(), 1);
    if (f.has("tokenizer.ggml.token_type")) types = f.get<std::vector<std::int64_t>>("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
        fail("GGUF file '", path, "': ", tokens.size(), " tokens but ", types.size(), " token types");
    const auto id_or = [&](const char* key, std::int64_t fallback) {
        const std::int64_t id = f.get_int(key, fallback);
        if (id < -1 || id >= static_cast<std::int64_t>(tokens.size()))
            fail("GGUF file '", path, "': ", key, " = ", id, " is outside the vocabulary of ", tokens.size());
        return static_cast<int>(id);
    };
    constexpr std::int64_t kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5;

    if (model == "gpt2") {
        ByteLevelVocab v;
        v.name = path;
        std::vector<int> special_ids;
        for (size_t id = 0; id < tokens.size(); ++id)
            if (types[id] == kControl || types[id] == kUserDefined || types[id] == kUnknown || types[id] == kUnused) {
                special_ids.push_back(static_cast<int>(id));  // text kept as written, never merged into
                v.specials.push_back({tokens[id], static_cast<int>(id)});
                // llama.cpp matches user-defined tokens in all text (control ones only on request)
                if (types[id] == kUserDefined) v.always_split.push_back({tokens[id], static_cast<int>(id)});
            }
        std::vector<std::pair<std::string, std::string>> merges;
        for (const std::string& m : f.get<std::vector<std::string>>("tokenizer.ggml.merges"))
            merges.push_back(split_merge_line(m, "GGUF file '" + path + "'"));
        fill_from_printable(v, tokens, merges, special_ids);
        const std::string pre = f.get_string("tokenizer.ggml.pre", "default");
        v.split_patterns = gguf_split_patterns(pre);
        v.whole_word_first = pre == "llama3" || pre == "llama-bpe";  // llama.cpp's ignore_merges
        v.bos_id = id_or("tokenizer.ggml.bos_token_id", -1);
        v.eos_id = id_or("tokenizer.ggml.eos_token_id", -1);
        v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", false);  // llama.cpp's default for BPE
        return with_end_of_generation(std::make_unique<ByteLevelBpe>(std::move(v)), tokens, id_or);
    }
    if (model == "llama") {
        SentencePieceVocab v;
        v.name = path;
        v.pieces = tokens;
        for (double s : f.get<std::vector<double>>("tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
        // Control, unknown and unused pieces are never produced from text: no merge may reach
        // them (a NaN score excludes a piece from the merge table).
        for (size_t id = 0; id < tokens.size() && id < v.scores.size(); ++id)
            if (types[id] == kControl || types[id] == kUnknown || types[id] == kUnused)
                v.scores[id] = std::numeric_limits<float>::quiet_NaN();
        // Text that spells a control or user-defined token ("<s>", Gemma's <start_of_turn>,
        // Phi-3's <|end|>) becomes that token in encode_with_specials: a chat template's prompt.
        // GGUF keeps no strip flags; llama.cpp sets them by model name (llama-vocab.cpp), and so
        // does glass: Phi-3's special tokens swallow the whitespace after them (but <unk>, <s>,
        // <|endoftext|>), as its Hugging Face tokenizer's rstrip flags say.
        std::string model_name = f.get_string("general.name", "");
        for (char& c : model_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const bool phi3 = model_name.find("phi-3") != std::string::npos || model_name.find("phi3") != std::string::npos;
        for (size_t id = 0; id < tokens.size(); ++id)
            if (types[id] == kControl || types[id] == kUserDefined || types[id] == kUnknown || types[id] == kUnused) {
                const bool rstrip = phi3 && tokens[id] != "<unk>" && tokens[id] != "<s>" && tokens[id] != "<|endoftext|>";
                v.specials.push_back({.text = tokens[id], .id = static_cast<int>(id), .lstrip = false, .rstrip = rstrip});
            }
        v.add_dummy_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
        v.dummy_prefix_after_specials = true;  // llama.cpp's SentencePiece tokenizer
        v.unk_id = id_or("tokenizer.ggml.unknown_token_id", 0);
        v.bos_id = id_or("tokenizer.ggml.bos_token_id", 1);
        v.eos_id = id_or("tokenizer.ggml.eos_token_id", 2);
        v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", true);  // llama.cpp's default for SentencePiece
        return with_end_of_generation(std::make_unique<SentencePieceBpe>(std::move(v)), tokens, id_or);
    }
    fail("GGUF file '", path, "': tokenizer model '", model,
         "' is not supported (glass reads 'gpt2' byte-level BPE and 'llama' SentencePiece BPE)");
}

}  // namespace glass
