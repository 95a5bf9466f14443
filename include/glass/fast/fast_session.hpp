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
///     per (query, key) pair. By default it is FlashAttention (fast_flash_attention.hpp: 256 x
///     128 tiles, online softmax, no score rows at all; FastOptions::flash_attention = false:
///     the score rows).
///  4. Buffers (activations, KV cache, RoPE angles) are sized once here: decode allocates
///     nothing (tests/test_fast_allocations.cpp counts operator new to prove it). With
///     FastOptions::kv int8 the cache keeps int8 rows and a scale per KV head (a quarter of the bytes); decode
///     attention dequantizes 32 rows at a time into an L1-sized scratch, once for all the query
///     heads of a KV head; a prefill pass dequantizes the layer's rows into one fp32 layer buffer
///     before its attention.
///  5. RoPE's cos/sin are tabulated once ([seq_len, head_dim/2]) instead of recomputed with
///     pow/cos/sin for every head of every token; attention's exp and the MLP's SiLU use a
///     16-lane exp (kernels_avx512_attention.hpp).
/// Items 1, 2 and 5 (packed weights, the threaded products, norms, RoPE, one query's attention)
/// live in fast_model.hpp, shared with the batched backend (fast_paged_backend.hpp); this file
/// adds the sequence's own KV cache, prefill attention and the pass itself.
///
/// Per chunk of up to `prefill_chunk` positions (decode = a chunk of one):
///   x = embedding rows                                        [n, dim]
///   per layer: xn = rmsnorm(x); q | k | v = xn Wqᵀ | xn Wkᵀ | xn Wvᵀ   (k, v written straight
///              into the cache rows); rope(q, k); att = attention(q, cache)  [n, q_dim];
///              x += att Woᵀ; xn = rmsnorm(x); h = silu(xn W1ᵀ) ⊙ (xn W3ᵀ)  [n, hidden];
///              x += h W2ᵀ
///   logits = rmsnorm(x[last]) Wclsᵀ                            [vocab]
/// (each family's additions to these steps: fast_model.hpp). A model with a sliding window or
/// soft-capped scores (Mistral, Gemma 2/3) prefills with the score rows, which apply both;
/// FlashAttention's tiles know the causal mask only.
/// ```
#pragma once

#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/fast_flash_attention.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/kv_cache.hpp"
#include "glass/session.hpp"

namespace glass::fast {

/// FlashAttention's tiles (fast_flash_attention.hpp) apply the causal mask and nothing else: a
/// model whose layers have a sliding window or soft-capped scores prefills with the score rows.
inline FastOptions session_options(const ModelConfig& c, FastOptions o) {
    if (c.sliding_window > 0 || c.attn_logit_softcap > 0.0f) o.flash_attention = false;
    return o;
}

class FastCpuSession : public Session {
public:
    FastCpuSession(const Model& model, FastOptions options)
        : m_(model, session_options(model.config, options), SingleRow::matvec), c_(model.config) {
        allocate_buffers();
    }

    const ModelConfig& config() const override { return c_; }
    int position() const override { return length_; }
    void reset() override {
        length_ = 0;
        std::fill(tiled_upto_.begin(), tiled_upto_.end(), 0);
    }
    KvType kv_type() const override { return m_.options().kv; }
    std::int64_t kv_bytes_used() const override { return kv_bytes_per_token(c_, kv_type()) * length_; }
    // Bytes streamed per decoded token: every packed matrix (classifier included) + the norms.
    std::int64_t weight_bytes() const override { return m_.weight_bytes(); }
    const char* backend_name() const override { return "the fast CPU path (--threads/--precision)"; }
    // Wall time spent in prefill attention (score rows or FlashAttention, all layers, key
    // transposes included) since construction: what bench/flash_attention_bench compares.
    double prefill_attention_ms() const { return prefill_attention_ms_; }

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
    // Speculative decoding: prefill's pass keeping every row's logits [n, vocab]; and rollback,
    // which is only a length here too (position p's K/V live in cache row p).
    std::span<const float> verify(std::span<const int> ids) override {
        check_ids(ids);
        const size_t vocab = static_cast<size_t>(c_.vocab_size);
        every_row_logits_.resize(ids.size() * vocab);
        for (size_t done = 0; done < ids.size(); done += static_cast<size_t>(chunk_))
            forward(ids.subspan(done, std::min(ids.size() - done, static_cast<size_t>(chunk_))),
                    every_row_logits_.data() + done * vocab);
        return every_row_logits_;
    }
    void rewind(int position) override {
        check_rewind(position, length_);
        length_ = position;
        for (int& t : tiled_upto_) t = std::min(t, position);  // rows from here on will be written again
    }

    int threads() const { return m_.threads(); }
    WeightType weight_type() const { return m_.options().weights; }
    const char* kernel_name() const { return m_.kernel_name(); }
    const Kernels& kernels() const { return m_.kernels(); }
    std::string panel_types() const { return m_.panel_types(); }  // "q4_k 14, q6_k 3" or "fp32"
    std::string dot_products() const { return m_.dot_products(); }  // "fp32" or "int8 (avx512-vnni)" ...
    // The packed model, its threads and kernels (benchmark.hpp's region_read_probe reads them).
    FastModel& fast_model() { return m_; }

private:
    using Product = FastModel::Product;
    static constexpr FlashTiles kFlashTiles{256, 128};  // query rows x keys per tile (C19)

    // ---- construction: size every buffer once ----------------------------------------------

    void allocate_buffers() {
        const bool int8 = m_.options().kv == KvType::int8;
        check_kv_cache_fits(c_, c_.seq_len, int8 ? 1 : 4, "context window (seq_len)");  // before any allocation
        // FlashAttention's key tiles of every layer beside an fp32 cache: a third copy of 4 bytes a
        // value (K, V, K's tiles: 6 bytes per value of each of K and V).
        if (kept_tiles()) check_kv_cache_fits(c_, c_.seq_len, 6, "context window (seq_len) with its key tiles");
        tiled_upto_.assign(static_cast<size_t>(c_.n_layers), 0);
        chunk_ = std::min(m_.options().prefill_chunk, c_.seq_len);
        m_.reserve_rows(chunk_);
        // fp32 K/V rows for every layer; with an int8 cache, for the layer being computed only
        // (its rows dequantized from the int8 store, which holds every layer, for prefill).
        const std::int64_t n = chunk_, T = m_.threads(), kv_rows = std::int64_t{int8 ? 1 : c_.n_layers} * c_.seq_len;
        if (int8) {
            const std::int64_t rows = std::int64_t{c_.n_layers} * c_.seq_len;
            key_q_.assign(static_cast<size_t>(rows * c_.kv_dim()), 0);
            value_q_.assign(static_cast<size_t>(rows * c_.kv_dim()), 0);
            key_scales_.assign(static_cast<size_t>(rows * c_.n_kv_heads), 0.0f);
            value_scales_.assign(static_cast<size_t>(rows * c_.n_kv_heads), 0.0f);
        }
        // Every buffer rounded up to a multiple of 16 floats (64 bytes) so each starts aligned.
        const std::int64_t sizes[] = {
            n * c_.dim, n * c_.dim, n * c_.q_dim(), n * c_.q_dim(),  // x, xn, q, att
            n * c_.hidden_dim, n * c_.hidden_dim,             // gate, up
            c_.vocab_size,                                    // logits
            T * scores_per_thread(),                          // attention scores, per thread
            flash_scratch(),                                  // FlashAttention's tiles, all threads
            keys_t_floats(),                                  // keys transposed (one layer, or tiles of all)
            kv_rows * c_.kv_dim(), kv_rows * c_.kv_dim(),     // K and V cache
        };
        std::int64_t total = 0;
        for (std::int64_t s : sizes) total += (s + 15) / 16 * 16;
        activations_ = HugeBuffer(static_cast<std::size_t>(total) * 4);
        float* p = activations_.as<float>();
        float** targets[] = {&x_,      &xn_,     &q_,      &att_,       &gate_, &up_,
                             &logits_, &scores_, &flash_,  &keys_t_, &key_cache_, &value_cache_};
        for (size_t i = 0; i < std::size(sizes); ++i) {
            *targets[i] = p;
            p += (sizes[i] + 15) / 16 * 16;
        }
    }

    // Prefill: a block of kAttentionRows query rows; decode: the query heads of one KV head;
    // then, with an int8 cache, a run of dequantized rows (attend's Int8Rows::scratch).
    std::int64_t score_floats() const {
        return std::int64_t{std::max(kAttentionRows, c_.heads_per_kv_head())} * c_.seq_len;
    }
    std::int64_t scores_per_thread() const {
        const bool int8 = m_.options().kv == KvType::int8;
        return (score_floats() + (int8 ? std::int64_t{kInt8Run} * c_.head_dim : 0) + 15) / 16 * 16;
    }
    // FlashAttention with an fp32 cache keeps every layer's key tiles, so that each prompt chunk
    // transposes only its own new keys (not all keys so far, for every chunk of a long prompt: a
    // quadratic amount of strided copying); with an int8 cache (the point is less memory) one
    // layer's tiles are refilled per chunk instead.
    bool kept_tiles() const { return m_.options().flash_attention && m_.options().kv == KvType::fp32; }
    std::int64_t tiles_per_layer() const {
        return tiled_keys_head_stride(c_.seq_len, c_.head_dim, kFlashTiles.k) * c_.n_kv_heads;
    }
    std::int64_t keys_t_floats() const {  // Kᵀ [kv_dim][seq_len], or in FlashAttention's key tiles
        if (!m_.options().flash_attention) return std::int64_t{c_.kv_dim()} * c_.seq_len;
        return tiles_per_layer() * (kept_tiles() ? c_.n_layers : 1);
    }
    std::int64_t flash_scratch() const {
        if (!m_.options().flash_attention) return 0;
        return static_cast<std::int64_t>(flash_scratch_floats(m_.threads(), c_.head_dim, kFlashTiles));
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

    // att[t, head h] = softmax(q_h · K_gᵀ · scale over positions 0..start+t) V_g. Decode (n = 1):
    // one query, FastModel::attend, one KV head (and its query heads) per item, so no two items
    // write the same output.
    void attention(int layer, int n, int start) {
        const FastModel::Layer& w = m_.layer(layer);
        if (n > 1) {
            const auto t0 = std::chrono::steady_clock::now();
            prefill_attention(layer, n, start);
            prefill_attention_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            return;
        }
        const float* keys = layer_keys(layer);
        const float* values = layer_values(layer);
        // With an int8 cache decode reads the int8 store itself, a run of rows at a time
        // dequantized into the thread's scratch (after its scores).
        const std::int64_t rows = std::int64_t{layer} * c_.seq_len;
        const bool is_int8 = m_.options().kv == KvType::int8;
        auto job = [&](int g, int thread) {
            const int whole_cache[1] = {0};  // one block of seq_len positions: position j is row j
            float* scratch = scores_ + std::int64_t{thread} * scores_per_thread();
            if (!is_int8) return m_.attend(w, q_, keys, values, whole_cache, c_.seq_len, start + 1, g, g + 1, scratch, att_);
            const Int8Rows int8{key_q_.data() + rows * c_.kv_dim(), key_scales_.data() + rows * c_.n_kv_heads,
                                value_q_.data() + rows * c_.kv_dim(), value_scales_.data() + rows * c_.n_kv_heads,
                                scratch + score_floats()};
            m_.attend(w, q_, keys, values, whole_cache, c_.seq_len, start + 1, g, g + 1, scratch, att_, &int8);
        };
        m_.pool().run(c_.n_kv_heads, job);
    }

    // The same for n > 1 new positions, as small matrix products per head and block of
    // kAttentionRows consecutive positions (kernels_avx512_attention.hpp says why):
    //   keys_t[g] = K_gᵀ                  [head_dim, start+n]   once per layer and KV head
    //   S = Q_block K_gᵀ · scale          [rows, visible of the block's last row]
    //   P = softmax of each row over its own visible keys (soft-capped first, Gemma 2); later
    //       keys (causal mask) and, with a sliding window, keys before it get 0
    //   att_block = P V_g                 [rows, head_dim]
    void prefill_attention(int layer, int n, int start) {
        const int hd = c_.head_dim, kv_dim = c_.kv_dim(), group = c_.heads_per_kv_head(), q_dim = c_.q_dim();
        const int total = start + n, ld = c_.seq_len;
        const float scale = m_.score_scale();
        const FastModel::Layer& w = m_.layer(layer);
        const float* keys = layer_keys(layer);
        const float* values = layer_values(layer);
        if (m_.options().flash_attention) {  // C19: tile by tile with the online softmax, no score rows
            // The layer's key tiles: kept ones get the keys not tiled yet (this chunk's, and any
            // decode steps' before it); otherwise one layer's tiles are filled again from key 0.
            const std::int64_t stride = tiled_keys_head_stride(c_.seq_len, hd, kFlashTiles.k);
            float* tiles = keys_t_ + (kept_tiles() ? layer * tiles_per_layer() : 0);
            const int first = kept_tiles() ? tiled_upto_[static_cast<size_t>(layer)] : 0;
            transpose_keys_tiled(keys, kv_dim, total, c_.n_kv_heads, hd, kFlashTiles.k, tiles, stride, m_.pool(), first);
            if (kept_tiles()) tiled_upto_[static_cast<size_t>(layer)] = total;
            fast::flash_attention(q_, q_dim, tiles, stride, values, kv_dim, n, start, {c_.n_heads, c_.n_kv_heads, hd},
                                  scale, att_, q_dim, m_.pool(), m_.kernels(), kFlashTiles, flash_);
            return;
        }
        auto transpose = [&](int g, int) {  // keys_t[g][d][j] = keys[j][g·hd + d]
            float* kt = keys_t_ + std::int64_t{g} * hd * ld;
            for (int j = 0; j < total; ++j)
                for (int d = 0; d < hd; ++d)
                    kt[std::int64_t{d} * ld + j] = keys[std::int64_t{j} * kv_dim + g * hd + d];
        };
        m_.pool().run(c_.n_kv_heads, transpose);
        const Kernels& k = m_.kernels();
        auto job = [&](int h, int thread) {
            float* scores = scores_ + std::int64_t{thread} * scores_per_thread();  // [rows][ld]
            const int g = h / group;
            const float* kt = keys_t_ + std::int64_t{g} * hd * ld;
            for (int i0 = 0; i0 < n; i0 += kAttentionRows) {
                const int rows = std::min(kAttentionRows, n - i0);
                const int keys_seen = start + i0 + rows;  // visible to the block's last row
                k.attention_scores(q_ + std::int64_t{i0} * q_dim + h * hd, q_dim, rows, kt, ld, keys_seen, hd,
                                   scale, scores, ld);
                for (int r = 0; r < rows; ++r) {
                    const int visible = start + i0 + r + 1, first = FastModel::first_visible(w, visible - 1);
                    float* row = scores + std::int64_t{r} * ld;
                    m_.cap_scores(row + first, visible - first);
                    k.softmax(row + first, visible - first);
                    for (int j = 0; j < first; ++j) row[j] = 0.0f;  // before the window (0 · v adds nothing)
                    for (int j = visible; j < keys_seen; ++j) row[j] = 0.0f;
                }
                k.attention_mix(scores, ld, rows, values + g * hd, kv_dim, keys_seen, hd,
                                att_ + std::int64_t{i0} * q_dim + h * hd, q_dim);
            }
        };
        m_.pool().run(c_.n_heads, job);
    }

    // ---- the KV cache in int8 ---------------------------------------------------------------

    // Layer l's K (V) rows in fp32 [seq_len, kv_dim]: the cache itself, or with an int8 cache
    // the one-layer buffer store_int8 fills for prefill.
    float* layer_keys(int l) const {
        return key_cache_ + (m_.options().kv == KvType::int8 ? 0 : std::int64_t{l} * c_.seq_len * c_.kv_dim());
    }
    float* layer_values(int l) const {
        return value_cache_ + (m_.options().kv == KvType::int8 ? 0 : std::int64_t{l} * c_.seq_len * c_.kv_dim());
    }

    // The n new rows of layer l (in the fp32 buffer, rotated) go into the int8 store, one scale
    // per KV head and row (quantize_kv_row). Decode attention reads the store itself; prefill
    // attention (n > 1) reads fp32, so rows 0 .. start+n-1 of layer l then come back dequantized
    // into the buffer, the new ones included: what the reference's int8 KVCache holds. Threads
    // split the rows.
    void store_int8(int l, int start, int n) {
        const int kv_dim = c_.kv_dim(), g = c_.n_kv_heads, hd = c_.head_dim;
        const std::int64_t base = std::int64_t{l} * c_.seq_len;
        auto store = [&](int r) {  // buffer row r -> the int8 store
            const std::int64_t row = base + r;
            quantize_kv_row(key_cache_ + std::int64_t{r} * kv_dim, g, hd, key_q_.data() + row * kv_dim, key_scales_.data() + row * g);
            quantize_kv_row(value_cache_ + std::int64_t{r} * kv_dim, g, hd, value_q_.data() + row * kv_dim, value_scales_.data() + row * g);
        };
        if (n == 1) return store(start);  // decode
        const int total = start + n, T = m_.threads();
        auto job = [&](int part, int) {
            const int r0 = static_cast<int>(std::int64_t{total} * part / T), r1 = static_cast<int>(std::int64_t{total} * (part + 1) / T);
            for (int r = r0; r < r1; ++r) {
                const std::int64_t row = base + r;
                if (r >= start) store(r);
                dequantize_kv_row(key_q_.data() + row * kv_dim, key_scales_.data() + row * g, g, hd, key_cache_ + std::int64_t{r} * kv_dim);
                dequantize_kv_row(value_q_.data() + row * kv_dim, value_scales_.data() + row * g, g, hd, value_cache_ + std::int64_t{r} * kv_dim);
            }
        };
        m_.pool().run(T, job);
    }

    // Runs ids at positions length_ ..; the last row's logits go to logits_, or, given
    // `every_row` [n, vocab], every row's (speculative decoding's verify).
    void forward(std::span<const int> ids, float* every_row = nullptr) {
        const int n = static_cast<int>(ids.size()), start = length_;
        const int dim = c_.dim, kv_dim = c_.kv_dim(), q_dim = c_.q_dim();
        for (int t = 0; t < n; ++t) m_.embed(ids[t], x_ + std::int64_t{t} * dim);
        for (int l = 0; l < c_.n_layers; ++l) {
            const FastModel::Layer& w = m_.layer(l);
            // New keys and values land directly in their cache rows start .. start+n-1.
            float* k_rows = layer_keys(l) + std::int64_t{start} * kv_dim;
            float* v_rows = layer_values(l) + std::int64_t{start} * kv_dim;

            m_.rmsnorm(x_, w.rms_att, xn_, n);
            m_.attention_inputs(w, xn_, n, q_, k_rows, kv_dim, v_rows, kv_dim);  // q | k | v (+ biases, q/k norms)
            for (int t = 0; t < n; ++t) {
                m_.rope(w, q_ + std::int64_t{t} * q_dim, c_.n_heads, start + t);
                m_.rope(w, k_rows + std::int64_t{t} * kv_dim, c_.n_kv_heads, start + t);
            }
            if (m_.options().kv == KvType::int8) store_int8(l, start, n);
            attention(l, n, start);
            m_.finish_layer(w, att_, x_, xn_, gate_, up_, n);  // x += att Woᵀ, then the MLP
        }
        length_ += n;
        if (every_row) {
            m_.rmsnorm(x_, m_.final_gain(), xn_, n);
            m_.logits(xn_, n, every_row);
            return;
        }
        // Only the last position's logits are needed (the next token's distribution).
        m_.rmsnorm(x_ + std::int64_t{n - 1} * dim, m_.final_gain(), xn_, 1);
        m_.logits(xn_, 1, logits_);
    }

    FastModel m_;             // packed weights, threads, kernels, products, norms, RoPE
    ModelConfig c_;
    HugeBuffer activations_;  // everything below
    std::vector<float> every_row_logits_;  // verify's [n, vocab]
    int chunk_ = 0;
    int length_ = 0;  // positions in the KV cache
    double prefill_attention_ms_ = 0;
    std::vector<int> tiled_upto_;  // kept key tiles: per layer, keys 0 .. tiled_upto_ - 1 are tiled
    float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *att_ = nullptr, *gate_ = nullptr,
          *up_ = nullptr, *logits_ = nullptr, *scores_ = nullptr, *flash_ = nullptr, *keys_t_ = nullptr,
          *key_cache_ = nullptr, *value_cache_ = nullptr;
    std::vector<std::int8_t> key_q_, value_q_;      // FastOptions::kv int8: [layer][seq_len][kv_dim]
    std::vector<float> key_scales_, value_scales_;  // [layer][seq_len][n_kv_heads]
};

}  // namespace glass::fast
