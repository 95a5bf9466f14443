// The quantized blocks of downloaded files (glass/ggml_quants.hpp): what one block decodes to, by
// hand; how far glass's writer moves each weight; bad input named. (Bit-for-bit equality with
// llama.cpp's own dequantization: tests/families/check_dequantize.py, in ctest llama_cpp_families.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <random>
#include <vector>

#include "glass/fast/random_model.hpp"
#include "glass/ggml_quants_write.hpp"
#include "glass/quantize.hpp"
#include "glass/sampling.hpp"
#include "glass/transformer.hpp"
#include "test_support.hpp"

namespace test_ggml_quants {  // this file's own names (tests are built in unity batches)

namespace {

using glass::GgmlType;

std::uint32_t id(GgmlType t) { return static_cast<std::uint32_t>(t); }

void put_half(std::vector<std::uint8_t>& b, int at, float v) {
    const std::uint16_t h = glass::fp32_to_fp16(v);
    std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> read(GgmlType t, const std::vector<std::uint8_t>& bytes) {
    const glass::GgmlBlock blk = glass::ggml_block_of(t);
    std::vector<float> w(bytes.size() / blk.bytes * blk.weights);
    glass::ggml_to_float(id(t), reinterpret_cast<const char*>(bytes.data()), static_cast<std::int64_t>(w.size()), w.data());
    return w;
}

}  // namespace

TEST_CASE("one Q4_K super-block decoded by hand: w = d·sc·q − dmin·m, scales of sub-blocks 4-7 split across bytes") {
    // d = 0.5, dmin = 0.25. Sub-block 1: sc 3, m 2 (bytes 1 and 5). Sub-block 6: sc 45 = 0b101101,
    // m 37 = 0b100101: low 4 bits in byte 10 (13 | 5 << 4), top 2 bits in bytes 2 and 6 (<< 6).
    std::vector<std::uint8_t> b(144, 0);
    put_half(b, 0, 0.5f);
    put_half(b, 2, 0.25f);
    b[4 + 1] = 3;
    b[4 + 5] = 2;
    b[4 + 10] = 13 | 5 << 4;
    b[4 + 2] = 2 << 6;
    b[4 + 6] = 2 << 6;
    b[16 + 0] = 0x70;       // chunk 0, byte 0: high nibble = weight 0 of sub-block 1 = q 7
    b[16 + 96 + 5] = 0x09;  // chunk 3, byte 5: low nibble = weight 5 of sub-block 6 = q 9
    const std::vector<float> w = read(GgmlType::q4_k, b);
    REQUIRE(w.size() == 256);
    CHECK(w[32] == 0.5f * 3 * 7 - 0.25f * 2);     // 10
    CHECK(w[33] == -0.25f * 2);                    // q 0: the min alone
    CHECK(w[6 * 32 + 5] == 0.5f * 45 * 9 - 0.25f * 37);
    CHECK(w[0] == 0.0f);                           // sub-block 0: scale and min 0
}

TEST_CASE("one Q6_K super-block decoded by hand: d last, q − 32 from 4 low and 2 high bits, int8 scales") {
    std::vector<std::uint8_t> b(210, 0);
    put_half(b, 208, 0.125f);
    b[192 + 9] = static_cast<std::uint8_t>(-4);  // sub-block 9: half 1, quarter 0, weights 16..31
    b[192 + 15] = 6;                             // sub-block 15: half 1, quarter 3, weights 16..31
    b[64 + 20] = 0x0B;                           // half 1, weight 20 of quarter 0: low 4 bits 11
    b[128 + 32 + 20] = 0x02 | 0x03 << 6;         // ... high bits 2 (quarter 0) and 3 (quarter 3)
    b[64 + 32 + 20] = 0xF0;                      // quarter 3's low 4 bits: 15
    const std::vector<float> w = read(GgmlType::q6_k, b);
    CHECK(w[128 + 20] == 0.125f * -4 * ((11 | 2 << 4) - 32));   // q 43 - 32 = 11: -5.5
    CHECK(w[128 + 96 + 20] == 0.125f * 6 * ((15 | 3 << 4) - 32));  // q 63 - 32 = 31: 23.25
    CHECK(w[0] == 0.0f);
}

TEST_CASE("Q5_0 and Q4_1 decoded by hand: the fifth bit from qh, the min added") {
    std::vector<std::uint8_t> q5(22, 0);
    put_half(q5, 0, 2.0f);
    const std::uint32_t qh = 1u << 3 | 1u << 19;  // weights 3 and 19 get their fifth bit
    std::memcpy(q5.data() + 2, &qh, 4);
    q5[6 + 3] = 0x21;  // weight 3: low nibble 1; weight 19: high nibble 2
    const std::vector<float> w5 = read(GgmlType::q5_0, q5);
    CHECK(w5[3] == 2.0f * (17 - 16));
    CHECK(w5[19] == 2.0f * (18 - 16));
    CHECK(w5[0] == 2.0f * -16);
    std::vector<std::uint8_t> q41(20, 0);
    put_half(q41, 0, 0.5f);
    put_half(q41, 2, -1.0f);
    q41[4 + 7] = 0xF3;
    const std::vector<float> w41 = read(GgmlType::q4_1, q41);
    CHECK(w41[7] == 0.5f * 3 - 1.0f);
    CHECK(w41[23] == 0.5f * 15 - 1.0f);
}

TEST_CASE("glass's writer: every weight within half a step of its (sub-)block, plus the rounding of the min") {
    // The bound per type (ggml_quants.hpp's writing rules), with the block's own d and min as stored:
    //   Q8_0, Q4_0, Q5_0: d/2;  Q4_1, Q5_1: d/2 + fp16's rounding of m (|m|·2^-11);
    //   Q4_K, Q5_K: step/2 + dmin/2 (the 6-bit min rounded to nearest), step = d·sc;  Q6_K: d·sc/2.
    // Plus 1e-6 of the row's largest weight for fp32 rounding.
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> x(256 * 32);
    for (float& v : x) v = normal(rng);
    for (int i = 0; i < 256; ++i) x[i] = std::fabs(x[i]) + 0.2f;  // a positive super-block
    for (int i = 256; i < 512; ++i) x[i] = -0.013f;                // a constant one
    for (int i = 512; i < 768; ++i) x[i] = 0.0f;                   // all zero
    x[1000] = 4.0f;                                               // an outlier
    for (int i = 1024; i < 1280; ++i) x[i] *= 1e-6f;              // tiny: fp16 subnormal scales
    for (const GgmlType t : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1,
                             GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k}) {
        CAPTURE(glass::ggml_type_name(t));
        const glass::GgmlBlock blk = glass::ggml_block_of(t);
        std::vector<std::uint8_t> bytes(static_cast<size_t>(glass::ggml_bytes(id(t), static_cast<std::int64_t>(x.size()))));
        glass::ggml_from_float(id(t), x.data(), static_cast<std::int64_t>(x.size()), reinterpret_cast<char*>(bytes.data()));
        const std::vector<float> w = read(t, bytes);
        double worst_ratio = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const std::uint8_t* b = bytes.data() + i / blk.weights * blk.bytes;
            const auto half = [&](int at) {
                std::uint16_t h;
                std::memcpy(&h, b + at, 2);
                return std::fabs(glass::fp16_to_fp32(h));
            };
            const int k = static_cast<int>(i % blk.weights);
            double bound = 0;
            switch (t) {
                case GgmlType::q4_1: case GgmlType::q5_1: bound = half(0) / 2 + half(2) * 0x1p-11; break;
                case GgmlType::q4_k: case GgmlType::q5_k: {
                    int sc, m;
                    glass::ggml_blocks::k_scale_min(b + 4, k / 32, sc, m);
                    bound = half(0) * sc / 2 + half(2) / 2;
                    break;
                }
                case GgmlType::q6_k: bound = half(208) * std::fabs(static_cast<double>(static_cast<std::int8_t>(b[192 + k / 16]))) / 2; break;
                default: bound = half(0) / 2;
            }
            bound += 1e-6 * 4.0;
            const double error = std::fabs(static_cast<double>(w[i]) - x[i]);
            worst_ratio = std::max(worst_ratio, error / bound);
            if (error > bound) {
                CAPTURE(i);
                CAPTURE(x[i]);
                CAPTURE(w[i]);
                CHECK(error <= bound);
                break;
            }
        }
        MESSAGE(glass::ggml_type_name(t), ": worst error ", worst_ratio, " of its bound");
        CHECK(w[512] == 0.0f);  // an all-zero block stays zero
    }
}

TEST_CASE("bad input to the block readers and writers is named") {
    std::vector<float> x(100, 1.0f);
    std::vector<char> out(1000);
    CHECK_THROWS_WITH_AS(glass::ggml_from_float(id(GgmlType::q4_k), x.data(), 100, out.data()),
                         doctest::Contains("not whole blocks of 256"), glass::Error);
    x[5] = NAN;
    CHECK_THROWS_WITH_AS(glass::ggml_from_float(id(GgmlType::q5_0), x.data(), 32, out.data()),
                         doctest::Contains("weight 5 of a block is nan"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::ggml_to_float(id(GgmlType::q2_k), out.data(), 256, x.data()),
                         doctest::Contains("Q2_K cannot be dequantized"), glass::Error);
    CHECK(glass::ggml_bits_per_weight(id(GgmlType::q4_k)) == 4.5);
    CHECK(glass::ggml_bits_per_weight(id(GgmlType::q6_k)) == 6.5625);
}

// ---- example 27_kquants: what it prints, recomputed ---------------------------------------------

namespace {

// The lines of `out` after the one starting with `heading`, up to the next blank line.
std::vector<std::string> section_rows(const std::string& out, const std::string& heading) {
    std::istringstream in(out);
    std::vector<std::string> rows;
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(heading, 0) == 0) inside = true;
        else if (inside && line.empty() && !rows.empty()) break;
        else if (inside && !line.empty()) rows.push_back(line);
    }
    return rows;
}

}  // namespace

TEST_CASE("example 27_kquants: the super-block by hand, Llama 3 8B's sizes per file type, logit error per type") {
    const std::string out = test::run_example("27_kquants").out;

    // 1. The same 256 weights, written here: the printed bytes, unpacked by the layout's rule.
    std::mt19937 rng(27);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> x(256);
    for (float& v : x) v = normal(rng);
    std::vector<std::uint8_t> b(144);
    glass::ggml_from_float(id(GgmlType::q4_k), x.data(), 256, reinterpret_cast<char*>(b.data()));
    std::istringstream hex(test::value_of(out, "  12 scale bytes"));
    for (int i = 0; i < 12; ++i) {
        unsigned byte = 0;
        hex >> std::hex >> byte;
        CHECK(byte == b[4 + static_cast<size_t>(i)]);
    }
    std::string pairs;
    for (int s = 0; s < 8; ++s) {  // scale and min of sub-block s, 6 bits each (the header's diagram)
        const int sc = s < 4 ? b[4 + s] & 63 : (b[4 + s + 4] & 15) | (b[4 + s - 4] >> 6) << 4;
        const int m = s < 4 ? b[4 + s + 4] & 63 : (b[4 + s + 4] >> 4) | (b[4 + s] >> 6) << 4;
        pairs += (s ? " (" : "(") + std::to_string(sc) + ", " + std::to_string(m) + ")";
    }
    CHECK(test::value_of(out, "  (scale, min) of sub-blocks 0-7") == pairs);
    // Weight 100: sub-block 3 = the high nibbles of chunk 1; its scale and min from bytes 3 and 7.
    const int q = b[16 + 32 + 4] >> 4, sc = b[4 + 3] & 63, m = b[4 + 7] & 63;
    const double d = glass::fp16_to_fp32(static_cast<std::uint16_t>(b[0] | b[1] << 8));
    const double dmin = glass::fp16_to_fp32(static_cast<std::uint16_t>(b[2] | b[3] << 8));
    const std::string line = test::value_of(out, "  weight 100 (sub-block 3, qs byte 36, high nibble");
    CHECK(line.rfind("q = " + std::to_string(q) + "): d*" + std::to_string(sc) + "*" + std::to_string(q) + " - dmin*" +
                         std::to_string(m) + " = ",
                     0) == 0);
    CHECK(std::stod(line.substr(line.rfind("= ") + 2)) == doctest::Approx(d * sc * q - dmin * m).epsilon(1e-5));
    CHECK(test::number(out, "  ggml_to_float") == doctest::Approx(d * sc * q - dmin * m).epsilon(1e-5));

    // 2. Llama 3 8B, counted here from the block sizes and llama-quant.cpp's rule for the mixes.
    const std::map<std::string, std::pair<int, int>> block = {  // weights, bytes
        {"F16", {1, 2}},    {"Q8_0", {32, 34}}, {"Q6_K", {256, 210}}, {"Q5_K", {256, 176}}, {"Q5_1", {32, 24}},
        {"Q5_0", {32, 22}}, {"Q4_K", {256, 144}}, {"Q4_1", {32, 20}}, {"Q4_0", {32, 18}}};
    const double dim = 4096, kv = 1024, ffn = 14336, vocab = 128256;
    const double per_layer[7] = {dim * dim, kv * dim, kv * dim, dim * dim, ffn * dim, ffn * dim, dim * ffn};  // q k v o gate up down
    const double norms = 65 * dim;
    double all = 2 * vocab * dim + norms;
    for (const double w : per_layer) all += 32 * w;
    const auto bytes_of = [&](const std::string& t, double n) { return n / block.at(t).first * block.at(t).second; };
    std::map<std::string, double> gb;
    for (const std::string file : {"F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_1", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0"}) {
        const bool mix = file.size() == 6;
        const std::string base = mix ? file.substr(0, 4) : file;  // "Q4_K" from "Q4_K_M"
        double bytes = 4 * norms + bytes_of(base, vocab * dim) + bytes_of(mix ? "Q6_K" : base, vocab * dim);
        for (int l = 0; l < 32; ++l) {
            const bool more = l < 4 || l >= 28 || (l - 4) % 3 == 2;
            for (int k = 0; k < 7; ++k) bytes += bytes_of(mix && more && (k == 2 || k == 6) ? "Q6_K" : base, per_layer[k]);
        }
        gb[file] = bytes / 1e9;
        const std::vector<std::string> rows = section_rows(out, "2. Llama 3 8B");
        bool found = false;
        for (const std::string& r : rows) {
            std::istringstream in(r);
            std::string name;
            double bits = 0, printed_gb = 0;
            in >> name >> bits >> printed_gb;
            if (name != file) continue;
            found = true;
            CHECK(bits == doctest::Approx(8 * bytes / all).epsilon(1e-3));
            CHECK(printed_gb == doctest::Approx(bytes / 1e9).epsilon(2e-3));
        }
        CHECK_MESSAGE(found, file);
    }
    // The real file: Meta-Llama-3-8B-Instruct-Q4_K_M.gguf is 4.92 GB with its vocabulary and metadata.
    CHECK(gb["Q4_K_M"] == doctest::Approx(4.92).epsilon(0.01));

    // 3. The same model through each file type, run here along fp32's greedy path.
    glass::ModelConfig c = glass::fast::small_family_config("llama3");
    c.dim = 256, c.hidden_dim = 768, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.vocab_size = 512;
    const glass::Model model = glass::fast::random_family_model(c, 32);
    std::vector<int> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back((41 * i + 11) % 512);
    glass::CpuSession exact(model);
    std::vector<std::vector<float>> want;
    std::vector<int> path;
    for (std::span<const float> l = exact.prefill(prompt); want.size() < 8; l = exact.decode(path.back())) {
        want.emplace_back(l.begin(), l.end());
        path.push_back(glass::sample_argmax(l));
    }
    std::map<std::string, double> nmse;
    for (const std::string& r : section_rows(out, "  file type  worst NMSE")) {
        std::istringstream in(r);
        std::string file;
        double printed = 0;
        int equal = -1;
        in >> file >> printed >> equal;
        if (file == "file") continue;
        CAPTURE(file);
        const glass::Model q = glass::model_in_file_type(model, file);
        // The mix really was applied: layer 3 of 4 is a use_more_bits layer (3 >= 7·4/8).
        if (file == "Q4_K_M" || file == "Q5_K_M") {
            const std::vector<float> v3 = glass::ggml_round_trip(id(GgmlType::q6_k), model.layers[3].wv.data(), model.layers[3].wv.size());
            CHECK(std::equal(v3.begin(), v3.end(), q.layers[3].wv.data()));
        }
        glass::CpuSession s(q);
        double worst = 0;
        int same = 0;
        std::span<const float> l = s.prefill(prompt);
        for (size_t step = 0; step < 8; ++step, l = s.decode(path[step - 1])) {
            double e2 = 0, n2 = 0;
            for (size_t i = 0; i < l.size(); ++i) e2 += (l[i] - want[step][i]) * (l[i] - want[step][i]), n2 += want[step][i] * want[step][i];
            worst = std::max(worst, e2 / n2);
            same += glass::sample_argmax(l) == path[step];
        }
        CHECK(printed == doctest::Approx(worst).epsilon(1e-2));
        CHECK(equal == same);
        nmse[file] = worst;
    }
    REQUIRE(nmse.size() == 8);
    // More bits, less error: the walkthrough's reading of the table.
    CHECK(nmse["Q8_0"] < nmse["Q6_K"]);
    CHECK(nmse["Q6_K"] < nmse["Q5_K_M"]);
    CHECK(nmse["Q5_K_M"] < nmse["Q4_K_M"]);
    CHECK(nmse["Q4_K_M"] < nmse["Q4_0"]);

    // 4. The fast path's k-quant panels. Bytes per super-block and 32 rows, from the layout in
    // packed_kquants.hpp's comment: d (+ dmin) for 32 rows, then per sub-block 64 B of scales,
    // 512 B of nibbles and 128 B per extra bit.
    const std::vector<std::string> panel_rows = section_rows(out, "  panel type  bits/weight");
    REQUIRE(panel_rows.size() == 3);
    const int header[3] = {128, 128, 64}, extra[3] = {0, 1, 2};
    const double file_bits[3] = {4.5, 5.5, 6.5625};
    for (int i = 0; i < 3; ++i) {
        std::istringstream in(panel_rows[static_cast<size_t>(i)]);
        std::string name, file;
        double bits = 0;
        in >> name >> bits >> file;
        CHECK(name == std::string(i == 0 ? "q4_k" : i == 1 ? "q5_k" : "q6_k"));
        CHECK(bits == doctest::Approx(8.0 * (header[i] + 8 * (64 + 512 + 128 * extra[i])) / (32 * 256)).epsilon(1e-4));
        CHECK(std::stod(file.substr(1)) == doctest::Approx(file_bits[i]).epsilon(1e-4));
    }
    // The same 32 x 256 weights and x as the example (the generator continues from section 1's
    // draws in a fresh one: seed 27, w first, then x): row 0 as Q4_K read back by ggml_to_float,
    // inputs 16..31 times x. Then the printed S·Σq·x − M·Σx gives the same sum.
    std::mt19937 rng4(27);
    std::normal_distribution<float> normal4(0.0f, 0.02f);
    std::vector<float> w4(32 * 256), x4(256);
    for (float& v : w4) v = normal4(rng4);
    for (float& v : x4) v = normal4(rng4) * 50.0f;
    const std::vector<float> row0 = glass::ggml_round_trip(id(GgmlType::q4_k), w4.data(), 256);
    double widened = 0, sum_x = 0;
    for (int k = 16; k < 32; ++k) widened += double(row0[size_t(k)]) * x4[size_t(k)], sum_x += x4[size_t(k)];
    CHECK(test::number(out, "  sum of w*x, weights widened first") == doctest::Approx(widened).epsilon(1e-5));
    std::istringstream terms(test::value_of(out, "  S*sum(q*x) - M*sum(x)"));
    double S = 0, qx = 0, M = 0, sx = 0, result = 0;
    char star, minus, eq;
    terms >> S >> star >> qx >> minus >> M >> star >> sx >> eq >> result;
    CHECK(sx == doctest::Approx(sum_x).epsilon(1e-5));
    CHECK(S * qx - M * sx == doctest::Approx(widened).epsilon(1e-5));
    CHECK(result == doctest::Approx(widened).epsilon(1e-5));
    // The matrix products: fp32 x multiplies exactly the file type's weights, so the only
    // difference is the order of fp32 sums (≤ 1e-5, the fp32 rule); int8 x is x rounded to 8
    // bits per block of 32 (≤ half a step of max|x|/127 each: a few 1e-3 of y).
    const std::vector<std::string> product_rows = section_rows(out, "  panels  fp32 x");
    REQUIRE(product_rows.size() == 3);  // q4_k, q5_k, q6_k
    for (size_t i = 0; i < 3; ++i) {
        std::istringstream in(product_rows[i]);
        std::string name;
        double fp32_x = 1, int8_x = 1;
        in >> name >> fp32_x >> int8_x;
        CAPTURE(name);
        CHECK(fp32_x <= 1e-5);
        CHECK(int8_x > 1e-4);
        CHECK(int8_x < 2e-2);
    }
}

}  // namespace test_ggml_quants
