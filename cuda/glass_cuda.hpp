/// \file
/// \brief cuda/glass_cuda.hpp — the CUDA twin of every stage, as plain C++ declarations.
/// ```text
/// Everything here is callable from g++-compiled code: no CUDA types appear. Pointers named d_* or
/// documented as "device" point into GPU memory; every shape is written out as in the CPU headers
/// (include/glass/*.hpp), which remain the definition of what each function computes:
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
///   (row, KV head) read as scale · (float)q, exactly the CPU's dequantized value (KvRows below).
///   CpuPagedBackend     paged_transformer CudaPagedBackend                 paged.cpp
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

namespace glass {
struct Model;  // glass/checkpoint.hpp (not included: it brings Eigen, which nvcc need not see)
}

namespace glass::cuda {

// ---- The device --------------------------------------------------------------------------------

// True when a usable CUDA device is present. Any failure of the query (no driver, a driver too old
// for this runtime, no GPU) counts as "no device"; `why` then says what the runtime reported.
bool device_present(std::string* why = nullptr);
std::string device_name();  // "NVIDIA H200", ...
// True in libglass_cuda_emulated (the same kernels run by the CPU emulator, emulator/), false
// in libglass_cuda: lets one compiled test program know which of the two it was linked to.
bool runs_on_emulator();
void synchronize(const char* what);  // waits for all queued work; names `what` on failure
// Marks the region a profiler started with "profile from start: off" looks at (Nsight Compute's
// `ncu --profile-from-start off`; scripts/gpu-check times one decode step's kernels this way).
void profiler_start();
void profiler_stop();

// Device memory owned by one object (cudaMalloc / cudaFree). Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    float* f32() const { return static_cast<float*>(data_); }
    int* i32() const { return static_cast<int*>(data_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

void upload(void* d_dst, const void* host_src, std::size_t bytes);
void download(void* host_dst, const void* d_src, std::size_t bytes);
void copy_on_device(void* d_dst, const void* d_src, std::size_t bytes);
// NaN-fill n floats: an output the kernel forgets to write then fails every comparison.
void poison(float* d, std::size_t n);

// Convenience for tests and setup: a device copy of host floats / ints.
DeviceBuffer to_device(std::span<const float> host);
DeviceBuffer to_device(std::span<const int> host);
std::vector<float> to_host(const float* d, std::size_t n);

// Device-to-device copy bandwidth (bytes read + bytes written per second), measured with CUDA
// events over `repeats` copies of `bytes` bytes: the ceiling memory-bound kernels are judged by.
double measure_copy_bandwidth(std::size_t bytes, int repeats);

// ---- Streams, graphs, and arguments read when a kernel runs ------------------------------------
//
// All of glass's device work goes to the calling thread's default stream: cuda/ is compiled with
// nvcc's --default-stream per-thread, and cuBLAS is pointed at the same stream. Unlike the legacy
// default stream, that one can be captured into a CUDA graph.

// An int that a kernel reads when it runs rather than when it is queued: `value`, or, when
// `device` is set, the int stored at that device address. A graph replays every launch with the
// arguments it was captured with, so the decode graph (CudaOptions::graph) passes the position
// this way and the host rewrites that int before each replay. A plain int converts implicitly.
struct IntArg {
    int value = 0;
    const int* device = nullptr;
    IntArg(int v) : value(v) {}  // NOLINT(google-explicit-constructor): rope(..., start_pos, ...)
    static IntArg at(const int* d_value) {
        IntArg a(0);
        a.device = d_value;
        return a;
    }
    bool on_device() const { return device != nullptr; }
};

// A CUDA graph: device work recorded once, then replayed by one call. Launching ~200 small kernels
// one by one costs a few microseconds of CPU and GPU time each; a replay queues them all at once.
// capture() runs `enqueue_work` with the stream in capture mode (launches and asynchronous copies
// are recorded, not run; anything that would wait for the device fails, naming the call), then
// builds the executable graph. Move-only.
class DeviceGraph {
public:
    DeviceGraph() = default;
    ~DeviceGraph();
    DeviceGraph(DeviceGraph&& other) noexcept;
    DeviceGraph& operator=(DeviceGraph&& other) noexcept;
    DeviceGraph(const DeviceGraph&) = delete;
    DeviceGraph& operator=(const DeviceGraph&) = delete;

    void capture(const std::function<void()>& enqueue_work);
    void replay() const;  // queues the whole recording; returns without waiting
    void clear();
    bool empty() const { return exec_ == nullptr; }
    std::size_t nodes() const { return nodes_; }  // kernels + copies recorded

private:
    void* exec_ = nullptr;  // cudaGraphExec_t
    std::size_t nodes_ = 0;
};

// ---- Weights -----------------------------------------------------------------------------------

// How a weight matrix is stored on the device. Arithmetic is always fp32; f16/bf16 only halve the
// bytes read (the decode bottleneck), rounded to nearest even. q8_0/q4_0 are glass/quantize.hpp's
// blocks of 32 with one fp16 scale (1.0625 / 0.5625 bytes per weight), widened inside the kernel.
// q4_k/q5_k/q6_k are ggml's k-quant super-blocks of 256 weights (glass/ggml_quants.hpp: 4.5, 5.5
// and 6.5625 bits, i.e. 0.5625, 0.6875 and 0.8203125 bytes per weight), widened inside the kernel.
enum class WeightType { f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k };
const char* to_string(WeightType t);  // "fp32", "fp16", "bf16", "q8", "q4", "q4_k", "q5_k", "q6_k"
WeightType weight_type_from_string(const std::string& name);  // those, or "f32"/"f16"/"q8_0"/"q4_0"
double bytes_per_weight(WeightType t);                         // scales included for the integer types
double quantized_bytes_per_weight(WeightType t);               // the integer types only (quantize.cpp)
inline bool is_quantized(WeightType t) { return t == WeightType::q8_0 || t == WeightType::q4_0; }
inline bool is_k_quant(WeightType t) { return t == WeightType::q4_k || t == WeightType::q5_k || t == WeightType::q6_k; }
// Weights stored as small integers and scales (q8/q4 or a k-quant): quantized on the host at
// upload, never converted on the device, never an embedding table.
inline bool has_integer_weights(WeightType t) { return is_quantized(t) || is_k_quant(t); }

// A row-major [rows, cols] matrix in device memory. f32/f16/bf16: `data` holds rows · cols values.
// q8_0/q4_0: `data` holds the integers [rows][row_bytes] (16-byte aligned) and `scales` the fp16
// scale bits [rows][blocks], exactly a QuantizedMatrix's two arrays (quantized_view below).
// q4_k/q5_k/q6_k: `data` holds ggml's super-blocks as a GGUF file stores them, row after row
// ([rows][cols / 256] blocks, scales inside each block), `scales` is unused (kquant_view below).
struct DeviceMatrix {
    const void* data = nullptr;
    WeightType type = WeightType::f32;
    int rows = 0;
    int cols = 0;
    const std::uint16_t* scales = nullptr;  // q8_0/q4_0 only
};

// fp32 device floats -> the same values stored as `type` (n values), and back to fp32. The round
// trip gives the CPU reference the exact weights a f16/bf16 kernel sees.
void convert_weights(const float* d_src, void* d_dst, std::size_t n, WeightType type);
void widen_weights(const void* d_src, float* d_dst, std::size_t n, WeightType type);

// An owned device copy of a host fp32 matrix [rows, cols], stored as `type` (q8_0/q4_0: quantized
// on the host by glass::quantize, quantize.cpp, so the device holds the CPU's integers and scales;
// q4_k/q5_k/q6_k: by glass::ggml_from_float, so it holds the blocks a GGUF of that type would).
struct OwnedMatrix {
    DeviceBuffer buffer;
    DeviceMatrix view;
};
OwnedMatrix upload_matrix(const float* host, int rows, int cols, WeightType type);
// The integer types only. A k-quant needs cols a multiple of 256 (whole super-blocks per row).
OwnedMatrix upload_quantized(const float* host, int rows, int cols, WeightType type);
std::int64_t matrix_bytes(const DeviceMatrix& w);  // bytes of its values as stored (scales included)

// ---- The stages (all pointers are device pointers; launches are asynchronous) -----------------

// embedding.cu — out [n_tokens, table.cols] = rows ids[t] of table [vocab, dim]. The caller checks
// ids on the host (glass::Error); an id outside the table still never reads out of bounds: its row
// becomes NaN.
void embedding(const DeviceMatrix& table, const int* d_ids, int n_tokens, float* d_out);

// rmsnorm.cu — y [n_tokens, dim] = gain ⊙ x / sqrt(mean(x²) + eps), row by row; y may be x.
// Per-head norms (Qwen3, Gemma 3) are the same call over n · heads rows of head_dim.
void rmsnorm_naive(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y);
void rmsnorm(const float* d_x, const float* d_gain, int n_tokens, int dim, float eps, float* d_y);

// ---- Where the rows of a forward pass sit --------------------------------------------------------
//
// RoPE, the K/V write and attention need, for each row r of a pass, its position, the cache row
// its own K/V go to, and the cache rows of the keys it sees. One description serves CudaSession's
// single sequence and CudaPagedBackend's serving batch, so each of those kernels is written once
// (the device side reads it through a locator, common.cuh):
//   one sequence (RowPlacement::sequence): row r at position start + r; the cache row of
//     position p is p (K/V rows of one layer [seq_len, kv_dim], as DeviceKVCache keeps them);
//   a serving batch (paged.hpp's plan_step): row r at positions[r] of its request; its K/V go to
//     pool row slots[r]; position p of its request is pool row
//     block_ids[table_start[r] + p / block_size] · block_size + p % block_size.
struct RowPlacement {
    int n_rows = 0;
    // One sequence: row r at value(base) + shift + r. `base` may be read on the device when the
    // kernel runs (the decode graph): the start position (shift 0) or the key count after the
    // pass (shift -n_rows), whichever the caller holds.
    IntArg base = 0;
    int shift = 0;
    int max_keys = 0;     // the most keys any row sees: the width of a row of scores (naive attention)
    int block_size = 0;   // a batch: positions per pool block
    const int* positions = nullptr;    // a batch: [n_rows] device ints, each row's position
    const int* slots = nullptr;        // a batch: [n_rows] the pool row of the row's own K/V
    const int* table_start = nullptr;  // a batch: [n_rows] where its request's table starts in block_ids
    const int* block_ids = nullptr;    // a batch: every request's block table, one after another
    bool batch() const { return positions != nullptr; }
    // n_rows rows of one sequence at positions start .. start + n_rows - 1.
    static RowPlacement sequence(int n_rows, IntArg start) {
        RowPlacement p;
        p.n_rows = n_rows;
        p.base = start;
        p.max_keys = start.on_device() ? 0 : start.value + n_rows;  // on the device: unknown to the host
        return p;
    }
    // The same, given the key count after the pass (n_keys = start + n_rows) instead of start.
    static RowPlacement sequence_ending(int n_rows, IntArg n_keys) {
        RowPlacement p = sequence(n_rows, n_keys);
        p.shift = -n_rows;
        p.max_keys = n_keys.on_device() ? 0 : n_keys.value;
        return p;
    }
};

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
// The keys (or values) an attention kernel reads: one layer's cache rows [n_k, n_kv_heads * head_dim]
// (or a pool's, paged.hpp) in device memory, as fp32, or as int8 with one fp32 scale per (row, KV
// head) — scales [n_k, n_kv_heads], the layout of kv_write_int8() — which the kernels read as
// scale · (float)q, the value the CPU's int8 cache gives back (glass/kv_cache.hpp). Reading int8
// directly is the point of it: a decode step reads a quarter of the bytes of fp32.
struct KvRows {
    KvType storage = KvType::fp32;
    const float* f32 = nullptr;         // fp32 rows
    const std::int8_t* q = nullptr;     // int8 rows
    const float* scales = nullptr;      // int8: [rows, n_kv_heads]
    static KvRows fp32(const float* d_rows) {
        KvRows r;
        r.f32 = d_rows;
        return r;
    }
    static KvRows int8(const std::int8_t* d_rows, const float* d_scales) {
        KvRows r;
        r.storage = KvType::int8;
        r.q = d_rows;
        r.scales = d_scales;
        return r;
    }
    KvType type() const { return storage; }
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

// ---- The KV cache in device memory -------------------------------------------------------------

// kv_cache.cu — the cache (or pool) row of each row r of k, v [n_rows, kv_dim] (RowPlacement:
// position end - n_rows + r of one sequence, or a batch's slots[r]) = that row.
void kv_write_rows(float* d_keys, float* d_values, const float* d_k, const float* d_v, int kv_dim,
                   const RowPlacement& rows);
// The int8 twin: each row quantized per KV head (quantize_kv_row, glass/kv_cache.hpp) into the
// int8 rows [cache rows, n_kv_heads * head_dim] and scales [cache rows, n_kv_heads].
void kv_write_rows_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                        const float* d_k, const float* d_v, int n_kv_heads, int head_dim, const RowPlacement& rows);
// One sequence: keys, values [seq_len, kv_dim] (one layer) rows start_pos .. start_pos + n_new - 1
// = k, v [n_new, kv_dim].
void kv_write(float* d_keys, float* d_values, const float* d_k, const float* d_v, int n_new, int kv_dim,
              IntArg start_pos);

// kv_cache.cu — the int8 twin (KvType::int8): rows start_pos .. start_pos + n_new - 1 of keys,
// values [seq_len, n_kv_heads * head_dim] int8 and of key_scales, value_scales [seq_len, n_kv_heads]
// = quantize_kv_row (glass/kv_cache.hpp) of each row of k, v [n_new, n_kv_heads * head_dim]: per
// (row, KV head) s = max |x| / 127 (NaN if a value is not finite), q = round-half-even(x / s)
// clamped to ±127 (0 when s is 0 or NaN) — the CPU's integers and scales exactly.
void kv_write_int8(std::int8_t* d_keys, float* d_key_scales, std::int8_t* d_values, float* d_value_scales,
                   const float* d_k, const float* d_v, int n_new, int n_kv_heads, int head_dim, IntArg start_pos);

// K and V storage for `rows` cache rows of `kv_dim` values (kv_cache.cpp), shared by the session's
// cache and the paged pool: fp32 floats, or int8 bytes plus one fp32 scale per (row, KV head) for
// each. Previous buffers are freed first. Unwritten rows read as NaN: NaN values (fp32) or NaN
// scales (int8; NaN · q is NaN, q = 0 included), so a read that strays past them shows.
void allocate_kv_rows(KvType type, std::size_t rows, int kv_dim, int n_kv_heads, DeviceBuffer& keys,
                      DeviceBuffer& values, DeviceBuffer& key_scales, DeviceBuffer& value_scales);


// Same layout as glass::KVCache: [layer][position, kv_head, head_dim], one [seq_len, kv_dim] block
// per layer for K and one for V, allocated once. Same rules (checked on the host). fp32, or with
// KvType::int8 int8 blocks plus scales [layer][seq_len, n_kv_heads] for K and for V (the CPU's
// KVCache(c, KvType::int8) holds exactly their dequantized values). Unwritten rows are NaN (fp32)
// or have NaN scales (int8).
class DeviceKVCache {
public:
    explicit DeviceKVCache(const ModelConfig& c, KvType type = KvType::fp32);
    KvType type() const { return type_; }
    int length() const { return length_; }
    int capacity() const { return capacity_; }
    // Copy k, v (device, [n_new, kv_dim]) into rows start_pos .. start_pos + n_new - 1 of `layer`.
    // With start_pos on the device (a graph), the caller checks check_kv_write before each replay.
    void write(int layer, IntArg start_pos, const float* d_k, const float* d_v, int n_new);
    void advance(int n_new);
    void clear() { length_ = 0; }
    void rewind(int position);  // speculative decoding's rollback: the length goes back
    const float* keys(int layer) const;    // fp32 only: [seq_len, kv_dim] (rows 0..length-1 valid)
    const float* values(int layer) const;
    KvRows key_rows(int layer) const;      // either type, as the attention kernels read it
    KvRows value_rows(int layer) const;
    std::int64_t bytes_used(const ModelConfig& c) const { return kv_bytes_per_token(c, type_) * length_; }

private:
    std::size_t layer_offset(int layer) const;  // values into one [seq_len, kv_dim] block
    KvType type_ = KvType::fp32;
    DeviceBuffer keys_, values_;                 // fp32 or int8 [layer][seq_len, kv_dim]
    DeviceBuffer key_scales_, value_scales_;     // int8 only: [layer][seq_len, n_kv_heads]
    int n_layers_ = 0, capacity_ = 0, kv_dim_ = 0, n_kv_heads_ = 0, head_dim_ = 0, length_ = 0;
};

// ---- The whole model: forward.hpp (DeviceWeights, DeviceForward), cuda_session.hpp (CudaSession) ----

}  // namespace glass::cuda
