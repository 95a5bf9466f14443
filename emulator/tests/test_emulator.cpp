// emulator/tests/test_emulator.cpp — the CUDA emulator (emulator/) against the rules of the GPU.
//
// The emulated harness (cuda_ops_emulated, cuda_model_emulated) is only worth something if the
// emulator runs kernels the way a GPU does and refuses what a GPU would not run. So: barriers and
// shuffles give the values CUDA defines (checked against answers computed here), and each broken
// kernel of emulator_kernels.cu, each bad launch and each bad copy fails with a message naming it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "emulator_kernels.hpp"

namespace et = emulator_test;

namespace {

// A device buffer of n T's, freed at scope exit.
template <typename T>
struct Device {
    T* p = nullptr;
    std::size_t n;
    explicit Device(std::size_t count) : n(count) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess); }
    ~Device() { cudaFree(p); }
    std::vector<T> host() const {
        std::vector<T> v(n);
        REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return v;
    }
    void set(const std::vector<T>& v) { REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess); }
};

// Expects the launch to have failed with a sticky launch failure whose message has `text`, then
// clears the fault so the next test starts from a working device.
void expect_fault(cudaError_t status, const std::string& text) {
    CHECK(status == cudaErrorLaunchFailure);
    const std::string message = cudaGetErrorString(status);
    INFO(message);
    CHECK(message.find(text) != std::string::npos);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 4) == cudaErrorLaunchFailure);  // sticky: the device refuses everything
    glass_emu::reset_device();
    CHECK(cudaMalloc(&p, 4) == cudaSuccess);
    cudaFree(p);
}

}  // namespace

TEST_CASE("a barrier waits for every thread of the block (1-D and 2-D blocks)") {
    struct Shape { int blocks, bx, by; };
    for (Shape s : {Shape{1, 32, 1}, Shape{3, 256, 1}, Shape{2, 16, 16}, Shape{1, 1024, 1}, Shape{2, 7, 3}}) {
        CAPTURE(s.bx);
        CAPTURE(s.by);
        const int n = s.bx * s.by;
        std::vector<float> in(std::size_t(s.blocks) * n);
        std::iota(in.begin(), in.end(), 0.0f);
        Device<float> d_in(in.size()), d_out(in.size());
        d_in.set(in);
        REQUIRE(et::reverse(d_in.p, d_out.p, s.blocks, s.bx, s.by) == cudaSuccess);
        const std::vector<float> out = d_out.host();
        int wrong = 0;
        for (int b = 0; b < s.blocks; ++b)
            for (int i = 0; i < n; ++i) wrong += out[std::size_t(b * n + i)] != in[std::size_t(b * n + n - 1 - i)];
        CHECK(wrong == 0);
    }
}

TEST_CASE("shuffles return the lane CUDA defines, and their edge rules") {
    std::vector<int> in(32);
    for (int i = 0; i < 32; ++i) in[std::size_t(i)] = 100 + i * i;
    Device<int> d_in(32), d_out(32 * 5);
    d_in.set(in);
    REQUIRE(et::shuffles(d_in.p, d_out.p) == cudaSuccess);
    const std::vector<int> out = d_out.host();
    const int total = std::accumulate(in.begin(), in.end(), 0);
    for (int lane = 0; lane < 32; ++lane) {
        CAPTURE(lane);
        const int* o = &out[std::size_t(5 * lane)];
        CHECK(o[0] == in[std::size_t(lane + 1 < 32 ? lane + 1 : lane)]);  // past the edge: own value
        CHECK(o[1] == in[std::size_t(lane >= 3 ? lane - 3 : lane)]);
        CHECK(o[2] == in[std::size_t(lane ^ 5)]);
        CHECK(o[3] == in[7]);
        CHECK(o[4] == total);
    }
}

TEST_CASE("dynamic shared memory has the launch's size") {
    Device<float> out(100);
    REQUIRE(et::dynamic_shared(out.p, 100) == cudaSuccess);
    const std::vector<float> v = out.host();
    for (int i = 0; i < 100; ++i) CHECK(v[std::size_t(i)] == float((i + 1) % 100) * 2.0f);
}

TEST_CASE("broken kernels fail with a message that names the problem") {
    Device<float> out(64);
    expect_fault(et::divergent_barrier(out.p), "divergent_barrier_kernel");
    expect_fault(et::divergent_barrier(out.p), "16 of 32 threads wait at __syncthreads while 16 have returned");
    expect_fault(et::shuffle_after_return(out.p), "missing lanes: 16 (returned)");
    expect_fault(et::mask_beyond_block(out.p), "names lanes this warp does not have");
    expect_fault(et::late_barrier(out.p), "no thread of the launch's first block did");
}

TEST_CASE("launch configurations beyond the GPU's limits are refused, and not sticky") {
    struct Bad { unsigned gx, gy, bx, by; std::size_t shared; const char* text; };
    for (Bad b : {Bad{1, 1, 1025, 1, 0, "1025 threads"}, Bad{1, 1, 64, 32, 0, "2048 threads"},
                  Bad{1, 70000, 32, 1, 0, "exceeds the limits"}, Bad{0, 1, 32, 1, 0, "zero dimension"},
                  Bad{1, 1, 32, 1, 49153, "49153 bytes of dynamic shared memory"}}) {
        CAPTURE(b.text);
        const cudaError_t status = et::launch_noop(b.gx, b.gy, b.bx, b.by, b.shared);
        CHECK(status == cudaErrorInvalidConfiguration);
        CHECK(std::string(cudaGetErrorString(status)).find(b.text) != std::string::npos);
        CHECK(cudaGetLastError() == cudaSuccess);  // reported once
    }
    CHECK(et::launch_noop(1, 65535, 1024, 1, 49152) == cudaSuccess);  // exactly at the limits
}

TEST_CASE("copies are checked against the allocation they touch") {
    Device<float> d(10);
    std::vector<float> host(11, 1.0f);
    CHECK(cudaMemcpy(d.p, host.data(), 10 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    const cudaError_t over = cudaMemcpy(d.p, host.data(), 11 * sizeof(float), cudaMemcpyHostToDevice);
    CHECK(over == cudaErrorInvalidValue);
    CHECK(std::string(cudaGetErrorString(over)).find("runs 4 bytes past the end of its 40-byte allocation") != std::string::npos);
    CHECK(cudaMemcpy(host.data(), d.p + 1, 10 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(host.data(), host.data() + 1, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // host memory
    CHECK(cudaMemset(d.p + 9, 0, 8) == cudaErrorInvalidValue);
    CHECK(cudaFree(host.data()) == cudaErrorInvalidDevicePointer);
}

TEST_CASE("the stand-in cub sort is stable, descending, and orders floats by value") {
    const std::vector<float> keys = {0.5f, -1.0f, 2.0f, 0.5f, -0.0f, 0.0f, 2.0f, -3.5f, 0.5f};
    std::vector<int> ids(keys.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::vector<float> sorted_keys(keys.size());
    std::vector<int> sorted_ids(keys.size());
    std::size_t bytes = 0;
    CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys.data(), sorted_keys.data(), ids.data(),
                                                    sorted_ids.data(), int(keys.size())) == cudaSuccess);
    std::vector<unsigned char> scratch(bytes);
    CHECK(cub::DeviceRadixSort::SortPairsDescending(scratch.data(), bytes, keys.data(), sorted_keys.data(), ids.data(),
                                                    sorted_ids.data(), int(keys.size())) == cudaSuccess);
    CHECK(sorted_ids == std::vector<int>{2, 6, 0, 3, 8, 5, 4, 1, 7});  // ties keep input order; +0 above -0
    std::size_t too_small = bytes - 1;
    CHECK(cub::DeviceRadixSort::SortPairsDescending(scratch.data(), too_small, keys.data(), sorted_keys.data(),
                                                    ids.data(), sorted_ids.data(), int(keys.size())) == cudaErrorInvalidValue);
}

// Run in a child process (it must die): `test_emulator --overrun`.
int overrun_child() {
    float* in = nullptr;
    float* out = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&in), 64 * sizeof(float)) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&out), 64 * sizeof(float)) != cudaSuccess)
        return 2;
    et::overrun(in, out, 64);
    return 0;  // not reached when the overrun is caught
}

TEST_CASE("a kernel reading past the end of a buffer is stopped, and the message names it") {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::FILE* child = popen(("'" + self + "' --overrun 2>&1").c_str(), "r");
    REQUIRE(child != nullptr);
    std::string output;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, child)) output += buffer;
    const int status = pclose(child);
    INFO(output);
#if defined(__SANITIZE_ADDRESS__)  // GLASS_ASAN=ON: AddressSanitizer reports it, naming the kernel
    CHECK(status != 0);
    CHECK(output.find("heap-buffer-overflow") != std::string::npos);
    CHECK(output.find("overrun_kernel") != std::string::npos);
#else
    // Killed by SIGSEGV: directly, or as the shell popen runs reports it (128 + signal number).
    CHECK((WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status) - 128) == SIGSEGV);
    CHECK(output.find("kernel overrun_kernel, block (1,0,0), thread (31,0,0): invalid memory access") != std::string::npos);
    CHECK(output.find("0 bytes past the end of a 256-byte device allocation") != std::string::npos);
#endif
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--overrun") == 0) return overrun_child();
    doctest::Context context(argc, argv);
    return context.run();
}

// ---- CUDA graphs by stream capture ----------------------------------------------------------------

TEST_CASE("a capture records launches without running them; a replay runs them with their frozen arguments") {
    cudaGetLastError();  // a clean start: earlier tests leave refused calls behind
    Device<float> out(100), extra(1);
    out.set(std::vector<float>(100, 1.0f));
    extra.set({10.0f});
    REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaStreamCaptureStatus status{};
    CHECK(cudaStreamIsCapturing(cudaStreamPerThread, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusActive);
    CHECK(et::add_to(out.p, 100, 2.0f, extra.p, cudaStreamPerThread) == cudaSuccess);
    CHECK(cudaMemcpyAsync(out.p + 99, out.p, sizeof(float), cudaMemcpyDeviceToDevice, cudaStreamPerThread) == cudaSuccess);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);
    std::size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
    CHECK(nodes == 2);
    CHECK(out.host() == std::vector<float>(100, 1.0f));  // nothing ran yet
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(graph) == cudaSuccess);  // the executable graph keeps its own copy
    CHECK(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
    CHECK(out.host() == std::vector<float>(100, 13.0f));  // 1 + 2 + 10, and the copy of element 0
    extra.set({100.0f});  // read when the kernel runs: the next replay sees it; `add` stays 2
    CHECK(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
    CHECK(out.host() == std::vector<float>(100, 115.0f));
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
}

TEST_CASE("a call that waits or allocates during a capture fails and invalidates the capture") {
    Device<float> d(4);
    std::vector<float> host(4, 0.0f);
    void* p = nullptr;
    struct Call { const char* name; std::function<cudaError_t()> call; };
    for (const Call& c : {Call{"cudaMemcpy", [&] { return cudaMemcpy(d.p, host.data(), 16, cudaMemcpyHostToDevice); }},
                          Call{"cudaMemset", [&] { return cudaMemset(d.p, 0, 16); }},
                          Call{"cudaMalloc", [&] { return cudaMalloc(&p, 16); }},
                          Call{"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
                          Call{"cudaStreamSynchronize", [] { return cudaStreamSynchronize(cudaStreamPerThread); }}}) {
        CAPTURE(c.name);
        REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
        const cudaError_t e = c.call();
        CHECK(e == cudaErrorStreamCaptureUnsupported);
        CHECK(std::string(cudaGetErrorString(e)).find(c.name) != std::string::npos);
        cudaStreamCaptureStatus status{};
        CHECK(cudaStreamIsCapturing(cudaStreamPerThread, &status) == cudaSuccess);
        CHECK(status == cudaStreamCaptureStatusInvalidated);
        cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
        CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaErrorStreamCaptureInvalidated);
        CHECK(graph == nullptr);
        cudaGetLastError();
        CHECK(cudaMemcpy(d.p, host.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess);  // usable again
    }
}

TEST_CASE("the legacy stream cannot be captured, nor used while another stream captures") {
    Device<float> out(8), extra(1);
    extra.set({0.0f});
    // This file is compiled without --default-stream per-thread, so stream 0 is the legacy stream.
    CHECK(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
    REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(et::add_to(out.p, 8, 1.0f, extra.p, 0) == cudaErrorStreamCaptureImplicit);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaErrorStreamCaptureInvalidated);
    // A launch with a bad configuration is refused when recorded, not when replayed.
    REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(et::add_to(out.p, 0, 1.0f, extra.p, cudaStreamPerThread) == cudaErrorInvalidConfiguration);  // grid of 0
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaErrorIllegalState);  // no capture now
    cudaGetLastError();
}

TEST_CASE("the stand-in cuBLAS works on the legacy stream until told otherwise, as cuBLAS does") {
    Device<float> a(4), b(4), c(4);
    a.set({1, 2, 3, 4});
    b.set({1, 0, 0, 1});
    cublasHandle_t handle = nullptr;
    REQUIRE(cublasCreate_v2(&handle) == CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    const auto gemm = [&] { return cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.p, 2, b.p, 2, &zero, c.p, 2); };
    REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(gemm() == CUBLAS_STATUS_EXECUTION_FAILED);  // legacy stream during a capture
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    REQUIRE(cublasSetStream_v2(handle, cudaStreamPerThread) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(gemm() == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cudaStreamEndCapture(cudaStreamPerThread, &graph) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    c.set({0, 0, 0, 0});
    CHECK(cudaGraphLaunch(exec, cudaStreamPerThread) == cudaSuccess);
    CHECK(c.host() == std::vector<float>{1, 2, 3, 4});  // A · I
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cublasDestroy_v2(handle);
}
