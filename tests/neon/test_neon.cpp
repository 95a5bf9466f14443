// The kernel sets of an AArch64 CPU (portable and neon, kernels_neon.hpp), each checked against
// the portable loops, then the fast path's greedy goldens with each set forced. Cross-compiled
// and run under qemu-aarch64 by tests/neon/run.sh (ctest neon_qemu); it also builds and passes
// on x86-64, where it checks whichever sets that CPU runs.
//
// Only the fast path's headers are included: glass.hpp would bring the tokenizers' regular
// expressions (PCRE2) and Unicode tables (utf8proc), libraries with no AArch64 build here. The
// goldens carry their token ids, so no text is tokenized; the engine's Llama2cTokenizer (header
// only) turns ids back into text.
//
// Sizes are those of tests/test_fast_cpu.cpp's kernel tests (odd on purpose: a padded last
// panel, a partial Q8 block, a partial 256-input chunk, uneven token tiles, head_dim tails),
// kept small because qemu runs ~10-30× slower than the host.
#include <doctest/doctest.h>  // main(): tests/doctest_main.cpp

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/checkpoint.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/kv_cache.hpp"
#include "glass/quantize.hpp"
#include "glass/sampling.hpp"
#include "glass/serve/engine.hpp"
#include "glass/tokenizer.hpp"

namespace {

using glass::fast::FastCpuSession;
using glass::fast::FastOptions;
using glass::fast::Kernels;
using glass::fast::WeightType;

// max |a − b| / max |b| (test_fast_cpu.cpp's measure): error relative to the scale of the
// outputs. Two fp32 evaluations that sum the same products in another order differ by a few ulps
// of the largest partial sums; 1e-5 (≈ 80 ulps) bounds that for these sizes, while a real bug (a
// wrong row, a lane of padding, an off-by-one) moves outputs at the 1e-2 .. 1 level.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return diff / scale;
}

std::vector<float> random_vector(size_t n, std::uint64_t seed) {
    glass::fast::RandomFloats rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = rng.next();
    return v;
}

const WeightType kAllTypes[] = {WeightType::fp32, WeightType::fp16, WeightType::bf16, WeightType::q8_0,
                                WeightType::q4_0};

// Every set this CPU runs except the reference itself: the ones to check against portable.
std::vector<Kernels> sets_under_test() {
    std::vector<Kernels> out;
    for (glass::fast::KernelSet s : glass::fast::available_kernel_sets())
        if (s != glass::fast::KernelSet::portable) out.push_back(glass::fast::kernels_of(s));
    return out;
}
// Every set this CPU runs, portable first (the goldens run on each).
std::vector<std::string> set_names() {
    std::vector<std::string> out;
    for (glass::fast::KernelSet s : glass::fast::available_kernel_sets()) out.emplace_back(glass::fast::to_string(s));
    return out;
}

std::string models_dir() { return GLASS_MODELS_DIR; }
std::string golden(const std::string& name) { return std::string(GLASS_SHARED_DIR) + "/goldens/" + name; }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "missing ground-truth file " << path);
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    REQUIRE_MESSAGE(!rows.empty(), "empty ground-truth file " << path);
    return rows;
}

const glass::Model& shipped() {
    static const glass::Model model = glass::load_llama2c_checkpoint(models_dir() + "/stories260K.bin");
    return model;
}

}  // namespace

TEST_CASE("kernels: the sets this CPU runs, and which integer dot product the neon set took") {
    const std::vector<std::string> names = set_names();
    std::string list;
    for (const auto& n : names) list += n + " ";
    MESSAGE("CPU features: " << glass::fast::cpu_feature_list() << "; kernel sets: " << list
            << "; best: " << std::string(glass::fast::best_kernels().name));
    CHECK(names.front() == "portable");
#if defined(__aarch64__)
    REQUIRE(names.back() == "neon");
    const Kernels neon = glass::fast::kernels_of("neon");
    CHECK(neon.fma_lanes == 4);
#if defined(GLASS_NEON_DOT)
    CHECK((std::string(neon.int8_dot) == "neon-dot") == glass::fast::neon_has_dotprod());
#else  // a compiler that built no sdot kernel (kernels_neon.hpp)
    CHECK(std::string(neon.int8_dot) == "portable");
#endif
    CHECK(glass::fast::cpu_feature_list() == (glass::fast::neon_has_dotprod() ? "neon dotprod" : "neon"));
    MESSAGE("neon set: matvec_int8 = " << std::string(neon.int8_dot));
    // run.sh says what the emulated CPU should have: qemu's default "max" has dotprod, cortex-a53 not.
    if (const char* want = std::getenv("GLASS_NEON_EXPECT_INT8_DOT")) CHECK(std::string(neon.int8_dot) == want);
#endif
}

TEST_CASE("kernels: matrix–vector and matrix–matrix products equal the plain loops, all 5 weight types") {
    const auto plain = glass::fast::portable_kernels();
    // Odd sizes: a padded last panel (77 = 2·32 + 13), a partial Q8 block and a partial 256-input
    // chunk (300 = 256 + 44), uneven token tiles (29 → 9,10,10; 13 → 6,7; 64 → 10,11,11,10,11,11).
    const int rows = 77, cols = 300, n_max = 64;
    const auto w = random_vector(size_t(rows) * cols, 2);
    const auto x = random_vector(size_t(n_max) * cols, 3);
    alignas(64) static float scratch[glass::fast::kScratchFloats];
    for (const Kernels& fast : sets_under_test()) {
        CAPTURE(std::string(fast.name));
        for (WeightType type : kAllTypes) {
            CAPTURE(std::string(glass::fast::to_string(type)));
            std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)) + 64, 0);
            auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + 63) / 64 * 64);
            const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, aligned);
            for (bool accumulate : {false, true}) {
                CAPTURE(accumulate);
                for (int n : {2, 13, 29, n_max}) {
                    CAPTURE(n);
                    std::vector<float> packed(size_t(n) * cols), y_want(size_t(n) * rows, 0.5f);
                    glass::fast::pack_tokens(x.data(), cols, n, cols, packed.data());
                    for (int t = 0; t < n; ++t)
                        plain.matvec(m, x.data() + t * cols, y_want.data() + t * rows, 0, m.panels(), accumulate);
                    // ldy = rows + 3: rows of y further apart than the matrix is tall; the gaps keep 9.
                    const long ldy = rows + 3;
                    std::vector<float> y_fast(size_t(n) * ldy, 9.0f);
                    for (int t = 0; t < n; ++t) std::fill_n(y_fast.begin() + t * ldy, rows, 0.5f);
                    fast.matmul(m, packed.data(), n, y_fast.data(), ldy, 0, m.panels(), accumulate, scratch);
                    std::vector<float> y_got(size_t(n) * rows);
                    bool gaps_kept = true;
                    for (int t = 0; t < n; ++t) {
                        std::copy_n(y_fast.begin() + t * ldy, rows, y_got.begin() + t * rows);
                        for (int r = rows; r < ldy; ++r) gaps_kept = gaps_kept && y_fast[size_t(t * ldy + r)] == 9.0f;
                    }
                    CHECK(gaps_kept);
                    CHECK(relative_error(y_got, y_want) < 1e-5);  // same products, another summation order
                    if (n == 13) {
                        // A token's row does not depend on the tokens beside it (the paged backend's
                        // batch invariance): token 7 alone gives the very bits it got among 13.
                        std::vector<float> alone(size_t(rows), 0.5f), x7(x.begin() + 7 * cols, x.begin() + 8 * cols);
                        fast.matmul(m, x7.data(), 1, alone.data(), rows, 0, m.panels(), accumulate, scratch);
                        CHECK(std::equal(alone.begin(), alone.end(), y_got.begin() + 7 * rows));
                    }
                }
                // Decode: panels [1, 3) only (the rows of others are not written).
                std::vector<float> v_fast(size_t(rows), 0.5f), v_plain(size_t(rows), 0.5f);
                fast.matvec(m, x.data(), v_fast.data(), 1, m.panels(), accumulate);
                plain.matvec(m, x.data(), v_plain.data(), 1, m.panels(), accumulate);
                CHECK(std::all_of(v_fast.begin(), v_fast.begin() + 32, [](float v) { return v == 0.5f; }));
                CHECK(relative_error(v_fast, v_plain) < 1e-5);
            }
        }
    }
}

// Int8 activations: exact int32 sums per block (sdot or the plain loop), so each set equals
// quantize.hpp's quantized_dot_int8 up to the order of the fp32 additions over blocks.
TEST_CASE("kernels: matvec_int8 equals quantized_dot_int8 on every set") {
    const int rows = 77, cols = 300;  // a padded last panel, a partial block of 12
    const auto w = random_vector(size_t(rows) * cols, 2), x = random_vector(size_t(cols), 3);
    const int blocks = (cols + 31) / 32;
    std::vector<std::int8_t> xq(size_t(blocks) * 32, 99);
    std::vector<float> xs(static_cast<size_t>(blocks));
    glass::quantize_activations(x.data(), cols, xq.data(), xs.data());
    std::vector<std::int32_t> sums(size_t(blocks), 0);
    for (int i = 0; i < blocks * 32; ++i) sums[size_t(i / 32)] += xq[size_t(i)];
    const glass::fast::Int8Vector x8{xq.data(), xs.data(), sums.data()};
    std::vector<Kernels> sets = sets_under_test();
    sets.push_back(glass::fast::portable_kernels());
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)), 0);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, buf.data());
        const glass::QuantizedMatrix qm = glass::quantize(w.data(), rows, cols, glass::fast::quant_format_of(type));
        std::vector<float> want(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) want[size_t(r)] = 0.5f + glass::quantized_dot_int8(qm, r, xq.data(), xs.data());
        for (const Kernels& k : sets) {
            CAPTURE(std::string(k.name) + " / " + k.int8_dot);
            std::vector<float> y(size_t(rows), 0.5f);
            k.matvec_int8(m, x8, y.data(), 0, m.panels(), true);  // accumulate onto 0.5
            CHECK(relative_error(y, want) < 1e-5);
            std::vector<float> y_set(size_t(rows), 7.0f);
            k.matvec_int8(m, x8, y_set.data(), 0, m.panels(), false);
            for (float& v : y_set) v += 0.5f;
            CHECK(relative_error(y_set, want) < 1e-5);
        }
    }
}

TEST_CASE("kernels: decode attention over a run of cached rows equals the plain loops, and one run at a time bit for bit") {
    const auto plain = glass::fast::portable_kernels();
    for (const Kernels& fast : sets_under_test())
        // head_dim 8 and 48 leave partial 16-float blocks, 64 fills four, 80 spills into a fifth.
        for (int hd : {8, 48, 64, 80}) {
            CAPTURE(std::string(fast.name));
            CAPTURE(hd);
            const int n_rows = 21;
            const long ld = hd + 13;  // rows of a cache are further apart than one head
            const auto q = random_vector(size_t(hd), 21), rows = random_vector(size_t(n_rows * ld), 22);
            const auto p = random_vector(size_t(n_rows), 23);
            std::vector<float> s_fast(n_rows), s_plain(n_rows);
            fast.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_fast.data());
            plain.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_plain.data());
            CHECK(relative_error(s_fast, s_plain) < 1e-5);  // same products, another summation order
            // The weighted sum: y starts at 0.5 (it accumulates); lanes past hd keep a sentinel.
            std::vector<float> y_fast(size_t(hd) + 16, 0.5f), y_plain = y_fast, y_split = y_fast;
            for (int d = hd; d < hd + 16; ++d) y_fast[size_t(d)] = y_plain[size_t(d)] = y_split[size_t(d)] = 7.0f;
            fast.add_rows(y_fast.data(), p.data(), rows.data(), ld, n_rows, hd);
            plain.add_rows(y_plain.data(), p.data(), rows.data(), ld, n_rows, hd);
            CHECK(relative_error(y_fast, y_plain) < 1e-5);
            // Runs of 1, 5 and 15 rows (blocks of a paged cache): the same bits, each element being
            // one FMA chain over the rows in order however they are cut.
            for (int j0 : {0, 1, 6})
                fast.add_rows(y_split.data(), p.data() + j0, rows.data() + j0 * ld, ld, j0 == 0 ? 1 : j0 == 1 ? 5 : 15, hd);
            CHECK(y_split == y_fast);
        }
}

// An int8 KV cache's rows in fp32 must be exactly the reference's (dequantize_kv_row: one fp32
// product s · q each), on every set, for every head_dim tail.
TEST_CASE("kernels: dequantize_rows gives dequantize_kv_row's values bit for bit") {
    std::vector<Kernels> sets = sets_under_test();
    sets.push_back(glass::fast::portable_kernels());
    for (const Kernels& k : sets)
        for (int hd : {8, 48, 64, 80}) {
            CAPTURE(std::string(k.name));
            CAPTURE(hd);
            const int n_rows = 21, G = 3, g = 1;  // rows hold 3 KV heads; head 1 is read
            const long ld = long{G} * hd;
            const auto x = random_vector(size_t(n_rows * ld), 24);
            std::vector<std::int8_t> rows(x.size());
            std::vector<float> scales(size_t(n_rows * G)), want(x.size());
            for (int r = 0; r < n_rows; ++r) {
                glass::quantize_kv_row(x.data() + r * ld, G, hd, rows.data() + r * ld, scales.data() + r * G);
                glass::dequantize_kv_row(rows.data() + r * ld, scales.data() + r * G, G, hd, want.data() + r * ld);
            }
            std::vector<float> got(size_t(n_rows * hd) + 16, 7.0f);  // 7: nothing past the rows is written
            k.dequantize_rows(rows.data() + g * hd, ld, scales.data() + g, G, n_rows, hd, got.data());
            bool equal = true;
            for (int r = 0; r < n_rows; ++r)
                for (int i = 0; i < hd; ++i) equal = equal && got[size_t(r * hd + i)] == want[size_t(r * ld + g * hd + i)];
            CHECK(equal);
            CHECK(std::all_of(got.end() - 16, got.end(), [](float v) { return v == 7.0f; }));
        }
}

TEST_CASE("kernels: prefill attention tiles equal the plain loops (tails in rows, keys, head_dim)") {
    const auto plain = glass::fast::portable_kernels();
    for (const Kernels& fast : sets_under_test())
        // key counts 1, 17 and 70 leave partial 4-key registers and a partial 16-key block
        for (int hd : {8, 48, 64, 80})
            for (int n_keys : {1, 17, 70})
                for (int m = 1; m <= glass::fast::kAttentionRows; ++m) {
                    CAPTURE(std::string(fast.name));
                    CAPTURE(hd);
                    CAPTURE(n_keys);
                    CAPTURE(m);
                    const long ldq = hd + 3, ldkt = n_keys + 5, lds = n_keys + 7, ldv = hd + 9, ldo = hd + 2;
                    const auto q = random_vector(size_t(m * ldq), 11), kt = random_vector(size_t(hd * ldkt), 12);
                    const auto v = random_vector(size_t(n_keys * ldv), 13);
                    // Outputs start at a sentinel: entries past each row's end must keep it.
                    std::vector<float> s_fast(size_t(m * lds), 7.0f), s_plain = s_fast;
                    fast.attention_scores(q.data(), ldq, m, kt.data(), ldkt, n_keys, hd, 0.125f, s_fast.data(), lds);
                    plain.attention_scores(q.data(), ldq, m, kt.data(), ldkt, n_keys, hd, 0.125f, s_plain.data(), lds);
                    CHECK(relative_error(s_fast, s_plain) < 1e-5);
                    std::vector<float> o_fast(size_t(m * ldo), 7.0f), o_plain = o_fast;
                    fast.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_fast.data(), ldo);
                    plain.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_plain.data(), ldo);
                    CHECK(relative_error(o_fast, o_plain) < 1e-5);
                }
}

TEST_CASE("kernels: softmax, silu_mul, exp_shift and row_max equal the scalar definitions (std::exp)") {
    const auto plain = glass::fast::portable_kernels();
    for (const Kernels& fast : sets_under_test()) {
        CAPTURE(std::string(fast.name));
        auto a = random_vector(83, 4), b = random_vector(83, 5);  // 83 = 20 registers + 3
        for (float& v : a) v *= 30;  // scores and gates span e^±30
        auto s_fast = a, s_plain = a;
        fast.softmax(s_fast.data(), 83);
        plain.softmax(s_plain.data(), 83);
        CHECK(relative_error(s_fast, s_plain) < 1e-5);  // exp4: ~1e-7 relative per value
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
        for (size_t i = 0; i < xs.size(); ++i)
            worst = std::max(worst, std::fabs(double(e[i]) / std::exp(double(xs[i])) - 1.0));
        MESSAGE(std::string(fast.name) << ": e^x over [-80, 80], worst relative error " << worst);
        CHECK(worst < 1e-6);
        // FlashAttention's step: e^(x − shift) over the first n (a tail of 3), the sum; x[n] untouched.
        const float shift = *std::max_element(a.begin(), a.end());
        auto e_fast = a, e_plain = a;
        e_fast.push_back(5.0f);
        const float sum_fast = fast.exp_shift(e_fast.data(), 83, shift), sum_plain = plain.exp_shift(e_plain.data(), 83, shift);
        CHECK(e_fast.back() == 5.0f);
        e_fast.pop_back();
        CHECK(relative_error(e_fast, e_plain) < 1e-5);
        CHECK(sum_fast == doctest::Approx(sum_plain).epsilon(1e-5));
        // The tile maximum over the first n of each length 1..83 (a larger value just past n must
        // not be seen): exactly the scalar maximum.
        auto peaks = a;
        peaks.push_back(1e30f);
        bool exact = true;
        for (int n = 1; n <= 83; ++n) {
            const float want = *std::max_element(peaks.begin(), peaks.begin() + n);
            peaks[size_t(n)] = 1e30f;
            exact = exact && fast.row_max(peaks.data(), n) == want && plain.row_max(peaks.data(), n) == want;
            peaks[size_t(n)] = a[size_t(n) % a.size()];
        }
        CHECK(exact);
    }
}

TEST_CASE("kernels: the probes sum what they read and run their FMA chains") {
    for (const Kernels& k : sets_under_test()) {
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
}

namespace {

// The tolerance test_fast_cpu.cpp states for each weight type (max |logit error| / max |logit|
// against fp32), which bounds how close the golden's top two logits must be for a reduced
// precision to pick the other one.
double tolerance(WeightType type) {
    switch (type) {
        case WeightType::fp32: return 1e-5;
        case WeightType::fp16: return 2e-3;
        case WeightType::bf16: return 1.6e-2;
        case WeightType::q8_0: return 5e-2;
        case WeightType::q4_0: return 5e-2 * 127 / 7;
    }
    return 0;
}

// The golden cases run here: every one of 32 or 64 steps (24 of the 36: all 12 prompts, the
// 36- and 100-token ones generating nothing or little), and one of 256 steps (a long decode: 256
// cached positions in 16 KV blocks). The other 256-step runs repeat the same prompts for longer
// and hold 70 % of the tokens: minutes under qemu (test_fast_cpu.cpp and test_fast_serve.cpp run
// all 36 natively).
std::vector<nlohmann::json> goldens_run_here() {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& g : read_jsonl(golden("stories260K_greedy.jsonl")))
        if (g["steps"].get<int>() <= 64 || g["case"] == "once_upon_n256") out.push_back(g);
    REQUIRE(out.size() == 25);
    return out;
}

// The weight types each set's goldens run with: all five on every set but the reference, whose
// plain loops run the exact two (fp32, fp16); its bf16/Q8_0/Q4_0 runs are the very code
// test_fast_cpu.cpp runs on x86-64 and cost a minute more under qemu.
std::vector<WeightType> golden_types(const std::string& set) {
    if (set == "portable") return {WeightType::fp32, WeightType::fp16};
    return {std::begin(kAllTypes), std::end(kAllTypes)};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Greedy decoding of one golden record: prefill its prompt ids, then argmax and decode until as
// many tokens as the golden generated (its last may be the BOS that stopped run.c).
std::vector<int> greedy(glass::Session& session, const std::vector<int>& prompt, size_t n_new) {
    std::vector<int> out;
    if (n_new == 0) return out;
    std::span<const float> logits = session.prefill(prompt);
    while (true) {
        out.push_back(glass::sample_argmax(logits));
        if (out.size() == n_new) return out;
        logits = session.decode(out.back());
    }
}

}  // namespace

// The sharpest end-to-end check, as in test_fast_cpu.cpp: fp32 and fp16 reproduce every golden
// exactly; bf16, Q8_0 and Q4_0 may pick the other token only where the golden's top two logits
// are closer than their tolerance allows. Each kernel set is forced through FastOptions::kernels.
TEST_CASE("greedy goldens on the shipped model through FastCpuSession, every kernel set forced") {
    const std::vector<nlohmann::json> goldens = goldens_run_here();
    for (const std::string& set : set_names())
        for (WeightType type : golden_types(set)) {
            CAPTURE(set);
            CAPTURE(std::string(glass::fast::to_string(type)));
            FastOptions options;
            options.threads = 1;  // (a second thread's spinning only costs under emulation)
            options.weights = type;
            options.kernels = set;
            const auto t0 = std::chrono::steady_clock::now();
            FastCpuSession fast(shipped(), options);
            REQUIRE(std::string(fast.kernel_name()) == set);
            int exact = 0, cases = 0;
            for (const auto& g : goldens) {
                CAPTURE(g["case"].get<std::string>());
                const auto want = g["generated_ids"].get<std::vector<int>>();
                fast.reset();
                const auto got = greedy(fast, g["prompt_ids"].get<std::vector<int>>(), want.size());
                ++cases;
                size_t i = 0;
                while (i < want.size() && got[i] == want[i]) ++i;
                if (i == want.size()) {
                    ++exact;
                    continue;
                }
                if (type == WeightType::fp32 || type == WeightType::fp16) {
                    FAIL_CHECK("differs from run.c at generated token " << i);
                    continue;
                }
                const double top1 = g["top1_logits"][i].get<double>(), top2 = g["top2_logits"][i].get<double>();
                CHECK(top1 - top2 <= 2 * tolerance(type) * std::fabs(top1));
            }
            MESSAGE(set << ", " << std::string(glass::fast::to_string(type)) << " weights: " << exact << " of " << cases
                        << " golden cases identical (" << seconds_since(t0) << " s)");
        }
}

// The paged engine batches the goldens on FastPagedBackend: batching changes no bit, so each
// request still gets run.c's ids (test_fast_serve.cpp's check), on every kernel set: fp32 and
// fp16 weights (the portable set fp32 only: its per-weight fp16 conversions are slow under qemu).
TEST_CASE("greedy goldens batched in one engine on the fast paged backend, every kernel set forced") {
    const std::vector<nlohmann::json> goldens = goldens_run_here();
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(models_dir() + "/tok512.bin", 512);
    for (const std::string& set : set_names())
        for (WeightType type : {WeightType::fp32, WeightType::fp16}) {
            if (set == "portable" && type == WeightType::fp16) continue;
            CAPTURE(set);
            CAPTURE(std::string(glass::fast::to_string(type)));
            FastOptions options;
            options.threads = 1;  // (a second thread's spinning only costs under emulation)
            options.weights = type;
            options.kernels = set;
            const auto t0 = std::chrono::steady_clock::now();
            glass::fast::FastPagedBackend backend(shipped(), options);
            REQUIRE(std::string(backend.kernel_name()) == set);
            glass::serve::EngineOptions eo;
            eo.num_blocks = 25 * 32;  // room for everyone at once: 25 requests × 512 positions / 16
            eo.scheduler.max_running = 64;
            glass::serve::Engine engine(backend, tok, eo);
            for (const nlohmann::json& g : goldens) {
                glass::GenerateOptions o;
                o.sampling.temperature = 0.0f;
                const auto prompt = g["prompt_ids"].get<std::vector<int>>();
                o.max_new_tokens = glass::new_tokens_for_steps(g["steps"].get<int>(), static_cast<int>(prompt.size()));
                engine.add_request_ids(prompt, o);
            }
            const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
            REQUIRE(results.size() == goldens.size());
            int exact = 0;
            for (size_t i = 0; i < goldens.size(); ++i) {
                CAPTURE(goldens[i]["case"].get<std::string>());
                const bool same = results[i].generated_ids == goldens[i]["generated_ids"].get<std::vector<int>>();
                CHECK(same);
                exact += same;
            }
            MESSAGE(set << ", " << std::string(glass::fast::to_string(type)) << ", batched: " << exact << " of " << goldens.size()
                        << " identical (" << seconds_since(t0) << " s)");
        }
}
