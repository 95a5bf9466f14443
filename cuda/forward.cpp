/// \file
/// \brief cuda/forward.cpp — the model's weights uploaded once, and the one layer loop of every
/// CUDA forward pass (forward.hpp says how CudaSession and CudaPagedBackend share it).
#include <algorithm>
#include <cmath>

#include "glass/checkpoint.hpp"
#include "glass/rope.hpp"
#include "cuda_session.hpp"  // require_device; forward.hpp

namespace glass::cuda {

DeviceBuffer rope_frequencies(int head_dim, float theta) {
    std::vector<float> f(static_cast<std::size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i) f[static_cast<std::size_t>(i)] = rope_frequency(i, head_dim, theta);
    return to_device(std::span<const float>(f));
}

static DeviceBuffer upload_vector(const float* host, int n) {
    return to_device(std::span<const float>(host, static_cast<std::size_t>(n)));
}

static OwnedMatrix upload_weights(const ConstMatrixMap& m, WeightType type) {
    return upload_matrix(m.data(), static_cast<int>(m.rows()), static_cast<int>(m.cols()), type);
}

// Runs before any member touches the GPU (config_ is the first member), so a machine without one
// gets "no CUDA device: <why>" rather than the failure of some first allocation.
const ModelConfig& require_device(const ModelConfig& c) {
    std::string why;
    if (!device_present(&why)) fail("no CUDA device: ", why);
    return c;
}

DeviceWeights::DeviceWeights(const Model& model, WeightType type) {
    const ModelConfig& c = model.config;
    require_llama2_architecture(c, "the CUDA path");
    require_fp32_weights(model, "the CUDA path");
    for (const LayerWeights& w : model.layers) {
        Layer l;
        l.rms_att = upload_vector(w.rms_att.data(), c.dim);
        l.rms_ffn = upload_vector(w.rms_ffn.data(), c.dim);
        l.wq = upload_weights(w.wq, type);
        l.wk = upload_weights(w.wk, type);
        l.wv = upload_weights(w.wv, type);
        l.wo = upload_weights(w.wo, type);
        l.w1 = upload_weights(w.w1, type);
        l.w2 = upload_weights(w.w2, type);
        l.w3 = upload_weights(w.w3, type);
        layers.push_back(std::move(l));
    }
    // A quantized model (q8/q4 or a k-quant) keeps its embedding table fp32 (a lookup reads one row
    // per token, so its width costs no time) and quantizes the classifier on its own, as
    // glass::quantized_model() does.
    embedding = upload_weights(model.embedding_table(), has_integer_weights(type) ? WeightType::f32 : type);
    if (c.shared_classifier && !has_integer_weights(type)) {
        classifier = embedding.view;  // one table, read by both ends of the model
    } else {
        classifier_own = upload_weights(model.output_classifier(), type);
        classifier = classifier_own.view;
    }
    rms_final = upload_vector(model.rms_final, c.dim);
    frequencies = rope_frequencies(c.head_dim, c.rope_theta);
    // Bytes read per forward pass: every layer's matrices and the classifier as stored (scales
    // included), the fp32 norm gains; of the embedding table one row, which glass::Model's
    // weight_bytes leaves out too.
    bytes_per_forward = 4 * (std::int64_t{c.n_layers} * 2 * c.dim + c.dim) + matrix_bytes(classifier);
    for (const Layer& l : layers)
        for (const OwnedMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) bytes_per_forward += matrix_bytes(m->view);
    synchronize("weight upload");
}

void DeviceForward::reserve(int n_rows, std::int64_t score_floats) {
    const auto make = [](std::int64_t rows, int width) {
        const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
        DeviceBuffer b(n * sizeof(float));
        poison(b.f32(), n);
        return b;
    };
    if (n_rows > rows_) {
        x_ = make(n_rows, c_.dim);
        xn_ = make(n_rows, c_.dim);
        q_ = make(n_rows, c_.q_dim());
        k_ = make(n_rows, c_.kv_dim());
        v_ = make(n_rows, c_.kv_dim());
        att_ = make(n_rows, c_.q_dim());
        tmp_ = make(n_rows, c_.dim);
        gate_ = make(n_rows, c_.hidden_dim);
        up_ = make(n_rows, c_.hidden_dim);
        rows_ = n_rows;
        ++generation_;
    }
    if (score_floats > score_capacity_) {
        scores_ = make(score_floats, 1);
        score_capacity_ = score_floats;
        ++generation_;
    }
}

void DeviceForward::enqueue_layers(MatmulKernel mm, const int* d_ids, const RowPlacement& rows, const Attend& attend) {
    const int n = rows.n_rows;
    if (n < 1 || n > rows_) fail("DeviceForward: ", n, " rows, activations reserved for ", rows_);
    embedding(w_.embedding.view, d_ids, n, x_.f32());  // [n, dim]
    for (int l = 0; l < c_.n_layers; ++l) {
        const DeviceWeights::Layer& w = w_.layers[static_cast<std::size_t>(l)];
        // Attention half: queries, keys and values of every row, rotated by each row's position.
        rmsnorm(x_.f32(), w.rms_att.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
        matmul(mm, xn_.f32(), n, w.wq.view, q_.f32());  // [n, q_dim]
        matmul(mm, xn_.f32(), n, w.wk.view, k_.f32());  // [n, kv_dim]
        matmul(mm, xn_.f32(), n, w.wv.view, v_.f32());  // [n, kv_dim]
        rope_rows(q_.f32(), c_.n_heads, c_.head_dim, rows, w_.frequencies.f32(), c_.rope_layout);
        rope_rows(k_.f32(), c_.n_kv_heads, c_.head_dim, rows, w_.frequencies.f32(), c_.rope_layout);
        attend(l);  // k, v into the cache or pool; att = attention over it
        matmul(mm, att_.f32(), n, w.wo.view, tmp_.f32());
        residual_add(x_.f32(), tmp_.f32(), std::int64_t{n} * c_.dim);
        // MLP half.
        rmsnorm(x_.f32(), w.rms_ffn.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
        mlp(mm, xn_.f32(), n, w.w1.view, w.w2.view, w.w3.view, gate_.f32(), up_.f32(), tmp_.f32());
        residual_add(x_.f32(), tmp_.f32(), std::int64_t{n} * c_.dim);
    }
}

void DeviceForward::enqueue_logits(MatmulKernel mm, const float* d_rows, int n, float* d_logits) {
    if (n < 1 || n > rows_) fail("DeviceForward: logits of ", n, " rows, activations reserved for ", rows_);
    rmsnorm(d_rows, w_.rms_final.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
    matmul(mm, xn_.f32(), n, w_.classifier, d_logits);  // [n, vocab]
}

}  // namespace glass::cuda
