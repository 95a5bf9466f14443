/// \file
/// \brief emulator/scheduler.cpp — GPU threads as fibers: running a block, its barriers and shuffles.
/// ```text
/// Fibers come from Boost.Context: switching stacks portably (and restoring the floating-point
/// control registers) is exactly the kind of small, subtle machine-specific code a well-kept library
/// should own. Each GPU thread slot gets one fiber with its own 128 KiB stack (a guard page below it
/// turns an overflow into a crash, not corruption); the fibers are made once and reused by every
/// block of every launch. The scheduler resumes every runnable fiber in turn; a fiber runs until it
/// returns or pauses at a barrier (sync_block) or a warp shuffle (exchange_in_warp).
/// ```
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "internal.hpp"

#if defined(BOOST_USE_UCONTEXT)
// Boost.Context's ucontext flavour (the one AddressSanitizer can follow: configure with
// -DGLASS_ASAN=ON) keeps a per-thread "current fiber" record that its compiled
// library would define; Debian's library is built for the default (fcontext) flavour.
namespace boost::context::detail {
fiber_activation_record*& fiber_activation_record::current() noexcept {
    thread_local fiber_activation_record* record = nullptr;
    if (!record) record = new fiber_activation_record();  // the OS thread's own context
    return record;
}
}  // namespace boost::context::detail
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

using namespace glass_emu::detail;

namespace glass_emu::detail {

Launch* g_launch = nullptr;
std::vector<std::unique_ptr<Thread>> g_pool;

namespace {

constexpr std::size_t kStackBytes = 128 * 1024;

// Thrown where a synchronization point is reached by a block the emulator runs without fibers.
struct NoFiber : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void run_body(Thread& t) {
    Launch& L = *g_launch;
    t.in_body = true;
    try {
        L.body(L.context);
    } catch (const ctx::detail::forced_unwind&) {
        throw;  // the fiber is being destroyed: let Boost unwind it
    } catch (const std::exception& e) {
        if (L.fault.empty()) L.fault = "thread " + to_string(t.index) + " threw: " + e.what();
    } catch (...) {
        if (L.fault.empty()) L.fault = "thread " + to_string(t.index) + " threw an unknown exception";
    }
    t.in_body = false;
    t.state = State::done;
    ++L.done;
}

// Stacks for the fibers: kStackBytes usable, a guard page below (an overflow crashes instead of
// corrupting the next stack), and the top moved down by a different amount for every slot, so
// that the saved registers of a block's 256 fibers do not all fall into the same cache set (the
// mappings are page-aligned).
class StaggeredStack {
public:
    explicit StaggeredStack(int slot) : stagger_(static_cast<std::size_t>(slot) * 704 % 65536 / 64 * 64) {}
    ctx::stack_context allocate() {
        const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        mapped_ = (kStackBytes + 65536) / page * page + page;
        void* base = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) throw std::bad_alloc();
        mprotect(base, page, PROT_NONE);  // the guard page
        ctx::stack_context sc;
        sc.size = mapped_ - stagger_;
        sc.sp = static_cast<char*>(base) + mapped_ - stagger_;
        return sc;
    }
    void deallocate(ctx::stack_context& sc) noexcept {
        munmap(static_cast<char*>(sc.sp) + stagger_ - mapped_, mapped_);
    }

private:
    std::size_t stagger_, mapped_ = 0;
};

ctx::fiber make_fiber(Thread* t) {
    return ctx::fiber(std::allocator_arg, StaggeredStack(t->linear),
                      [t](ctx::fiber&& scheduler) {
                          for (;;) {  // one block's thread per turn of the loop
                              t->scheduler = std::move(scheduler);
                              run_body(*t);
                              scheduler = std::move(t->scheduler).resume();
                          }
                          return std::move(scheduler);
                      });
}

// Called on a thread's own fiber: back to the scheduler until it resumes us.
void pause(Thread& t) { t.scheduler = std::move(t.scheduler).resume(); }

void resume(Launch& L, Thread& t) {
    threadIdx = t.index;
    L.current = &t;
    t.state = State::ready;
    t.fiber = std::move(t.fiber).resume();
    L.current = nullptr;
}

std::string describe_deadlock(const Launch& L) {
    std::ostringstream s;
    s << "block " << to_string(blockIdx) << " can go no further: ";
    const int n = L.n_threads;
    if (L.at_barrier > 0)
        s << L.at_barrier << " of " << n << " threads wait at __syncthreads while " << L.done
          << " have returned (every thread of a block must reach each __syncthreads)";
    for (std::size_t w = 0; w < L.warps.size(); ++w) {
        const Warp& warp = L.warps[w];
        if (warp.arrived == 0) continue;
        s << (L.at_barrier > 0 ? "; " : "") << "warp " << w << ": " << warp.arrived << " of "
          << std::popcount(warp.mask) << " lanes named by mask 0x" << std::hex << warp.mask << std::dec
          << " wait in a shuffle; missing lanes:";
        for (int lane = 0; lane < 32; ++lane) {
            const int i = static_cast<int>(w) * 32 + lane;
            if ((warp.mask >> lane & 1u) && i < n && g_pool[static_cast<std::size_t>(i)]->state != State::at_shuffle)
                s << " " << lane << (g_pool[static_cast<std::size_t>(i)]->state == State::done ? " (returned)" : " (at __syncthreads)");
        }
    }
    return s.str();
}

}  // namespace

void run_block_with_fibers(Launch& L) {
    const int n = L.n_threads;
    L.at_barrier = 0;
    L.done = 0;
    std::fill(L.warps.begin(), L.warps.end(), Warp{});
    for (int i = 0; i < n; ++i) {
        Thread& t = *g_pool[static_cast<std::size_t>(i)];
        if (!t.fiber) t.fiber = make_fiber(&t);
        t.state = State::ready;
    }
    while (L.done < n && L.fault.empty()) {
        bool progress = false;
        for (int i = 0; i < n && L.fault.empty(); ++i) {
            Thread& t = *g_pool[static_cast<std::size_t>(i)];
            if (t.state != State::ready) continue;
            resume(L, t);
            progress = true;
        }
        if (!progress && L.fault.empty()) L.fault = describe_deadlock(L);
    }
    if (!L.fault.empty())
        for (int i = 0; i < n; ++i) {  // threads stopped mid-kernel: unwind and drop their stacks
            Thread& t = *g_pool[static_cast<std::size_t>(i)];
            if (t.in_body) {
                t.fiber = ctx::fiber{};
                t.in_body = false;
            }
        }
    for (int i = 0; i < n; ++i) g_pool[static_cast<std::size_t>(i)]->state = State::idle;
}

void run_block_directly(Launch& L) {
    Thread& t = *g_pool[0];  // only its index fields are used
    for (int i = 0; i < L.n_threads && L.fault.empty(); ++i) {
        t.index = g_pool[static_cast<std::size_t>(i)]->index;
        threadIdx = t.index;
        L.current = &t;
        try {
            L.body(L.context);
        } catch (const NoFiber& e) {
            L.fault = std::string("thread ") + to_string(t.index) + " " + e.what();
        } catch (const std::exception& e) {
            L.fault = "thread " + to_string(t.index) + " threw: " + e.what();
        }
        L.current = nullptr;
    }
    t.index = uint3{0, 0, 0};
}

}  // namespace glass_emu::detail

// ---- Inside a kernel: shared memory, lanes, barriers and shuffles ------------------------------------

void* glass_emu::dynamic_shared_memory() {
    if (!g_launch) throw std::logic_error("dynamic shared memory used outside a kernel");
    return g_launch->shared.get();
}

int glass_emu::lane_id() {
    if (!g_launch || !g_launch->current) throw std::logic_error("a warp function called outside a kernel");
    return g_launch->current->lane;
}

// What every synchronization point does first: find the calling thread, and refuse to pause a
// block that runs without fibers.
static Thread& arrive(const char* what) {
    if (!g_launch || !g_launch->current) throw std::logic_error(std::string(what) + " called outside a kernel");
    Launch& L = *g_launch;
    if (L.direct)
        throw NoFiber(std::string("reached ") + what + ", but no thread of the launch's first block did; the "
                      "emulator runs such launches without fibers (make the synchronization uniform)");
    L.synchronized = true;
    return *L.current;
}

void glass_emu::sync_block() {
    Thread& t = arrive("__syncthreads");
    Launch& L = *g_launch;
    t.state = State::at_barrier;
    ++L.at_barrier;
    if (L.done == 0 && L.at_barrier == L.n_threads) {  // the last to arrive releases everyone
        for (int i = 0; i < L.n_threads; ++i) g_pool[static_cast<std::size_t>(i)]->state = State::ready;
        L.at_barrier = 0;
        return;
    }
    pause(t);
}

std::uint64_t glass_emu::exchange_in_warp(unsigned mask, std::uint64_t value, int source) {
    Thread& t = arrive("a warp shuffle");
    Launch& L = *g_launch;
    Warp& w = L.warps[static_cast<std::size_t>(t.warp)];
    const int lanes_here = std::min(32, L.n_threads - t.warp * 32);
    const unsigned existing = lanes_here == 32 ? 0xffffffffu : (1u << lanes_here) - 1u;
    auto stop = [&](const std::string& why) {
        if (L.fault.empty()) L.fault = "thread " + to_string(t.index) + " (warp " + std::to_string(t.warp) +
                                       ", lane " + std::to_string(t.lane) + "): " + why;
        t.state = State::at_shuffle;
        pause(t);  // never resumed: the scheduler ends the launch
        return std::uint64_t{0};
    };
    const auto hex = [mask] {
        char text[16];
        std::snprintf(text, sizeof text, "0x%08x", mask);
        return std::string(text);
    };
    if (!(mask >> t.lane & 1u)) return stop("shuffle mask " + hex() + " leaves out the calling lane");
    if (mask & ~existing)
        return stop("shuffle mask " + hex() + " names lanes this warp does not have (block of " +
                    std::to_string(L.n_threads) + " threads)");
    if (w.arrived > 0 && w.mask != mask) return stop("lanes of one warp pass different shuffle masks");
    w.mask = mask;
    t.offered = value;
    t.source = source;
    t.state = State::at_shuffle;
    if (++w.arrived == std::popcount(mask)) {  // the last lane named by the mask exchanges for all
        for (int lane = 0; lane < 32; ++lane) {
            if (!(mask >> lane & 1u)) continue;
            Thread& u = *g_pool[static_cast<std::size_t>(t.warp * 32 + lane)];
            if (u.source < 0 || u.source >= 32) {
                u.received = u.offered;
            } else if (!(mask >> u.source & 1u)) {
                return stop("lane " + std::to_string(lane) + " reads lane " + std::to_string(u.source) +
                            ", which mask " + hex() + " leaves out (undefined on a GPU)");
            } else {
                u.received = g_pool[static_cast<std::size_t>(t.warp * 32 + u.source)]->offered;
            }
            u.state = State::ready;
        }
        w.arrived = 0;
        return t.received;
    }
    pause(t);
    return t.received;
}
