/// \file
/// \brief emulator/memory.cpp — device memory: guarded allocations, checked copies, named faults.
/// ```text
/// Each cudaMalloc gets its own mapping: the allocation ends within 16 bytes of the mapping's last
/// readable page, and the page after it is a guard (no access). A kernel that reads or writes past
/// the end of a buffer touches the guard, and the fault handler below names the kernel, block,
/// thread and buffer before the process dies. The price: allocations are 16-byte aligned where
/// cudaMalloc promises 256 (glass's kernels ask for 16 at most, and check it). New memory is filled
/// with 0xff bytes, NaN as floats: a kernel that reads memory nobody wrote sees NaN, as the
/// harness's poisoning intends, instead of the zeros a fresh mapping would hand it.
/// ```
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "internal.hpp"

using namespace glass_emu::detail;

namespace glass_emu::detail {

std::map<std::uintptr_t, Allocation> g_allocations;
std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

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

// ---- Memory faults inside kernels -------------------------------------------------------------------
//
// SIGSEGV/SIGBUS while a kernel runs: say which kernel, block and thread, and what the address
// was (past the end of which allocation, or a thread's stack guard), then let the signal kill the
// process as usual. Runs on its own stack, so a fiber's stack overflow can be reported too.
static void on_memory_fault(int signal, siginfo_t* info, void*) {
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

}  // namespace glass_emu::detail

// ---- The runtime API: allocations, copies, memset --------------------------------------------------

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
    std::lock_guard lock(g_mutex);
    if (!ptr) return report(cudaErrorInvalidValue, "cudaMalloc: null pointer");
    if (const cudaError_t e = refuse_during_capture("cudaMalloc")) return e;
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
#if defined(__SANITIZE_ADDRESS__)
    // Under AddressSanitizer its allocator does better than guard pages: poisoned zones on both
    // sides of the exact size, so underruns and overruns of any length are reported.
    void* q = nullptr;
    if (posix_memalign(&q, 256, bytes) != 0)
        return report(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of memory");
    std::memset(q, 0xff, bytes);
    g_allocations[reinterpret_cast<std::uintptr_t>(q)] = {bytes, nullptr, 0};
    *ptr = q;
    return cudaSuccess;
#endif
    install_fault_handler();
    const std::size_t page = page_size(), rounded = (bytes + 15) / 16 * 16;
    const std::size_t readable = (rounded + page - 1) / page * page, mapped = readable + page;
    void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED)
        return report(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: out of memory");
    mprotect(static_cast<char*>(mapping) + readable, page, PROT_NONE);  // the guard page
    char* p = static_cast<char*>(mapping) + readable - rounded;
    std::memset(p, 0xff, rounded);
    g_allocations[reinterpret_cast<std::uintptr_t>(p)] = {bytes, mapping, mapped};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    std::lock_guard lock(g_mutex);
    if (!ptr) return cudaSuccess;
    if (const cudaError_t e = refuse_during_capture("cudaFree")) return e;
    const auto it = g_allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == g_allocations.end())
        return report(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
    if (it->second.mapping)
        munmap(it->second.mapping, it->second.mapped);
    else
        std::free(ptr);  // the AddressSanitizer build's posix_memalign
    g_allocations.erase(it);
    return g_sticky_error;
}

// Checks a copy against the allocations it touches, then (unless check_only) makes it.
static cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, const char* what,
                        bool check_only = false) {
    std::lock_guard lock(g_mutex);
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    if (bytes == 0) return cudaSuccess;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return report(cudaErrorInvalidMemcpyDirection, std::string(what) + ": bad direction");
    std::string why;
    const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dst_device && !inside_allocation(dst, bytes, &why))
        return report(cudaErrorInvalidValue, std::string(what) + " of " + std::to_string(bytes) + " bytes: the destination " + why);
    if (src_device && !inside_allocation(src, bytes, &why))
        return report(cudaErrorInvalidValue, std::string(what) + " of " + std::to_string(bytes) + " bytes: the source " + why);
    if (!check_only) std::memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    {
        std::lock_guard lock(g_mutex);
        if (const cudaError_t e = refuse_during_capture("cudaMemcpy")) return e;
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
    std::lock_guard lock(g_mutex);
    if (const cudaError_t e = refuse_during_capture("cudaMemset")) return e;
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
    std::string why;
    if (bytes > 0 && !inside_allocation(ptr, bytes, &why))
        return report(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(bytes) + " bytes: the destination " + why);
    std::memset(ptr, value, bytes);
    return cudaSuccess;
}
