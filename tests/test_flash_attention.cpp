// FlashAttention on the CPU (flash_attention.hpp, fast/fast_flash_attention.hpp): the same output
// as causal_attention (attention.hpp) for prefill, decode and any chunk, every GQA ratio, tiles
// that do not divide the lengths, tiles wholly after the diagonal and rows that see nothing in a
// tile; scores large enough to overflow exp without the running maximum; what it counts.
#include <doctest/doctest.h>

#include <cstdio>
#include <random>
#include <sstream>

#include "glass/fast/random_model.hpp"
#include "glass/fast/fast_flash_attention.hpp"
#include "glass/flash_attention.hpp"
#include "relative_error.hpp"
#include "test_support.hpp"

namespace test_flash_attention {  // this file's own names (tests are built in unity batches)

namespace {

double error(const glass::RowMatrix& got, const glass::RowMatrix& want) {
    return test::relative_error({got.data(), static_cast<size_t>(got.size())},
                                {want.data(), static_cast<size_t>(want.size())});
}

struct Case {
    int n_heads, n_kv_heads, head_dim, start_pos, n_q;
};

// Prefill (start 0), decode (n_q 1) and chunks, over the GQA ratios of pitfall 3: 1 (MHA), 2,
// 4, 7, 3 and MQA; lengths that are not multiples of any tile below.
const Case kCases[] = {
    {4, 4, 8, 0, 37},   {4, 2, 16, 0, 64},  {8, 2, 8, 0, 100},  {7, 1, 8, 0, 29},   {28, 4, 4, 0, 21},
    {9, 3, 8, 0, 50},   {4, 4, 8, 199, 1},  {8, 1, 16, 130, 1}, {4, 2, 8, 37, 19},  {6, 3, 32, 64, 64},
    {2, 1, 64, 5, 3},   {1, 1, 8, 0, 1},
};

// Tiles: one position each, odd sizes, the defaults, and tiles larger than everything.
const glass::FlashTiles kTiles[] = {{1, 1}, {7, 5}, {16, 32}, {3, 64}, {128, 128}};

}  // namespace

TEST_CASE("flash_attention equals causal_attention: prefill, decode, chunks, every GQA ratio, any tiles") {
    // Both sides are fp32 from the same inputs; only the order of the sums differs (the online
    // softmax rescales partial sums and divides at the end). 1e-5 is the rule for fp32 vs fp32;
    // the errors seen are ~1e-7.
    std::mt19937 rng(7);
    double worst = 0;
    for (const Case& c : kCases) {
        const glass::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
        const int n_k = c.start_pos + c.n_q;
        const glass::RowMatrix q = glass::fast::random_normal_matrix(c.n_q, c.n_heads * c.head_dim, rng);
        const glass::RowMatrix k = glass::fast::random_normal_matrix(n_k, c.n_kv_heads * c.head_dim, rng);
        const glass::RowMatrix v = glass::fast::random_normal_matrix(n_k, c.n_kv_heads * c.head_dim, rng);
        const float scale = 1.0f / std::sqrt(float(c.head_dim));
        const glass::RowMatrix want = glass::causal_attention(q, k, v, c.start_pos, shape, scale);
        glass::fast::ThreadPool pool(2);
        for (const glass::FlashTiles t : kTiles) {
            CAPTURE(c.n_heads);
            CAPTURE(c.n_kv_heads);
            CAPTURE(c.start_pos);
            CAPTURE(c.n_q);
            CAPTURE(t.q);
            CAPTURE(t.k);
            glass::FlashCounts counts;
            const glass::RowMatrix got = glass::flash_attention(q, k, v, c.start_pos, shape, scale, t, &counts);
            CHECK(error(got, want) <= 1e-5);
            worst = std::max(worst, error(got, want));
            // Every (head, query tile, key tile) is either computed or skipped, never both.
            const std::int64_t q_tiles = (c.n_q + t.q - 1) / t.q, k_tiles = (n_k + t.k - 1) / t.k;
            CHECK(counts.tiles_computed + counts.tiles_skipped == c.n_heads * q_tiles * k_tiles);
            CHECK(counts.scratch_floats == std::int64_t{t.q} * t.k + std::int64_t{t.q} * (c.head_dim + 2));

            // The fast version needs whole rows of 4 only in its kernel calls; any tile works.
            for (const glass::fast::KernelSet set : glass::fast::available_kernel_sets()) {
                const glass::fast::Kernels kernels = glass::fast::kernels_of(set);
                CAPTURE(kernels.name);
                glass::RowMatrix fast(c.n_q, c.n_heads * c.head_dim);
                fast.setConstant(std::nanf(""));  // every output must be written
                glass::fast::flash_attention(q.data(), q.cols(), k.data(), v.data(), k.cols(), c.n_q, c.start_pos,
                                             shape, scale, fast.data(), fast.cols(), pool, kernels, t);
                CHECK(error(fast, want) <= 1e-5);
            }
        }
    }
    MESSAGE("largest relative error, flash vs three-step: " << worst);
}

TEST_CASE("prefill skips exactly the tiles after the diagonal; decode skips none") {
    std::mt19937 rng(3);
    const glass::AttentionShape shape{2, 1, 8};
    // Prefill of 64 positions in 16 x 16 tiles: query tile i sees key tiles 0..i, so per head
    // 1 + 2 + 3 + 4 = 10 computed, 6 skipped; 10 · 256 scores each.
    const glass::RowMatrix q = glass::fast::random_normal_matrix(64, 16, rng), k = glass::fast::random_normal_matrix(64, 8, rng), v = glass::fast::random_normal_matrix(64, 8, rng);
    glass::FlashCounts c;
    glass::flash_attention(q, k, v, 0, shape, 0.3f, {16, 16}, &c);
    CHECK(c.tiles_computed == 2 * 10);
    CHECK(c.tiles_skipped == 2 * 6);
    CHECK(c.scores_computed == 2 * 10 * 256);
    // Decode at position 63: one query sees all 64 keys, in 4 tiles.
    glass::flash_attention(q.bottomRows(1), k, v, 63, shape, 0.3f, {16, 16}, &c);
    CHECK(c.tiles_computed == 2 * 4);
    CHECK(c.tiles_skipped == 0);
    // The three-step version's score traffic: [2 heads, 64, 64] fp32, written, read, written, read.
    CHECK(glass::naive_score_bytes(2, 64, 64) == 4 * 4 * 2 * 64 * 64);
}

TEST_CASE("scores that would overflow exp stay finite (pitfall 8): the running maximum is subtracted") {
    // Scores of several hundred: exp(300) is inf in fp32. The row maximum moves up across tiles
    // (keys grow), so every correction factor is exercised.
    std::mt19937 rng(11);
    const glass::AttentionShape shape{2, 2, 4};
    glass::RowMatrix q = glass::fast::random_normal_matrix(20, 8, rng, 10.0f), k = glass::fast::random_normal_matrix(20, 8, rng, 10.0f);
    for (int j = 0; j < 20; ++j) k.row(j) *= 1.0f + 0.2f * float(j);
    const glass::RowMatrix v = glass::fast::random_normal_matrix(20, 8, rng);
    const glass::RowMatrix want = glass::causal_attention(q, k, v, 0, shape, 1.0f);
    const glass::RowMatrix got = glass::flash_attention(q, k, v, 0, shape, 1.0f, {4, 3});
    CHECK(got.allFinite());
    CHECK(error(got, want) <= 1e-5);
    CHECK((q.leftCols(4) * k.leftCols(4).transpose()).cwiseAbs().maxCoeff() > 200.0f);  // the test is what it says
}

TEST_CASE("flash attention refuses bad shapes and tiles, naming them") {
    const glass::RowMatrix q(4, 8), kv(4, 8);
    CHECK_THROWS_WITH_AS(glass::flash_attention(q, kv, kv, 0, {2, 2, 4}, 1.0f, {0, 4}),
                         doctest::Contains("tile sizes must be >= 1, got 0 x 4"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::flash_attention(q, kv, kv, 1, {2, 2, 4}, 1.0f),
                         doctest::Contains("4 cached keys for 4 queries starting at 1"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::flash_attention(q, kv, kv, 0, {3, 2, 4}, 1.0f),
                         doctest::Contains("not a multiple of n_kv_heads 2"), glass::Error);
    glass::fast::ThreadPool pool(1);
    glass::RowMatrix out(4, 8);
    CHECK_THROWS_WITH_AS(glass::fast::flash_attention(q.data(), 8, kv.data(), kv.data(), 8, 4, 0, {2, 2, 4}, 1.0f,
                                                      out.data(), 8, pool, glass::fast::portable_kernels(), {4, -1}),
                         doctest::Contains("tile sizes must be >= 1, got 4 x -1"), glass::Error);
}

namespace {

std::vector<float> floats_after(const std::string& out, const std::string& label) {
    std::istringstream in(test::value_of(out, label));
    std::vector<float> v;
    for (float x; in >> x;) v.push_back(x);
    return v;
}

}  // namespace

TEST_CASE("example 23_flash_attention: the online softmax walk, the errors, tile counts and bytes as computed here") {
    const std::string svg_path = test::temp_dir("flash") + "/chart.svg";
    const std::string out = test::run_example("23_flash_attention", "3 " + svg_path).out;

    // 1. Redo the walk from the printed scores and values: each tile's running max, sum and output.
    const std::vector<float> scores = floats_after(out, "scores"), values = floats_after(out, "values");
    REQUIRE(scores.size() == 8);
    REQUIRE(values.size() == 8);
    double m = -INFINITY, l = 0, o = 0;
    for (int j0 = 0, t = 1; j0 < 8; j0 += 3, ++t) {
        const int j1 = std::min(j0 + 3, 8);
        double m_new = m;
        for (int j = j0; j < j1; ++j) m_new = std::max(m_new, double(scores[size_t(j)]));
        l *= std::exp(m - m_new);
        o *= std::exp(m - m_new);
        for (int j = j0; j < j1; ++j) {
            l += std::exp(scores[size_t(j)] - m_new);
            o += std::exp(scores[size_t(j)] - m_new) * values[size_t(j)];
        }
        m = m_new;
        const std::string line = test::value_of(out, "tile " + std::to_string(t) + " (keys " + std::to_string(j0) + "-" +
                                                         std::to_string(j1 - 1) + ")");
        CAPTURE(line);
        float pm = 0, pc = 0, pl = 0, po = 0, pr = 0;
        REQUIRE(std::sscanf(line.c_str(), "m = %f, correction = %f, l = %f, o = %f, o / l = %f", &pm, &pc, &pl, &po, &pr) == 5);
        CHECK(pm == doctest::Approx(m).epsilon(1e-5));
        CHECK(pl == doctest::Approx(l).epsilon(1e-5));
        CHECK(po == doctest::Approx(o).epsilon(1e-5));
    }
    double softmax_sum = 0, weighted = 0;
    for (size_t j = 0; j < 8; ++j) softmax_sum += std::exp(scores[j] - m);
    for (size_t j = 0; j < 8; ++j) weighted += std::exp(scores[j] - m) / softmax_sum * values[j];
    CHECK(test::number(out, "online result o / l") == doctest::Approx(weighted).epsilon(1e-5));
    CHECK(test::number(out, "three-step result (softmax, then the weighted sum)") == doctest::Approx(weighted).epsilon(1e-5));

    // 2. The errors, and the tile counts of a 300-position prefill in 16 x 32 tiles, 12 heads.
    for (const char* label : {"prefill of 300 positions, relative error", "chunk of 64 positions after 200, relative error",
                              "decode at position 511, relative error"}) {
        CAPTURE(label);
        CHECK(test::number(out, label) <= 1e-5);
    }
    long long computed = 0, scores_computed = 0;
    for (int i0 = 0; i0 < 300; i0 += 16) {
        const int last = std::min(i0 + 16, 300) - 1;  // the tile's last row sees keys 0..last
        for (int j0 = 0; j0 <= last; j0 += 32) {
            ++computed;
            scores_computed += (std::min(i0 + 16, 300) - i0) * (std::min(j0 + 32, 300) - j0);
        }
    }
    CHECK(test::number(out, "prefill tiles computed") == 12 * computed);
    CHECK(test::number(out, "prefill tiles skipped (after the diagonal)") == 12 * 19 * 10 - 12 * computed);
    CHECK(test::number(out, "prefill scores computed") == 12 * scores_computed);
    CHECK(test::number(out, "scratch floats held at once") == 16 * 32 + 16 * (64 + 2));

    // 3. Bytes: S of [12, 8192, 8192] fp32, four passes; the tiled scratch of 64 x 64 tiles.
    CHECK(test::number(out, "stories110M three-step MB at 8192") == doctest::Approx(16.0 * 12 * 8192 * 8192 / 1e6).epsilon(1e-4));
    CHECK(test::number(out, "tiled scratch bytes per worker") == 4 * (64 * 64 + 64 * 66));
    const std::string svg = test::read_file(svg_path);
    CHECK(svg.find("data-figure=\"C19\"") != std::string::npos);
    CHECK(svg.find("data-heads=\"12\"") != std::string::npos);
    CHECK(svg.find("data-heads=\"32\"") != std::string::npos);
    CHECK(svg.find("data-scratch-bytes=\"33280\"") != std::string::npos);

    // One tile of all 8 keys: no correction ever applies, and the walk is the three-step sum.
    const std::string one_tile = test::run_example("23_flash_attention", "8 " + svg_path).out;
    CHECK(test::value_of(one_tile, "tile 1 (keys 0-7)").find("correction = 0.000000") != std::string::npos);
    CHECK(test::number(one_tile, "online result o / l") == doctest::Approx(weighted).epsilon(1e-5));
    for (const std::string bad_args : {"0", "9", "x", "3 a b"}) {
        CAPTURE(bad_args);
        const test::Run bad = test::run(test::bin_dir() + "/23_flash_attention " + bad_args);
        CHECK(bad.exit_code == 1);
        CHECK((bad.err.find("TILE") != std::string::npos || bad.err.find("usage: 23_flash_attention") != std::string::npos));
    }
}

}  // namespace test_flash_attention
