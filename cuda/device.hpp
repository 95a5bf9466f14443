/// \file
/// \brief cuda/device.hpp — the GPU itself: whether there is one, its memory, copies to and from it,
/// ints a kernel reads when it runs (IntArg), and work recorded once and replayed (DeviceGraph).
/// Plain C++ (no CUDA types), defined in device.cu; glass_cuda.hpp includes it.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace glass::cuda {

// ---- The device --------------------------------------------------------------------------------

// True when a usable CUDA device is present. Any failure of the query (no driver, a driver too old
// for this runtime, no GPU) counts as "no device"; `why` then says what the runtime reported.
bool device_present(std::string* why = nullptr);
std::string device_name();  // "NVIDIA H200", ...
int device_count();                      // the CUDA devices this process sees (0 where there is none)
int current_device();                    // the calling thread's device (use_device; 0 at first)
// Makes device `index` (in [0, device_count())) the calling thread's: its later allocations and
// launches go there (cudaSetDevice is per host thread).
void use_device(int index);
// True in libglass_cuda_emulated (the same kernels run by the CPU emulator, emulator/), false
// in libglass_cuda: lets one compiled test program know which of the two it was linked to.
bool runs_on_emulator();
void synchronize(const char* what);  // waits for all queued work; names `what` on failure
// Marks the region a profiler started with "profile from start: off" looks at (Nsight Compute's
// `ncu --profile-from-start off`; scripts/gpu-check times one decode step's kernels this way).
void profiler_start();
void profiler_stop();

// Device memory owned by one object (cudaMalloc / cudaFree). Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    float* f32() const { return static_cast<float*>(data_); }
    int* i32() const { return static_cast<int*>(data_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

void upload(void* d_dst, const void* host_src, std::size_t bytes);
void download(void* host_dst, const void* d_src, std::size_t bytes);
void copy_on_device(void* d_dst, const void* d_src, std::size_t bytes);
// NaN-fill n floats: an output the kernel forgets to write then fails every comparison.
void poison(float* d, std::size_t n);

// Convenience for tests and setup: a device copy of host floats / ints.
DeviceBuffer to_device(std::span<const float> host);
DeviceBuffer to_device(std::span<const int> host);
std::vector<float> to_host(const float* d, std::size_t n);

// Device-to-device copy bandwidth (bytes read + bytes written per second), measured with CUDA
// events over `repeats` copies of `bytes` bytes: the ceiling memory-bound kernels are judged by.
double measure_copy_bandwidth(std::size_t bytes, int repeats);

// ---- Streams, graphs, and arguments read when a kernel runs ------------------------------------
//
// All of glass's device work goes to the calling thread's default stream: cuda/ is compiled with
// nvcc's --default-stream per-thread, and cuBLAS is pointed at the same stream. Unlike the legacy
// default stream, that one can be captured into a CUDA graph.

// An int that a kernel reads when it runs rather than when it is queued: `value`, or, when
// `device` is set, the int stored at that device address. A graph replays every launch with the
// arguments it was captured with, so the decode graph (CudaOptions::graph) passes the position
// this way and the host rewrites that int before each replay. A plain int converts implicitly.
struct IntArg {
    int value = 0;
    const int* device = nullptr;
    IntArg(int v) : value(v) {}  // NOLINT(google-explicit-constructor): rope(..., start_pos, ...)
    static IntArg at(const int* d_value) {
        IntArg a(0);
        a.device = d_value;
        return a;
    }
    bool on_device() const { return device != nullptr; }
};

// A CUDA graph: device work recorded once, then replayed by one call. Launching ~200 small kernels
// one by one costs a few microseconds of CPU and GPU time each; a replay queues them all at once.
// capture() runs `enqueue_work` with the stream in capture mode (launches and asynchronous copies
// are recorded, not run; anything that would wait for the device fails, naming the call), then
// builds the executable graph. Move-only.
class DeviceGraph {
public:
    DeviceGraph() = default;
    ~DeviceGraph();
    DeviceGraph(DeviceGraph&& other) noexcept;
    DeviceGraph& operator=(DeviceGraph&& other) noexcept;
    DeviceGraph(const DeviceGraph&) = delete;
    DeviceGraph& operator=(const DeviceGraph&) = delete;

    void capture(const std::function<void()>& enqueue_work);
    void replay() const;  // queues the whole recording; returns without waiting
    void clear();
    bool empty() const { return exec_ == nullptr; }
    std::size_t nodes() const { return nodes_; }  // kernels + copies recorded

private:
    void* exec_ = nullptr;  // cudaGraphExec_t
    std::size_t nodes_ = 0;
};

}  // namespace glass::cuda
