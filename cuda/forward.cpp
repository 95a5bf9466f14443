/// \file
/// \brief cuda/forward.cpp — the model's weights uploaded once, and the one layer loop of every
/// CUDA forward pass (forward.hpp says how CudaSession and CudaPagedBackend share it).
#include <algorithm>
#include <cmath>

#include "glass/checkpoint.hpp"
#include "glass/rope.hpp"
#include "cuda_session.hpp"  // require_device; forward.hpp

namespace glass::cuda {

// The frequencies of apply_rope (glass/rope.hpp), by its own two functions.
static std::vector<float> host_rope_frequencies(int head_dim, float theta, const RopeScaling& scaling) {
    std::vector<float> f(static_cast<std::size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i)
        f[static_cast<std::size_t>(i)] = rope_scaled_frequency(rope_frequency(i, head_dim, theta), scaling, i);
    return f;
}

DeviceBuffer rope_frequencies(int head_dim, float theta, const RopeScaling& scaling) {
    return to_device(std::span<const float>(host_rope_frequencies(head_dim, theta, scaling)));
}

static DeviceBuffer upload_vector(const float* host, int n) {
    return to_device(std::span<const float>(host, static_cast<std::size_t>(n)));
}

// A norm gain as the device multiplies by it: offset + w, the fp32 sum the CPU's rmsnorm forms
// (glass/rmsnorm.hpp), so the product that follows is the same. Empty for a tensor the model lacks.
static DeviceBuffer upload_gain(const ConstVectorMap& w, float offset) {
    if (w.size() == 0) return {};
    std::vector<float> g(static_cast<std::size_t>(w.size()));
    for (Eigen::Index i = 0; i < w.size(); ++i) g[static_cast<std::size_t>(i)] = offset + w(i);
    return to_device(std::span<const float>(g));
}

// A bias as stored; empty when the model has none.
static DeviceBuffer upload_optional(const ConstVectorMap& v) {
    return v.size() == 0 ? DeviceBuffer{} : upload_vector(v.data(), static_cast<int>(v.size()));
}

AttentionDims attention_dims(const ModelConfig& c, int layer) {
    return {c.n_heads, c.n_kv_heads, c.head_dim, c.window_of_layer(layer), c.attn_logit_softcap};
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

DeviceWeights::DeviceWeights(const Model& model, WeightType type, int first)
    : first_layer(first) {
    const ModelConfig& c = model.config;
    require_fp32_weights(model, "the CUDA path");
    const float offset = c.norm_weight_offset;
    std::vector<std::vector<float>> tables;  // the frequencies of each distinct RoPE table
    for (int index = 0; index < c.n_layers; ++index) {
        const LayerWeights& w = model.layers[static_cast<std::size_t>(index)];
        Layer l;
        l.rms_att = upload_gain(w.rms_att, offset);
        l.rms_ffn = upload_gain(w.rms_ffn, offset);
        l.bq = upload_optional(w.bq);
        l.bk = upload_optional(w.bk);
        l.bv = upload_optional(w.bv);
        l.q_norm = upload_gain(w.q_norm, offset);
        l.k_norm = upload_gain(w.k_norm, offset);
        l.post_att = upload_gain(w.post_attention_norm, offset);
        l.post_mlp = upload_gain(w.post_mlp_norm, offset);
        // Norms go by the config's flags (as in the reference); a bias is added where it exists.
        if ((c.qk_norm && (!l.q_norm.data() || !l.k_norm.data())) ||
            (c.sandwich_norms && (!l.post_att.data() || !l.post_mlp.data())))
            fail("the CUDA path: layer ", index, " lacks a norm gain its config asks for",
                 c.qk_norm ? " (qk_norm: q_norm, k_norm)" : "", c.sandwich_norms ? " (sandwich_norms: post-attention, post-MLP)" : "");
        const std::vector<float> f =
            host_rope_frequencies(c.head_dim, c.rope_theta_of_layer(first + index), c.rope_scaling_of_layer(first + index));
        const auto same = std::find(tables.begin(), tables.end(), f);
        l.rope_table = static_cast<int>(same - tables.begin());
        if (same == tables.end()) tables.push_back(f);
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
    // A pipeline stage's shard (glass/dist/shard.hpp) holds the embedding only at stage 0 and the
    // final norm and classifier only at the last stage; the others stay empty.
    if (model.token_embedding)
        embedding = upload_weights(model.embedding_table(), has_integer_weights(type) ? WeightType::f32 : type);
    if (c.shared_classifier && model.token_embedding && !has_integer_weights(type)) {
        classifier = embedding.view;  // one table, read by both ends of the model
    } else if (model.classifier) {
        classifier_own = upload_weights(model.output_classifier(), type);
        classifier = classifier_own.view;
    }
    if (model.rms_final) rms_final = upload_gain(model.final_norm(), offset);
    for (const std::vector<float>& f : tables) rope_tables.push_back(to_device(std::span<const float>(f)));
    // Bytes read per forward pass: every layer's matrices and the classifier as stored (scales
    // included), the fp32 norm gains and biases; of the embedding table one row, which
    // glass::Model's weight_bytes leaves out too.
    bytes_per_forward = static_cast<std::int64_t>(rms_final.bytes()) + matrix_bytes(classifier);
    for (const Layer& l : layers) {
        for (const OwnedMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3})
            bytes_per_forward += matrix_bytes(m->view);
        for (const DeviceBuffer* v :
             {&l.rms_att, &l.rms_ffn, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm, &l.post_att, &l.post_mlp})
            bytes_per_forward += static_cast<std::int64_t>(v->bytes());
    }
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
    const std::int64_t stream = std::int64_t{n} * c_.dim;  // numbers in x [n, dim]
    if (d_ids && !share_.split()) {
        embedding(w_.embedding.view, d_ids, n, x_.f32());  // [n, dim]
        if (c_.embedding_scale != 1.0f) scale_values(x_.f32(), stream, c_.embedding_scale);  // Gemma: × √dim
    } else if (d_ids) {  // my vocabulary rows, zeros elsewhere, scaled, then added across ranks
        embedding_slice(w_.embedding.view, share_.vocab_begin, d_ids, n, x_.f32());
        if (c_.embedding_scale != 1.0f) scale_values(x_.f32(), stream, c_.embedding_scale);
        share_.add_across_ranks(x_.f32(), stream);
    }
    for (int l = 0; l < c_.n_layers; ++l) {
        const DeviceWeights::Layer& w = w_.layers[static_cast<std::size_t>(l)];
        // Attention half: queries, keys and values of every row, rotated by each row's position.
        rmsnorm(x_.f32(), w.rms_att.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
        matmul(mm, xn_.f32(), n, w.wq.view, q_.f32());  // [n, q_dim]
        matmul(mm, xn_.f32(), n, w.wk.view, k_.f32());  // [n, kv_dim]
        matmul(mm, xn_.f32(), n, w.wv.view, v_.f32());  // [n, kv_dim]
        if (w.bq.data()) add_bias_rows(q_.f32(), w.bq.f32(), n, c_.q_dim());  // Qwen2
        if (w.bk.data()) add_bias_rows(k_.f32(), w.bk.f32(), n, c_.kv_dim());
        if (w.bv.data()) add_bias_rows(v_.f32(), w.bv.f32(), n, c_.kv_dim());
        if (c_.qk_norm) {  // Qwen3, Gemma 3: every head of q and k normed on its own, in place
            rmsnorm(q_.f32(), w.q_norm.f32(), n * c_.n_heads, c_.head_dim, c_.norm_eps, q_.f32());
            rmsnorm(k_.f32(), w.k_norm.f32(), n * c_.n_kv_heads, c_.head_dim, c_.norm_eps, k_.f32());
        }
        const float* frequencies = w_.rope_tables[static_cast<std::size_t>(w.rope_table)].f32();
        rope_rows(q_.f32(), c_.n_heads, c_.head_dim, rows, frequencies, c_.rope_layout);
        rope_rows(k_.f32(), c_.n_kv_heads, c_.head_dim, rows, frequencies, c_.rope_layout);
        attend(w_.first_layer + l);  // k, v into the cache or pool; att = attention over it
        matmul(mm, att_.f32(), n, w.wo.view, tmp_.f32());
        add_to_stream(tmp_.f32(), c_.sandwich_norms ? w.post_att.f32() : nullptr, n);
        // MLP half.
        rmsnorm(x_.f32(), w.rms_ffn.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
        mlp(mm, xn_.f32(), n, w.w1.view, w.w2.view, w.w3.view, gate_.f32(), up_.f32(), tmp_.f32(), c_.mlp_activation);
        add_to_stream(tmp_.f32(), c_.sandwich_norms ? w.post_mlp.f32() : nullptr, n);
    }
}

// x += y [n, dim]; given a sandwich norm's gain (Gemma 2, 3), y is normed first, into xn. On a
// split model y is this rank's partial sum (Wo's or W2's product over its heads or hidden units),
// completed across ranks first.
void DeviceForward::add_to_stream(float* y, const float* sandwich_gain, int n) {
    if (share_.split()) share_.add_across_ranks(y, std::int64_t{n} * c_.dim);
    if (sandwich_gain) {
        rmsnorm(y, sandwich_gain, n, c_.dim, c_.norm_eps, xn_.f32());
        y = xn_.f32();
    }
    residual_add(x_.f32(), y, std::int64_t{n} * c_.dim);
}

void DeviceForward::enqueue_logits(MatmulKernel mm, const float* d_rows, int n, float* d_logits) {
    if (n < 1 || n > rows_) fail("DeviceForward: logits of ", n, " rows, activations reserved for ", rows_);
    rmsnorm(d_rows, w_.rms_final.f32(), n, c_.dim, c_.norm_eps, xn_.f32());
    matmul(mm, xn_.f32(), n, w_.classifier, d_logits);  // [n, vocab]
    if (c_.final_logit_softcap > 0.0f)  // Gemma 2
        soft_cap(d_logits, std::int64_t{n} * c_.vocab_size, c_.final_logit_softcap);
}

}  // namespace glass::cuda
