// FastCpuSession's int8 KV cache (include/glass/kv_cache.hpp): the same logits as CpuSession's
// int8 cache, a quarter of the bytes, and a NaN key kept NaN rather than turned into integers.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>

#include "fast_cpu_support.hpp"

namespace test_fast_int8_kv {  // this file's own names (tests are built in unity batches)

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

}  // namespace test_fast_int8_kv
