/// \file
/// \brief glass/formats/gguf_export.hpp — writing a model as a GGUF file llama.cpp loads, so that
/// llama.cpp can run the very weights glass runs (scripts/llama-cpp-compare).
/// ```text
/// In:  a glass::Model (llama2.c's layout), a tensor type (f32, f16, q8_0, q4_0) and a path.
/// Out: a GGUF v3 file (layout in gguf.hpp): metadata for llama.cpp's "llama" architecture and a
///      placeholder SentencePiece vocabulary (<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
///      then "▁t259", ...: speed does not depend on it, and token ids go in and out as they are),
///      then the tensors, each at a multiple of 32 bytes.
///
/// ggml names a matrix W [out, in] by ne = {in, out}: rows of `in` numbers, quantized along the row.
///   q8_0 block (34 bytes): fp16 d, int8 q[32]                                    (quantize.hpp's)
///   q4_0 block (18 bytes): fp16 d, byte j = (q_j + 8) | (q_{j+16} + 8) << 4, j < 16
///                          (llama.cpp's nibble order: the block's first half in the low nibbles)
/// The integers and scales are quantize.hpp's, so llama.cpp multiplies exactly the weights
/// glass's q8 / q4 multiply. Matrices need `in` to be a multiple of 32 (llama.cpp's rule for
/// these types). Norm gains stay f32; the embedding takes the chosen type, as llama.cpp's own
/// pure q4_0 / q8_0 files do. llama.cpp's "llama" RoPE rotates adjacent pairs, as llama2.c does,
/// so no weight is permuted.
/// ```
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/half.hpp"
#include "glass/quantize.hpp"

namespace glass {

enum class GgufTensorType : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8 };  // ggml's type ids

/// One row of W (`cols` floats, a multiple of 32) in ggml's q8_0 / q4_0 blocks, from quantize().
inline std::vector<std::uint8_t> ggml_quantized_rows(const float* w, int rows, int cols, QuantFormat f) {
    if (cols % kQuantBlock != 0) fail("GGUF export: rows of ", cols, " numbers; ggml's q8_0/q4_0 need a multiple of 32");
    const QuantizedMatrix q = quantize(w, rows, cols, f);
    std::vector<std::uint8_t> out;
    out.reserve(static_cast<std::size_t>(q.bytes()));
    for (int r = 0; r < rows; ++r)
        for (int b = 0; b < q.blocks(); ++b) {
            const std::uint16_t d = q.scales[static_cast<std::size_t>(r) * q.blocks() + b];
            out.push_back(static_cast<std::uint8_t>(d & 0xFF));
            out.push_back(static_cast<std::uint8_t>(d >> 8));
            const int k0 = b * kQuantBlock;
            if (f == QuantFormat::q8_0) {
                for (int j = 0; j < kQuantBlock; ++j) out.push_back(static_cast<std::uint8_t>(q.q(r, k0 + j)));
            } else {
                for (int j = 0; j < kQuantBlock / 2; ++j)
                    out.push_back(static_cast<std::uint8_t>((q.q(r, k0 + j) + 8) | (q.q(r, k0 + j + 16) + 8) << 4));
            }
        }
    return out;
}

namespace detail {

// Little-endian GGUF pieces into a byte vector (the metadata and tensor table are small);
// `keys` counts the metadata entries written.
struct GgufBytes {
    std::vector<char> b;
    std::uint64_t keys = 0;
    template <typename T>
    void put(T v) {
        const char* p = reinterpret_cast<const char*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
    }
    void str(const std::string& s) {
        put<std::uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
    }
    void key(const std::string& k, std::uint32_t type) { str(k); put(type); ++keys; }
    void key_u32(const std::string& k, std::uint32_t v) { key(k, 4); put(v); }
    void key_f32(const std::string& k, float v) { key(k, 6); put(v); }
    void key_str(const std::string& k, const std::string& v) { key(k, 8); str(v); }
    void key_array(const std::string& k, std::uint32_t element_type, std::uint64_t n) { key(k, 9); put(element_type); put(n); }
};

}  // namespace detail

/// Writes `model` to `path` as GGUF with every matrix in `type` (norm gains in f32).
inline void write_gguf(const Model& model, GgufTensorType type, const std::string& path) {
    const ModelConfig& c = model.config;
    require_llama2_architecture(c, "GGUF export");
    const std::int64_t d = c.dim, kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
    if (V < 259) fail("GGUF export: the placeholder vocabulary needs at least 259 tokens, the model has ", V);

    struct Tensor {
        std::string name;
        const float* data;
        std::int64_t rows, cols;  // W [rows = out, cols = in]; a vector has rows = 1
        bool matrix;
    };
    std::vector<Tensor> tensors = {{"token_embd.weight", model.token_embedding, V, d, true}};
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& w = model.layers[static_cast<std::size_t>(l)];
        const std::string p = "blk." + std::to_string(l) + ".";
        tensors.push_back({p + "attn_norm.weight", w.rms_att.data(), 1, d, false});
        tensors.push_back({p + "attn_q.weight", w.wq.data(), d, d, true});
        tensors.push_back({p + "attn_k.weight", w.wk.data(), kv, d, true});
        tensors.push_back({p + "attn_v.weight", w.wv.data(), kv, d, true});
        tensors.push_back({p + "attn_output.weight", w.wo.data(), d, d, true});
        tensors.push_back({p + "ffn_norm.weight", w.rms_ffn.data(), 1, d, false});
        tensors.push_back({p + "ffn_gate.weight", w.w1.data(), h, d, true});
        tensors.push_back({p + "ffn_down.weight", w.w2.data(), d, h, true});
        tensors.push_back({p + "ffn_up.weight", w.w3.data(), h, d, true});
    }
    tensors.push_back({"output_norm.weight", model.rms_final, 1, d, false});
    tensors.push_back({"output.weight", model.classifier, V, d, true});

    auto tensor_type = [&](const Tensor& t) { return t.matrix ? type : GgufTensorType::f32; };
    for (const Tensor& t : tensors)  // before a byte is written
        if ((tensor_type(t) == GgufTensorType::q8_0 || tensor_type(t) == GgufTensorType::q4_0) && t.cols % kQuantBlock != 0)
            fail("GGUF export: ", t.name, " has rows of ", t.cols, " numbers; ggml's q8_0/q4_0 need a multiple of 32");
    auto tensor_bytes = [&](const Tensor& t) -> std::int64_t {
        const std::int64_t n = t.rows * t.cols;
        switch (tensor_type(t)) {
            case GgufTensorType::f32: return n * 4;
            case GgufTensorType::f16: return n * 2;
            case GgufTensorType::q8_0: return n / kQuantBlock * quant_block_bytes(QuantFormat::q8_0);
            case GgufTensorType::q4_0: return n / kQuantBlock * quant_block_bytes(QuantFormat::q4_0);
        }
        return 0;
    };
    auto padded = [](std::int64_t n) { return (n + 31) / 32 * 32; };

    detail::GgufBytes head;
    head.key_str("general.architecture", "llama");
    head.key_str("general.name", "glass export");
    head.key_u32("llama.context_length", static_cast<std::uint32_t>(c.seq_len));
    head.key_u32("llama.embedding_length", static_cast<std::uint32_t>(d));
    head.key_u32("llama.block_count", static_cast<std::uint32_t>(c.n_layers));
    head.key_u32("llama.feed_forward_length", static_cast<std::uint32_t>(h));
    head.key_u32("llama.rope.dimension_count", static_cast<std::uint32_t>(c.head_dim));
    head.key_u32("llama.attention.head_count", static_cast<std::uint32_t>(c.n_heads));
    head.key_u32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
    head.key_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
    head.key_f32("llama.rope.freq_base", c.rope_theta);
    head.key_str("tokenizer.ggml.model", "llama");
    head.key_array("tokenizer.ggml.tokens", 8, static_cast<std::uint64_t>(V));
    for (std::int64_t i = 0; i < V; ++i) {
        char byte[8];
        std::snprintf(byte, sizeof byte, "<0x%02X>", static_cast<unsigned>(i - 3) & 0xFF);
        head.str(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : i < 259 ? byte : "\xE2\x96\x81t" + std::to_string(i));
    }
    head.key_array("tokenizer.ggml.scores", 6, static_cast<std::uint64_t>(V));
    for (std::int64_t i = 0; i < V; ++i) head.put<float>(i < 259 ? 0.0f : -static_cast<float>(i));
    head.key_array("tokenizer.ggml.token_type", 5, static_cast<std::uint64_t>(V));  // 1 normal, 2 unknown, 3 control, 6 byte
    for (std::int64_t i = 0; i < V; ++i) head.put<std::int32_t>(i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
    head.key_u32("tokenizer.ggml.bos_token_id", 1);
    head.key_u32("tokenizer.ggml.eos_token_id", 2);

    // Magic, version, tensor count, metadata count; the metadata; the tensor table.
    detail::GgufBytes file;
    file.b = {'G', 'G', 'U', 'F'};
    file.put<std::uint32_t>(3);
    file.put<std::uint64_t>(tensors.size());
    file.put<std::uint64_t>(head.keys);
    file.b.insert(file.b.end(), head.b.begin(), head.b.end());
    std::int64_t offset = 0;  // of each tensor's data, from the start of the data section
    for (const Tensor& t : tensors) {
        file.str(t.name);
        file.put<std::uint32_t>(t.matrix ? 2 : 1);
        file.put<std::uint64_t>(static_cast<std::uint64_t>(t.cols));  // ne[0]: numbers per row
        if (t.matrix) file.put<std::uint64_t>(static_cast<std::uint64_t>(t.rows));
        file.put<std::uint32_t>(static_cast<std::uint32_t>(tensor_type(t)));
        file.put<std::uint64_t>(static_cast<std::uint64_t>(offset));
        offset = padded(offset + tensor_bytes(t));
    }
    file.b.resize(static_cast<std::size_t>(padded(static_cast<std::int64_t>(file.b.size()))), 0);

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("GGUF export: cannot write '", path, "'");
    out.write(file.b.data(), static_cast<std::streamsize>(file.b.size()));
    for (const Tensor& t : tensors) {
        std::vector<std::uint8_t> bytes;
        if (tensor_type(t) == GgufTensorType::f32) {
            bytes.resize(static_cast<std::size_t>(t.rows * t.cols) * 4);
            std::memcpy(bytes.data(), t.data, bytes.size());
        } else if (tensor_type(t) == GgufTensorType::f16) {  // IEEE half, round to nearest (half.hpp)
            bytes.resize(static_cast<std::size_t>(t.rows * t.cols) * 2);
            for (std::int64_t i = 0; i < t.rows * t.cols; ++i) {
                const std::uint16_t h = fp32_to_fp16(t.data[i]);
                std::memcpy(bytes.data() + 2 * i, &h, 2);
            }
        } else {
            bytes = ggml_quantized_rows(t.data, static_cast<int>(t.rows), static_cast<int>(t.cols),
                                        type == GgufTensorType::q8_0 ? QuantFormat::q8_0 : QuantFormat::q4_0);
        }
        bytes.resize(static_cast<std::size_t>(padded(static_cast<std::int64_t>(bytes.size()))), 0);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    if (!out) fail("GGUF export: writing '", path, "' failed");
}

}  // namespace glass
