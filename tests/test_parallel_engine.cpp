// The serving engine over a grid of ranks (dist/parallel_paged_backend.hpp), the ranks as threads
// of this process (tests/dist/ runs it over Open MPI processes): rank 0 runs serve::Engine
// unchanged, the others follow. Pipeline stages run one process's operations in its order, so
// pp checks are bit for bit against the one-process engine; tensor parallelism sums Wo's and W2's
// products in two pieces, so tp checks are the engine's own promise (each request equals itself
// run alone on the same backend, bit for bit) plus llama2.c's ids.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "glass/dist/fast_rank_part.hpp"
#include "glass/dist/parallel_paged_backend.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/glass.hpp"
#include "serve_workloads.hpp"
#include "test_support.hpp"

namespace test_parallel_engine {  // this file's own names (tests are built in unity batches)

using glass::dist::Communicator;
using glass::dist::ParallelPagedBackend;
using glass::dist::ParallelPagedOptions;
using glass::dist::ParallelShape;
using glass::serve::BatchEntry;
using glass::serve::Engine;
using glass::serve::EngineOptions;

namespace {

// body(backend) at rank 0 of a tp × pp grid of threads; the other ranks follow until it returns.
// `make`: every rank's part (default: the reference's).
void on_grid(const glass::Model& m, ParallelShape shape, ParallelPagedOptions o,
             const std::function<void(ParallelPagedBackend&)>& body, const glass::dist::MakeRankPart& make = {}) {
    glass::dist::run_ranks(shape.tp * shape.pp, [&](Communicator& comm) {
        ParallelPagedBackend backend(m, comm, shape, o, make);
        if (comm.rank() != 0) {
            backend.follow();
            return;
        }
        body(backend);
        backend.finish();
    });
}

// Every greedy and seeded-sampling golden of llama2.c as one batch of 36 + requests.
std::vector<glass::serve::RequestResult> run_goldens(glass::serve::PagedBackend& backend,
                                                     const std::vector<nlohmann::json>& goldens) {
    EngineOptions eo;
    eo.num_blocks = static_cast<int>(goldens.size()) * 32;  // everyone at once: 512 positions / 16 each
    eo.scheduler.max_running = 64;
    Engine engine(backend, test::shipped_tok(), eo);
    for (const nlohmann::json& g : goldens) engine.add_request(g["prompt"].get<std::string>(), test::golden_options(g));
    return engine.run_to_completion();
}

// The same tokens and the same log-probabilities, bit for bit, request by request.
void check_bit_for_bit(const std::vector<glass::serve::RequestResult>& got, const std::vector<glass::serve::RequestResult>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].generated_ids == want[i].generated_ids);
        REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
        for (size_t k = 0; k < got[i].logprobs.size(); ++k)
            CHECK(got[i].logprobs[k].chosen.logprob == want[i].logprobs[k].chosen.logprob);
    }
}

std::vector<nlohmann::json> all_goldens() {
    std::vector<nlohmann::json> goldens = test::read_jsonl(test::golden("stories260K_greedy.jsonl"));
    for (const nlohmann::json& g : test::read_jsonl(test::golden("stories260K_sampling.jsonl"))) goldens.push_back(g);
    return goldens;
}

}  // namespace

TEST_CASE("pack_batch / unpack_batch: every field comes back; a short message is refused") {
    const std::vector<int> a_tokens{5, 6, 7}, a_table{3, 1}, b_tokens{9}, b_table{0, 2, 4};
    const BatchEntry batch[2] = {{.tokens = a_tokens, .start = 20, .block_table = a_table, .wants_logits = false},
                                 {.tokens = b_tokens, .start = 40, .block_table = b_table, .every_row = true}};
    const std::vector<int> ints = glass::dist::pack_batch(batch);
    CHECK(ints.size() == 1 + 2 * 5 + 3 + 2 + 1 + 3);
    const std::vector<BatchEntry> back = glass::dist::unpack_batch(ints);
    REQUIRE(back.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
        CHECK(std::vector<int>(back[i].tokens.begin(), back[i].tokens.end()) ==
              std::vector<int>(batch[i].tokens.begin(), batch[i].tokens.end()));
        CHECK(std::vector<int>(back[i].block_table.begin(), back[i].block_table.end()) ==
              std::vector<int>(batch[i].block_table.begin(), batch[i].block_table.end()));
        CHECK(back[i].start == batch[i].start);
        CHECK(back[i].wants_logits == batch[i].wants_logits);
        CHECK(back[i].every_row == batch[i].every_row);
    }
    const std::vector<int> cut(ints.begin(), ints.end() - 1);
    CHECK_THROWS_WITH_AS(glass::dist::unpack_batch(cut), doctest::Contains("too short for entry 1"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::dist::unpack_batch(std::vector<int>{3, 0}), doctest::Contains("header"), glass::Error);
}

TEST_CASE("cut_micro_batches: in order, never empty, about equal tokens, at most m") {
    const std::vector<int> t1{1}, t8(8, 1), t3(3, 1);
    const std::vector<int> table{0};
    const auto entry = [&](const std::vector<int>& t) { return BatchEntry{.tokens = t, .block_table = table}; };
    const std::vector<BatchEntry> batch{entry(t8), entry(t1), entry(t1), entry(t3), entry(t1), entry(t1)};  // 15 tokens
    for (int m = 1; m <= 8; ++m) {
        INFO("m " << m);
        const std::vector<glass::dist::MicroBatch> cuts = glass::dist::cut_micro_batches(batch, m);
        CHECK(static_cast<int>(cuts.size()) == std::min(m, 6));
        int next = 0;
        for (const glass::dist::MicroBatch& c : cuts) {
            CHECK(c.begin == next);
            CHECK(c.end > c.begin);
            next = c.end;
        }
        CHECK(next == 6);
    }
    const std::vector<glass::dist::MicroBatch> two = glass::dist::cut_micro_batches(batch, 2);
    CHECK(two[0].end == 1);  // the 8-token prompt is its own half (8 of 15)
    CHECK_THROWS_AS(glass::dist::cut_micro_batches(batch, 0), glass::Error);
}

TEST_CASE("pp 2 and 3, 1 and 3 micro-batches: the engine's results equal one process's, bit for bit") {
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;
    glass::serve::CpuPagedBackend one(m);
    for (const unsigned seed : {3u, 4u}) {
        const test::Workload w = test::random_workload(seed, c, /*block_size=*/5, /*budget=*/64, /*num_blocks=*/40,
                                                       /*prefix_caching=*/seed % 2 == 0, /*chunked=*/true);
        const std::vector<glass::serve::RequestResult> want = test::run_workload(one, test::shipped_tok(), w);
        for (const int pp : {2, 3})
            for (const int micro : {1, 3}) {
                INFO("seed " << seed << ", pp " << pp << ", micro-batches " << micro);
                std::vector<glass::serve::RequestResult> got;
                on_grid(m, {.tp = 1, .pp = pp}, {.micro_batches = micro},
                        [&](ParallelPagedBackend& b) { got = test::run_workload(b, test::shipped_tok(), w); });
                check_bit_for_bit(got, want);
            }
    }
}

TEST_CASE("tp 2: each request equals itself alone on the same split backend, over randomized workloads") {
    const glass::Model& m = test::shipped();
    on_grid(m, {.tp = 2, .pp = 1}, {}, [&](ParallelPagedBackend& b) {
        test::WorkloadStats total;
        for (unsigned seed = 11; seed < 15; ++seed) {  // small pool (preemption), chunked prompts, prefix cache on and off
            const int block = seed % 2 ? 5 : 16;
            const test::Workload w = test::random_workload(seed, m.config, block, /*budget=*/64,
                                                           (seed < 13 ? 120 : 1024) / block, seed % 2 == 0, true);
            total.add(test::check_workload_against_alone(b, b, test::shipped_tok(), w));  // `alone`: the same ranks, after
        }
        CHECK(total.max_batch_requests >= 2);
        CHECK(total.chunked_prompts > 0);
    });
}

TEST_CASE("tp 2, pp 2 with 2 micro-batches, and tp 2 × pp 2: llama2.c's goldens from one batched engine") {
    const glass::Model& m = test::shipped();
    const std::vector<nlohmann::json> goldens = all_goldens();
    const struct {
        ParallelShape shape;
        int micro;
    } grids[] = {{{.tp = 2, .pp = 1}, 1}, {{.tp = 1, .pp = 2}, 2}, {{.tp = 2, .pp = 2}, 2}};
    for (const auto& g : grids) {
        INFO("tp " << g.shape.tp << ", pp " << g.shape.pp << ", micro-batches " << g.micro);
        std::vector<glass::serve::RequestResult> results;
        on_grid(m, g.shape, {.micro_batches = g.micro}, [&](ParallelPagedBackend& b) { results = run_goldens(b, goldens); });
        REQUIRE(results.size() == goldens.size());
        for (size_t i = 0; i < goldens.size(); ++i) {
            INFO("golden " << goldens[i]["prompt"] << " T " << goldens[i]["temperature"]);
            CHECK(results[i].generated_ids == test::ids_of(goldens[i]["generated_ids"]));
        }
    }
}

TEST_CASE("StageClock: every pass counted, busy time inside the step time, at every rank") {
    // Only the accounting is checked here: how large the bubble is (1 vs several micro-batches)
    // depends on the machine's load and is measured by scripts/bench-parallel, not asserted.
    const glass::Model& m = test::shipped();
    std::vector<int> prompt(32);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>(1 + (i * 37) % 500);
    glass::dist::run_ranks(2, [&](Communicator& comm) {
        ParallelPagedBackend b(m, comm, {.tp = 1, .pp = 2}, {.micro_batches = 4});
        if (comm.rank() == 0) {
            b.allocate_pool(32, 16);
            std::vector<std::vector<int>> tables(8);
            std::vector<BatchEntry> batch;
            for (int r = 0; r < 8; ++r) {  // 8 requests of 32 tokens: blocks 2r, 2r + 1
                tables[static_cast<size_t>(r)] = {2 * r, 2 * r + 1};
                batch.push_back({.tokens = prompt, .start = 0, .block_table = tables[static_cast<size_t>(r)]});
            }
            for (int pass = 0; pass < 3; ++pass) b.forward(batch);
            b.finish();
        } else {
            CHECK(b.follow() == 3);
        }
        const glass::dist::StageClock& clock = b.clock();
        CHECK(clock.passes == 3);
        CHECK(clock.busy_seconds > 0.0);
        CHECK(clock.busy_seconds <= clock.step_seconds);
        CHECK(clock.idle_share() >= 0.0);
        CHECK(clock.idle_share() < 1.0);
    });
}

TEST_CASE("keep_alive: an idle rank 0 keeps its followers waiting past the transport's patience") {
    // A server with no request in flight steps nothing; its engine thread calls keep_alive every
    // few seconds instead. Here the patience is 1 s and rank 0 stays idle 1.5 s in all, in three
    // pauses with a keep_alive after each: the follower must still be there, with no pass run.
    const glass::Model& m = test::shipped();
    glass::dist::run_ranks(
        2,
        [&](Communicator& comm) {
            ParallelPagedBackend b(m, comm, {.tp = 2, .pp = 1}, {});
            if (comm.rank() != 0) {
                CHECK(b.follow() == 0);
                return;
            }
            for (int pause = 0; pause < 3; ++pause) {
                std::this_thread::sleep_for(std::chrono::milliseconds(500));
                b.keep_alive();
            }
            CHECK(b.unavailable().empty());
            b.finish();
        },
        {.patience = std::chrono::milliseconds(1000)});
}

TEST_CASE("--rank-memory: a model that does not fit one rank is refused naming the bytes, and fits two") {
    const glass::Model& m = test::shipped();
    glass::serve::CpuPagedBackend one(m);
    const std::int64_t pool = 2 * std::int64_t{m.config.n_layers} * 64 * m.config.kv_dim() * 4;  // 4 blocks of 16
    const std::int64_t cap = (m.weight_bytes + pool) * 3 / 4;  // three quarters of what one rank would hold
    CHECK_THROWS_WITH_AS(on_grid(m, {.tp = 1, .pp = 1}, {.rank_memory = cap}, [](ParallelPagedBackend& b) { b.allocate_pool(4, 16); }),
                         doctest::Contains(("more than its memory of " + std::to_string(cap) + " bytes").c_str()), glass::Error);
    std::vector<float> logits;
    on_grid(m, {.tp = 2, .pp = 1}, {.rank_memory = cap}, [&](ParallelPagedBackend& b) {
        b.allocate_pool(4, 16);
        CHECK(b.held_bytes() <= cap);
        const std::vector<int> ids{1, 2, 3}, table{0};
        const BatchEntry e{.tokens = ids, .start = 0, .block_table = table};
        const std::span<const float> l = b.forward({&e, 1});
        logits.assign(l.begin(), l.end());
    });
    CHECK(logits.size() == static_cast<size_t>(m.config.vocab_size));
}

TEST_CASE("a bad batch is refused at rank 0 before any rank hears of it; the group goes on") {
    const glass::Model& m = test::shipped();
    on_grid(m, {.tp = 2, .pp = 1}, {}, [&](ParallelPagedBackend& b) {
        b.allocate_pool(4, 16);
        const std::vector<int> bad{1, m.config.vocab_size}, good{1, 2}, table{0}, outside{9};
        const BatchEntry e{.tokens = bad, .start = 0, .block_table = table};
        CHECK_THROWS_WITH_AS(b.forward({&e, 1}), doctest::Contains(("token id " + std::to_string(m.config.vocab_size)).c_str()), glass::Error);
        const BatchEntry f{.tokens = good, .start = 0, .block_table = outside};
        CHECK_THROWS_WITH_AS(b.forward({&f, 1}), doctest::Contains("block 9 is outside the pool of 4"), glass::Error);
        const BatchEntry g{.tokens = good, .start = 0, .block_table = table};
        CHECK(b.forward({&g, 1}).size() == static_cast<size_t>(m.config.vocab_size));
    });
}

TEST_CASE("a rank that goes silent: the pass fails naming it, the backend stays unavailable, the engine refuses") {
    using namespace std::chrono_literals;
    const glass::Model& m = test::shipped();
    glass::dist::run_ranks(
        2,
        [&](Communicator& comm) {
            ParallelPagedBackend b(m, comm, {.tp = 2, .pp = 1});
            if (comm.rank() != 0) return;  // rank 1 never follows: silent from the start
            glass::serve::EngineThread engine(b, test::shipped_tok(), {}, 4);  // allocates the pool: a broadcast,
            CHECK(b.unavailable().empty());                                  // rank 0 waits for no one there
            const std::vector<int> ids{1, 2, 3}, table{0};
            const BatchEntry e{.tokens = ids, .start = 0, .block_table = table};
            CHECK_THROWS_WITH_AS(b.forward({&e, 1}), doctest::Contains("rank 1, which did not answer"), glass::Error);
            CHECK(b.unavailable().find("group of ranks is gone") != std::string::npos);
            CHECK(b.unavailable().find("rank 1") != std::string::npos);
            CHECK_THROWS_WITH_AS(b.forward({&e, 1}), doctest::Contains("group of ranks is gone"), glass::Error);  // at once
            auto ticket = std::make_shared<glass::serve::Ticket>();
            ticket->prompt_ids = ids;
            CHECK(engine.submit(ticket) == glass::serve::Admission::backend_unavailable);
            CHECK(engine.unavailable() == b.unavailable());
        },
        {.patience = 1000ms});  // the hang guard, short here: rank 1 is known to be silent
}

// ---- Disaggregated prefill/decode on a split model: export_kv / import_kv ----------------------

TEST_CASE("a split backend ships a prompt's K/V in one process's layout: put together from every rank, cut back into them") {
    // 4 heads, 2 KV heads, 2 layers: pp 2 gives each stage a layer; tp 4 holds each KV head on 2 ranks.
    const glass::Model m = glass::fast::random_family_model(glass::fast::small_family_config("llama2"), 7);
    const std::vector<int> prompt = {1, 5, 17, 33, 60, 2, 71, 90, 11, 42}, next = {23};  // positions 0-9, then 10
    const std::vector<int> table_a = {5, 2, 7}, table_b = {3, 6, 0}, table_one = {0, 1, 2};  // blocks of 4
    const auto step = [](glass::serve::PagedBackend& b, const std::vector<int>& tokens, int start,
                         const std::vector<int>& table) {
        const BatchEntry e{.tokens = tokens, .start = start, .block_table = table};
        const std::span<const float> logits = b.forward({&e, 1});
        return std::vector<float>(logits.begin(), logits.end());
    };
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8})
        for (const ParallelShape shape : {ParallelShape{.tp = 1, .pp = 2}, ParallelShape{.tp = 2, .pp = 1},
                                          ParallelShape{.tp = 4, .pp = 1}, ParallelShape{.tp = 2, .pp = 2}}) {
            CAPTURE(std::string(glass::to_string(kv)));
            CAPTURE(shape.tp);
            CAPTURE(shape.pp);
            glass::serve::CpuPagedBackend one(m, kv);  // one process, the same prompt
            one.allocate_pool(8, 4);
            step(one, prompt, 0, table_one);
            const std::vector<std::byte> one_rows = one.export_kv(table_one, 0, 10);
            on_grid(m, shape, {.kv = kv}, [&](ParallelPagedBackend& b) {
                b.allocate_pool(8, 4);
                step(b, prompt, 0, table_a);
                const std::vector<std::byte> rows = b.export_kv(table_a, 0, 10);
                REQUIRE(rows.size() == one_rows.size());  // kv_bytes_per_token of the whole model × 10
                if (shape.tp == 1) CHECK(rows == one_rows);  // stages run one process's operations
                // Into other blocks of the same grid: the same bytes come out again, and the next
                // step reads them exactly as it reads the rows it computed.
                b.import_kv(table_b, 0, 10, rows);
                CHECK(b.export_kv(table_b, 0, 10) == rows);
                const std::vector<float> want = step(b, next, 10, table_a);
                CHECK(step(b, next, 10, table_b) == want);
                // One process decoding from the grid's rows agrees with the grid's own step (a head
                // or a layer put in the wrong place would not): exactly for stages; for tp, within
                // the tp-vs-one-process gap of that one step (Wo's and W2's sums in tp pieces:
                // 1e-5, test_tensor_parallel), and with int8 rows the step's own new K/V row may
                // round to a neighbouring code (a step of 1/127 of its head's largest value).
                glass::serve::CpuPagedBackend from_grid(m, kv);
                from_grid.allocate_pool(8, 4);
                from_grid.import_kv(table_one, 0, 10, rows);
                const double gap = test::relative_error(step(from_grid, next, 10, table_one), want);
                CHECK(gap <= (shape.tp == 1 ? 0.0 : kv == glass::KvType::int8 ? 5e-3 : 1e-5));
            });
        }
}

TEST_CASE("a split backend refuses a shipment that does not fit, at rank 0, before any rank hears of it") {
    const glass::Model& m = test::shipped();
    on_grid(m, {.tp = 2, .pp = 1}, {}, [&](ParallelPagedBackend& b) {
        const std::vector<int> table = {0, 1};
        CHECK_THROWS_WITH_AS(b.export_kv(table, 0, 4), doctest::Contains("allocate_pool first"), glass::Error);
        b.allocate_pool(4, 8);
        std::vector<std::byte> bytes(static_cast<size_t>(glass::kv_bytes_per_token(m.config, glass::KvType::fp32) * 10));
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i % 251);
        CHECK_THROWS_WITH_AS(b.import_kv(table, 0, 9, bytes), doctest::Contains("for 9 positions, expected"), glass::Error);
        CHECK_THROWS_WITH_AS(b.import_kv(table, 10, 20, bytes), doctest::Contains("2 blocks of 8 positions cannot hold 20"),
                             glass::Error);
        CHECK_THROWS_WITH_AS(b.export_kv(std::vector<int>{0, 6}, 0, 10), doctest::Contains("block 6 is outside the pool of 4"),
                             glass::Error);
        CHECK_THROWS_WITH_AS(b.export_kv(table, 5, 5), doctest::Contains("first < end"), glass::Error);
        // The group goes on: what goes in comes out.
        CHECK(b.unavailable().empty());
        b.import_kv(table, 0, 10, bytes);
        CHECK(b.export_kv(table, 0, 10) == bytes);
    });
}

// ---- The fast path split over ranks (dist/fast_rank_part.hpp) -------------------------------------

TEST_CASE("fast path split: pp 2 equals one FastPagedBackend bit for bit; tp 2 and tp 2 x pp 2 serve each request as alone") {
    const glass::Model& m = test::shipped();
    const glass::fast::FastOptions fo{.threads = 1};
    const glass::dist::MakeRankPart fast = glass::dist::fast_rank_parts(fo);
    glass::fast::FastPagedBackend one(m, fo);
    const test::Workload w = test::random_workload(5, m.config, /*block_size=*/5, /*budget=*/64, /*num_blocks=*/40,
                                                   /*prefix_caching=*/true, /*chunked=*/true);
    const std::vector<glass::serve::RequestResult> want = test::run_workload(one, test::shipped_tok(), w);
    for (const int micro : {1, 2}) {
        INFO("pp 2, micro-batches " << micro);
        std::vector<glass::serve::RequestResult> got;
        on_grid(m, {.tp = 1, .pp = 2}, {.micro_batches = micro},
                [&](ParallelPagedBackend& b) { got = test::run_workload(b, test::shipped_tok(), w); }, fast);
        check_bit_for_bit(got, want);
    }
    for (const ParallelShape shape : {ParallelShape{.tp = 2, .pp = 1}, ParallelShape{.tp = 2, .pp = 2}}) {
        INFO("tp " << shape.tp << ", pp " << shape.pp);
        on_grid(m, shape, {.micro_batches = shape.pp}, [&](ParallelPagedBackend& b) {
            const test::WorkloadStats stats = test::check_workload_against_alone(b, b, test::shipped_tok(), w);
            CHECK(stats.max_batch_requests >= 2);
            CHECK(stats.chunked_prompts > 0);
        }, fast);
    }
}

TEST_CASE("fast path split: once packed, a rank lets its fp32 matrices go and holds its panels, gains and embedding rows") {
    const glass::Model& m = test::shipped();
    const glass::ModelConfig& c = m.config;
    std::vector<std::int64_t> held(4), packed(4), embedding(4), fp32_shard(4);
    glass::dist::run_ranks(4, [&](Communicator& comm) {
        ParallelPagedBackend b(m, comm, {.tp = 2, .pp = 2}, {}, glass::dist::fast_rank_parts({.threads = 1}));
        const glass::dist::RankPlace& at = b.place();
        const size_t r = static_cast<size_t>(comm.rank());
        held[r] = b.part().held_weight_bytes();
        packed[r] = b.part().weight_bytes();
        // Besides the panels (and the gains they read every pass, in weight_bytes) the shard keeps
        // its embedding rows, at stage 0 only.
        embedding[r] = 4 * (at.stage.first_layer == 0 ? std::int64_t{at.split.vocab} * c.dim : 0);
        fp32_shard[r] = glass::dist::held_weight_bytes(glass::dist::shard_model(m, at.split, at.stage.first_layer, at.stage.layers));
        if (comm.rank() != 0) {
            b.follow();
            return;
        }
        b.finish();
    });
    for (size_t r = 0; r < 4; ++r) {
        CAPTURE(r);
        CHECK(held[r] == packed[r] + embedding[r]);
        CHECK(held[r] < packed[r] + fp32_shard[r]);  // not the panels beside a second copy of the matrices
    }
}

TEST_CASE("release_shard_matrices: the matrices' memory goes, the embedding rows and gains stay and read the same") {
    const glass::Model& m = test::shipped();
    const glass::dist::TensorSplit split = glass::dist::tensor_split(m.config, 1, 2);
    glass::Model shard = glass::dist::shard_model(m, split);
    const std::vector<float> embedding(shard.token_embedding, shard.token_embedding + std::int64_t{split.vocab} * m.config.dim);
    const std::vector<float> gain(shard.layers[0].rms_att.data(), shard.layers[0].rms_att.data() + m.config.dim);
    const std::int64_t left = glass::dist::release_shard_matrices(shard);
    CHECK(left == 4 * (std::int64_t{split.vocab} * m.config.dim + std::int64_t{2} * m.config.dim * m.config.n_layers + m.config.dim));
    CHECK(shard.layers[0].wq.data() == nullptr);
    CHECK(shard.layers.back().w2.size() == 0);
    CHECK(shard.classifier == nullptr);
    CHECK(std::vector<float>(shard.token_embedding, shard.token_embedding + embedding.size()) == embedding);
    CHECK(std::vector<float>(shard.layers[0].rms_att.data(), shard.layers[0].rms_att.data() + m.config.dim) == gain);
    // A model that is not a shard's own copy (here: the shipped model, its storage the file's) is refused.
    glass::Model whole = m;
    CHECK_THROWS_WITH_AS(glass::dist::release_shard_matrices(whole), doctest::Contains("not a shard_model copy"), glass::Error);
    CHECK(whole.layers[0].wq.data() == m.layers[0].wq.data());
}

TEST_CASE("fast path split: llama2.c's goldens from one batched engine on tp 2, pp 2, tp 2 x pp 2") {
    const glass::Model& m = test::shipped();
    const std::vector<nlohmann::json> goldens = all_goldens();
    for (const ParallelShape shape : {ParallelShape{.tp = 2, .pp = 1}, ParallelShape{.tp = 1, .pp = 2}, ParallelShape{.tp = 2, .pp = 2}}) {
        INFO("tp " << shape.tp << ", pp " << shape.pp);
        std::vector<glass::serve::RequestResult> results;
        on_grid(m, shape, {.micro_batches = shape.pp}, [&](ParallelPagedBackend& b) { results = run_goldens(b, goldens); },
                glass::dist::fast_rank_parts({.threads = 1}));
        REQUIRE(results.size() == goldens.size());
        for (size_t i = 0; i < goldens.size(); ++i) {
            INFO("golden " << goldens[i]["prompt"] << " T " << goldens[i]["temperature"]);
            CHECK(results[i].generated_ids == test::ids_of(goldens[i]["generated_ids"]));
        }
    }
}

TEST_CASE("fast path split: a batch's logits within 1e-5 of the reference split on the same grid, K/V shipped in one process's layout") {
    // The two split the same way (the same partial sums, all-reduced in rank order), so what is
    // left is the fast path's own gap to the reference: 1e-5, as FastPagedBackend against
    // CpuPagedBackend (test_fast_families). A family with biases, q/k norms and a sandwich norm
    // (Gemma 3: two RoPE bases, local windows) checks that each stage's layers go by the whole
    // model's numbering.
    for (const std::string family : {"llama2", "gemma3"}) {
        CAPTURE(family);
        const glass::ModelConfig c = glass::fast::small_family_config(family);
        const glass::Model m = glass::fast::random_family_model(c, 9);
        const std::vector<int> a = {1, 5, 17, 33, 60, 2, 71, 90, 11, 42}, b = {7, 3, 95};
        const std::vector<int> table_a = {5, 2, 7}, table_b = {3, 6}, table_c = {4, 0, 1};  // blocks of 4
        const auto batch_logits = [&](glass::serve::PagedBackend& backend) {
            backend.allocate_pool(8, 4);
            const BatchEntry batch[] = {{.tokens = a, .start = 0, .block_table = table_a}, {.tokens = b, .start = 0, .block_table = table_b}};
            const std::span<const float> l = backend.forward(batch);
            return std::vector<float>(l.begin(), l.end());
        };
        for (const ParallelShape shape : {ParallelShape{.tp = 2, .pp = 1}, ParallelShape{.tp = 1, .pp = 2}, ParallelShape{.tp = 2, .pp = 2}}) {
            CAPTURE(shape.tp);
            CAPTURE(shape.pp);
            std::vector<float> reference, fast;
            std::vector<std::byte> rows;
            on_grid(m, shape, {}, [&](ParallelPagedBackend& g) { reference = batch_logits(g); });
            on_grid(m, shape, {}, [&](ParallelPagedBackend& g) {
                fast = batch_logits(g);
                rows = g.export_kv(table_a, 0, 10);
                g.import_kv(table_c, 0, 10, rows);  // into other blocks: the same bytes come out
                CHECK(g.export_kv(table_c, 0, 10) == rows);
            }, glass::dist::fast_rank_parts({.threads = 1}));
            REQUIRE(fast.size() == 2 * static_cast<size_t>(c.vocab_size));
            CHECK(test::relative_error(fast, reference) <= 1e-5);
            glass::fast::FastPagedBackend one(m, {.threads = 1});
            const std::vector<float> whole = batch_logits(one);
            if (shape.tp == 1) CHECK(fast == whole);  // stages: one process's operations
            const std::vector<std::byte> one_rows = one.export_kv(table_a, 0, 10);
            REQUIRE(rows.size() == one_rows.size());
            if (shape.tp == 1) CHECK(rows == one_rows);
        }
    }
}

}  // namespace test_parallel_engine
