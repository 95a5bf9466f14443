// tests/cuda/test_cuda_model_paged.cpp — the serving backend, CudaPagedBackend, against
// CpuPagedBackend on the engine's ragged batches (fp32, f16, q4 and k-quant weights, an int8 pool,
// every paged attention), the engine over it (each request as if alone, llama2.c's goldens
// batched, speculation, prompts computed by a prefill worker whose K/V is shipped), and what it
// refuses. The k-quant test runs CudaSession too.
// (part of the test_cuda_model program; cuda_model_support.hpp has the shared pieces)
//
// The emulator runs these on the CPU at a few thousand fibers per kernel launch, so the workloads
// are small (a handful of requests of a few dozen tokens); on a GPU they take a moment.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../serve_workloads.hpp"
#include "cuda_model_support.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/ggml_quants_write.hpp"
#include "glass/serve/remote_prefill.hpp"
#include "glass/speculative.hpp"
#include "paged.hpp"

using namespace cuda_model_test;

TEST_CASE("CudaPagedBackend: every step's logits within 1e-5 of CpuPagedBackend's on the same batches") {
    // Ragged batches from the engine itself: prompts chunked by a small budget, prefix-cache hits
    // (blocks shared between requests), decode rows beside prompt chunks, a pool small enough to
    // preempt. Every matmul kernel the backend allows, all three paged attentions; fp16 weights
    // against the CPU on the same rounded weights (as for CudaSession, test_cuda_model.cpp).
    const glass::Model& m = test::shipped();
    const glass::Model f16_weights = rounded_copy(m, gc::WeightType::f16);
    const glass::Model q4_weights = glass::quantized_model(m, glass::QuantFormat::q4_0);  // as DeviceWeights stores q4
    using A = gc::PagedAttention;
    struct Variant { gc::MatmulKernel matmul; A attention; int block_size; gc::WeightType weights; int n_requests; };
    for (const Variant v : {Variant{gc::MatmulKernel::tiled, A::per_row, 5, gc::WeightType::f32, 5},
                            Variant{gc::MatmulKernel::naive, A::naive, 16, gc::WeightType::f32, 5},
                            Variant{gc::MatmulKernel::warp_per_row, A::per_row, 1, gc::WeightType::f32, 5},
                            Variant{gc::MatmulKernel::tiled, A::per_row, 7, gc::WeightType::f16, 5},
                            Variant{gc::MatmulKernel::tiled, A::flash, 3, gc::WeightType::f32, 3},
                            Variant{gc::MatmulKernel::warp_per_row, A::per_row, 5, gc::WeightType::q4_0, 3}}) {
        if (kSmall && v.block_size != 5 && v.block_size != 16 && v.attention != A::flash) continue;  // one of each
        CAPTURE(gc::to_string(v.matmul));
        CAPTURE(gc::to_string(v.attention));
        CAPTURE(v.block_size);
        CAPTURE(gc::to_string(v.weights));
        gc::CudaPagedBackend gpu(m, {v.weights, v.matmul, v.attention});
        const glass::Model& cpu_weights = v.weights == gc::WeightType::f32   ? m
                                          : v.weights == gc::WeightType::f16 ? f16_weights
                                                                             : q4_weights;
        glass::serve::CpuPagedBackend cpu(cpu_weights);
        ComparingBackend both(gpu, cpu);
        const test::Workload w = test::random_workload(7, m.config, v.block_size, /*budget=*/24,
                                                       /*num_blocks=*/(120 + v.block_size - 1) / v.block_size,
                                                       /*prefix_caching=*/true, /*chunked_prefill=*/true, v.n_requests);
        test::WorkloadStats stats;
        test::run_workload(both, test::shipped_tok(), w, &stats);
        CHECK(both.worst <= kF32);
        CHECK(both.rows > both.steps);  // batches of several rows, not one at a time
        CHECK(stats.chunked_prompts > 0);
    }
}

namespace {

const gc::WeightType kKQuantTypes[] = {gc::WeightType::q4_k, gc::WeightType::q5_k, gc::WeightType::q6_k};

std::uint32_t ggml_type_of(gc::WeightType t) {
    const glass::GgmlType g = t == gc::WeightType::q4_k   ? glass::GgmlType::q4_k
                              : t == gc::WeightType::q5_k ? glass::GgmlType::q5_k
                                                          : glass::GgmlType::q6_k;
    return static_cast<std::uint32_t>(g);
}

// A random llama2 model whose every matrix is whole super-blocks of 256 (the shipped model's dim
// of 64 is not): dim 256, hidden 768, 2 layers, 4 heads (head_dim 64) over 2 KV heads, the
// shipped tokenizer's 512 ids, its own classifier. Small enough for the emulator.
const glass::Model& kquant_model() {
    static const glass::Model m = [] {
        glass::ModelConfig c = glass::llama2_config(256, 768, 2, 4, 2, 512, 128);
        c.shared_classifier = false;
        return glass::fast::random_model_in_memory(c, 17);
    }();
    return m;
}

// The CPU reference for DeviceWeights with k-quant weights: every matrix it quantizes (the seven
// of each layer and the classifier; not the embedding table, which it keeps fp32) replaced by
// ggml_to_float of its ggml_from_float blocks, the very numbers kquants.cu multiplies by.
// (model_in_file_type would round the embedding table too.)
glass::Model kquant_reference(const glass::Model& m, gc::WeightType type) {
    const glass::ModelConfig& c = m.config;
    REQUIRE(!c.shared_classifier);
    const std::size_t n = std::size_t((glass::llama2c_file_bytes(c) - 28) / 4);
    auto buffer = std::make_shared<std::vector<float>>(m.token_embedding, m.token_embedding + n);
    const auto round_in_place = [&](const float* p, std::int64_t count) {
        const std::vector<float> w = glass::ggml_round_trip(ggml_type_of(type), p, count);
        std::copy(w.begin(), w.end(), buffer->data() + (p - m.token_embedding));
    };
    round_in_place(m.classifier, std::int64_t{c.vocab_size} * c.dim);
    for (const glass::LayerWeights& w : m.layers)
        for (const glass::ConstMatrixMap* mat : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w2, &w.w3})
            round_in_place(mat->data(), mat->size());
    return glass::model_from_llama2c_bytes(c, buffer->data(), buffer);
}

}  // namespace

TEST_CASE("k-quant weights: CudaSession and CudaPagedBackend equal the CPU on the same dequantized weights") {
    // DeviceWeights quantizes each matrix with glass::ggml_from_float and kquants.cu multiplies by
    // exactly ggml_to_float's weights, so against the CPU on kquant_reference() only the order of
    // fp32 additions differs: kF32, and the same greedy tokens. Stream decode for each type; graph
    // decode for one; the paged backend on the engine's ragged batches for each type (one each
    // under the small size: q4_k's session and q6_k's pool). The shipped model's rows of 64 are
    // refused, naming the width.
    const glass::Model& m = kquant_model();
    const glass::ModelConfig& c = m.config;
    const std::vector<int> prompt = {1, 17, 300, 42, 99, 5, 260};
    const int steps = int(prompt.size()) - 1 + (kEmulated ? 6 : 32);
    for (const gc::WeightType type : kKQuantTypes) {
        CAPTURE(std::string(gc::to_string(type)));
        const glass::Model reference = kquant_reference(m, type);
        std::int64_t want_bytes = 4 * (std::int64_t{c.n_layers} * 2 * c.dim + c.dim) +
                                  glass::ggml_bytes(ggml_type_of(type), std::int64_t{c.vocab_size} * c.dim);
        for (const glass::LayerWeights& w : m.layers)
            for (const glass::ConstMatrixMap* mat : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w1, &w.w2, &w.w3})
                want_bytes += glass::ggml_bytes(ggml_type_of(type), mat->size());
        for (const bool graph : {false, true}) {
            if (graph && type != gc::WeightType::q5_k) continue;
            if (kSmall && (graph || type != gc::WeightType::q4_k)) continue;
            CAPTURE(graph);
            gc::CudaOptions options;
            options.weights = type;
            options.graph = graph;
            gc::CudaSession gpu(m, options);
            CHECK(gpu.weight_bytes() == want_bytes);
            glass::CpuSession cpu(reference);
            const GreedyRun run = greedy_side_by_side(gpu, cpu, prompt, steps);
            glass::CpuSession reference_a(reference), reference_b(reference);
            const GreedyRun want = greedy_side_by_side(reference_a, reference_b, prompt, steps);
            CHECK(run.ids == want.ids);
            CHECK(run.worst_logit_error <= kF32);
            MESSAGE(std::string(gc::to_string(type)) << std::string(graph ? " graph" : "") << ": worst logit error " << run.worst_logit_error);
        }
        if (kSmall && type != gc::WeightType::q6_k) continue;
        gc::CudaPagedBackend gpu(m, {type, gc::MatmulKernel::warp_per_row, gc::PagedAttention::per_row});
        glass::serve::CpuPagedBackend cpu(reference);
        ComparingBackend both(gpu, cpu);
        const test::Workload w = test::random_workload(7, c, /*block_size=*/5, /*budget=*/24, /*num_blocks=*/24,
                                                       /*prefix_caching=*/true, /*chunked_prefill=*/true, /*n_requests=*/2);
        test::WorkloadStats stats;
        test::run_workload(both, test::shipped_tok(), w, &stats);
        CHECK(both.worst <= kF32);
        CHECK(both.rows > both.steps);
        CHECK(stats.chunked_prompts > 0);
        CHECK(gpu.weight_bytes() == want_bytes);
        MESSAGE(std::string(gc::to_string(type)) << " paged: worst logit error " << both.worst << " over " << both.steps << " steps");
    }
    CHECK_THROWS_WITH_AS(gc::CudaSession(test::shipped(), {.weights = gc::WeightType::q4_k, .matmul = gc::MatmulKernel::automatic}),
                         doctest::Contains("a row of 64 is not"), glass::Error);
}

// An int8 pool (CudaPagedOptions::kv) against CpuPagedBackend(m, KvType::int8) on the engine's
// ragged batches (chunks, prefix hits, decode rows beside prompt rows), all three paged attentions.
// Tolerance kInt8 on each entry's logits (cuda_model_support.hpp says why: a K/V value within ~1e-7 of
// a rounding boundary may round to the other integer on one side).
TEST_CASE("CudaPagedBackend with an int8 pool: every step's logits near CpuPagedBackend's int8 pool") {
    const glass::Model& m = test::shipped();
    for (const gc::PagedAttention attention :
         {gc::PagedAttention::per_row, gc::PagedAttention::naive, gc::PagedAttention::flash}) {
        if (kSmall && attention == gc::PagedAttention::naive) continue;
        CAPTURE(gc::to_string(attention));
        gc::CudaPagedOptions options;
        options.attention = attention;
        options.kv = glass::KvType::int8;
        gc::CudaPagedBackend gpu(m, options);
        glass::serve::CpuPagedBackend cpu(m, glass::KvType::int8);
        CHECK(gpu.kv_type() == glass::KvType::int8);
        ComparingBackend both(gpu, cpu);
        const test::Workload w = test::random_workload(7, m.config, 5, /*budget=*/24, /*num_blocks=*/24,
                                                       /*prefix_caching=*/true, /*chunked_prefill=*/true, /*n_requests=*/3);
        test::WorkloadStats stats;
        test::run_workload(both, test::shipped_tok(), w, &stats);
        CHECK(both.worst <= kInt8);
        CHECK(both.rows > both.steps);
        CHECK(gpu.pool_bytes() == 24 * 5 * glass::kv_bytes_per_token(m.config, glass::KvType::int8));
        CHECK(gpu.pool_bytes_for(24, 5) == gpu.pool_bytes());  // what it would allocate is what it did
    }
    // Through a PagedSession, the pool's type and bytes are the session's.
    gc::CudaPagedOptions options;
    options.kv = glass::KvType::int8;
    gc::CudaPagedBackend backend(m, options);
    glass::serve::PagedSession session(backend);
    glass::CpuSession cpu(m, glass::KvType::int8);
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    CHECK(relative_error(session.prefill(prompt), cpu.prefill(prompt)) <= kInt8);
    CHECK(relative_error(session.decode(432), cpu.decode(432)) <= kInt8);
    CHECK(session.kv_type() == glass::KvType::int8);
    CHECK(session.kv_bytes_used() == 6 * glass::kv_bytes_per_token(m.config, glass::KvType::int8));
}

TEST_CASE("engine over CudaPagedBackend: each request's tokens equal the request run alone") {
    // test/serve_workloads.hpp's check: every request's ids under the engine equal those of the
    // same request alone through generate() on a PagedSession of a second CudaPagedBackend. That
    // holds only if no row's arithmetic depends on the batch (see CudaPagedOptions).
    const glass::Model& m = test::shipped();
    gc::CudaPagedBackend backend(m), alone(m);
    test::WorkloadStats total;
    struct W { unsigned seed; int block, budget, pool_positions; bool prefix, chunked; };
    // Seeds picked (on the CPU reference) so that between them the three preempt, chunk and hit
    // the prefix cache; block sizes 1, 16 and 5; one without chunked prefill.
    for (const W w : {W{8, 1, 7, 90, true, true}, W{21, 16, 32, 96, false, true}, W{10, 5, 512, 90, true, false}}) {
        if (kSmall && w.seed != 8) continue;
        const test::Workload workload = test::random_workload(w.seed, m.config, w.block, w.budget,
                                                              (w.pool_positions + w.block - 1) / w.block, w.prefix,
                                                              w.chunked, /*n_requests=*/5);
        total.add(test::check_workload_against_alone(backend, alone, test::shipped_tok(), workload));
    }
    if (!kSmall) test::check_exercised(total, 3);  // the workloads did what they are meant to
    // The flash attention (CudaPagedOptions::attention) under the same rule, on the first workload
    // (block size 1, chunked prompts, prefix hits, preemption).
    gc::CudaPagedOptions flash;
    flash.attention = gc::PagedAttention::flash;
    gc::CudaPagedBackend flash_backend(m, flash), flash_alone(m, flash);
    const test::Workload workload = test::random_workload(8, m.config, 1, 7, 90, true, true, /*n_requests=*/5);
    test::check_workload_against_alone(flash_backend, flash_alone, test::shipped_tok(), workload);
}

TEST_CASE("engine over CudaPagedBackend: llama2.c's greedy goldens, batched") {
    const glass::Model& m = test::shipped();
    gc::CudaPagedBackend backend(m);
    glass::serve::EngineOptions eo;
    eo.block_size = 7;
    glass::serve::Engine engine(backend, test::shipped_tok(), eo);
    std::vector<nlohmann::json> goldens;
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl")))
        if (g["case"].get<std::string>().ends_with("_n32")) goldens.push_back(g);
    REQUIRE(goldens.size() == 12);
    for (const nlohmann::json& g : goldens) engine.add_request(g["prompt"].get<std::string>(), test::golden_options(g));
    const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
    REQUIRE(results.size() == goldens.size());
    for (std::size_t i = 0; i < goldens.size(); ++i) {
        CAPTURE(goldens[i]["case"].get<std::string>());
        CHECK(results[i].prompt_ids == test::ids_of(goldens[i]["prompt_ids"]));
        CHECK(results[i].generated_ids == test::ids_of(goldens[i]["generated_ids"]));
    }
}

TEST_CASE("engine over CudaPagedBackend with speculation: every checked row as on the CPU; ids as the CPU's") {
    // Speculative decoding in the engine (draft k = 3, the first 4 layers as each request's
    // draft, on the host): the batches now hold entries that want every row's logits. Every row
    // is compared with CpuPagedBackend's; greedy ids must be the goldens; SAMPLED requests (seeded,
    // T = 0.8, top-p on half) must draw what the same engine draws over the CPU reference, which
    // takes the device's logits through the rule's accept/reject coins and residual draws.
    const glass::Model& m = test::shipped();
    const glass::Model draft_model = glass::first_layers(m, 4);
    std::vector<nlohmann::json> cases;
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl")))
        if (variant_golden(g["case"].get<std::string>()) && (cases.size() < 3 || !kEmulated)) cases.push_back(g);
    REQUIRE(!cases.empty());
    const auto run = [&](glass::serve::PagedBackend& backend, bool sampled) {
        glass::serve::EngineOptions eo;
        eo.block_size = 5;
        eo.draft_k = 3;
        eo.make_drafter = [&] {
            return std::make_unique<glass::ModelDrafter>(std::make_unique<glass::CpuSession>(draft_model), "layers:4");
        };
        glass::serve::Engine engine(backend, test::shipped_tok(), eo);
        for (std::size_t i = 0; i < cases.size(); ++i) {
            glass::GenerateOptions o = golden_run_options(cases[i]);
            if (sampled) {
                o.sampling.temperature = 0.8f;
                o.seed = 11 + i;
                if (i % 2) o.sampling.top_p = 0.9f;
            }
            engine.add_request_ids(test::ids_of(cases[i]["prompt_ids"]), o);
        }
        return engine.run_to_completion();
    };
    gc::CudaPagedBackend gpu(m);
    glass::serve::CpuPagedBackend cpu(m), reference(m);
    ComparingBackend both(gpu, cpu);
    const auto greedy = run(both, false);
    REQUIRE(greedy.size() == cases.size());
    std::int64_t accepted = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(cases[i]["case"].get<std::string>());
        CHECK(greedy[i].generated_ids == golden_run(cases[i]).want);
        accepted += greedy[i].draft_accepted;
    }
    CHECK(both.worst <= kF32);
    if (!kSmall) CHECK(accepted > 0);
    const auto on_gpu = run(both, true), on_cpu = run(reference, true);
    CHECK(both.worst <= kF32);
    for (std::size_t i = 0; i < cases.size(); ++i) {
        CAPTURE(cases[i]["case"].get<std::string>());
        CHECK(on_gpu[i].generated_ids == on_cpu[i].generated_ids);
        CHECK(on_gpu[i].draft_accepted == on_cpu[i].draft_accepted);
    }
}

TEST_CASE("CudaPagedBackend refuses what it cannot do, naming it") {
    const glass::Model& m = test::shipped();
    for (gc::MatmulKernel k : {gc::MatmulKernel::cublas, gc::MatmulKernel::automatic})
        CHECK_THROWS_WITH_AS(gc::CudaPagedBackend(m, {gc::WeightType::f32, k}),
                             doctest::Contains("batch invariance"), glass::Error);
    gc::CudaPagedBackend gpu(m);
    const std::vector<int> tokens = {1, 403, 407};
    const std::vector<int> table = {0};
    const glass::serve::BatchEntry entry{.tokens = tokens, .start = 0, .block_table = table};
    CHECK_THROWS_WITH_AS(gpu.forward({&entry, 1}), doctest::Contains("allocate_pool"), glass::Error);
    gpu.allocate_pool(4, 4);
    CHECK(gpu.pool_bytes() == 2 * std::int64_t{m.config.n_layers} * 4 * 4 * m.config.kv_dim() * 4);
    CHECK(gpu.pool_bytes_for(4, 4) == gpu.pool_bytes());
    CHECK(gpu.forward({&entry, 1}).size() == std::size_t(m.config.vocab_size));
    const std::vector<int> outside = {4};
    const glass::serve::BatchEntry bad_block{.tokens = tokens, .start = 0, .block_table = outside};
    CHECK_THROWS_WITH_AS(gpu.forward({&bad_block, 1}), doctest::Contains("block 4 is outside the pool of 4"), glass::Error);
    const std::vector<int> bad_id = {1, 512};
    const glass::serve::BatchEntry bad_token{.tokens = bad_id, .start = 0, .block_table = table};
    CHECK_THROWS_WITH_AS(gpu.forward({&bad_token, 1}), doctest::Contains("token id 512"), glass::Error);
    // A chunk: no logits wanted.
    const glass::serve::BatchEntry mid_prompt{.tokens = tokens, .start = 0, .block_table = table, .wants_logits = false};
    CHECK(gpu.forward({&mid_prompt, 1}).empty());
}

// ---- Disaggregated prefill/decode: export_kv / import_kv ---------------------------------------

namespace {

// One entry of `tokens` at positions start .. start+n-1 through `table`.
std::span<const float> forward_rows(glass::serve::PagedBackend& b, const std::vector<int>& tokens, int start,
                                    const std::vector<int>& table) {
    const glass::serve::BatchEntry e{.tokens = tokens, .start = start, .block_table = table};
    return b.forward({&e, 1});
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](float x, float y) {
        return std::memcmp(&x, &y, sizeof x) == 0;
    });
}

}  // namespace

TEST_CASE("CudaPagedBackend ships K/V rows: the CPU's layout, any blocks, and decoding after an import is bit for bit") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 290, 94, 263, 494, 289};  // 10 positions
    const std::vector<int> next = {450};                                                      // position 10
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        CAPTURE(std::string(glass::to_string(kv)));
        const double tolerance = kv == glass::KvType::int8 ? kInt8 : kF32;
        gc::CudaPagedOptions options;
        options.kv = kv;
        // A computes the prompt in blocks 5, 2, 7 (4 positions each) and exports it.
        gc::CudaPagedBackend a(m, options);
        a.allocate_pool(8, 4);
        const std::vector<int> table_a = {5, 2, 7};
        forward_rows(a, prompt, 0, table_a);
        const std::vector<std::byte> rows = a.export_kv(table_a, 0, 10);
        CHECK(static_cast<std::int64_t>(rows.size()) == glass::kv_bytes_per_token(m.config, kv) * 10);
        const std::span<const float> a_next = forward_rows(a, next, 10, table_a);
        const std::vector<float> want(a_next.begin(), a_next.end());

        // B imports them into other blocks: the same bytes come back out, and the next token's
        // logits are A's, bit for bit (the same kernels read the same rows).
        gc::CudaPagedBackend b(m, options);
        b.allocate_pool(8, 4);
        const std::vector<int> table_b = {3, 6, 0};
        b.import_kv(table_b, 0, 10, rows);
        CHECK(b.export_kv(table_b, 0, 10) == rows);
        CHECK(same_bits(forward_rows(b, next, 10, table_b), want));

        // C computes positions 0 .. 4 itself and imports 5 .. 9 (from the middle of a block).
        gc::CudaPagedBackend c(m, options);
        c.allocate_pool(8, 4);
        const std::vector<int> table_c = {1, 4, 2};
        forward_rows(c, std::vector<int>(prompt.begin(), prompt.begin() + 5), 0, table_c);
        c.import_kv(table_c, 5, 10, a.export_kv(table_a, 5, 10));
        CHECK(same_bits(forward_rows(c, next, 10, table_c), want));

        // The CPU reference's shipment of the same prompt: taken as it is, given back byte for
        // byte, and decoding from it stays within the CUDA-vs-CPU tolerance of the CPU's own next
        // step (rows read in another layout would not).
        glass::serve::CpuPagedBackend cpu(m, kv);
        cpu.allocate_pool(8, 4);
        const std::vector<int> table_cpu = {0, 1, 2};
        forward_rows(cpu, prompt, 0, table_cpu);
        const std::vector<std::byte> cpu_rows = cpu.export_kv(table_cpu, 0, 10);
        REQUIRE(cpu_rows.size() == rows.size());
        gc::CudaPagedBackend d(m, options);
        d.allocate_pool(8, 4);
        d.import_kv(table_b, 0, 10, cpu_rows);
        CHECK(d.export_kv(table_b, 0, 10) == cpu_rows);
        CHECK(relative_error(forward_rows(d, next, 10, table_b), forward_rows(cpu, next, 10, table_cpu)) <= tolerance);
    }
}

TEST_CASE("engine over CudaPagedBackend, its prompts computed by a CUDA prefill worker: each request equals itself alone") {
    const glass::Model& m = test::shipped();
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        if (kSmall && kv == glass::KvType::int8) continue;
        CAPTURE(std::string(glass::to_string(kv)));
        gc::CudaPagedOptions options;
        options.kv = kv;
        gc::CudaPagedBackend decode(m, options), worker(m, options), alone(m, options);
        // Block size 5, a pool of 90 positions (preempts), chunked prompts, prefix cache on.
        test::Workload w = test::random_workload(8, m.config, 5, 7, 18, true, true, /*n_requests=*/5);
        glass::serve::ThreadPrefill prefill(worker, w.engine.block_size, /*chunk=*/16);
        w.engine.remote_prefill = &prefill;
        const test::WorkloadStats stats = test::check_workload_against_alone(decode, alone, test::shipped_tok(), w);
        CHECK(stats.max_batch_requests >= 2);
    }
}

TEST_CASE("CudaPagedBackend's export_kv and import_kv refuse rows that do not fit, naming the values") {
    const glass::Model& m = test::shipped();
    gc::CudaPagedBackend gpu(m);
    const std::vector<int> table = {0, 1};
    CHECK_THROWS_WITH_AS(gpu.export_kv(table, 0, 4), doctest::Contains("allocate_pool first"), glass::Error);
    gpu.allocate_pool(4, 8);
    std::vector<std::byte> bytes(static_cast<std::size_t>(glass::kv_bytes_per_token(m.config, glass::KvType::fp32) * 10));
    CHECK_NOTHROW(gpu.import_kv(table, 0, 10, bytes));
    CHECK_THROWS_WITH_AS(gpu.import_kv(table, 0, 9, bytes), doctest::Contains("for 9 positions, expected"), glass::Error);
    CHECK_THROWS_WITH_AS(gpu.import_kv(table, 10, 20, bytes), doctest::Contains("2 blocks of 8 positions cannot hold 20"),
                         glass::Error);
    CHECK_THROWS_WITH_AS(gpu.export_kv(std::vector<int>{0, 6}, 0, 10), doctest::Contains("block 6 is outside the pool of 4"),
                         glass::Error);
    CHECK_THROWS_WITH_AS(gpu.export_kv(table, 5, 5), doctest::Contains("first < end"), glass::Error);
}
