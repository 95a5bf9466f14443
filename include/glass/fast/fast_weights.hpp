/// \file
/// \brief glass/fast/fast_weights.hpp — a model's weights as the fast path reads them: every
/// matrix packed once into 32-row panels in one arena, the norm gains, the RoPE tables.
/// ```text
/// In:  a glass::Model (fp32 matrices, or the file's own blocks when it was loaded as stored),
///      the panel type asked for (FastOptions::weights), the thread pool that packs.
/// Out: per layer a FastLayer: wq wk wv wo w1 w2 w3 as PackedMatrix (packed_weights.hpp,
///      packed_kquants.hpp), the norm gains fp32 with Gemma's offset added, the family deltas'
///      vectors (null where the model has none), its sliding window and RoPE table; the
///      classifier; cos/sin of pos · frequency, one table [seq_len, head_dim/2] per distinct
///      set of frequencies.
///
/// Everything here happens once, when a FastModel is made; nothing changes afterwards. The
/// products, norms and attention that read these weights are fast_model.hpp's.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/rope.hpp"

namespace glass::fast {

/// One layer as the fast path reads it (FastModel::Layer). Norm gains are fp32 with the config's
/// offset already added (Gemma's x·(1+w)), so every norm here is y = g ⊙ x / rms(x). The family
/// deltas' tensors are null where the model has none.
struct FastLayer {
    const float* rms_att;
    const float* rms_ffn;
    PackedMatrix wq, wk, wv, wo, w1, w2, w3;
    const float* bq = nullptr;        // [q_dim]   q/k/v biases (Qwen2)
    const float* bk = nullptr;        // [kv_dim]
    const float* bv = nullptr;        // [kv_dim]
    const float* q_norm = nullptr;    // [head_dim] per-head q/k norms (Qwen3, Gemma 3)
    const float* k_norm = nullptr;    // [head_dim]
    const float* post_att = nullptr;  // [dim] sandwich norms (Gemma 2, 3)
    const float* post_mlp = nullptr;  // [dim]
    int window = 0;      // sliding window (Mistral; Gemma's local layers); 0: every earlier position
    int rope_table = 0;  // its cos/sin table (Gemma 3's local layers turn by a base of their own)
};

/// The packed model: made once by FastModel's constructor, read by every pass.
class FastWeights {
public:
    // Packs every matrix of `model` (as `weights`: a panel type, or `stored` for each file type's
    // own) on the pool's threads; int8_activations refuses a matrix without integer panels.
    // `first_layer`: the model layer model.layers[0] is (a pipeline stage's shard, dist/shard.hpp,
    // holds layers first_layer ..; windows and RoPE bases go by the whole model's numbering).
    FastWeights(const Model& model, WeightType weights, bool int8_activations, ThreadPool& pool, int first_layer = 0)
        : c_(model.config), first_layer_(first_layer) {
        pack(model, weights, int8_activations, pool);
        tabulate_rope();
    }

    const FastLayer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
    const PackedMatrix& classifier() const { return classifier_; }
    const float* final_gain() const { return final_gain_; }  // [dim], offset added
    // Bytes streamed per pass: every packed matrix (classifier included) + the norms and biases.
    std::int64_t bytes() const { return weight_bytes_; }
    // cos and sin of pos · frequency(i), i < head_dim/2, in RoPE table `table` (FastLayer::rope_table).
    const float* rope_cos(int table, int pos) const { return rope_cos_.data() + table_at(table, pos); }
    const float* rope_sin(int table, int pos) const { return rope_sin_.data() + table_at(table, pos); }

    // The panel types of the model's matrices with how many of each, most first: "q4_k 14, q6_k 3"
    // (a file of mixed types packed as `stored`), or one name.
    std::string panel_types() const {
        std::vector<std::pair<int, std::string>> counts;
        auto count = [&](const PackedMatrix& m) {
            for (auto& [n, name] : counts)
                if (name == to_string(m.type)) return void(++n);
            counts.emplace_back(1, to_string(m.type));
        };
        for (const FastLayer& l : layers_)
            for (const PackedMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) count(*m);
        if (classifier_.panels() > 0) count(classifier_);
        if (counts.size() == 1) return counts[0].second;
        std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        std::string out;
        for (const auto& [n, name] : counts) out += (out.empty() ? "" : ", ") + name + " " + std::to_string(n);
        return out;
    }

private:
    std::int64_t table_at(int table, int pos) const {
        const int half = c_.head_dim / 2;
        return (std::int64_t{table} * c_.seq_len + pos) * half;
    }

    // A norm gain as the fast path reads it: the stored one, or (Gemma's Hugging Face form,
    // norm_weight_offset 1) offset + w, computed once here. Null for a tensor the model lacks.
    const float* gain(const float* stored, std::int64_t size) {
        if (size == 0 || stored == nullptr) return nullptr;
        if (c_.norm_weight_offset == 0.0f) return stored;
        std::vector<float>& g = offset_gains_.emplace_back(static_cast<size_t>(size));
        for (std::int64_t i = 0; i < size; ++i) g[static_cast<size_t>(i)] = c_.norm_weight_offset + stored[i];
        return g.data();
    }
    const float* gain(const ConstVectorMap& v) { return gain(v.data(), v.size()); }

    void pack(const Model& model, WeightType weights, bool int8_activations, ThreadPool& pool) {
        struct Source {
            const float* w;       // fp32 view (null when the model kept the stored type)
            StoredMatrix stored;  // the file's bytes: packed from, when there are any
            int rows, cols;
            PackedMatrix* out;
        };
        layers_.resize(static_cast<size_t>(c_.n_layers));
        std::vector<Source> sources;
        for (int l = 0; l < c_.n_layers; ++l) {
            const LayerWeights& src = model.layers[static_cast<size_t>(l)];
            FastLayer& dst = layers_[static_cast<size_t>(l)];
            dst.rms_att = gain(src.rms_att);
            dst.rms_ffn = gain(src.rms_ffn);
            dst.q_norm = gain(src.q_norm);
            dst.k_norm = gain(src.k_norm);
            dst.post_att = gain(src.post_attention_norm);
            dst.post_mlp = gain(src.post_mlp_norm);
            dst.bq = src.bq.size() ? src.bq.data() : nullptr;
            dst.bk = src.bk.size() ? src.bk.data() : nullptr;
            dst.bv = src.bv.size() ? src.bv.data() : nullptr;
            dst.window = c_.window_of_layer(first_layer_ + l);
            const LayerWeights::Stored& st = src.stored;
            for (auto [m, stored, out] : {std::tuple{&src.wq, &st.wq, &dst.wq}, {&src.wk, &st.wk, &dst.wk},
                                          {&src.wv, &st.wv, &dst.wv}, {&src.wo, &st.wo, &dst.wo},
                                          {&src.w1, &st.w1, &dst.w1}, {&src.w2, &st.w2, &dst.w2},
                                          {&src.w3, &st.w3, &dst.w3}})
                sources.push_back({m->data(), *stored, static_cast<int>(m->rows()), static_cast<int>(m->cols()), out});
        }
        if (model.classifier || model.stored_classifier.bytes)  // (a pipeline stage before the last has none)
            sources.push_back({model.classifier, model.stored_classifier, c_.vocab_size, c_.dim, &classifier_});
        final_gain_ = gain(model.rms_final, c_.dim);

        // One arena for all of them, each matrix starting on a 64-byte (cache line) boundary.
        // Each matrix's panel type: the one asked for, or with `stored` its file's own.
        std::vector<std::int64_t> offsets;
        std::vector<WeightType> types;
        std::int64_t total = 0;
        for (const Source& s : sources) {
            types.push_back(panel_type_of(s.stored, weights));
            if (int8_activations && !has_integer_weights(types.back()))
                fail("int8 activations multiply integer weights (q8, q4, q4_k, q5_k, q6_k); a [", s.rows, ", ", s.cols,
                     "] matrix of this model is ", to_string(types.back()));
            offsets.push_back(total);
            total += (packed_bytes(s.rows, s.cols, types.back()) + 63) / 64 * 64;
        }
        arena_ = HugeBuffer(static_cast<std::size_t>(total));
        auto pack = [&](int i, int) {  // one matrix per item, from the file's own bytes where known
            const Source& s = sources[size_t(i)];
            unsigned char* dest = arena_.as<unsigned char>() + offsets[size_t(i)];
            *s.out = s.stored.bytes ? pack_stored_matrix(s.stored, s.rows, s.cols, types[size_t(i)], dest)
                                    : pack_matrix(s.w, s.rows, s.cols, types[size_t(i)], dest);
        };
        pool.run(static_cast<int>(sources.size()), pack);
        // The panels now hold every weight: the file's pages need not stay in this process.
        for (const Source& s : sources)
            if (s.stored.bytes && s.stored.in_file) release_file_pages(s.stored.bytes, static_cast<size_t>(ggml_bytes(s.stored.type, std::int64_t{s.rows} * s.cols)));
        weight_bytes_ = model.rms_final ? 4 * std::int64_t{c_.dim} : 0;  // the final norm (a pipeline stage
                                                                          // before the last has none);
                                                                          // each layer's norms and biases, fp32:
        for (const LayerWeights& src : model.layers)
            for (const ConstVectorMap* v : {&src.rms_att, &src.rms_ffn, &src.bq, &src.bk, &src.bv, &src.q_norm,
                                            &src.k_norm, &src.post_attention_norm, &src.post_mlp_norm})
                weight_bytes_ += 4 * v->size();
        for (const Source& s : sources) weight_bytes_ += s.out->bytes();
    }

    // cos/sin of pos · frequency(i), the frequencies computed exactly as rope.hpp does (base,
    // then scaling), once: one table [seq_len, head_dim/2] per distinct set of frequencies. Most
    // models have one; Gemma 3's local layers turn by a base of their own (rope_theta_of_layer).
    void tabulate_rope() {
        const int half = c_.head_dim / 2;
        const std::int64_t table_floats = std::int64_t{c_.seq_len} * half;
        std::vector<std::vector<float>> tables;  // the frequencies of each table
        for (int l = 0; l < c_.n_layers; ++l) {
            const RopeScaling scaling = c_.rope_scaling_of_layer(first_layer_ + l);
            std::vector<float> f(static_cast<size_t>(half));
            for (int i = 0; i < half; ++i)
                f[static_cast<size_t>(i)] = rope_scaled_frequency(rope_frequency(i, c_.head_dim, c_.rope_theta_of_layer(first_layer_ + l)), scaling, i);
            const auto same = std::find(tables.begin(), tables.end(), f);
            layers_[static_cast<size_t>(l)].rope_table = static_cast<int>(same - tables.begin());
            if (same == tables.end()) tables.push_back(std::move(f));
        }
        rope_cos_.resize(tables.size() * static_cast<size_t>(table_floats));
        rope_sin_.resize(rope_cos_.size());
        for (size_t t = 0; t < tables.size(); ++t)
            for (int pos = 0; pos < c_.seq_len; ++pos)
                for (int i = 0; i < half; ++i) {
                    const float angle = static_cast<float>(pos) * tables[t][static_cast<size_t>(i)];
                    const size_t at = t * static_cast<size_t>(table_floats) + static_cast<size_t>(pos) * half + i;
                    rope_cos_[at] = std::cos(angle);
                    rope_sin_[at] = std::sin(angle);
                }
    }

    ModelConfig c_;
    int first_layer_ = 0;
    HugeBuffer arena_;  // the packed matrices
    std::vector<FastLayer> layers_;
    PackedMatrix classifier_;
    std::int64_t weight_bytes_ = 0;
    std::vector<float> rope_cos_, rope_sin_;       // [tables][seq_len, head_dim/2]
    const float* final_gain_ = nullptr;            // [dim]
    std::deque<std::vector<float>> offset_gains_;  // gains with Gemma's offset added (stable addresses)
};

}  // namespace glass::fast
