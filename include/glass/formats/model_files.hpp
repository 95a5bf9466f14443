/// \file
/// \brief glass/formats/model_files.hpp — what `-m` may name: a llama2.c checkpoint, a GGUF file
/// or a Hugging Face folder; the model's weights and its own tokenizer from it.
/// ```text
/// In:  a path.
/// Out: a Model (checkpoint.hpp, gguf_model.hpp) and the Tokenizer the model was trained with:
///        GGUF           its tokenizer.ggml.* metadata (gguf_vocab.hpp)
///        folder         its tokenizer.json (+ tokenizer_config.json: hf_loader.hpp)
///        llama2.c .bin  no tokenizer inside: the shipped tok512.bin by default (the caller's)
///      `-t` overrides either: a llama2.c tokenizer .bin, a tokenizer.json or a GGUF vocabulary.
/// The kind is read from the bytes, not the name: a file starting with "GGUF" is GGUF.
/// ```
#pragma once

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/formats/gguf_model.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/formats/hf_model.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/tokenizer.hpp"

namespace glass {

enum class ModelFileKind { llama2c, gguf, hf_folder };

inline const char* to_string(ModelFileKind k) {
    switch (k) {
        case ModelFileKind::llama2c: return "llama2.c checkpoint";
        case ModelFileKind::gguf: return "GGUF";
        case ModelFileKind::hf_folder: return "Hugging Face folder";
    }
    return "?";
}

/// Which kind of model `path` is: a directory is a Hugging Face folder; a file starting with
/// "GGUF" is GGUF; any other file is taken for a llama2.c checkpoint (whose loader checks it).
inline ModelFileKind model_file_kind(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("cannot open model file '", path, "': ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) return ModelFileKind::hf_folder;
    char magic[4] = {};
    std::ifstream in(path, std::ios::binary);
    in.read(magic, 4);
    return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0 ? ModelFileKind::gguf : ModelFileKind::llama2c;
}

/// The model at `path`, whatever its kind. `how`: LoadWeights::as_stored keeps a GGUF's or a
/// folder's F16, BF16 and quantized matrices in that type for the fast path (a llama2.c
/// checkpoint is fp32 anyway).
inline Model load_model(const std::string& path, LoadWeights how = LoadWeights::fp32) {
    switch (model_file_kind(path)) {
        case ModelFileKind::gguf: return load_gguf_model(path, how);
        case ModelFileKind::llama2c: return load_llama2c_checkpoint(path);
        case ModelFileKind::hf_folder: return load_hf_model(path, how);
    }
    fail("model '", path, "': unknown kind");
}

/// A tokenizer file named by `-t`: a tokenizer.json, a GGUF vocabulary, or a llama2.c tokenizer
/// (checked against the model's vocabulary size).
inline std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path, int vocab_size) {
    const auto ends_with = [&](const char* s) {
        const size_t n = std::strlen(s);
        return path.size() >= n && path.compare(path.size() - n, n, s) == 0;
    };
    if (ends_with(".json")) return load_hf_tokenizer(path);
    if (model_file_kind(path) == ModelFileKind::gguf) return load_gguf_tokenizer(path);
    return std::make_unique<Llama2cTokenizer>(Llama2cTokenizer::load(path, vocab_size));
}

/// \brief The tokenizer of the model at `model_path`: `tokenizer_path` when given, else the one
/// the model file carries (GGUF), else `default_tokenizer` (a llama2.c checkpoint has none).
/// Its vocabulary must cover the model's embedding table's rows.
inline std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_path, const Model& model,
                                                       const std::string& tokenizer_path,
                                                       const std::string& default_tokenizer) {
    std::unique_ptr<Tokenizer> tok;
    if (!tokenizer_path.empty()) tok = load_tokenizer_file(tokenizer_path, model.config.vocab_size);
    else if (model_file_kind(model_path) == ModelFileKind::gguf) tok = load_gguf_tokenizer(model_path);
    else if (model_file_kind(model_path) == ModelFileKind::hf_folder) tok = load_hf_tokenizer(model_path + "/tokenizer.json");
    else tok = load_tokenizer_file(default_tokenizer, model.config.vocab_size);
    if (tok->vocab_size() > model.config.vocab_size)
        fail("the tokenizer has ", tok->vocab_size(), " tokens but the model's embedding table only ",
             model.config.vocab_size, " rows");
    tok->add_end_of_generation_ids(model.config.end_of_generation_ids);  // a folder's eos_token_id lists
    for (int id : tok->end_of_generation_ids())
        if (id >= model.config.vocab_size)
            fail("end-of-generation token id ", id, " is outside the model's vocabulary of ", model.config.vocab_size);
    return tok;
}

}  // namespace glass
