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
#include "kernel_checks.hpp"
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
using glass::fast::Kernels;
using glass::fast::WeightType;
// The kernel checks' helpers (kernel_checks.hpp, shared with tests/neon/test_neon.cpp):
// relative_error is max |a − b| / max |b|, also for the logits below (the 1e-5 rule: see there).
using kernel_checks::kAllTypes;
using kernel_checks::random_vector;
using kernel_checks::relative_error;
using kernel_checks::worst_error;

// Every kernel set this CPU runs, and those besides the portable reference: each test below runs
// once per set, so an AVX2 machine tests portable + avx2, a Zen 4 all three.
std::vector<std::string> all_sets() { return kernel_checks::set_names(); }
std::vector<Kernels> simd_sets() { return kernel_checks::vector_sets(); }

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
                    // k-quant panels take whole 256-input super-blocks (check_k_panels in
                    // kernel_checks.hpp); `stored` names a file's own types, not a packing.
                    case WeightType::q4_k: case WeightType::q5_k: case WeightType::q6_k: case WeightType::stored:
                        FAIL("kAllTypes should not list " << glass::fast::to_string(type)); break;
                }
                if (quantized) REQUIRE(got == reference.at(r, k));  // the reference's integers and scales
            }
        }
    }
}

TEST_CASE("kernels: each vector set's matrix–vector and matrix–matrix products equal the plain loops") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_products(fast);
}

TEST_CASE("kernels: each vector set's softmax, silu_mul, exp_shift and row_max equal the scalar definitions (std::exp)") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_elementwise(fast);
}

TEST_CASE("kernels: matvec_int8 (every set's integer dot product and plain) equals quantized_dot_int8; rounding x moves y by < 2 %") {
    std::vector<Kernels> sets = simd_sets();
    sets.push_back(glass::fast::portable_kernels());
#if defined(__x86_64__)
    // A CPU with AVX-VNNI gets the vpdpbusd form in the avx2 set: test the vpmaddubsw form too.
    if (glass::fast::cpu_has_avx_vnni()) sets.push_back(glass::fast::avx2::kernels(false));
#endif
    kernel_checks::check_matvec_int8(sets);
}

TEST_CASE("kernels: decode attention over a run of cached rows equals the plain loops, and one row at a time bit for bit") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_decode_attention(fast);
}

TEST_CASE("kernels: each vector set's prefill attention tiles equal the plain loops (tails in rows, keys, head_dim)") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_prefill_attention(fast);
}

TEST_CASE("kernels: dequantize_rows gives dequantize_kv_row's values bit for bit") {
    for (const Kernels& k : simd_sets()) kernel_checks::check_dequantize_rows(k);
    kernel_checks::check_dequantize_rows(glass::fast::portable_kernels());
}

TEST_CASE("kernels: each vector set's probes sum what they read and run their FMA chains") {
    for (const Kernels& k : simd_sets()) kernel_checks::check_probes(k);
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
    FastOptions options{.threads = 2, .weights = WeightType::fp32, .prefill_chunk = 4};
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
                FastOptions options{.threads = threads, .weights = WeightType::fp32, .prefill_chunk = chunk, .flash_attention = flash};
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
    c.head_dim = c.dim / c.n_heads;
    const glass::Model model = glass::fast::random_model_in_memory(c, 7);
    std::vector<int> prompt;
    for (int i = 0; i < 50; ++i) prompt.push_back((i * 37 + 11) % c.vocab_size);  // 4+ token tiles
    const std::vector<int> next = {5, 17, 42, 3, 88};
    glass::CpuSession ref(model);
    FastCpuSession fast(model, {.threads = 2, .weights = WeightType::fp32, .flash_attention = false});  // score-row prefill attention
    CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
    {  // FlashAttention for the prefill (C19, the default), whole and in chunks of 16 (start > 0)
        for (const int chunk : {512, 16}) {
            glass::CpuSession ref_again(model);
            FastCpuSession flash(model, {.threads = 2, .weights = WeightType::fp32, .prefill_chunk = chunk, .flash_attention = true});
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
    FastCpuSession fast(test::shipped(), {.threads = 2, .weights = WeightType::fp32});
    const std::vector<int> bad = {1, 512};
    CHECK_THROWS_WITH_AS(fast.prefill(bad), doctest::Contains("token id 512"), glass::Error);
    CHECK(fast.position() == 0);
    CHECK_THROWS_WITH_AS(fast.decode(-1), doctest::Contains("token id -1"), glass::Error);
    CHECK_THROWS_AS(fast.prefill(std::span<const int>()), glass::Error);
    const std::vector<int> too_long(513, 1);
    CHECK_THROWS_WITH_AS(fast.prefill(too_long), doctest::Contains("513 tokens"), glass::Error);
    CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), {.threads = 0, .weights = WeightType::fp32}),
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
        glass::fast::FastOptions options{.threads = 2, .weights = type};
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
        for (int s = 0; s < 4; ++s) batch.push_back({.tokens = seqs[size_t(s)], .start = 0, .block_table = tables[size_t(s)]});
        b.forward(batch);
        std::vector<int> next = {5, 6, 7, 8};
        const long before = g_allocations.load();
        float checksum = 0;
        for (int step = 0; step < 30; ++step) {
            batch.clear();
            for (int s = 0; s < 4; ++s) {
                const int pos = 20 + step;
                if (step % 10 == 9 && s == 0)  // now and then a chunk of 8 positions (recomputed)
                    batch.push_back(
                        {.tokens = std::span(seqs[0]).subspan(0, 8), .start = 0, .block_table = tables[0], .wants_logits = false});
                else
                    batch.push_back({.tokens = std::span(next).subspan(size_t(s), 1), .start = pos, .block_table = tables[size_t(s)]});
            }
            const std::span<const float> logits = b.forward(batch);
            checksum += logits[0];
        }
        const long after = g_allocations.load();
        CHECK(after - before == 0);
        CHECK(std::isfinite(checksum));
    }
}

// Each type's tolerance, and why: kernel_checks.hpp's weight_tolerance.
TEST_CASE("reduced-precision weights stay within their stated tolerance of the fp32 reference") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419};
    for (WeightType type : kAllTypes) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        glass::CpuSession ref(test::shipped());
        FastCpuSession fast(test::shipped(), {.threads = 2, .weights = type});
        const double error = worst_error(ref, fast, prompt, next);
        MESSAGE(std::string(glass::fast::to_string(type)) << ": largest logit error / largest logit = " << error);
        CHECK(error <= kernel_checks::weight_tolerance(type));
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
            FastOptions options{.threads = 2, .weights = type, .prefill_chunk = 4};  // chunks of 4: prefill and decode kernels
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
            glass::fast::FastOptions options{.threads = 2, .weights = WeightType::fp32, .prefill_chunk = chunk, .flash_attention = flash};
            options.kv = glass::KvType::int8;
            FastCpuSession fast(test::shipped(), options);
            CHECK(worst_error(ref, fast, prompt, next) <= 1e-3);
            const glass::ModelConfig& c = test::shipped().config;
            CHECK(fast.kv_bytes_used() == fast.position() * 2LL * c.n_layers * c.n_kv_heads * (c.head_dim + 4));
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
            FastOptions o{.threads = 2, .weights = type};
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
    FastOptions bad{.threads = 1, .weights = WeightType::fp32};
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
            FastOptions options{.threads = 2, .weights = type};
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
            CHECK(top1 - top2 <= 2 * kernel_checks::weight_tolerance(type) * std::fabs(top1));
        }
        MESSAGE(set << ", " << glass::fast::to_string(type) << " weights: " << exact << " of " << cases
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
    FastCpuSession session(test::shipped(), {.threads = 1, .weights = WeightType::q4_0});
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
    glass::fast::FastOptions int8_x{.threads = 1, .weights = WeightType::q4_0};
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
        FastCpuSession fast(test::shipped(), FastOptions{.threads = 1, .weights = WeightType::fp32});
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
        FastOptions o{.threads = 1, .weights = WeightType::fp32};
        o.kernels = other;
        CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), o), doctest::Contains("this CPU lacks"), glass::Error);
    }
    REQUIRE(unsetenv("GLASS_KERNELS") == 0);
}
