/// \file
/// \brief emulator/internal.hpp — the emulated device's state, shared by the emulator's .cpp files.
/// ```text
/// Kernels and glass's host code never include this: they see emulator.hpp (through the stand-in
/// CUDA headers). The state below is the device: the errors it reports, the stream capture under
/// way, its allocations, and the launch being run. g_mutex guards all of it: each runtime API call
/// holds it, and so does a launch while its kernel runs (one launch or API call at a time).
///   runtime.cpp    errors and the runtime API's error and device calls
///   streams.cpp    streams, events, stream capture and graphs
///   memory.cpp     device memory, copies, and memory faults inside kernels
///   scheduler.cpp  GPU threads as fibers: running a block, barriers and shuffles
///   launch.cpp     launches: the configuration checked, the grid run block by block, the queue
/// ```
#pragma once

#include <boost/context/fiber.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulator.hpp"

namespace glass_emu::detail {
namespace ctx = boost::context;

// ---- Errors, as the runtime API reports them (runtime.cpp) -------------------------------------------
//
// A bad launch configuration or a bad copy is reported once (cudaGetLastError clears it). A fault
// inside a kernel is "sticky" as on a GPU: every later call reports it, until reset_device().
extern std::mutex g_mutex;             // one launch or API call at a time
extern cudaError_t g_last_error;
extern cudaError_t g_sticky_error;
extern std::string g_message;          // the detail for the most recent error
extern cudaError_t g_message_code;

// Records an error for cudaGetLastError (and, when sticky, for every later call); returns `code`.
cudaError_t report(cudaError_t code, const std::string& message, bool sticky = false);

std::string to_string(uint3 v);  // "(x,y,z)", for messages
std::string to_string(dim3 v);

// ---- Streams and graph capture (streams.cpp) ---------------------------------------------------------
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
extern Capture g_capture;

// For calls that cannot go into a graph (they wait for the device, or allocate or free outside any
// stream). During a capture they fail and spoil it, as in CUDA's default (global) capture mode.
// Caller holds g_mutex.
cudaError_t refuse_during_capture(const std::string& what);

// ---- Device memory (memory.cpp) ----------------------------------------------------------------------
struct Allocation {
    std::size_t bytes;       // as asked
    void* mapping;           // the whole mapping, guard page included
    std::size_t mapped;
};
extern std::map<std::uintptr_t, Allocation> g_allocations;  // start -> allocation
std::size_t page_size();

// The allocation holding [p, p + bytes), or an explanation of why there is none.
bool inside_allocation(const void* p, std::size_t bytes, std::string* why);

// Names the kernel, block and thread when a kernel touches memory it must not (once per process).
void install_fault_handler();

// ---- The scheduler (scheduler.cpp) -------------------------------------------------------------------
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

extern Launch* g_launch;                          // null between launches
extern std::vector<std::unique_ptr<Thread>> g_pool;  // fiber slots, grown to the largest block seen

// Runs the block blockIdx of launch L: each thread a fiber, resumed in turn until all return (or
// a fault, a barrier nobody can pass, stops the block).
void run_block_with_fibers(Launch& L);
// The same for a launch whose first block never synchronized: each thread one plain call.
void run_block_directly(Launch& L);

}  // namespace glass_emu::detail
