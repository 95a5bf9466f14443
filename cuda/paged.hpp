/// \file
/// \brief cuda/paged.hpp — the CUDA twin of the serving engine's backend: many requests in one
/// forward pass, their K/V in a paged pool on the device (plain C++, like glass_cuda.hpp).
/// ```text
/// The CUDA twin of glass/serve/paged_transformer.hpp. A step's rows come from several requests
/// (BatchEntry, glass/serve/paged_backend.hpp), each at its own positions, and each request's K/V
/// sit in fixed-size blocks of one pool per layer, [num_blocks * block_size, kv_dim]: position p
/// of a request is pool row table[p / block_size] * block_size + p % block_size.
///
///   PagedRows, PagedStep, plan_step()    one step's rows as the kernels read them   paged.cpp
///   paged_kv_write(), paged_kv_write_int8()   K/V rows into their pool slots        paged_attention.cu
///   paged_attention_naive(), paged_attention(),  attention through block tables     paged_attention.cu
///   paged_flash_attention()                      (PagedAttention: naive, per_row, flash)
///   CudaPagedBackend                     serve::PagedBackend on the GPU             paged.cpp
///
/// rope_rows() (rope.cu), the per-row RoPE a step also needs, sits with the other stages in
/// glass_cuda.hpp. With KvType::int8 (CudaPagedOptions::kv) the pool holds int8 K/V
/// [num_blocks * block_size, kv_dim] plus one fp32 scale per (pool row, KV head), [num_blocks *
/// block_size, n_kv_heads], for K and for V: the CPU's PagedKVPool(..., KvType::int8) values.
/// ```
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "glass/serve/paged_backend.hpp"  // Eigen-free: BatchEntry, PagedBackend
#include "cuda_session.hpp"

namespace glass::cuda {

// One step's rows as the paged kernels read them: device arrays indexed by row (all rows of all
// entries, stacked in entry order, as paged_forward stacks them).
struct PagedRows {
    int n_rows = 0;
    int block_size = 0;
    int max_keys = 0;                  // the largest positions[r] + 1: width of the scores scratch
    const int* positions = nullptr;    // [n_rows] the row's position in its own request
    const int* slots = nullptr;        // [n_rows] the pool row where the row's own K and V go
    const int* table_start = nullptr;  // [n_rows] where its request's block table starts in block_ids
    const int* block_ids = nullptr;    // every entry's block table, one after another
};

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
    PagedRows rows(const int* d_ints) const;
};
// Lays out a batch (checked first with serve::check_batch by the caller). Only the blocks each
// entry's positions need are copied from its table.
PagedStep plan_step(std::span<const serve::BatchEntry> batch, int block_size);

// paged_attention.cu (all pointers are device pointers; launches are asynchronous).
// Pool rows rows.slots[r] of one layer's keys/values [pool_rows, kv_dim] = row r of k, v [n_rows,
// kv_dim]. The slots were checked on the host (serve::check_batch).
void paged_kv_write(float* d_pool_keys, float* d_pool_values, const float* d_k, const float* d_v, int kv_dim,
                    const PagedRows& rows);
// The int8 pool: pool rows rows.slots[r] of keys/values [pool_rows, n_kv_heads * head_dim] int8 and
// of key/value scales [pool_rows, n_kv_heads] = quantize_kv_row (glass/kv_cache.hpp) of row r of k, v.
void paged_kv_write_int8(std::int8_t* d_pool_keys, float* d_pool_key_scales, std::int8_t* d_pool_values,
                         float* d_pool_value_scales, const float* d_k, const float* d_v, int n_kv_heads, int head_dim,
                         const PagedRows& rows);
// out [n_rows, n_heads * head_dim]: row r of q [n_rows, n_heads * head_dim] attends to positions
// 0 .. positions[r] of its own request, read from the pool through its block table (causal per
// request; GQA as in attention_naive). Both compute every row the same way whatever else is in
// the batch (see paged_attention.cu).
// Naive: scores with the mask, softmax, weighted sum (three kernels); d_scores: n_rows * n_heads *
// max_keys floats.
void paged_attention_naive(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                           float* d_out);
// Per row: one block per (row, head) walking the request's blocks; d_scores as for the naive one.
void paged_attention(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                     const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                     float* d_out);
// Flash: one block per (row, head) walking the request's positions in tiles with the online
// softmax (glass/flash_attention.hpp); no scores scratch. head_dim <= 256.
void paged_flash_attention(const float* d_q, const float* d_pool_keys, const float* d_pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_out);
// All three over a pool of either type (KvRows, glass_cuda.hpp: fp32, or int8 + scales); the fp32 calls
// above are these.
void paged_attention_naive(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_scores,
                           float* d_out);
void paged_attention(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values, const PagedRows& rows,
                     const AttentionDims& dims, float scale, float* d_scores, float* d_out);
void paged_flash_attention(const float* d_q, const KvRows& pool_keys, const KvRows& pool_values,
                           const PagedRows& rows, const AttentionDims& dims, float scale, float* d_out);

// Which paged attention CudaPagedBackend::forward runs. All three are batch invariant.
enum class PagedAttention {
    naive,    // paged_attention_naive: scores, softmax, weighted sum (three kernels)
    per_row,  // paged_attention: one block per (row, head), scores in a scratch row
    flash,    // paged_flash_attention: one block per (row, head), online softmax, no scratch
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
    KvType kv = KvType::fp32;      // the pool's storage: int8 = paged_kv_write_int8, attention reads int8
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
    KvType kv_type() const override { return options_.kv; }
    std::span<const float> forward(std::span<const serve::BatchEntry> batch) override;
    std::int64_t weight_bytes() const override { return weights_.bytes_per_forward; }
    const CudaPagedOptions& options() const { return options_; }

private:
    void ensure_scratch(int n_rows, int n_logits, std::int64_t score_floats);

    ModelConfig config_;
    CudaPagedOptions options_;
    DeviceWeights weights_;
    // The pool: keys_, values_ [layer][num_blocks * block_size, kv_dim], fp32 NaN until written; or
    // int8 with key_scales_, value_scales_ [layer][num_blocks * block_size, n_kv_heads], NaN until written.
    int num_blocks_ = 0, block_size_ = 0;
    DeviceBuffer keys_, values_, key_scales_, value_scales_;
    // Scratch, grown (never shrunk) to the largest step seen; NaN-filled when (re)allocated.
    int scratch_rows_ = 0, logit_rows_ = 0;
    std::int64_t score_capacity_ = 0;
    DeviceBuffer ints_, x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, scores_, last_, logits_dev_;
    std::vector<float> logits_;  // [n_logits, vocab], returned by forward()
};

}  // namespace glass::cuda
