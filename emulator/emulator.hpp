/// \file
/// \brief emulator/emulator.hpp — the CUDA execution model on the CPU, for readers without a GPU.
/// ```text
/// The .cu files in cuda/ are compiled twice: by nvcc for a real GPU (libglass_cuda.so), and by g++
/// against this header for the CPU (libglass_cuda_emulated.so). Before g++ sees a .cu file,
/// translate.cmake rewrites its two pieces of CUDA-only syntax:
///     kernel<<<grid, block, shared_bytes>>>(args...)  ->  glass_emu::launch("kernel", {grid, block,
///                                                          shared_bytes}, <calls kernel>, args...)
///     extern __shared__ float q[];                    ->  float* q = glass_emu::dynamic_shared<float>();
/// and adds #line directives, so compiler errors, gdb breakpoints and stack traces name the .cu file
/// and line. Everything else — __global__, threadIdx, __syncthreads, __shfl_down_sync, __half — is
/// defined below as ordinary C++.
///
/// How a launch runs (launch.cpp, scheduler.cpp). One block at a time, one CPU thread. Each GPU
/// thread of the block is a fiber (Boost.Context: a function with its own stack that can pause
/// and resume). The scheduler resumes every runnable fiber in turn, thread (0,0,0) first; a fiber
/// runs until it returns or reaches a synchronization point:
///   __syncthreads()       waits until every thread of the block has arrived;
///   __shfl_*_sync(mask)   waits until every lane named in `mask` has arrived, then each lane
///                         receives its source lane's value (a warp is 32 consecutive threads).
/// So a kernel sees the same values it would see on a GPU wherever its result is defined, and the
/// emulator stops with a launch error (cudaErrorLaunchFailure, the message naming kernel, block and
/// thread) where a GPU would hang or give undefined results: a __syncthreads that some threads
/// never reach (because they returned early), a shuffle whose mask names a lane that has returned
/// or does not exist, two lanes passing different masks. Launch configurations are checked against
/// the limits of an H200 (1,024 threads per block, 48 KiB dynamic shared memory, grid y/z <= 65,535).
/// A block whose threads never synchronize needs no fibers: once the first block of a launch has run
/// without any synchronization, the others run thread after thread as plain calls (fast).
///
/// Streams and graphs: work queued on a stream runs at once (the host waits for it). Between
/// cudaStreamBeginCapture and cudaStreamEndCapture on the per-thread default stream, launches,
/// asynchronous copies and (emulated) cuBLAS products are recorded instead, with the arguments they
/// were queued with, and cudaGraphLaunch runs the recording. Calls CUDA refuses during a capture
/// (synchronous copies, allocation, any wait, work on the legacy stream) are refused here too, and
/// spoil the capture, so a graph that would fail on a GPU fails here.
///
/// Races: a fiber runs as far as it can before the next one starts, which is an unfriendly
/// schedule for a kernel that forgot a barrier (thread 0 reads a shared tile nobody else has
/// written yet, or overwrites one the others have not read): deleting either __syncthreads of
/// matmul_tiled_kernel makes the harness fail. That is a strong hint, not a proof; compute-sanitizer's
/// racecheck on a GPU is the proof.
/// Memory: device memory is host memory, one mapping per cudaMalloc, the buffer's end against a
/// guard page; a kernel that reads or writes past the end of a buffer is stopped there, and the
/// message names kernel, block, thread and buffer. Fresh allocations hold NaN (0xff bytes), so
/// reading memory nobody wrote shows. Copies are checked against the allocation they touch.
/// Built with -DGLASS_ASAN=ON, AddressSanitizer watches every access instead: before or after a
/// device buffer, and outside a __shared__ array, at any offset.
/// What it cannot show: speed (it is a CPU), a warp's real lockstep timing, and the exact rounding
/// of CUDA's expf/sinf/cosf (g++'s libm is used; the harness's 1e-5 tolerance covers both).
/// Without GLASS_ASAN it also misses accesses *before* the start of a buffer, and within its last
/// 16 bytes of padding.
/// ```
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "glass/half.hpp"  // the fp16/bf16 <-> fp32 conversions of the CPU path

#define GLASS_CUDA_EMULATOR 1

// ---- CUDA's function and variable qualifiers: on the CPU everything is host code ----------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// Block-wide shared memory: one object for all threads of a block. Blocks run one at a time, so a
// static local is exactly that (its contents carry over between blocks; a GPU's start undefined).
#define __shared__ static

// ---- Vector types and the built-in index variables -----------------------------------------------
struct uint3 {
    unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Set by the scheduler before it resumes a thread (they are ordinary globals: launches run one at
// a time, and every synchronization point is a call the compiler cannot see through).
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
constexpr int warpSize = 32;

// ---- Device functions that CUDA provides ---------------------------------------------------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// A product rounded on its own: nvcc never fuses it into an FMA with a later addition (kquants.cu
// relies on that). g++ in ISO mode (-std=c++20) never fuses either (-ffp-contract=off).
inline float __fmul_rn(float a, float b) { return a * b; }
// A GPU's atomics; the emulator runs one thread at a time, so a plain update is atomic.
inline int atomicMin(int* address, int value) {
    const int old = *address;
    if (value < old) *address = value;
    return old;
}
inline int atomicAdd(int* address, int value) {
    const int old = *address;
    *address = old + value;
    return old;
}
inline float atomicAdd(float* address, float value) {
    const float old = *address;
    *address = old + value;
    return old;
}

// ---- fp16 / bf16 (cuda_fp16.h, cuda_bf16.h): storage types, converted with round-to-nearest-even
struct __half {
    std::uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};
struct __nv_bfloat16 {
    std::uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline float __half2float(__half h) { return glass::fp16_to_fp32(h.bits); }
inline __half __float2half_rn(float f) { return {glass::fp32_to_fp16(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return glass::bf16_to_fp32(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {glass::fp32_to_bf16(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }

// ---- The runtime API (cuda_runtime.h): the subset glass calls -------------------------------------
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureImplicit = 906,
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using cudaGraph_t = struct CUgraph_st*;
using cudaGraphExec_t = struct CUgraphExec_st*;
using cudaGraphNode_t = struct CUgraphNode_st*;
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};

// Streams. The emulator has CUDA's two built-in ones (glass creates no others): the legacy default
// stream, which cannot be captured into a graph, and the calling thread's own default stream,
// which can. Stream 0 means one of them, chosen per source file as nvcc does: the per-thread one
// when the file is compiled with --default-stream per-thread (CUDA_API_PER_THREAD_DEFAULT_STREAM),
// else the legacy one. Work on either runs at once, unless a capture is under way (below).
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define GLASS_EMU_STREAM_ZERO cudaStreamPerThread
#else
#define GLASS_EMU_STREAM_ZERO cudaStreamLegacy
#endif
struct cudaDeviceProp {
    char name[256];
    std::size_t totalGlobalMem;
    std::size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int warpSize;
    int multiProcessorCount;
    int major, minor;
};

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);  // for emulator-found faults: what and where
cudaError_t cudaGetLastError();                      // and clears it
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int* count);  // 1 (0 and cudaErrorNoDevice if GLASS_EMULATOR_NO_DEVICE=1)
cudaError_t cudaSetDevice(int device);       // 0, the one device (else cudaErrorInvalidDevice)
cudaError_t cudaGetDevice(int* device);      // 0
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceSynchronize();  // kernels run at launch, so there is nothing to wait for
cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// CUDA graphs by stream capture. Between cudaStreamBeginCapture and cudaStreamEndCapture, launches
// and asynchronous copies queued on the capturing stream are recorded instead of run, their
// arguments frozen as they were when queued; cudaGraphLaunch runs the recording. As on a GPU, a
// call that would wait for or bypass the stream during a capture (cudaMemcpy, cudaMemset,
// cudaMalloc, cudaFree, the synchronizations, work on the legacy stream) fails and invalidates the
// capture, so cudaStreamEndCapture then fails too.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count);  // nodes must be null

// The calls that take a stream, with stream 0 resolved in the caller's file (see above).
namespace glass_emu {
cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t event_record(cudaEvent_t event, cudaStream_t stream);
cudaError_t stream_synchronize(cudaStream_t stream);
cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t is_capturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream);
inline cudaStream_t resolve(cudaStream_t stream, cudaStream_t stream_zero) { return stream ? stream : stream_zero; }
}  // namespace glass_emu
static inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                                          cudaStream_t stream = nullptr) {
    return glass_emu::memcpy_async(dst, src, bytes, kind, glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO));
}
static inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr) {
    return glass_emu::event_record(event, glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO));
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    return glass_emu::stream_synchronize(glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO));
}
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    return glass_emu::begin_capture(glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO), mode);
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    return glass_emu::end_capture(glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO), graph);
}
static inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    return glass_emu::is_capturing(glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO), status);
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    return glass_emu::graph_launch(exec, glass_emu::resolve(stream, GLASS_EMU_STREAM_ZERO));
}

// ---- Launches, shared memory, barriers and shuffles ----------------------------------------------
namespace glass_emu {

struct LaunchConfig {
    dim3 grid, block;
    std::size_t shared_bytes = 0;  // dynamic shared memory (extern __shared__)
    cudaStream_t stream = nullptr;
    LaunchConfig(dim3 g, dim3 b, std::size_t shared = 0, cudaStream_t s = nullptr)
        : grid(g), block(b), shared_bytes(shared), stream(s) {}
    // translate.cmake appends .on(GLASS_EMU_STREAM_ZERO): stream 0 as the launching file means it.
    LaunchConfig& on(cudaStream_t stream_zero) {
        stream = resolve(stream, stream_zero);
        return *this;
    }
};

// Runs thread_body(context) once for every thread of the grid, with threadIdx/blockIdx set. A bad
// configuration or a fault found while running becomes cudaGetLastError()'s answer, as on a GPU.
void run_grid(const char* kernel, const LaunchConfig& config, void (*thread_body)(void*), void* context);

// Queues `work` on `stream`: runs it now, or records it into the capture under way there. `what`
// names it in errors. Launches, asynchronous copies and the emulated cuBLAS all come through here.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<cudaError_t()> work);  // work's own error
// As enqueue, for a kernel launch: during a capture its configuration is checked when recorded.
void enqueue_launch(const char* kernel, const LaunchConfig& config, std::function<void()> work);

// kernel<<<config>>>(args...) after translation: the arguments are evaluated once, on the host, and
// copied into the launch; every thread calls the kernel with its own copies (kernel parameters are
// passed by value). A launch recorded into a graph keeps the values it was queued with.
template <typename Kernel, typename... Args>
void launch(const char* name, const LaunchConfig& config, Kernel kernel, Args... args) {
    enqueue_launch(name, config, [name, config, kernel, args...] {
        auto call = [&] { kernel(args...); };
        run_grid(name, config, [](void* c) { (*static_cast<decltype(call)*>(c))(); }, &call);
    });
}

// The block's dynamic shared memory (config.shared_bytes, a fresh allocation per block).
void* dynamic_shared_memory();
template <typename T>
T* dynamic_shared() {
    return static_cast<T*>(dynamic_shared_memory());
}

void sync_block();  // __syncthreads
// A warp shuffle: this lane offers `value`, and receives the value offered by lane `source`
// (or its own when `source` is outside [0, 32): the CUDA rule for shifts past the warp's edge).
std::uint64_t exchange_in_warp(unsigned mask, std::uint64_t value, int source);
int lane_id();

// Clears a sticky kernel fault, as cudaDeviceReset would (for tests of the emulator itself).
void reset_device();

template <typename T>
std::uint64_t to_bits(T v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move 4- or 8-byte values");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}
template <typename T>
T from_bits(std::uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}

}  // namespace glass_emu

inline void __syncthreads() { glass_emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { glass_emu::exchange_in_warp(mask, 0, -1); }

// The four shuffles, width 32 (a whole warp) or a power of two that splits it into segments.
template <typename T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
    const int lane = glass_emu::lane_id(), base = lane - lane % width;
    return glass_emu::from_bits<T>(glass_emu::exchange_in_warp(mask, glass_emu::to_bits(value),
                                                                base + ((source_lane % width) + width) % width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = glass_emu::lane_id();
    const int source = lane % width + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
    return glass_emu::from_bits<T>(glass_emu::exchange_in_warp(mask, glass_emu::to_bits(value), source));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = glass_emu::lane_id();
    const int source = lane % width >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
    return glass_emu::from_bits<T>(glass_emu::exchange_in_warp(mask, glass_emu::to_bits(value), source));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    const int lane = glass_emu::lane_id(), other = lane ^ lane_mask;
    const int source = other / width == lane / width ? other : lane;
    return glass_emu::from_bits<T>(glass_emu::exchange_in_warp(mask, glass_emu::to_bits(value), source));
}
