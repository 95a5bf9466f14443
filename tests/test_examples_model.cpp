// The examples that take the model apart (03_embedding_lookup, 04_rope, 05_attention_by_hand,
// 06_mlp, 07_prefill, 08_kv_cache_experiment): run each and check the numbers it prints against
// values this file derives on its own: from the goldens in ../shared, the checkpoint's bytes, the
// arithmetic of the claims (C2-C4, C6), or the model's first layer redone here in double
// precision. Never by comparing a program with itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "example_output.hpp"
#include "test_support.hpp"

namespace test_examples_model {  // this file's own names (tests are built in unity batches)

using test::example_output::greedy_golden;
using test::example_output::ints;
using test::example_output::lines_starting;
using test::example_output::number;
using test::example_output::numbers;
using test::example_output::run_example;
using test::value_of;

TEST_CASE("example 03_embedding_lookup: id X is row X of the table; C2 arithmetic") {
    const test::Run r = run_example("03_embedding_lookup");
    // The default id is the one of " Once": the second prompt id run.c gave for "Once upon a time".
    const int id = greedy_golden("Once upon a time", 32)["prompt_ids"][1].get<int>();
    CHECK(number(r.out, "token id") == id);
    const glass::ModelConfig& c = test::shipped().config;
    CHECK(value_of(r.out, "embedding table shape") ==
          "[" + std::to_string(c.vocab_size) + ", " + std::to_string(c.dim) + "]");

    // Read the row straight from the checkpoint file: after the 28-byte header the table is
    // [512, 64] fp32, row-major, so row `id` starts at byte 28 + 4 * id * 64.
    const int dim = 64;
    std::ifstream file(test::shipped_model(), std::ios::binary);
    REQUIRE(file.good());
    file.seekg(28 + 4LL * id * dim);
    std::vector<float> row(dim);
    file.read(reinterpret_cast<char*>(row.data()), 4 * dim);
    REQUIRE(file.good());

    // Printed with %.9g, which round-trips fp32 exactly: equality, no tolerance.
    const std::vector<double> table_row = numbers(value_of(r.out, "table row first 8"));
    const std::vector<double> embedded = numbers(value_of(r.out, "embedded first 8"));
    REQUIRE(table_row.size() == 8);
    REQUIRE(embedded.size() == 8);
    for (int i = 0; i < 8; ++i) {
        CHECK(static_cast<float>(table_row[i]) == row[i]);
        CHECK(static_cast<float>(embedded[i]) == row[i]);
    }
    CHECK(number(r.out, "values that differ (of 64)") == 0);

    // C2: Llama 3 8B's table.
    const std::int64_t params = std::int64_t{128256} * 4096;
    CHECK(params == 525336576);
    CHECK(static_cast<std::int64_t>(number(r.out, "llama3 8b embedding parameters")) == params);
    CHECK(params > 500000000);  // "more than half a billion"
    CHECK(value_of(r.out, "more than half a billion") == "yes");
    CHECK(static_cast<std::int64_t>(number(r.out, "llama3 8b embedding bytes fp16")) == 2 * params);
    CHECK(number(r.out, "shipped model embedding parameters") == 512 * 64);
}

// ---- The shipped model's first layer in double precision, written from the weights alone ----
// (for examples 04, 06 and 07: an independent reference for what they compute in fp32)

static std::vector<double> embedding_double(const glass::Model& m, int id) {
    const int dim = m.config.dim;
    const float* row = m.token_embedding + std::int64_t{id} * dim;
    return std::vector<double>(row, row + dim);
}

// g ⊙ x / sqrt(mean(x²) + eps)
static std::vector<double> rmsnorm_double(const std::vector<double>& x, const glass::ConstVectorMap& gain, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv_rms = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = gain(static_cast<Eigen::Index>(i)) * x[i] * inv_rms;
    return y;
}

// y = W x, W stored [out, in] as in the checkpoint.
template <typename W>
static std::vector<double> matvec_double(const W& w, const std::vector<double>& x) {
    std::vector<double> y(static_cast<size_t>(w.rows()), 0.0);
    for (Eigen::Index o = 0; o < w.rows(); ++o)
        for (Eigen::Index i = 0; i < w.cols(); ++i) y[static_cast<size_t>(o)] += double(w(o, i)) * x[static_cast<size_t>(i)];
    return y;
}

// RoPE with llama2.c's adjacent pairs: in every head, pair (2i, 2i+1) turns by pos · θ^(−2i/head_dim).
static void rope_double(std::vector<double>& v, int head_dim, int pos, double theta = 10000.0) {
    for (size_t h = 0; h * head_dim < v.size(); ++h)
        for (int i = 0; i < head_dim / 2; ++i) {
            const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
            double& a = v[h * head_dim + 2 * i];
            double& b = v[h * head_dim + 2 * i + 1];
            const double x0 = a, x1 = b;
            a = x0 * std::cos(angle) - x1 * std::sin(angle);
            b = x0 * std::sin(angle) + x1 * std::cos(angle);
        }
}

// What layer 0's MLP receives at position t of `ids`: the residual stream after attention
// (positions 0..t only: causal), normalized with the MLP's gain.
static std::vector<double> layer0_mlp_input_double(const glass::Model& m, const std::vector<int>& ids, int t) {
    const glass::ModelConfig& c = m.config;
    const glass::LayerWeights& w = m.layers[0];
    const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
    std::vector<std::vector<double>> k(static_cast<size_t>(t) + 1), v(static_cast<size_t>(t) + 1);
    std::vector<double> q;
    for (int p = 0; p <= t; ++p) {
        const std::vector<double> xn = rmsnorm_double(embedding_double(m, ids[static_cast<size_t>(p)]), w.rms_att, c.norm_eps);
        k[static_cast<size_t>(p)] = matvec_double(w.wk, xn);
        v[static_cast<size_t>(p)] = matvec_double(w.wv, xn);
        rope_double(k[static_cast<size_t>(p)], hd, p);
        if (p == t) {
            q = matvec_double(w.wq, xn);
            rope_double(q, hd, p);
        }
    }
    std::vector<double> attention(static_cast<size_t>(c.dim), 0.0);
    for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / group;  // the KV head query head h reads
        std::vector<double> weight(static_cast<size_t>(t) + 1);
        double max_score = -1e300, sum = 0;
        for (int p = 0; p <= t; ++p) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += q[size_t(h * hd + d)] * k[size_t(p)][size_t(g * hd + d)];
            weight[size_t(p)] = dot / std::sqrt(double(hd));
            max_score = std::max(max_score, weight[size_t(p)]);
        }
        for (double& x : weight) sum += (x = std::exp(x - max_score));
        for (int p = 0; p <= t; ++p)
            for (int d = 0; d < hd; ++d)
                attention[size_t(h * hd + d)] += weight[size_t(p)] / sum * v[size_t(p)][size_t(g * hd + d)];
    }
    std::vector<double> x = embedding_double(m, ids[static_cast<size_t>(t)]);
    const std::vector<double> projected = matvec_double(w.wo, attention);
    for (size_t i = 0; i < x.size(); ++i) x[i] += projected[i];
    return rmsnorm_double(x, w.rms_ffn, c.norm_eps);
}

TEST_CASE("example 04_rope: the score depends on the distance only; two layouts; theta and Llama 3.1 scaling") {
    for (const int offset : {0, 1000}) {
        CAPTURE(offset);
        const test::Run r = run_example("04_rope", offset ? std::to_string(offset) : "");
        CHECK(number(r.out, "offset added to every position") == offset);
        // Part 1: q = k = [1,0, 1,0, 1,0, 1,0], so pair i adds cos(d · 10000^(−2i/8)), d = m − n.
        const std::vector<std::string> placed = lines_starting(r.out, "q at ");
        REQUIRE(placed.size() >= 4);
        std::map<int, std::vector<double>> by_distance;
        for (const std::string& line : placed) {
            INFO(line);
            int m = -1, n = -1, d = -1;
            double score = 0, by_hand = 0;
            REQUIRE(std::sscanf(line.c_str(), "q at %d, k at %d, distance %d: score %lf, by hand %lf", &m, &n, &d,
                                &score, &by_hand) == 5);
            CHECK(d == m - n);
            CHECK(n >= offset);
            double want = 0;
            for (int i = 0; i < 4; ++i) want += std::cos(d * std::pow(10000.0, -2.0 * i / 8));
            // Printed with 4 decimals (±5e-5); fp32 angles at positions up to ~1,100 add < 1e-4.
            CHECK(std::fabs(score - want) < 2e-4);
            CHECK(std::fabs(by_hand - want) <= 5.01e-5);
            by_distance[d].push_back(score);
        }
        // The claim needs the same distance at different places, and different distances.
        CHECK(by_distance.size() >= 2);
        bool some_distance_repeats = false;
        for (const auto& [d, scores] : by_distance) some_distance_repeats |= scores.size() >= 2;
        CHECK(some_distance_repeats);
    }

    const test::Run r = run_example("04_rope");
    // Part 2, by hand: [1..8] at position 1; adjacent pairs (2i, 2i+1), half split (i, i+4), each
    // turned by 10000^(−2i/8) radians.
    std::vector<double> adjacent = {1, 2, 3, 4, 5, 6, 7, 8}, half = adjacent;
    for (int i = 0; i < 4; ++i) {
        const double a = std::pow(10000.0, -2.0 * i / 8), c = std::cos(a), s = std::sin(a);
        const double x0 = adjacent[2 * i], x1 = adjacent[2 * i + 1];
        adjacent[2 * i] = x0 * c - x1 * s;
        adjacent[2 * i + 1] = x0 * s + x1 * c;
        const double y0 = half[i], y1 = half[i + 4];
        half[i] = y0 * c - y1 * s;
        half[i + 4] = y0 * s + y1 * c;
    }
    const std::vector<double> adjacent_printed = numbers(value_of(r.out, "x at position 1, adjacent_pairs (0,1)(2,3)(4,5)(6,7)"));
    const std::vector<double> half_printed = numbers(value_of(r.out, "x at position 1, half_split (0,4)(1,5)(2,6)(3,7)"));
    REQUIRE(adjacent_printed.size() == 8);
    REQUIRE(half_printed.size() == 8);
    for (int i = 0; i < 8; ++i) {
        CHECK(std::fabs(adjacent_printed[i] - adjacent[i]) < 1e-4);  // 4 decimals of fp32 values < 10
        CHECK(std::fabs(half_printed[i] - half[i]) < 1e-4);
    }

    // Layer 0 scores of the shipped model, in double: original weights with adjacent rotation, and
    // Hugging Face-permuted weights (head row i <- 2i, row i + hd/2 <- 2i + 1) with the same
    // adjacent rotation, the mismatch. (Permuted weights with half_split rotation are the original
    // numbers in other places: the same scores.)
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;
    const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
    const std::vector<int> ids = test::shipped_tok().encode("Once upon a time", true, false);
    const int n = static_cast<int>(ids.size());
    const auto permute = [&](const std::vector<double>& v) {
        std::vector<double> out(v.size());
        for (size_t h = 0; h * hd < v.size(); ++h)
            for (int i = 0; i < hd / 2; ++i) {
                out[h * hd + i] = v[h * hd + 2 * i];
                out[h * hd + i + hd / 2] = v[h * hd + 2 * i + 1];
            }
        return out;
    };
    std::vector<std::vector<double>> q(n), k(n), q_mixed(n), k_mixed(n);
    for (int p = 0; p < n; ++p) {
        const std::vector<double> xn = rmsnorm_double(embedding_double(m, ids[p]), m.layers[0].rms_att, c.norm_eps);
        q[p] = matvec_double(m.layers[0].wq, xn);
        k[p] = matvec_double(m.layers[0].wk, xn);
        q_mixed[p] = permute(q[p]);
        k_mixed[p] = permute(k[p]);
        for (auto* v : {&q[p], &k[p], &q_mixed[p], &k_mixed[p]}) rope_double(*v, hd, p);
    }
    const auto score = [&](const std::vector<std::vector<double>>& qs, const std::vector<std::vector<double>>& ks,
                           int h, int t, int j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += qs[t][h * hd + d] * ks[j][(h / group) * hd + d];
        return dot / std::sqrt(double(hd));
    };
    const std::vector<double> original = numbers(value_of(r.out, "llama2.c weights, adjacent_pairs"));
    const std::vector<double> converted = numbers(value_of(r.out, "permuted weights, half_split"));
    const std::vector<double> mixed = numbers(value_of(r.out, "permuted weights, adjacent_pairs (mismatch)"));
    REQUIRE(original.size() == size_t(n));
    REQUIRE(converted.size() == size_t(n));
    REQUIRE(mixed.size() == size_t(n));
    for (int j = 0; j < n; ++j) {
        // Scores of a few units, printed with 4 decimals: 2e-4 covers fp32 and the rounding.
        CHECK(std::fabs(original[j] - score(q, k, 0, n - 1, j)) < 2e-4);
        CHECK(std::fabs(converted[j] - score(q, k, 0, n - 1, j)) < 2e-4);
        CHECK(std::fabs(mixed[j] - score(q_mixed, k_mixed, 0, n - 1, j)) < 2e-4);
    }
    double worst_mismatch = 0;
    for (int h = 0; h < c.n_heads; ++h)
        for (int t = 0; t < n; ++t)
            for (int j = 0; j <= t; ++j)
                worst_mismatch = std::max(worst_mismatch, std::fabs(score(q_mixed, k_mixed, h, t, j) - score(q, k, h, t, j)));
    CHECK(number(r.out, "scores compared, all 8 heads") == c.n_heads * n * (n + 1) / 2);
    CHECK(std::fabs(number(r.out, "mismatch vs original, max abs difference") - worst_mismatch) < 2e-4);
    CHECK(worst_mismatch > 1.0);  // the pitfall is not subtle
    // The converted model differs only by the order of 8 fp32 additions: rounding, far below 1e-5.
    CHECK(number(r.out, "permuted + half_split vs original, max abs difference") <= 1e-5);
    CHECK(value_of(r.out, "permuted + half_split equals original (within 1e-5)") == "yes");

    // Part 3: wavelengths 2π·θ^(2i/128) in double; fp32 pow is good to ~1e-6 relative.
    const double two_pi = 2 * 3.14159265358979323846;
    for (double theta : {10000.0, 500000.0}) {
        char label[32];
        std::snprintf(label, sizeof label, "theta %.0f", theta);
        double w0 = 0, w63 = 0;
        int pair63 = -1;
        REQUIRE(std::sscanf(value_of(r.out, label).c_str(), "pair 0 wavelength %lf, pair %d wavelength %lf", &w0,
                            &pair63, &w63) == 3);
        CHECK(pair63 == 63);
        CHECK(std::fabs(w0 - two_pi) < 0.006);
        const double want63 = two_pi * std::pow(theta, 126.0 / 128);
        CHECK(std::fabs(w63 - want63) < 0.5 + 1e-5 * want63);
    }
    // Llama 3.1's rule in double (see test_rope.cpp): count the pairs of each kind for θ 500,000.
    int kept = 0, slowed = 0, first_blended = -1, last_blended = -1;
    std::vector<double> f(64), scaled(64);
    for (int i = 0; i < 64; ++i) {
        f[i] = std::pow(500000.0, -2.0 * i / 128);
        const double wavelength = two_pi / f[i];
        if (wavelength < 2048) {
            scaled[i] = f[i];
            ++kept;
        } else if (wavelength > 8192) {
            scaled[i] = f[i] / 8;
            ++slowed;
        } else {
            const double smooth = (8192 / wavelength - 1) / 3;
            scaled[i] = (1 - smooth) * f[i] / 8 + smooth * f[i];
            if (first_blended < 0) first_blended = i;
            last_blended = i;
        }
    }
    CHECK(number(r.out, "theta 500000 pairs kept (wavelength under 2048)") == kept);
    CHECK(number(r.out, "theta 500000 pairs slowed 8x (wavelength over 8192)") == slowed);
    CHECK(value_of(r.out, "theta 500000 pairs blended") ==
          std::to_string(last_blended - first_blended + 1) + " (pairs " + std::to_string(first_blended) + ".." +
              std::to_string(last_blended) + ")");
    for (int i : {first_blended, last_blended, 63}) {
        double before = 0, after = 0, divided = 0;
        REQUIRE(std::sscanf(value_of(r.out, "pair " + std::to_string(i)).c_str(),
                            "wavelength %lf -> %lf (frequency divided by %lf)", &before, &after, &divided) == 3);
        CHECK(std::fabs(before - two_pi / f[i]) < 0.5 + 1e-5 * before);
        CHECK(std::fabs(after - two_pi / scaled[i]) < 0.5 + 1e-5 * after);
        CHECK(std::fabs(divided - f[i] / scaled[i]) < 5e-4 + 1e-5);
    }
    // The shipped model's 4 pairs: 2π·10000^(2i/8).
    const std::string shipped = value_of(r.out, "shipped model (head_dim 8, theta 10000, context 512) wavelengths");
    const std::vector<double> wavelengths = numbers(shipped);
    REQUIRE(wavelengths.size() == 4);
    for (int i = 0; i < 4; ++i)
        CHECK(std::fabs(wavelengths[i] - two_pi * std::pow(10000.0, 2.0 * i / 8)) < 0.006 + 1e-6 * wavelengths[i]);

    const test::Run bad = test::run(test::bin_dir() + "/04_rope -5");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("'-5'") != std::string::npos);
}

TEST_CASE("example 05_attention_by_hand: C3's scores, weights and output") {
    const test::Run r = run_example("05_attention_by_hand");
    const double e = std::exp(1.0);
    const double w_a = e / (1 + e), w_b = 1 / (1 + e);  // softmax([1, 0])
    // Printed with 6 decimals (±5e-7) from fp32 arithmetic (relative ~1e-7): 2e-6 covers both;
    // the outputs are ~10x larger, so 2e-5 there.
    const std::vector<double> scores = numbers(value_of(r.out, "scores"));
    const std::vector<double> weights = numbers(value_of(r.out, "weights"));
    const std::vector<double> output = numbers(value_of(r.out, "output"));
    REQUIRE(scores.size() == 2);
    REQUIRE(weights.size() == 2);
    REQUIRE(output.size() == 2);
    CHECK(scores[0] == 1.0);  // 1·1 + 0·0 and 1·0 + 0·1: exact in any precision
    CHECK(scores[1] == 0.0);
    CHECK(std::fabs(weights[0] - w_a) < 2e-6);
    CHECK(std::fabs(weights[1] - w_b) < 2e-6);
    CHECK(std::fabs(output[0] - 10 * w_a) < 2e-5);
    CHECK(std::fabs(output[1] - 20 * w_b) < 2e-5);
    // The article's rounded figures: [0.731, 0.269] and [7.31, 5.38].
    CHECK(std::fabs(weights[0] - 0.731) < 5e-4);
    CHECK(std::fabs(weights[1] - 0.269) < 5e-4);
    CHECK(std::fabs(output[0] - 7.31) < 5e-3);
    CHECK(std::fabs(output[1] - 5.38) < 5e-3);
    CHECK(value_of(r.out, "output rounded") == "7.3 5.4");
}

TEST_CASE("example 05_attention_by_hand: B's key as arguments; equal keys give uniform weights") {
    CHECK(value_of(run_example("05_attention_by_hand").out, "key A") == "1 0, key B: 0 1");  // the default is C3
    const test::Run r = run_example("05_attention_by_hand", "1 0");
    CHECK(value_of(r.out, "key A") == "1 0, key B: 1 0");
    // Both scores 1·1 + 0·0 = 1; softmax of equal scores is 1/2 each (exact in fp32); the output
    // is the mean of the values, [5, 10].
    CHECK(numbers(value_of(r.out, "scores")) == std::vector<double>{1.0, 1.0});
    CHECK(numbers(value_of(r.out, "weights")) == std::vector<double>{0.5, 0.5});
    CHECK(numbers(value_of(r.out, "output")) == std::vector<double>{5.0, 10.0});
    // Another key, by hand: B = [2, 0] scores 2, so the weights are softmax([1, 2]).
    const test::Run r2 = run_example("05_attention_by_hand", "2 0");
    const double e = std::exp(1.0), w_b = e / (1 + e);
    const std::vector<double> w = numbers(value_of(r2.out, "weights"));
    REQUIRE(w.size() == 2);
    CHECK(std::fabs(w[1] - w_b) < 2e-6);  // 6 decimals of an fp32 softmax
    for (const char* bad : {"1", "1 x", "1 nan"}) {
        const test::Run b = test::run(test::bin_dir() + "/05_attention_by_hand " + bad);
        CHECK(b.exit_code == 1);
        CHECK(b.err.find("error:") != std::string::npos);
    }
}

// Example 06's printed MLP steps for `args`, against layer 0 in double for position `t` of `prompt`.
static void check_example_06(const std::string& args, const std::string& prompt, int t) {
    CAPTURE(args);
    const test::Run r = run_example("06_mlp", args);
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;
    const std::vector<int> ids = test::shipped_tok().encode(prompt, true, false);
    CHECK(value_of(r.out, "prompt") == prompt + " (" + std::to_string(ids.size()) + " tokens)");
    CHECK(value_of(r.out, "position") ==
          std::to_string(t) + " (\"" + test::shipped_tok().piece(ids[static_cast<size_t>(t)]) + "\")");

    const std::vector<double> x = layer0_mlp_input_double(m, ids, t);
    const std::vector<double> gate = matvec_double(m.layers[0].w1, x), up = matvec_double(m.layers[0].w3, x);
    const auto silu = [](double g) { return g / (1 + std::exp(-g)); };
    std::vector<double> h(gate.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = silu(gate[i]) * up[i];
    const std::vector<double> out = matvec_double(m.layers[0].w2, h);
    // fp32 through norm, attention and two products vs double, values of order 1, printed with
    // 6 decimals: 1e-4.
    const double tol = 1e-4;
    const std::vector<double> x_printed = numbers(value_of(r.out, "x, first 6 of 64"));
    const std::vector<double> out_printed = numbers(value_of(r.out, "out, first 6 of 64"));
    REQUIRE(x_printed.size() == 6);
    REQUIRE(out_printed.size() == 6);
    for (int i = 0; i < 6; ++i) {
        CHECK(std::fabs(x_printed[i] - x[i]) < tol);
        CHECK(std::fabs(out_printed[i] - out[i]) < tol);
    }
    // The unit table: "unit gate silu(gate) up h" for units 0..7.
    int rows = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        const std::vector<double> v = numbers(line);
        if (v.size() != 5 || line.find(':') != std::string::npos) continue;
        const size_t i = static_cast<size_t>(v[0]);
        REQUIRE(i < gate.size());
        CHECK(std::fabs(v[1] - gate[i]) < tol);
        CHECK(std::fabs(v[2] - silu(gate[i])) < tol);
        CHECK(std::fabs(v[3] - up[i]) < tol);
        CHECK(std::fabs(v[4] - h[i]) < tol);
        ++rows;
    }
    CHECK(rows == 8);
    // Counts: a unit whose |silu(gate)| lies within 1e-5 of the threshold could go either way.
    int closed = 0, borderline = 0, negative = 0;
    size_t widest = 0;
    for (size_t i = 0; i < gate.size(); ++i) {
        const double a = std::fabs(silu(gate[i]));
        closed += a < 0.1 - 1e-5;
        borderline += std::fabs(a - 0.1) <= 1e-5;
        negative += gate[i] < 0;
        if (std::fabs(h[i]) > std::fabs(h[widest])) widest = i;
    }
    const double printed_closed = number(r.out, "units the gate nearly closes (|silu(gate)| < 0.1)");
    CHECK(printed_closed >= closed);
    CHECK(printed_closed <= closed + borderline);
    CHECK(number(r.out, "units with gate < 0") == negative);
    size_t unit = 9999;
    REQUIRE(std::sscanf(value_of(r.out, "largest |h|").c_str(), "unit %zu", &unit) == 1);
    CHECK(unit == widest);
    CHECK(numbers(value_of(r.out, "units with gate < 0")).at(1) == c.hidden_dim);  // "N of 172"
    // The library's MLP on the whole block agrees with the single-row steps (fp32 rounding only).
    CHECK(numbers(value_of(r.out, "steps vs glass::swiglu_mlp (all " + std::to_string(ids.size()) +
                                      " rows at once), max abs difference")).at(0) <= 1e-5);
    CHECK(value_of(r.out, "steps equal glass::swiglu_mlp (within 1e-5)") == "yes");
}

TEST_CASE("example 06_mlp: gate, up and SwiGLU on a real row, against layer 0 in double") {
    check_example_06("", "Once upon a time", 4);
    // Position 4 again with a word after it: causal attention and a per-row MLP give the same row.
    check_example_06("0 \"Once upon a time there\" 4", "Once upon a time there", 4);
    // Other layers run (the double reference covers layer 0 only).
    CHECK(value_of(run_example("06_mlp", "4").out, "steps equal glass::swiglu_mlp (within 1e-5)") == "yes");
    for (const char* bad : {"5", "-1", "0 \"Once\" 9", "x"}) {
        const test::Run b = test::run(test::bin_dir() + "/06_mlp " + bad);
        CHECK(b.exit_code == 1);
        CHECK(b.err.find("is not an integer") != std::string::npos);
    }
}

// Example 08 with n tokens, redone independently in double precision.
static void check_example_08(int n) {
    CAPTURE(n);
    const test::Run r = run_example("08_kv_cache_experiment", n == 3 ? "" : std::to_string(n));
    const int d = 4;
    // Both paths do the same fp32 operations on the same numbers in nearly the same order; any
    // difference is a few fp32 ulps of values of size ~1.
    CHECK(number(r.out, "max abs difference") <= 1e-6);
    CHECK(ints(lines_starting(r.out, "cache holds ").at(0)) == std::vector<int>{n});
    CHECK(ints(lines_starting(r.out, "cache holds ").at(1)) == std::vector<int>{n});
    // Without a cache step t projects t+1 tokens: 1 + 2 + ... + n; with one, one token per step.
    CHECK(number(r.out, "K/V projections without cache") == n * (n + 1) / 2);
    CHECK(number(r.out, "K/V projections with cache") == n);

    // The example draws from std::mt19937(2024), uniform floats in [-1, 1): first W_Q, W_K, W_V
    // [4,4], stored [in, out] (y = x W), then X [n,4].
    std::mt19937 rng(2024);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    double w[3][4][4];
    std::vector<std::vector<double>> x(static_cast<size_t>(n), std::vector<double>(d));
    for (auto& mat : w)
        for (auto& row : mat)
            for (double& v : row) v = uniform(rng);
    for (auto& row : x)
        for (double& v : row) v = uniform(rng);
    std::vector<std::vector<double>> q(n, std::vector<double>(d, 0.0)), k = q, v = q;
    for (int t = 0; t < n; ++t)
        for (int j = 0; j < d; ++j)
            for (int i = 0; i < d; ++i) {
                q[t][j] += x[t][i] * w[0][i][j];
                k[t][j] += x[t][i] * w[1][i][j];
                v[t][j] += x[t][i] * w[2][i][j];
            }
    const std::vector<std::string> token_lines = lines_starting(r.out, "token ");
    REQUIRE(static_cast<int>(token_lines.size()) == n);
    for (int t = 0; t < n; ++t) {
        std::vector<double> sc(t + 1), out(d, 0.0);
        double max_s = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
            sc[j] = 0;
            for (int i = 0; i < d; ++i) sc[j] += q[t][i] * k[j][i];
            sc[j] /= std::sqrt(double(d));
            max_s = std::max(max_s, sc[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (sc[j] = std::exp(sc[j] - max_s));
        for (int j = 0; j <= t; ++j)
            for (int i = 0; i < d; ++i) out[i] += sc[j] / sum * v[j][i];
        // "token t: output with cache: a b c d  | recomputed: ..." — the four after "cache:".
        const std::string line = token_lines[t];
        const std::vector<double> printed =
            numbers(line.substr(line.find("cache:") + 6, line.find('|') - line.find("cache:") - 6));
        REQUIRE(printed.size() == d);
        // fp32 vs double on O(1) values: ~1e-6; printed with 6 decimals: ±5e-7.
        for (int i = 0; i < d; ++i) CHECK(std::fabs(printed[i] - out[i]) < 1e-5);
    }
    // The K cache rows are the keys.
    for (int t = 0; t < n; ++t) {
        const std::vector<double> row = numbers(value_of(r.out, "  row " + std::to_string(t)));
        REQUIRE(row.size() == d);
        for (int i = 0; i < d; ++i) CHECK(std::fabs(row[i] - k[t][i]) < 1e-5);
    }
}

TEST_CASE("example 08_kv_cache_experiment: C4, cached attention equals recomputation") {
    check_example_08(3);
    check_example_08(5);  // the walkthrough's "Try this"
    for (const char* bad : {"0", "x", "1001"}) {
        const test::Run b = test::run(test::bin_dir() + "/08_kv_cache_experiment " + bad);
        CHECK(b.exit_code == 1);
        CHECK(b.err.find(std::string("'") + bad + "'") != std::string::npos);
    }
}

TEST_CASE("example 07_prefill: one pass fills the cache; the first token matches llama2.c") {
    const nlohmann::json g = greedy_golden("Once upon a time", 32);
    const std::vector<int> prompt_ids = test::ids_of(g["prompt_ids"]);
    const int n_prompt = static_cast<int>(prompt_ids.size());
    const test::Run r = run_example("07_prefill");

    CHECK(ints(value_of(r.out, "prompt ids")) == prompt_ids);
    CHECK(number(r.out, "cache length before prefill") == 0);
    CHECK(number(r.out, "cache length after prefill") == n_prompt);

    const int first = g["generated_ids"][0].get<int>();
    CHECK(number(r.out, "first token id") == first);
    CHECK(value_of(r.out, "first token piece") == "\"" + test::shipped_tok().piece(first) + "\"");
    // The goldens README: builds of run.c differ by up to ~2e-5 in the logits; 1e-4 absolute.
    CHECK(std::fabs(number(r.out, "first token logit") -
                    g["first_logits_top5"]["values_f32_exact"][0].get<double>()) < 1e-4);
    CHECK(value_of(r.out, "first token cached").rfind("no", 0) == 0);
    CHECK(number(r.out, "its K/V will be written at position") == n_prompt);

    // Every layer: n_prompt rows written, row n_prompt still zero.
    const glass::Model& m = test::shipped();
    const std::vector<std::string> layers = lines_starting(r.out, "layer ");
    REQUIRE(static_cast<int>(layers.size()) == m.config.n_layers);
    for (const std::string& line : layers) {
        int layer = -1, written = -1, r0 = -1, rl = -1, rn = -1, vn = -1;
        double k0 = -1, kl = -1, kn = -1, v_n = -1;
        REQUIRE(std::sscanf(line.c_str(),
                            "layer %d: rows written %d, |K row %d| %lf, |K row %d| %lf, |K row %d| "
                            "%lf, |V row %d| %lf",
                            &layer, &written, &r0, &k0, &rl, &kl, &rn, &kn, &vn, &v_n) == 10);
        CHECK(written == n_prompt);
        CHECK(rl == n_prompt - 1);
        CHECK(rn == n_prompt);
        CHECK(k0 > 0);
        CHECK(kl > 0);
        CHECK(kn == 0);
        CHECK(v_n == 0);
        if (layer == 0) {
            // Layer 0's K row 0 by hand from the weights: position 0 is BOS, RoPE at position 0
            // is the identity, so k = W_K · rmsnorm(embedding[BOS]). Printed with 4 decimals.
            const int dim = m.config.dim;
            const float* e = m.token_embedding + std::int64_t{prompt_ids[0]} * dim;
            double ss = 0;
            for (int i = 0; i < dim; ++i) ss += double(e[i]) * e[i];
            const double inv_rms = 1.0 / std::sqrt(ss / dim + m.config.norm_eps);
            double norm2 = 0;
            for (int o = 0; o < m.config.kv_dim(); ++o) {
                double kv = 0;
                for (int i = 0; i < dim; ++i)
                    kv += double(m.layers[0].wk(o, i)) * m.layers[0].rms_att(i) * e[i] * inv_rms;
                norm2 += kv * kv;
            }
            CHECK(std::fabs(k0 - std::sqrt(norm2)) < 1e-3);
        }
    }

    // One product by loops: layer 0's K = xn Wkᵀ before RoPE, row n-1, in double from the weights.
    const int dim = m.config.dim, kv_dim = m.config.kv_dim();
    CHECK(value_of(r.out, "K = xn Wk^T of layer 0, by loops") ==
          "[" + std::to_string(n_prompt) + ", " + std::to_string(dim) + "] x [" + std::to_string(dim) + ", " +
              std::to_string(kv_dim) + "] -> [" + std::to_string(n_prompt) + ", " + std::to_string(kv_dim) + "], " +
              std::to_string(n_prompt * kv_dim * dim) + " multiply-adds");
    const std::vector<double> xn = rmsnorm_double(embedding_double(m, prompt_ids.back()), m.layers[0].rms_att, m.config.norm_eps);
    const std::vector<double> k_last = matvec_double(m.layers[0].wk, xn);
    const std::string row = "K row " + std::to_string(n_prompt - 1) + " first 4, ";
    for (const std::string how : {"loops", "Eigen"}) {
        const std::vector<double> printed = numbers(value_of(r.out, row + how));
        REQUIRE(printed.size() == 4);
        for (int o = 0; o < 4; ++o) CHECK(std::fabs(printed[o] - k_last[o]) < 1e-4);  // fp32, 6 decimals
    }
    // Same products, possibly summed in another order: rounding only (values ~1, 64 terms).
    CHECK(number(r.out, "loops vs Eigen, max abs difference") <= 1e-5);
    CHECK(value_of(r.out, "loops equal Eigen (within 1e-5)") == "yes");
}

// C6 for two prompts, computed here with two sessions of our own: per layer, how many numbers of
// rows before the first differing id are bitwise equal, and how many of the later rows differ.
static void check_example_07_c6(const std::string& args, const std::vector<int>& a, const std::vector<int>& b) {
    CAPTURE(args);
    const test::Run r = run_example("07_prefill", args);
    REQUIRE(a.size() == b.size());
    const int n = static_cast<int>(a.size());
    int first = 0;
    while (first < n && a[first] == b[first]) ++first;
    CHECK(ints(value_of(r.out, "C6 other prompt ids")) == b);
    CHECK(number(r.out, "C6 first position where the ids differ") == first);
    const glass::Model& m = test::shipped();
    glass::CpuSession sa(m), sb(m);
    sa.prefill(a);
    sb.prefill(b);
    const int kv_dim = m.config.kv_dim();
    bool all_earlier_equal = true;
    for (int layer = 0; layer < m.config.n_layers; ++layer) {
        int same_k = 0, same_v = 0, changed_k = 0, changed_v = 0;
        for (int row = 0; row < n; ++row)
            for (int i = 0; i < kv_dim; ++i) {
                const bool k_eq = sa.cache().keys(layer, n)(row, i) == sb.cache().keys(layer, n)(row, i);
                const bool v_eq = sa.cache().values(layer, n)(row, i) == sb.cache().values(layer, n)(row, i);
                if (row < first) {
                    same_k += k_eq;
                    same_v += v_eq;
                } else {
                    changed_k += !k_eq;
                    changed_v += !v_eq;
                }
            }
        const int before = first * kv_dim, after = (n - first) * kv_dim;
        all_earlier_equal &= same_k == before && same_v == before;
        char want[200];
        std::snprintf(want, sizeof want,
                      "rows 0..%d unchanged K %d of %d, V %d of %d; rows %d..%d changed K %d of %d, V %d of %d",
                      first - 1, same_k, before, same_v, before, first, n - 1, changed_k, after, changed_v, after);
        CHECK(value_of(r.out, "C6 layer " + std::to_string(layer)) == want);
        // The row that changed token is new in every layer, K and V alike.
        CHECK(changed_k >= kv_dim);
        CHECK(changed_v >= kv_dim);
    }
    CHECK(all_earlier_equal);  // C6 itself
    CHECK(value_of(r.out, "C6 rows 0.." + std::to_string(first - 1) + " bitwise identical in every layer") ==
          (all_earlier_equal ? "yes" : "no"));
}

TEST_CASE("example 07_prefill: C6, a changed token leaves every earlier K and V row of every layer unchanged") {
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    const std::vector<int> prompt = tok.encode("Once upon a time", true, false);
    // The default other prompt: the last token swapped for " day".
    std::vector<int> last_changed = prompt;
    last_changed.back() = tok.find(" day");
    REQUIRE(last_changed.back() >= 0);
    REQUIRE(last_changed.back() != prompt.back());
    check_example_07_c6("", prompt, last_changed);
    // A middle token: " the" for " a" at position 3, the same " time" after it.
    check_example_07_c6("\"Once upon a time\" \"Once upon the time\"", prompt,
                        tok.encode("Once upon the time", true, false));
    // Prompts of different lengths are refused, naming both lengths.
    const test::Run bad = test::run(test::bin_dir() + "/07_prefill \"Once upon a time\" \"Once upon a time there\"");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("6 tokens, the prompt 5") != std::string::npos);
}

}  // namespace test_examples_model
