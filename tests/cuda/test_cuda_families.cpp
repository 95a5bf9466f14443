// tests/cuda/test_cuda_families.cpp — every model family (config.hpp's deltas) on the GPU against
// the CPU reference, in the test_cuda_model program.
//
// For each family of glass::fast::small_family_config (Llama 2 and 3, Mistral, Qwen2 and 3, Gemma 2
// and 3: random weights, glass::fast::random_family_model), a prompt longer than the sliding
// windows (6 and 5 positions) prefilled in two chunks, then greedy decode steps:
//   CudaSession      every chunk's and step's logits within kF32 of CpuSession's, through each
//                    attention the session runs (naive prefill + per-row decode, CUDA graph
//                    decode, naive decode, flash prefill + split-K decode);
//   CudaPagedBackend two requests in one pool, a prompt chunked beside another's decode, every
//                    logit row within kF32 of CpuPagedBackend's, with each paged attention.
// And the tolerance cannot hide a dropped delta: the CPU reference run with any one of the
// family's deltas switched off (same weights) is more than kDropped away from it.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../test_support.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "cuda_session.hpp"
#include "paged.hpp"

namespace gc = glass::cuda;

namespace {

using test::relative_error;

const std::string kFamilies[] = {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};
constexpr double kF32 = 1e-5;  // fp32 on both sides; only summation order and expf/tanhf/cosf ulps differ
// A delta dropped moves the logits by more than this: ten times kF32, so a backend that skipped
// one could not pass by rounding luck. (The smallest measured on the CPU: Gemma 2's final logit
// soft-cap, 5.5e-4; most move them by 1e-2 or more.)
constexpr double kDropped = 10 * kF32;
constexpr std::uint64_t kSeed = 7;
constexpr int kPrompt = 20, kFirstChunk = 13, kDecodes = 5;

// Deterministic token ids inside the vocabulary.
std::vector<int> ids_from(int seed, int n, int vocab) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (seed * 31 + i * 17 + (i * i) % 7) % vocab;
    return ids;
}

// One sequence's run: the prompt in two chunks, then decodes of `next` ids; the logits of each pass.
struct Script {
    std::vector<int> prompt, next;
};
using Logits = std::vector<std::vector<float>>;

Logits run_session(glass::Session& s, const Script& script) {
    Logits out;
    const std::span<const int> p(script.prompt);
    for (const std::span<const int> chunk : {p.first(kFirstChunk), p.subspan(kFirstChunk)}) {
        const std::span<const float> l = s.prefill(chunk);
        out.emplace_back(l.begin(), l.end());
    }
    for (const int id : script.next) {
        const std::span<const float> l = s.decode(id);
        out.emplace_back(l.begin(), l.end());
    }
    return out;
}

// The script of a family: its prompt and the ids the CPU reference picks greedily after it.
Script script_of(const glass::Model& m) {
    Script s{ids_from(3, kPrompt, m.config.vocab_size), {}};
    glass::CpuSession cpu(m);
    std::span<const float> l = cpu.prefill(s.prompt);
    for (int i = 0; i < kDecodes; ++i) {
        s.next.push_back(glass::sample_argmax(l));
        l = cpu.decode(s.next.back());
    }
    return s;
}

double worst_error(const Logits& got, const Logits& want) {
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, relative_error(got[i], want[i]));
    return worst;
}

// `m`'s weights again (same seed), with the delta `name` switched off in its config (and Qwen2's
// biases, which the reference adds whenever they are present, removed).
glass::Model without(const glass::ModelConfig& c, const std::string& name) {
    glass::Model m = glass::fast::random_family_model(c, kSeed);
    glass::ModelConfig& o = m.config;
    if (name == "rope_scaling") o.rope_scaling = {};
    if (name == "qk_norm") o.qk_norm = false;
    if (name == "norm_weight_offset") o.norm_weight_offset = 0.0f;
    if (name == "sandwich_norms") o.sandwich_norms = false;
    if (name == "gelu_tanh") o.mlp_activation = glass::MlpActivation::silu;
    if (name == "embedding_scale") o.embedding_scale = 1.0f;
    if (name == "attention_scale") o.attention_scale = 0.0f;
    if (name == "attn_logit_softcap") o.attn_logit_softcap = 0.0f;
    if (name == "final_logit_softcap") o.final_logit_softcap = 0.0f;
    if (name == "sliding_window") o.sliding_window = 0;
    if (name == "rope_theta_local") o.rope_theta_local = 0.0f;
    if (name == "qkv_bias") {
        o.qkv_bias = false;
        for (glass::LayerWeights& w : m.layers)
            for (glass::ConstVectorMap* b : {&w.bq, &w.bk, &w.bv}) {  // a Map cannot be re-seated by =
                std::destroy_at(b);
                std::construct_at(b, nullptr, 0);
            }
    }
    return m;
}

}  // namespace

TEST_CASE("every family: CudaSession's logits within 1e-5 of CpuSession's, each attention, past the window") {
    struct Variant {
        const char* name;
        gc::CudaOptions options;
    };
    gc::CudaOptions graph, naive_decode, flash;
    graph.graph = true;
    naive_decode.naive_decode_attention = true;
    flash.attention = gc::SessionAttention::flash;
    flash.flash_decode_min_keys = 16;  // every decode step through split-K, in chunks of 8 keys:
    flash.flash_decode_chunk = 8;      // the window leaves the first splits empty
    const Variant variants[] = {{"standard", {}}, {"graph", graph}, {"naive decode", naive_decode}, {"flash", flash}};
    for (const std::string& family : kFamilies) {
        CAPTURE(family);
        const glass::ModelConfig c = glass::fast::small_family_config(family);
        const glass::Model m = glass::fast::random_family_model(c, kSeed);
        const Script script = script_of(m);
        glass::CpuSession cpu(m);
        const Logits want = run_session(cpu, script);
        for (const Variant& v : variants) {
            CAPTURE(v.name);
            gc::CudaSession gpu(m, v.options);
            const Logits got = run_session(gpu, script);
            CHECK(worst_error(got, want) <= kF32);
            for (const std::vector<float>& l : got) REQUIRE(std::isfinite(l[0]));
        }
    }
}

TEST_CASE("every family: dropping any one delta moves the reference's logits far past the tolerance") {
    // What a backend that skipped a delta would compute: the same weights, that delta off. Each
    // must miss the family's logits by more than kDropped, so the 1e-5 checks above and below
    // catch it. (head_dim != dim / n_heads is no switch: the shapes depend on it.)
    int checked = 0;
    for (const std::string& family : kFamilies) {
        const glass::ModelConfig c = glass::fast::small_family_config(family);
        const glass::Model m = glass::fast::random_family_model(c, kSeed);
        const Script script = script_of(m);
        glass::CpuSession cpu(m);
        const Logits want = run_session(cpu, script);
        for (const std::string& delta : glass::family_deltas(c)) {
            if (delta == "head_dim != dim / n_heads") continue;
            CAPTURE(family);
            CAPTURE(delta);
            const glass::Model off = without(c, delta);
            REQUIRE(glass::family_deltas(off.config).size() + 1 == glass::family_deltas(c).size());
            glass::CpuSession other(off);
            CHECK(worst_error(run_session(other, script), want) > kDropped);
            ++checked;
        }
    }
    CHECK(checked >= 20);  // every family's deltas, not a few
}

namespace {

// Two requests through a paged backend: A's prompt in two chunks (the first wanting no logits),
// B's whole beside A's first chunk, then both decoding; A's blocks are the even ones of the pool,
// B's the odd ones. Every logit row of every step, in order.
Logits run_paged(glass::serve::PagedBackend& backend, const Script& a, const Script& b, int block_size) {
    backend.allocate_pool(32, block_size);
    std::vector<int> table_a, table_b;
    for (int i = 0; i < 16; ++i) {
        table_a.push_back(2 * i);
        table_b.push_back(2 * i + 1);
    }
    Logits out;
    const auto step = [&](const std::vector<glass::serve::BatchEntry>& batch) {
        const std::span<const float> l = backend.forward(batch);
        const size_t vocab = static_cast<size_t>(backend.config().vocab_size);
        for (size_t r = 0; r < l.size() / vocab; ++r) out.emplace_back(l.begin() + r * vocab, l.begin() + (r + 1) * vocab);
    };
    const std::span<const int> pa(a.prompt);
    step({{.tokens = pa.first(kFirstChunk), .start = 0, .block_table = table_a, .wants_logits = false},
          {.tokens = b.prompt, .start = 0, .block_table = table_b}});
    step({{.tokens = {&b.next[0], 1}, .start = kPrompt, .block_table = table_b},
          {.tokens = pa.subspan(kFirstChunk), .start = kFirstChunk, .block_table = table_a}});
    for (int i = 0; i + 1 < kDecodes; ++i)
        step({{.tokens = {&a.next[size_t(i)], 1}, .start = kPrompt + i, .block_table = table_a},
              {.tokens = {&b.next[size_t(i + 1)], 1}, .start = kPrompt + 1 + i, .block_table = table_b}});
    return out;
}

}  // namespace

TEST_CASE("every family: CudaPagedBackend's logits within 1e-5 of CpuPagedBackend's, each paged attention") {
    using A = gc::PagedAttention;
    struct Variant {
        gc::MatmulKernel matmul;
        A attention;
        int block_size;
    };
    const Variant variants[] = {{gc::MatmulKernel::tiled, A::per_row, 4},
                                {gc::MatmulKernel::naive, A::naive, 3},
                                {gc::MatmulKernel::warp_per_row, A::flash, 5}};
    for (const std::string& family : kFamilies) {
        CAPTURE(family);
        const glass::ModelConfig c = glass::fast::small_family_config(family);
        const glass::Model m = glass::fast::random_family_model(c, kSeed);
        Script a = script_of(m), b = a;
        b.prompt = ids_from(5, kPrompt, c.vocab_size);
        glass::CpuSession cpu_b(m);  // B's greedy ids, picked by the reference
        std::span<const float> l = cpu_b.prefill(b.prompt);
        for (int& id : b.next) {
            id = glass::sample_argmax(l);
            l = cpu_b.decode(id);
        }
        for (const Variant& v : variants) {
            CAPTURE(gc::to_string(v.attention));
            CAPTURE(v.block_size);
            glass::serve::CpuPagedBackend cpu(m);
            gc::CudaPagedBackend gpu(m, {gc::WeightType::f32, v.matmul, v.attention});
            const Logits want = run_paged(cpu, a, b, v.block_size);
            const Logits got = run_paged(gpu, a, b, v.block_size);
            CHECK(want.size() == 2 + 2 * (kDecodes - 1) + 1);
            CHECK(worst_error(got, want) <= kF32);
        }
    }
}

TEST_CASE("every family with q8 and q4 weights: CudaSession and CudaPagedBackend within 1e-5 of the CPU on the same weights") {
    // DeviceWeights quantizes each matrix with glass::quantize (cuda/quantize.cpp) and keeps the
    // embedding fp32; glass::quantized_model() hands the CPU reference exactly those weights as
    // d · q in fp32 (for a family, through quantized_family_model). The two compute the same sums
    // in other orders (per block Σ q·x, then · d), so kF32 applies as in fp32.
    for (const std::string& family : kFamilies) {
        CAPTURE(family);
        const glass::Model m = glass::fast::random_family_model(glass::fast::small_family_config(family), kSeed);
        for (const glass::QuantFormat f : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0}) {
            const gc::WeightType type = f == glass::QuantFormat::q8_0 ? gc::WeightType::q8_0 : gc::WeightType::q4_0;
            CAPTURE(gc::to_string(type));
            const glass::Model quantized = glass::quantized_model(m, f);
            Script a = script_of(quantized), b = a;
            b.prompt = ids_from(5, kPrompt, m.config.vocab_size);
            glass::CpuSession cpu(quantized);
            gc::CudaOptions options;
            options.weights = type;
            gc::CudaSession gpu(m, options);
            CHECK(worst_error(run_session(gpu, a), run_session(cpu, a)) <= kF32);
            if (type != gc::WeightType::q4_0) continue;  // the paged engine once, on the 4-bit blocks (emulator time)
            glass::serve::CpuPagedBackend cpu_paged(quantized);
            gc::CudaPagedBackend gpu_paged(m, {type, gc::MatmulKernel::warp_per_row, gc::PagedAttention::per_row});
            CHECK(worst_error(run_paged(gpu_paged, a, b, 4), run_paged(cpu_paged, a, b, 4)) <= kF32);
        }
    }
}
