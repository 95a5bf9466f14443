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
    : config_(require_device(model.config)), options_(checked(options)), weights_(model, options.weights),
      forward_(config_, weights_) {}

CudaPagedBackend::~CudaPagedBackend() = default;

void CudaPagedBackend::allocate_pool(int num_blocks, int block_size) {
    if (num_blocks < 1 || block_size < 1) fail("KV pool of ", num_blocks, " blocks of ", block_size, " positions");
    const std::size_t rows = static_cast<std::size_t>(config_.n_layers) * static_cast<std::size_t>(num_blocks) *
                             static_cast<std::size_t>(block_size);
    allocate_kv_rows(options_.kv, rows, config_.kv_dim(), config_.n_kv_heads, keys_, values_, key_scales_, value_scales_);
    num_blocks_ = num_blocks;
    block_size_ = block_size;
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
    const ModelConfig& c = config_;
    if (num_blocks_ == 0) fail("CudaPagedBackend: forward() before allocate_pool()");
    serve::check_batch(c, batch, num_blocks_, block_size_);  // ids, positions, tables: on the host
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
    const auto attend = [&](int l) {
        const AttentionDims dims = attention_dims(c, l);  // this layer's window and soft-cap
        const std::size_t at = static_cast<std::size_t>(l) * layer_values;
        const std::size_t scales_at = static_cast<std::size_t>(l) * layer_scales;
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
    f.enqueue_layers(options_.matmul, step.ids(ints_.i32()), rows, attend);

    // Logits only for the rows append_logit_rows names (the last row of each entry that wants them;
    // every row of a speculative check). Gathering rows of x by index is
    // what the embedding kernel does to its table, so it does it here too.
    logits_.resize(static_cast<std::size_t>(step.n_logits) * static_cast<std::size_t>(c.vocab_size));
    if (step.n_logits == 0) {  // chunks in the middle of prompts: only their K/V were wanted
        synchronize("a paged forward pass");  // so that a fault is reported by this step
        return logits_;
    }
    embedding(DeviceMatrix{f.x(), WeightType::f32, n, c.dim}, step.logit_rows(ints_.i32()), step.n_logits,
              last_.f32());  // [n_logits, dim]
    f.enqueue_logits(options_.matmul, last_.f32(), step.n_logits, logits_dev_.f32());  // [n_logits, vocab]
    download(logits_.data(), logits_dev_.data(), logits_.size() * sizeof(float));  // waits for the GPU
    return logits_;
}

}  // namespace glass::cuda
