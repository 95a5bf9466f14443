/// \file
/// \brief cuda/cuda_session.hpp — the whole model on the GPU: its weights in device memory and
/// CudaSession, the CUDA twin of CpuSession (glass/transformer.hpp), in plain C++ like glass_cuda.hpp.
/// ```text
///   DeviceWeights   every matrix of a glass::Model uploaded once (forward.hpp)
///   CudaOptions     which kernels a session runs (matmul, attention, graph) and its KV cache type
///   CudaSession     glass::Session on the device: ids up, the last position's logits [vocab] back
///   require_device  "no CUDA device: <why>" before anything touches the GPU (session and paged backend)
/// The stages it is built from (kernels, the KV cache) are declared in glass_cuda.hpp and the
/// headers it includes; its layer loop is DeviceForward's (forward.hpp), the same one
/// CudaPagedBackend runs.
/// ```
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "forward.hpp"
#include "glass_cuda.hpp"

namespace glass::cuda {

// `c` when a usable CUDA device is present; otherwise glass::Error "no CUDA device: <why>". Used in
// member initialisers, so a machine without a GPU fails here and not at some first allocation.
const ModelConfig& require_device(const ModelConfig& c);

// Which attention CudaSession runs. standard: attention_naive for prefill, chunks and verify
// (scores in a [n_heads, n, n_k] scratch), attention_decode for decode. flash: flash_attention for
// prefill, chunks and verify (no score matrix), and for decode flash_decode (split-K, chunks of
// flash_decode_chunk keys) once the cache holds at least flash_decode_min_keys keys, below that
// attention_decode (one block per head is then enough to keep up with the reads).
enum class SessionAttention { standard, flash };
const char* to_string(SessionAttention a);

struct CudaOptions {
    WeightType weights = WeightType::f32;
    MatmulKernel matmul = MatmulKernel::automatic;
    bool naive_decode_attention = false;  // decode through attention_naive instead of attention_decode
    bool graph = false;  // decode by replaying one CUDA graph of the whole step (CudaSession::decode)
    KvType kv = KvType::fp32;  // the cache's storage (int8: kv_write_int8, attention reads int8 + scales)
    SessionAttention attention = SessionAttention::standard;
    int flash_decode_min_keys = 1024;  // flash: decode through flash_decode from this many keys on
    int flash_decode_chunk = 256;      // flash: keys per split of flash_decode
};

// glass::Session on the GPU: weights uploaded once at construction; prefill and decode run every
// layer on the device; only the ids go up and the last position's logits [vocab] come back.
class CudaSession : public Session {
public:
    explicit CudaSession(const Model& model, CudaOptions options = {});
    ~CudaSession() override;

    const ModelConfig& config() const override { return config_; }
    int position() const override { return cache_.length(); }
    void reset() override { cache_.clear(); }
    std::span<const float> prefill(std::span<const int> ids) override;
    std::span<const float> decode(int id) override;
    // Speculative decoding: one pass keeping every row's logits [n, vocab]; rollback by length.
    std::span<const float> verify(std::span<const int> ids) override;
    void rewind(int position) override { cache_.rewind(position); }
    KvType kv_type() const override { return cache_.type(); }
    std::int64_t kv_bytes_used() const override { return cache_.bytes_used(config_); }
    std::int64_t weight_bytes() const override { return weights_.bytes_per_forward; }
    const char* backend_name() const override { return "the CUDA backend"; }

    const float* device_logits() const { return logits_dev_.f32(); }  // [vocab], last forward
    const CudaOptions& options() const { return options_; }
    std::size_t decode_graph_nodes() const { return decode_graph_.nodes(); }  // 0 before the first

private:
    std::span<const float> forward(std::span<const int> ids, bool every_row = false);
    // Queues a whole forward pass of n tokens (ids already on the device) into logits_dev_ (the
    // last row's logits), or into every_row [n, vocab] when given.
    // decode_kernel: n = 1 through the decode attention (attention_decode, or flash_decode when
    // flash_decode is set: n_keys may then be on the device, the grid sized for the whole window).
    void enqueue_forward(const int* d_ids, int n, IntArg start_pos, IntArg n_keys, bool decode_kernel,
                         float* every_row = nullptr, bool flash_decode = false);
    bool uses_flash_decode(int n_keys) const;  // the decode attention for a cache of n_keys keys
    std::span<const float> decode_with_graph(int id);
    void ensure_scratch(int n_tokens, std::int64_t score_floats);

    ModelConfig config_;
    CudaOptions options_;
    DeviceWeights weights_;
    DeviceKVCache cache_;
    DeviceForward forward_;  // the layer loop and its activations, grown to the largest pass seen
    DeviceBuffer ids_, logits_dev_;
    std::vector<float> logits_;
    DeviceBuffer rows_logits_dev_;   // verify's [n, vocab], grown as needed
    std::int64_t rows_logits_capacity_ = 0;
    std::vector<float> rows_logits_;
    // The decode graph: recorded at the first decode, replayed by every later one. step_ holds
    // {id, position, position + 1} on the device, rewritten before each replay.
    DeviceGraph decode_graph_;
    int graph_generation_ = -1;  // scratch_generation_ when decode_graph_ was captured
    bool graph_flash_ = false;   // decode_graph_ holds flash_decode (recaptured when the choice changes)
    DeviceBuffer flash_partial_; // flash_decode's partials for the whole window (attention = flash)
    DeviceBuffer step_;
};

}  // namespace glass::cuda
