// tests/cuda/test_cuda_model_parallel.cpp — a model split over GPUs: dist::ParallelPagedBackend
// with every rank's part on its device (cuda/parallel_paged.hpp), the ranks as threads of this
// process, their tensor-parallel all-reduces through DeviceCollectives (cuda/collectives.hpp).
// (part of the test_cuda_model program; cuda_model_support.hpp has the shared pieces)
//
// Several ranks share this process's one device (or the emulator), so they all-reduce through the
// host stand-in: NCCL refuses two ranks on one GPU. NCCL itself is checked at one rank, on a GPU.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../serve_workloads.hpp"
#include "collectives.hpp"
#include "cuda_model_support.hpp"
#include "glass/dist/parallel_paged_backend.hpp"
#include "glass/dist/thread_communicator.hpp"
#include "parallel_paged.hpp"

using namespace cuda_model_test;

namespace {

using glass::dist::Communicator;
using glass::dist::ParallelPagedBackend;
using glass::dist::ParallelShape;

std::vector<float> random_values(unsigned seed, std::size_t n) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

// body(backend) at rank 0 of a tp × pp grid of threads, every rank's part on the device; the other
// ranks follow until it returns.
void on_gpu_grid(const glass::Model& m, ParallelShape shape, glass::dist::ParallelPagedOptions o, gc::CudaPagedOptions paged,
                 const std::function<void(ParallelPagedBackend&)>& body) {
    glass::dist::run_ranks(shape.tp * shape.pp, [&](Communicator& comm) {
        ParallelPagedBackend backend(m, comm, shape, o, gc::cuda_rank_parts(paged, gc::CollectivesKind::host));
        if (comm.rank() != 0) {
            backend.follow();
            return;
        }
        body(backend);
        backend.finish();
    });
}

std::vector<float> one_step(glass::serve::PagedBackend& b, const std::vector<int>& tokens, int start,
                            const std::vector<int>& table) {
    const glass::serve::BatchEntry e{.tokens = tokens, .start = start, .block_table = table};
    const std::span<const float> logits = b.forward({&e, 1});
    return {logits.begin(), logits.end()};
}

}  // namespace

TEST_CASE("DeviceCollectives: the stand-in's all-reduce gives every rank the CPU Communicator's bits") {
    // 3 ranks, so that the order of the additions shows: ((v0 + v1) + v2) differs from other orders
    // in the last bits of some of 4,099 random sums (checked below, so the test can fail).
    constexpr std::size_t n = 4099;
    glass::dist::run_ranks(3, [&](Communicator& comm) {
        const std::vector<float> mine = random_values(100 + unsigned(comm.rank()), n);
        std::vector<float> cpu = mine;
        comm.all_reduce_sum(std::span<float>(cpu));
        const std::unique_ptr<gc::DeviceCollectives> c = gc::make_collectives(comm, gc::CollectivesKind::host);
        CHECK(std::string(c->transport()) == "host");
        gc::DeviceBuffer d = gc::to_device(std::span<const float>(mine));
        c->all_reduce_sum(d.f32(), std::int64_t(n));
        const std::vector<float> gpu = gc::to_host(d.f32(), n);
        CHECK(std::memcmp(gpu.data(), cpu.data(), n * sizeof(float)) == 0);
        CHECK(c->calls() == 1);
        std::vector<float> all(3 * n);  // another order of the same additions gives other bits somewhere
        comm.all_gather(std::span<const float>(mine), std::span<float>(all));
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n; ++i) differ += (all[2 * n + i] + all[n + i]) + all[i] != cpu[i];
        CHECK(differ > 0);
    });
}

TEST_CASE("DeviceCollectives: NCCL on a GPU (one rank, one device); under the emulator, a named refusal") {
    glass::dist::run_ranks(1, [&](Communicator& comm) {
        if (kEmulated) {
            CHECK_THROWS_WITH_AS(gc::make_collectives(comm, gc::CollectivesKind::nccl),
                                 doctest::Contains("NCCL runs on GPUs only"), glass::Error);
            CHECK(std::string(gc::make_collectives(comm)->transport()) == "host");  // automatic
            return;
        }
        const std::unique_ptr<gc::DeviceCollectives> c = gc::make_collectives(comm);  // automatic: NCCL
        CHECK(std::string(c->transport()) == "nccl");
        const std::vector<float> mine = random_values(7, 1000);
        gc::DeviceBuffer d = gc::to_device(std::span<const float>(mine)), all(mine.size() * sizeof(float));
        c->all_gather(d.f32(), all.f32(), std::int64_t(mine.size()));
        CHECK(gc::to_host(all.f32(), mine.size()) == mine);  // one rank: its own values, through NCCL
    });
}

TEST_CASE("CUDA split backends: tp 2, pp 2, tp 2 × pp 2 serve the engine within bounds of one CPU process; stages bit for bit with one GPU") {
    // The engine's ragged batches (chunked prompts, prefix-cache hits) on the grid, each step also
    // run by one CpuPagedBackend and one CudaPagedBackend holding the whole model (ComparingBackend
    // nested: inner = grid vs one GPU, outer = grid vs the CPU). Bounds: GPU vs CPU, the harness's
    // kF32 (1e-5); with tp the partial sums of Wo and W2 are added in tp pieces on top, a gap of
    // its own of at most 1e-5 on the CPU (test_tensor_parallel), so 2e-5 against the CPU and 1e-5
    // against one GPU. Pipeline stages alone (tp 1) run one GPU's kernels on the same rows: 0.
    const glass::Model& m = test::shipped();
    for (const ParallelShape shape : {ParallelShape{.tp = 2, .pp = 1}, ParallelShape{.tp = 1, .pp = 2},
                                      ParallelShape{.tp = 2, .pp = 2}}) {
        if (kSmall && shape.tp * shape.pp == 4) continue;
        CAPTURE(shape.tp);
        CAPTURE(shape.pp);
        const test::Workload w = test::random_workload(11, m.config, /*block_size=*/5, /*budget=*/24, /*num_blocks=*/24,
                                                       /*prefix_caching=*/true, /*chunked_prefill=*/true, /*n_requests=*/3);
        on_gpu_grid(m, shape, {.micro_batches = shape.pp}, {}, [&](ParallelPagedBackend& grid) {
            gc::CudaPagedBackend one_gpu(m);
            glass::serve::CpuPagedBackend cpu(m);
            ComparingBackend against_gpu(grid, one_gpu);
            ComparingBackend against_cpu(against_gpu, cpu);
            test::WorkloadStats stats;
            test::run_workload(against_cpu, test::shipped_tok(), w, &stats);
            CHECK(against_cpu.worst <= (shape.tp == 1 ? cuda_model_test::kF32 : 2 * cuda_model_test::kF32));
            CHECK(against_gpu.worst <= (shape.tp == 1 ? 0.0 : cuda_model_test::kF32));
            CHECK(against_cpu.rows > against_cpu.steps);  // batches of several rows
            CHECK(stats.chunked_prompts > 0);
            MESSAGE("tp " << shape.tp << " pp " << shape.pp << ": vs CPU " << against_cpu.worst << ", vs one GPU "
                          << against_gpu.worst);
        });
    }
}

TEST_CASE("a CUDA split backend ships a prompt's K/V in one GPU's layout, and takes it back") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 5, 17, 33, 60, 2, 71, 90, 11, 42}, next = {23};  // positions 0-9, then 10
    const std::vector<int> table_a = {5, 2, 7}, table_b = {3, 6, 0}, table_one = {0, 1, 2};  // blocks of 4
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8})
        for (const ParallelShape shape : {ParallelShape{.tp = 1, .pp = 2}, ParallelShape{.tp = 2, .pp = 1}}) {
            if (kSmall && kv == glass::KvType::int8) continue;
            CAPTURE(std::string(glass::to_string(kv)));
            CAPTURE(shape.tp);
            gc::CudaPagedBackend one(m, {.kv = kv});
            one.allocate_pool(8, 4);
            one_step(one, prompt, 0, table_one);
            const std::vector<std::byte> one_rows = one.export_kv(table_one, 0, 10);
            on_gpu_grid(m, shape, {}, {.kv = kv}, [&](ParallelPagedBackend& b) {
                CHECK(b.kv_type() == kv);
                b.allocate_pool(8, 4);
                one_step(b, prompt, 0, table_a);
                const std::vector<std::byte> rows = b.export_kv(table_a, 0, 10);
                REQUIRE(rows.size() == one_rows.size());  // kv_bytes_per_token of the whole model × 10
                if (shape.tp == 1) CHECK(rows == one_rows);  // stages: one GPU's operations
                b.import_kv(table_b, 0, 10, rows);  // into other blocks: the same bytes come out
                CHECK(b.export_kv(table_b, 0, 10) == rows);
                const std::vector<float> want = one_step(b, next, 10, table_a);
                CHECK(one_step(b, next, 10, table_b) == want);  // read exactly as its own rows
                // One GPU decoding from the grid's rows: exact for stages; for tp within the tp gap
                // (1e-5), int8 rows within kInt8 (a new row's code may round to a neighbour).
                gc::CudaPagedBackend from_grid(m, {.kv = kv});
                from_grid.allocate_pool(8, 4);
                from_grid.import_kv(table_one, 0, 10, rows);
                const double gap = relative_error(one_step(from_grid, next, 10, table_one), want);
                CHECK(gap <= (shape.tp == 1 ? 0.0 : kv == glass::KvType::int8 ? cuda_model_test::kInt8 : cuda_model_test::kF32));
            });
        }
}

TEST_CASE("a CUDA split backend holds its share: weights and pool per rank, refused past --rank-memory") {
    const glass::Model& m = test::shipped();
    std::int64_t whole_pool = 0, whole_weights = 0;
    {
        gc::CudaPagedBackend one(m);
        one.allocate_pool(4, 16);
        whole_pool = one.pool_bytes();
        whole_weights = one.weight_bytes();
    }
    on_gpu_grid(m, {.tp = 2, .pp = 1}, {}, {}, [&](ParallelPagedBackend& b) {
        b.allocate_pool(4, 16);
        CHECK(b.pool_bytes() * 2 == whole_pool);  // half the KV heads
        CHECK(b.weight_bytes() < whole_weights);
        CHECK(b.held_bytes() == b.part().held_weight_bytes() + b.pool_bytes());
    });
    const std::int64_t cap = whole_weights / 4;
    CHECK_THROWS_WITH_AS(on_gpu_grid(m, {.tp = 2, .pp = 1}, {.rank_memory = cap}, {}, [](ParallelPagedBackend&) {}),
                         doctest::Contains(("more than its memory of " + std::to_string(cap) + " bytes").c_str()),
                         glass::Error);
}
