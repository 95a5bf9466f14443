/// \file
/// \brief glass/fast/thread_pool.hpp — a few threads that stay alive and share out one loop's items.
/// ```text
/// Why a pool: decode runs ~7 matrix–vector products per layer (154 per token on a 22-layer
/// model). Starting threads for each would cost ~20–50 µs apiece; waking a worker that is still
/// spinning costs well under 1 µs. So the threads are made once, with the session.
///
/// How work is shared: run(n_items, job) calls job(item) for item = 0 .. n_items-1, spread over
/// all threads (the caller works too), and returns when every item is done. Each thread owns a
/// contiguous run of the items (thread t: items n·t/T .. n·(t+1)/T - 1) and claims them in order
/// from its own counter, so it streams one stretch of the weights front to back and the
/// hardware prefetcher keeps running ahead of it. A thread that has finished its own run claims
/// what is left of the others' (from the same counters, so no item runs twice): on a busy
/// machine (this 2-vCPU VM is shared) a worker may be descheduled for milliseconds, and the
/// awake thread then simply takes its remaining items. An item is sized to ~1 MB of weights, but
/// a product is cut into at least 4 items per thread (panels_per_item below), so a thief takes
/// small bites and a small matrix (a 768 × 768 Q4_0 one is 330 KB) still keeps every thread
/// busy. Nothing is allocated per call.
///
/// Measured (AVX2 set, Zen 5, 2 threads, a stories110M-shape token's fp32 products): one shared
/// counter, where the threads took items alternately, streamed 48-56 GB/s; owned runs 52-64 GB/s
/// in the same minutes (plain streaming of one big matrix: 54-65 GB/s). Alternating 1 MB items
/// restarts each thread's prefetch streams at every item; smaller shared items were worse still.
///
/// Each counter holds a whole claim in one 64-bit atomic: (generation << 40 | end << 20 | next
/// item). A worker that wakes late, after its job has finished and the next one started, can
/// never claim an item of the wrong job: it reads the generation, its run's end and the next
/// item in one load, and its compare-and-swap fails if any of them changed. (Keeping the item
/// count in a separate variable is not enough: a late worker could pair the old job's counter
/// with the new job's count, claim an item that does not exist, and throw off the count of
/// finished items, so run() would wait forever. The tests caught exactly that under load.)
/// ```
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "glass/errors.hpp"

namespace glass::fast {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// Consecutive panels per work item for a product of `panels` panels of `panel_bytes` each on
// `threads` threads: about 1 MB of weights, but never fewer than kItemsPerThread items per
// thread. (Bytes alone made a small quantized matrix one item: one thread did the whole product
// while the other waited, and Q4_0 prefill ran at 36 % of the AVX2 FMA peak instead of 60 %.)
inline int panels_per_item(std::int64_t panels, std::int64_t panel_bytes, int threads) {
    constexpr std::int64_t kItemBytes = std::int64_t{1} << 20, kItemsPerThread = 4;
    const std::int64_t by_bytes = kItemBytes / std::max<std::int64_t>(1, panel_bytes);
    const std::int64_t items = std::int64_t{threads} * kItemsPerThread;
    const std::int64_t balanced = (panels + items - 1) / items;
    return static_cast<int>(std::max<std::int64_t>(1, std::min(by_bytes, balanced)));
}

// How one parallel region shares out the products listed in it (at most 3: q|k|v): product i's
// items come after items_before[i] others and cover panels_of_item[i] of its panels each (its
// last may cover fewer); total items in all. FastModel::run_products cuts every region so, and
// benchmark.hpp's region_read_probe cuts decode the same way.
struct ItemLayout {
    int items_before[3] = {}, panels_of_item[3] = {}, total = 0, products = 0;
    void add(std::int64_t panels, std::int64_t panel_bytes, int threads) {
        if (products == 3) fail("a parallel region holds at most 3 products");
        const int per_item = panels_per_item(panels, panel_bytes, threads);
        items_before[products] = total;
        panels_of_item[products] = per_item;
        total += static_cast<int>((panels + per_item - 1) / per_item);
        ++products;
    }
};

class ThreadPool {
public:
    explicit ThreadPool(int n_threads) : n_threads_(n_threads) {
        if (n_threads < 1 || n_threads > 256) fail("thread count ", n_threads, " is outside [1, 256]");
        runs_ = std::vector<Run>(static_cast<size_t>(n_threads));
        for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
    }
    ~ThreadPool() {
        stop_.store(true);
        wake_.fetch_add(1);
        wake_.notify_all();
        for (auto& w : workers_) w.join();
    }
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls job(item, thread) for every item in [0, n_items) across the threads (thread =
    // 0 .. size()-1, for per-thread scratch buffers); returns when all are done. `job` is passed by address (function pointer + context, no std::function), so a
    // call allocates nothing. Jobs must not throw.
    template <typename Job>
    void run(int n_items, Job& job) {
        if (n_items <= 0) return;
        if (n_threads_ == 1) {
            for (int i = 0; i < n_items; ++i) job(i, 0);
            return;
        }
        fn_ = [](void* ctx, int item, int thread) { (*static_cast<Job*>(ctx))(item, thread); };
        ctx_ = &job;
        if (n_items > kMaxItems) fail("thread pool: ", n_items, " items in one job (at most ", kMaxItems, ")");
        done_.store(0, std::memory_order_relaxed);
        generation_ = (generation_ + 1) & kGenerationMask;
        for (int t = 0; t < n_threads_; ++t) {  // thread t's run; the stores publish fn_, ctx_ and the job
            const std::uint64_t first = std::uint64_t(n_items) * t / n_threads_, end = std::uint64_t(n_items) * (t + 1) / n_threads_;
            runs_[t].counter.store(generation_ << 40 | end << 20 | first, std::memory_order_release);
        }
        wake_.fetch_add(1, std::memory_order_release);
        wake_.notify_all();
        work(generation_, 0);
        // Wait for items other threads claimed. If one of them was descheduled mid-item, give
        // it our CPU instead of spinning against it.
        for (int spins = 0; done_.load(std::memory_order_acquire) != n_items; ++spins) {
            if (spins < 4000) cpu_relax();
            else sched_yield();
        }
    }

private:
    // Claims and runs items of job `generation` until none are left: thread's own run first,
    // then what remains of the others' runs, each from its front.
    void work(std::uint64_t generation, int thread) {
        for (int v = 0; v < n_threads_; ++v) {
            std::atomic<std::uint64_t>& counter = runs_[(thread + v) % n_threads_].counter;
            for (;;) {
                std::uint64_t c = counter.load(std::memory_order_acquire);
                const std::uint64_t end = (c >> 20) & kItemMask, next = c & kItemMask;
                if ((c >> 40) != generation || next >= end) break;  // another job's, or used up
                if (!counter.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
                fn_(ctx_, static_cast<int>(next), thread);
                done_.fetch_add(1, std::memory_order_release);
            }
        }
    }

    void worker_loop(int thread) {
        unsigned seen = 0;
        for (;;) {
            // Spin ~50 µs for the next job (a norm or RoPE step away), then sleep on a futex.
            unsigned w = wake_.load(std::memory_order_acquire);
            for (int i = 0; w == seen && i < 20000; ++i) {
                cpu_relax();
                w = wake_.load(std::memory_order_acquire);
            }
            while (w == seen) {
                wake_.wait(seen, std::memory_order_acquire);
                w = wake_.load(std::memory_order_acquire);
            }
            seen = w;
            if (stop_.load()) return;
            work(runs_[thread].counter.load(std::memory_order_acquire) >> 40, thread);
        }
    }

    int n_threads_;
    std::vector<std::thread> workers_;
    static constexpr int kMaxItems = (1 << 20) - 1;
    static constexpr std::uint64_t kItemMask = (1u << 20) - 1;
    static constexpr std::uint64_t kGenerationMask = (std::uint64_t{1} << 24) - 1;
    struct alignas(64) Run {                 // one cache line each: claims by one thread do not
        std::atomic<std::uint64_t> counter{0};  // slow another's; generation << 40 | end << 20 | next
    };
    std::vector<Run> runs_;                  // [threads]: thread t's run of the current job
    alignas(64) std::atomic<int> done_{0};   // items finished in the current job
    alignas(64) std::atomic<unsigned> wake_{0};  // bumped once per job: what sleeping workers wait on
    std::atomic<bool> stop_{false};
    std::uint64_t generation_ = 0;           // written by the calling thread only
    void (*fn_)(void*, int, int) = nullptr;
    void* ctx_ = nullptr;
};

}  // namespace glass::fast
