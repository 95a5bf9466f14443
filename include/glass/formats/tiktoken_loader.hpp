/// \file
/// \brief glass/formats/tiktoken_loader.hpp — reading OpenAI's vocabulary files into a ByteLevelVocab.
/// ```text
/// In:  a `.tiktoken` rank file, or GPT-2's encoder.json + vocab.bpe.
/// Out: a ByteLevelBpe tokenizer (byte_level_bpe.hpp).
///
/// .tiktoken: one line per token, "BASE64(token bytes) SPACE rank". The rank is the token id and
/// the merge priority at once. The file holds neither the split pattern nor the special tokens:
/// those belong to the named encoding (tiktoken's Python package hard-codes them; so does glass,
/// below). Special tokens are not in the file; they take ids after the ranks.
/// GPT-2: encoder.json maps the printable form of each token (byte_level.hpp) to its id;
/// vocab.bpe lists the 50,000 merges, one "left right" pair per line after a "#version" line.
/// ```
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/tokenize/byte_level.hpp"
#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/errors.hpp"
#include "glass/formats/json_input.hpp"
#include "glass/formats/read_file.hpp"

namespace glass {

// Standard base64 (RFC 4648, with '=' padding); false on any other character.
inline bool base64_decode(std::string_view in, std::string& out) {
    out.clear();
    if (in.size() % 4 != 0) return false;
    unsigned buffer = 0;
    int bits = 0;
    size_t padding = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        int v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == '+') v = 62;
        else if (c == '/') v = 63;
        else if (c == '=' && i + 2 >= in.size()) { ++padding; continue; }
        else return false;
        if (padding) return false;  // data after '='
        buffer = (buffer << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((buffer >> bits) & 0xFF);
        }
    }
    return true;
}

// A named tiktoken encoding: its split pattern and special tokens (as tiktoken defines them).
struct TiktokenEncoding {
    std::string pattern;
    std::vector<SpecialToken> specials;
    int eos_id;
};

// name: r50k (also "gpt2", "r50k_base"), cl100k ("cl100k_base"), o200k ("o200k_base").
inline TiktokenEncoding tiktoken_encoding(const std::string& name) {
    if (name == "r50k" || name == "r50k_base" || name == "gpt2")
        return {kSplitR50k, {{"<|endoftext|>", 50256}}, 50256};
    if (name == "cl100k" || name == "cl100k_base")
        return {kSplitCl100k,
                {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
                 {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}},
                100257};
    if (name == "o200k" || name == "o200k_base")
        return {kSplitO200k, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, 199999};
    fail("unknown tiktoken pattern '", name, "' (expected r50k, cl100k or o200k)");
}

// The tokens of a .tiktoken file: tokens[rank] = bytes.
inline std::vector<std::string> read_tiktoken_ranks(const std::string& path) {
    const std::string data = read_file_bytes(path, "tiktoken file");
    // Ranks number the lines: a rank can be no larger than the file has lines, which bounds the
    // table before any rank sizes it.
    const long long n_lines = static_cast<long long>(std::count(data.begin(), data.end(), '\n')) + 1;
    std::vector<std::string> tokens;
    std::string bytes;
    size_t line_no = 0, at = 0;
    while (at < data.size()) {
        size_t end = data.find('\n', at);
        if (end == std::string::npos) end = data.size();
        std::string_view line(data.data() + at, end - at);
        at = end + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue;
        const size_t space = line.find(' ');
        const std::string_view b64 = line.substr(0, space);
        const std::string_view rank_text = space == std::string_view::npos ? "" : line.substr(space + 1);
        long long rank = -1;
        std::istringstream rank_in{std::string(rank_text)};
        if (rank_text.empty() || rank_text.find_first_not_of("0123456789") != std::string_view::npos ||
            !(rank_in >> rank))
            fail("tiktoken file '", path, "' line ", line_no, ": expected 'BASE64 RANK', got '",
                 std::string(line.substr(0, 80)), "'");
        if (rank >= n_lines || rank >= (1 << 24))
            fail("tiktoken file '", path, "' line ", line_no, ": rank ", rank, " is outside [0, ",
                 std::min<long long>(n_lines, 1 << 24), ") (one rank per line of the file)");
        if (!base64_decode(b64, bytes) || bytes.empty())
            fail("tiktoken file '", path, "' line ", line_no, ": '", std::string(b64.substr(0, 80)),
                 "' is not base64 of a non-empty token");
        if (static_cast<size_t>(rank) >= tokens.size()) tokens.resize(static_cast<size_t>(rank) + 1);
        if (!tokens[rank].empty())
            fail("tiktoken file '", path, "' line ", line_no, ": rank ", rank, " appears twice");
        tokens[rank] = bytes;
    }
    if (tokens.empty()) fail("tiktoken file '", path, "' holds no tokens");
    return tokens;
}

// A .tiktoken file with the split pattern and special tokens of encoding `pattern_name`.
inline ByteLevelBpe load_tiktoken(const std::string& path, const std::string& pattern_name) {
    const TiktokenEncoding enc = tiktoken_encoding(pattern_name);
    ByteLevelVocab v;
    v.name = path;
    v.tokens = read_tiktoken_ranks(path);
    for (const SpecialToken& s : enc.specials)
        if (s.id < static_cast<int>(v.tokens.size()) && !v.tokens[s.id].empty())
            fail("tiktoken file '", path, "' has a token at rank ", s.id, " where ", pattern_name,
                 " puts special token ", s.text, ": wrong --pattern for this file?");
    v.split_patterns = {enc.pattern};
    v.specials = enc.specials;
    v.whole_word_first = true;  // tiktoken looks the whole word up before merging
    v.eos_id = enc.eos_id;
    return ByteLevelBpe(std::move(v));
}

// Printable-form tokens and merges (GPT-2 files, tokenizer.json, GGUF) -> raw-byte vocabulary.
// token_texts[id] is the printable form ("" = unused id); merge_texts are (left, right) pairs.
// Tokens in `special_ids` are kept as written (they need not be in printable form).
inline void fill_from_printable(ByteLevelVocab& v, const std::vector<std::string>& token_texts,
                                const std::vector<std::pair<std::string, std::string>>& merge_texts,
                                const std::vector<int>& special_ids = {}) {
    std::vector<char> special(token_texts.size(), 0);
    for (int id : special_ids)
        if (id >= 0 && id < static_cast<int>(token_texts.size())) special[id] = 1;
    std::unordered_map<std::string, int> text_to_id;
    v.tokens.assign(token_texts.size(), "");
    for (size_t id = 0; id < token_texts.size(); ++id) {
        if (token_texts[id].empty()) continue;
        text_to_id.emplace(token_texts[id], static_cast<int>(id));
        if (special[id]) {
            v.tokens[id] = token_texts[id];
            continue;
        }
        auto bytes = byte_level::decode(token_texts[id]);
        if (!bytes || bytes->empty())
            fail(v.name, ": token ", id, " '", token_texts[id], "' is not in byte-level form");
        v.tokens[id] = *bytes;
    }
    v.merges.reserve(merge_texts.size());
    for (size_t i = 0; i < merge_texts.size(); ++i) {
        auto l = text_to_id.find(merge_texts[i].first), r = text_to_id.find(merge_texts[i].second);
        if (l == text_to_id.end() || r == text_to_id.end())
            fail(v.name, ": merge ", i, " '", merge_texts[i].first, " ", merge_texts[i].second,
                 "' names a token that is not in the vocabulary");
        v.merges.emplace_back(l->second, r->second);
    }
}

// "left right" -> (left, right); the line must hold exactly one space.
inline std::pair<std::string, std::string> split_merge_line(std::string_view line, const std::string& where) {
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
        fail(where, ": merge '", std::string(line.substr(0, 80)), "' is not 'left right'");
    return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

// GPT-2's encoder.json + vocab.bpe (== r50k_base; <|endoftext|> = 50256 is the one special).
inline ByteLevelBpe load_gpt2(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    const std::string where = "GPT-2 encoder.json '" + encoder_json_path + "'";
    const nlohmann::json encoder =
        parse_untrusted_json(read_file_bytes(encoder_json_path, "GPT-2 encoder.json"), where);
    if (!encoder.is_object() || encoder.empty())
        fail("GPT-2 encoder.json '", encoder_json_path, "' is not a JSON object of token -> id");
    std::vector<std::string> texts;
    std::vector<int> special_ids;
    ByteLevelVocab v;
    v.name = encoder_json_path;
    for (const auto& [text, id_json] : encoder.items()) {
        // One id per entry: none can reach the number of entries (checked before it sizes `texts`).
        const int id = json_token_id(id_json, static_cast<std::int64_t>(encoder.size()), where,
                                     "token '" + text.substr(0, 40) + "'");
        if (static_cast<size_t>(id) >= texts.size()) texts.resize(static_cast<size_t>(id) + 1);
        texts[id] = text;
        if (text == "<|endoftext|>") {
            special_ids.push_back(id);
            v.specials.push_back({text, id});
            v.eos_id = id;
        }
    }
    const std::string merges_data = read_file_bytes(vocab_bpe_path, "GPT-2 vocab.bpe");
    std::vector<std::pair<std::string, std::string>> merges;
    std::istringstream lines(merges_data);
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (first && line.rfind("#version", 0) == 0) { first = false; continue; }
        first = false;
        if (line.empty()) continue;
        merges.push_back(split_merge_line(line, "GPT-2 vocab.bpe '" + vocab_bpe_path + "'"));
    }
    fill_from_printable(v, texts, merges, special_ids);
    v.split_patterns = {kSplitR50k};
    v.whole_word_first = false;  // GPT-2's encoder.py merges every word from its bytes
    return ByteLevelBpe(std::move(v));
}

}  // namespace glass
