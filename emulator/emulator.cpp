/// \file
/// \brief emulator/emulator.cpp — runs CUDA kernels on the CPU (see emulator.hpp for what and why).
/// ```text
/// Fibers come from Boost.Context: switching stacks portably (and restoring the floating-point
/// control registers) is exactly the kind of small, subtle machine-specific code a well-kept library
/// should own. Each GPU thread slot gets one fiber with its own 128 KiB stack (a guard page below it
/// turns an overflow into a crash, not corruption); the fibers are made once and reused by every
/// block of every launch.
/// ```
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulator.hpp"

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

namespace glass_emu {
namespace ctx = boost::context;

namespace {

// ---- Errors, as the runtime API reports them -------------------------------------------------------
//
// A bad launch configuration or a bad copy is reported once (cudaGetLastError clears it). A fault
// inside a kernel is "sticky" as on a GPU: every later call reports it, until reset_device().
std::mutex g_mutex;             // one launch or API call at a time
cudaError_t g_last_error = cudaSuccess;
cudaError_t g_sticky_error = cudaSuccess;
std::string g_message;          // the detail for the most recent error
cudaError_t g_message_code = cudaSuccess;

cudaError_t report(cudaError_t code, const std::string& message, bool sticky = false) {
    g_last_error = code;
    if (sticky) g_sticky_error = code;
    g_message = "glass CUDA emulator: " + message;
    g_message_code = code;
    return code;
}

// ---- Streams and graph capture ---------------------------------------------------------------------
//
// Work queued on a stream runs at once (the host waits for it), so streams need no queue of their
// own. A capture (only of the per-thread stream; CUDA refuses the legacy one) collects the work
// queued on its stream instead; cudaStreamEndCapture turns the collection into a graph.
using Op = std::function<cudaError_t()>;  // one recorded launch, copy or product

struct Capture {
    cudaStream_t stream = nullptr;  // null: no capture under way
    bool invalidated = false;       // something failed during it: cudaStreamEndCapture will refuse
    std::vector<Op> ops;
};
Capture g_capture;

// For calls that cannot go into a graph (they wait for the device, or allocate or free outside any
// stream). During a capture they fail and spoil it, as in CUDA's default (global) capture mode.
// Caller holds g_mutex.
cudaError_t refuse_during_capture(const std::string& what) {
    if (!g_capture.stream) return cudaSuccess;
    g_capture.invalidated = true;
    return report(cudaErrorStreamCaptureUnsupported,
                  what + " while a stream capture is under way: it cannot be recorded into a graph "
                         "(the capture is now invalid)");
}

std::string to_string(uint3 v) {
    char text[48];
    std::snprintf(text, sizeof text, "(%u,%u,%u)", v.x, v.y, v.z);
    return text;
}
std::string to_string(dim3 v) { return to_string(uint3{v.x, v.y, v.z}); }

// ---- Device memory: host memory, laid out so that overruns are caught -------------------------------
//
// Each cudaMalloc gets its own mapping: the allocation ends within 16 bytes of the mapping's last
// readable page, and the page after it is a guard (no access). A kernel that reads or writes past
// the end of a buffer touches the guard, and the fault handler below names the kernel, block,
// thread and buffer before the process dies. The price: allocations are 16-byte aligned where
// cudaMalloc promises 256 (glass's kernels ask for 16 at most, and check it). New memory is filled
// with 0xff bytes, NaN as floats: a kernel that reads memory nobody wrote sees NaN, as the
// harness's poisoning intends, instead of the zeros a fresh mapping would hand it.
struct Allocation {
    std::size_t bytes;       // as asked
    void* mapping;           // the whole mapping, guard page included
    std::size_t mapped;
};
std::map<std::uintptr_t, Allocation> g_allocations;  // start -> allocation
std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

// The allocation holding [p, p + bytes), or an explanation of why there is none.
bool inside_allocation(const void* p, std::size_t bytes, std::string* why) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    auto it = g_allocations.upper_bound(address);
    if (it == g_allocations.begin()) {
        *why = "is not device memory (no cudaMalloc'ed block holds it)";
        return false;
    }
    --it;
    const std::uintptr_t start = it->first;
    const std::size_t size = it->second.bytes;
    if (address >= start + size) {
        *why = "is not device memory (no cudaMalloc'ed block holds it)";
        return false;
    }
    if (address + bytes > start + size) {
        std::ostringstream s;
        s << "runs " << (address + bytes - start - size) << " bytes past the end of its " << size
          << "-byte allocation (it starts " << (address - start) << " bytes in)";
        *why = s.str();
        return false;
    }
    return true;
}

// ---- The scheduler -------------------------------------------------------------------------------------

enum class State { idle, ready, at_barrier, at_shuffle, done };

struct Thread {
    uint3 index;
    int linear = 0, warp = 0, lane = 0;
    State state = State::idle;
    bool in_body = false;    // paused inside the kernel (its stack holds kernel frames)
    ctx::fiber fiber;        // this thread's stack, paused where it last stopped
    ctx::fiber scheduler;    // the scheduler's continuation while this thread runs
    // The shuffle this lane is waiting in (its warp holds the mask).
    std::uint64_t offered = 0, received = 0;
    int source = 0;
};

struct Warp {
    int arrived = 0;
    unsigned mask = 0;
};

// The launch being run.
struct Launch {
    const char* kernel = "";
    dim3 grid, block;
    std::size_t shared_bytes = 0;
    void (*body)(void*) = nullptr;
    void* context = nullptr;
    int n_threads = 0;                     // per block
    bool direct = false;                   // this block runs without fibers
    bool synchronized = false;             // some thread reached a barrier or a shuffle
    std::unique_ptr<std::byte[]> shared;   // this block's dynamic shared memory
    std::vector<Warp> warps;
    int at_barrier = 0, done = 0;
    Thread* current = nullptr;
    std::string fault;                     // the first problem found; ends the launch
};

Launch* g_launch = nullptr;
std::vector<std::unique_ptr<Thread>> g_pool;  // fiber slots, grown to the largest block seen
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

std::string check_config(const LaunchConfig& config) {
    const dim3 g = config.grid, b = config.block;
    std::ostringstream s;
    const std::uint64_t threads = std::uint64_t{b.x} * b.y * b.z;
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
        s << "grid " << to_string(g) << " or block " << to_string(b) << " has a zero dimension";
    else if (threads > 1024)
        s << "block " << to_string(b) << " has " << threads << " threads; at most 1024";
    else if (b.x > 1024 || b.y > 1024 || b.z > 64)
        s << "block " << to_string(b) << " exceeds the per-dimension limits (1024, 1024, 64)";
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        s << "grid " << to_string(g) << " exceeds the limits (2^31 - 1, 65535, 65535)";
    else if (config.shared_bytes > 48 * 1024)
        s << config.shared_bytes << " bytes of dynamic shared memory; at most 49152 without opting in";
    return s.str();
}

// ---- Memory faults inside kernels -------------------------------------------------------------------
//
// SIGSEGV/SIGBUS while a kernel runs: say which kernel, block and thread, and what the address
// was (past the end of which allocation, or a thread's stack guard), then let the signal kill the
// process as usual. Runs on its own stack, so a fiber's stack overflow can be reported too.
void on_memory_fault(int signal, siginfo_t* info, void*) {
    char text[512];
    int n = 0;
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const Launch* L = g_launch;
    if (L) {
        n = std::snprintf(text, sizeof text,
                          "\nglass CUDA emulator: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): invalid "
                          "memory access at 0x%llx",
                          L->kernel, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z,
                          static_cast<unsigned long long>(address));
        auto it = g_allocations.upper_bound(address);
        if (it != g_allocations.begin()) {
            --it;
            const std::uintptr_t end = it->first + it->second.bytes;
            if (address >= end && address < end + page_size() + 16)
                n += std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n),
                                   ", %llu bytes past the end of a %zu-byte device allocation",
                                   static_cast<unsigned long long>(address - end), it->second.bytes);
        }
        n += std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n), "\n");
        if (n > 0 && write(STDERR_FILENO, text, static_cast<std::size_t>(std::min(n, 511))) < 0) n = 0;
    }
    ::signal(signal, SIG_DFL);  // returning re-runs the access, which now ends the process
}

void install_fault_handler() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    static std::vector<char> alternate_stack(64 * 1024);
    stack_t ss{};
    ss.ss_sp = alternate_stack.data();
    ss.ss_size = alternate_stack.size();
    sigaltstack(&ss, nullptr);
    struct sigaction action {};
    action.sa_sigaction = on_memory_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
}

}  // namespace

// ---- Launches ------------------------------------------------------------------------------------------

void run_grid(const char* kernel, const LaunchConfig& config, void (*thread_body)(void*), void* context) {
    std::lock_guard lock(g_mutex);
    if (g_sticky_error != cudaSuccess) return;  // a faulted device runs nothing more
    Launch L;
    L.kernel = kernel;
    L.grid = config.grid;
    L.block = config.block;
    L.shared_bytes = config.shared_bytes;
    L.body = thread_body;
    L.context = context;
    if (const std::string bad = check_config(config); !bad.empty()) {
        report(cudaErrorInvalidConfiguration, std::string("launch of ") + kernel + ": " + bad);
        return;
    }
    L.n_threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
    L.warps.resize(static_cast<std::size_t>((L.n_threads + 31) / 32));
    while (g_pool.size() < static_cast<std::size_t>(L.n_threads)) g_pool.push_back(std::make_unique<Thread>());
    int i = 0;
    for (unsigned z = 0; z < config.block.z; ++z)
        for (unsigned y = 0; y < config.block.y; ++y)
            for (unsigned x = 0; x < config.block.x; ++x, ++i) {
                Thread& t = *g_pool[static_cast<std::size_t>(i)];
                t.index = uint3{x, y, z};
                t.linear = i;
                t.warp = i / 32;
                t.lane = i % 32;
            }

    g_launch = &L;
    gridDim = config.grid;
    blockDim = config.block;
    bool first = true;
    for (unsigned bz = 0; bz < config.grid.z && L.fault.empty(); ++bz)
        for (unsigned by = 0; by < config.grid.y && L.fault.empty(); ++by)
            for (unsigned bx = 0; bx < config.grid.x && L.fault.empty(); ++bx) {
                blockIdx = uint3{bx, by, bz};
                if (L.shared_bytes > 0) {  // fresh per block, filled with 0xff bytes (NaN as floats)
                    L.shared.reset(new std::byte[L.shared_bytes]);
                    std::memset(L.shared.get(), 0xff, L.shared_bytes);
                }
                L.direct = !first && !L.synchronized;
                if (L.direct)
                    run_block_directly(L);
                else
                    run_block_with_fibers(L);
                first = false;
            }
    g_launch = nullptr;
    if (!L.fault.empty())
        report(cudaErrorLaunchFailure, std::string("kernel ") + kernel + " <<<" + to_string(config.grid) +
                                           ", " + to_string(config.block) + ">>>, block " +
                                           to_string(blockIdx) + ": " + L.fault,
               /*sticky=*/true);
    threadIdx = blockIdx = uint3{};
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<cudaError_t()> work) {
    {
        std::lock_guard lock(g_mutex);
        if (stream != cudaStreamLegacy && stream != cudaStreamPerThread)
            return report(cudaErrorInvalidResourceHandle, std::string(what) + ": not a stream of this emulator");
        if (g_capture.stream == stream) {
            if (!g_capture.invalidated) g_capture.ops.push_back(std::move(work));
            return cudaSuccess;
        }
        if (g_capture.stream) {  // the legacy stream waits for every other stream: not while one captures
            g_capture.invalidated = true;
            return report(cudaErrorStreamCaptureImplicit,
                          std::string(what) + " queued on the legacy default stream while the per-thread "
                                              "stream is being captured (the capture is now invalid)");
        }
    }
    return work();
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
    return enqueue(stream, what, std::function<cudaError_t()>([w = std::move(work)] {
                       w();
                       return cudaSuccess;
                   }));
}

void enqueue_launch(const char* kernel, const LaunchConfig& config, std::function<void()> work) {
    {
        std::lock_guard lock(g_mutex);
        if (g_capture.stream && g_capture.stream == config.stream) {
            // Recorded, not run: check the configuration now, where cudaLaunchKernel would.
            if (const std::string bad = check_config(config); !bad.empty()) {
                g_capture.invalidated = true;
                report(cudaErrorInvalidConfiguration, std::string("launch of ") + kernel + ": " + bad);
                return;
            }
        }
    }
    enqueue(config.stream, kernel, std::move(work));
}

void* dynamic_shared_memory() {
    if (!g_launch) throw std::logic_error("dynamic shared memory used outside a kernel");
    return g_launch->shared.get();
}

int lane_id() {
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

void sync_block() {
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

std::uint64_t exchange_in_warp(unsigned mask, std::uint64_t value, int source) {
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

// Clears a sticky fault (the emulator's cudaDeviceReset): for tests of the emulator itself.
void reset_device() {
    std::lock_guard lock(g_mutex);
    g_sticky_error = g_last_error = cudaSuccess;
    g_capture = Capture{};
}

}  // namespace glass_emu

// ---- The runtime API ---------------------------------------------------------------------------------

using glass_emu::g_last_error;
using glass_emu::g_sticky_error;

const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorIllegalState: return "cudaErrorIllegalState";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
        case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    }
    return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
    if (error == glass_emu::g_message_code && error != cudaSuccess) return glass_emu::g_message.c_str();
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        default: return "error (glass CUDA emulator)";
    }
}

cudaError_t cudaGetLastError() {
    std::lock_guard lock(glass_emu::g_mutex);
    const cudaError_t e = g_sticky_error != cudaSuccess ? g_sticky_error : g_last_error;
    g_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError() {
    std::lock_guard lock(glass_emu::g_mutex);
    return g_sticky_error != cudaSuccess ? g_sticky_error : g_last_error;
}

static bool no_device_wanted() {
    const char* v = std::getenv("GLASS_EMULATOR_NO_DEVICE");
    return v && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

cudaError_t cudaGetDeviceCount(int* count) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!count) return glass_emu::report(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
    if (no_device_wanted()) {
        *count = 0;
        return glass_emu::report(cudaErrorNoDevice, "no device (GLASS_EMULATOR_NO_DEVICE is set)");
    }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!prop) return glass_emu::report(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
    if (device != 0) return glass_emu::report(cudaErrorInvalidDevice, "device " + std::to_string(device) + " does not exist");
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "glass CUDA emulator (CPU, not a GPU)");
    prop->totalGlobalMem = std::size_t{1} << 34;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->multiProcessorCount = 1;
    prop->major = 9;
    prop->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    std::lock_guard lock(glass_emu::g_mutex);
    if (const cudaError_t e = glass_emu::refuse_during_capture("cudaDeviceSynchronize")) return e;
    return g_sticky_error;
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!ptr) return glass_emu::report(cudaErrorInvalidValue, "cudaMalloc: null pointer");
    if (const cudaError_t e = glass_emu::refuse_during_capture("cudaMalloc")) return e;
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
#if defined(__SANITIZE_ADDRESS__)
    // Under AddressSanitizer its allocator does better than guard pages: poisoned zones on both
    // sides of the exact size, so underruns and overruns of any length are reported.
    void* q = nullptr;
    if (posix_memalign(&q, 256, bytes) != 0)
        return glass_emu::report(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of memory");
    std::memset(q, 0xff, bytes);
    glass_emu::g_allocations[reinterpret_cast<std::uintptr_t>(q)] = {bytes, nullptr, 0};
    *ptr = q;
    return cudaSuccess;
#endif
    glass_emu::install_fault_handler();
    const std::size_t page = glass_emu::page_size(), rounded = (bytes + 15) / 16 * 16;
    const std::size_t readable = (rounded + page - 1) / page * page, mapped = readable + page;
    void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED)
        return glass_emu::report(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of memory");
    mprotect(static_cast<char*>(mapping) + readable, page, PROT_NONE);  // the guard page
    char* p = static_cast<char*>(mapping) + readable - rounded;
    std::memset(p, 0xff, rounded);
    glass_emu::g_allocations[reinterpret_cast<std::uintptr_t>(p)] = {bytes, mapping, mapped};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!ptr) return cudaSuccess;
    if (const cudaError_t e = glass_emu::refuse_during_capture("cudaFree")) return e;
    const auto it = glass_emu::g_allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == glass_emu::g_allocations.end())
        return glass_emu::report(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
    if (it->second.mapping)
        munmap(it->second.mapping, it->second.mapped);
    else
        std::free(ptr);  // the AddressSanitizer build's posix_memalign
    glass_emu::g_allocations.erase(it);
    return g_sticky_error;
}

// Checks a copy against the allocations it touches, then (unless check_only) makes it.
static cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, const char* what,
                        bool check_only = false) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    if (bytes == 0) return cudaSuccess;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return glass_emu::report(cudaErrorInvalidMemcpyDirection, std::string(what) + ": bad direction");
    std::string why;
    const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dst_device && !glass_emu::inside_allocation(dst, bytes, &why))
        return glass_emu::report(cudaErrorInvalidValue, std::string(what) + " of " + std::to_string(bytes) + " bytes: the destination " + why);
    if (src_device && !glass_emu::inside_allocation(src, bytes, &why))
        return glass_emu::report(cudaErrorInvalidValue, std::string(what) + " of " + std::to_string(bytes) + " bytes: the source " + why);
    if (!check_only) std::memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    {
        std::lock_guard lock(glass_emu::g_mutex);
        if (const cudaError_t e = glass_emu::refuse_during_capture("cudaMemcpy")) return e;
    }
    return copy(dst, src, bytes, kind, "cudaMemcpy");
}

cudaError_t glass_emu::memcpy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                    cudaStream_t stream) {
    if (const cudaError_t e = copy(dst, src, bytes, kind, "cudaMemcpyAsync", /*check_only=*/true)) return e;
    return enqueue(stream, "cudaMemcpyAsync", std::function<cudaError_t()>([=] {
                       return copy(dst, src, bytes, kind, "cudaMemcpyAsync");
                   }));
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (const cudaError_t e = glass_emu::refuse_during_capture("cudaMemset")) return e;
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    std::string why;
    if (bytes > 0 && !glass_emu::inside_allocation(ptr, bytes, &why))
        return glass_emu::report(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(bytes) + " bytes: the destination " + why);
    std::memset(ptr, value, bytes);
    return cudaSuccess;
}

struct CUevent_st {
    std::chrono::steady_clock::time_point when;
    bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    if (!event) return cudaErrorInvalidValue;
    *event = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}
cudaError_t glass_emu::event_record(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return cudaErrorInvalidResourceHandle;
    return enqueue(stream, "cudaEventRecord", [event] {
        event->when = std::chrono::steady_clock::now();  // work queued before it has already run
        event->recorded = true;
    });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (const cudaError_t e = glass_emu::refuse_during_capture("cudaEventSynchronize")) return e;
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end || !start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return cudaSuccess;
}

// ---- Streams, capture and graphs ---------------------------------------------------------------------

struct CUgraph_st {
    std::vector<glass_emu::Op> ops;
};
struct CUgraphExec_st {
    std::vector<glass_emu::Op> ops;
};

cudaError_t glass_emu::stream_synchronize(cudaStream_t stream) {
    std::lock_guard lock(g_mutex);
    if (stream != cudaStreamLegacy && stream != cudaStreamPerThread)
        return report(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a stream of this emulator");
    if (const cudaError_t e = refuse_during_capture("cudaStreamSynchronize")) return e;
    return g_sticky_error;
}

cudaError_t glass_emu::begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    std::lock_guard lock(g_mutex);
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    if (mode != cudaStreamCaptureModeGlobal)
        return report(cudaErrorInvalidValue, "cudaStreamBeginCapture: the emulator models the global capture mode only");
    if (stream == cudaStreamLegacy)
        return report(cudaErrorStreamCaptureUnsupported,
                      "cudaStreamBeginCapture: the legacy default stream cannot be captured (build with "
                      "--default-stream per-thread, or capture cudaStreamPerThread)");
    if (stream != cudaStreamPerThread)
        return report(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: not a stream of this emulator");
    if (g_capture.stream) return report(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
    g_capture = Capture{stream, false, {}};
    return cudaSuccess;
}

cudaError_t glass_emu::end_capture(cudaStream_t stream, cudaGraph_t* graph) {
    std::lock_guard lock(g_mutex);
    if (!graph) return report(cudaErrorInvalidValue, "cudaStreamEndCapture: null graph");
    *graph = nullptr;
    if (!g_capture.stream) return report(cudaErrorIllegalState, "cudaStreamEndCapture: no capture is under way");
    if (stream != g_capture.stream)
        return report(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture: called on another stream than the capture's");
    Capture done = std::move(g_capture);
    g_capture = Capture{};
    if (done.invalidated)
        return report(cudaErrorStreamCaptureInvalidated,
                      "cudaStreamEndCapture: the capture was invalidated by an earlier failed call (" + g_message + ")");
    *graph = new CUgraph_st{std::move(done.ops)};
    return cudaSuccess;
}

cudaError_t glass_emu::is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    std::lock_guard lock(g_mutex);
    if (!status) return report(cudaErrorInvalidValue, "cudaStreamIsCapturing: null status");
    *status = cudaStreamCaptureStatusNone;
    if (stream == cudaStreamLegacy && g_capture.stream)
        return report(cudaErrorStreamCaptureImplicit, "cudaStreamIsCapturing: the legacy stream, while another captures");
    if (g_capture.stream == stream)
        *status = g_capture.invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!exec || !graph) return glass_emu::report(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph or exec");
    *exec = new CUgraphExec_st{graph->ops};
    return cudaSuccess;
}

cudaError_t glass_emu::graph_launch(cudaGraphExec_t exec, cudaStream_t stream) {
    std::vector<Op>* ops = nullptr;
    {
        std::lock_guard lock(g_mutex);
        if (!exec) return report(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: null graph");
        if (g_capture.stream) {  // a graph inside a capture: legal in CUDA, not modelled here
            g_capture.invalidated = true;
            return report(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch during a capture (not modelled by the emulator)");
        }
        if (stream != cudaStreamLegacy && stream != cudaStreamPerThread)
            return report(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a stream of this emulator");
        if (g_sticky_error != cudaSuccess) return g_sticky_error;
        ops = &exec->ops;
    }
    // In order, as captured: one stream, so every node depends on the one before.
    for (const Op& op : *ops) op();
    std::lock_guard lock(g_mutex);
    return g_sticky_error;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count) {
    std::lock_guard lock(glass_emu::g_mutex);
    if (!graph || !count || nodes)
        return glass_emu::report(cudaErrorInvalidValue, "cudaGraphGetNodes: the emulator counts nodes only (nodes must be null)");
    *count = graph->ops.size();
    return cudaSuccess;
}
