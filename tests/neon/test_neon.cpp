// The kernel sets of an AArch64 CPU (portable and neon, kernels_neon*.hpp), each checked against
// the portable loops, then the fast path's greedy goldens with each set forced. Cross-compiled
// and run under qemu-aarch64 by tests/neon/run.sh (ctest neon_qemu); it also builds and passes
// on x86-64, where it checks whichever sets that CPU runs.
//
// Only the fast path's headers are included: glass.hpp would bring the tokenizers' regular
// expressions (PCRE2) and Unicode tables (utf8proc), libraries with no AArch64 build here. The
// goldens carry their token ids, so no text is tokenized; the engine's Llama2cTokenizer (header
// only) turns ids back into text.
//
// The kernel checks are tests/kernel_checks.hpp's, the ones tests/test_fast_kernel_checks.cpp
// runs on x86-64 (same odd sizes, same tolerances).
#include <doctest/doctest.h>  // main(): tests/doctest_main.cpp

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/checkpoint.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/sampling.hpp"
#include "glass/serve/engine.hpp"
#include "glass/tokenizer.hpp"

#include "../kernel_checks.hpp"  // glass/fast/kernels.hpp, quantize.hpp, kv_cache.hpp

namespace {

using glass::fast::FastCpuSession;
using glass::fast::FastOptions;
using glass::fast::Kernels;
using glass::fast::WeightType;
using kernel_checks::kAllTypes;
using kernel_checks::set_names;  // every set this CPU runs, portable first (the goldens run on each)
using kernel_checks::vector_sets;  // every one but the reference: those checked against it

std::string models_dir() { return GLASS_MODELS_DIR; }

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
    for (const Kernels& fast : vector_sets()) kernel_checks::check_products(fast);
}

TEST_CASE("kernels: matvec_int8 equals quantized_dot_int8 on every set") {
    std::vector<Kernels> sets = vector_sets();
    sets.push_back(glass::fast::portable_kernels());
    kernel_checks::check_matvec_int8(sets);
}

TEST_CASE("kernels: decode attention over a run of cached rows equals the plain loops, and one run at a time bit for bit") {
    for (const Kernels& fast : vector_sets()) kernel_checks::check_decode_attention(fast);
}

TEST_CASE("kernels: dequantize_rows gives dequantize_kv_row's values bit for bit") {
    for (const Kernels& k : vector_sets()) kernel_checks::check_dequantize_rows(k);
    kernel_checks::check_dequantize_rows(glass::fast::portable_kernels());
}

TEST_CASE("kernels: quantize_int8 gives quantize_activations' bytes, scales and sums (ties, zeros, NaN and inf blocks)") {
    for (const Kernels& k : vector_sets()) kernel_checks::check_quantize_int8(k);
    kernel_checks::check_quantize_int8(glass::fast::portable_kernels());
}

TEST_CASE("kernels: prefill attention tiles equal the plain loops (tails in rows, keys, head_dim)") {
    for (const Kernels& fast : vector_sets()) kernel_checks::check_prefill_attention(fast);
}

TEST_CASE("kernels: softmax, silu_mul, exp_shift and row_max equal the scalar definitions (std::exp)") {
    for (const Kernels& fast : vector_sets()) kernel_checks::check_elementwise(fast);
}

TEST_CASE("kernels: the probes sum what they read and run their FMA chains") {
    for (const Kernels& k : vector_sets()) kernel_checks::check_probes(k);
}

namespace {

// The golden cases run here: every one of 32 or 64 steps (24 of the 36: all 12 prompts, the
// 36- and 100-token ones generating nothing or little), and one of 256 steps (a long decode: 256
// cached positions in 16 KV blocks). The other 256-step runs repeat the same prompts for longer
// and hold 70 % of the tokens: minutes under qemu (test_fast_session.cpp and test_fast_serve.cpp run
// all 36 natively).
std::vector<nlohmann::json> goldens_run_here() {
    const std::string path = std::string(GLASS_SHARED_DIR) + "/goldens/stories260K_greedy.jsonl";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "missing ground-truth file " << path);
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        nlohmann::json g = nlohmann::json::parse(line);
        if (g["steps"].get<int>() <= 64 || g["case"] == "once_upon_n256") out.push_back(std::move(g));
    }
    REQUIRE(out.size() == 25);
    return out;
}

// The weight types each set's goldens run with: all five on every set but the reference, whose
// plain loops run fp32 only, the exact one. Its other types are the very code
// test_fast_session.cpp runs on x86-64, and under qemu they are the slowest runs of all (fp16's
// per-weight conversions alone took 21 s of this program's 57); the kernel cases above still hold
// every NEON kernel, fp16 included, to the portable loops here.
// The reference's fp32 run keeps only every fifth golden (5 of 25): enough to catch an AArch64
// build of the plain loops that rounds differently (a contracted multiply-add, say), while all 25
// took 32 s of this test's 78 under qemu on a Zen 3 VM (the same loops run all 25 natively).
constexpr size_t kPortableGoldenStride = 5;
std::vector<WeightType> golden_types(const std::string& set) {
    if (set == "portable") return {WeightType::fp32};
    return {std::begin(kAllTypes), std::end(kAllTypes)};
}

// One thread (a second thread's spinning only costs under emulation), these weights, this set.
FastOptions forced(const std::string& set, WeightType type) {
    FastOptions options;
    options.threads = 1;
    options.weights = type;
    options.kernels = set;
    return options;
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

// The sharpest end-to-end check, as in test_fast_session.cpp: fp32 and fp16 reproduce every golden
// exactly; bf16, Q8_0 and Q4_0 may pick the other token only where the golden's top two logits
// are closer than their tolerance allows. Each kernel set is forced through FastOptions::kernels.
TEST_CASE("greedy goldens on the shipped model through FastCpuSession, every kernel set forced") {
    const std::vector<nlohmann::json> goldens = goldens_run_here();
    for (const std::string& set : set_names())
        for (WeightType type : golden_types(set)) {
            CAPTURE(set);
            CAPTURE(std::string(glass::fast::to_string(type)));
            const auto t0 = std::chrono::steady_clock::now();
            FastCpuSession fast(shipped(), forced(set, type));
            REQUIRE(std::string(fast.kernel_name()) == set);
            int exact = 0, cases = 0;
            for (size_t c = 0; c < goldens.size(); c += set == "portable" ? kPortableGoldenStride : 1) {
                const nlohmann::json& g = goldens[c];
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
                CHECK(top1 - top2 <= 2 * kernel_checks::weight_tolerance(type) * std::fabs(top1));
            }
            MESSAGE(set << ", " << std::string(glass::fast::to_string(type)) << " weights: " << exact << " of " << cases
                        << " golden cases identical (" << seconds_since(t0) << " s)");
        }
}

// The paged engine batches the goldens on FastPagedBackend: batching changes no bit, so each
// request still gets run.c's ids (test_fast_serve.cpp's check), on the NEON set with fp32 and fp16
// weights. (The portable set's batched run is test_fast_serve.cpp's, natively: under qemu it
// added 9 s and no NEON code.)
TEST_CASE("greedy goldens batched in one engine on the fast paged backend, the neon set forced") {
    const std::vector<nlohmann::json> goldens = goldens_run_here();
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(models_dir() + "/tok512.bin", 512);
    for (const std::string& set : set_names())
        for (WeightType type : {WeightType::fp32, WeightType::fp16}) {
            if (set == "portable") continue;
            CAPTURE(set);
            CAPTURE(std::string(glass::fast::to_string(type)));
            const auto t0 = std::chrono::steady_clock::now();
            glass::fast::FastPagedBackend backend(shipped(), forced(set, type));
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
