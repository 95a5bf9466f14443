// The fast path allocates its buffers when it is built, not per step: FastCpuSession's decode
// and FastPagedBackend's forward, counted through this program's own operator new.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>

#include "fast_cpu_support.hpp"

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
