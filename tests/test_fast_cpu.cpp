// The fast CPU path (include/glass/fast/): packed weights, kernels and FastCpuSession, each
// checked against the plain reference it replaces. No timing here (speed lives in bench/).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <new>

#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "test_support.hpp"

// Every heap allocation in this program goes through here, so a test can count them. (GCC
// cannot see that this operator new and delete are a matching malloc/free pair.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<long> g_allocations{0};
}
void* operator new(std::size_t n) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using glass::fast::FastCpuSession;
using glass::fast::FastOptions;
using glass::fast::WeightType;

// max |a − b| / max |b|: error relative to the scale of the logits. Two fp32 evaluations that
// sum the same products in a different order differ by a few ulps of the largest partial sums;
// 1e-5 (≈ 80 ulps) bounds that comfortably for these sizes while any real bug (a wrong row,
// a missing residual, an off-by-one position) changes logits at the 1e-2 .. 1 level.
double relative_error(std::span<const float> a, std::span<const float> b) {
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

// Every kernel set this CPU runs (kernels.hpp), and those besides the portable reference: each
// test below runs once per set, so an AVX2 machine tests portable + avx2, a Zen 4 all three.
std::vector<std::string> all_sets() {
    std::vector<std::string> names;
    for (const auto s : glass::fast::available_kernel_sets()) names.emplace_back(glass::fast::to_string(s));
    return names;
}
std::vector<glass::fast::Kernels> simd_sets() {
    std::vector<glass::fast::Kernels> sets;
    for (const auto s : glass::fast::available_kernel_sets())
        if (s != glass::fast::KernelSet::portable) sets.push_back(glass::fast::kernels_of(s));
    if (sets.empty()) MESSAGE("this CPU runs no vector kernel set: only the portable kernels run");
    return sets;
}

const WeightType kAllTypes[] = {WeightType::fp32, WeightType::fp16, WeightType::bf16, WeightType::q8_0,
                                WeightType::q4_0};

}  // namespace

TEST_CASE("packing: every weight lands where PackedMatrix::at says, in the requested precision") {
    const int rows = 45, cols = 70;  // neither a multiple of the 32-row panel nor the 32-input block
    const auto w = random_vector(rows * cols, 1);
    for (WeightType type : kAllTypes) {
        std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)), 0);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, buf.data());
        const bool quantized = glass::fast::is_quantized(type);
        const glass::QuantizedMatrix reference =
            quantized ? glass::quantize(w.data(), rows, cols, glass::fast::quant_format_of(type)) : glass::QuantizedMatrix{};
        for (int r = 0; r < rows; ++r) {
            float amax = 0;  // for Q8_0: the block's largest magnitude sets the step
            for (int k = 0; k < cols; ++k) {
                const float src = w[size_t(r * cols + k)];
                if (k % 32 == 0) {
                    amax = 0;
                    for (int j = k; j < std::min(cols, k + 32); ++j) amax = std::max(amax, std::fabs(w[size_t(r * cols + j)]));
                }
                const float got = m.at(r, k);
                switch (type) {
                    case WeightType::fp32: REQUIRE(got == src); break;
                    // Independent reference: the hardware/compiler conversions, round to nearest.
                    case WeightType::fp16: REQUIRE(got == float(static_cast<_Float16>(src))); break;
                    case WeightType::bf16:  // 8 significant bits, round to nearest: relative error ≤ 2^-8
                        REQUIRE(std::fabs(got - src) <= std::fabs(src) * 0x1p-8f); break;
                    case WeightType::q8_0:  // half a step of d = amax/127, plus fp16 rounding of d
                        REQUIRE(std::fabs(got - src) <= amax / 127 * 0.5f * 1.01f + 1e-7f); break;
                    case WeightType::q4_0:  // half a step of d = amax/7, plus fp16 rounding of d
                        REQUIRE(std::fabs(got - src) <= amax / 7 * 0.5f * 1.01f + 1e-7f); break;
                }
                if (quantized) REQUIRE(got == reference.at(r, k));  // the reference's integers and scales
            }
        }
    }
}

TEST_CASE("kernels: each vector set's matrix–vector and matrix–matrix products equal the plain loops") {
  for (const auto& fast : simd_sets()) {
    CAPTURE(std::string(fast.name));
    const auto plain = glass::fast::portable_kernels();
    // Odd sizes exercise the padded last panel, a partial Q8 block, a partial 256-input chunk
    // and uneven token tiles (n = 29 → 9,10,10; 13 → 6,7; 64 → 10,11,11,10,11,11 tokens).
    const int rows = 77, cols = 300, n_max = 64;
    const auto w = random_vector(rows * cols, 2);
    const auto x = random_vector(size_t(n_max) * cols, 3);
    alignas(64) static float scratch[glass::fast::kScratchFloats];
    for (WeightType type : kAllTypes) {
        CAPTURE(glass::fast::to_string(type));
        std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)) + 64, 0);
        auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + 63) / 64 * 64);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, aligned);
        for (bool accumulate : {false, true}) {
            // The matrix–matrix products take the tokens packed into tiles; both must equal the
            // plain matrix–vector product of each token's own row of x.
            for (int n : {2, 13, 29, n_max}) {
                CAPTURE(n);
                std::vector<float> packed(size_t(n) * cols), y_want(size_t(n) * rows, 0.5f);
                glass::fast::pack_tokens(x.data(), cols, n, cols, packed.data());
                for (int t = 0; t < n; ++t)
                    plain.matvec(m, x.data() + t * cols, y_want.data() + t * rows, 0, m.panels(), accumulate);
                std::vector<float> y_fast(size_t(n) * rows, 0.5f), y_plain(size_t(n) * rows, 0.5f);
                fast.matmul(m, packed.data(), n, y_fast.data(), rows, 0, m.panels(), accumulate, scratch);
                plain.matmul(m, packed.data(), n, y_plain.data(), rows, 0, m.panels(), accumulate, nullptr);
                CHECK(relative_error(y_fast, y_want) < 1e-5);  // same products, another summation order
                CHECK(relative_error(y_plain, y_want) < 1e-6);  // same order: equal up to fma contraction
            }
            std::vector<float> v_fast(size_t(rows), 0.5f), v_plain(size_t(rows), 0.5f);
            fast.matvec(m, x.data(), v_fast.data(), 0, m.panels(), accumulate);
            plain.matvec(m, x.data(), v_plain.data(), 0, m.panels(), accumulate);
            CHECK(relative_error(v_fast, v_plain) < 1e-5);
        }
    }
    // Attention and MLP helpers, against the scalar definitions (std::exp).
    auto a = random_vector(83, 4), b = random_vector(83, 5);
    for (float& v : a) v *= 30;  // scores and gates span e^±30
    auto s_fast = a, s_plain = a;
    fast.softmax(s_fast.data(), 83);
    plain.softmax(s_plain.data(), 83);
    CHECK(relative_error(s_fast, s_plain) < 1e-5);  // exp16: ~1e-7 relative per value
    auto g_fast = a, g_plain = a;
    fast.silu_mul(g_fast.data(), b.data(), 83);
    plain.silu_mul(g_plain.data(), b.data(), 83);
    CHECK(relative_error(g_fast, g_plain) < 1e-5);
    // FlashAttention's step: e^(x - shift) over the first n (a tail of 3 past 5 full vectors), the sum.
    const float shift = *std::max_element(a.begin(), a.end());
    auto e_fast = a, e_plain = a;
    const float sum_fast = fast.exp_shift(e_fast.data(), 83, shift), sum_plain = plain.exp_shift(e_plain.data(), 83, shift);
    CHECK(relative_error(e_fast, e_plain) < 1e-5);
    CHECK(sum_fast == doctest::Approx(sum_plain).epsilon(1e-5));
    CHECK(e_fast[82] == doctest::Approx(std::exp(a[82] - shift)).epsilon(1e-5));
    // The tile maximum over the first n of each length 1..83 (the tail lanes past n hold a larger
    // value that must not be seen): exactly the scalar maximum, for the fast and plain kernels.
    auto peaks = a;
    peaks.push_back(1e30f);
    for (int n = 1; n <= 83; ++n) {
        const float want = *std::max_element(peaks.begin(), peaks.begin() + n);
        peaks[size_t(n)] = 1e30f;  // just past the end
        CHECK(fast.row_max(peaks.data(), n) == want);
        CHECK(plain.row_max(peaks.data(), n) == want);
        peaks[size_t(n)] = a[size_t(n) % a.size()];
    }
  }
}

// Int8 activations (FastOptions::int8_activations): decode's x in int8 blocks of 32, times the
// Q8_0/Q4_0 integers with integer dot products. The products are exact int32 sums, so the VNNI
// kernel and the plain loop equal quantize.hpp's quantized_dot_int8 up to the order of the fp32
// additions over blocks (the fp32 tolerance). Rounding x is a real change: y moves by ~0.5 %.
TEST_CASE("kernels: matvec_int8 (every set's integer dot product and plain) equals quantized_dot_int8; rounding x moves y by < 2 %") {
    const int rows = 77, cols = 300;  // a padded last panel, a partial block of 12
    const auto w = random_vector(rows * cols, 2), x = random_vector(size_t(cols), 3);
    const int blocks = (cols + 31) / 32;
    std::vector<std::int8_t> xq(size_t(blocks) * 32, 99);  // 99: the padding must be written (0)
    std::vector<float> xs(static_cast<size_t>(blocks));
    glass::quantize_activations(x.data(), cols, xq.data(), xs.data());
    CHECK(std::all_of(xq.begin() + cols, xq.end(), [](std::int8_t q) { return q == 0; }));
    std::vector<std::int32_t> sums(size_t(blocks), 0);
    for (int i = 0; i < blocks * 32; ++i) sums[size_t(i / 32)] += xq[size_t(i)];
    const glass::fast::Int8Vector x8{xq.data(), xs.data(), sums.data()};
    std::vector<glass::fast::Kernels> sets = simd_sets();
    sets.push_back(glass::fast::portable_kernels());
#if defined(__x86_64__)
    // A CPU with AVX-VNNI gets the vpdpbusd form in the avx2 set: test the vpmaddubsw form too.
    if (glass::fast::cpu_has_avx_vnni()) sets.push_back(glass::fast::avx2::kernels(false));
#endif
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        CAPTURE(glass::fast::to_string(type));
        std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)), 0);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, buf.data());
        const glass::QuantizedMatrix qm = glass::quantize(w.data(), rows, cols, glass::fast::quant_format_of(type));
        std::vector<float> want(static_cast<size_t>(rows)), fp32_x(static_cast<size_t>(rows));
        for (int r = 0; r < rows; ++r) {
            want[size_t(r)] = 0.5f + glass::quantized_dot_int8(qm, r, xq.data(), xs.data());
            fp32_x[size_t(r)] = 0.5f + glass::quantized_dot(qm, r, x.data());
        }
        for (const auto& k : sets) {
            CAPTURE(std::string(k.int8_dot));
            std::vector<float> y(size_t(rows), 0.5f);
            k.matvec_int8(m, x8, y.data(), 0, m.panels(), true);  // accumulate onto 0.5
            CHECK(relative_error(y, want) < 1e-5);
        }
        const double moved = relative_error(want, fp32_x);
        MESSAGE((std::string(glass::fast::to_string(type)) + ": int8 x vs fp32 x, relative error " + std::to_string(moved)));
        CHECK(moved > 1e-4);
        CHECK(moved < 2e-2);  // each x moves by ≤ dx/2 = max|x_block|/254
    }
}

TEST_CASE("kernels: decode attention over a run of cached rows equals the plain loops, and one row at a time bit for bit") {
  for (const auto& fast : simd_sets()) {
    CAPTURE(std::string(fast.name));
    const auto plain = glass::fast::portable_kernels();
    // head_dim 8 and 48 fill part of one register block, 64 exactly one, 80 spills into a second.
    for (int hd : {8, 48, 64, 80}) {
        CAPTURE(hd);
        const int n_rows = 21;
        const long ld = hd + 13;  // rows of a cache are further apart than one head
        const auto q = random_vector(size_t(hd), 21), rows = random_vector(size_t(n_rows * ld), 22);
        const auto p = random_vector(size_t(n_rows), 23);
        std::vector<float> s_fast(n_rows), s_plain(n_rows);
        fast.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_fast.data());
        plain.dot_rows(q.data(), rows.data(), ld, n_rows, hd, 0.25f, s_plain.data());
        CHECK(relative_error(s_fast, s_plain) < 1e-5);  // same products, another summation order
        // The weighted sum: y starts at 0.5 (it accumulates); lanes past hd must keep a sentinel.
        std::vector<float> y_fast(size_t(hd) + 16, 0.5f), y_plain = y_fast, y_split = y_fast;
        for (int d = hd; d < hd + 16; ++d) y_fast[size_t(d)] = y_plain[size_t(d)] = y_split[size_t(d)] = 7.0f;
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
}

// An int8 KV cache's decode attention dequantizes runs of rows (one KV head's slice of each) and
// hands them to the fp32 kernels. The dequantized values must be exactly the reference's
// (dequantize_kv_row: one fp32 product s · q each), on both kernel sets, for every head_dim tail.
TEST_CASE("kernels: dequantize_rows gives dequantize_kv_row's values bit for bit") {
    std::vector<glass::fast::Kernels> sets = simd_sets();
    sets.push_back(glass::fast::portable_kernels());
    for (const auto& k : sets)
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
            for (int r = 0; r < n_rows; ++r)
                for (int i = 0; i < hd; ++i) REQUIRE(got[size_t(r * hd + i)] == want[size_t(r * ld + g * hd + i)]);
            CHECK(std::all_of(got.end() - 16, got.end(), [](float v) { return v == 7.0f; }));
        }
}

// A NaN key or value must not turn into integers: its head's scale becomes NaN, the dequantized
// row NaN, and then each session reacts as with an fp32 cache: the reference's softmax refuses
// the row, the fast session's logits are NaN, which generation refuses, naming it.
TEST_CASE("int8 KV cache: a NaN key stays NaN: the reference refuses it, fast logits are NaN, generate names it") {
    // The shipped checkpoint's floats with wk[0][0] of layer 1 set to NaN (llama2.c's order:
    // embedding, every rms_att, every wq, then every wk).
    const glass::ModelConfig& c = test::shipped().config;
    std::ifstream in(test::shipped_model(), std::ios::binary);
    in.seekg(28);  // the 7-int header
    auto floats = std::make_shared<std::vector<float>>(size_t((glass::llama2c_file_bytes(c) - 28) / 4));
    in.read(reinterpret_cast<char*>(floats->data()), std::streamsize(floats->size() * 4));
    REQUIRE(in.good());
    const std::int64_t L = c.n_layers, d = c.dim;
    (*floats)[size_t(std::int64_t{c.vocab_size} * d + L * d + L * d * d + c.kv_dim() * d)] = std::numeric_limits<float>::quiet_NaN();
    const float* weights = floats->data();
    const glass::Model model = glass::model_from_llama2c_bytes(c, weights, std::move(floats));
    std::vector<float> row = {1.0f, -2.0f, std::numeric_limits<float>::infinity(), 0.5f, 3.0f, 1.0f, -1.0f, 0.0f};
    std::vector<std::int8_t> q(8);
    float scales[2];
    glass::quantize_kv_row(row.data(), 2, 4, q.data(), scales);
    CHECK(std::isnan(scales[0]));  // the head holding inf
    CHECK(scales[1] == doctest::Approx(3.0f / 127));
    glass::round_kv_row_to_int8(row.data(), 2, 4);
    CHECK(std::isnan(row[0]));
    CHECK(row[4] == doctest::Approx(3.0f));
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432};  // 6 tokens: a chunk of 4, then 2
    // The reference's softmax refuses a score row without a finite entry, with an int8 cache as
    // with an fp32 one.
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        glass::CpuSession ref(model, kv);
        CHECK_THROWS_WITH_AS(ref.prefill(prompt), doctest::Contains("no finite entry"), glass::Error);
    }
    // The fast session's logits come out NaN, after prefill and after a decode step.
    FastOptions options{2, WeightType::fp32, false, 4};
    options.kv = glass::KvType::int8;
    FastCpuSession fast(model, options);
    const auto logits = fast.prefill(prompt);
    CHECK(std::any_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); }));
    const auto after = fast.decode(261);
    CHECK(std::any_of(after.begin(), after.end(), [](float v) { return std::isnan(v); }));
    glass::GenerateOptions o;
    o.max_new_tokens = 4;
    FastCpuSession fresh(model, options);
    CHECK_THROWS_WITH_AS(glass::generate(fresh, test::shipped_tok(), "Once upon a time", o), doctest::Contains("nan"),
                         glass::Error);
}

TEST_CASE("kernels: each vector set's prefill attention tiles equal the plain loops (tails in rows, keys, head_dim)") {
  for (const auto& fast : simd_sets()) {
    CAPTURE(std::string(fast.name));
    const auto plain = glass::fast::portable_kernels();
    // head_dim 8 and 48 are below one 64-wide block, 80 spills into a second, partial one; key
    // counts 1, 17 and 70 leave partial 16-key registers and a partial 64-key block.
    for (int hd : {8, 48, 64, 80})
        for (int n_keys : {1, 17, 70})
            for (int m = 1; m <= glass::fast::kAttentionRows; ++m) {
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
                CHECK(relative_error(s_fast, s_plain) < 1e-5);  // same products, another summation order
                std::vector<float> o_fast(size_t(m * ldo), 7.0f), o_plain = o_fast;
                fast.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_fast.data(), ldo);
                plain.attention_mix(s_plain.data(), lds, m, v.data(), ldv, n_keys, hd, o_plain.data(), ldo);
                CHECK(relative_error(o_fast, o_plain) < 1e-5);
            }
  }
}

namespace {

// prefill(prompt) then decode(each of `next`) on both sessions; the worst relative error over
// every logits row returned.
double worst_error(glass::Session& ref, glass::Session& fast, const std::vector<int>& prompt,
                   const std::vector<int>& next) {
    auto copy = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
    double worst = relative_error(fast.prefill(prompt), copy(ref.prefill(prompt)));
    for (int id : next) {
        const std::vector<float> want = copy(ref.decode(id));
        worst = std::max(worst, relative_error(fast.decode(id), want));
    }
    REQUIRE(fast.position() == ref.position());
    return worst;
}

}  // namespace

TEST_CASE("FastCpuSession fp32 equals CpuSession on the shipped model (every kernel set, 1 and 2 threads, chunked prefill)") {
    const auto& model = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (int threads : {1, 2})
        for (const std::string& set : all_sets())
            for (int chunk : {512, 4})  // 4: the 9-token prompt goes through in 3 passes
                for (bool flash : {false, true}) {  // prefill attention: score rows, or tiles (C19)
                CAPTURE(threads);
                CAPTURE(set);
                CAPTURE(chunk);
                CAPTURE(flash);
                glass::CpuSession ref(model);
                FastOptions options{threads, WeightType::fp32, false, chunk, flash};
                options.kernels = set;
                FastCpuSession fast(model, options);
                CHECK(std::string(fast.kernel_name()) == set);
                CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
                // hidden_dim 172 is padded to 192 rows in W1/W3's last panel: those zeros are read too.
                CHECK(fast.weight_bytes() > model.weight_bytes);
            }
}

TEST_CASE("FastCpuSession fp32 equals CpuSession on generated shapes: GQA, own classifier, long prompt") {
    glass::ModelConfig c;
    SUBCASE("grouped-query attention, nothing a multiple of 32") {
        c.dim = 96; c.hidden_dim = 200; c.n_layers = 2; c.n_heads = 6; c.n_kv_heads = 2;
        c.vocab_size = 300; c.seq_len = 80; c.shared_classifier = false;
    }
    SUBCASE("multiples of 32: the packed bytes are exactly the checkpoint's") {
        c.dim = 64; c.hidden_dim = 128; c.n_layers = 3; c.n_heads = 4; c.n_kv_heads = 4;
        c.vocab_size = 96; c.seq_len = 80; c.shared_classifier = true;
    }
    const glass::Model model = glass::fast::random_model_in_memory(c, 7);
    std::vector<int> prompt;
    for (int i = 0; i < 50; ++i) prompt.push_back((i * 37 + 11) % c.vocab_size);  // 4+ token tiles
    const std::vector<int> next = {5, 17, 42, 3, 88};
    glass::CpuSession ref(model);
    FastCpuSession fast(model, {2, WeightType::fp32, false, 512, false});  // score-row prefill attention
    CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
    {  // FlashAttention for the prefill (C19, the default), whole and in chunks of 16 (start > 0)
        for (const int chunk : {512, 16}) {
            glass::CpuSession ref_again(model);
            FastCpuSession flash(model, {2, WeightType::fp32, false, chunk, true});
            CHECK(worst_error(ref_again, flash, prompt, next) <= 1e-5);
        }
    }
    if (c.hidden_dim % 32 == 0 && c.vocab_size % 32 == 0 && c.kv_dim() % 32 == 0)
        CHECK(fast.weight_bytes() == model.weight_bytes);
    // reset() starts a new sequence: the same prompt gives the same logits again.
    ref.reset();
    fast.reset();
    CHECK(worst_error(ref, fast, prompt, {}) <= 1e-5);
}

TEST_CASE("bad input: token ids and context length are checked before anything changes") {
    FastCpuSession fast(test::shipped(), {2, WeightType::fp32, false, 512});
    const std::vector<int> bad = {1, 512};
    CHECK_THROWS_WITH_AS(fast.prefill(bad), doctest::Contains("token id 512"), glass::Error);
    CHECK(fast.position() == 0);
    CHECK_THROWS_WITH_AS(fast.decode(-1), doctest::Contains("token id -1"), glass::Error);
    CHECK_THROWS_AS(fast.prefill(std::span<const int>()), glass::Error);
    const std::vector<int> too_long(513, 1);
    CHECK_THROWS_WITH_AS(fast.prefill(too_long), doctest::Contains("513 tokens"), glass::Error);
    CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), {0, WeightType::fp32, false, 512}),
                         doctest::Contains("thread count 0"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::fast::weight_type_from_string("fp8"), doctest::Contains("'fp8'"), glass::Error);
}

TEST_CASE("decode allocates nothing: buffers are sized when the session is built") {
    for (WeightType type : kAllTypes) for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8})
    for (const bool int8_x : {false, true}) {
        if (kv == glass::KvType::int8 && type != WeightType::fp32) continue;
        if (int8_x && !glass::fast::is_quantized(type)) continue;
        CAPTURE(glass::fast::to_string(type));
        CAPTURE(glass::to_string(kv));
        CAPTURE(int8_x);
        glass::fast::FastOptions options{2, type, false, 512};
        options.kv = kv;
        options.int8_activations = int8_x;
        FastCpuSession fast(test::shipped(), options);
        const std::vector<int> prompt = {1, 403, 407};
        fast.prefill(prompt);
        const long before = g_allocations.load();
        float checksum = 0;
        for (int i = 0; i < 50; ++i) checksum += fast.decode(100 + i)[0];
        const long after = g_allocations.load();
        CHECK(after - before == 0);
        CHECK(std::isfinite(checksum));
        // The counter does count: a vector allocates once.
        { std::vector<int> v(10); CHECK(g_allocations.load() == after + 1); }
    }
}

TEST_CASE("the fast paged backend allocates nothing per step once its buffers fit the largest batch") {
    // (Its batching and invariance are tested in test_fast_serve.cpp; here only the allocator.)
    for (WeightType type : {WeightType::fp32, WeightType::q8_0}) {
        CAPTURE(glass::fast::to_string(type));
        glass::fast::FastPagedBackend b(test::shipped(), {2, type, false, 512});
        b.allocate_pool(64, 16);
        // Four sequences, blocks 0-3, 4-7, 8-11, 12-15; prompts of 20 tokens in one step (80 rows:
        // the largest batch), then decode steps of all four and steps mixing a chunk and decodes.
        std::vector<std::vector<int>> tables(4), seqs(4);
        for (int s = 0; s < 4; ++s) {
            for (int k = 0; k < 4; ++k) tables[size_t(s)].push_back(4 * s + k);
            for (int i = 0; i < 20; ++i) seqs[size_t(s)].push_back(1 + (37 * i + 101 * s) % 500);
        }
        std::vector<glass::serve::BatchEntry> batch;
        batch.reserve(4);
        for (int s = 0; s < 4; ++s) batch.push_back({seqs[size_t(s)], 0, tables[size_t(s)], true});
        b.forward(batch);
        std::vector<int> next = {5, 6, 7, 8};
        const long before = g_allocations.load();
        float checksum = 0;
        for (int step = 0; step < 30; ++step) {
            batch.clear();
            for (int s = 0; s < 4; ++s) {
                const int pos = 20 + step;
                if (step % 10 == 9 && s == 0)  // now and then a chunk of 8 positions (recomputed)
                    batch.push_back({std::span(seqs[0]).subspan(0, 8), 0, tables[0], false});
                else
                    batch.push_back({std::span(next).subspan(size_t(s), 1), pos, tables[size_t(s)], true});
            }
            const std::span<const float> logits = b.forward(batch);
            checksum += logits[0];
        }
        const long after = g_allocations.load();
        CHECK(after - before == 0);
        CHECK(std::isfinite(checksum));
    }
}

namespace {

// Tolerances for reduced-precision weights, as max |logit error| / max |logit| against the fp32
// reference. Each weight is rounded independently, so the logits move by about one unit
// roundoff of the format (the errors of many weights partly cancel); we allow 4× that:
//   fp16: 10 stored mantissa bits, unit roundoff 2^-11 ≈ 4.9e-4      -> 2e-3  (measured 4.6e-4)
//   bf16:  7 stored mantissa bits, unit roundoff 2^-8  ≈ 3.9e-3      -> 1.6e-2 (measured 4.0e-3)
//   Q8_0: error ≤ d/2 = max|w|/254 per weight, ≈ 1.2 % of a typical
//         weight (max|w| ≈ 3 typical in a block of 32)              -> 5e-2  (measured 1.5e-2)
//   Q4_0: error ≤ d/2 = max|w|/14, 127/7 = 18.1× Q8_0's step: Q8_0's
//         allowance scaled by the same factor                       -> 0.91  (measured 0.30: the
//         shipped model has dim 64, so few errors average out; example 24 prints it per format)
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

}  // namespace

TEST_CASE("reduced-precision weights stay within their stated tolerance of the fp32 reference") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419};
    for (WeightType type : kAllTypes) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        glass::CpuSession ref(test::shipped());
        FastCpuSession fast(test::shipped(), {2, type, false, 512});
        const double error = worst_error(ref, fast, prompt, next);
        MESSAGE(std::string(glass::fast::to_string(type)) << ": largest logit error / largest logit = " << error);
        CHECK(error <= tolerance(type));
        if (type != WeightType::fp32) CHECK(error > 1e-5);  // the weights really were rounded
    }
}

// The quantized fast path computes what the reference computes on quantize.hpp's rounded weights
// (quantized_model): the same integers and scales, only the order of fp32 additions differs, so
// the fp32 tolerance applies. This is what makes the reference's C14 numbers (example 24) the
// fast path's numbers too.
TEST_CASE("q8/q4 fast path equals CpuSession on quantized_model (fp32 tolerance)") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        const glass::Model rounded = glass::quantized_model(test::shipped(), glass::fast::quant_format_of(type));
        for (const std::string& set : all_sets()) {
            CAPTURE(set);
            glass::CpuSession ref(rounded);
            FastOptions options{2, type, false, 4};  // chunks of 4: prefill and decode kernels
            options.kernels = set;
            FastCpuSession fast(test::shipped(), options);
            CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
        }
    }
}

// The int8 KV cache (kv_cache.hpp): the fast session keeps int8 rows and a scale per KV head and
// token, the reference keeps the values they stand for; both must give the same logits, with the
// whole prompt at once, in chunks of 4, and through decode steps; the rounding must really happen
// (logits differ from the fp32 cache); the bytes are a quarter plus scales.
// Tolerance 1e-3, not the fp32 rule's 1e-5: the two paths compute K and V ~1e-7 apart (other
// summation orders), and a value that close to a rounding boundary (q + 0.5) rounds to the
// neighbouring integer on one side only: one step s = max|x|/127 on a few values, which moves the
// logits by ~1e-4 (measured 7.9e-5). That is still 1/30 of what int8 itself moves them (3.2e-2),
// so a wrong scale, a missing row or stale rows from another layer would all fail it.
TEST_CASE("int8 KV cache: FastCpuSession equals CpuSession's int8 cache; a quarter of the bytes") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (const int chunk : {512, 4})
        for (const bool flash : {true, false}) {
            CAPTURE(chunk);
            CAPTURE(flash);
            glass::CpuSession ref(test::shipped(), glass::KvType::int8);
            glass::fast::FastOptions options{2, WeightType::fp32, false, chunk, flash};
            options.kv = glass::KvType::int8;
            FastCpuSession fast(test::shipped(), options);
            CHECK(worst_error(ref, fast, prompt, next) <= 1e-3);
            const glass::ModelConfig& c = test::shipped().config;
            CHECK(fast.kv_bytes_used() == fast.position() * 2LL * c.n_layers * c.n_kv_heads * (c.head_dim() + 4));
            CHECK(ref.kv_bytes_used() == fast.kv_bytes_used());
        }
    glass::CpuSession fp32(test::shipped()), int8(test::shipped(), glass::KvType::int8);
    const double moved = worst_error(fp32, int8, prompt, next);
    MESSAGE("int8 KV cache vs fp32: largest logit error / largest logit = " << moved);
    CHECK(moved > 1e-5);
    CHECK(moved <= 5e-2);  // the int8 step is max|x|/127 per head and row, as Q8_0's per block of weights
    CHECK_THROWS_WITH_AS(glass::kv_type_from_string("int4"), doctest::Contains("unknown KV cache type 'int4'"),
                         glass::Error);
}

// Int8 activations in a whole session: decode's products (and the logits row after a prefill,
// one row through the matrix–vector kernel) take x in int8, which moves the logits by about what
// q8_0's own rounding does (measured below; bound 5e-2, the int8 KV cache's); a session that
// could not use them (fp32 weights, the paged backend) says so instead of ignoring them.
TEST_CASE("int8 activations: logits within 5e-2 of fp32 activations; refused where unused") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0})
        for (const std::string& set : all_sets()) {
            CAPTURE(std::string(glass::fast::to_string(type)));
            CAPTURE(set);
            FastOptions o{2, type, false, 512};
            o.kernels = set;
            FastCpuSession fp32_x(test::shipped(), o);
            o.int8_activations = true;
            FastCpuSession int8_x(test::shipped(), o);
            CHECK(int8_x.dot_products() == "int8 (" + std::string(glass::fast::kernels_of(set).int8_dot) + ")");
            const double worst = worst_error(int8_x, fp32_x, prompt, next);
            MESSAGE((std::string(glass::fast::to_string(type)) + " " + set +
                     ": logits, int8 x vs fp32 x: " + std::to_string(worst)));
            CHECK(worst > 1e-6);  // the int8 products really ran
            CHECK(worst <= 5e-2);
        }
    FastOptions bad{1, WeightType::fp32, false, 512};
    bad.int8_activations = true;
    CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), bad), doctest::Contains("the weights are fp32"), glass::Error);
    bad.weights = WeightType::q4_0;
    CHECK_THROWS_WITH_AS(glass::fast::FastPagedBackend(test::shipped(), bad),
                         doctest::Contains("int8 activations are FastCpuSession's decode only"), glass::Error);
}

// Greedy generation is the sharpest end-to-end check: one wrong logit anywhere in 256 steps
// changes the story. fp32 and fp16 reproduce every golden exactly (measured). bf16 and Q8_0
// may pick the other token where the reference's top two logits are closer than their error:
// at the first differing step the golden's top1 − top2 margin must be within twice the
// tolerance (each logit can move by tolerance × scale, using the top logit as the scale).
TEST_CASE("greedy generation on the shipped model matches run.c's goldens (every kernel set; fp32, fp16 exactly)") {
  for (const std::string& set : all_sets())
    for (WeightType type : kAllTypes) {
        CAPTURE(set);
        CAPTURE(std::string(glass::fast::to_string(type)));
        int exact = 0, cases = 0, earliest = 1 << 30;
        for (const auto& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
            CAPTURE(g["case"].get<std::string>());
            FastOptions options{2, type, false, 512};
            options.kernels = set;
            FastCpuSession fast(test::shipped(), options);
            glass::GenerateOptions o;
            o.sampling.temperature = 0.0f;
            const auto want = test::ids_of(g["generated_ids"]);
            o.max_new_tokens = static_cast<int>(want.size());
            const auto r = glass::generate(fast, test::shipped_tok(), g["prompt"].get<std::string>(), o);
            REQUIRE(r.prompt_ids == test::ids_of(g["prompt_ids"]));
            size_t i = 0;
            while (i < want.size() && i < r.generated_ids.size() && r.generated_ids[i] == want[i]) ++i;
            ++cases;
            if (i == want.size() && r.generated_ids.size() == want.size()) {
                ++exact;
                continue;
            }
            earliest = std::min(earliest, static_cast<int>(i));
            if (type == WeightType::fp32 || type == WeightType::fp16) {
                FAIL_CHECK("differs from run.c at generated token " << i);
                continue;
            }
            const double top1 = g["top1_logits"][i].get<double>(), top2 = g["top2_logits"][i].get<double>();
            CHECK(top1 - top2 <= 2 * tolerance(type) * std::fabs(top1));
        }
        MESSAGE(set + ", " + glass::fast::to_string(type) << " weights: " << exact << " of " << cases
                << " golden cases identical; earliest difference at generated token "
                << (exact == cases ? -1 : earliest));
    }
}

TEST_CASE("glass generate --threads/--precision runs the fast path and matches the goldens") {
    const auto golden = test::read_jsonl(test::golden("stories260K_greedy.jsonl")).at(1);  // once_upon_n64
    REQUIRE(golden["case"] == "once_upon_n64");
    const std::string base = test::bin_dir() + "/glass generate --temperature 0 -n 64 --json -p " +
                             test::sh(golden["prompt"].get<std::string>());
    for (const char* flags : {" --threads 2", " --threads 1 --precision fp16"}) {
        CAPTURE(flags);
        const test::Run r = test::run(base + flags);
        REQUIRE(r.exit_code == 0);
        const std::string last = r.out.substr(r.out.rfind('{'));
        CHECK(nlohmann::json::parse(last)["generated_ids"] == golden["generated_ids"]);
    }
    const test::Run bad = test::run(base + " --threads 0");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("0") != std::string::npos);
    const test::Run bad_precision = test::run(base + " --precision q3");
    CHECK(bad_precision.exit_code == 2);
    CHECK(bad_precision.err.find("q3") != std::string::npos);
    // q4 runs the fast path's 4-bit weights: the same ids as the fast session built here.
    const test::Run q4 = test::run(base + " --threads 1 --precision q4");
    REQUIRE(q4.exit_code == 0);
    FastCpuSession session(test::shipped(), {1, WeightType::q4_0, false, 512});
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = static_cast<int>(golden["generated_ids"].size());
    const auto want = glass::generate(session, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    CHECK(nlohmann::json::parse(q4.out.substr(q4.out.rfind('{')))["generated_ids"] == want.generated_ids);
    // --kv int8: the reference and the fast path give the ids of a CpuSession with an int8 cache.
    glass::CpuSession int8(test::shipped(), glass::KvType::int8);
    const auto want_int8 = glass::generate(int8, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    for (const char* flags : {" --kv int8", " --kv int8 --threads 2"}) {
        CAPTURE(flags);
        const test::Run r = test::run(base + flags);
        REQUIRE(r.exit_code == 0);
        CHECK(nlohmann::json::parse(r.out.substr(r.out.rfind('{')))["generated_ids"] == want_int8.generated_ids);
    }
    // --activations int8: the ids of a q4 session with int8 activations built here.
    glass::fast::FastOptions int8_x{1, WeightType::q4_0, false, 512};
    int8_x.int8_activations = true;
    FastCpuSession int8_x_session(test::shipped(), int8_x);
    const auto want_int8_x = glass::generate(int8_x_session, test::shipped_tok(), golden["prompt"].get<std::string>(), o);
    const test::Run q4_int8_x = test::run(base + " --threads 1 --precision q4 --activations int8");
    REQUIRE(q4_int8_x.exit_code == 0);
    CHECK(nlohmann::json::parse(q4_int8_x.out.substr(q4_int8_x.out.rfind('{')))["generated_ids"] == want_int8_x.generated_ids);
    const test::Run bad_kv = test::run(base + " --kv int4");
    CHECK(bad_kv.exit_code == 2);
    CHECK(bad_kv.err.find("--kv must be fp32 or int8, got 'int4'") != std::string::npos);
}

// GLASS_KERNELS forces a set; a name that is not a set, or a set this CPU cannot run, is refused
// with the names of the sets it does run (and, for the second, the instructions it has).
TEST_CASE("kernel sets: GLASS_KERNELS forces one, unknown or unavailable sets are refused by name") {
    const std::vector<std::string> sets = all_sets();
    REQUIRE(sets.front() == "portable");  // every CPU runs the reference
    for (const std::string& set : sets) {
        CAPTURE(set);
        REQUIRE(setenv("GLASS_KERNELS", set.c_str(), 1) == 0);
        CHECK(std::string(glass::fast::best_kernels().name) == set);
        FastCpuSession fast(test::shipped(), FastOptions{1, WeightType::fp32, false, 512});
        CHECK(std::string(fast.kernel_name()) == set);
    }
    REQUIRE(unsetenv("GLASS_KERNELS") == 0);
    CHECK(std::string(glass::fast::best_kernels().name) == sets.back());  // the widest
    CHECK_THROWS_WITH_AS(glass::fast::kernels_of("sse9"), doctest::Contains("unknown kernel set 'sse9'"), glass::Error);
    for (const char* other : {"neon", "avx2", "avx512"}) {
        if (std::find(sets.begin(), sets.end(), other) != sets.end()) continue;
        CAPTURE(other);
        REQUIRE(setenv("GLASS_KERNELS", other, 1) == 0);
        const std::string forced = "GLASS_KERNELS=" + std::string(other);
        CHECK_THROWS_WITH_AS(glass::fast::best_kernels(), doctest::Contains(forced.c_str()), glass::Error);
        CHECK_THROWS_WITH_AS(glass::fast::kernels_of(other), doctest::Contains("kernel sets it runs: portable"),
                             glass::Error);
        FastOptions o{1, WeightType::fp32, false, 512};
        o.kernels = other;
        CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), o), doctest::Contains("this CPU lacks"), glass::Error);
    }
    REQUIRE(unsetenv("GLASS_KERNELS") == 0);
}
