/// \file
/// \brief cuda/forward.hpp — the model on the GPU, written once: its weights in device memory
/// (DeviceWeights) and the layer loop of a forward pass with the activations it needs
/// (DeviceForward), shared by CudaSession (one sequence, its own cache: transformer.cpp) and
/// CudaPagedBackend (a serving batch, a paged pool: paged.cpp). Plain C++, like glass_cuda.hpp.
/// ```text
/// The forward pass of glass/transformer.hpp, stage by stage on the device:
///   x = embedding rows of ids (× embedding_scale: Gemma)           [n, dim]
///   per layer:
///     xn = rmsnorm(x);  q, k, v = xn Wqᵀ, xn Wkᵀ, xn Wvᵀ             [n, q_dim], [n, kv_dim] ×2
///     (+ bq, bk, bv: Qwen2)  (each head of q, k rmsnormed: Qwen3, Gemma 3)
///     rope_rows(q), rope_rows(k)          row r at its position (RowPlacement, device_kv_cache.hpp),
///                                         by the layer's frequency table (Gemma 3: two bases)
///     attend(layer)                       the owner stores k, v in its cache or pool and writes
///                                         att [n, q_dim] with the attention it chose, under the
///                                         layer's rules (attention_dims: window, soft-cap)
///     x += att Woᵀ                        (normed first with sandwich norms: Gemma 2, 3)
///     x += mlp(rmsnorm(x))                SiLU or GELU-tanh gate (normed first likewise)
///   logits(rows) = rmsnorm(rows) Wclsᵀ                             [rows, vocab]
///     (then cap · tanh(logits / cap): Gemma 2)
/// What differs between the two owners is only where K and V live and which attention kernel
/// reads them; the attend callback is that difference, and nothing else is written twice.
/// Norm gains are uploaded with the config's offset already added (Gemma's x·(1+w)): the CPU
/// computes offset + w in fp32 too, so the device holds the very gain the reference multiplies by.
/// ```
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "glass/dist/rank_share.hpp"
#include "glass_cuda.hpp"

namespace glass::cuda {

// A model's weights in device memory, uploaded once (forward.cpp); CudaSession and
// CudaPagedBackend each hold one. Matrices are stored as `type`; norm gains and biases stay fp32.
struct DeviceWeights {
    struct Layer {
        DeviceBuffer rms_att, rms_ffn;          // [dim] fp32, norm_weight_offset added
        OwnedMatrix wq, wk, wv, wo, w1, w2, w3;  // as in glass::LayerWeights
        // The family deltas' tensors; empty (data() null) where the model has none.
        DeviceBuffer bq, bk, bv;                // [q_dim], [kv_dim], [kv_dim] (Qwen2)
        DeviceBuffer q_norm, k_norm;            // [head_dim] per-head gains (Qwen3, Gemma 3)
        DeviceBuffer post_att, post_mlp;        // [dim] sandwich norms (Gemma 2, 3)
        int rope_table = 0;                     // index into rope_tables
    };
    // `first_layer`: the model layer that model.layers[0] is (a pipeline stage's shard holds layers
    // first_layer .. of the whole: RoPE bases and windows go by the whole model's numbering).
    DeviceWeights(const Model& model, WeightType type, int first_layer = 0);
    int first_layer = 0;
    std::vector<Layer> layers;
    OwnedMatrix embedding, classifier_own;  // classifier_own only when not shared
    DeviceMatrix classifier;                // = embedding.view when shared
    DeviceBuffer rms_final;                 // [dim]
    // RoPE frequencies [head_dim / 2], one table per distinct (base, scaling) among the layers
    // (rope_theta_of_layer, rope_scaling_of_layer): one for most models, two for Gemma 3.
    std::vector<DeviceBuffer> rope_tables;
    std::int64_t bytes_per_forward = 0;     // weight bytes one forward pass reads, at this width
};

// Layer `layer`'s attention rules: head counts, its sliding window (0: none) and the score
// soft-cap (0: none), as glass::attention_shape_of_layer gives them to the CPU.
AttentionDims attention_dims(const ModelConfig& c, int layer);

// One rank's share of a split model (glass/dist/rank_share.hpp). Here add_across_ranks gets
// device pointers: DeviceCollectives::all_reduce_sum (collectives.hpp).
using dist::RankShare;

// One forward pass's device work and the activations it runs through. Queues launches only:
// nothing here waits for the GPU, so a caller can record it into a graph (a RankShare's
// all-reduce may wait: a split model's forward is not recorded).
class DeviceForward {
public:
    DeviceForward(const ModelConfig& c, const DeviceWeights& weights, RankShare share = {})
        : c_(c), w_(weights), share_(std::move(share)) {}

    // Grows the activations to n_rows rows and the attention scores to score_floats (never
    // shrinks); new buffers are NaN-filled, so an element a kernel forgets to write poisons the
    // logits visibly. generation() goes up whenever a buffer moves (a recorded graph holds their
    // addresses).
    void reserve(int n_rows, std::int64_t score_floats);
    int generation() const { return generation_; }

    // Called once per layer after q and k are rotated: store k(), v() in the cache or pool and
    // write att() [n, q_dim] (scores() is the scratch reserve() sized).
    using Attend = std::function<void(int layer)>;
    // Queues the embedding of d_ids [n_rows] (device) and every layer over the rows `rows` places.
    // d_ids null: x() already holds the input rows (a later pipeline stage's, uploaded by the caller).
    // `attend` is called with the model's layer number (DeviceWeights::first_layer + i).
    void enqueue_layers(MatmulKernel mm, const int* d_ids, const RowPlacement& rows, const Attend& attend);
    // Queues the final norm and the classifier of n rows [n, dim] at d_rows: d_logits [n, vocab].
    // d_rows may be x() (every row) or a row of it.
    void enqueue_logits(MatmulKernel mm, const float* d_rows, int n, float* d_logits);

    float* x() const { return x_.f32(); }      // [n, dim] the residual stream
    float* q() const { return q_.f32(); }      // [n, q_dim] rotated queries
    float* k() const { return k_.f32(); }      // [n, kv_dim] rotated keys
    float* v() const { return v_.f32(); }      // [n, kv_dim]
    float* att() const { return att_.f32(); }  // [n, q_dim] attention's output
    float* scores() const { return scores_.f32(); }

private:
    void add_to_stream(float* y, const float* sandwich_gain, int n);  // x += y, normed first if given
    const ModelConfig& c_;
    const DeviceWeights& w_;
    RankShare share_;
    int rows_ = 0;
    std::int64_t score_capacity_ = 0;
    int generation_ = 0;
    DeviceBuffer x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, scores_;
};

}  // namespace glass::cuda
