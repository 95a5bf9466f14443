/// \file
/// \brief cuda/paged.cpp — CudaPagedBackend: the serving engine's forward pass on the GPU, the CUDA
/// twin of glass/serve/paged_transformer.hpp.
/// ```text
/// paged_forward (the CPU reference) does every product one row at a time, so that a row's numbers
/// never depend on the batch. Here every product takes all N rows of the step at once (one launch
/// per weight matrix, each weight read once per step), and batch invariance comes from the kernels
/// instead: the matmul kernels allowed here sum each output in an order fixed by `in` alone, and
/// norms, RoPE and attention work row by row. Per step:
///
///   host:  check_batch; plan_step lays out ids, positions, slots, table starts, logit rows and
///          block tables in one int array -> one upload
///   x = embedding rows of ids                                     [N, dim]
///   per layer:
///     (DeviceForward's layer loop, forward.hpp, the one CudaSession runs:)
///     xn = rmsnorm(x);  q, k, v = xn Wqᵀ, xn Wkᵀ, xn Wvᵀ            [N, q_dim], [N, kv_dim] ×2
///     rope_rows(q), rope_rows(k)                  row r at positions[r]
///     kv_write_rows(pool of this layer, k, v)     row r -> pool row slots[r]
///     att = attention_rows(q, pool)               row r over positions 0..pos(r) of its request
///           (CudaPagedOptions::attention: naive, per_row or flash, attention.cu)
///     x += att Woᵀ;  x += mlp(rmsnorm(x))
///   last = the rows at logit_rows (append_logit_rows: last or every)  [n_logits, dim]
///   logits = rmsnorm(last) Wclsᵀ                                  [n_logits, vocab] -> host
///
/// The pool is keys_, values_ [layer][num_blocks · block_size, kv_dim] in device memory, NaN until
/// a row is written, so attention that reads a row nobody wrote poisons the logits visibly. With
/// CudaPagedOptions::kv = int8 they hold int8, and key_scales_, value_scales_ [layer][num_blocks ·
/// block_size, n_kv_heads] one scale per (pool row, KV head), NaN until written (a NaN scale makes
/// its row NaN); kv_write_rows_int8 quantizes, the attentions read int8 + scales.
/// ```
#include <algorithm>
#include <cmath>

#include "glass/checkpoint.hpp"
#include "glass/serve/kv_shipment.hpp"
#include "paged.hpp"

namespace glass::cuda {

// ---- The step's ints ---------------------------------------------------------------------------

PagedStep plan_step(std::span<const serve::BatchEntry> batch, int block_size) {
    PagedStep step;
    step.block_size = block_size;
    std::vector<int> positions, slots, table_start, logit_rows, block_ids;
    std::vector<int>& ids = step.ints;  // the first section; the others are appended below
    for (const serve::BatchEntry& e : batch) {
        const int n = static_cast<int>(e.tokens.size());
        const int end = e.start + n;
        const int first_block = static_cast<int>(block_ids.size());
        serve::append_logit_rows(e, static_cast<int>(ids.size()), logit_rows);
        const int needed = (end + block_size - 1) / block_size;  // blocks of positions 0 .. end - 1
        block_ids.insert(block_ids.end(), e.block_table.begin(), e.block_table.begin() + needed);
        for (int t = 0; t < n; ++t) {
            const int pos = e.start + t;
            ids.push_back(e.tokens[static_cast<std::size_t>(t)]);
            positions.push_back(pos);
            slots.push_back(static_cast<int>(serve::pool_row(e.block_table, block_size, pos)));
            table_start.push_back(first_block);
        }
        step.max_keys = std::max(step.max_keys, end);
    }
    step.n_rows = static_cast<int>(ids.size());
    step.n_logits = static_cast<int>(logit_rows.size());
    for (const std::vector<int>* section : {&positions, &slots, &table_start, &logit_rows, &block_ids})
        step.ints.insert(step.ints.end(), section->begin(), section->end());
    return step;
}

RowPlacement PagedStep::rows(const int* d_ints) const {
    RowPlacement r;
    r.n_rows = n_rows;
    r.block_size = block_size;
    r.max_keys = max_keys;
    const std::size_t n = static_cast<std::size_t>(n_rows);
    r.positions = d_ints + n;
    r.slots = d_ints + 2 * n;
    r.table_start = d_ints + 3 * n;
    r.block_ids = d_ints + 4 * n + static_cast<std::size_t>(n_logits);
    return r;
}

// ---- The backend -------------------------------------------------------------------------------

const char* to_string(PagedAttention a) {
    switch (a) {
    case PagedAttention::naive: return "naive";
    case PagedAttention::per_row: return "per_row";
    case PagedAttention::flash: return "flash";
    }
    return "?";
}

static const CudaPagedOptions& checked(const CudaPagedOptions& o) {
    if (o.attention != PagedAttention::naive && o.attention != PagedAttention::per_row &&
        o.attention != PagedAttention::flash)
        fail("CudaPagedBackend: attention ", static_cast<int>(o.attention), " is not naive, per_row or flash");
    if (o.matmul != MatmulKernel::naive && o.matmul != MatmulKernel::tiled && o.matmul != MatmulKernel::warp_per_row)
        fail("CudaPagedBackend: the ", to_string(o.matmul), " matmul may sum a row differently in a different "
             "batch (batch invariance); use naive, tiled or warp_per_row");
    return o;
}

CudaPagedBackend::CudaPagedBackend(const Model& model, CudaPagedOptions options)
    : config_(require_device(model.config)), options_(checked(options)),
      weights_(model, options.weights, options.share.first_layer), forward_(config_, weights_, options.share) {}

CudaPagedBackend::~CudaPagedBackend() = default;

void CudaPagedBackend::allocate_pool(int num_blocks, int block_size) {
    if (num_blocks < 1 || block_size < 1) fail("KV pool of ", num_blocks, " blocks of ", block_size, " positions");
    const std::size_t rows = static_cast<std::size_t>(config_.n_layers) * static_cast<std::size_t>(num_blocks) *
                             static_cast<std::size_t>(block_size);
    allocate_kv_rows(options_.kv, rows, config_.kv_dim(), config_.n_kv_heads, keys_, values_, key_scales_, value_scales_);
    num_blocks_ = num_blocks;
    block_size_ = block_size;
}

// K and V rows of the model's layers and KV heads: fp32, or int8 codes and one fp32 scale per KV head.
std::int64_t CudaPagedBackend::pool_bytes_for(int num_blocks, int block_size) const {
    const std::int64_t rows = std::int64_t{config_.n_layers} * num_blocks * block_size;
    const std::int64_t row_bytes = options_.kv == KvType::int8 ? config_.kv_dim() + 4 * std::int64_t{config_.n_kv_heads}
                                                               : 4 * std::int64_t{config_.kv_dim()};
    return 2 * rows * row_bytes;
}

std::int64_t CudaPagedBackend::pool_bytes() const {
    return static_cast<std::int64_t>(keys_.bytes() + values_.bytes() + key_scales_.bytes() + value_scales_.bytes());
}

// Grows the activations (DeviceForward) and the logit rows; new buffers are NaN-filled, so an
// element a kernel forgets to write poisons the logits visibly.
void CudaPagedBackend::ensure_scratch(int n_rows, int n_logits, std::int64_t score_floats) {
    forward_.reserve(n_rows, score_floats);
    if (n_logits > logit_rows_) {
        const auto make = [](std::int64_t rows, int width) {
            const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
            DeviceBuffer b(n * sizeof(float));
            poison(b.f32(), n);
            return b;
        };
        last_ = make(n_logits, config_.dim);
        logits_dev_ = make(n_logits, config_.vocab_size);
        logit_rows_ = n_logits;
    }
}

std::span<const float> CudaPagedBackend::forward(std::span<const serve::BatchEntry> batch) {
    if (num_blocks_ == 0) fail("CudaPagedBackend: forward() before allocate_pool()");
    serve::check_batch(config_, batch, num_blocks_, block_size_);  // ids, positions, tables: on the host
    run_step(batch, {}, true);
    return logits_;
}

std::span<const float> CudaPagedBackend::forward_part(std::span<const serve::BatchEntry> batch,
                                                      std::span<const float> input, bool last) {
    if (num_blocks_ == 0) fail("CudaPagedBackend: forward_part() before allocate_pool()");
    run_step(batch, input, last);
    if (last) return logits_;
    return stream_;
}

void CudaPagedBackend::run_step(std::span<const serve::BatchEntry> batch, std::span<const float> input, bool last) {
    const ModelConfig& c = config_;
    const PagedStep step = plan_step(batch, block_size_);
    const int n = step.n_rows;
    // The flash attention keeps its scores on chip: no scratch for them.
    const bool needs_scores = options_.attention != PagedAttention::flash;
    ensure_scratch(n, step.n_logits, needs_scores ? std::int64_t{n} * c.n_heads * step.max_keys : 0);
    const std::size_t int_bytes = step.ints.size() * sizeof(int);
    if (int_bytes > ints_.bytes()) ints_ = DeviceBuffer(std::max(int_bytes, 2 * ints_.bytes()));
    upload(ints_.data(), step.ints.data(), int_bytes);  // the one upload of the step
    const RowPlacement rows = step.rows(ints_.i32());

    const float scale = c.attention_score_scale();  // 1/√head_dim, or the config's (Gemma)
    const std::size_t layer_rows = static_cast<std::size_t>(num_blocks_) * static_cast<std::size_t>(block_size_);
    const std::size_t layer_values = layer_rows * static_cast<std::size_t>(c.kv_dim());
    const std::size_t layer_scales = layer_rows * static_cast<std::size_t>(c.n_kv_heads);
    DeviceForward& f = forward_;

    // The layer loop is DeviceForward's (the one CudaSession runs); this backend's own part: K/V
    // into the pool rows of their slots, then the attention chosen by the options, through the
    // block tables.
    const auto attend = [&](int l) {  // l: the model's layer number; the pool holds this shard's
        const AttentionDims dims = attention_dims(c, l);  // this layer's window and soft-cap
        const std::size_t local = static_cast<std::size_t>(l - weights_.first_layer);
        const std::size_t at = local * layer_values;
        const std::size_t scales_at = local * layer_scales;
        KvRows pool_keys, pool_values;
        if (options_.kv == KvType::int8) {
            std::int8_t* keys = static_cast<std::int8_t*>(keys_.data()) + at;
            std::int8_t* values = static_cast<std::int8_t*>(values_.data()) + at;
            float* key_scales = key_scales_.f32() + scales_at;
            float* value_scales = value_scales_.f32() + scales_at;
            kv_write_rows_int8(keys, key_scales, values, value_scales, f.k(), f.v(), c.n_kv_heads, c.head_dim, rows);
            pool_keys = KvRows::int8(keys, key_scales);
            pool_values = KvRows::int8(values, value_scales);
        } else {
            kv_write_rows(keys_.f32() + at, values_.f32() + at, f.k(), f.v(), c.kv_dim(), rows);
            pool_keys = KvRows::fp32(keys_.f32() + at);
            pool_values = KvRows::fp32(values_.f32() + at);
        }
        switch (options_.attention) {
        case PagedAttention::naive:
            attention_rows_naive(f.q(), pool_keys, pool_values, rows, dims, scale, f.scores(), f.att());
            break;
        case PagedAttention::per_row:
            attention_rows(f.q(), pool_keys, pool_values, rows, dims, scale, f.scores(), f.att());
            break;
        case PagedAttention::flash:
            attention_rows_flash(f.q(), pool_keys, pool_values, rows, dims, scale, f.att());
            break;
        }
    };
    if (!input.empty()) {  // a later pipeline stage: the stream from the stage before
        if (input.size() != static_cast<std::size_t>(n) * static_cast<std::size_t>(c.dim))
            fail("CudaPagedBackend: an input stream of ", input.size(), " numbers for ", n, " rows of ", c.dim);
        upload(f.x(), input.data(), input.size_bytes());
    }
    f.enqueue_layers(options_.matmul, input.empty() ? step.ids(ints_.i32()) : nullptr, rows, attend);
    if (!last) {  // the stream on to the next stage
        stream_.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(c.dim));
        download(stream_.data(), f.x(), stream_.size() * sizeof(float));  // waits for the GPU
        return;
    }

    // Logits only for the rows append_logit_rows names (the last row of each entry that wants them;
    // every row of a speculative check). Gathering rows of x by index is
    // what the embedding kernel does to its table, so it does it here too.
    logits_.resize(static_cast<std::size_t>(step.n_logits) * static_cast<std::size_t>(c.vocab_size));
    if (step.n_logits == 0) {  // chunks in the middle of prompts: only their K/V were wanted
        synchronize("a paged forward pass");  // so that a fault is reported by this step
        return;
    }
    embedding(DeviceMatrix{f.x(), WeightType::f32, n, c.dim}, step.logit_rows(ints_.i32()), step.n_logits,
              last_.f32());  // [n_logits, dim]
    f.enqueue_logits(options_.matmul, last_.f32(), step.n_logits, logits_dev_.f32());  // [n_logits, vocab]
    download(logits_.data(), logits_dev_.data(), logits_.size() * sizeof(float));  // waits for the GPU
}

// ---- Disaggregated prefill/decode: the pool's rows to and from the host --------------------------
//
// The shipment (glass/serve/kv_shipment.hpp) lists, for each layer, K then V, the rows of
// positions first .. end-1 in order; an int8 row travels as its n_kv_heads scales, then its
// kv_dim codes. The pool keeps the same rows, [layer][pool row, kv_dim], and for int8 its scales
// apart, [layer][pool row, n_kv_heads]. Consecutive positions inside one block are consecutive
// pool rows, so each (layer, K/V, block) is one copy each way: a block of fp32 rows lands in the
// shipment as it is; int8 codes and scales go through host staging that interleaves them.

std::size_t CudaPagedBackend::shipment_bytes(std::span<const int> table, int first, int end) const {
    if (num_blocks_ == 0) fail("KV shipment: no KV pool on the device yet (allocate_pool first)");
    serve::check_kv_table(num_blocks_, block_size_, table, first, end, "KV shipment");
    return static_cast<std::size_t>(serve::kv_shipment_bytes(serve::kv_shipment_header(config_, options_.kv, end - first)));
}

// Into `out` (export, device to host) or from `in` (import, host to device). Both directions
// use synchronous copies (device.hpp's download/upload), so an export sees every forward
// enqueued before it and an import is in the pool before the next forward reads it.
void CudaPagedBackend::move_shipment(std::span<const int> table, int first, int end, std::byte* out,
                                     const std::byte* in) const {
    const bool int8 = options_.kv == KvType::int8;
    const std::size_t kv_dim = static_cast<std::size_t>(config_.kv_dim());
    const std::size_t row_bytes = int8 ? kv_dim : kv_dim * sizeof(float);             // one pool row
    const std::size_t scale_bytes = int8 ? config_.n_kv_heads * sizeof(float) : 0;  // its scales
    const std::size_t layer_rows = static_cast<std::size_t>(num_blocks_) * static_cast<std::size_t>(block_size_);
    std::vector<std::byte> codes, scales;  // int8 staging: one block's codes and scales
    std::size_t at = 0;                    // bytes of the shipment done
    for (int layer = 0; layer < config_.n_layers; ++layer)
        for (const bool key : {true, false}) {
            std::byte* rows = static_cast<std::byte*>((key ? keys_ : values_).data()) + layer * layer_rows * row_bytes;
            std::byte* row_scales =
                int8 ? static_cast<std::byte*>((key ? key_scales_ : value_scales_).data()) + layer * layer_rows * scale_bytes
                     : nullptr;
            for (int pos = first; pos < end;) {
                const int count = std::min(end, (pos / block_size_ + 1) * block_size_) - pos;  // to the block's end
                const std::size_t slot = static_cast<std::size_t>(serve::pool_row(table, block_size_, pos));
                const std::size_t n = static_cast<std::size_t>(count);
                pos += count;
                if (!int8) {  // the block's rows are the shipment's next rows, byte for byte
                    if (out) download(out + at, rows + slot * row_bytes, n * row_bytes);
                    else upload(rows + slot * row_bytes, in + at, n * row_bytes);
                    at += n * row_bytes;
                    continue;
                }
                codes.resize(n * row_bytes);
                scales.resize(n * scale_bytes);
                if (out) {
                    download(codes.data(), rows + slot * row_bytes, codes.size());
                    download(scales.data(), row_scales + slot * scale_bytes, scales.size());
                }
                for (std::size_t i = 0; i < n; ++i) {  // per row: scales, then codes
                    if (out) std::copy_n(scales.data() + i * scale_bytes, scale_bytes, out + at);
                    else std::copy_n(in + at, scale_bytes, scales.data() + i * scale_bytes);
                    at += scale_bytes;
                    if (out) std::copy_n(codes.data() + i * row_bytes, row_bytes, out + at);
                    else std::copy_n(in + at, row_bytes, codes.data() + i * row_bytes);
                    at += row_bytes;
                }
                if (in) {
                    upload(rows + slot * row_bytes, codes.data(), codes.size());
                    upload(row_scales + slot * scale_bytes, scales.data(), scales.size());
                }
            }
        }
}

std::vector<std::byte> CudaPagedBackend::export_kv(std::span<const int> table, int first, int end) const {
    std::vector<std::byte> out(shipment_bytes(table, first, end));
    move_shipment(table, first, end, out.data(), nullptr);
    return out;
}

void CudaPagedBackend::import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) {
    const std::size_t expected = shipment_bytes(table, first, end);
    if (bytes.size() != expected)
        fail("KV shipment: ", bytes.size(), " bytes for ", end - first, " positions, expected ", expected);
    move_shipment(table, first, end, nullptr, bytes.data());
}

}  // namespace glass::cuda
