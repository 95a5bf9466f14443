// The kernel checks both kernel test programs run: tests/test_fast_kernel_checks.cpp on this
// machine's sets (portable, avx2, avx512) and tests/neon/test_neon.cpp on an AArch64 CPU's
// (portable, neon), cross-compiled and run under qemu-aarch64. Each check takes the set(s) to check and compares
// every kernel with the portable loops (kernels_portable.hpp) or the scalar definitions.
//
// Header only, on doctest and the fast path's headers alone: test_neon.cpp cannot include
// test_support.hpp (glass.hpp brings the tokenizers' PCRE2 and utf8proc, libraries with no AArch64
// build here).
//
// Sizes are odd on purpose (a padded last panel, a partial Q8 block, a partial 256-input chunk,
// uneven token tiles, head_dim and key tails) and small, because qemu runs ~10-30× slower than the
// host.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "glass/fast/kernels.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/fast/token_tiles.hpp"
#include "glass/kv_cache.hpp"
#include "glass/quantize.hpp"
#include "glass/session.hpp"

namespace kernel_checks {

using glass::fast::Kernels;
using glass::fast::WeightType;

// max |a − b| / max |b|: error relative to the scale of the outputs (or logits). Two fp32
// evaluations that sum the same products in another order differ by a few ulps of the largest
// partial sums; 1e-5 (≈ 80 ulps) bounds that comfortably for these sizes, while a real bug (a
// wrong row, a lane of padding, a missing residual, an off-by-one) moves them at the 1e-2 .. 1
// level. (tests/relative_error.hpp's test::relative_error is another measure: an L2 norm.)
inline double relative_error(std::span<const float> a, std::span<const float> b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return diff / scale;
}

// prefill(prompt) then decode(each of `next`) on both sessions; the worst relative_error of `got`
// against `want` over every logits row returned.
inline double worst_error(glass::Session& want, glass::Session& got, const std::vector<int>& prompt,
                          const std::vector<int>& next) {
    auto copy = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
    double worst = relative_error(got.prefill(prompt), copy(want.prefill(prompt)));
    for (int id : next) {
        const std::vector<float> w = copy(want.decode(id));
        worst = std::max(worst, relative_error(got.decode(id), w));
    }
    REQUIRE(got.position() == want.position());
    return worst;
}

inline std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
    glass::fast::RandomFloats rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = rng.next();
    return v;
}

inline constexpr WeightType kAllTypes[] = {WeightType::fp32, WeightType::fp16, WeightType::bf16, WeightType::q8_0,
                                           WeightType::q4_0};
// The k-quant panels (packed_kquants.hpp): rows of whole 256-input super-blocks only, so the
// shipped model (dim 64) cannot take them; their model checks run on GGUF files
// (test_gguf_families.cpp) and on random models of a width they take.
inline constexpr WeightType kKQuantTypes[] = {WeightType::q4_k, WeightType::q5_k, WeightType::q6_k};
// Inputs of the kernel checks' matrices: 300 = 256 + 44 (a partial Q8 block and a partial
// 256-input chunk) for the types of any width; two super-blocks for the k-quants.
inline int check_cols(WeightType type) { return glass::fast::is_k_quant(type) ? 512 : 300; }
inline std::vector<WeightType> every_panel_type() {
    std::vector<WeightType> all(std::begin(kAllTypes), std::end(kAllTypes));
    all.insert(all.end(), std::begin(kKQuantTypes), std::end(kKQuantTypes));
    return all;
}

// Every kernel set this CPU runs (kernels.hpp), portable first.
inline std::vector<std::string> set_names() {
    std::vector<std::string> names;
    for (const auto s : glass::fast::available_kernel_sets()) names.emplace_back(glass::fast::to_string(s));
    return names;
}

// Those besides the portable reference: the ones to check against it (an AVX2 machine: avx2; a
// Zen 4: avx2 and avx512; an AArch64 CPU: neon).
inline std::vector<Kernels> vector_sets() {
    std::vector<Kernels> sets;
    for (const auto s : glass::fast::available_kernel_sets())
        if (s != glass::fast::KernelSet::portable) sets.push_back(glass::fast::kernels_of(s));
    if (sets.empty()) MESSAGE("this CPU runs no vector kernel set: only the portable kernels run");
    return sets;
}

// The tolerance of the fast path's logits for each weight type, as max |logit error| / max |logit|
// against the fp32 reference (test_fast_quantized.cpp checks it; both programs' greedy goldens
// use it to bound how close a golden's top two logits must be for a reduced precision to pick the
// other one). Each weight is rounded independently, so the logits move by about one unit roundoff of
// the format (the errors of many weights partly cancel); we allow 4× that:
//   fp16: 10 stored mantissa bits, unit roundoff 2^-11 ≈ 4.9e-4      -> 2e-3  (measured 4.6e-4)
//   bf16:  7 stored mantissa bits, unit roundoff 2^-8  ≈ 3.9e-3      -> 1.6e-2 (measured 4.0e-3)
//   Q8_0: error ≤ d/2 = max|w|/254 per weight, ≈ 1.2 % of a typical
//         weight (max|w| ≈ 3 typical in a block of 32)              -> 5e-2  (measured 1.5e-2)
//   Q4_0: error ≤ d/2 = max|w|/14, 127/7 = 18.1× Q8_0's step: Q8_0's
//         allowance scaled by the same factor                       -> 0.91  (measured 0.30: the
//         shipped model has dim 64, so few errors average out; example 24 prints it per format)
inline double weight_tolerance(WeightType type) {
    switch (type) {
        case WeightType::fp32: return 1e-5;
        case WeightType::fp16: return 2e-3;
        case WeightType::bf16: return 1.6e-2;
        case WeightType::q8_0: return 5e-2;
        case WeightType::q4_0: return 5e-2 * 127 / 7;
        // The k-quants' steps against Q4_0's max|w|/7: Q4_K (max − min)/15 ≤ 2·max|w|/15 per 32
        // inputs (+ half of dmin for the rounded min, well under a step), Q5_K (max − min)/31,
        // Q6_K max|w|/31 per 16 inputs. Q4_0's allowance scaled by the ratio of steps.
        case WeightType::q4_k: return 5e-2 * 127 / 7;
        case WeightType::q5_k: return 5e-2 * 127 / 7 * 15 / 31;
        case WeightType::q6_k: return 5e-2 * 127 / 7 * 7 / 31;
        case WeightType::stored: break;
    }
    return 0;
}

// matmul (prefill) and matvec (decode) on every weight type, against the plain matrix–vector loop
// of each token's own row of x.
inline void check_products(const Kernels& fast) {
    CAPTURE(std::string(fast.name));
    const Kernels plain = glass::fast::portable_kernels();
    // Odd sizes: a padded last panel (77 = 2·32 + 13), check_cols' widths, uneven token tiles
    // (29 → 9,10,10; 13 → 6,7; 64 → 10,11,11,10,11,11).
    const int rows = 77, n_max = 64;
    alignas(64) static float scratch[glass::fast::kScratchFloats];
    for (WeightType type : every_panel_type()) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        const int cols = check_cols(type);
        const auto w = random_vector(std::size_t(rows) * cols, 2);
        const auto x = random_vector(std::size_t(n_max) * cols, 3);
        std::vector<unsigned char> buf(std::size_t(glass::fast::packed_bytes(rows, cols, type)) + 64, 0);
        auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + 63) / 64 * 64);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, aligned);
        for (bool accumulate : {false, true}) {
            CAPTURE(accumulate);
            // The matrix–matrix products take the tokens packed into tiles.
            for (int n : {2, 13, 29, n_max}) {
                CAPTURE(n);
                std::vector<float> packed(std::size_t(n) * cols), y_want(std::size_t(n) * rows, 0.5f);
                glass::fast::pack_tokens(x.data(), cols, n, cols, packed.data());
                for (int t = 0; t < n; ++t)
                    plain.matvec(m, x.data() + t * cols, y_want.data() + t * rows, 0, m.panels(), accumulate);
                // ldy = rows, and rows + 3: rows of y further apart than the matrix is tall, whose
                // gaps must keep their 9. Returns y's rows side by side.
                auto matmul = [&](const Kernels& k, float* scr, long ldy) {
                    std::vector<float> y(std::size_t(n) * ldy, 9.0f), got(std::size_t(n) * rows);
                    for (int t = 0; t < n; ++t) std::fill_n(y.begin() + t * ldy, rows, 0.5f);
                    k.matmul(m, packed.data(), n, y.data(), ldy, 0, m.panels(), accumulate, scr);
                    bool gaps_kept = true;
                    for (int t = 0; t < n; ++t) {
                        std::copy_n(y.begin() + t * ldy, rows, got.begin() + t * rows);
                        for (long r = rows; r < ldy; ++r) gaps_kept = gaps_kept && y[std::size_t(t * ldy + r)] == 9.0f;
                    }
                    CHECK(gaps_kept);
                    return got;
                };
                for (long ldy : {long{rows}, long{rows} + 3}) {
                    CAPTURE(ldy);
                    const std::vector<float> y_fast = matmul(fast, scratch, ldy), y_plain = matmul(plain, scratch, ldy);
                    CHECK(relative_error(y_fast, y_want) < 1e-5);   // same products, another summation order
                    CHECK(relative_error(y_plain, y_want) < 1e-6);  // same order: equal up to fma contraction
                    if (n == 13) {
                        // A token's row does not depend on the tokens beside it (the paged backend's
                        // batch invariance): token 7 alone gives the very bits it got among 13.
                        std::vector<float> alone(std::size_t(rows), 0.5f), x7(x.begin() + 7 * cols, x.begin() + 8 * cols);
                        fast.matmul(m, x7.data(), 1, alone.data(), rows, 0, m.panels(), accumulate, scratch);
                        CHECK(std::equal(alone.begin(), alone.end(), y_fast.begin() + 7 * rows));
                        // The same over panels [1, 3) only (a pair of panels: the sets take one or two
                        // tokens over several panels per pass), and tokens 7 and 8 as a batch of two.
                        std::vector<float> part(std::size_t(rows), 0.5f), pair(std::size_t(2 * rows), 0.5f), x78(std::size_t(2 * cols));
                        fast.matmul(m, x7.data(), 1, part.data(), rows, 1, m.panels(), accumulate, scratch);
                        CHECK(std::all_of(part.begin(), part.begin() + glass::fast::kPanel, [](float v) { return v == 0.5f; }));
                        CHECK(std::equal(part.begin() + glass::fast::kPanel, part.end(), y_fast.begin() + 7 * rows + glass::fast::kPanel));
                        glass::fast::pack_tokens(x.data() + 7 * cols, cols, 2, cols, x78.data());
                        fast.matmul(m, x78.data(), 2, pair.data(), rows, 0, m.panels(), accumulate, scratch);
                        CHECK(std::equal(pair.begin(), pair.end(), y_fast.begin() + 7 * rows));
                    }
                }
            }
            // Decode: all panels, then panels [1, 3) only (the 32 rows of panel 0 are not written).
            for (int p0 : {0, 1}) {
                CAPTURE(p0);
                std::vector<float> v_fast(std::size_t(rows), 0.5f), v_plain(std::size_t(rows), 0.5f);
                fast.matvec(m, x.data(), v_fast.data(), p0, m.panels(), accumulate);
                plain.matvec(m, x.data(), v_plain.data(), p0, m.panels(), accumulate);
                CHECK(std::all_of(v_fast.begin(), v_fast.begin() + glass::fast::kPanel * p0, [](float v) { return v == 0.5f; }));
                CHECK(relative_error(v_fast, v_plain) < 1e-5);
            }
        }
    }
}

// The k-quant panels hold a file's weights exactly: a matrix written as GGUF Q4_K/Q5_K/Q6_K rows
// (ggml_quants.hpp), packed from those bytes, reads back (PackedMatrix::at: the layout's plain
// definition) the very floats ggml_to_float gives for the file, and packing the fp32 matrix
// (pack_matrix) writes the same bytes. Rows include extreme blocks: all zero, and one huge weight.
inline void check_k_panels() {
    const int rows = 45, cols = 512;  // a padded last panel, two super-blocks
    auto w = random_vector(std::size_t(rows) * cols, 7);
    std::fill_n(w.begin() + 3 * cols, cols, 0.0f);  // row 3: all zero
    w[std::size_t(5 * cols + 300)] = 1e4f;          // row 5: one weight 10^4 × the others
    for (WeightType type : kKQuantTypes) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        const auto g = static_cast<std::uint32_t>(glass::fast::ggml_type_of(type));
        std::vector<char> file(std::size_t(glass::ggml_bytes(g, std::int64_t{rows} * cols)));
        glass::ggml_from_float(g, w.data(), std::int64_t{rows} * cols, file.data());
        std::vector<float> want(w.size());
        glass::ggml_to_float(g, file.data(), std::int64_t{rows} * cols, want.data());
        glass::StoredMatrix stored;
        stored.bytes = file.data();
        stored.type = g;
        const std::size_t n = std::size_t(glass::fast::packed_bytes(rows, cols, type));
        std::vector<unsigned char> from_file(n, 0), from_fp32(n, 0);
        const auto m = glass::fast::pack_stored_matrix(stored, rows, cols, type, from_file.data());
        glass::fast::pack_matrix(w.data(), rows, cols, type, from_fp32.data());
        CHECK(from_file == from_fp32);
        bool exact = true;
        for (int r = 0; r < rows; ++r)
            for (int k = 0; k < cols; ++k) exact = exact && m.at(r, k) == want[std::size_t(r) * cols + k];
        CHECK(exact);
        // Bytes: the file's bits per weight plus 1/8 (sc and m a byte each; Q6_K as the file).
        CHECK(double(m.panel_bytes()) * 8 / (32.0 * cols) ==
              doctest::Approx(glass::ggml_bits_per_weight(g) + (type == WeightType::q6_k ? 0.0 : 0.125)));
    }
    CHECK_THROWS_WITH_AS(glass::fast::packed_bytes(32, 300, WeightType::q4_k),
                         doctest::Contains("whole 256-input super-blocks; this matrix has 300 inputs"), glass::Error);
}

// Int8 activations (FastOptions::int8_activations): decode's x in int8 blocks of 32, times the
// Q8_0/Q4_0 integers with integer dot products (VNNI, sdot, or the plain loop: each of `sets`).
// The products are exact int32 sums, so every set equals quantize.hpp's quantized_dot_int8 up to
// the order of the fp32 additions over blocks (the fp32 tolerance). Rounding x is a real change:
// y moves by ~0.5 %.
inline void check_matvec_int8(const std::vector<Kernels>& sets) {
    const int rows = 77;  // a padded last panel; Q8_0/Q4_0 with a partial block of 12 (cols 300)
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0, WeightType::q4_k, WeightType::q5_k, WeightType::q6_k}) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        const int cols = check_cols(type);
        const auto w = random_vector(std::size_t(rows) * cols, 2), x = random_vector(std::size_t(cols), 3);
        const int blocks = (cols + 31) / 32;
        std::vector<std::int8_t> xq(std::size_t(blocks) * 32, 99);  // 99: the padding must be written (0)
        std::vector<float> xs(static_cast<std::size_t>(blocks));
        glass::quantize_activations(x.data(), cols, xq.data(), xs.data());
        CHECK(std::all_of(xq.begin() + cols, xq.end(), [](std::int8_t q) { return q == 0; }));
        std::vector<std::int32_t> sums(std::size_t(blocks), 0);
        for (int i = 0; i < blocks * 32; ++i) sums[std::size_t(i / 32)] += xq[std::size_t(i)];
        const glass::fast::Int8Vector x8{xq.data(), xs.data(), sums.data()};
        std::vector<unsigned char> buf(std::size_t(glass::fast::packed_bytes(rows, cols, type)), 0);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, buf.data());
        std::vector<float> want(static_cast<std::size_t>(rows)), fp32_x(static_cast<std::size_t>(rows));
        if (glass::fast::is_k_quant(type)) {
            // The definition, in double: each weight as the panel holds it (PackedMatrix::at, bit
            // for bit ggml's dequantization) times each x as its int8 block holds it (dx · qx).
            for (int r = 0; r < rows; ++r) {
                double dot8 = 0, dot = 0;
                for (int k = 0; k < cols; ++k) {
                    dot8 += double(m.at(r, k)) * double(xs[std::size_t(k / 32)]) * double(xq[std::size_t(k)]);
                    dot += double(m.at(r, k)) * double(x[std::size_t(k)]);
                }
                want[std::size_t(r)] = 0.5f + float(dot8);
                fp32_x[std::size_t(r)] = 0.5f + float(dot);
            }
        } else {
            const glass::QuantizedMatrix qm = glass::quantize(w.data(), rows, cols, glass::fast::quant_format_of(type));
            for (int r = 0; r < rows; ++r) {
                want[std::size_t(r)] = 0.5f + glass::quantized_dot_int8(qm, r, xq.data(), xs.data());
                fp32_x[std::size_t(r)] = 0.5f + glass::quantized_dot(qm, r, x.data());
            }
        }
        for (const Kernels& k : sets) {
            CAPTURE(std::string(k.name) + " / " + k.int8_dot);
            std::vector<float> y(std::size_t(rows), 0.5f);
            k.matvec_int8(m, x8, y.data(), 0, m.panels(), true);  // accumulate onto 0.5
            CHECK(relative_error(y, want) < 1e-5);
            std::vector<float> y_set(std::size_t(rows), 7.0f);  // not accumulating: the 7s are overwritten
            k.matvec_int8(m, x8, y_set.data(), 0, m.panels(), false);
            for (float& v : y_set) v += 0.5f;
            CHECK(relative_error(y_set, want) < 1e-5);
        }
        const double moved = relative_error(want, fp32_x);
        MESSAGE((std::string(glass::fast::to_string(type)) + ": int8 x vs fp32 x, relative error " + std::to_string(moved)));
        CHECK(moved > 1e-4);
        CHECK(moved < 2e-2);  // each x moves by ≤ dx/2 = max|x_block|/254
    }
}

// Decode attention over a run of cached rows (dot_rows, add_rows), and add_rows cut into runs
// gives the same bits as in one piece.
inline void check_decode_attention(const Kernels& fast) {
    CAPTURE(std::string(fast.name));
    const Kernels plain = glass::fast::portable_kernels();
    // head_dim 8 and 48 fill part of a register block (AVX-512: one of 64 floats; NEON: 16), 64
    // exactly one (NEON: four), 80 spills into another.
    for (int hd : {8, 48, 64, 80}) {
        CAPTURE(hd);
        const int n_rows = 21;
        const long ld = hd + 13;  // rows of a cache are further apart than one head
        const auto q = random_vector(std::size_t(hd), 21), rows = random_vector(std::size_t(n_rows * ld), 22);
        const auto p = random_vector(std::size_t(n_rows), 23);
        std::vector<float> s_fast(n_rows), s_plain(n_rows);
        fast.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_fast.data());
        plain.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_plain.data());
        CHECK(relative_error(s_fast, s_plain) < 1e-5);  // same products, another summation order
        // The weighted sum: y starts at 0.5 (it accumulates); lanes past hd must keep a sentinel.
        std::vector<float> y_fast(std::size_t(hd) + 16, 0.5f), y_plain = y_fast, y_split = y_fast;
        for (int d = hd; d < hd + 16; ++d) y_fast[std::size_t(d)] = y_plain[std::size_t(d)] = y_split[std::size_t(d)] = 7.0f;
        fast.add_rows(y_fast.data(), p.data(), rows.data(), ld, n_rows, hd);
        plain.add_rows(y_plain.data(), p.data(), rows.data(), ld, n_rows, hd);
        CHECK(relative_error(y_fast, y_plain) < 1e-5);
        // Cut into runs of 1, 5 and 15 rows (blocks of a paged cache), the result is the same
        // bits: each element is one FMA chain over the rows in order, however it is cut.
        for (int j0 : {0, 1, 6})
            fast.add_rows(y_split.data(), p.data() + j0, rows.data() + j0 * ld, ld, j0 == 0 ? 1 : j0 == 1 ? 5 : 15, hd);
        CHECK(y_split == y_fast);
    }
}

// An int8 KV cache's decode attention dequantizes runs of rows (one KV head's slice of each) and
// hands them to the fp32 kernels. The dequantized values must be exactly the reference's
// (dequantize_kv_row: one fp32 product s · q each), for every head_dim tail.
inline void check_dequantize_rows(const Kernels& k) {
    CAPTURE(std::string(k.name));
    for (int hd : {8, 48, 64, 80}) {
        CAPTURE(hd);
        const int n_rows = 21, G = 3, g = 1;  // rows hold 3 KV heads; head 1 is read
        const long ld = long{G} * hd;
        const auto x = random_vector(std::size_t(n_rows * ld), 24);
        std::vector<std::int8_t> rows(x.size());
        std::vector<float> scales(std::size_t(n_rows * G)), want(x.size());
        for (int r = 0; r < n_rows; ++r) {
            glass::quantize_kv_row(x.data() + r * ld, G, hd, rows.data() + r * ld, scales.data() + r * G);
            glass::dequantize_kv_row(rows.data() + r * ld, scales.data() + r * G, G, hd, want.data() + r * ld);
        }
        std::vector<float> got(std::size_t(n_rows * hd) + 16, 7.0f);  // 7: nothing past the rows is written
        k.dequantize_rows(rows.data() + g * hd, ld, scales.data() + g, G, n_rows, hd, got.data());
        bool equal = true;
        for (int r = 0; r < n_rows; ++r)
            for (int i = 0; i < hd; ++i) equal = equal && got[std::size_t(r * hd + i)] == want[std::size_t(r * ld + g * hd + i)];
        CHECK(equal);
        CHECK(std::all_of(got.end() - 16, got.end(), [](float v) { return v == 7.0f; }));
    }
}

// Decode's x in int8 blocks (quantize_int8): the same bytes, scales and Σ q as
// quantize_activations with the sums added in order, for lengths with a partial last block,
// blocks whose x / dx lands exactly on a half (ties go to the even integer, as std::nearbyint),
// a block of zeros, and blocks holding NaN or ±inf (dx = NaN, q = 0). Bytes past the blocks are
// never written.
inline void check_quantize_int8(const Kernels& k) {
    CAPTURE(std::string(k.name));
    std::vector<float> x = random_vector(2051, 31);
    // block 1: max 127, so dx = 1 exactly and these halves are ties: 2.5 -> 2, -3.5 -> -4, 0.5 -> 0
    for (int i = 32; i < 64; ++i) x[std::size_t(i)] = float(i % 7) - 3.5f + float(i % 2);
    x[32] = 127.0f, x[33] = 2.5f, x[34] = -3.5f, x[35] = 0.5f, x[36] = -0.5f, x[37] = 126.5f;
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);                 // block 2: zeros
    x[100] = std::numeric_limits<float>::quiet_NaN();                 // block 3
    x[140] = -std::numeric_limits<float>::infinity();                 // block 4
    for (int n : {1, 7, 31, 32, 33, 64, 96, 160, 768, 2051}) {
        CAPTURE(n);
        const int blocks = (n + 31) / 32;
        std::vector<std::int8_t> want_q(static_cast<std::size_t>(blocks) * 32 + 8, 99), got_q = want_q;
        const std::size_t n_blocks = static_cast<std::size_t>(blocks);
        std::vector<float> want_s(n_blocks), got_s(n_blocks);
        std::vector<std::int32_t> want_sum(n_blocks), got_sum(n_blocks, -1);
        glass::quantize_activations(x.data(), n, want_q.data(), want_s.data());
        for (int b = 0; b < blocks; ++b)
            for (int i = 0; i < 32; ++i) want_sum[std::size_t(b)] += want_q[std::size_t(b * 32 + i)];
        k.quantize_int8(x.data(), n, got_q.data(), got_s.data(), got_sum.data());
        CHECK(got_q == want_q);  // the 8 bytes past the blocks keep 99 in both
        CHECK(got_sum == want_sum);
        bool scales_equal = true;
        for (std::size_t b = 0; b < want_s.size(); ++b)
            scales_equal = scales_equal && (std::isnan(want_s[b]) ? std::isnan(got_s[b]) : got_s[b] == want_s[b]);
        CHECK(scales_equal);
    }
    // The ties above are ties: dx = 1, and the reference rounds them to even.
    std::vector<std::int8_t> q(64);
    std::vector<float> s(2);
    glass::quantize_activations(x.data(), 64, q.data(), s.data());
    CHECK(s[1] == 1.0f);
    CHECK((q[33] == 2 && q[34] == -4 && q[35] == 0 && q[36] == 0 && q[37] == 126));
}

// Prefill attention tiles (attention_scores, attention_mix) for every row count up to a tile's,
// with tails in keys and head_dim, every matrix with a leading dimension past its width.
inline void check_prefill_attention(const Kernels& fast) {
    CAPTURE(std::string(fast.name));
    const Kernels plain = glass::fast::portable_kernels();
    // head_dim 8 and 48 are below one 64-wide block (AVX-512), 80 spills into a second, partial
    // one; key counts 1, 17 and 70 leave partial registers (16 keys on AVX-512, 4 on NEON) and a
    // partial block of keys (64; NEON 16).
    for (int hd : {8, 48, 64, 80})
        for (int n_keys : {1, 17, 70})
            for (int m = 1; m <= glass::fast::kAttentionRows; ++m) {
                CAPTURE(hd);
                CAPTURE(n_keys);
                CAPTURE(m);
                const long ldq = hd + 3, ldkt = n_keys + 5, lds = n_keys + 7, ldv = hd + 9, ldo = hd + 2;
                const auto q = random_vector(std::size_t(m * ldq), 11), kt = random_vector(std::size_t(hd * ldkt), 12);
                const auto v = random_vector(std::size_t(n_keys * ldv), 13);
                // Outputs start at a sentinel: entries past each row's end must keep it.
                std::vector<float> s_fast(std::size_t(m * lds), 7.0f), s_plain = s_fast;
                fast.attention_scores(q.data(), ldq, m, kt.data(), ldkt, n_keys, hd, 0.125f, s_fast.data(), lds);
                plain.attention_scores(q.data(), ldq, m, kt.data(), ldkt, n_keys, hd, 0.125f, s_plain.data(), lds);
                CHECK(relative_error(s_fast, s_plain) < 1e-5);  // same products, another summation order
                std::vector<float> o_fast(std::size_t(m * ldo), 7.0f), o_plain = o_fast;
                fast.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_fast.data(), ldo);
                plain.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_plain.data(), ldo);
                CHECK(relative_error(o_fast, o_plain) < 1e-5);
            }
}

// The attention and MLP helpers (softmax, silu_mul, exp_shift, row_max) against the scalar
// definitions (std::exp) and the portable loops.
inline void check_elementwise(const Kernels& fast) {
    CAPTURE(std::string(fast.name));
    const Kernels plain = glass::fast::portable_kernels();
    auto a = random_vector(83, 4), b = random_vector(83, 5);  // 83: a tail of 3 past whole registers
    for (float& v : a) v *= 30;  // scores and gates span e^±30
    auto s_fast = a, s_plain = a;
    fast.softmax(s_fast.data(), 83);
    plain.softmax(s_plain.data(), 83);
    CHECK(relative_error(s_fast, s_plain) < 1e-5);  // the vector e^x: ~1e-7 relative per value
    auto g_fast = a, g_plain = a;
    fast.silu_mul(g_fast.data(), b.data(), 83);
    plain.silu_mul(g_plain.data(), b.data(), 83);
    CHECK(relative_error(g_fast, g_plain) < 1e-5);
    // e^x itself, value by value, over the clamp's whole range: ~1e-7 relative each.
    std::vector<float> xs;
    for (float t = -80.0f; t <= 80.0f; t += 0.37f) xs.push_back(t);
    auto e = xs;
    fast.exp_shift(e.data(), static_cast<int>(e.size()), 0.0f);
    double worst = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, std::fabs(double(e[i]) / std::exp(double(xs[i])) - 1.0));
    MESSAGE(std::string(fast.name) << ": e^x over [-80, 80], worst relative error " << worst);
    CHECK(worst < 1e-6);
    // FlashAttention's step: e^(x − shift) over the first n (the tail of 3), the sum; x[n] untouched.
    const float shift = *std::max_element(a.begin(), a.end());
    auto e_fast = a, e_plain = a;
    e_fast.push_back(5.0f);
    const float sum_fast = fast.exp_shift(e_fast.data(), 83, shift), sum_plain = plain.exp_shift(e_plain.data(), 83, shift);
    CHECK(e_fast.back() == 5.0f);
    e_fast.pop_back();
    CHECK(relative_error(e_fast, e_plain) < 1e-5);
    CHECK(sum_fast == doctest::Approx(sum_plain).epsilon(1e-5));
    CHECK(e_fast[82] == doctest::Approx(std::exp(a[82] - shift)).epsilon(1e-5));
    // The tile maximum over the first n of each length 1..83 (a larger value just past n must not
    // be seen): exactly the scalar maximum, for the fast and plain kernels.
    auto peaks = a;
    peaks.push_back(1e30f);
    for (int n = 1; n <= 83; ++n) {
        CAPTURE(n);
        const float want = *std::max_element(peaks.begin(), peaks.begin() + n);
        peaks[std::size_t(n)] = 1e30f;  // just past the end
        CHECK(fast.row_max(peaks.data(), n) == want);
        CHECK(plain.row_max(peaks.data(), n) == want);
        peaks[std::size_t(n)] = a[std::size_t(n) % a.size()];
    }
}

// The probes (benchmark.hpp's ceilings) compute what they claim: the sum of what they read, and
// fma_chains' FMA chains.
inline void check_probes(const Kernels& k) {
    CAPTURE(std::string(k.name));
    alignas(64) static float p[1024];
    double want = 0;
    for (int i = 0; i < 1024; ++i) want += (p[i] = 0.25f * float(i % 7) - 0.5f);
    CHECK(k.read_sum(p, 1024) == doctest::Approx(want).epsilon(1e-6));
    // No rounds: the chains' seeds, start + 0.001·i in each of fma_lanes lanes.
    double seeds = 0;
    for (int i = 0; i < glass::fast::kProbeChains; ++i) seeds += k.fma_lanes * double(1.0f + 0.001f * i);
    CHECK(k.fma_chains(0, 1.0f) == doctest::Approx(seeds).epsilon(1e-6));
    // 1000 rounds of acc = fma(acc, 0.999999, 1e-7) in every lane: each chain's value is the
    // scalar fmaf loop's exactly; only the final sum over lanes and chains may round apart.
    double after = 0;
    for (int i = 0; i < glass::fast::kProbeChains; ++i) {
        float acc = 1.0f + 0.001f * i;
        for (int it = 0; it < 1000; ++it) acc = std::fmaf(acc, 0.999999f, 1e-7f);
        after += k.fma_lanes * double(acc);
    }
    CHECK(k.fma_chains(1000, 1.0f) == doctest::Approx(after).epsilon(1e-6));
}

}  // namespace kernel_checks
