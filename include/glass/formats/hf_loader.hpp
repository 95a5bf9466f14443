/// \file
/// \brief glass/formats/hf_loader.hpp — reading a Hugging Face tokenizer.json (BPE models).
/// ```text
/// In:  tokenizer.json (and, if present, tokenizer_config.json beside it, for BOS/EOS).
/// Out: a Tokenizer: ByteLevelBpe for byte-level files (GPT-2, Llama 3, Qwen2/3), SentencePieceBpe
///      for SentencePiece-style files ("▁" for spaces, <0xNN> byte fallback: Llama 2, TinyLlama).
///
/// What glass reads from the file, and what it refuses (a clear error, never a silent guess):
///   model        type "BPE" only (WordPiece/Unigram/WordLevel: unsupported); vocab, merges (as
///                "a b" strings or ["a", "b"] pairs), ignore_merges, byte_fallback.
///   normalizer   null, NFC, or (SentencePiece style) Prepend("▁") + Replace(" ", "▁").
///   pre_tokenizer  ByteLevel (use_regex: GPT-2's pattern), Split(Regex, "Isolated"), Metaspace,
///                a Sequence of these.
///   added_tokens matched in the text by encode_with_specials (Hugging Face's encode), before
///                normalization. lstrip/rstrip/single_word are not supported (error).
/// ```
#pragma once

#include <cctype>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/tokenize/sentencepiece_bpe.hpp"
#include "glass/formats/json_input.hpp"
#include "glass/formats/tiktoken_loader.hpp"

namespace glass {

namespace hf_detail {

using nlohmann::json;

// A list of the objects in a "Sequence" (or the one object itself; none for null).
inline std::vector<json> steps_of(const json& j, const char* list_key) {
    std::vector<json> out;
    if (j.is_null()) return out;
    if (j.value("type", "") == "Sequence") {
        for (const json& k : j.at(list_key)) out.push_back(k);
    } else {
        out.push_back(j);
    }
    return out;
}

// "a b" or ["a", "b"].
inline std::pair<std::string, std::string> merge_of(const json& m, const std::string& where) {
    if (m.is_string()) return split_merge_line(m.get<std::string>(), where);
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        return {m[0].get<std::string>(), m[1].get<std::string>()};
    fail(where, ": merge ", describe_json(m), " is neither \"a b\" nor [\"a\", \"b\"]");
}

// A pattern that matches `literal` exactly: every ASCII character that is not a letter or digit
// gets a backslash (in PCRE2 a backslash before such a character always means that character),
// so nothing in the text — "\\E", "(", "|" — can end the quoting or become regex syntax.
inline std::string regex_for_literal(const std::string& literal) {
    std::string pattern;
    for (char c : literal) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) pattern += '\\';
        pattern += c;
    }
    return pattern;
}

// The content of "bos_token"/"eos_token" in tokenizer_config.json: a string or {"content": ...}.
inline std::string config_token(const json& config, const char* key) {
    if (!config.is_object() || !config.contains(key)) return "";
    const json& t = config[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
    return "";
}

}  // namespace hf_detail

inline std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
    using nlohmann::json;
    using namespace hf_detail;
    const std::string where = "tokenizer.json '" + path + "'";
    const json j = parse_untrusted_json(read_file_bytes(path, "tokenizer.json"), where);
    try {
        if (!j.is_object() || !j.contains("model")) fail(where, " has no \"model\" object");
        const json& model = j["model"];
        const std::string type = model.value("type", model.contains("merges") ? "BPE" : "?");
        if (type != "BPE") fail(where, ": model type '", type, "' is not supported (only BPE)");

        // Vocabulary: text -> id, then by id. Ids number the vocabulary and the added tokens
        // together, so none can exceed their count: the largest possible id is known before any
        // id sizes a table.
        const json& vocab = model.at("vocab");
        if (!vocab.is_object()) fail(where, ": model.vocab is ", describe_json(vocab), ", not an object of token -> id");
        const json no_added = json::array();
        const json& added = j.contains("added_tokens") ? j["added_tokens"] : no_added;
        if (!added.is_array()) fail(where, ": added_tokens is ", describe_json(added), ", not an array");
        const std::int64_t id_limit = static_cast<std::int64_t>(vocab.size() + added.size());
        std::vector<std::string> texts;
        for (const auto& [text, id_json] : vocab.items()) {
            const int id = json_token_id(id_json, id_limit, where, "token '" + text.substr(0, 40) + "'");
            if (static_cast<size_t>(id) >= texts.size()) texts.resize(static_cast<size_t>(id) + 1);
            texts[id] = text;
        }
        std::vector<std::pair<std::string, std::string>> merges;
        for (const json& m : model.at("merges")) merges.push_back(merge_of(m, where));

        std::vector<SpecialToken> specials;
        std::vector<int> special_ids;
        for (const json& a : added) {
            const std::string content = a.at("content").get<std::string>();
            if (a.value("single_word", false))
                fail(where, ": added token '", content, "' uses single_word (not supported)");
            const int id = json_token_id(a.at("id"), id_limit, where, "added token '" + content.substr(0, 40) + "'");
            specials.push_back({content, id, a.value("lstrip", false), a.value("rstrip", false)});
            special_ids.push_back(id);
        }
        // BOS/EOS: tokenizer_config.json beside the file names them, if it is there.
        json config;
        const size_t slash = path.find_last_of('/');
        const std::string config_path =
            (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json";
        if (std::ifstream(config_path).good()) {
            config = parse_untrusted_json(read_file_bytes(config_path, "tokenizer_config.json"),
                                          "tokenizer_config.json '" + config_path + "' beside " + where);
        }
        std::unordered_map<std::string, int> text_to_id;
        for (size_t id = 0; id < texts.size(); ++id)
            if (!texts[id].empty()) text_to_id.emplace(texts[id], static_cast<int>(id));
        for (const SpecialToken& s : specials) text_to_id[s.text] = s.id;  // added tokens win
        const auto id_of = [&](const std::string& content) {
            auto it = text_to_id.find(content);
            return it == text_to_id.end() ? -1 : it->second;
        };
        int bos = id_of(config_token(config, "bos_token"));
        // Whether a prompt starts with BOS: tokenizer_config.json's add_bos_token (Qwen: false).
        const bool add_bos = !(config.is_object() && config.contains("add_bos_token") &&
                               config["add_bos_token"].is_boolean() && !config["add_bos_token"].get<bool>());
        int eos = id_of(config_token(config, "eos_token"));
        if (eos < 0) eos = id_of("<|endoftext|>");

        // Which family: SentencePiece style (▁, byte fallback) or byte-level.
        bool byte_level = false, metaspace = false, nfc = false, prepend_space_mark = false;
        std::vector<std::string> patterns;
        for (const json& p : steps_of(j.value("pre_tokenizer", json()), "pretokenizers")) {
            const std::string t = p.value("type", "");
            if (t == "ByteLevel") {
                byte_level = true;
                if (p.value("add_prefix_space", false))
                    fail(where, ": ByteLevel add_prefix_space=true is not supported");
                if (p.value("use_regex", true)) patterns.push_back(kSplitR50k);
            } else if (t == "Split") {
                if (p.value("behavior", "") != "Isolated" || p.value("invert", false))
                    fail(where, ": Split with behavior '", p.value("behavior", ""), "' is not supported (only Isolated)");
                const json& pat = p.at("pattern");
                if (pat.contains("Regex")) patterns.push_back(pat["Regex"].get<std::string>());
                else patterns.push_back(regex_for_literal(pat.at("String").get<std::string>()));
            } else if (t == "Metaspace") {
                if (p.value("split", true))  // older files: always split
                    fail(where, ": Metaspace with split=true is not supported");
                metaspace = true;
                prepend_space_mark = p.value("prepend_scheme", "always") != "never";
            } else {
                fail(where, ": pre_tokenizer '", t, "' is not supported");
            }
        }
        bool replaces_space = false;
        for (const json& n : steps_of(j.value("normalizer", json()), "normalizers")) {
            const std::string t = n.value("type", "");
            if (t == "NFC") nfc = true;
            else if (t == "Prepend" && n.value("prepend", "") == "\xE2\x96\x81") prepend_space_mark = true;
            else if (t == "Replace" && n.at("pattern").value("String", "") == " " && n.value("content", "") == "\xE2\x96\x81")
                replaces_space = true;
            else fail(where, ": normalizer '", t, "' is not supported");
        }

        if (byte_level) {
            if (metaspace || replaces_space) fail(where, ": mixes ByteLevel with Metaspace (not supported)");
            ByteLevelVocab v;
            v.name = path;
            fill_from_printable(v, texts, merges, special_ids);
            v.split_patterns = patterns;
            v.specials = specials;
            v.whole_word_first = model.value("ignore_merges", false);
            v.nfc = nfc;
            v.bos_id = bos;
            v.eos_id = eos;
            v.add_bos = add_bos;
            return std::make_unique<ByteLevelBpe>(std::move(v));
        }
        if (metaspace || replaces_space || model.value("byte_fallback", false)) {
            if (nfc) fail(where, ": NFC with SentencePiece-style BPE is not supported");
            SentencePieceVocab v;
            v.name = path;
            v.pieces = texts;
            // Merges come from the list; an empty list means nothing merges (NaN scores: no
            // merge is derived from them).
            v.scores.assign(texts.size(), std::numeric_limits<float>::quiet_NaN());
            for (const auto& [l, r] : merges) {
                const int li = id_of(l), ri = id_of(r);
                if (li < 0 || ri < 0) fail(where, ": merge '", l, " ", r, "' names a token that is not in the vocabulary");
                v.merges.emplace_back(li, ri);
            }
            v.specials = specials;
            v.space_mark = "\xE2\x96\x81";
            v.add_dummy_prefix = prepend_space_mark;
            v.byte_fallback = model.value("byte_fallback", false);
            const json unk = model.value("unk_token", json());
            v.unk_id = unk.is_string() ? id_of(unk.get<std::string>()) : -1;
            v.bos_id = bos;
            v.eos_id = eos;
            v.add_bos = add_bos;
            return std::make_unique<SentencePieceBpe>(std::move(v));
        }
        fail(where, ": neither a ByteLevel nor a SentencePiece-style (Metaspace / ▁ / byte_fallback) BPE");
    } catch (const json::exception& e) {
        fail(where, ": unexpected structure: ", e.what());
    }
}

}  // namespace glass
