/// \file
/// \brief glass/fast/fast_model.hpp — the model packed for the fast path, and the steps every fast forward pass shares.
/// ```text
/// Two things run the fast path: FastCpuSession (one sequence, fast_session.hpp) and
/// FastPagedBackend (a batch of requests over a paged KV pool, fast_paged_backend.hpp). They
/// differ in where K/V live; everything else is this one FastModel:
///
///   weights   every matrix packed once into 32-row panels (packed_weights.hpp), in one arena,
///             as fp32, fp16, bf16 or Q8_0; the norm gains stay the checkpoint's fp32
///   threads   one pool (thread_pool.hpp) and the kernel table chosen for this CPU (kernels.hpp)
///   products  Y = X Wᵀ for n rows X [n, in] -> Y [n, out], the rows of W shared among the
///             threads; q/k/v and gate/up each in one parallel region
///   rmsnorm   row by row
///   RoPE      cos/sin of pos · θ^(−2i/head_dim) tabulated once, [seq_len, head_dim/2]
///   attention one query row against its visible keys: dot products, softmax, weighted sum
///             of values, the keys found through a block table (a session's cache is one
///             block of seq_len positions)
///
/// Every step here computes a row from that row alone, in a fixed order: what a row gets never
/// depends on how many other rows share the pass. The paged backend relies on that (batch
/// invariance); the one exception is opt-in: a session's single decoded row may take the
/// matrix–vector kernel, whose summation order differs from the matrix–matrix kernel's.
/// ```
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/kv_cache.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/packed_weights.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/fast/token_tiles.hpp"
#include "glass/rope.hpp"

namespace glass::fast {

struct FastOptions {
    int threads = 1;
    WeightType weights = WeightType::fp32;
    bool portable_kernels = false;  // force the plain loops (tests, fuzzing); wins over `kernels`
    int prefill_chunk = 512;        // FastCpuSession: prompt positions per pass (bounds its buffers)
    bool flash_attention = true;    // FastCpuSession: prefill attention tile by tile (fast_flash_attention.hpp); false: score rows
    KvType kv = KvType::fp32;       // FastCpuSession: the KV cache in fp32, or int8 (kv_cache.hpp)
    bool int8_activations = false;  // q8/q4 decode: x in int8 blocks too, integer dot products (matvec_int8)
    std::string kernels;            // a kernel set by name ("avx2", kernels.hpp); "": best_kernels()
                                    // (GLASS_KERNELS if set, else the widest set this CPU runs)
};

inline Kernels kernels_for(const FastOptions& o) {
    if (o.portable_kernels) return portable_kernels();
    return o.kernels.empty() ? best_kernels() : kernels_of(o.kernels);
}

/// An int8 KV cache's rows as attend reads them (kv_cache.hpp's KvType::int8): keys and values
/// [rows, kv_dim] int8 and their scales [rows, n_kv_heads]; row r of KV head g stands for
/// scales[r · n_kv_heads + g] · q. `scratch` [kInt8Run · head_dim] floats (one per thread) holds
/// a run of rows dequantized.
struct Int8Rows {
    const std::int8_t* keys;
    const float* key_scales;
    const std::int8_t* values;
    const float* value_scales;
    float* scratch;
};
constexpr int kInt8Run = 32;  // int8 rows dequantized at a time: 8 KB at head_dim 64, stays in L1

/// Which kernel multiplies a single row (n = 1) in run_products.
enum class SingleRow {
    matvec,  ///< the matrix–vector kernel: the quickest way through memory for one decoded token
    matmul,  ///< the matrix–matrix kernel, as for every n: a row's result never depends on n
};

class FastModel {
public:
    struct Layer {
        const float* rms_att;
        const float* rms_ffn;
        PackedMatrix wq, wk, wv, wo, w1, w2, w3;
    };

    FastModel(const Model& model, FastOptions options, SingleRow single_row)
        : model_(model), c_(model.config), options_(options), single_row_(single_row),
          pool_(options.threads), k_(kernels_for(options)) {
        require_llama2_architecture(c_, "the fast CPU path");
        if (options.prefill_chunk < 1) fail("prefill chunk ", options.prefill_chunk, " must be ≥ 1");
        if (options.int8_activations && !is_quantized(options.weights))
            fail("int8 activations multiply q8 or q4 weights' integers; the weights are ", to_string(options.weights));
        if (options.int8_activations) {  // room for the widest input, in int8 blocks of 32
            const int blocks = (std::max(c_.dim, c_.hidden_dim) + kQuantBlock - 1) / kQuantBlock;
            x_q_.resize(static_cast<size_t>(blocks) * kQuantBlock);
            x_scales_.resize(static_cast<size_t>(blocks));
            x_sums_.resize(static_cast<size_t>(blocks));
        }
        pack_weights();
        tabulate_rope();
    }

    const Model& model() const { return model_; }
    const ModelConfig& config() const { return c_; }
    const FastOptions& options() const { return options_; }
    const Layer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
    const PackedMatrix& classifier() const { return classifier_; }
    // Bytes streamed per pass: every packed matrix (classifier included) + the norms.
    std::int64_t weight_bytes() const { return weight_bytes_; }
    ThreadPool& pool() { return pool_; }
    const Kernels& kernels() const { return k_; }
    int threads() const { return pool_.size(); }
    const char* kernel_name() const { return k_.name; }
    // The dot products decode runs: "fp32", or with int8 activations "int8 (avx512-vnni)" etc.
    std::string dot_products() const { return options_.int8_activations ? std::string("int8 (") + k_.int8_dot + ")" : "fp32"; }

    // ---- products ---------------------------------------------------------------------------

    // y[t] = W x[t] for t < n (+= when accumulate).
    struct Product {
        const PackedMatrix* w;
        const float* x;
        long ldx;
        float* y;
        long ldy;
        bool accumulate;
    };

    // Sizes the products' workspace for n rows: allocates only when n is larger than every n
    // before, so passes of at most that many rows allocate nothing.
    void reserve_rows(int n) {
        if (n <= reserved_rows_) return;
        const std::int64_t widest = std::max(c_.dim, c_.hidden_dim);
        const std::int64_t scratch = std::int64_t{pool_.size()} * kScratchFloats;  // 64-byte multiple
        workspace_ = HugeBuffer(static_cast<std::size_t>(scratch + std::int64_t{n} * widest) * 4);
        scratch_ = workspace_.as<float>();
        packed_x_ = scratch_ + scratch;
        reserved_rows_ = n;
    }

    // The products listed, over n rows, the rows of W shared among the threads in items of
    // about 1 MB of packed weights (a few panels); products listed together run in one parallel
    // region and read the same x. The matrix–matrix kernel takes x regrouped into token tiles
    // (token_tiles.hpp), once, shared by every thread. With `silu_gate`, products are [W1, W3]
    // and each item also applies gate = silu(gate) ⊙ up to its own rows, just computed in both.
    void run_products(std::span<const Product> products, int n, float* silu_gate = nullptr,
                      const float* silu_up = nullptr) {
        if (n > reserved_rows_) fail("fast products: ", n, " rows but room for ", reserved_rows_);
        int items_before[4] = {}, total = 0;  // at most 3 products are ever listed together
        const size_t listed = silu_gate ? 1 : products.size();  // the MLP pairs share items
        for (size_t i = 0; i < listed; ++i) {
            items_before[i] = total;
            const int per = panels_per_item(*products[i].w);
            total += (products[i].w->panels() + per - 1) / per;
        }
        const bool matvec = n == 1 && single_row_ == SingleRow::matvec;
        // With int8 activations decode's x goes into int8 blocks once, shared by every thread.
        const bool int8 = matvec && options_.int8_activations;
        if (int8) quantize_input(products[0].x, products[0].w->cols);
        const Int8Vector x8{x_q_.data(), x_scales_.data(), x_sums_.data()};
        // One row needs no regrouping: a tile of one token, [cols][1], is the row itself.
        const float* xp = packed_x_;
        if (n == 1) {
            xp = products[0].x;
        } else {
            const Product& first = products[0];
            auto pack = [&](int tile, int) { pack_token_tile(first.x, first.ldx, n, first.w->cols, tile, packed_x_); };
            pool_.run(token_tiles(n), pack);
        }
        auto multiply = [&](const Product& p, int p0, int p1, int thread) {
            p1 = std::min(p1, p.w->panels());
            if (int8)
                k_.matvec_int8(*p.w, x8, p.y, p0, p1, p.accumulate);
            else if (matvec)
                k_.matvec(*p.w, p.x, p.y, p0, p1, p.accumulate);
            else
                k_.matmul(*p.w, xp, n, p.y, p.ldy, p0, p1, p.accumulate, scratch_ + std::int64_t{thread} * kScratchFloats);
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

    // The rest of a layer once attention has filled att [n, dim], the same for a session and a
    // serving batch:  x += att Woᵀ;  x += W2 (silu(rmsnorm(x) W1ᵀ) ⊙ rmsnorm(x) W3ᵀ).
    // xn [n, dim], gate and up [n, hidden] are scratch.
    void finish_layer(const Layer& w, const float* att, float* x, float* xn, float* gate, float* up, int n) {
        const int dim = c_.dim, hidden = c_.hidden_dim;
        const Product out[] = {{&w.wo, att, dim, x, dim, true}};  // x += att Woᵀ
        run_products(out, n);
        rmsnorm(x, w.rms_ffn, xn, n);
        const Product gate_up[] = {{&w.w1, xn, dim, gate, hidden, false}, {&w.w3, xn, dim, up, hidden, false}};
        run_products(gate_up, n, gate, up);  // gate = silu(gate) ⊙ up
        const Product down[] = {{&w.w2, gate, hidden, x, dim, true}};  // x += h W2ᵀ
        run_products(down, n);
    }

    // ---- per-row steps ----------------------------------------------------------------------

    // y[t] = gain ⊙ x[t] / rms(x[t]) for n rows [n, dim].
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

    // Rotates one row [heads · head_dim] at position `pos` by the tabulated angles.
    void rope(float* v, int heads, int pos) const {
        const int hd = c_.head_dim, half = hd / 2;
        const bool adjacent = c_.rope_layout == RopeLayout::adjacent_pairs;
        const float* cs = rope_cos_.data() + std::int64_t{pos} * half;
        const float* sn = rope_sin_.data() + std::int64_t{pos} * half;
        for (int h = 0; h < heads; ++h) {
            float* head = v + std::int64_t{h} * hd;
            for (int i = 0; i < half; ++i) {
                const int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
                const float x0 = head[a], x1 = head[b];
                head[a] = x0 * cs[i] - x1 * sn[i];
                head[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }

    // One query row's attention for the query heads of KV heads [g0, g1), over positions
    // 0 .. visible-1 of one sequence whose cache rows come in blocks: position j is row
    //   table[j / block_size] · block_size + j % block_size   of `keys` and `values` [rows, kv_dim].
    // For each query head h (of KV head g = h / group):
    //   s_j = q_h · k_j,g · scale;  p = softmax(s);  out_h = Σ_j p_j · v_j,g   (in order of j)
    // Block by block (a block's rows are contiguous), each KV head, each of its query heads in
    // turn, one kernel call per block. Each head's sums run in the same order whatever the
    // range, the block size or the other rows: only its numbers count.
    // Given `int8` (an int8 cache; keys and values are then unused), a block's rows of KV head g
    // are dequantized kInt8Run at a time into int8->scratch (the values s · q the reference's
    // int8 cache holds), once for all the group's query heads, which then read them in fp32.
    // q, out: the row's [heads · head_dim]; scores: [heads in the range][visible].
    void attend(const float* q, const float* keys, const float* values, const int* table, int block_size,
                int visible, int g0, int g1, float* scores, float* out, const Int8Rows* int8 = nullptr) const {
        const int hd = c_.head_dim, kv_dim = c_.kv_dim(), group = c_.heads_per_kv_head(), G = c_.n_kv_heads;
        const int h0 = g0 * group;
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // Calls f(first position, positions, their rows, KV head g) for every run of rows: a block,
        // cut into runs of kInt8Run with an int8 cache. f gets the rows in fp32 and their stride.
        auto each_run = [&](const float* cache, const std::int8_t* cache_q, const float* cache_scales, auto&& f) {
            for (int b = 0, j0 = 0; j0 < visible; ++b, j0 += block_size) {
                const int m = std::min(block_size, visible - j0);
                const std::int64_t row0 = std::int64_t{table[b]} * block_size;
                for (int g = g0; g < g1; ++g)
                    for (int r0 = 0; r0 < m; r0 += int8 ? kInt8Run : m) {
                        const int n = int8 ? std::min(kInt8Run, m - r0) : m;
                        const std::int64_t row = row0 + r0, at = row * kv_dim + std::int64_t{g} * hd;
                        if (!int8) {
                            f(j0 + r0, n, cache + at, long{kv_dim}, g);
                            continue;
                        }
                        k_.dequantize_rows(cache_q + at, kv_dim, cache_scales + row * G + g, G, n, hd, int8->scratch);
                        f(j0 + r0, n, static_cast<const float*>(int8->scratch), long{hd}, g);
                    }
            }
        };
        each_run(keys, int8 ? int8->keys : nullptr, int8 ? int8->key_scales : nullptr,
                 [&](int j0, int n, const float* rows, long ld, int g) {
                     for (int h = g * group; h < (g + 1) * group; ++h)
                         k_.dot_rows(q + std::int64_t{h} * hd, rows, ld, n, hd, scale,
                                     scores + std::int64_t{h - h0} * visible + j0);
                 });
        for (int h = h0; h < g1 * group; ++h) k_.softmax(scores + std::int64_t{h - h0} * visible, visible);
        std::memset(out + std::int64_t{h0} * hd, 0, sizeof(float) * static_cast<size_t>((g1 - g0) * group * hd));
        each_run(values, int8 ? int8->values : nullptr, int8 ? int8->value_scales : nullptr,
                 [&](int j0, int n, const float* rows, long ld, int g) {
                     for (int h = g * group; h < (g + 1) * group; ++h)
                         k_.add_rows(out + std::int64_t{h} * hd, scores + std::int64_t{h - h0} * visible + j0, rows, ld,
                                     n, hd);
                 });
    }

private:
    // x [cols] -> x_q_, x_scales_ (quantize.hpp's quantize_activations) and each block's Σ q.
    void quantize_input(const float* x, int cols) {
        quantize_activations(x, cols, x_q_.data(), x_scales_.data());
        for (int b = 0; b * kQuantBlock < cols; ++b) {
            std::int32_t sum = 0;
            for (int i = 0; i < kQuantBlock; ++i) sum += x_q_[static_cast<size_t>(b * kQuantBlock + i)];
            x_sums_[static_cast<size_t>(b)] = sum;
        }
    }

    static int panels_per_item(const PackedMatrix& w) {
        return static_cast<int>(std::max<std::int64_t>(1, (std::int64_t{1} << 20) / w.panel_bytes()));
    }

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

    // cos/sin of pos · θ^(−2i/head_dim), computed exactly as rope.hpp does, once.
    void tabulate_rope() {
        const int half = c_.head_dim / 2;
        rope_cos_.resize(static_cast<size_t>(c_.seq_len) * static_cast<size_t>(half));
        rope_sin_.resize(rope_cos_.size());
        for (int pos = 0; pos < c_.seq_len; ++pos)
            for (int i = 0; i < half; ++i) {
                const float angle = static_cast<float>(pos) * rope_frequency(i, c_.head_dim, c_.rope_theta);
                rope_cos_[static_cast<size_t>(pos) * half + i] = std::cos(angle);
                rope_sin_[static_cast<size_t>(pos) * half + i] = std::sin(angle);
            }
    }

    const Model& model_;
    ModelConfig c_;
    FastOptions options_;
    SingleRow single_row_;
    ThreadPool pool_;
    Kernels k_;
    HugeBuffer arena_;                       // packed weights
    std::vector<Layer> layers_;
    PackedMatrix classifier_;
    std::int64_t weight_bytes_ = 0;
    std::vector<float> rope_cos_, rope_sin_;  // [seq_len, head_dim/2]
    HugeBuffer workspace_;                   // per-thread scratch, then the packed rows
    int reserved_rows_ = 0;
    float* scratch_ = nullptr;   // [threads][kScratchFloats]: one unpacked weight chunk each
    float* packed_x_ = nullptr;  // [rows · max(dim, hidden)]: a product's input in token tiles
    std::vector<std::int8_t> x_q_;      // int8 activations: decode's x in blocks of 32 [blocks · 32]
    std::vector<float> x_scales_;       // [blocks]
    std::vector<std::int32_t> x_sums_;  // [blocks] Σ q per block (matvec_int8's offset correction)
};

}  // namespace glass::fast
