// Quantization (quantize.hpp, C14): the formats' bytes, the error bound d/2 per weight, the exact
// integers and nibble order, partial blocks, the block-wise dot product against the dequantized
// matrix, quantized_model's weights, the int8 KV row, refusals; and example 24's printed numbers
// recomputed here (sizes from the formats' bytes, errors and likelihoods from the model).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/quantize.hpp"
#include "test_support.hpp"

namespace test_quantize {  // this file's own names (tests are built in unity batches)

using glass::QuantFormat;

TEST_CASE("bytes per weight come from the blocks: 34 and 18 bytes per 32 weights") {
    CHECK(glass::quant_block_bytes(QuantFormat::q8_0) == 34);
    CHECK(glass::quant_block_bytes(QuantFormat::q4_0) == 18);
    CHECK(glass::bytes_per_weight(QuantFormat::q8_0) == doctest::Approx(1.0625));
    CHECK(glass::bytes_per_weight(QuantFormat::q4_0) == doctest::Approx(0.5625));
    std::mt19937 rng(1);
    const glass::RowMatrix w = glass::fast::random_normal_matrix(5, 70, rng);  // 3 blocks per row, the last of 6
    for (QuantFormat f : {QuantFormat::q8_0, QuantFormat::q4_0}) {
        const glass::QuantizedMatrix m = glass::quantize(w, f);
        CHECK(m.blocks() == 3);
        CHECK(m.bytes() == 5 * 3 * glass::quant_block_bytes(f));
        CHECK(static_cast<std::int64_t>(m.scales.size() * 2 + m.quants.size()) == m.bytes());
    }
    CHECK(glass::quant_format_from_string("q4_0") == QuantFormat::q4_0);
    CHECK_THROWS_WITH_AS(glass::quant_format_from_string("q3"), doctest::Contains("unknown quantization format 'q3'"),
                         glass::Error);
}

TEST_CASE("each weight is d·q with |error| <= d/2, q in [-q_max, q_max], the largest at ±q_max") {
    std::mt19937 rng(2);
    const glass::RowMatrix w = glass::fast::random_normal_matrix(9, 100, rng, 0.05f);
    for (QuantFormat f : {QuantFormat::q8_0, QuantFormat::q4_0}) {
        CAPTURE(glass::to_string(f));
        const glass::QuantizedMatrix m = glass::quantize(w, f);
        const glass::RowMatrix back = glass::dequantize(m);
        const int qmax = glass::quant_max(f);
        for (int r = 0; r < m.rows; ++r)
            for (int b = 0; b < m.blocks(); ++b) {
                const int k0 = b * 32, k1 = std::min(m.cols, k0 + 32);
                float amax = 0;
                int largest_q = 0;
                for (int k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(w(r, k)));
                const float d = m.scale(r, b);
                CHECK(d == glass::fp16_to_fp32(glass::fp32_to_fp16(amax / qmax)));  // the fp16 scale
                for (int k = k0; k < k1; ++k) {
                    const int q = m.q(r, k);
                    REQUIRE(std::abs(q) <= qmax);
                    largest_q = std::max(largest_q, std::abs(q));
                    REQUIRE(back(r, k) == d * static_cast<float>(q));
                    // Half a step, plus the scale's own fp16 rounding (relative 2^-11) times q_max.
                    REQUIRE(std::fabs(back(r, k) - w(r, k)) <= d / 2 + amax * 0x1p-11f);
                }
                CHECK(largest_q == qmax);
            }
    }
}

TEST_CASE("q4 packs input 2j low and 2j+1 high as q + 8; a partial block pads with q = 0") {
    std::vector<float> w(40, 0.0f);  // one row: a whole block and 8 inputs of a second
    w[0] = 7.0f;                     // d = 1: q = round(w)
    w[1] = -3.0f;
    w[2] = 2.4f;
    w[3] = -7.0f;
    w[32] = -1.0f;  // second block: d = 1/7, q = -7
    const glass::QuantizedMatrix m = glass::quantize(w.data(), 1, 40, QuantFormat::q4_0);
    CHECK(m.row_bytes() == 32);
    CHECK(m.quants[0] == ((-3 + 8) << 4 | (7 + 8)));
    CHECK(m.quants[1] == ((-7 + 8) << 4 | (2 + 8)));
    CHECK(m.q(0, 32) == -7);
    for (int k = 33; k < 64; ++k) CHECK(m.q(0, k) == 0);  // padding and zeros alike
    CHECK(m.quants[31] == 0x88);
    // An all-zero block gets d = 0 and q = 0, not NaN.
    const std::vector<float> zeros(32, 0.0f);
    const glass::QuantizedMatrix z = glass::quantize(zeros.data(), 1, 32, QuantFormat::q8_0);
    CHECK(z.scale(0, 0) == 0.0f);
    CHECK(glass::dequantize(z).isZero());
}

TEST_CASE("quantized_dot (one scale per block) equals the dequantized matrix times x") {
    std::mt19937 rng(3);
    const glass::RowMatrix w = glass::fast::random_normal_matrix(33, 129, rng);
    const glass::RowMatrix x = glass::fast::random_normal_matrix(3, 129, rng);
    for (QuantFormat f : {QuantFormat::q8_0, QuantFormat::q4_0}) {
        const glass::QuantizedMatrix m = glass::quantize(w, f);
        const glass::RowMatrix want = x * glass::dequantize(m).transpose();
        const glass::RowMatrix got = glass::quantized_matmul(x, m);
        // Only the order of fp32 additions differs (scale once per block vs per weight).
        CHECK((got - want).norm() / want.norm() <= 1e-6);
    }
    CHECK_THROWS_WITH_AS(glass::quantized_matmul(x.leftCols(128), glass::quantize(w, QuantFormat::q8_0)),
                         doctest::Contains("x has 128 columns, W has 129"), glass::Error);
}

TEST_CASE("refusals: empty and non-finite weights") {
    const std::vector<float> w = {1.0f, std::nanf(""), 2.0f};
    CHECK_THROWS_WITH_AS(glass::quantize(w.data(), 1, 3, QuantFormat::q4_0), doctest::Contains("weight (0, 1) is nan"),
                         glass::Error);
    CHECK_THROWS_WITH_AS(glass::quantize(w.data(), 0, 3, QuantFormat::q8_0), doctest::Contains("empty matrix [0, 3]"),
                         glass::Error);
}

TEST_CASE("quantized_model rounds every matrix but the embedding; norms stay fp32") {
    const glass::Model& model = test::shipped();
    const glass::Model q = glass::quantized_model(model, QuantFormat::q4_0);
    const glass::ModelConfig& c = model.config;
    CHECK(q.config.dim == c.dim);
    CHECK(q.embedding_table() == model.embedding_table());
    CHECK(q.final_norm() == model.final_norm());
    for (int l = 0; l < c.n_layers; ++l) {
        CHECK(q.layers[size_t(l)].rms_att == model.layers[size_t(l)].rms_att);
        CHECK(q.layers[size_t(l)].w2 == glass::dequantize(glass::quantize(model.layers[size_t(l)].w2, QuantFormat::q4_0)));
        CHECK(q.layers[size_t(l)].wk == glass::dequantize(glass::quantize(model.layers[size_t(l)].wk, QuantFormat::q4_0)));
    }
    CHECK(q.output_classifier() == glass::dequantize(glass::quantize(model.output_classifier(), QuantFormat::q4_0)));
    CHECK(q.output_classifier() != model.output_classifier());
}

TEST_CASE("quantized_model of a family model: the matrices rounded, its gains, biases and per-head norms kept") {
    for (const char* family : {"qwen2", "qwen3", "gemma3"}) {
        CAPTURE(family);
        const glass::Model m = glass::fast::random_family_model(glass::fast::small_family_config(family), 3);
        const glass::Model q = glass::quantized_model(m, QuantFormat::q8_0);
        CHECK(q.config.head_dim == m.config.head_dim);
        CHECK(!q.config.shared_classifier);  // the classifier is rounded, the embedding is not
        CHECK(q.embedding_table() == m.embedding_table());
        CHECK(q.output_classifier() == glass::dequantize(glass::quantize(m.output_classifier(), QuantFormat::q8_0)));
        for (size_t l = 0; l < m.layers.size(); ++l) {
            const glass::LayerWeights &a = m.layers[l], &b = q.layers[l];
            CHECK(b.wq == glass::dequantize(glass::quantize(a.wq, QuantFormat::q8_0)));
            CHECK(b.w2 == glass::dequantize(glass::quantize(a.w2, QuantFormat::q8_0)));
            CHECK(b.wq != a.wq);
            // the deltas are the original's own numbers (views of them)
            CHECK(b.bq.data() == a.bq.data());
            CHECK(b.q_norm.data() == a.q_norm.data());
            CHECK(b.post_mlp_norm.data() == a.post_mlp_norm.data());
            CHECK(b.rms_ffn.data() == a.rms_ffn.data());
        }
        // And the reference runs it: q8 moves the logits a little, not far (C14's budget).
        glass::CpuSession exact(m), rounded(q);
        const std::vector<int> prompt = {1, 5, 9, 14, 3};
        const std::span<const float> want = exact.prefill(prompt);
        const std::vector<float> want_copy(want.begin(), want.end());
        const std::span<const float> got = rounded.prefill(prompt);
        const double err = test::relative_error(std::vector<float>(got.begin(), got.end()), want_copy);
        CHECK(err > 0);
        CHECK(err < 0.05);
    }
}

TEST_CASE("the int8 KV row: one scale per KV head, error <= scale/2") {
    std::mt19937 rng(4);
    const int heads = 3, hd = 16;
    glass::RowMatrix x = glass::fast::random_normal_matrix(1, heads * hd, rng);
    x.block(0, hd, 1, hd) *= 100.0f;  // head 1 much larger: its own scale, the others unaffected
    std::vector<std::int8_t> q(heads * hd);
    std::vector<float> scales(heads), back(heads * hd);
    glass::quantize_kv_row(x.data(), heads, hd, q.data(), scales.data());
    glass::dequantize_kv_row(q.data(), scales.data(), heads, hd, back.data());
    for (int g = 0; g < heads; ++g) {
        CHECK(scales[size_t(g)] == doctest::Approx(x.block(0, g * hd, 1, hd).cwiseAbs().maxCoeff() / 127.0f));
        for (int i = 0; i < hd; ++i)
            CHECK(std::fabs(back[size_t(g * hd + i)] - x(0, g * hd + i)) <= scales[size_t(g)] * 0.5f * 1.0001f);
    }
    CHECK(scales[1] > 50 * scales[0]);
}

namespace {

// "   q8 ... " : the whitespace-separated fields of the format's row in part 4.
std::vector<std::string> row_of(const std::string& out, const std::string& format) {
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string s; words >> s;) w.push_back(s);
        if (w.size() >= 9 && w[0] == format && w[1].find_first_not_of("0123456789") == std::string::npos) return w;
    }
    FAIL("no row for " << format);
    return {};
}

}  // namespace

TEST_CASE("example 24_quantization: C14 sizes, the block by hand, and the model's numbers recomputed here") {
    const std::string out = test::run_example("24_quantization").out;
    // 2. Llama 2 7B has 6,738,415,616 parameters (Meta's model card rounds it to 7B); bytes per
    //    weight 2, 34/32 and 18/32.
    CHECK(test::value_of(out, "2. C14: a 7B model (Llama 2 7B's shape").find("6738415616") != std::string::npos);
    const double params = 6738415616.0;
    CHECK(test::number(out, "fp16 size") == doctest::Approx(params * 2 / 1e9).epsilon(1e-3));
    CHECK(test::number(out, "int8 (q8) size") == doctest::Approx(params * 34 / 32 / 1e9).epsilon(1e-3));
    CHECK(test::number(out, "int4 (q4) size") == doctest::Approx(params * 18 / 32 / 1e9).epsilon(1e-3));

    // 3. The block by hand: the same row quantized here, integer for integer.
    const glass::Model& model = test::shipped();
    const glass::RowMatrix row = model.layers[0].wq.topRows(1);
    for (const QuantFormat f : {QuantFormat::q8_0, QuantFormat::q4_0}) {
        const std::string name = glass::to_string(f);
        std::istringstream ints(test::value_of(out, name + " integers q"));
        float amax = row.leftCols(32).cwiseAbs().maxCoeff();
        const float d = glass::fp16_to_fp32(glass::fp32_to_fp16(amax / glass::quant_max(f)));
        for (int k = 0; k < 8; ++k) {
            int q = 99;
            ints >> q;
            CHECK(q == static_cast<int>(std::nearbyint(row(0, k) / d)));
        }
        CHECK(test::number(out, name + " largest error in the block (at most d/2)") <= d / 2 * 1.001);
    }

    // 4. Recomputed with the fast path's q8/q4 kernels (FastCpuSession, a different
    //    implementation of the same weights) and free-running greedy generation: every golden
    //    continuation it reproduces whole, and the mean NLL of the goldens' tokens.
    const auto goldens = test::read_jsonl(test::golden("stories260K_greedy.jsonl"));
    for (const auto& [type, name] : {std::pair{glass::fast::WeightType::q8_0, "q8"}, std::pair{glass::fast::WeightType::q4_0, "q4"}}) {
        CAPTURE(name);
        int identical = 0, cases = 0;
        double nll = 0;
        long tokens = 0;
        for (const auto& g : goldens) {
            const auto want = test::ids_of(g["generated_ids"]);
            if (want.empty()) continue;
            ++cases;
            glass::fast::FastCpuSession session(model, {.threads = 1, .weights = type});
            glass::GenerateOptions o;
            o.sampling.temperature = 0.0f;
            o.max_new_tokens = static_cast<int>(want.size());
            const auto r = glass::generate(session, test::shipped_tok(), g["prompt"].get<std::string>(), o);
            if (r.generated_ids == want) ++identical;
            session.reset();
            std::span<const float> logits = session.prefill(test::ids_of(g["prompt_ids"]));
            for (size_t i = 0; i < want.size(); ++i) {
                double max = -1e30, sum = 0;
                for (float v : logits) max = std::max(max, double(v));
                for (float v : logits) sum += std::exp(double(v) - max);
                nll += -(double(logits[size_t(want[i])]) - max - std::log(sum));
                ++tokens;
                if (i + 1 < want.size()) logits = session.decode(want[i]);
            }
        }
        const std::vector<std::string> printed = row_of(out, name);
        CHECK(std::stoi(printed[3]) == identical);  // format, bytes, error, identical, "of", cases, ...
        CHECK(std::stoi(printed[5]) == cases);
        CHECK(std::stod(printed[printed.size() - 2]) == doctest::Approx(nll / tokens).epsilon(1e-3));
    }
    // Matrix bytes: the seven matrices of every layer and the classifier, at each format's bytes per weight.
    const glass::ModelConfig& c = model.config;
    const double matrices = double(c.n_layers) * (2.0 * c.dim * c.dim + 2.0 * c.kv_dim() * c.dim + 3.0 * c.hidden_dim * c.dim) +
                            double(c.vocab_size) * c.dim;
    CHECK(std::stod(row_of(out, "fp32")[1]) == doctest::Approx(matrices * 4));
    CHECK(std::stod(row_of(out, "q8")[1]) == doctest::Approx(matrices * 34 / 32));
    CHECK(std::stod(row_of(out, "q4")[1]) == doctest::Approx(matrices * 18 / 32));
    // fp32 reproduces every continuation (they are run.c's) and errs by 0; q4 errs more than q8.
    CHECK(row_of(out, "fp32")[3] == row_of(out, "fp32")[5]);
    CHECK(std::stod(row_of(out, "fp32")[2]) == 0.0);
    CHECK(std::stod(row_of(out, "q4")[2]) > std::stod(row_of(out, "q8")[2]));
}

TEST_CASE("KVCache in int8 keeps what int8 rows stand for; bytes_used counts one byte per value plus scales") {
    glass::ModelConfig c;
    c.dim = 32; c.n_heads = 4; c.n_kv_heads = 2; c.n_layers = 2; c.seq_len = 8; c.hidden_dim = 64; c.vocab_size = 10;
    c.head_dim = c.dim / c.n_heads;
    std::mt19937 rng(5);
    const glass::RowMatrix k = glass::fast::random_normal_matrix(3, c.kv_dim(), rng);
    const glass::RowMatrix v = glass::fast::random_normal_matrix(3, c.kv_dim(), rng);
    glass::KVCache fp32(c), int8(c, glass::KvType::int8);
    for (int layer = 0; layer < 2; ++layer) {
        fp32.write(layer, 0, k, v);
        int8.write(layer, 0, k, v);
    }
    fp32.advance(3);
    int8.advance(3);
    CHECK(fp32.keys(1, 3) == k);
    for (int r = 0; r < 3; ++r) {
        glass::RowMatrix want = k.row(r);
        glass::round_kv_row_to_int8(want.data(), c.n_kv_heads, c.head_dim);
        CHECK(int8.keys(1, 3).row(r) == want);
        CHECK(int8.keys(1, 3).row(r) != k.row(r));
    }
    CHECK(fp32.bytes_used(c) == 3 * 2 * 2 * c.kv_dim() * 4);
    CHECK(int8.bytes_used(c) == 3 * 2 * 2 * c.n_kv_heads * (c.head_dim + 4));
    CHECK(glass::kv_bytes_per_token(c, glass::KvType::int8) == 2 * 2 * 2 * (8 + 4));
}

}  // namespace test_quantize
