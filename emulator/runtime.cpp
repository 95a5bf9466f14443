/// \file
/// \brief emulator/runtime.cpp — the device's errors, and the runtime API's error and device calls.
/// ```text
/// An error is recorded by report(): once (cudaGetLastError clears it), or "sticky" for a fault
/// inside a kernel, which every later call reports until reset_device(), as on a GPU. The device
/// itself is one H200-shaped CPU, or none when GLASS_EMULATOR_NO_DEVICE is set.
/// ```
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "internal.hpp"

using namespace glass_emu::detail;

namespace glass_emu::detail {

std::mutex g_mutex;
cudaError_t g_last_error = cudaSuccess;
cudaError_t g_sticky_error = cudaSuccess;
std::string g_message;
cudaError_t g_message_code = cudaSuccess;

cudaError_t report(cudaError_t code, const std::string& message, bool sticky) {
    g_last_error = code;
    if (sticky) g_sticky_error = code;
    g_message = "glass CUDA emulator: " + message;
    g_message_code = code;
    return code;
}

std::string to_string(uint3 v) {
    char text[48];
    std::snprintf(text, sizeof text, "(%u,%u,%u)", v.x, v.y, v.z);
    return text;
}
std::string to_string(dim3 v) { return to_string(uint3{v.x, v.y, v.z}); }

}  // namespace glass_emu::detail

// Clears a sticky fault (the emulator's cudaDeviceReset): for tests of the emulator itself.
void glass_emu::reset_device() {
    std::lock_guard lock(g_mutex);
    g_sticky_error = g_last_error = cudaSuccess;
    g_capture = Capture{};
}

// ---- The runtime API: errors ----------------------------------------------------------------------

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
    if (error == g_message_code && error != cudaSuccess) return g_message.c_str();
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        default: return "error (glass CUDA emulator)";
    }
}

cudaError_t cudaGetLastError() {
    std::lock_guard lock(g_mutex);
    const cudaError_t e = g_sticky_error != cudaSuccess ? g_sticky_error : g_last_error;
    g_last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError() {
    std::lock_guard lock(g_mutex);
    return g_sticky_error != cudaSuccess ? g_sticky_error : g_last_error;
}

// ---- The runtime API: the device ------------------------------------------------------------------

static bool no_device_wanted() {
    const char* v = std::getenv("GLASS_EMULATOR_NO_DEVICE");
    return v && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

cudaError_t cudaGetDeviceCount(int* count) {
    std::lock_guard lock(g_mutex);
    if (!count) return report(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
    if (no_device_wanted()) {
        *count = 0;
        return report(cudaErrorNoDevice, "no device (GLASS_EMULATOR_NO_DEVICE is set)");
    }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    std::lock_guard lock(g_mutex);
    if (device != 0) return report(cudaErrorInvalidDevice, "cudaSetDevice: the emulator has device 0 only, asked for " + std::to_string(device));
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    if (!device) return report(cudaErrorInvalidValue, "cudaGetDevice: null device");
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    std::lock_guard lock(g_mutex);
    if (!prop) return report(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
    if (device != 0) return report(cudaErrorInvalidDevice, "device " + std::to_string(device) + " does not exist");
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
    std::lock_guard lock(g_mutex);
    if (const cudaError_t e = refuse_during_capture("cudaDeviceSynchronize")) return e;
    return g_sticky_error;
}
