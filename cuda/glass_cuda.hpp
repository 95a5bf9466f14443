/// \file
/// \brief cuda/glass_cuda.hpp — the CUDA twin of every stage, as plain C++ declarations.
/// ```text
/// Everything here is callable from g++-compiled code: no CUDA types appear. Pointers named d_* or
/// documented as "device" point into GPU memory; every shape is written out as in the CPU headers
/// (include/glass/*.hpp), which remain the definition of what each function computes.
///
/// This is the header to include. It declares the stages and includes the three they build on:
///   device.hpp           the device, DeviceBuffer, copies, IntArg, DeviceGraph   device.cu
///   device_matrix.hpp    weights: WeightType, DeviceMatrix, OwnedMatrix        device.cu, quantize.cpp
///   device_kv_cache.hpp  RowPlacement, KvRows, kv_write*(), DeviceKVCache      kv_cache.cu, .cpp
/// The whole model has its own headers: forward.hpp, cuda_session.hpp, paged.hpp. Each CUDA twin
/// below is declared in this header, except kv_write*() and DeviceKVCache (device_kv_cache.hpp)
/// and the two whose header is named:
///
///   CPU reference (include/glass)        CUDA twin (cuda/)
///   embed_tokens        embedding.hpp    embedding()                       embedding.cu
///   rmsnorm             rmsnorm.hpp      rmsnorm_naive(), rmsnorm()        rmsnorm.cu
///   apply_rope          rope.hpp         rope(), rope_rows()               rope.cu
///   x * W.transpose()   (Eigen)          matmul(kernel, ...)               matmul.cu
///   softmax_inplace     softmax.hpp      softmax_rows_naive(), softmax_rows()   softmax.cu
///   causal_attention    attention.hpp    attention_naive(), attention_decode()  attention.cu
///   flash_attention     flash_attention  flash_attention(), flash_decode()  flash_attention.cu
///   quantized_matmul    quantize.hpp     quantized_matmul_naive(), quantized_matmul()  quantize.cu
///   ggml_to_float + x·Wᵀ ggml_quants.hpp kquant_matmul_naive(), kquant_matmul()  kquants.cu
///   gated_mlp           mlp.hpp          swiglu(), geglu(), mlp(); residual_add()   mlp.cu
///   project's bias, embedding scale, soft-caps   add_bias_rows(), scale_values(), soft_cap()   mlp.cu
///   sample              sampling.hpp     DeviceSampler                     sampling.cu
///   KVCache             kv_cache.hpp     DeviceKVCache, kv_write()         kv_cache.cpp, .cu
///   quantize_kv_row     kv_cache.hpp     kv_write_int8() (KvType::int8)    kv_cache.cu
///   CpuSession          transformer.hpp  CudaSession (cuda_session.hpp)    transformer.cpp
///
///   serving (include/glass/serve, many requests per forward pass, K/V in a paged pool): the same
///   rope_rows(), kv_write_rows() and attention_rows*() with a batch's RowPlacement (paged.hpp).
///   PagedKVPool::write  paged_transformer kv_write_rows(), kv_write_rows_int8()    kv_cache.cu
///   attention over gathered keys           attention_rows_naive(), attention_rows(),   attention.cu
///                                          attention_rows_flash() (online softmax, no scores scratch)
///
///   K/V read by every attention but flash's: fp32 rows, or int8 rows + one fp32 scale per
///   (row, KV head) read as scale · (float)q, exactly the CPU's dequantized value (KvRows,
///   device_kv_cache.hpp).
///   CpuPagedBackend     paged_transformer CudaPagedBackend (paged.hpp)     paged.cpp
///
/// Errors: every CUDA call and kernel launch is checked; a failure throws glass::Error naming the
/// call or kernel, the file and the line. Set GLASS_CUDA_SYNC=1 to synchronize after every launch,
/// so an asynchronous fault is reported at the kernel that caused it.
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/sampling.hpp"
#include "glass/session.hpp"

#include "device.hpp"
#include "device_kv_cache.hpp"
#include "device_matrix.hpp"

namespace glass {
struct Model;  // glass/checkpoint.hpp (not included: it brings Eigen, which nvcc need not see)
}

namespace glass::cuda {

// ---- The stages (all pointers are device pointers; launches are asynchronous) -----------------

// embedding.cu — out [n_tokens, table.cols] = rows ids[t] of table [vocab, dim]. The caller checks
// ids on the host (glass::Error); an id outside the table still never reads out of bounds: its row
// becomes NaN.
void embedding(const DeviceMatrix& table, const int* d_ids, int n_tokens, float* d_out);
// embedding.cu — one rank's slice of a table split by vocabulary (tensor parallelism,
// glass/dist/shard.hpp): `table` holds ids [first_id, first_id + table.rows); row t = table row
// ids[t] − first_id for an id inside the slice, zeros for any other (another rank holds it; the
// all-reduce that follows adds exactly one nonzero row per id).
void embedding_slice(const DeviceMatrix& table, int first_id, const int* d_ids, int n_tokens, float* d_out);

// rmsnorm.cu — y [n_tokens, dim] = gain ⊙ x / sqrt(mean(x²) + eps), row by row; y may be x.
// Per-head norms (Qwen3, Gemma 3) are the same call over n · heads rows of head_dim.
void rmsnorm_naive(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y);
void rmsnorm(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y);

// rope.cu — rotate x [n_rows, n_heads * head_dim] in place, row r by its position (RowPlacement).
// d_frequencies [head_dim / 2] holds glass::rope_scaled_frequency(rope_frequency(i, head_dim,
// theta), scaling, i), computed on the host by the same functions the CPU uses, so both sides
// rotate by bit-identical angles.
void rope_rows(float* d_x, int n_heads, int head_dim, const RowPlacement& rows, const float* d_frequencies,
               RopeLayout layout);
DeviceBuffer rope_frequencies(int head_dim, float theta, const RopeScaling& scaling = {});
// The two placements spelled out: rows of one sequence from start_pos; rows at d_positions[t].
void rope(float* d_x, int n_tokens, int n_heads, int head_dim, IntArg start_pos,
          const float* d_frequencies, RopeLayout layout);
void rope_rows(float* d_x, int n_rows, int n_heads, int head_dim, const int* d_positions,
               const float* d_frequencies, RopeLayout layout);

// matmul.cu — y [n, w.rows] = x [n, w.cols] · Wᵀ (W stored [out, in], as in the checkpoint).
enum class MatmulKernel {
    automatic,     // cublas for fp32 weights; warp_per_row for f16/bf16 when n <= 4, else tiled
    naive,         // one thread per output element, reads straight from global memory
    tiled,         // 16×16 output tiles; x and W tiles staged in shared memory
    warp_per_row,  // one warp per output row, 16-byte loads, shuffle reduction (decode: n = 1)
    cublas,        // cublasSgemm, fp32 math (TF32 off); fp32 weights only
};  // q8_0/q4_0 weights go to quantize.cu, q4_k/q5_k/q6_k to kquants.cu: naive -> their naive
    // kernel, the others (not cublas) -> their warp-per-row kernel
const char* to_string(MatmulKernel k);
MatmulKernel matmul_kernel_from_string(const std::string& name);
void matmul(MatmulKernel kernel, const float* d_x, int n, const DeviceMatrix& w, float* d_y);

// softmax.cu — each of `rows` rows of x [rows, n] becomes probabilities, in place. -inf entries
// (masked) become 0. naive: one thread per row, in order; fast: one block per row.
void softmax_rows_naive(float* d_x, int rows, int n);
void softmax_rows(float* d_x, int rows, int n);

// attention.cu — see glass/attention.hpp for the maths. q [n_q, n_heads * head_dim] (rotated),
// keys/values [n_k, n_kv_heads * head_dim] with n_k = start_pos + n_q; out [n_q, n_heads*head_dim].
// Query head h reads KV head h / (n_heads / n_kv_heads). Every score is s = q·k · scale, then
// with a soft-cap (Gemma 2) cap · tanh(s / cap); a query at position p sees keys 0 .. p, or with
// a window (Mistral; Gemma's local layers) only p − window + 1 .. p (glass/attention.hpp).
struct AttentionDims {
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int window = 0;        // keys a query sees, itself included; 0 = every earlier position
    float softcap = 0.0f;  // scores -> softcap · tanh(scores / softcap); 0 = off
};

// Attention of rows placed anywhere (RowPlacement: one sequence's cache, or a serving batch's
// pool), each row over positions 0 .. its own; keys/values are the cache (or pool) rows of one
// layer. One kernel body per method serves both placements (common.cuh's locators):
//   attention_rows_naive: three kernels — scores [n_rows, n_heads, max_keys] with the causal mask,
//     softmax per row, weighted sum of V (d_scores: n_rows · n_heads · max_keys floats);
//   attention_rows: one block per (row, head) does all three, its scores in a scratch row of
//     max_keys floats (d_scores as for the naive one);
//   attention_rows_flash: one block per (row, head), tiles of positions, online softmax, no
//     scratch; head_dim at most 256.
// Each row's numbers depend on its own position and keys only (batch invariance, paged.hpp).
void attention_rows_naive(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                          const AttentionDims& dims, float scale, float* d_scores, float* d_out);
void attention_rows(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                    const AttentionDims& dims, float scale, float* d_scores, float* d_out);
void attention_rows_flash(const float* d_q, const KvRows& keys, const KvRows& values, const RowPlacement& rows,
                          const AttentionDims& dims, float scale, float* d_out);

// Naive causal attention for any n_q (prefill, a chunk, or decode) of one sequence:
// attention_rows_naive. d_scores: n_heads * n_q * n_k floats.
void attention_naive(const float* d_q, const float* d_keys, const float* d_values, int n_q,
                     int start_pos, const AttentionDims& dims, float scale, float* d_scores,
                     float* d_out);
// Decode: one query (position n_k - 1) over the whole cache; one block per query head does
// scores, softmax and the weighted sum (attention_rows). d_scores: n_heads * n_k floats (with n_k
// on the device, the caller sizes it for the largest n_k the graph will see).
void attention_decode(const float* d_q, const float* d_keys, const float* d_values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out);
// The same two over keys and values of either type (both of the same one; the fp32 calls above are these).
void attention_naive(const float* d_q, const KvRows& keys, const KvRows& values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_scores, float* d_out);
void attention_decode(const float* d_q, const KvRows& keys, const KvRows& values, IntArg n_k,
                      const AttentionDims& dims, float scale, float* d_scores, float* d_out);

// flash_attention.cu — the same attention without a score matrix in memory (glass/flash_attention.hpp).
// flash_attention: any n_q (prefill, chunks), tiles of keys in shared memory, online softmax per
// query row; no scratch. flash_decode: one query over n_k keys split into chunks of `chunk`, one
// block per (chunk, head), then a combine; d_partial holds n_heads · flash_decode_splits(n_k,
// chunk) · (head_dim + 2) floats. head_dim at most 256.
void flash_attention(const float* d_q, const float* d_keys, const float* d_values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_out);
int flash_decode_splits(int n_k, int chunk);
void flash_decode(const float* d_q, const float* d_keys, const float* d_values, int n_k, const AttentionDims& dims,
                  float scale, int chunk, float* d_partial, float* d_out);
// Both over keys and values of either type (KvRows). flash_decode's n_k may be read on the device
// (the decode graph): the grid and d_partial are then sized for max_n_k keys (splits past n_k are
// empty and add nothing); given as a number, n_k must equal max_n_k.
void flash_attention(const float* d_q, const KvRows& keys, const KvRows& values, int n_q, int start_pos,
                     const AttentionDims& dims, float scale, float* d_out);
void flash_decode(const float* d_q, const KvRows& keys, const KvRows& values, IntArg n_k, int max_n_k,
                  const AttentionDims& dims, float scale, int chunk, float* d_partial, float* d_out);

// quantize.cu — y [n, rows] = x [n, cols] · W'ᵀ with W' in glass/quantize.hpp's blocks of 32
// (one fp16 scale + 32 int8, or 32 4-bit q + 8, per block), dequantized inside the kernel (C14).
enum class QuantType { q8_0, q4_0 };  // glass::QuantFormat's two formats, same bytes
const char* to_string(QuantType t);
constexpr int kQuantBlockSize = 32;
struct DeviceQuantMatrix {
    const std::uint8_t* quants = nullptr;   // device [rows][row_bytes], 16-byte aligned
    const std::uint16_t* scales = nullptr;  // device [rows][blocks], fp16 bit patterns
    QuantType type = QuantType::q8_0;
    int rows = 0, cols = 0;
    int blocks = 0;     // (cols + 31) / 32
    int row_bytes = 0;  // blocks · 32 (q8) or blocks · 16 (q4)
};
void quantized_matmul_naive(const float* d_x, int n, const DeviceQuantMatrix& w, float* d_y);  // thread per output
void quantized_matmul(const float* d_x, int n, const DeviceQuantMatrix& w, float* d_y);        // warp per row
DeviceQuantMatrix quantized_view(const DeviceMatrix& w);  // a q8_0/q4_0 DeviceMatrix as the kernels take it

// kquants.cu — y [n, rows] = x [n, cols] · W'ᵀ with W' in ggml's k-quant super-blocks of 256
// (glass/ggml_quants.hpp: Q4_K 144 B, Q5_K 176 B, Q6_K 210 B per block), row after row as a GGUF
// file stores them; each weight dequantized in registers exactly as ggml_to_float does.
constexpr int kSuperBlockSize = 256;
struct DeviceKQuantMatrix {
    const std::uint8_t* blocks = nullptr;  // device [rows][cols / 256] super-blocks
    WeightType type = WeightType::q4_k;    // q4_k, q5_k or q6_k
    int rows = 0, cols = 0;                // cols a multiple of 256
    int block_bytes = 0;                   // 144, 176 or 210
};
int kquant_block_bytes(WeightType t);  // bytes of one super-block of a k-quant type
void kquant_matmul_naive(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y);  // thread per output
void kquant_matmul(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y);        // warp per row
DeviceKQuantMatrix kquant_view(const DeviceMatrix& w);  // a q4_k/q5_k/q6_k DeviceMatrix as the kernels take it

// mlp.cu — gate [n] = silu(gate) ⊙ up (swiglu) or gelu_tanh(gate) ⊙ up (geglu: Gemma), in
// place; x [n] += y. mlp(): the whole gated MLP of glass/mlp.hpp for x [n_tokens, dim] with
// scratch gate/up [n_tokens, hidden]; out [n_tokens, dim].
void swiglu(float* d_gate, const float* d_up, std::int64_t n);
void geglu(float* d_gate, const float* d_up, std::int64_t n);
void residual_add(float* d_x, const float* d_y, std::int64_t n);
// mlp.cu — out [n] = Σ over r of all [r, n], added in rank order ((all[0] + all[1]) + all[2]) + ...:
// an all-reduce's last step after an all-gather, the order glass::dist::Communicator::all_reduce_sum
// adds in, so every rank of a tensor-parallel group (collectives.hpp) holds the same bits.
void sum_rank_slices(const float* d_all, int ranks, std::int64_t n, float* d_out);
void mlp(MatmulKernel kernel, const float* d_x, int n_tokens, const DeviceMatrix& w1,
         const DeviceMatrix& w2, const DeviceMatrix& w3, float* d_gate, float* d_up, float* d_out,
         MlpActivation activation = MlpActivation::silu);
// mlp.cu — the elementwise steps of the family deltas, each in place:
//   add_bias_rows: x [n_rows, width] row r += bias [width]   (Qwen2's q/k/v biases)
//   scale_values:  x [n] ×= factor                           (Gemma's embeddings × √dim)
//   soft_cap:      x [n] = cap · tanh(x / cap), cap > 0      (Gemma 2's final logits)
void add_bias_rows(float* d_x, const float* d_bias, int n_rows, int width);
void scale_values(float* d_x, std::int64_t n, float factor);
void soft_cap(float* d_x, std::int64_t n, float cap);

// sampling.cu — glass::sample on the device. The random coin still comes from the host's
// Llama2cRng (one draw per call unless greedy, exactly as the CPU), so the same seed picks the
// same token on both whenever the draw does not land within rounding of a boundary.
class DeviceSampler {
public:
    explicit DeviceSampler(int vocab_size);
    int sample(const float* d_logits, const SamplingParams& params, Llama2cRng& rng);
    int argmax(const float* d_logits);  // lowest id on a tie, like glass::sample_argmax

private:
    int vocab_;
    DeviceBuffer probs_, sorted_probs_, ids_, sorted_ids_, sort_scratch_, result_;
};

// ---- The whole model: forward.hpp (DeviceWeights, DeviceForward), cuda_session.hpp (CudaSession) ----

}  // namespace glass::cuda