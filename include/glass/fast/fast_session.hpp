/// \file
/// \brief glass/fast/fast_session.hpp — the same forward pass as transformer.hpp, built for speed.
/// ```text
/// In/out: exactly CpuSession's (session.hpp): ids in, logits [vocab] of the last position out,
/// the KV cache extended. Tests check the two agree (fp32: relative error ≤ 1e-5 on logits).
///
/// What changes, and why each helps:
///  1. Weights are packed once into 32-row panels (packed_weights.hpp), optionally as fp16/bf16
///     (half the bytes) or Q8_0 (~a quarter). Decode reads every weight once per token, so its
///     speed is bytes-per-token ÷ memory bandwidth; fewer bytes is directly more tokens/s.
///  2. Every matrix product is split across a thread pool by panels (thread t takes a contiguous
///     slice of rows). One core cannot saturate the memory bus on its own (~20 GB/s of ~34).
///     Products that read the same input share one parallel region (q/k/v; gate/up) to halve
///     the number of hand-offs.
///  3. Prefill multiplies up to 12 tokens by each loaded weight (register tiling), so it runs
///     at FMA speed instead of memory speed; each product's input is first regrouped into
///     those 12-token tiles (token_tiles.hpp) so the kernel reads it from L1. Prefill attention
///     is two small tiled matrix products per head (S = QKᵀ, O = PV), not one dot product
///     per (query, key) pair.
///  4. Buffers (activations, KV cache, RoPE angles) are sized once here: decode allocates
///     nothing (tests/test_fast_cpu.cpp counts operator new to prove it).
///  5. RoPE's cos/sin are tabulated once ([seq_len, head_dim/2]) instead of recomputed with
///     pow/cos/sin for every head of every token; attention's exp and the MLP's SiLU use a
///     16-lane exp (kernels_avx512.hpp).
///
/// Per chunk of up to `prefill_chunk` positions (decode = a chunk of one):
///   x = embedding rows                                        [n, dim]
///   per layer: xn = rmsnorm(x); q | k | v = xn Wqᵀ | xn Wkᵀ | xn Wvᵀ   (k, v written straight
///              into the cache rows); rope(q, k); att = attention(q, cache)  [n, dim];
///              x += att Woᵀ; xn = rmsnorm(x); h = silu(xn W1ᵀ) ⊙ (xn W3ᵀ)  [n, hidden];
///              x += h W2ᵀ
///   logits = rmsnorm(x[last]) Wclsᵀ                            [vocab]
/// ```
#pragma once

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/rope.hpp"
#include "glass/session.hpp"

namespace glass::fast {

struct FastOptions {
    int threads = 1;
    WeightType weights = WeightType::fp32;
    bool portable_kernels = false;  // force the plain loops (tests; CPUs without AVX-512)
    int prefill_chunk = 512;        // prompt positions per pass: bounds the activation buffers
};

class FastCpuSession : public Session {
public:
    FastCpuSession(const Model& model, FastOptions options)
        : model_(model), c_(model.config), options_(options), pool_(options.threads),
          k_(options.portable_kernels ? portable_kernels() : best_kernels()) {
        if (options.prefill_chunk < 1) fail("prefill chunk ", options.prefill_chunk, " must be ≥ 1");
        pack_weights();
        allocate_buffers();
        tabulate_rope();
    }

    const ModelConfig& config() const override { return c_; }
    int position() const override { return length_; }
    void reset() override { length_ = 0; }
    std::int64_t kv_bytes_used() const override { return c_.kv_bytes_per_token() * length_; }
    // Bytes streamed per decoded token: every packed matrix (classifier included) + the norms.
    std::int64_t weight_bytes() const override { return weight_bytes_; }

    std::span<const float> prefill(std::span<const int> ids) override {
        check_ids(ids);
        for (size_t done = 0; done < ids.size(); done += static_cast<size_t>(chunk_))
            forward(ids.subspan(done, std::min(ids.size() - done, static_cast<size_t>(chunk_))));
        return {logits_, static_cast<size_t>(c_.vocab_size)};
    }
    std::span<const float> decode(int id) override {
        const int one[1] = {id};
        check_ids(one);
        forward(one);
        return {logits_, static_cast<size_t>(c_.vocab_size)};
    }

    int threads() const { return pool_.size(); }
    WeightType weight_type() const { return options_.weights; }
    const char* kernel_name() const { return k_.name; }

private:
    struct Layer {
        const float* rms_att;
        const float* rms_ffn;
        PackedMatrix wq, wk, wv, wo, w1, w2, w3;
    };

    // ---- construction: pack weights, size buffers, tabulate RoPE --------------------------

    void pack_weights() {
        struct Source {
            const float* w;
            int rows, cols;
            PackedMatrix* out;
        };
        layers_.resize(static_cast<size_t>(c_.n_layers));
        std::vector<Source> sources;
        for (int l = 0; l < c_.n_layers; ++l) {
            const LayerWeights& src = model_.layers[static_cast<size_t>(l)];
            Layer& dst = layers_[static_cast<size_t>(l)];
            dst.rms_att = src.rms_att.data();
            dst.rms_ffn = src.rms_ffn.data();
            for (auto [m, out] : {std::pair{&src.wq, &dst.wq}, {&src.wk, &dst.wk}, {&src.wv, &dst.wv},
                                  {&src.wo, &dst.wo}, {&src.w1, &dst.w1}, {&src.w2, &dst.w2},
                                  {&src.w3, &dst.w3}})
                sources.push_back({m->data(), static_cast<int>(m->rows()), static_cast<int>(m->cols()), out});
        }
        sources.push_back({model_.classifier, c_.vocab_size, c_.dim, &classifier_});

        // One arena for all of them, each matrix starting on a 64-byte (cache line) boundary.
        std::vector<std::int64_t> offsets;
        std::int64_t total = 0;
        for (const Source& s : sources) {
            offsets.push_back(total);
            total += (packed_bytes(s.rows, s.cols, options_.weights) + 63) / 64 * 64;
        }
        arena_ = HugeBuffer(static_cast<std::size_t>(total));
        auto pack = [&](int i, int) {  // one matrix per item
            *sources[size_t(i)].out = pack_matrix(sources[size_t(i)].w, sources[size_t(i)].rows, sources[size_t(i)].cols,
                                                  options_.weights, arena_.as<unsigned char>() + offsets[size_t(i)]);
        };
        pool_.run(static_cast<int>(sources.size()), pack);
        weight_bytes_ = 4 * (std::int64_t{2} * c_.n_layers * c_.dim + c_.dim);  // the norms, fp32
        for (const Source& s : sources) weight_bytes_ += s.out->bytes();
    }

    void allocate_buffers() {
        chunk_ = std::min(options_.prefill_chunk, c_.seq_len);
        const std::int64_t n = chunk_, T = pool_.size(), kv_rows = std::int64_t{c_.n_layers} * c_.seq_len;
        // Every buffer rounded up to a multiple of 16 floats (64 bytes) so each starts aligned.
        const std::int64_t sizes[] = {
            n * c_.dim, n * c_.dim, n * c_.dim, n * c_.dim,   // x, xn, q, att
            n * c_.hidden_dim, n * c_.hidden_dim,             // gate, up
            n * std::max(c_.dim, c_.hidden_dim),              // a product's input, packed (prefill)
            c_.vocab_size,                                    // logits
            T * kAttentionRows * c_.seq_len,                  // attention scores, per thread
            std::int64_t{c_.kv_dim()} * c_.seq_len,           // one layer's keys, transposed
            T * kScratchFloats,                               // unpacked weight chunk, per thread
            kv_rows * c_.kv_dim(), kv_rows * c_.kv_dim(),     // K and V cache
            std::int64_t{c_.seq_len} * (c_.head_dim() / 2) * 2,  // RoPE cos, sin
        };
        std::int64_t total = 0;
        for (std::int64_t s : sizes) total += (s + 15) / 16 * 16;
        activations_ = HugeBuffer(static_cast<std::size_t>(total) * 4);
        float* p = activations_.as<float>();
        float** targets[] = {&x_,       &xn_,     &q_,      &att_,     &gate_,      &up_,
                             &packed_x_, &logits_, &scores_, &keys_t_, &scratch_,  &key_cache_,
                             &value_cache_, &rope_cos_};
        for (size_t i = 0; i < std::size(sizes); ++i) {
            *targets[i] = p;
            p += (sizes[i] + 15) / 16 * 16;
        }
        rope_sin_ = rope_cos_ + std::int64_t{c_.seq_len} * (c_.head_dim() / 2);
    }

    // cos/sin of pos · θ^(−2i/head_dim), computed exactly as rope.hpp does, once.
    void tabulate_rope() {
        const int half = c_.head_dim() / 2;
        for (int pos = 0; pos < c_.seq_len; ++pos)
            for (int i = 0; i < half; ++i) {
                const float angle = static_cast<float>(pos) * rope_frequency(i, c_.head_dim(), c_.rope_theta);
                rope_cos_[std::int64_t{pos} * half + i] = std::cos(angle);
                rope_sin_[std::int64_t{pos} * half + i] = std::sin(angle);
            }
    }

    // ---- the forward pass ------------------------------------------------------------------

    void check_ids(std::span<const int> ids) const {
        if (ids.empty()) fail("forward pass needs at least one token");
        if (length_ + static_cast<std::int64_t>(ids.size()) > c_.seq_len)
            fail(length_ == 0 ? "prompt of " : "sequence of ", length_ + static_cast<std::int64_t>(ids.size()),
                 " tokens is longer than the context window of ", c_.seq_len);
        for (int id : ids)
            if (id < 0 || id >= c_.vocab_size)
                fail("token id ", id, " is outside the vocabulary [0, ", c_.vocab_size, ")");
    }

    // y[t] = W x[t] for t < n (+= when accumulate), the rows of W shared among the threads in
    // items of about 1 MB of packed weights (a few panels). Products listed together run in one
    // parallel region. Decode (n = 1) uses the matrix–vector kernel, prefill the register-tiled
    // matrix–matrix one. With `silu_gate`, products are [W1, W3] and each item also applies
    // gate = silu(gate) ⊙ up to its own rows, which it has just computed in both.
    struct Product {
        const PackedMatrix* w;
        const float* x;
        long ldx;
        float* y;
        long ldy;
        bool accumulate;
    };
    static int panels_per_item(const PackedMatrix& w) {
        return static_cast<int>(std::max<std::int64_t>(1, (std::int64_t{1} << 20) / w.panel_bytes()));
    }
    void run_products(std::span<const Product> products, int n, float* silu_gate = nullptr,
                      const float* silu_up = nullptr) {
        int items_before[4] = {}, total = 0;  // at most 3 products are ever listed together
        const size_t listed = silu_gate ? 1 : products.size();  // the MLP pairs share items
        for (size_t i = 0; i < listed; ++i) {
            items_before[i] = total;
            const int per = panels_per_item(*products[i].w);
            total += (products[i].w->panels() + per - 1) / per;
        }
        // Prefill: every product listed together reads the same x; pack it into token tiles
        // once, shared by all threads (token_tiles.hpp says why), one tile per item.
        if (n > 1) {
            const Product& first = products[0];
            auto pack = [&](int tile, int) {
                pack_token_tile(first.x, first.ldx, n, first.w->cols, tile, packed_x_);
            };
            pool_.run(token_tiles(n), pack);
        }
        auto multiply = [&](const Product& p, int p0, int p1, int thread) {
            p1 = std::min(p1, p.w->panels());
            if (n == 1)
                k_.matvec(*p.w, p.x, p.y, p0, p1, p.accumulate);
            else
                k_.matmul(*p.w, packed_x_, n, p.y, p.ldy, p0, p1, p.accumulate,
                          scratch_ + std::int64_t{thread} * kScratchFloats);
        };
        auto job = [&](int item, int thread) {
            size_t i = 0;
            while (i + 1 < listed && item >= items_before[i + 1]) ++i;
            const int per = panels_per_item(*products[i].w);
            const int p0 = (item - items_before[i]) * per, p1 = p0 + per;
            multiply(products[i], p0, p1, thread);
            if (silu_gate) {
                multiply(products[1], p0, p1, thread);
                const int r0 = p0 * kPanel, r1 = std::min(c_.hidden_dim, p1 * kPanel);
                for (int t = 0; t < n && r1 > r0; ++t)
                    k_.silu_mul(silu_gate + std::int64_t{t} * c_.hidden_dim + r0,
                                silu_up + std::int64_t{t} * c_.hidden_dim + r0, r1 - r0);
            }
        };
        pool_.run(total, job);
    }

    void rmsnorm(const float* x, const float* gain, float* y, int n) const {
        for (int t = 0; t < n; ++t) {
            const float* xr = x + std::int64_t{t} * c_.dim;
            float* yr = y + std::int64_t{t} * c_.dim;
            float sum_sq = 0.0f;
            for (int i = 0; i < c_.dim; ++i) sum_sq += xr[i] * xr[i];
            const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(c_.dim) + c_.norm_eps);
            for (int i = 0; i < c_.dim; ++i) yr[i] = gain[i] * (inv_rms * xr[i]);
        }
    }

    // Rotates rows [n, heads·head_dim] at positions start.. by the tabulated angles.
    void rope(float* v, int n, int heads, int start) const {
        const int hd = c_.head_dim(), half = hd / 2;
        const bool adjacent = c_.rope_layout == RopeLayout::adjacent_pairs;
        for (int t = 0; t < n; ++t) {
            const float* cs = rope_cos_ + std::int64_t{start + t} * half;
            const float* sn = rope_sin_ + std::int64_t{start + t} * half;
            for (int h = 0; h < heads; ++h) {
                float* head = v + (std::int64_t{t} * heads + h) * hd;
                for (int i = 0; i < half; ++i) {
                    const int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
                    const float x0 = head[a], x1 = head[b];
                    head[a] = x0 * cs[i] - x1 * sn[i];
                    head[b] = x0 * sn[i] + x1 * cs[i];
                }
            }
        }
    }

    // att[t, head h] = softmax(q_h · K_gᵀ · scale over positions 0..start+t) V_g; one head per
    // item (no two items write the same output). Decode (n = 1): one query, dot products.
    void attention(int layer, int n, int start) {
        if (n > 1) return prefill_attention(layer, n, start);
        const int hd = c_.head_dim(), kv_dim = c_.kv_dim(), group = c_.heads_per_kv_head();
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const float* keys = key_cache_ + std::int64_t{layer} * c_.seq_len * kv_dim;
        const float* values = value_cache_ + std::int64_t{layer} * c_.seq_len * kv_dim;
        auto job = [&](int h, int thread) {
            float* scores = scores_ + std::int64_t{thread} * kAttentionRows * c_.seq_len;
            const int g = h / group;
            const float* q = q_ + h * hd;
            const int visible = start + 1;  // causal: positions 0 .. start
            for (int j = 0; j < visible; ++j)
                scores[j] = k_.dot(q, keys + std::int64_t{j} * kv_dim + g * hd, hd) * scale;
            k_.softmax(scores, visible);
            float* out = att_ + h * hd;
            std::memset(out, 0, sizeof(float) * static_cast<size_t>(hd));
            for (int j = 0; j < visible; ++j)
                k_.axpy(out, scores[j], values + std::int64_t{j} * kv_dim + g * hd, hd);
        };
        pool_.run(c_.n_heads, job);
    }

    // The same for n > 1 new positions, as small matrix products per head and block of
    // kAttentionRows consecutive positions (kernels_avx512.hpp says why):
    //   keys_t[g] = K_gᵀ                  [head_dim, start+n]   once per layer and KV head
    //   S = Q_block K_gᵀ · scale          [rows, visible of the block's last row]
    //   P = softmax of each row over its own visible keys; later keys (causal mask) get 0
    //   att_block = P V_g                 [rows, head_dim]
    void prefill_attention(int layer, int n, int start) {
        const int hd = c_.head_dim(), kv_dim = c_.kv_dim(), group = c_.heads_per_kv_head();
        const int total = start + n, ld = c_.seq_len;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const float* keys = key_cache_ + std::int64_t{layer} * c_.seq_len * kv_dim;
        const float* values = value_cache_ + std::int64_t{layer} * c_.seq_len * kv_dim;
        auto transpose = [&](int g, int) {  // keys_t[g][d][j] = keys[j][g·hd + d]
            float* kt = keys_t_ + std::int64_t{g} * hd * ld;
            for (int j = 0; j < total; ++j)
                for (int d = 0; d < hd; ++d)
                    kt[std::int64_t{d} * ld + j] = keys[std::int64_t{j} * kv_dim + g * hd + d];
        };
        pool_.run(c_.n_kv_heads, transpose);
        auto job = [&](int h, int thread) {
            float* scores = scores_ + std::int64_t{thread} * kAttentionRows * ld;  // [rows][ld]
            const int g = h / group;
            const float* kt = keys_t_ + std::int64_t{g} * hd * ld;
            for (int i0 = 0; i0 < n; i0 += kAttentionRows) {
                const int rows = std::min(kAttentionRows, n - i0);
                const int keys_seen = start + i0 + rows;  // visible to the block's last row
                k_.attention_scores(q_ + std::int64_t{i0} * c_.dim + h * hd, c_.dim, rows, kt, ld,
                                    keys_seen, hd, scale, scores, ld);
                for (int r = 0; r < rows; ++r) {
                    const int visible = start + i0 + r + 1;
                    float* row = scores + std::int64_t{r} * ld;
                    k_.softmax(row, visible);
                    for (int j = visible; j < keys_seen; ++j) row[j] = 0.0f;
                }
                k_.attention_mix(scores, ld, rows, values + g * hd, kv_dim, keys_seen, hd,
                                 att_ + std::int64_t{i0} * c_.dim + h * hd, c_.dim);
            }
        };
        pool_.run(c_.n_heads, job);
    }

    void forward(std::span<const int> ids) {
        const int n = static_cast<int>(ids.size()), start = length_;
        const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden = c_.hidden_dim;
        for (int t = 0; t < n; ++t)
            std::memcpy(x_ + std::int64_t{t} * dim, model_.token_embedding + std::int64_t{ids[t]} * dim,
                        sizeof(float) * static_cast<size_t>(dim));
        for (int l = 0; l < c_.n_layers; ++l) {
            const Layer& w = layers_[static_cast<size_t>(l)];
            // New keys and values land directly in their cache rows start .. start+n-1.
            float* k_rows = key_cache_ + (std::int64_t{l} * c_.seq_len + start) * kv_dim;
            float* v_rows = value_cache_ + (std::int64_t{l} * c_.seq_len + start) * kv_dim;

            rmsnorm(x_, w.rms_att, xn_, n);
            const Product qkv[] = {{&w.wq, xn_, dim, q_, dim, false},
                                   {&w.wk, xn_, dim, k_rows, kv_dim, false},
                                   {&w.wv, xn_, dim, v_rows, kv_dim, false}};
            run_products(qkv, n);
            rope(q_, n, c_.n_heads, start);
            rope(k_rows, n, c_.n_kv_heads, start);
            attention(l, n, start);
            const Product out[] = {{&w.wo, att_, dim, x_, dim, true}};  // x += att Woᵀ
            run_products(out, n);

            rmsnorm(x_, w.rms_ffn, xn_, n);
            const Product gate_up[] = {{&w.w1, xn_, dim, gate_, hidden, false},
                                       {&w.w3, xn_, dim, up_, hidden, false}};
            run_products(gate_up, n, gate_, up_);  // gate = silu(gate) ⊙ up
            const Product down[] = {{&w.w2, gate_, hidden, x_, dim, true}};  // x += h W2ᵀ
            run_products(down, n);
        }
        length_ += n;
        // Only the last position's logits are needed (the next token's distribution).
        rmsnorm(x_ + std::int64_t{n - 1} * dim, model_.rms_final, xn_, 1);
        const Product cls[] = {{&classifier_, xn_, dim, logits_, c_.vocab_size, false}};
        run_products(cls, 1);
    }

    const Model& model_;
    ModelConfig c_;
    FastOptions options_;
    ThreadPool pool_;
    Kernels k_;
    HugeBuffer arena_;        // packed weights
    HugeBuffer activations_;  // everything below
    std::vector<Layer> layers_;
    PackedMatrix classifier_;
    std::int64_t weight_bytes_ = 0;
    int chunk_ = 0;
    int length_ = 0;  // positions in the KV cache
    float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *att_ = nullptr, *gate_ = nullptr,
          *up_ = nullptr, *packed_x_ = nullptr, *logits_ = nullptr, *scores_ = nullptr,
          *keys_t_ = nullptr, *scratch_ = nullptr,
          *key_cache_ = nullptr, *value_cache_ = nullptr, *rope_cos_ = nullptr, *rope_sin_ = nullptr;
};

}  // namespace glass::fast
