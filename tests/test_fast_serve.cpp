// The fast CPU path as a serving backend (fast/fast_paged_backend.hpp): a token's logits are the
// same bits however it is batched, chunked or prefix-cached; so any engine workload gives each
// request exactly what it gets alone; the logits agree with the CPU reference backend and greedy
// decoding reproduces llama2.c's goldens; bad batches are refused before anything is written.
#include <algorithm>
#include <numeric>

#include "serve_workloads.hpp"
#include "test_support.hpp"

namespace test_fast_serve {  // this file's own names (tests are built in unity batches)

using glass::fast::FastOptions;
using glass::fast::FastPagedBackend;
using glass::fast::WeightType;
using glass::serve::BatchEntry;

namespace {

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// Blocks first .. first + count - 1 of the pool.
std::vector<int> blocks(int first, int count) {
    std::vector<int> b(static_cast<size_t>(count));
    std::iota(b.begin(), b.end(), first);
    return b;
}

// `n` token ids in [1, vocab), a fixed function of the seed.
std::vector<int> tokens(int n, int seed, int vocab) {
    std::vector<int> ids;
    for (int i = 0; i < n; ++i) ids.push_back(1 + (i * 7919 + seed * 104729 + i * i * 31) % (vocab - 1));
    return ids;
}

// The logits of row i of a forward pass's answer [n_wanting, vocab].
std::vector<float> row(std::span<const float> logits, int i, int vocab) {
    return copy(logits.subspan(static_cast<size_t>(i) * static_cast<size_t>(vocab), static_cast<size_t>(vocab)));
}

// A model whose dim (288) is above the kernels' 256-input chunk, so every product adds a second
// chunk onto the first; GQA (6 heads on 2 KV heads, head_dim 48), its own classifier, nothing a
// multiple of the 32-row panel except dim.
const glass::Model& wide_model() {
    static const glass::Model m = [] {
        glass::ModelConfig c;
        c.dim = 288; c.hidden_dim = 300; c.n_layers = 2; c.n_heads = 6; c.n_kv_heads = 2;
        c.vocab_size = 300; c.seq_len = 96; c.shared_classifier = false;
        c.head_dim = c.dim / c.n_heads;
        return glass::fast::random_model_in_memory(c, 11);
    }();
    return m;
}

struct Config {
    int threads;
    WeightType weights;
    std::string kernels;  // a kernel set by name (kernels.hpp); "": the widest this CPU runs
    glass::KvType kv = glass::KvType::fp32;
};
std::string name_of(const Config& c) {
    return std::to_string(c.threads) + " thread(s), " + glass::fast::to_string(c.weights) + ", " +
           (c.kernels.empty() ? std::string("best") : c.kernels) + " kernels, KV " + glass::to_string(c.kv);
}
FastOptions options_of(const Config& c) {
    return {.threads = c.threads, .weights = c.weights, .kv = c.kv, .kernels = c.kernels};
}
// Every kernel set this CPU runs: the engine's goldens and batch invariance hold on each.
std::vector<std::string> all_sets() {
    std::vector<std::string> names;
    for (const auto s : glass::fast::available_kernel_sets()) names.emplace_back(glass::fast::to_string(s));
    return names;
}
// `base` plus, for every set this CPU runs, fp32 (and q8, if asked) weights on 2 threads with it.
std::vector<Config> with_every_set(std::vector<Config> base, bool q8 = true) {
    for (const std::string& set : all_sets()) {
        base.push_back(Config{2, WeightType::fp32, set});
        if (q8) base.push_back(Config{2, WeightType::q8_0, set});
    }
    return base;
}
constexpr glass::KvType kInt8 = glass::KvType::int8;

}  // namespace

// ---------------------------------------------------------------------------------------------
// (3) Batch invariance, directly: the logits of a sequence's last token, computed five ways.

TEST_CASE("batch invariance: a token's logits are the same bits alone, token by token, chunked, batched with 7 others, after a cached prefix") {
    for (const glass::Model* model : {&test::shipped(), &wide_model()}) {
        const glass::ModelConfig& c = model->config;
        const int V = c.vocab_size, bs = 4;
        for (const Config& cfg : with_every_set({Config{1, WeightType::fp32, ""}, Config{2, WeightType::fp32, "", kInt8},
                                                 Config{1, WeightType::fp32, "portable", kInt8}})) {
            INFO("dim " << c.dim << ", " << name_of(cfg));
            const FastOptions options = options_of(cfg);
            FastPagedBackend b(*model, options);
            b.allocate_pool(96, bs);
            // T: 37 tokens (9 blocks and a bit); its last token's logits are what we compare.
            const std::vector<int> T = tokens(37, 1, V);
            const std::span<const int> t_all(T);
            auto forward_one = [&](std::span<const int> ids, int start, const std::vector<int>& table, bool wants) {
                const BatchEntry e{.tokens = ids, .start = start, .block_table = table, .wants_logits = wants};
                return copy(b.forward({&e, 1}));
            };

            // (a) Alone, the whole sequence in one pass (what PagedSession's prefill does).
            const std::vector<float> alone = forward_one(t_all, 0, blocks(0, 10), true);
            REQUIRE(alone.size() == static_cast<size_t>(V));

            // (b) Token by token (decode steps of a single row), into other blocks.
            std::vector<float> stepwise;
            for (int p = 0; p < 37; ++p) stepwise = forward_one(t_all.subspan(size_t(p), 1), p, blocks(10, 10), true);
            CHECK(stepwise == alone);

            // (c) In three chunks of 13, 11 and 13 positions; only the last wants logits.
            const std::vector<int> table_c = blocks(20, 10);
            CHECK(forward_one(t_all.subspan(0, 13), 0, table_c, false).empty());
            CHECK(forward_one(t_all.subspan(13, 11), 13, table_c, false).empty());
            CHECK(forward_one(t_all.subspan(24, 13), 24, table_c, true) == alone);

            // (d) Positions 30..36 of T as one entry among 8: fresh prompts, decode steps of
            // sequences computed earlier, entries that want no logits; 31 rows in all, so T's rows
            // straddle two of the kernel's token tiles (10, 10, 11). Every entry that wants
            // logits must get exactly what it gets alone.
            const std::vector<int> table_d = blocks(30, 10);
            forward_one(t_all.subspan(0, 30), 0, table_d, false);
            struct Other {
                std::vector<int> ids;  // the whole sequence; its last `n` tokens are in the batch
                int n;
                bool wants;
                std::vector<int> table;
            };
            std::vector<Other> others = {{tokens(5, 2, V), 5, true, blocks(40, 2)},    // a fresh prompt
                                         {tokens(21, 3, V), 1, true, blocks(42, 6)},   // a decode step
                                         {tokens(12, 4, V), 12, false, blocks(48, 3)}, // a chunk, no logits
                                         {tokens(3, 5, V), 3, true, blocks(51, 1)},
                                         {tokens(9, 6, V), 1, true, blocks(52, 3)},
                                         {tokens(2, 7, V), 1, true, blocks(55, 1)},
                                         {tokens(1, 8, V), 1, true, blocks(56, 1)}};
            for (const Other& o : others)  // what precedes each one's rows in the batch
                if (o.ids.size() > size_t(o.n))
                    forward_one(std::span(o.ids).first(o.ids.size() - size_t(o.n)), 0, o.table, false);
            std::vector<BatchEntry> batch;
            for (size_t i = 0; i < others.size(); ++i) {
                if (i == 3) batch.push_back({.tokens = t_all.subspan(30), .start = 30, .block_table = table_d});
                const Other& o = others[i];
                const int start = static_cast<int>(o.ids.size()) - o.n;
                batch.push_back({.tokens = std::span(o.ids).subspan(size_t(start)),
                                 .start = start,
                                 .block_table = o.table,
                                 .wants_logits = o.wants});
            }
            int rows = 0;
            for (const BatchEntry& e : batch) rows += static_cast<int>(e.tokens.size());
            REQUIRE(rows == 31);
            const std::vector<float> batched = copy(b.forward(batch));
            REQUIRE(batched.size() == 7 * static_cast<size_t>(V));  // 8 entries, 7 want logits
            {
                FastPagedBackend single(*model, options);  // each other sequence alone, from scratch
                single.allocate_pool(16, bs);
                const std::vector<int> table = blocks(0, 16);
                int wanting = 0;
                for (size_t i = 0; i < batch.size(); ++i) {
                    if (!batch[i].wants_logits) continue;
                    INFO("entry " << i);
                    const std::vector<float> got = row(batched, wanting++, V);
                    if (i == 3) {  // T
                        CHECK(got == alone);
                        continue;
                    }
                    const Other& o = others[i < 3 ? i : i - 1];
                    const BatchEntry e{.tokens = o.ids, .start = 0, .block_table = table};
                    CHECK(got == copy(single.forward({&e, 1})));
                }
                CHECK(wanting == 7);
            }

            // (e) After a cached prefix: another request X computed T's first 24 positions
            // (6 full blocks) as part of its own longer prompt, batched beside a decode step;
            // T's table shares those blocks and computes only positions 24..36.
            std::vector<int> X(T.begin(), T.begin() + 24);
            for (int id : tokens(10, 9, V)) X.push_back(id);
            const std::vector<int> table_x = blocks(60, 9);
            const std::vector<int> decoder = tokens(6, 10, V);
            const std::vector<int> table_decoder = blocks(70, 2);
            forward_one(std::span(decoder).first(5), 0, table_decoder, false);
            const BatchEntry with_x[] = {{.tokens = std::span(decoder).subspan(5), .start = 5, .block_table = table_decoder},
                                         {.tokens = X, .start = 0, .block_table = table_x}};
            b.forward(with_x);
            std::vector<int> table_e(table_x.begin(), table_x.begin() + 6);  // the shared prefix blocks
            for (int blk : blocks(80, 4)) table_e.push_back(blk);
            CHECK(forward_one(t_all.subspan(24), 24, table_e, true) == alone);

            // The same bits with 1 or 2 threads: every output is computed whole by one thread.
            if (cfg.threads == 2) {
                Config one = cfg;
                one.threads = 1;
                FastPagedBackend one_thread(*model, options_of(one));
                one_thread.allocate_pool(10, bs);
                const std::vector<int> table = blocks(0, 10);
                const BatchEntry e{.tokens = t_all, .start = 0, .block_table = table};
                CHECK(copy(one_thread.forward({&e, 1})) == alone);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (1) The engine over randomized workloads: each request's tokens equal the request alone.

TEST_CASE("randomized workloads on the fast backend: each request's tokens equal the request run alone") {
    const glass::Model& m = test::shipped();
    for (const Config& cfg : {Config{2, WeightType::fp32, ""}, Config{1, WeightType::fp32, ""},
                              Config{2, WeightType::q8_0, ""}, Config{2, WeightType::fp32, "", kInt8}}) {
        INFO(name_of(cfg));
        FastPagedBackend backend(m, options_of(cfg));
        FastPagedBackend alone(m, options_of(cfg));
        // The reference's grid (test_engine.cpp), other seeds.
        test::check_workload_grid(backend, alone, test::shipped_tok(), /*first_seed=*/100);
    }
}

// ---------------------------------------------------------------------------------------------
// (2) Against the CPU reference backend, and the goldens.

TEST_CASE("fp32 and int8 KV: the fast backend's logits are the reference backend's, step by step on the same batches") {
    // Both compute the same products of the same fp32 numbers, summed in a different order (the
    // kernel's FMA chain over 256-input chunks vs Eigen's blocked sums; a 16-lane exp vs
    // std::exp; tabulated vs recomputed RoPE angles): each logit moves by a few fp32 ulps of
    // the partial sums, ~1e-7 relative per product, compounding mildly over layers. 1e-5 leaves
    // ~50× headroom over what FastCpuSession measures (6e-7) while any real bug (a wrong block,
    // position or row) moves logits by 1e-2 or more.
    // With an int8 pool (both backends round every stored row to int8 with one scale per KV head):
    // 1e-3, as FastCpuSession's int8 cache against CpuSession's (test_fast_int8_kv.cpp): K and V
    // ~1e-7 apart can round to neighbouring integers near a half step, one step of max|x|/127 on a few
    // values (~1e-4 on the logits), still 1/30 of what int8 itself moves them; a wrong scale or a
    // row of the wrong block moves them by 1e-2 or more.
    for (const glass::Model* model : {&test::shipped(), &wide_model()})
        for (const Config& cfg : with_every_set({Config{1, WeightType::fp32, ""}, Config{2, WeightType::fp32, "", kInt8},
                                                 Config{1, WeightType::fp32, "portable", kInt8}},
                                                /*q8=*/false)) {
            const glass::ModelConfig& c = model->config;
            INFO("dim " << c.dim << ", " << name_of(cfg));
            FastPagedBackend fast(*model, options_of(cfg));
            glass::serve::CpuPagedBackend ref(*model, cfg.kv);
            fast.allocate_pool(40, 5);
            ref.allocate_pool(40, 5);
            // Three sequences: A prefills in two chunks then decodes; B arrives later; C shares
            // A's first 3 blocks (15 positions) and starts after them.
            const std::vector<int> A = tokens(30, 21, c.vocab_size), B = tokens(12, 22, c.vocab_size);
            std::vector<int> C(A.begin(), A.begin() + 15);
            for (int id : tokens(8, 23, c.vocab_size)) C.push_back(id);
            const std::vector<int> ta = blocks(0, 7), tb = blocks(7, 4), tc = {0, 1, 2, 20, 21, 22};
            const std::span<const int> a(A), bb(B), cc(C);
            const std::vector<std::vector<BatchEntry>> steps = {
                {{.tokens = a.subspan(0, 9), .start = 0, .block_table = ta, .wants_logits = false}},
                {{.tokens = a.subspan(9, 17), .start = 9, .block_table = ta},
                 {.tokens = bb.subspan(0, 11), .start = 0, .block_table = tb}},
                {{.tokens = a.subspan(26, 1), .start = 26, .block_table = ta},
                 {.tokens = cc.subspan(15, 7), .start = 15, .block_table = tc}},
            };
            double worst = 0;
            int compared = 0;
            for (size_t s = 0; s < steps.size(); ++s) {
                const std::vector<float> want = copy(ref.forward(steps[s]));
                const std::vector<float> got = copy(fast.forward(steps[s]));
                REQUIRE(got.size() == want.size());
                for (size_t i = 0; i < want.size() / size_t(c.vocab_size); ++i, ++compared)
                    worst = std::max(worst, test::relative_error(row(got, int(i), c.vocab_size), row(want, int(i), c.vocab_size)));
            }
            // Then decode A, B, C together for a few steps, feeding each the reference's argmax.
            std::vector<int> next = {A[27], B[11], C[22]};
            std::vector<int> pos = {27, 11, 22};
            const std::vector<std::vector<int>> table = {ta, tb, tc};
            for (int step = 0; step < 6; ++step) {
                std::vector<BatchEntry> batch;
                for (size_t i = 0; i < 3; ++i)
                    batch.push_back({.tokens = std::span(next).subspan(i, 1), .start = pos[i], .block_table = table[i]});
                const std::vector<float> want = copy(ref.forward(batch));
                const std::vector<float> got = copy(fast.forward(batch));
                for (int i = 0; i < 3; ++i, ++compared) {
                    const std::vector<float> w = row(want, i, c.vocab_size);
                    worst = std::max(worst, test::relative_error(row(got, i, c.vocab_size), w));
                    next[size_t(i)] = static_cast<int>(std::max_element(w.begin(), w.end()) - w.begin());
                    ++pos[size_t(i)];
                }
            }
            CHECK(compared == 4 + 18);
            CHECK(worst <= (cfg.kv == kInt8 ? 1e-3 : 1e-5));
            MESSAGE("dim " << c.dim << ", " << name_of(cfg) << ": worst relative error " << worst);
        }
}

TEST_CASE("all 36 greedy goldens and the seeded sampling goldens of llama2.c, batched in one engine on the fast backend (every kernel set)") {
    // fp32 and fp16 reproduce every greedy golden through FastCpuSession (test_fast_session.cpp);
    // batched here, each request must still get them, since batching changes no bit. The seeded
    // sampling goldens need the probabilities to land on the same side of every draw too, which
    // fp32 (error ~1e-7) does; fp16's rounding (~5e-4) is only checked on greedy runs.
    const glass::Model& m = test::shipped();
    for (const std::string& set : all_sets())
      for (WeightType type : {WeightType::fp32, WeightType::fp16}) {
        INFO(set << " kernels, " << glass::fast::to_string(type));
        FastOptions options{.threads = 2, .weights = type};
        options.kernels = set;
        FastPagedBackend backend(m, options);
        glass::serve::EngineOptions eo;
        eo.num_blocks = 41 * 32;  // room for everyone at once: 41 requests x 512 positions / 16
        eo.scheduler.max_running = 64;
        glass::serve::Engine engine(backend, test::shipped_tok(), eo);
        std::vector<nlohmann::json> goldens = test::read_jsonl(test::golden("stories260K_greedy.jsonl"));
        REQUIRE(goldens.size() == 36);
        if (type == WeightType::fp32)
            for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_sampling.jsonl"))) goldens.push_back(g);
        for (const nlohmann::json& g : goldens) engine.add_request(g["prompt"].get<std::string>(), test::golden_options(g));
        const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
        REQUIRE(results.size() == goldens.size());
        for (size_t i = 0; i < goldens.size(); ++i) {
            INFO("golden " << goldens[i]["prompt"] << " steps " << goldens[i]["steps"] << " T " << goldens[i]["temperature"]);
            CHECK(results[i].prompt_ids == test::ids_of(goldens[i]["prompt_ids"]));
            CHECK(results[i].generated_ids == test::ids_of(goldens[i]["generated_ids"]));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (4) Bad input.

TEST_CASE("bad batches are refused with the offending value, before anything is written") {
    const glass::Model& m = test::shipped();
    FastPagedBackend b(m, {.threads = 2, .weights = WeightType::fp32});
    const std::vector<int> ids = tokens(6, 31, m.config.vocab_size);
    const std::vector<int> table = blocks(0, 2);
    const BatchEntry good{.tokens = ids, .start = 0, .block_table = table};
    CHECK_THROWS_WITH_AS(b.forward({&good, 1}), doctest::Contains("allocate_pool"), glass::Error);
    CHECK_THROWS_WITH_AS(b.allocate_pool(0, 16), doctest::Contains("0 blocks of 16"), glass::Error);
    CHECK_THROWS_WITH_AS(b.allocate_pool(8, -1), doctest::Contains("8 blocks of -1"), glass::Error);
    b.allocate_pool(8, 4);
    CHECK(b.pool_bytes() == 2 * 5 * 8 * 4 * 32 * 4);  // K and V x 5 layers x 32 positions x kv_dim 32 x 4 B
    {
        FastPagedBackend int8(m, options_of({2, WeightType::fp32, "", kInt8}));
        int8.allocate_pool(8, 4);
        CHECK(int8.kv_type() == kInt8);
        // K and V x 5 layers x 32 positions x (kv_dim 32 bytes + 4 KV heads x a 4-byte scale)
        CHECK(int8.pool_bytes() == 2 * 5 * 32 * (32 + 4 * 4));
        CHECK(int8.pool_bytes() == 32 * glass::kv_bytes_per_token(m.config, kInt8));
    }

    // The good entry's logits, and what a bad batch must not change.
    const std::vector<float> before = copy(b.forward({&good, 1}));
    const std::vector<int> other = tokens(6, 32, m.config.vocab_size);
    auto refused = [&](const BatchEntry& bad, const char* message) {
        INFO(message);
        // The bad entry follows a good one that would overwrite the good sequence's K/V.
        const BatchEntry batch[] = {{.tokens = other, .start = 0, .block_table = table}, bad};
        CHECK_THROWS_WITH_AS(b.forward(batch), doctest::Contains(message), glass::Error);
    };
    const std::vector<int> outside = {0, 8}, negative = {-3, 1}, short_table = {0};
    refused({.tokens = ids, .start = 0, .block_table = outside}, "block 8 is outside the pool of 8");
    refused({.tokens = ids, .start = 0, .block_table = negative}, "block -3 is outside the pool of 8");
    refused({.tokens = ids, .start = 0, .block_table = short_table}, "1 blocks of 4 cannot hold 6 positions");
    const std::vector<int> all_blocks = blocks(0, 8);
    const std::vector<int> bad_id = {5, 512};
    refused({.tokens = bad_id, .start = 0, .block_table = all_blocks}, "token id 512");
    // Positions past the context (512): a pool big enough to hold them, so only the context refuses.
    const std::vector<int> late = {5, 6, 7};
    const std::vector<int> many(200, 0);
    refused({.tokens = late, .start = 510, .block_table = many}, "positions 510..512 are outside the context window of 512");
    refused({.tokens = late, .start = -1, .block_table = all_blocks}, "positions -1..1");
    refused({.tokens = {}, .start = 0, .block_table = all_blocks}, "no tokens");
    CHECK_THROWS_WITH_AS(b.forward({}), doctest::Contains("empty batch"), glass::Error);

    // Nothing was written: recomputing the last position reads the same K/V as before.
    const BatchEntry again{.tokens = std::span(ids).subspan(5), .start = 5, .block_table = table};
    CHECK(copy(b.forward({&again, 1})) == before);
    CHECK_THROWS_WITH_AS(FastPagedBackend(m, {.threads = 0, .weights = WeightType::fp32}), doctest::Contains("thread count 0"),
                         glass::Error);
}

}  // namespace test_fast_serve
