/// \file
/// \brief cuda/device.cu — the GPU itself: is there one, its memory, checked launches, fp16/bf16
/// conversion, and the copy bandwidth every decode speed is compared with.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <cuda_profiler_api.h>

#include "common.cuh"

namespace glass::cuda {

// ---- Device query and error checks -------------------------------------------------------------

bool device_present(std::string* why) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        // No driver, a driver older than this runtime, no GPU: all mean "no device" to us.
        if (why) *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")";
        cudaGetLastError();  // clear the sticky error so later calls report their own problems
        return false;
    }
    if (count < 1) {
        if (why) *why = "cudaGetDeviceCount found no CUDA device";
        return false;
    }
    if (why) why->clear();
    return true;
}

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // "no device" is an answer here, not a sticky error
        return 0;
    }
    return count;
}

int current_device() {
    int device = 0;
    const cudaError_t status = cudaGetDevice(&device);
    if (status != cudaSuccess) fail("cudaGetDevice failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
    return device;
}

void use_device(int index) {
    const cudaError_t status = cudaSetDevice(index);
    if (status != cudaSuccess)
        fail("cannot use CUDA device ", index, " of ", device_count(), ": ", cudaGetErrorName(status), " (",
             cudaGetErrorString(status), ")");
}

bool runs_on_emulator() {
#ifdef GLASS_CUDA_EMULATED
    return true;
#else
    return false;
#endif
}

std::string device_name() {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return prop.name;
}

void synchronize(const char* what) {
    const cudaError_t status = cudaDeviceSynchronize();
    if (status != cudaSuccess)
        fail("CUDA error while waiting for ", what, ": ", cudaGetErrorName(status), " (",
             cudaGetErrorString(status), ")");
}

void profiler_start() { CUDA_CHECK(cudaProfilerStart()); }
void profiler_stop() { CUDA_CHECK(cudaProfilerStop()); }

static bool sync_after_every_launch() {
    static const bool on = [] {
        const char* v = std::getenv("GLASS_CUDA_SYNC");
        return v && std::strcmp(v, "0") != 0 && v[0] != '\0';
    }();
    return on;
}

// True while this thread's stream is being captured into a graph (nothing may wait for it then).
static bool capturing() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(cudaStreamPerThread, &status) == cudaSuccess &&
           status != cudaStreamCaptureStatusNone;
}

void check_launch(const char* kernel, const char* file, int line) {
    cudaError_t status = cudaGetLastError();
    if (status == cudaSuccess && sync_after_every_launch() && !capturing()) status = cudaDeviceSynchronize();
    if (status != cudaSuccess)
        fail("CUDA kernel ", kernel, " failed (launched at ", file, ":", line, "): ",
             cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

unsigned grid_for(std::int64_t n, int threads) {
    if (n < 1) fail("internal: launching a kernel over ", n, " items");
    const std::int64_t blocks = (n + threads - 1) / threads;
    if (blocks > std::numeric_limits<int>::max())  // CUDA's limit for gridDim.x is 2^31 - 1
        fail("kernel launch over ", n, " items needs ", blocks, " blocks: more than CUDA allows");
    return static_cast<unsigned>(blocks);
}

// ---- Memory ------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
        const cudaError_t status = cudaMalloc(&data_, bytes);
        if (status != cudaSuccess) {
            data_ = nullptr;
            cudaGetLastError();
            fail("cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorName(status), " (",
                 cudaGetErrorString(status), ")");
        }
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) cudaFree(data_);  // a destructor must not throw; a failed free is not recoverable
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_) cudaFree(data_);
        data_ = other.data_;
        bytes_ = other.bytes_;
        other.data_ = nullptr;
        other.bytes_ = 0;
    }
    return *this;
}

void upload(void* d_dst, const void* host_src, std::size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(d_dst, host_src, bytes, cudaMemcpyHostToDevice));
}
void download(void* host_dst, const void* d_src, std::size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(host_dst, d_src, bytes, cudaMemcpyDeviceToHost));
}
void copy_on_device(void* d_dst, const void* d_src, std::size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice));
}

__global__ void fill_kernel(float* x, std::int64_t n, float value) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) x[i] = value;
}

void poison(float* d, std::size_t n) {
    if (n == 0) return;
    fill_kernel<<<grid_for(static_cast<std::int64_t>(n), 256), 256>>>(
        d, static_cast<std::int64_t>(n), std::numeric_limits<float>::quiet_NaN());
    CHECK_LAUNCH("fill_kernel (poison)");
}

DeviceBuffer to_device(std::span<const float> host) {
    DeviceBuffer b(host.size_bytes());
    upload(b.data(), host.data(), host.size_bytes());
    return b;
}
DeviceBuffer to_device(std::span<const int> host) {
    DeviceBuffer b(host.size_bytes());
    upload(b.data(), host.data(), host.size_bytes());
    return b;
}
std::vector<float> to_host(const float* d, std::size_t n) {
    std::vector<float> out(n);
    download(out.data(), d, n * sizeof(float));
    return out;
}

// ---- CUDA graphs ---------------------------------------------------------------------------------

void DeviceGraph::capture(const std::function<void()>& enqueue_work) {
    clear();
    // Global mode: any call that would wait for the device or allocate during the capture fails.
    CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal));
    cudaGraph_t graph = nullptr;
    try {
        enqueue_work();
    } catch (...) {
        cudaStreamEndCapture(cudaStreamPerThread, &graph);  // leave capture mode; the graph is useless
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph));
    std::size_t nodes = 0;
    cudaGraphExec_t exec = nullptr;
    cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes);
    if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph does not need it
    if (status != cudaSuccess)
        fail("instantiating a CUDA graph of ", nodes, " nodes failed: ", cudaGetErrorName(status), " (",
             cudaGetErrorString(status), ")");
    exec_ = exec;
    nodes_ = nodes;
}

void DeviceGraph::replay() const {
    if (!exec_) fail("DeviceGraph::replay: nothing has been captured");
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cudaStreamPerThread));
    if (sync_after_every_launch()) synchronize("a CUDA graph replay");
}

void DeviceGraph::clear() {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));  // not in flight: callers wait for replays
    exec_ = nullptr;
    nodes_ = 0;
}

DeviceGraph::~DeviceGraph() { clear(); }

DeviceGraph::DeviceGraph(DeviceGraph&& other) noexcept : exec_(other.exec_), nodes_(other.nodes_) {
    other.exec_ = nullptr;
    other.nodes_ = 0;
}

DeviceGraph& DeviceGraph::operator=(DeviceGraph&& other) noexcept {
    if (this != &other) {
        clear();
        exec_ = other.exec_;
        nodes_ = other.nodes_;
        other.exec_ = nullptr;
        other.nodes_ = 0;
    }
    return *this;
}

// ---- Weight storage types ----------------------------------------------------------------------

const char* to_string(WeightType t) {
    switch (t) {
        case WeightType::f32: return "fp32";
        case WeightType::f16: return "fp16";
        case WeightType::bf16: return "bf16";
        case WeightType::q8_0: return "q8";
        case WeightType::q4_0: return "q4";
        case WeightType::q4_k: return "q4_k";
        case WeightType::q5_k: return "q5_k";
        case WeightType::q6_k: return "q6_k";
    }
    return "?";
}

WeightType weight_type_from_string(const std::string& name) {
    if (name == "fp32" || name == "f32") return WeightType::f32;
    if (name == "fp16" || name == "f16") return WeightType::f16;
    if (name == "bf16") return WeightType::bf16;
    if (name == "q8" || name == "q8_0") return WeightType::q8_0;
    if (name == "q4" || name == "q4_0") return WeightType::q4_0;
    if (name == "q4_k") return WeightType::q4_k;
    if (name == "q5_k") return WeightType::q5_k;
    if (name == "q6_k") return WeightType::q6_k;
    fail("unknown weight precision '", name, "' (fp32, fp16, bf16, q8, q4, q4_k, q5_k, q6_k)");
}

double bytes_per_weight(WeightType t) {
    if (has_integer_weights(t)) return quantized_bytes_per_weight(t);  // quantize.cpp: the blocks' own sizes
    return t == WeightType::f32 ? 4.0 : 2.0;
}

static void refuse_quantized(const char* who, WeightType type) {
    if (has_integer_weights(type))
        fail(who, ": ", to_string(type), " weights are quantized on the host (upload_quantized), not converted on the device");
}

__global__ void to_f16_kernel(const float* src, __half* dst, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}
__global__ void to_bf16_kernel(const float* src, __nv_bfloat16* dst, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) dst[i] = __float2bfloat16_rn(src[i]);
}
template <typename W>
__global__ void widen_kernel(const W* src, float* dst, std::int64_t n) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
    if (i < n) dst[i] = load_weight(src, i);
}

void convert_weights(const float* d_src, void* d_dst, std::size_t n, WeightType type) {
    refuse_quantized("convert_weights", type);
    if (n == 0) return;
    const auto count = static_cast<std::int64_t>(n);
    switch (type) {
        case WeightType::f32:
            copy_on_device(d_dst, d_src, n * sizeof(float));
            return;
        case WeightType::f16:
            to_f16_kernel<<<grid_for(count, 256), 256>>>(d_src, static_cast<__half*>(d_dst), count);
            CHECK_LAUNCH("to_f16_kernel");
            return;
        case WeightType::bf16:
            to_bf16_kernel<<<grid_for(count, 256), 256>>>(d_src, static_cast<__nv_bfloat16*>(d_dst), count);
            CHECK_LAUNCH("to_bf16_kernel");
            return;
        case WeightType::q8_0:
        case WeightType::q4_0:
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: return;  // refused above
    }
}

void widen_weights(const void* d_src, float* d_dst, std::size_t n, WeightType type) {
    refuse_quantized("widen_weights", type);
    if (n == 0) return;
    const auto count = static_cast<std::int64_t>(n);
    switch (type) {
        case WeightType::f32:
            copy_on_device(d_dst, d_src, n * sizeof(float));
            return;
        case WeightType::f16:
            widen_kernel<<<grid_for(count, 256), 256>>>(static_cast<const __half*>(d_src), d_dst, count);
            CHECK_LAUNCH("widen_kernel<half>");
            return;
        case WeightType::bf16:
            widen_kernel<<<grid_for(count, 256), 256>>>(static_cast<const __nv_bfloat16*>(d_src), d_dst, count);
            CHECK_LAUNCH("widen_kernel<bf16>");
            return;
        case WeightType::q8_0:
        case WeightType::q4_0:
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: return;  // refused above
    }
}

OwnedMatrix upload_matrix(const float* host, int rows, int cols, WeightType type) {
    if (rows < 1 || cols < 1) fail("upload_matrix: shape [", rows, ", ", cols, "] is empty");
    if (has_integer_weights(type)) return upload_quantized(host, rows, cols, type);
    const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
    OwnedMatrix m;
    m.buffer = DeviceBuffer(n * (type == WeightType::f32 ? sizeof(float) : 2));
    if (type == WeightType::f32) {
        upload(m.buffer.data(), host, n * sizeof(float));
    } else {
        DeviceBuffer staging(n * sizeof(float));  // fp32 up, converted on the device
        upload(staging.data(), host, n * sizeof(float));
        convert_weights(staging.f32(), m.buffer.data(), n, type);
        synchronize("weight conversion");  // before `staging` is freed
    }
    m.view = DeviceMatrix{m.buffer.data(), type, rows, cols};
    return m;
}

// ---- Copy bandwidth ----------------------------------------------------------------------------

double measure_copy_bandwidth(std::size_t bytes, int repeats) {
    if (bytes == 0 || repeats < 1) fail("measure_copy_bandwidth needs bytes > 0 and repeats >= 1");
    DeviceBuffer a(bytes), b(bytes);
    CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
    copy_on_device(b.data(), a.data(), bytes);  // warm-up
    cudaEvent_t start{}, stop{};
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < repeats; ++r) copy_on_device(b.data(), a.data(), bytes);
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    // Each copy reads `bytes` and writes `bytes`.
    return 2.0 * static_cast<double>(bytes) * repeats / (static_cast<double>(ms) * 1e-3);
}

}  // namespace glass::cuda
