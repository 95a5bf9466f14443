/// \file
/// \brief emulator/streams.cpp — streams, events, stream capture and CUDA graphs on the CPU.
/// ```text
/// Work queued on a stream runs at once (the host waits for it), so streams need no queue of their
/// own and a synchronization has nothing to wait for. A capture (only of the per-thread stream;
/// CUDA refuses the legacy one) collects the work queued on its stream instead (enqueue, in
/// launch.cpp); cudaStreamEndCapture turns the collection into a graph, and cudaGraphLaunch runs
/// it, node after node. Calls that would wait for the device during a capture spoil it.
/// ```
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "internal.hpp"

using namespace glass_emu::detail;

namespace glass_emu::detail {

Capture g_capture;

cudaError_t refuse_during_capture(const std::string& what) {
    if (!g_capture.stream) return cudaSuccess;
    g_capture.invalidated = true;
    return report(cudaErrorStreamCaptureUnsupported,
                  what + " while a stream capture is under way: it cannot be recorded into a graph "
                         "(the capture is now invalid)");
}

}  // namespace glass_emu::detail

// ---- Events ------------------------------------------------------------------------------------------

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
    std::lock_guard lock(g_mutex);
    if (const cudaError_t e = refuse_during_capture("cudaEventSynchronize")) return e;
    return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end || !start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return cudaSuccess;
}

// ---- Streams, capture and graphs ---------------------------------------------------------------------

struct CUgraph_st {
    std::vector<Op> ops;
};
struct CUgraphExec_st {
    std::vector<Op> ops;
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
    std::lock_guard lock(g_mutex);
    if (!exec || !graph) return report(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph or exec");
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
    std::lock_guard lock(g_mutex);
    if (!graph || !count || nodes)
        return report(cudaErrorInvalidValue, "cudaGraphGetNodes: the emulator counts nodes only (nodes must be null)");
    *count = graph->ops.size();
    return cudaSuccess;
}
