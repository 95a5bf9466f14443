/// \file
/// \brief glass/fast/fast_paged_backend.hpp — the fast CPU path as a serving backend: one pass over the weights for the whole batch.
/// ```text
/// The same forward pass as serve/paged_transformer.hpp (the reference), on FastModel's packed
/// weights, kernels and threads (fast_model.hpp):
///
///   rows     every entry's new tokens, stacked                       [N, dim], N = Σ n_entry
///   x = embedding rows
///   per layer (each family's additions to these steps: fast_model.hpp):
///     q, k, v = rmsnorm(x) Wqᵀ, Wkᵀ, Wvᵀ     ONE pass over each weight matrix for all N rows
///     rotate row r of q and k by its own position (tabulated cos/sin); k, v -> its pool row
///              block_table[pos / block_size] · block_size + pos % block_size
///     att row r, head h = softmax(q · keys of positions 0..pos(r) of its entry) · values
///     x += att Woᵀ;  x += W2 (silu(rmsnorm(x) W1ᵀ) ⊙ rmsnorm(x) W3ᵀ)   again one pass each
///   logits = rmsnorm(x[last row of e]) Wclsᵀ, one product over the entries that want them
///
/// Why decode throughput grows with the batch (C20): a decode step of one request reads every
/// weight to do 2 FLOPs with it, so memory sets its speed; B requests decoding together reuse
/// each loaded 256-input chunk of 32 rows for all B rows from L1 (the register-tiled kernel,
/// kernels_avx512.hpp), so the step costs about the same until the FMA units, not memory, are
/// what is busy.
///
/// Batch invariance, kept on purpose: the engine promises every request exactly what it gets
/// alone (tests/serve_workloads.hpp), so what a row computes must not depend on which rows
/// share the pass. Every product uses the matrix–matrix kernel, even for N = 1: each row's sum
/// is the same sequence of FMAs whatever tile it lands in and however many rows there are (the
/// matrix–vector kernel sums in another order, so it is never used here). Attention is per row
/// and head, dot products and a weighted sum in order of position (not the session's tiled
/// prefill attention, whose tiles depend on how a prompt was cut). Threads share out rows of W
/// and (row, heads) pairs: each output is computed whole by one thread, so 1 and 2 threads
/// give the same bits too.
///
/// The pool: keys[layer], values[layer]   [num_blocks · block_size, kv_dim] each, in one buffer.
/// With FastOptions::kv int8 (kv_cache.hpp): the same rows as int8, then their scales
/// [layer][num_blocks · block_size, n_kv_heads] (K's, then V's); a row is quantized as it is
/// stored, and attention dequantizes 32 rows of a KV head at a time (FastModel::attend's Int8Rows)
/// to the values s · q the reference's int8 pool holds. Still per row: batch invariant.
/// Buffers grow to the largest batch seen and are reused: a step allocates nothing after that.
/// ```
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/kv_cache.hpp"
#include "glass/memory_budget.hpp"
#include "glass/serve/kv_shipment.hpp"
#include "glass/serve/paged_backend.hpp"

namespace glass::fast {

class FastPagedBackend : public serve::PagedBackend {
public:
    // `share`: one rank of a split model (dist/fast_rank_part.hpp), `model` its shard.
    FastPagedBackend(const Model& model, FastOptions options, RankShare share = {})
        : m_(model, options, SingleRow::matmul, std::move(share)), c_(model.config), int8_(options.kv == KvType::int8),
          scratch_stride_(scratch_floats_per_thread(c_, int8_, m_.threads())),
          scores_(static_cast<size_t>(m_.threads()) * static_cast<size_t>(scratch_stride_)) {
        if (options.int8_activations)  // its rows go through the matrix–matrix kernel, fp32 only
            fail("the fast paged backend multiplies in fp32; int8 activations are FastCpuSession's decode only, for now");
    }

    const ModelConfig& config() const override { return c_; }

    // The kernel maps and zeroes a page of the pool the first time it is written: a cost paid
    // inside forward passes (a 1,000-token prompt of a 110M model is 73 MB of rows). A pool of
    // the same shape keeps its buffer, and its pages, when asked again (a new engine on the same
    // backend): rows are always written before they are read, so what it held does not matter.
    void allocate_pool(int num_blocks, int block_size) override {
        if (num_blocks < 1 || block_size < 1) fail("KV pool of ", num_blocks, " blocks of ", block_size, " positions");
        check_kv_cache_fits(c_, std::int64_t{num_blocks} * block_size, int8_ ? 1 : 4, "KV pool");
        if (num_blocks == num_blocks_ && block_size == block_size_) return;  // keep the pages (see below)
        num_blocks_ = block_size_ = 0;  // no pool while allocating (if that fails)
        pool_ = HugeBuffer(static_cast<std::size_t>(bytes_of_pool(num_blocks, block_size)));  // zeroed
        num_blocks_ = num_blocks;
        block_size_ = block_size;
    }
    std::int64_t pool_bytes() const override { return bytes_of_pool(num_blocks_, block_size_); }
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const { return bytes_of_pool(num_blocks, block_size); }
    KvType kv_type() const override { return m_.options().kv; }
    std::int64_t weight_bytes() const override { return m_.weight_bytes(); }

    int threads() const { return m_.threads(); }
    WeightType weight_type() const { return m_.options().weights; }
    const char* kernel_name() const { return m_.kernel_name(); }
    const Kernels& kernels() const { return m_.kernels(); }

    std::span<const float> forward(std::span<const serve::BatchEntry> batch) override {
        if (num_blocks_ == 0) fail("fast paged forward: no KV pool yet (allocate_pool first)");
        serve::check_batch(c_, batch, num_blocks_, block_size_);
        return run_step(batch, {}, true);
    }

    // One rank of a split model: the batch through this shard's layers. `input`: the stream
    // [N, dim] from the pipeline stage before (empty: embed the tokens). Returns the stream
    // [N, dim] or, when `last`, the logits [wanting, shard's vocabulary slice]. The batch was
    // checked at rank 0 against the whole model (ids outside this shard's slice are normal here).
    std::span<const float> forward_part(std::span<const serve::BatchEntry> batch, std::span<const float> input, bool last) {
        if (num_blocks_ == 0) fail("fast paged forward: no KV pool yet (allocate_pool first)");
        return run_step(batch, input, last);
    }

    // Disaggregated prefill/decode (serve/kv_shipment.hpp): this pool's rows are already what
    // the wire carries (fp32 rows; int8 codes and their scales), so both ways are copies.
    std::vector<std::byte> export_kv(std::span<const int> table, int first, int end) const override {
        std::vector<std::byte> out(shipment_bytes(table, first, end));
        copy_shipment(table, first, end, out.data(), nullptr);
        return out;
    }
    void import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        if (bytes.size() != shipment_bytes(table, first, end))
            fail("KV shipment: ", bytes.size(), " bytes for ", end - first, " positions, expected ",
                 shipment_bytes(table, first, end));
        copy_shipment(table, first, end, nullptr, bytes.data());
    }

private:
    using Product = FastModel::Product;

    std::span<const float> run_step(std::span<const serve::BatchEntry> batch, std::span<const float> input, bool last) {
        plan_rows(batch);
        const int n = static_cast<int>(rows_.size());
        reserve(n);
        const int dim = c_.dim, kv_dim = c_.kv_dim();
        if (input.empty()) {
            for (int r = 0; r < n; ++r) m_.embed(rows_[size_t(r)].token, x_ + std::int64_t{r} * dim);
            m_.add_across_ranks(x_, n);  // a split model: each rank embedded the ids of its vocabulary rows
        } else {  // a later pipeline stage: the stream from the stage before
            if (input.size() != static_cast<size_t>(n) * static_cast<size_t>(dim))
                fail("fast paged forward: an input stream of ", input.size(), " numbers for ", n, " rows of ", dim);
            std::copy(input.begin(), input.end(), x_);
        }
        for (int l = 0; l < c_.n_layers; ++l) {
            const FastModel::Layer& w = m_.layer(l);
            m_.rmsnorm(x_, w.rms_att, xn_, n);
            m_.attention_inputs(w, xn_, n, q_, k_, kv_dim, v_, kv_dim);  // q | k | v (+ biases, q/k norms)
            store_kv(l, n);
            attention(l, n);
            m_.finish_layer(w, att_, x_, xn_, gate_, up_, n);  // x += att Woᵀ, then the MLP
        }
        if (!last) return {x_, static_cast<size_t>(n) * static_cast<size_t>(dim)};  // on to the next stage
        // Logits of the rows append_logit_rows named: [wanting, vocab].
        const int wanting = static_cast<int>(logit_rows_.size());
        logits_.resize(static_cast<size_t>(wanting) * static_cast<size_t>(c_.vocab_size));
        if (wanting == 0) return {};
        for (int i = 0; i < wanting; ++i)
            m_.rmsnorm(x_ + std::int64_t{logit_rows_[size_t(i)]} * dim, m_.final_gain(), xn_ + std::int64_t{i} * dim, 1);
        m_.logits(xn_, wanting, logits_.data());
        return logits_;
    }

    size_t shipment_bytes(std::span<const int> table, int first, int end) const {
        if (num_blocks_ == 0) fail("KV shipment: no KV pool yet (allocate_pool first)");
        serve::check_kv_table(num_blocks_, block_size_, table, first, end, "KV shipment");
        return static_cast<size_t>(serve::kv_shipment_bytes(serve::kv_shipment_header(c_, kv_type(), end - first)));
    }
    // The shipment's rows, in its order, between the wire and this pool: into `out` (export),
    // or from `in` (import).
    void copy_shipment(std::span<const int> table, int first, int end, std::byte* out, const std::byte* in) const {
        const auto kv_dim = static_cast<size_t>(c_.kv_dim()), heads = static_cast<size_t>(c_.n_kv_heads);
        size_t at = 0;
        const auto move = [&](void* pool_at, size_t n) {
            if (out) std::memcpy(out + at, pool_at, n);
            else std::memcpy(pool_at, in + at, n);
            at += n;
        };
        serve::for_each_shipped_row(c_.n_layers, first, end, [&](int layer, serve::KvPart part, int pos) {
            const std::int64_t slot = serve::pool_row(table, block_size_, pos);
            const bool key = part == serve::KvPart::key;
            if (!int8_) {
                move((key ? keys(layer) : values(layer)) + slot * c_.kv_dim(), kv_dim * sizeof(float));
                return;
            }
            move((key ? key_scales(layer) : value_scales(layer)) + slot * c_.n_kv_heads, heads * sizeof(float));
            move((key ? key_q(layer) : value_q(layer)) + slot * c_.kv_dim(), kv_dim);
        });
    }

    struct Row {
        int token;  // its id
        int pos;    // its position in its sequence
        int entry;  // its entry in the batch
    };

    // One thread's scratch: n_heads x seq_len attention weights, then with an int8 pool a run of
    // dequantized rows (Int8Rows::scratch). Checked: a header's seq_len can be 4M.
    static std::int64_t scratch_floats_per_thread(const ModelConfig& c, bool int8, int threads) {
        const std::int64_t floats = std::int64_t{c.n_heads} * c.seq_len + (int8 ? std::int64_t{kInt8Run} * c.head_dim : 0);
        check_fits_in_memory(floats * 4 * threads, "the attention scores (threads x n_heads x seq_len floats)");
        return floats;  // < 2^10 x 2^22 + 2^5 x 2^16, times < 2^8 threads
    }
    // fp32: K then V, [layer][rows, kv_dim] floats. int8: the same as bytes, then the scales
    // [layer][rows, n_kv_heads] floats of K, then of V.
    std::int64_t bytes_of_pool(int num_blocks, int block_size) const {
        const std::int64_t rows = std::int64_t{num_blocks} * block_size;
        if (!int8_) return 2 * std::int64_t{c_.n_layers} * rows * c_.kv_dim() * 4;
        return 2 * std::int64_t{c_.n_layers} * rows * (c_.kv_dim() + 4 * c_.n_kv_heads);
    }
    std::int64_t pool_rows() const { return std::int64_t{num_blocks_} * block_size_; }
    float* keys(int layer) const { return pool_.as<float>() + std::int64_t{layer} * pool_rows() * c_.kv_dim(); }
    float* values(int layer) const { return keys(c_.n_layers + layer); }
    std::int8_t* key_q(int layer) const {
        return reinterpret_cast<std::int8_t*>(pool_.as<float>()) + std::int64_t{layer} * pool_rows() * c_.kv_dim();
    }
    std::int8_t* value_q(int layer) const { return key_q(c_.n_layers + layer); }
    float* key_scales(int layer) const {  // after the 2 · n_layers int8 matrices (a multiple of 4 bytes: kv_dim is even)
        float* first = reinterpret_cast<float*>(key_q(2 * c_.n_layers));
        return first + std::int64_t{layer} * pool_rows() * c_.n_kv_heads;
    }
    float* value_scales(int layer) const { return key_scales(c_.n_layers + layer); }

    // The stacked rows of this batch, and the rows whose logits are wanted (vectors that keep
    // their memory: no allocation once they have held the largest batch).
    void plan_rows(std::span<const serve::BatchEntry> batch) {
        batch_ = batch;
        rows_.clear();
        logit_rows_.clear();
        for (size_t e = 0; e < batch.size(); ++e) {
            const serve::BatchEntry& entry = batch[e];
            serve::append_logit_rows(entry, static_cast<int>(rows_.size()), logit_rows_);
            for (size_t t = 0; t < entry.tokens.size(); ++t)
                rows_.push_back({entry.tokens[t], entry.start + static_cast<int>(t), static_cast<int>(e)});
        }
    }

    // Activations for n rows, reallocated only when n is the largest yet.
    void reserve(int n) {
        m_.reserve_rows(n);
        if (n <= reserved_rows_) return;
        const std::int64_t rows = n;
        const std::int64_t sizes[] = {rows * c_.dim, rows * c_.dim, rows * c_.q_dim(), rows * c_.q_dim(),  // x, xn, q, att
                                      rows * c_.kv_dim(), rows * c_.kv_dim(),                       // k, v
                                      rows * c_.hidden_dim, rows * c_.hidden_dim};                  // gate, up
        std::int64_t total = 0;
        for (std::int64_t s : sizes) total += (s + 15) / 16 * 16;  // each 64-byte aligned
        activations_ = HugeBuffer(static_cast<std::size_t>(total) * 4);
        float* p = activations_.as<float>();
        float** targets[] = {&x_, &xn_, &q_, &att_, &k_, &v_, &gate_, &up_};
        for (size_t i = 0; i < std::size(sizes); ++i) {
            *targets[i] = p;
            p += (sizes[i] + 15) / 16 * 16;
        }
        reserved_rows_ = n;
    }

    // RoPE on row r of q and k at the row's own position; then k and v into its pool row (as
    // int8 rows and one scale per KV head with an int8 pool).
    void store_kv(int layer, int n) {
        const int q_dim = c_.q_dim(), kv_dim = c_.kv_dim(), G = c_.n_kv_heads;
        const FastModel::Layer& w = m_.layer(layer);
        auto job = [&](int r, int) {
            const Row& row = rows_[size_t(r)];
            float* k = k_ + std::int64_t{r} * kv_dim;
            const float* v = v_ + std::int64_t{r} * kv_dim;
            m_.rope(w, q_ + std::int64_t{r} * q_dim, c_.n_heads, row.pos);
            m_.rope(w, k, c_.n_kv_heads, row.pos);
            const std::int64_t slot = serve::pool_row(batch_[size_t(row.entry)].block_table, block_size_, row.pos);
            if (int8_) {
                quantize_kv_row(k, G, c_.head_dim, key_q(layer) + slot * kv_dim, key_scales(layer) + slot * G);
                quantize_kv_row(v, G, c_.head_dim, value_q(layer) + slot * kv_dim, value_scales(layer) + slot * G);
                return;
            }
            std::memcpy(keys(layer) + slot * kv_dim, k, sizeof(float) * static_cast<size_t>(kv_dim));
            std::memcpy(values(layer) + slot * kv_dim, v, sizeof(float) * static_cast<size_t>(kv_dim));
        };
        m_.pool().run(n, job);
    }

    // att[r, head h] over positions 0 .. pos(r) of r's entry. Items are (row, range of KV
    // heads): a whole row each when the batch has rows enough to keep every thread busy, a
    // row's heads split into ranges when not (a lone decode step). Runs after every row's K/V
    // is in the pool: a chunk's later rows see its earlier ones.
    void attention(int layer, int n) {
        const int kv_heads = c_.n_kv_heads;
        const int ranges = std::clamp((4 * m_.threads() + n - 1) / n, 1, kv_heads);  // per row
        const float* key_pool = int8_ ? nullptr : keys(layer);
        const float* value_pool = int8_ ? nullptr : values(layer);
        auto job = [&](int item, int thread) {
            const int r = item / ranges, part = item % ranges;
            const Row& row = rows_[size_t(r)];
            float* scores = scores_.data() + std::int64_t{thread} * scratch_stride_;
            const Int8Rows int8{key_q(layer), key_scales(layer), value_q(layer), value_scales(layer),
                                scores + std::int64_t{c_.n_heads} * c_.seq_len};
            m_.attend(m_.layer(layer), q_ + std::int64_t{r} * c_.q_dim(), key_pool, value_pool,
                      batch_[size_t(row.entry)].block_table.data(), block_size_, row.pos + 1, kv_heads * part / ranges,
                      kv_heads * (part + 1) / ranges, scores, att_ + std::int64_t{r} * c_.q_dim(), int8_ ? &int8 : nullptr);
        };
        m_.pool().run(n * ranges, job);
    }

    FastModel m_;  // packed weights, threads, kernels, products, norms, RoPE
    ModelConfig c_;
    bool int8_;                  // FastOptions::kv int8: the pool holds int8 rows and scales
    std::int64_t scratch_stride_;  // floats of scratch per thread
    HugeBuffer pool_;  // keys[layer] then values[layer], [num_blocks · block_size, kv_dim] each (+ scales)
    int num_blocks_ = 0, block_size_ = 0;
    std::vector<float> scores_;  // [threads][heads · seq_len (+ a run of int8 rows)]: one row's attention weights per thread
    std::span<const serve::BatchEntry> batch_;  // the batch forward() is computing
    std::vector<Row> rows_;
    std::vector<int> logit_rows_;  // the stacked row whose logits each wanting entry gets
    std::vector<float> logits_;    // [wanting, vocab]
    HugeBuffer activations_;       // everything below, for reserved_rows_ rows
    int reserved_rows_ = 0;
    float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *att_ = nullptr, *k_ = nullptr, *v_ = nullptr,
          *gate_ = nullptr, *up_ = nullptr;
};

}  // namespace glass::fast
