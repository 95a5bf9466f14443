// The fast CPU path on every model family (issue "Real models", step 3): FastCpuSession and
// FastPagedBackend run each family delta (fast_model.hpp: embedding scale, q/k/v biases, per-head
// q/k norms, RoPE tables per base and scaling, score scale and soft-cap, sliding window, sandwich
// norms, GELU-tanh, logit soft-cap, Gemma's norm offset) and must give the reference's logits
// (transformer.hpp, itself checked against a float64 oracle and llama.cpp in gguf_families and
// llama_cpp_families) on small random models of each family, in every kernel set this CPU runs.
#include <cmath>

#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "kernel_checks.hpp"
#include "test_support.hpp"

namespace test_fast_families {  // this file's own names (tests are built in unity batches)

namespace {

using glass::fast::FastCpuSession;
using glass::fast::FastOptions;
using glass::fast::WeightType;
using kernel_checks::relative_error;
using kernel_checks::worst_error;  // prefill + decode steps, worst max|a − b| / max|b|

const std::vector<std::string> kFamilies = {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};

// Deterministic ids inside the vocabulary; 13 prompt tokens reach past every small family's
// sliding window (5 or 6 positions), so decode steps and the later prompt rows drop keys.
std::vector<int> ids_from(int seed, int n, int vocab) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (seed * 31 + i * 17 + (i * i) % 7) % vocab;
    return ids;
}

}  // namespace

// 1e-5: the fp32 rule (tests/test_fast_session.cpp); only the order of fp32 additions differs.
TEST_CASE("FastCpuSession equals CpuSession in every family (every kernel set; score rows and FlashAttention; chunked prefill)") {
    for (const std::string& f : kFamilies) {
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        const glass::Model m = glass::fast::random_family_model(c, 7);
        const std::vector<int> prompt = ids_from(3, 13, c.vocab_size), next = ids_from(9, 6, c.vocab_size);
        for (const std::string& set : kernel_checks::set_names())
            for (const int chunk : {512, 5})  // 5: the prompt in three passes, the later ones at start > 0
                for (const bool flash : {true, false}) {
                    CAPTURE(f);
                    CAPTURE(set);
                    CAPTURE(chunk);
                    CAPTURE(flash);
                    glass::CpuSession ref(m);
                    FastOptions options{.threads = 2, .prefill_chunk = chunk, .flash_attention = flash};
                    options.kernels = set;
                    FastCpuSession fast(m, options);
                    CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
                }
    }
}

TEST_CASE("the family deltas are really run: dropping one from the config moves the fast logits") {
    // Guards the test above against a fast path that ignores a delta the reference also ignores
    // on these shapes: each delta, switched off, changes the reference's logits by far more than 1e-5.
    const glass::ModelConfig gemma2 = glass::fast::small_family_config("gemma2");
    const glass::Model m = glass::fast::random_family_model(gemma2, 7);
    const std::vector<int> prompt = ids_from(3, 13, gemma2.vocab_size);
    FastCpuSession with(m, FastOptions{.threads = 2});
    const std::span<const float> a = with.prefill(prompt);
    const std::vector<float> capped(a.begin(), a.end());
    for (float v : capped) CHECK(std::abs(v) < gemma2.final_logit_softcap);  // cap · tanh(z / cap)
    glass::Model windowless = glass::fast::random_family_model(gemma2, 7);
    windowless.config.sliding_window = 0;
    FastCpuSession without(windowless, FastOptions{.threads = 2});
    CHECK(relative_error(without.prefill(prompt), capped) > 1e-3);
}

// The paged backend: the same logits as the reference's paged backend (PagedSession over each),
// and a row computes the same bits alone or beside another sequence's rows (batch invariance).
TEST_CASE("FastPagedBackend equals the reference paged engine in every family, and is batch invariant") {
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        const glass::Model m = glass::fast::random_family_model(c, 5);
        const std::vector<int> prompt = ids_from(5, 13, c.vocab_size), next = ids_from(2, 6, c.vocab_size);
        glass::serve::CpuPagedBackend reference(m);
        glass::fast::FastPagedBackend fast(m, FastOptions{.threads = 2});
        glass::serve::PagedSession ref_session(reference, 4), fast_session(fast, 4);
        CHECK(worst_error(ref_session, fast_session, prompt, next) <= 1e-5);

        // Sequences a and b alone, then together in one forward, in other blocks of the pool.
        auto run = [&](const std::vector<std::vector<int>>& tokens, const std::vector<std::vector<int>>& tables) {
            glass::fast::FastPagedBackend b(m, FastOptions{.threads = 2});
            b.allocate_pool(16, 4);
            std::vector<glass::serve::BatchEntry> batch;
            for (size_t e = 0; e < tokens.size(); ++e)
                batch.push_back({.tokens = tokens[e], .start = 0, .block_table = tables[e]});
            const std::span<const float> l = b.forward(batch);
            return std::vector<float>(l.begin(), l.end());
        };
        const std::vector<int> a = ids_from(1, 11, c.vocab_size), b = ids_from(2, 7, c.vocab_size);
        const std::vector<float> alone_a = run({a}, {{0, 1, 2}}), alone_b = run({b}, {{0, 1}});
        const std::vector<float> both = run({a, b}, {{5, 2, 9}, {3, 4}});
        const auto vocab = static_cast<std::ptrdiff_t>(c.vocab_size);
        CHECK(std::equal(alone_a.begin(), alone_a.end(), both.begin()));
        CHECK(std::equal(alone_b.begin(), alone_b.end(), both.begin() + vocab));
    }
}

// int8 KV cache: the fast session's int8 rows against the reference's int8 cache, 1e-3 as on the
// shipped model (test_fast_int8_kv.cpp says why: a value within 1e-7 of a rounding boundary rounds
// the other way on one side only).
TEST_CASE("int8 KV cache in every family: FastCpuSession equals CpuSession's int8 cache") {
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const glass::ModelConfig c = glass::fast::small_family_config(f);
        const glass::Model m = glass::fast::random_family_model(c, 7);
        glass::CpuSession ref(m, glass::KvType::int8);
        FastOptions options{.threads = 2, .prefill_chunk = 5};
        options.kv = glass::KvType::int8;
        FastCpuSession fast(m, options);
        CHECK(worst_error(ref, fast, ids_from(3, 13, c.vocab_size), ids_from(9, 6, c.vocab_size)) <= 1e-3);
    }
}

// fp16, bf16, q8 and q4 weights: within each type's stated tolerance of the fp32 reference
// (kernel_checks::weight_tolerance, the bound the shipped model's test uses), and really rounded.
TEST_CASE("reduced-precision weights in every family stay within their tolerance of the fp32 reference") {
    for (const std::string& f : kFamilies)
        for (const WeightType type : kernel_checks::kAllTypes) {
            if (type == WeightType::fp32) continue;
            CAPTURE(f);
            CAPTURE(std::string(glass::fast::to_string(type)));
            const glass::ModelConfig c = glass::fast::small_family_config(f);
            const glass::Model m = glass::fast::random_family_model(c, 7);
            glass::CpuSession ref(m);
            FastCpuSession fast(m, FastOptions{.threads = 2, .weights = type});
            const double error = worst_error(ref, fast, ids_from(3, 13, c.vocab_size), ids_from(9, 6, c.vocab_size));
            CHECK(error <= kernel_checks::weight_tolerance(type));
            CHECK(error > 1e-5);
        }
}

}  // namespace test_fast_families
