/// \file
/// \brief cuda/paged.hpp — the CUDA twin of the serving engine's backend: many requests in one
/// forward pass, their K/V in a paged pool on the device (plain C++, like glass_cuda.hpp).
/// ```text
/// The CUDA twin of glass/serve/paged_transformer.hpp. A step's rows come from several requests
/// (BatchEntry, glass/serve/paged_backend.hpp), each at its own positions, and each request's K/V
/// sit in fixed-size blocks of one pool per layer, [num_blocks * block_size, kv_dim]: position p
/// of a request is pool row table[p / block_size] * block_size + p % block_size.
///
///   PagedStep, plan_step()    one step's rows as the kernels read them (a RowPlacement)   paged.cpp
///   CudaPagedBackend          serve::PagedBackend on the GPU                             paged.cpp
///
/// The kernels are the ones CudaSession runs, given the batch's RowPlacement (device_kv_cache.hpp):
/// rope_rows() (rope.cu), kv_write_rows(), kv_write_rows_int8() (kv_cache.cu: K/V rows into their
/// pool slots), attention_rows_naive(), attention_rows(), attention_rows_flash() (attention.cu:
/// attention through block tables; PagedAttention picks one). The layer loop itself is
/// DeviceForward's (forward.hpp), shared with CudaSession. With KvType::int8 (CudaPagedOptions::kv) the pool holds int8 K/V
/// [num_blocks * block_size, kv_dim] plus one fp32 scale per (pool row, KV head), [num_blocks *
/// block_size, n_kv_heads], for K and for V: the CPU's PagedKVPool(..., KvType::int8) values.
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "glass/serve/paged_backend.hpp"  // Eigen-free: BatchEntry, PagedBackend
#include "cuda_session.hpp"

namespace glass::cuda {

// The host side of one step (paged.cpp): every int the device needs, in one array, so a step
// uploads them with one copy:
//   ids [n_rows] | positions [n_rows] | slots [n_rows] | table_start [n_rows] |
//   logit_rows [n_logits] (append_logit_rows: each entry's last row, or all) | block_ids
struct PagedStep {
    std::vector<int> ints;
    int n_rows = 0;
    int n_logits = 0;
    int block_size = 0;
    int max_keys = 0;
    // Views into a device copy of `ints`.
    const int* ids(const int* d_ints) const { return d_ints; }
    const int* logit_rows(const int* d_ints) const { return d_ints + 4 * std::size_t(n_rows); }
    RowPlacement rows(const int* d_ints) const;  // a batch placement (device_kv_cache.hpp)
};
// Lays out a batch (checked first with serve::check_batch by the caller). Only the blocks each
// entry's positions need are copied from its table.
PagedStep plan_step(std::span<const serve::BatchEntry> batch, int block_size);

// Which attention CudaPagedBackend::forward runs (attention.cu). All three are batch invariant.
enum class PagedAttention {
    naive,    // attention_rows_naive: scores, softmax, weighted sum (three kernels)
    per_row,  // attention_rows: one block per (row, head), scores in a scratch row
    flash,    // attention_rows_flash: one block per (row, head), online softmax, no scratch
};
const char* to_string(PagedAttention a);

struct CudaPagedOptions {
    WeightType weights = WeightType::f32;
    // naive, tiled or warp_per_row: each output number is summed in an order that does not depend
    // on how many rows the product has. Not cublas (nor automatic, which picks by n): cuBLAS may
    // choose a different algorithm, and so a different summation order, for a different batch
    // shape, and then a request's tokens would depend on who else is in the batch.
    MatmulKernel matmul = MatmulKernel::tiled;
    PagedAttention attention = PagedAttention::per_row;
    KvType kv = KvType::fp32;      // the pool's storage: int8 = kv_write_rows_int8, attention reads int8
    // One rank of a split model (parallel_paged.hpp): the model given is that rank's shard
    // (glass::dist::shard_model), holding the whole model's layers share.first_layer ..; `share`
    // completes its partial sums across its tensor-parallel group. Default: one process.
    RankShare share = {};
};

// serve::PagedBackend on the GPU: weights uploaded once; allocate_pool() puts the K/V pool on the
// device; forward() uploads the step's ints (plan_step) in one copy, runs every layer over all
// rows at once (each weight matrix is read by one product per step) and brings back the logits
// of the entries that want them. Batch invariant: a row's numbers do not depend on the batch, so
// the engine gives each request exactly what a PagedSession over this backend gives it alone.
class CudaPagedBackend : public serve::PagedBackend {
public:
    explicit CudaPagedBackend(const Model& model, CudaPagedOptions options = {});
    ~CudaPagedBackend() override;

    const ModelConfig& config() const override { return config_; }
    void allocate_pool(int num_blocks, int block_size) override;
    std::int64_t pool_bytes() const override;  // K, V and (int8) their scales, as allocated
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const;  // what allocate_pool would allocate
    KvType kv_type() const override { return options_.kv; }
    std::span<const float> forward(std::span<const serve::BatchEntry> batch) override;
    std::int64_t weight_bytes() const override { return weights_.bytes_per_forward; }
    const CudaPagedOptions& options() const { return options_; }
    // Disaggregated prefill/decode (glass/serve/kv_shipment.hpp): positions first .. end-1 of the
    // sequence whose blocks `table` lists, copied from the pool to the host in the shipment's
    // layout, or from the host into the pool. The same bytes as the CPU backends' for the same rows.
    std::vector<std::byte> export_kv(std::span<const int> table, int first, int end) const override;
    void import_kv(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override;
    // One rank of a split model: the batch through this shard's layers. `input`: the stream
    // [N, dim] from the pipeline stage before (empty: embed the tokens). Returns the stream [N, dim]
    // or, when `last`, the logits [n_logits, shard's vocabulary slice]. The batch was checked at
    // rank 0 against the whole model (its ids are outside this shard's vocabulary as often as not).
    std::span<const float> forward_part(std::span<const serve::BatchEntry> batch, std::span<const float> input, bool last);

private:
    void run_step(std::span<const serve::BatchEntry> batch, std::span<const float> input, bool last);
    void ensure_scratch(int n_rows, int n_logits, std::int64_t score_floats);
    std::size_t shipment_bytes(std::span<const int> table, int first, int end) const;
    void move_shipment(std::span<const int> table, int first, int end, std::byte* out, const std::byte* in) const;

    ModelConfig config_;
    CudaPagedOptions options_;
    DeviceWeights weights_;
    // The pool: keys_, values_ [layer][num_blocks * block_size, kv_dim], fp32 NaN until written; or
    // int8 with key_scales_, value_scales_ [layer][num_blocks * block_size, n_kv_heads], NaN until written.
    int num_blocks_ = 0, block_size_ = 0;
    DeviceBuffer keys_, values_, key_scales_, value_scales_;
    DeviceForward forward_;  // the layer loop and its activations, grown to the largest step seen
    // Logit rows, grown (never shrunk) to the most a step wanted; NaN-filled when (re)allocated.
    int logit_rows_ = 0;
    DeviceBuffer ints_, last_, logits_dev_;
    std::vector<float> logits_;  // [n_logits, vocab], returned by forward()
    std::vector<float> stream_;  // [N, dim], returned by forward_part() before the last stage
};

}  // namespace glass::cuda
