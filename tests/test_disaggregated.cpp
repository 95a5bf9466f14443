// Disaggregated prefill/decode, the engine's side (serve/remote_prefill.hpp) and over ranks
// (dist/disaggregated.hpp): a decode engine whose prompts are computed by a prefill worker gives
// every request exactly what it gets alone — through preemption, cancels and prefix-cache hits —
// on the reference and the fast backend, fp32 and int8 KV; the rows shipped are
// kv_bytes_per_token × (n − first); a worker's failure is named, never a hang.
#include <numeric>
#include <string>
#include <vector>

#include "serve_workloads.hpp"
#include "test_support.hpp"

namespace test_disaggregated {  // this file's own names (tests are built in unity batches)

using glass::KvType;
using glass::serve::CpuPagedBackend;
using glass::serve::Engine;
using glass::serve::EngineOptions;
using glass::serve::PrefillJob;
using glass::serve::PrefillWorker;
using glass::serve::ThreadPrefill;

namespace {

// A few of check_workload_grid's randomized workloads (preempting pools, small and large
// budgets, prefix cache on and off), each served with its prompts on `worker`'s thread and
// checked against the request alone on `alone`. Returns what they showed, summed.
test::WorkloadStats check_remote_workloads(glass::serve::PagedBackend& decode, glass::serve::PagedBackend& worker,
                                           glass::serve::PagedBackend& alone, unsigned first_seed, int workloads) {
    test::WorkloadStats total;
    unsigned seed = first_seed;
    for (int i = 0; i < workloads; ++i) {
        const int block = i % 2 == 0 ? 16 : 5;
        const int pool_positions = i % 3 == 2 ? 1024 : 120;  // 120: one request needs up to 84, so several preempt
        test::Workload w = test::random_workload(seed++, decode.config(), block, i % 2 == 0 ? 64 : 7,
                                                 (pool_positions + block - 1) / block, /*prefix_caching=*/i % 4 != 3,
                                                 /*chunked_prefill=*/true);
        ThreadPrefill prefill(worker, block, /*chunk=*/32);
        w.engine.remote_prefill = &prefill;
        total.add(test::check_workload_against_alone(decode, alone, test::shipped_tok(), w));
    }
    return total;
}

glass::GenerateOptions sampled(int max_new, std::uint64_t seed) {
    glass::GenerateOptions o;
    o.max_new_tokens = max_new;
    o.sampling.temperature = 0.8f;
    o.seed = seed;
    return o;
}

}  // namespace

TEST_CASE("remote prefill on a worker thread: every request equals itself alone (reference backend, fp32 and int8 KV)") {
    const glass::Model& m = test::shipped();
    for (const KvType kv : {KvType::fp32, KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        CpuPagedBackend decode(m, kv), worker(m, kv), alone(m, kv);
        const test::WorkloadStats total = check_remote_workloads(decode, worker, alone, /*first_seed=*/101, 6);
        CHECK(total.preemptions > 0);        // requests were preempted (some while their prompt was away)
        CHECK(total.prefix_hit_tokens > 0);  // and the decode side's prefix cache shortened what was shipped
        CHECK(total.max_batch_requests >= 2);
    }
}

TEST_CASE("remote prefill on the fast backend: every request equals itself alone (fp32 and int8 KV)") {
    const glass::Model& m = test::shipped();
    for (const KvType kv : {KvType::fp32, KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        const glass::fast::FastOptions fo{.threads = 1, .kv = kv};
        glass::fast::FastPagedBackend decode(m, fo), worker(m, fo), alone(m, fo);
        const test::WorkloadStats total = check_remote_workloads(decode, worker, alone, /*first_seed=*/201, 3);
        CHECK(total.preemptions > 0);
    }
}

TEST_CASE("a prefill worker ships rows first .. n-1: kv_bytes_per_token x (n - first) bytes, the logits of the prompt") {
    const glass::Model& m = test::shipped();
    std::vector<int> prompt(40);
    std::iota(prompt.begin(), prompt.end(), 3);
    prompt[0] = 1;
    for (const KvType kv : {KvType::fp32, KvType::int8}) {
        CAPTURE(glass::to_string(kv));
        CpuPagedBackend backend(m, kv), whole(m, kv);
        PrefillWorker worker(backend, /*block_size=*/8, /*chunk=*/16);  // 3 passes: 16, 16, 8
        for (const int first : {0, 16, 39}) {
            CAPTURE(first);
            const glass::serve::PrefilledKv got = worker.run({.request_id = 7, .ticket = 2, .tokens = prompt, .first = first});
            CHECK(got.request_id == 7);
            CHECK(got.ticket == 2);
            CHECK(got.first == first);
            CHECK(got.end == 40);
            CHECK(static_cast<std::int64_t>(got.rows.size()) == glass::kv_bytes_per_token(m.config, kv) * (40 - first));
            // The logits are the prompt's last position's, bit for bit as one pass computes them.
            glass::serve::PagedSession session(whole, 8);
            const std::span<const float> want = session.prefill(prompt);
            CHECK(std::equal(got.last_logits.begin(), got.last_logits.end(), want.begin(), want.end()));
            // And the rows are the pool's own: exported from a pool that computed the prompt in one pass.
            std::vector<int> table(static_cast<size_t>((m.config.seq_len + 7) / 8));
            std::iota(table.begin(), table.end(), 0);
            CHECK(got.rows == whole.export_kv(table, first, 40));
        }
        CHECK(worker.positions_computed() == 3 * 40);
        CHECK_THROWS_WITH(worker.run({.request_id = 1, .ticket = 1, .tokens = prompt, .first = 40}),
                          doctest::Contains("holds 40 of 40 positions"));
        CHECK_THROWS_WITH(worker.run({.request_id = 1, .ticket = 1, .tokens = {}, .first = 0}),
                          doctest::Contains("a prompt of 0 tokens"));
    }
}

TEST_CASE("import_kv refuses rows that do not fit, on both CPU backends") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend reference(m);
    glass::fast::FastPagedBackend fast(m, {.threads = 1});
    for (glass::serve::PagedBackend* b : {static_cast<glass::serve::PagedBackend*>(&reference),
                                          static_cast<glass::serve::PagedBackend*>(&fast)}) {
        b->allocate_pool(4, 8);
        const std::vector<int> table = {0, 1};
        std::vector<std::byte> bytes(static_cast<size_t>(glass::kv_bytes_per_token(m.config, KvType::fp32) * 10));
        CHECK_NOTHROW(b->import_kv(table, 0, 10, bytes));
        CHECK_THROWS_WITH(b->import_kv(table, 0, 9, bytes), doctest::Contains("for 9 positions, expected"));
        CHECK_THROWS_WITH(b->import_kv(table, 10, 20, bytes), doctest::Contains("2 blocks of 8 positions cannot hold 20"));
        CHECK_THROWS_WITH(b->export_kv(std::vector<int>{0, 6}, 0, 10), doctest::Contains("block 6 is outside the pool of 4"));
        CHECK_THROWS_WITH(b->export_kv(table, 5, 5), doctest::Contains("first < end"));
    }
}

TEST_CASE("a decode rank and a prefill rank over a communicator serve exactly as one engine; the bytes are counted") {
    const glass::Model& m = test::shipped();
    const std::vector<std::string> prompts = {"Once upon a time", "Lily and Ben went to the park. They saw a big dog",
                                              "Once upon a time, there was a little girl named Lily. She loved to play outside",
                                              "Once upon a time"};
    // The combined engine: one pool, prompts computed here.
    CpuPagedBackend combined_backend(m);
    Engine combined(combined_backend, test::shipped_tok(), {});
    for (size_t i = 0; i < prompts.size(); ++i) combined.add_request(prompts[i], sampled(24, 10 + i));
    const std::vector<glass::serve::RequestResult> want = combined.run_to_completion();

    std::vector<glass::serve::RequestResult> got;
    glass::dist::DisaggregatedCounters decode_side, prefill_side;
    std::int64_t expected_bytes = 0;
    glass::dist::run_ranks(2, [&](glass::dist::Communicator& comm) {
        CpuPagedBackend backend(m);
        if (comm.rank() == 1) {
            prefill_side = glass::dist::run_prefill_rank(comm, 0, backend, 16, 64);
            return;
        }
        glass::dist::CommPrefill prefill(comm, 1, m.config, KvType::fp32);
        EngineOptions eo;
        eo.remote_prefill = &prefill;
        Engine engine(backend, test::shipped_tok(), eo);
        for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(prompts[i], sampled(24, 10 + i));
        got = engine.run_to_completion();
        decode_side = prefill.counters();
        for (const glass::serve::RequestResult& r : got)  // header, rows past the cached ones, logits
            expected_bytes += 4 * glass::dist::kShipmentHeaderInts +
                              glass::kv_bytes_per_token(m.config, KvType::fp32) *
                                  (static_cast<std::int64_t>(r.prompt_ids.size()) - r.cached_tokens) +
                              4 * m.config.vocab_size;
    });
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].generated_ids == want[i].generated_ids);
        CHECK(got[i].text == want[i].text);
    }
    CHECK(decode_side.jobs == static_cast<std::int64_t>(prompts.size()));
    CHECK(prefill_side.jobs == decode_side.jobs);
    CHECK(decode_side.shipped_bytes == expected_bytes);
    CHECK(prefill_side.shipped_bytes == expected_bytes);
    CHECK(prefill_side.shipped_rows == decode_side.shipped_rows);
}

TEST_CASE("a prefill rank whose shipments the decode side cannot take: the step fails naming both values, no hang") {
    const glass::Model& m = test::shipped();
    std::string step_error, unavailable;
    CHECK_THROWS_WITH(glass::dist::run_ranks(2,
                                             [&](glass::dist::Communicator& comm) {
                                                 if (comm.rank() == 1) {
                                                     CpuPagedBackend int8(m, KvType::int8);
                                                     glass::dist::run_prefill_rank(comm, 0, int8);
                                                     return;
                                                 }
                                                 CpuPagedBackend backend(m);
                                                 glass::dist::CommPrefill prefill(comm, 1, m.config, KvType::fp32);
                                                 EngineOptions eo;
                                                 eo.remote_prefill = &prefill;
                                                 Engine engine(backend, test::shipped_tok(), eo);
                                                 engine.add_request("Once upon a time", sampled(8, 1));
                                                 try {
                                                     engine.run_to_completion();
                                                 } catch (const glass::Error& e) {
                                                     step_error = e.what();
                                                 }
                                                 unavailable = engine.unavailable();
                                             }),
                      doctest::Contains("refused: its KV type differs"));
    CHECK_MESSAGE(step_error.find("its KV type is 1, this side's is 0") != std::string::npos, step_error);
    CHECK_MESSAGE(step_error.find("prefill worker, request 0") != std::string::npos, step_error);
    CHECK_MESSAGE(unavailable.find("the prefill rank (1) cannot be reached") != std::string::npos, unavailable);
}

}  // namespace test_disaggregated
