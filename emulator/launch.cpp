/// \file
/// \brief emulator/launch.cpp — kernel launches: the configuration checked, the grid run, the queue.
/// ```text
/// run_grid runs one launch to the end before it returns: the blocks one after another, the first
/// with fibers (scheduler.cpp), the others without when the first never synchronized. enqueue is
/// the one door to a stream: launches, asynchronous copies and the emulated cuBLAS come through it,
/// and run at once or are recorded into the capture under way (streams.cpp).
/// ```
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "internal.hpp"

using namespace glass_emu::detail;

// What is wrong with a launch configuration, or "" when nothing is.
static std::string check_config(const glass_emu::LaunchConfig& config) {
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

void glass_emu::run_grid(const char* kernel, const LaunchConfig& config, void (*thread_body)(void*), void* context) {
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

cudaError_t glass_emu::enqueue(cudaStream_t stream, const char* what, std::function<cudaError_t()> work) {
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

cudaError_t glass_emu::enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
    return enqueue(stream, what, std::function<cudaError_t()>([w = std::move(work)] {
                       w();
                       return cudaSuccess;
                   }));
}

void glass_emu::enqueue_launch(const char* kernel, const LaunchConfig& config, std::function<void()> work) {
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
