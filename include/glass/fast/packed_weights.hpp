/// \file
/// \brief glass/fast/packed_weights.hpp — weights reordered (and optionally shrunk) once, for speed.
/// ```text
/// In:  one fp32 weight matrix W [rows = out, cols = in] as stored in the checkpoint.
/// Out: the same numbers in "panels" of 32 rows, in fp32, fp16, bf16, Q8_0 (int8) or Q4_0 (int4),
///      or a GGUF's own Q4_K / Q5_K / Q6_K blocks (packed_kquants.hpp: q4_k, q5_k, q6_k).
///
/// Panel layout. Rows r = 32p .. 32p+31 form panel p, stored column by column:
///     panel p = [cols][32]      element (r, k) at  p·cols·32 + k·32 + (r mod 32)
/// so the 32 weights that multiply the same input x[k] sit side by side (128 bytes in fp32 =
/// two 512-bit registers). Both products then stream memory front to back:
///   decode  (matrix–vector): for each k, y[32 rows] += x[k] · panel[k][0..32]      (fused multiply-add)
///   prefill (matrix–matrix): the same, for up to 12 tokens at once, each loaded panel
///                            row reused 12 times from registers (see kernels_avx512.hpp).
/// The last panel is padded with zero rows when rows is not a multiple of 32.
///
/// Why fewer bytes means faster decode: each decoded token reads every weight once, and does
/// only 2 FLOPs per weight; at ~34 GB/s the 4.4 GB fp32 1.1B model caps decode near 7.7 tokens/s.
/// fp16/bf16 halve the bytes (cap ×2); Q8_0 stores 1.0625 bytes/weight (cap ×3.8), Q4_0
/// 0.5625 (cap ×7.1).
///   fp16, bf16: glass/half.hpp.
///   Q8_0, Q4_0: glass/quantize.hpp's blocks (32 consecutive inputs of one row share one fp16
///        scale; int8 or 4-bit integers); pack_matrix quantizes with quantize(), so the fast
///        path holds exactly the integers and scales of the reference.
/// Arithmetic is fp32: weights are widened to fp32 in registers, activations stay fp32 — unless
/// FastOptions::int8_activations, where decode multiplies Q8_0/Q4_0 integers by int8 activations
/// (Int8Vector below) with integer dot products (kernels_avx512.hpp's matvec_int8).
///
/// Q8_0 panel layout: per block of 32 inputs, 64 bytes of scales (fp16[32], one per row) then
/// 1024 bytes of int8 in 8 groups of 4 inputs, each group [32 rows][4 inputs] (q8_offset): one
/// contiguous 1088-byte stream per panel. Four inputs of one row side by side are what an
/// integer dot-product instruction (vpdpbusd) adds into one 32-bit lane; 16 rows fill a register.
/// Q4_0 the same with 512 bytes of integers, 8 groups of [16 bytes][4 inputs] (q4_offset): the
/// byte of row i and input k holds row i in its low 4 bits and row i + 16 in its high 4 bits,
/// each as q + 8 (576 bytes a block).
///
/// From a file's own blocks (pack_stored_matrix): a GGUF Q8_0 or Q4_0 matrix packed as q8 or q4
/// keeps its integers and fp16 scales bit for bit, only moved into the panel layout; F16 and
/// BF16 into fp16 and bf16 are copies too, and Q4_K/Q5_K/Q6_K into q4_k/q5_k/q6_k. Any other pairing widens 32 rows at a time to fp32
/// and packs those (quantizing when the panel type asks for it), so no whole fp32 copy exists.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/fast/packed_kquants.hpp"
#include "glass/formats/gguf_model.hpp"
#include "glass/half.hpp"
#include "glass/quantize.hpp"

namespace glass::fast {

/// The panel types. q4_k, q5_k and q6_k hold a GGUF file's k-quant blocks (packed_kquants.hpp).
/// `stored` is not a panel type but a choice: each matrix in the panel type of its own file
/// type (weight_type_of_stored), so a Q4_K_M file keeps its Q4_K, Q6_K and Q8_0 matrices as
/// they are; a matrix with no file bytes (a llama2.c checkpoint) is fp32.
enum class WeightType { fp32, fp16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, stored };

inline const char* to_string(WeightType t) {
    switch (t) {
        case WeightType::fp32: return "fp32";
        case WeightType::fp16: return "fp16";
        case WeightType::bf16: return "bf16";
        case WeightType::q8_0: return "q8";
        case WeightType::q4_0: return "q4";
        case WeightType::q4_k: return "q4_k";
        case WeightType::q5_k: return "q5_k";
        case WeightType::q6_k: return "q6_k";
        case WeightType::stored: return "stored";
    }
    return "?";
}
inline WeightType weight_type_from_string(const std::string& s) {
    if (s == "fp32") return WeightType::fp32;
    if (s == "fp16") return WeightType::fp16;
    if (s == "bf16") return WeightType::bf16;
    if (s == "q8" || s == "q8_0") return WeightType::q8_0;
    if (s == "q4" || s == "q4_0") return WeightType::q4_0;
    if (s == "q4_k") return WeightType::q4_k;
    if (s == "q5_k") return WeightType::q5_k;
    if (s == "q6_k") return WeightType::q6_k;
    if (s == "stored") return WeightType::stored;
    fail("unknown weight precision '", s, "' (fp32, fp16, bf16, q8, q4, q4_k, q5_k, q6_k, stored)");
}

/// q8_0 / q4_0 are quantize.hpp's formats (QuantFormat) in the panel layout.
inline bool is_quantized(WeightType t) { return t == WeightType::q8_0 || t == WeightType::q4_0; }
/// q4_k / q5_k / q6_k: a file's k-quant super-blocks in panels (packed_kquants.hpp).
inline bool is_k_quant(WeightType t) { return t == WeightType::q4_k || t == WeightType::q5_k || t == WeightType::q6_k; }
/// The types whose integers matvec_int8 multiplies by int8 activations.
inline bool has_integer_weights(WeightType t) { return is_quantized(t) || is_k_quant(t); }
inline const KQuantLayout& k_layout(WeightType t) {
    if (!is_k_quant(t)) fail("weight precision ", to_string(t), " is not a k-quant");
    return t == WeightType::q4_k ? kQ4KLayout : t == WeightType::q5_k ? kQ5KLayout : kQ6KLayout;
}
inline GgmlType ggml_type_of(WeightType t) {
    return t == WeightType::q4_k ? GgmlType::q4_k : t == WeightType::q5_k ? GgmlType::q5_k : GgmlType::q6_k;
}
inline QuantFormat quant_format_of(WeightType t) {
    if (!is_quantized(t)) fail("weight precision ", to_string(t), " is not a quantization format");
    return t == WeightType::q8_0 ? QuantFormat::q8_0 : QuantFormat::q4_0;
}

constexpr int kPanel = 32;        // rows per panel = fp32 lanes in two AVX-512 registers
constexpr int kQ8BlockBytes = kPanel * 2 + kQuantBlock * kPanel;     // scales + int8 values = 1088
constexpr int kQ4BlockBytes = kPanel * 2 + kQuantBlock * kPanel / 2;  // scales + 4-bit values = 576

// Where input kk (< 32) of a block's panel row `lane` (< 32) sits among the block's integers
// (after its 64 bytes of scales), inputs in groups of 4.
inline int q8_offset(int kk, int lane) { return (kk / 4) * 128 + lane * 4 + kk % 4; }  // [8][32 rows][4]
inline int q4_offset(int kk, int lane) { return (kk / 4) * 64 + (lane % 16) * 4 + kk % 4; }  // [8][16][4], lane ≥ 16: high half

// A vector in int8 blocks of 32 (quantize.hpp's quantize_activations) and each block's Σ q,
// the input of the integer matrix–vector product.
struct Int8Vector {
    const std::int8_t* q;       // [blocks · 32]
    const float* scales;        // [blocks]
    const std::int32_t* sums;   // [blocks]  Σ of the block's 32 integers
};

// fp16/bf16 conversions: glass/half.hpp (one definition for the reference, the fast path and
// the CUDA emulator).
using glass::bf16_to_fp32;
using glass::fp16_to_fp32;
using glass::fp32_to_bf16;
using glass::fp32_to_fp16;

// One packed matrix: a view into the session's weight arena.
struct PackedMatrix {
    int rows = 0, cols = 0;
    WeightType type = WeightType::fp32;
    const unsigned char* data = nullptr;

    int panels() const { return (rows + kPanel - 1) / kPanel; }
    int q8_blocks() const { return (cols + kQuantBlock - 1) / kQuantBlock; }
    // Bytes of one panel; panels follow each other.
    std::int64_t panel_bytes() const {
        switch (type) {
            case WeightType::fp32: return std::int64_t{cols} * kPanel * 4;
            case WeightType::fp16:
            case WeightType::bf16: return std::int64_t{cols} * kPanel * 2;
            case WeightType::q8_0: return std::int64_t{q8_blocks()} * kQ8BlockBytes;
            case WeightType::q4_0: return std::int64_t{q8_blocks()} * kQ4BlockBytes;
            case WeightType::q4_k:
            case WeightType::q5_k:
            case WeightType::q6_k: return std::int64_t{super_blocks()} * k_layout(type).super_bytes();
            case WeightType::stored: break;
        }
        return 0;
    }
    int super_blocks() const { return cols / kSuperBlock; }  // k-quants: cols is a multiple of 256
    // k-quants: super-block s of panel p.
    const std::uint8_t* super_block(int p, int s) const { return panel(p) + std::int64_t{s} * k_layout(type).super_bytes(); }
    std::int64_t bytes() const { return panel_bytes() * panels(); }
    const unsigned char* panel(int p) const { return data + panel_bytes() * p; }

    // Q8_0 / Q4_0: the integer q of weight (r, k) and the scale of its block.
    int q(int r, int k) const {
        const unsigned char* ints = panel(r / kPanel) + std::int64_t{k / kQuantBlock} * block_bytes() + kPanel * 2;
        const int lane = r % kPanel, kk = k % kQuantBlock;
        if (type == WeightType::q8_0) return static_cast<std::int8_t>(ints[q8_offset(kk, lane)]);
        const unsigned char byte = ints[q4_offset(kk, lane)];
        return (lane < 16 ? byte & 0x0F : byte >> 4) - 8;
    }
    float scale(int r, int block) const {
        std::uint16_t h;
        std::memcpy(&h, panel(r / kPanel) + std::int64_t{block} * block_bytes() + (r % kPanel) * 2, 2);
        return fp16_to_fp32(h);
    }
    int block_bytes() const { return type == WeightType::q8_0 ? kQ8BlockBytes : kQ4BlockBytes; }

    // Weight (r, k) as the kernels see it: the plain, slow definition of the layout.
    float at(int r, int k) const {
        const unsigned char* base = panel(r / kPanel);
        const int lane = r % kPanel;
        switch (type) {
            case WeightType::fp32: {
                float f;
                std::memcpy(&f, base + (std::int64_t{k} * kPanel + lane) * 4, 4);
                return f;
            }
            case WeightType::fp16:
            case WeightType::bf16: {
                std::uint16_t h;
                std::memcpy(&h, base + (std::int64_t{k} * kPanel + lane) * 2, 2);
                return type == WeightType::fp16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            case WeightType::q8_0:
            case WeightType::q4_0: return scale(r, k / kQuantBlock) * static_cast<float>(q(r, k));
            case WeightType::q4_k:
            case WeightType::q5_k:
            case WeightType::q6_k: return kq_weight(k_layout(type), super_block(r / kPanel, k / kSuperBlock), lane, k % kSuperBlock);
            case WeightType::stored: break;
        }
        return 0;
    }
};

// Prefill products walk a panel in chunks of inputs [k0, k0 + kc). The fp32 weights the chunk
// after that one reads (this panel's next inputs, or panel p + 1's first if p + 1 < p1), for the
// kernels to ask into L2 while the current chunk computes; none for other types (unpacked to
// fp32 first) or after the last chunk.
struct NextChunk {
    const char* at = nullptr;
    long bytes = 0;
};
inline NextChunk next_chunk(const PackedMatrix& w, int p, int p1, int k0, int kc, int chunk_inputs) {
    if (w.type != WeightType::fp32 || (k0 + kc >= w.cols && p + 1 >= p1)) return {};
    const bool same_panel = k0 + kc < w.cols;
    const int np = same_panel ? p : p + 1, nk = same_panel ? k0 + kc : 0;
    return {reinterpret_cast<const char*>(w.panel(np)) + std::int64_t{nk} * kPanel * 4,
            long{std::min(chunk_inputs, w.cols - nk)} * kPanel * 4};
}

// A [rows, cols] matrix can be packed as `type`: k-quant rows are whole super-blocks, and
// `stored` names a choice made per matrix (panel_type_of), not a layout.
inline void check_packable(int cols, WeightType type) {
    if (type == WeightType::stored) fail("weight precision 'stored' is chosen per matrix (panel_type_of), not packed as such");
    if (is_k_quant(type) && cols % kSuperBlock != 0)
        fail(to_string(type), " panels need rows of whole ", kSuperBlock, "-input super-blocks; this matrix has ", cols,
             " inputs (q8 or q4 take any width)");
}

// Row r of a k-quant matrix, given as a file stores it (`g`'s super-blocks), into its lane of
// m's panel.
inline void pack_k_row(const PackedMatrix& m, int r, GgmlType g, const std::uint8_t* row) {
    const KQuantLayout& L = k_layout(m.type);
    const int block_bytes = ggml_block_of(g).bytes;
    for (int s = 0; s < m.super_blocks(); ++s)
        put_k_integers(L, read_k_integers(g, row + std::int64_t{s} * block_bytes), r % kPanel,
                       const_cast<std::uint8_t*>(m.super_block(r / kPanel, s)));
}

// Bytes pack_matrix will write for a [rows, cols] matrix of this type.
inline std::int64_t packed_bytes(int rows, int cols, WeightType type) {
    check_packable(cols, type);
    PackedMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    return m.bytes();
}

// Writes W [rows, cols] (row-major fp32) into `dest` (packed_bytes() bytes, zeroed beforehand)
// and returns the view. Runs once per matrix when a session is built.
inline PackedMatrix pack_matrix(const float* w, int rows, int cols, WeightType type,
                                unsigned char* dest) {
    check_packable(cols, type);
    PackedMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    m.data = dest;
    if (is_k_quant(type)) {
        // Each row quantized to the file format (ggml_quants.hpp's writers), then placed as a
        // file's row would be: the fast path holds what a GGUF of this type would hold.
        const GgmlType g = ggml_type_of(type);
        std::vector<char> row(static_cast<size_t>(ggml_bytes(static_cast<std::uint32_t>(g), cols)));
        for (int r = 0; r < rows; ++r) {
            ggml_from_float(static_cast<std::uint32_t>(g), w + std::int64_t{r} * cols, cols, row.data());
            pack_k_row(m, r, g, reinterpret_cast<const std::uint8_t*>(row.data()));
        }
        return m;
    }
    if (is_quantized(type)) {
        // The reference's integers and scales (quantize.hpp), copied into the panel layout.
        const bool q8 = type == WeightType::q8_0;
        const QuantizedMatrix qm = quantize(w, rows, cols, quant_format_of(type));
        const int block_bytes = m.block_bytes();
        for (int r = 0; r < rows; ++r) {
            unsigned char* base = dest + m.panel_bytes() * (r / kPanel);
            const int lane = r % kPanel;
            for (int b = 0; b < m.q8_blocks(); ++b) {
                unsigned char* block = base + std::int64_t{b} * block_bytes;
                std::memcpy(block + lane * 2, &qm.scales[std::size_t(r) * qm.blocks() + b], 2);
                const int k0 = b * kQuantBlock, k1 = std::min(cols, k0 + kQuantBlock);
                for (int k = k0; k < k1; ++k) {
                    const int q = qm.q(r, k);
                    if (q8)
                        block[kPanel * 2 + q8_offset(k - k0, lane)] = static_cast<unsigned char>(static_cast<std::int8_t>(q));
                    else
                        set_nibble(block[kPanel * 2 + q4_offset(k - k0, lane)], lane >= 16, q);
                }
                if (!q8)  // inputs past the end of the row: q = 0 (stored as 8), like the reference
                    for (int k = k1; k < k0 + kQuantBlock; ++k)
                        set_nibble(block[kPanel * 2 + q4_offset(k - k0, lane)], lane >= 16, 0);
            }
        }
        return m;
    }
    for (int r = 0; r < rows; ++r) {
        unsigned char* base = dest + m.panel_bytes() * (r / kPanel);
        const int lane = r % kPanel;
        const float* row = w + std::int64_t{r} * cols;
        for (int k = 0; k < cols; ++k) {
            const std::int64_t at = std::int64_t{k} * kPanel + lane;
            if (type == WeightType::fp32) {
                std::memcpy(base + at * 4, &row[k], 4);
            } else {
                const std::uint16_t h = type == WeightType::fp16 ? fp32_to_fp16(row[k]) : fp32_to_bf16(row[k]);
                std::memcpy(base + at * 2, &h, 2);
            }
        }
    }
    return m;
}

// The panel type a stored ggml type packs into, bit for bit where one exists (F32 -> fp32, F16 -> fp16,
// BF16 -> bf16, Q8_0 -> q8, Q4_0 -> q4; q8 for the other quantized blocks): the fast path's
// default for a GGUF or folder.
inline WeightType weight_type_of_stored(std::uint32_t ggml_type) {
    switch (static_cast<GgmlType>(ggml_type)) {
        case GgmlType::f32: return WeightType::fp32;
        case GgmlType::f16: return WeightType::fp16;
        case GgmlType::bf16: return WeightType::bf16;
        case GgmlType::q8_0: return WeightType::q8_0;
        case GgmlType::q4_0: return WeightType::q4_0;
        // No panels of their own yet: the legacy and k-quant blocks are widened 32 rows at a
        // time and re-quantized to q8 (≈ 0.4 % of a weight's range added, far under their own
        // 4-6-bit error; --precision fp32 keeps the file's values exactly).
        case GgmlType::q4_k: return WeightType::q4_k;
        case GgmlType::q5_k: return WeightType::q5_k;
        case GgmlType::q6_k: return WeightType::q6_k;
        // No panels of their own yet: the legacy blocks (Q4_1, Q5_0, Q5_1: in a Q4_K_M file, the
        // few matrices whose rows are not whole super-blocks) are widened 32 rows at a time and
        // re-quantized to q8 (≈ 0.4 % of a weight's range added, far under their own 4-5-bit
        // error; --precision fp32 keeps the file's values exactly).
        case GgmlType::q4_1: case GgmlType::q5_0: case GgmlType::q5_1: return WeightType::q8_0;
        default: fail("stored type ", ggml_type_name(ggml_type), " has no fast-path panel type");
    }
}

// The panel type one matrix gets when `asked` is the precision: `asked` itself, or for
// `stored` the type its file bytes map to (fp32 when there are none).
inline WeightType panel_type_of(const StoredMatrix& s, WeightType asked) {
    if (asked != WeightType::stored) return asked;
    return s.bytes == nullptr ? WeightType::fp32 : weight_type_of_stored(s.type);
}

// The fast path's weight type for a model when none is asked for: the panel type of the type its
// file stores the matrices in; `stored` when those differ between matrices (a Q4_K_M file);
// fp32 for a llama2.c checkpoint.
inline WeightType stored_weight_type(const Model& m) {
    if (m.layers.empty() || m.layers[0].stored.w1.bytes == nullptr) return WeightType::fp32;
    const WeightType first = weight_type_of_stored(m.layers[0].stored.w1.type);
    // A file of mixed types (Q4_K_M: Q4_K, Q6_K, maybe Q8_0 or Q5_0): each matrix as stored.
    auto same = [&](const StoredMatrix& s) { return s.bytes == nullptr || weight_type_of_stored(s.type) == first; };
    for (const LayerWeights& l : m.layers)
        for (const StoredMatrix* s : {&l.stored.wq, &l.stored.wk, &l.stored.wv, &l.stored.wo, &l.stored.w1, &l.stored.w2, &l.stored.w3})
            if (!same(*s)) return WeightType::stored;
    return same(m.stored_classifier) ? first : WeightType::stored;
}

// Writes the stored matrix `s` [rows, cols] into `dest` (packed_bytes() bytes, zeroed
// beforehand) as `type`, and returns the view.
inline PackedMatrix pack_stored_matrix(const StoredMatrix& s, int rows, int cols, WeightType type, unsigned char* dest) {
    PackedMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.type = type;
    m.data = dest;
    const std::int64_t row_bytes = ggml_bytes(s.type, cols);
    const auto row = [&](int r) { return reinterpret_cast<const unsigned char*>(s.bytes) + r * row_bytes; };
    const auto stored_is = [&](GgmlType t) { return s.type == static_cast<std::uint32_t>(t); };
    if ((stored_is(GgmlType::f16) && type == WeightType::fp16) || (stored_is(GgmlType::bf16) && type == WeightType::bf16)) {
        for (int r = 0; r < rows; ++r) {  // 16-bit values moved, not converted
            unsigned char* panel = dest + m.panel_bytes() * (r / kPanel) + (r % kPanel) * 2;
            for (int k = 0; k < cols; ++k) std::memcpy(panel + std::int64_t{k} * kPanel * 2, row(r) + 2 * k, 2);
        }
        return m;
    }
    if (stored_is(GgmlType::q8_0) && type == WeightType::q8_0) {
        // A GGUF block [fp16 d][32 int8] -> this row's lane of the panel's block: d among the
        // 32 scales, each 4 inputs beside the other rows' same 4 (q8_offset).
        for (int r = 0; r < rows; ++r)
            for (int b = 0; b < cols / kQuantBlock; ++b) {
                const unsigned char* in = row(r) + b * 34;
                unsigned char* out = dest + m.panel_bytes() * (r / kPanel) + std::int64_t{b} * kQ8BlockBytes;
                std::memcpy(out + (r % kPanel) * 2, in, 2);
                for (int g = 0; g < kQuantBlock / 4; ++g) std::memcpy(out + kPanel * 2 + q8_offset(4 * g, r % kPanel), in + 2 + 4 * g, 4);
            }
        return m;
    }
    if (is_k_quant(type) && s.type == static_cast<std::uint32_t>(ggml_type_of(type))) {
        check_packable(cols, type);
        for (int r = 0; r < rows; ++r) pack_k_row(m, r, ggml_type_of(type), row(r));  // integers moved, not converted
        return m;
    }
    if (stored_is(GgmlType::q4_0) && type == WeightType::q4_0) {
        // A GGUF block [fp16 d][16 bytes: value j in byte j % 16, low nibble for j < 16] of rows
        // `lo` and lo + 16 -> one panel byte per input: row lo's nibble low, row lo + 16's high
        // (q4_offset). Nibbles keep their q + 8 form; a missing row (past `rows`) is q = 0 (8).
        for (int p = 0; p < m.panels(); ++p)
            for (int b = 0; b < cols / kQuantBlock; ++b) {
                unsigned char* out = dest + m.panel_bytes() * p + std::int64_t{b} * kQ4BlockBytes;
                for (int lane = 0; lane < 16; ++lane) {
                    const int lo = p * kPanel + lane, hi = lo + 16;
                    const unsigned char* a = lo < rows ? row(lo) + b * 18 : nullptr;
                    const unsigned char* c = hi < rows ? row(hi) + b * 18 : nullptr;
                    if (a) std::memcpy(out + lane * 2, a, 2);
                    if (c) std::memcpy(out + (lane + 16) * 2, c, 2);
                    for (int j = 0; j < kQuantBlock; ++j) {
                        const auto nibble = [j](const unsigned char* blk) {
                            return blk == nullptr ? 8 : j < 16 ? blk[2 + j] & 0x0F : blk[2 + j - 16] >> 4;
                        };
                        out[kPanel * 2 + q4_offset(j, lane)] = static_cast<unsigned char>(nibble(a) | nibble(c) << 4);
                    }
                }
            }
        return m;
    }
    // Otherwise 32 rows (one panel) at a time: widened to fp32 (exactly as the reference widens
    // them), then packed as pack_matrix packs a whole matrix.
    std::vector<float> panel(static_cast<size_t>(kPanel) * static_cast<size_t>(cols));
    for (int p = 0; p < m.panels(); ++p) {
        const int r0 = p * kPanel, n = std::min(kPanel, rows - r0);
        for (int r = 0; r < n; ++r) ggml_to_float(s.type, s.bytes + (r0 + r) * row_bytes, cols, panel.data() + std::int64_t{r} * cols);
        pack_matrix(panel.data(), n, cols, type, dest + m.panel_bytes() * p);
    }
    return m;
}

}  // namespace glass::fast
