// Memory stays flat: generating to the end of the context window, again and again, on the CPU
// reference session and on the fast path, and serving a long load through the engine (prefix
// hits, preemptions, cancellations) do not grow the process's memory once warmed up.
//
// What is measured: resident memory (/proc/self/statm), after malloc_trim(0). glibc's malloc keeps
// freed memory in its arenas (the top of each heap up to M_TRIM_THRESHOLD, whole free pages in the
// middle): trimming first returns what is free, so a reading is what is still in use plus the
// allocator's fragmentation (partly used pages). Under AddressSanitizer (the sanitizer lane) resident
// memory says nothing about glass: freed blocks sit in ASan's quarantine (up to 256 MiB) and its
// allocator never gives pages back. There the test reads the bytes the program has allocated and
// not freed (__sanitizer_get_current_allocated_bytes), which is exact.
//
// Transparent huge pages are turned off for this process (prctl PR_SET_THP_DISABLE): the fast
// path madvises its buffers MADV_HUGEPAGE, and the kernel's khugepaged may fill any 2 MiB range of
// them at a moment of its choosing, adding up to 2 MiB of resident memory that glass never touched.
#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <random>

#if defined(__SANITIZE_ADDRESS__)
// From the sanitizer runtime (<sanitizer/allocator_interface.h>, which g++ 12 does not install).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

#include "serve_workloads.hpp"
#include "test_support.hpp"

namespace test_memory {  // this file's own names (tests are built in unity batches)

namespace {

constexpr std::int64_t KiB = 1024;

// The process's memory now, in bytes: resident memory (or, under AddressSanitizer, the heap bytes
// in use; see the top of this file).
std::int64_t memory_now() {
#if defined(__SANITIZE_ADDRESS__)
    return static_cast<std::int64_t>(__sanitizer_get_current_allocated_bytes());
#else
    ::malloc_trim(0);
    std::ifstream statm("/proc/self/statm");  // sizes in pages: total, resident, ...
    std::int64_t total_pages = 0, resident_pages = 0;
    statm >> total_pages >> resident_pages;
    REQUIRE_MESSAGE(statm, "cannot read /proc/self/statm");
    return resident_pages * ::sysconf(_SC_PAGESIZE);
#endif
}

// Once, before any buffer is mapped: no transparent huge pages (see the top of this file).
void no_huge_pages() {
    static const bool once = [] {
        ::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);  // best effort: older kernels may refuse
        return true;
    }();
    (void)once;
}

// ---- (a) generating to the context limit ----------------------------------------------------

// Sampled runs from "Once upon a time" with stop tokens off, so each one fills the context window.
constexpr int kWarmupRuns = 2;
constexpr int kMeasuredRuns = 16;

// Allowed growth over the measured runs. The KV cache of both sessions is allocated up front for
// the whole window (KVCache, FastCpuSession::allocate_buffers), so nothing the model holds needs to
// grow per token: what remains after the warm-up is the allocator's fragmentation, a few pages.
// Measured: 0-12 KiB. 128 KiB still catches the smallest leak per token: 16 runs x ~507 decoded
// tokens x one 32-byte chunk (glibc's smallest: a 24-byte allocation) = ~250 KiB (seen: 256 KiB).
constexpr std::int64_t kGenerateSlack = 128 * KiB;

glass::GenerateResult to_the_limit(glass::Session& session, std::uint64_t seed) {
    glass::GenerateOptions o;
    o.max_new_tokens = session.config().seq_len;  // more than fits: the window stops it
    o.stop_on_bos = o.stop_on_eos = false;
    o.sampling.temperature = 1.0f;
    o.seed = seed;
    return glass::generate(session, test::shipped_tok(), "Once upon a time", o);
}

void check_flat_to_the_limit(glass::Session& session) {
    const int seq_len = session.config().seq_len;
    std::uint64_t seed = 1;
    for (int i = 0; i < kWarmupRuns; ++i) {
        const glass::GenerateResult r = to_the_limit(session, seed++);
        // Full: every position of the window holds a token's K/V; the last sampled token needs none.
        REQUIRE(glass::to_string(r.stop_reason) == std::string("context_full"));
        REQUIRE(r.prompt_ids.size() + r.generated_ids.size() == static_cast<size_t>(seq_len) + 1);
    }
    const std::int64_t before = memory_now();
    std::int64_t most = before;
    for (int i = 0; i < kMeasuredRuns; ++i) {
        REQUIRE(to_the_limit(session, seed++).generated_ids.size() > 0);  // the result is freed before the reading
        most = std::max(most, memory_now());
    }
    const std::int64_t after = memory_now();
    MESSAGE("memory after the warm-up: " << before / KiB << " KiB; after " << kMeasuredRuns << " more runs of "
            << seq_len << " positions: " << after / KiB << " KiB (highest reading " << most / KiB << " KiB)");
    CHECK(after - before < kGenerateSlack);
    CHECK(most - before < kGenerateSlack);
}

// ---- (b) serving a long load ----------------------------------------------------------------

// Rounds of 120 requests (serve_workloads.hpp: three shared 48-token prefixes, 1 to 24 new tokens,
// greedy and sampled, stop strings, top logprobs, arrivals over 40 steps, one in ten cancelled),
// all on one engine, as a server runs: a small pool (16 blocks of 16) forces preemptions, a budget
// of 64 tokens per step chunks the prompts, and the prefix cache is on.
constexpr int kRequestsPerRound = 120;
constexpr int kWarmupRounds = 2;
constexpr int kMeasuredRounds = 6;

// Allowed growth over the measured rounds: the engine holds its pool and the prefix cache's table
// (one entry per block at most) at their full size after the warm-up; requests, results and step
// reports are freed as they finish. Measured: 0-12 KiB. 128 KiB is well under what keeping each
// finished request would cost: 720 requests x (ids, token times, text: ~1 KiB; seen: 800 KiB).
constexpr std::int64_t kServeSlack = 128 * KiB;

struct ServeStats {
    int requests = 0, preemptions = 0, cancelled = 0, cached_tokens = 0;
};

// One round: the workload's requests arrive at their steps (relative to the round's start) and are
// cancelled at theirs; the round ends when all have finished. Results are dropped once counted,
// as the server does once it has sent them.
void serve_round(glass::serve::Engine& engine, unsigned seed, ServeStats& stats) {
    const test::Workload w = test::random_workload(seed, engine.config(), 16, 64, 16, true, true, kRequestsPerRound);
    std::vector<int> id_of(w.requests.size(), -1);
    size_t done = 0;
    for (int step = 0; done < w.requests.size(); ++step) {
        REQUIRE_MESSAGE(step < 20000, "the engine does not finish round " << seed);
        for (size_t i = 0; i < w.requests.size(); ++i) {
            if (w.requests[i].arrival_step == step)
                id_of[i] = engine.add_request_ids(w.requests[i].prompt, w.requests[i].options);
            if (w.requests[i].cancel_step == step && id_of[i] >= 0) engine.cancel(id_of[i]);
        }
        const glass::serve::StepReport report = engine.step();
        stats.preemptions += static_cast<int>(report.preempted.size());
        for (const glass::serve::RequestResult& r : engine.take_finished()) {
            ++done;
            ++stats.requests;
            stats.cancelled += r.stop_reason == glass::StopReason::cancelled;
            stats.cached_tokens += r.cached_tokens;
        }
    }
    REQUIRE(engine.blocks().num_free() == engine.blocks().num_blocks());  // all given back
}

void check_flat_serving(glass::serve::PagedBackend& backend) {
    glass::serve::EngineOptions eo;
    eo.block_size = 16;
    eo.num_blocks = 16;  // 256 positions; one request needs at most 48 + 12 + 24 = 84
    eo.scheduler.max_tokens_per_step = 64;
    eo.scheduler.max_running = 16;
    glass::serve::Engine engine(backend, test::shipped_tok(), eo);
    ServeStats stats;
    unsigned seed = 1;
    for (int i = 0; i < kWarmupRounds; ++i) serve_round(engine, seed++, stats);
    const std::int64_t before = memory_now();
    std::int64_t most = before;
    for (int i = 0; i < kMeasuredRounds; ++i) {
        serve_round(engine, seed++, stats);
        most = std::max(most, memory_now());
    }
    const std::int64_t after = memory_now();
    MESSAGE("memory after " << kWarmupRounds << " warm-up rounds: " << before / KiB << " KiB; after "
            << kMeasuredRounds << " more rounds (" << stats.requests << " requests in all, " << stats.preemptions
            << " preemptions, " << stats.cancelled << " cancelled, " << stats.cached_tokens
            << " prompt tokens from the prefix cache): " << after / KiB << " KiB (highest reading " << most / KiB << " KiB)");
    // The load did what it is meant to: a flat line without these would prove little.
    CHECK(stats.requests == (kWarmupRounds + kMeasuredRounds) * kRequestsPerRound);
    CHECK(stats.preemptions > 0);
    CHECK(stats.cancelled > 0);
    CHECK(stats.cached_tokens > 0);
    CHECK(after - before < kServeSlack);
    CHECK(most - before < kServeSlack);
}

}  // namespace

TEST_CASE("generating to the context limit again and again keeps memory flat (CPU reference)") {
    no_huge_pages();
    glass::CpuSession session(test::shipped());
    check_flat_to_the_limit(session);
}

TEST_CASE("generating to the context limit again and again keeps memory flat (fast path, 2 threads)") {
    no_huge_pages();
    glass::fast::FastCpuSession session(test::shipped(), {.threads = 2, .weights = glass::fast::WeightType::fp32, .prefill_chunk = 512});
    check_flat_to_the_limit(session);
}

TEST_CASE("serving a long load keeps memory flat (engine on the CPU reference)") {
    no_huge_pages();
    glass::serve::CpuPagedBackend backend(test::shipped());
    check_flat_serving(backend);
}

TEST_CASE("serving a long load keeps memory flat (engine on the fast path, 2 threads)") {
    no_huge_pages();
    glass::fast::FastPagedBackend backend(test::shipped(), {.threads = 2, .weights = glass::fast::WeightType::fp32, .prefill_chunk = 512});
    check_flat_serving(backend);
}

}  // namespace test_memory
