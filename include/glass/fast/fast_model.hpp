/// \file
/// \brief glass/fast/fast_model.hpp — the model packed for the fast path, and the steps every fast forward pass shares.
/// ```text
/// Two things run the fast path: FastCpuSession (one sequence, fast_session.hpp) and
/// FastPagedBackend (a batch of requests over a paged KV pool, fast_paged_backend.hpp). They
/// differ in where K/V live; everything else is this one FastModel:
///
///   weights   every matrix packed once into 32-row panels (FastWeights, fast_weights.hpp), in
///             one arena, as fp32, fp16, bf16, Q8_0, Q4_0 or a k-quant — from the file's own
///             blocks when the model kept them (LoadWeights::as_stored: no fp32 copy ever
///             exists); the norm gains fp32; the RoPE tables
///   threads   one pool (thread_pool.hpp) and the kernel table chosen for this CPU (kernels.hpp)
///   products  Y = X Wᵀ for n rows X [n, in] -> Y [n, out], the rows of W shared among the
///             threads; q/k/v and gate/up each in one parallel region
///   rmsnorm   row by row
///   RoPE      each row turned by the angles FastWeights tabulated, [seq_len, head_dim/2]
///   attention one query row against its visible keys: dot products, softmax, weighted sum
///             of values, the keys found through a block table (a session's cache is one
///             block of seq_len positions)
///
/// The model families (config.hpp) run here too. Each delta from Llama 2 is one step below, named
/// where it happens: the embedding scale (embed), q/k/v biases and per-head q/k norms
/// (attention_inputs), a RoPE table per base (Gemma 3's local layers), the score scale, soft-cap
/// and sliding window (attend), sandwich norms and GELU-tanh (finish_layer), the logit soft-cap
/// (logits). Gemma's norm offset is added to the gains once, when the model is packed
/// (fast_weights.hpp).
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
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/kv_cache.hpp"
#include "glass/mlp.hpp"
#include "glass/dist/rank_share.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/fast_weights.hpp"
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
    std::string kernels = {};       // a kernel set by name ("avx2", kernels.hpp); "": best_kernels()
                                    // (GLASS_KERNELS if set, else the widest set this CPU runs)
};

/// One rank's share of a split model (dist/rank_share.hpp: its first layer, its vocabulary rows,
/// and the all-reduce that completes its partial sums). Default: one process, the whole model.
using dist::RankShare;

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
    using Layer = FastLayer;  // fast_weights.hpp

    FastModel(const Model& model, FastOptions options, SingleRow single_row, RankShare share = {})
        : model_(model), c_(model.config), options_(checked(options)), single_row_(single_row), share_(std::move(share)),
          pool_(options.threads), k_(kernels_for(options)),
          w_(model, options.weights, options.int8_activations, pool_, share_.first_layer) {
        if (options.int8_activations) {  // room for the widest input, in int8 blocks of 32
            const int blocks = (widest_input() + kQuantBlock - 1) / kQuantBlock;
            x_q_.resize(static_cast<size_t>(blocks) * kQuantBlock);
            x_scales_.resize(static_cast<size_t>(blocks));
            x_sums_.resize(static_cast<size_t>(blocks));
        }
    }

    const Model& model() const { return model_; }
    const ModelConfig& config() const { return c_; }
    const FastOptions& options() const { return options_; }
    const Layer& layer(int l) const { return w_.layer(l); }
    const PackedMatrix& classifier() const { return w_.classifier(); }
    const float* final_gain() const { return w_.final_gain(); }  // [dim], offset added
    // Bytes streamed per pass: every packed matrix (classifier included) + the norms.
    std::int64_t weight_bytes() const { return w_.bytes(); }
    ThreadPool& pool() { return pool_; }
    const Kernels& kernels() const { return k_; }
    int threads() const { return pool_.size(); }
    const char* kernel_name() const { return k_.name; }
    // The panel types of the model's matrices with how many of each: "q4_k 14, q6_k 3".
    std::string panel_types() const { return w_.panel_types(); }
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
        const std::int64_t widest = widest_input();
        const std::int64_t scratch = std::int64_t{pool_.size()} * kScratchFloats;  // 64-byte multiple
        workspace_ = HugeBuffer(static_cast<std::size_t>(scratch + std::int64_t{n} * widest) * 4);
        scratch_ = workspace_.as<float>();
        packed_x_ = scratch_ + scratch;
        reserved_rows_ = n;
    }

    // The products listed, over n rows, the rows of W shared among the threads in items of
    // about 1 MB of packed weights, at least 4 per thread (panels_per_item, thread_pool.hpp);
    // products listed together run in one parallel region and read the same x. The
    // matrix–matrix kernel takes x regrouped into token tiles (token_tiles.hpp), once, shared by
    // every thread. With `silu_gate`, products are [W1, W3] and each item also applies
    // gate = act(gate) ⊙ up to its own rows, just computed in both.
    void run_products(std::span<const Product> products, int n, float* silu_gate = nullptr,
                      const float* silu_up = nullptr) {
        if (n > reserved_rows_) fail("fast products: ", n, " rows but room for ", reserved_rows_);
        const size_t listed = silu_gate ? 1 : products.size();  // the MLP pairs share items
        ItemLayout items;  // thread_pool.hpp
        for (size_t i = 0; i < listed; ++i) items.add(products[i].w->panels(), products[i].w->panel_bytes(), pool_.size());
        const bool matvec = n == 1 && single_row_ == SingleRow::matvec;
        // With int8 activations decode's x goes into int8 blocks once, shared by every thread.
        const bool int8 = matvec && options_.int8_activations;
        if (int8) k_.quantize_int8(products[0].x, products[0].w->cols, x_q_.data(), x_scales_.data(), x_sums_.data());
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
            while (i + 1 < listed && item >= items.items_before[i + 1]) ++i;
            const int p0 = (item - items.items_before[i]) * items.panels_of_item[i], p1 = p0 + items.panels_of_item[i];
            multiply(products[i], p0, p1, thread);
            if (silu_gate) {
                multiply(products[1], p0, p1, thread);
                const int r0 = p0 * kPanel, r1 = std::min(c_.hidden_dim, p1 * kPanel);
                for (int t = 0; t < n && r1 > r0; ++t)
                    gate_times_up(silu_gate + std::int64_t{t} * c_.hidden_dim + r0,
                                  silu_up + std::int64_t{t} * c_.hidden_dim + r0, r1 - r0);
            }
        };
        pool_.run(items.total, job);
    }

    // The rows' input to the layer: x [n, dim] -> the row's token embedding, times the config's
    // scale (Gemma: √dim, so the embeddings start at the size the rest of the stream has).
    // A model whose table stayed in its stored type (LoadWeights::as_stored) widens the one row.
    // A split model's rank holds vocabulary rows [vocab_begin, ..) only: zeros for the other ids
    // (add_across_ranks then adds the one rank's row that holds each).
    void embed(int id, float* x) const {
        const int row = id - share_.vocab_begin;
        if (share_.split() && (row < 0 || row >= c_.vocab_size)) {
            std::fill_n(x, c_.dim, 0.0f);
            return;
        }
        if (model_.token_embedding) {
            std::memcpy(x, model_.token_embedding + std::int64_t{row} * c_.dim, sizeof(float) * static_cast<size_t>(c_.dim));
        } else {
            const StoredMatrix& table = model_.stored_embedding;
            ggml_to_float(table.type, table.bytes + row * ggml_bytes(table.type, c_.dim), c_.dim, x);
        }
        const float scale = c_.embedding_scale;
        if (scale != 1.0f)
            for (int i = 0; i < c_.dim; ++i) x[i] *= scale;
    }

    // q | k | v = xn Wqᵀ | xn Wkᵀ | xn Wvᵀ for n rows, in one parallel region; then
    //   + the biases (Qwen2), and each head of q and k normed by its own gain (Qwen3, Gemma 3).
    // q [n, q_dim]; k, v [n, kv_dim] at row strides ldk, ldv (a session writes its cache rows).
    void attention_inputs(const Layer& w, const float* xn, int n, float* q, float* k, long ldk, float* v, long ldv) {
        const int dim = c_.dim, q_dim = c_.q_dim(), kv_dim = c_.kv_dim();
        const Product qkv[] = {{&w.wq, xn, dim, q, q_dim, false}, {&w.wk, xn, dim, k, ldk, false}, {&w.wv, xn, dim, v, ldv, false}};
        run_products(qkv, n);
        if (w.bq) {
            add_bias(q, q_dim, w.bq, q_dim, n);
            add_bias(k, ldk, w.bk, kv_dim, n);
            add_bias(v, ldv, w.bv, kv_dim, n);
        }
        if (w.q_norm)
            for (int t = 0; t < n; ++t) {  // a row's heads are head_dim values each, side by side
                rmsnorm(q + std::int64_t{t} * q_dim, w.q_norm, q + std::int64_t{t} * q_dim, c_.n_heads, c_.head_dim);
                rmsnorm(k + std::int64_t{t} * ldk, w.k_norm, k + std::int64_t{t} * ldk, c_.n_kv_heads, c_.head_dim);
            }
    }

    // The rest of a layer once attention has filled att [n, q_dim], the same for a session and a
    // serving batch:  x += att Woᵀ;  x += W2 (act(rmsnorm(x) W1ᵀ) ⊙ rmsnorm(x) W3ᵀ), act = SiLU
    // (GELU-tanh for Gemma). With sandwich norms (Gemma 2, 3) each of the two is normed by its
    // own gain before it is added. xn [n, dim], gate and up [n, hidden] are scratch.
    // A split model's rank (RankShare) makes partial sums of both products: they land in xn too,
    // and are completed across its ranks before they are added.
    void finish_layer(const Layer& w, const float* att, float* x, float* xn, float* gate, float* up, int n) {
        const int dim = c_.dim, hidden = c_.hidden_dim;
        const bool apart = c_.sandwich_norms || share_.split();  // then each half lands in xn first
        const Product out[] = {{&w.wo, att, c_.q_dim(), apart ? xn : x, dim, !apart}};  // x += att Woᵀ
        run_products(out, n);
        if (apart) add_half(xn, w.post_att, x, n);
        rmsnorm(x, w.rms_ffn, xn, n);
        const Product gate_up[] = {{&w.w1, xn, dim, gate, hidden, false}, {&w.w3, xn, dim, up, hidden, false}};
        run_products(gate_up, n, gate, up);  // gate = act(gate) ⊙ up
        const Product down[] = {{&w.w2, gate, hidden, apart ? xn : x, dim, !apart}};  // x += h W2ᵀ
        run_products(down, n);
        if (apart) add_half(xn, w.post_mlp, x, n);
    }

    // y [n, dim] completed across a split model's ranks (in place; nothing for one process).
    void add_across_ranks(float* y, int n) const {
        if (share_.split()) share_.add_across_ranks(y, std::int64_t{n} * c_.dim);
    }

    // logits [n, vocab] = xn Wclsᵀ for n rows already through the final norm; Gemma 2 then
    // soft-caps them: cap · tanh(z / cap).
    void logits(const float* xn, int n, float* out) {
        const Product cls[] = {{&w_.classifier(), xn, c_.dim, out, c_.vocab_size, false}};
        run_products(cls, n);
        const float cap = c_.final_logit_softcap;
        if (cap > 0.0f)
            for (std::int64_t i = 0; i < std::int64_t{n} * c_.vocab_size; ++i) out[i] = cap * std::tanh(out[i] / cap);
    }

    // ---- per-row steps ----------------------------------------------------------------------

    // y[t] = gain ⊙ x[t] / rms(x[t]) for n rows [n, dim].
    void rmsnorm(const float* x, const float* gain, float* y, int n) const { rmsnorm(x, gain, y, n, c_.dim); }
    // The same over `rows` rows of `width` values (a row's heads, for the q/k norms); y may be x.
    void rmsnorm(const float* x, const float* gain, float* y, std::int64_t rows, int width) const {
        for (std::int64_t t = 0; t < rows; ++t) {
            const float* xr = x + t * width;
            float* yr = y + t * width;
            float sum_sq = 0.0f;
            for (int i = 0; i < width; ++i) sum_sq += xr[i] * xr[i];
            const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + c_.norm_eps);
            for (int i = 0; i < width; ++i) yr[i] = gain[i] * (inv_rms * xr[i]);
        }
    }

    // Attention's scores are q·k times this (1/√head_dim, or the config's: Gemma's
    // query_pre_attn_scalar) ...
    float score_scale() const { return c_.attention_score_scale(); }
    // ... and with a soft-cap (Gemma 2) then pass through cap · tanh(s / cap), before the softmax.
    void cap_scores(float* s, int n) const {
        const float cap = c_.attn_logit_softcap;
        if (cap > 0.0f)
            for (int j = 0; j < n; ++j) s[j] = cap * std::tanh(s[j] / cap);
    }
    // The first position a query at `position` sees in layer w: 0, or with a sliding window the
    // window - 1 positions before its own.
    static int first_visible(const Layer& w, int position) { return w.window > 0 ? std::max(0, position - w.window + 1) : 0; }

    // Rotates one row [heads · head_dim] at position `pos` by layer w's tabulated angles.
    void rope(const Layer& w, float* v, int heads, int pos) const {
        const int hd = c_.head_dim, half = hd / 2;
        const bool adjacent = c_.rope_layout == RopeLayout::adjacent_pairs;
        const float* cs = w_.rope_cos(w.rope_table, pos);  // [half]
        const float* sn = w_.rope_sin(w.rope_table, pos);
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

    // One query row's attention in layer w for the query heads of KV heads [g0, g1), over
    // positions first .. visible-1 of one sequence (first = 0, or the start of w's sliding
    // window) whose cache rows come in blocks: position j is row
    //   table[j / block_size] · block_size + j % block_size   of `keys` and `values` [rows, kv_dim].
    // For each query head h (of KV head g = h / group):
    //   s_j = cap(q_h · k_j,g · scale);  p = softmax(s);  out_h = Σ_j p_j · v_j,g   (in order of j)
    // Block by block (a block's rows are contiguous), each KV head, each of its query heads in
    // turn, one kernel call per block. Each head's sums run in the same order whatever the
    // range, the block size or the other rows: only its numbers count.
    // Given `int8` (an int8 cache; keys and values are then unused), a block's rows of KV head g
    // are dequantized kInt8Run at a time into int8->scratch (the values s · q the reference's
    // int8 cache holds), once for all the group's query heads, which then read them in fp32.
    // q, out: the row's [heads · head_dim]; scores: [heads in the range][visible - first].
    void attend(const Layer& w, const float* q, const float* keys, const float* values, const int* table,
                int block_size, int visible, int g0, int g1, float* scores, float* out,
                const Int8Rows* int8 = nullptr) const {
        const int hd = c_.head_dim, kv_dim = c_.kv_dim(), group = c_.heads_per_kv_head(), G = c_.n_kv_heads;
        const int h0 = g0 * group;
        const float scale = score_scale();
        const int first = first_visible(w, visible - 1), seen = visible - first;  // positions read
        // Calls f(index among the positions read, positions, their rows, KV head g) for every run
        // of rows: the part of a block inside first .. visible-1, cut into runs of kInt8Run with
        // an int8 cache. f gets the rows in fp32 and their stride.
        auto each_run = [&](const float* cache, const std::int8_t* cache_q, const float* cache_scales, auto&& f) {
            for (int j0 = first / block_size * block_size; j0 < visible; j0 += block_size) {
                const int lo = std::max(j0, first), m = std::min(j0 + block_size, visible) - lo;
                const std::int64_t row0 = std::int64_t{table[j0 / block_size]} * block_size + (lo - j0);
                for (int g = g0; g < g1; ++g)
                    for (int r0 = 0; r0 < m; r0 += int8 ? kInt8Run : m) {
                        const int n = int8 ? std::min(kInt8Run, m - r0) : m;
                        const std::int64_t row = row0 + r0, at = row * kv_dim + std::int64_t{g} * hd;
                        if (!int8) {
                            f(lo - first + r0, n, cache + at, long{kv_dim}, g);
                            continue;
                        }
                        k_.dequantize_rows(cache_q + at, kv_dim, cache_scales + row * G + g, G, n, hd, int8->scratch);
                        f(lo - first + r0, n, static_cast<const float*>(int8->scratch), long{hd}, g);
                    }
            }
        };
        each_run(keys, int8 ? int8->keys : nullptr, int8 ? int8->key_scales : nullptr,
                 [&](int j0, int n, const float* rows, long ld, int g) {
                     for (int h = g * group; h < (g + 1) * group; ++h)
                         k_.dot_rows(q + std::int64_t{h} * hd, rows, ld, n, hd, scale,
                                     scores + std::int64_t{h - h0} * seen + j0);
                 });
        for (int h = h0; h < g1 * group; ++h) {
            cap_scores(scores + std::int64_t{h - h0} * seen, seen);
            k_.softmax(scores + std::int64_t{h - h0} * seen, seen);
        }
        std::memset(out + std::int64_t{h0} * hd, 0, sizeof(float) * static_cast<size_t>((g1 - g0) * group * hd));
        each_run(values, int8 ? int8->values : nullptr, int8 ? int8->value_scales : nullptr,
                 [&](int j0, int n, const float* rows, long ld, int g) {
                     for (int h = g * group; h < (g + 1) * group; ++h)
                         k_.add_rows(out + std::int64_t{h} * hd, scores + std::int64_t{h - h0} * seen + j0, rows, ld,
                                     n, hd);
                 });
    }

private:
    // The options refused before anything is packed or allocated.
    static FastOptions checked(const FastOptions& o) {
        if (o.prefill_chunk < 1) fail("prefill chunk ", o.prefill_chunk, " must be ≥ 1");
        if (o.int8_activations && !has_integer_weights(o.weights) && o.weights != WeightType::stored)
            fail("int8 activations multiply integer weights (q8, q4, q4_k, q5_k, q6_k); the weights are ", to_string(o.weights));
        return o;
    }

    // The widest input a product reads: dim (the normed stream), q_dim (attention's heads, into
    // Wo) or hidden (into W2).
    int widest_input() const { return std::max({c_.dim, c_.q_dim(), c_.hidden_dim}); }

    // y[t] += b for n rows of y at stride ld (Qwen2's q/k/v biases).
    static void add_bias(float* y, long ld, const float* b, int width, int n) {
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < width; ++i) y[std::int64_t{t} * ld + i] += b[i];
    }

    // x += y [n, dim], one half of a layer computed apart: completed across ranks (a split
    // model), normed by `gain` first (a sandwich norm: Gemma 2, 3).
    void add_half(float* y, const float* gain, float* x, int n) const {
        add_across_ranks(y, n);
        if (c_.sandwich_norms) return add_normed(y, gain, x, n);
        for (std::int64_t i = 0; i < std::int64_t{n} * c_.dim; ++i) x[i] += y[i];
    }

    // x += rmsnorm(y) with `gain` (a sandwich norm), y [n, dim] normed in place.
    void add_normed(float* y, const float* gain, float* x, int n) const {
        rmsnorm(y, gain, y, n);
        for (std::int64_t i = 0; i < std::int64_t{n} * c_.dim; ++i) x[i] += y[i];
    }

    // gate = act(gate) ⊙ up over n values: SiLU through the kernel set (a vectorized exp);
    // GELU-tanh (Gemma) as mlp.hpp writes it.
    void gate_times_up(float* gate, const float* up, int n) const {
        if (c_.mlp_activation == MlpActivation::silu) return k_.silu_mul(gate, up, n);
        for (int i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
    }

    const Model& model_;
    ModelConfig c_;
    FastOptions options_;
    SingleRow single_row_;
    RankShare share_;                        // one rank's share of a split model (default: whole)
    ThreadPool pool_;
    Kernels k_;
    FastWeights w_;                          // packed once, by pool_'s threads
    HugeBuffer workspace_;                   // per-thread scratch, then the packed rows
    int reserved_rows_ = 0;
    float* scratch_ = nullptr;   // [threads][kScratchFloats]: one unpacked weight chunk each
    float* packed_x_ = nullptr;  // [rows · max(dim, hidden)]: a product's input in token tiles
    std::vector<std::int8_t> x_q_;      // int8 activations: decode's x in blocks of 32 [blocks · 32]
    std::vector<float> x_scales_;       // [blocks]
    std::vector<std::int32_t> x_sums_;  // [blocks] Σ q per block (matvec_int8's offset correction)
};

}  // namespace glass::fast
