/// \file
/// \brief cuda/kquants.cu — products with ggml's k-quant weights (Q4_K, Q5_K, Q6_K), dequantized
/// inside the kernel, straight from the blocks a GGUF file stores.
/// ```text
/// In:  x [n, cols] fp32; W' [rows, cols] as ggml super-blocks of 256 weights, row after row:
///      [rows][cols / 256] blocks of 144 (Q4_K), 176 (Q5_K) or 210 (Q6_K) bytes, byte for byte
///      as in the file (glass/ggml_quants.hpp draws each layout).
/// Out: y [n, rows], y[t][r] = Σ_k w(r, k) · x[t][k], accumulated in fp32, where w(r, k) is the
///      fp32 value ggml_to_float gives that weight, computed in registers with the same fp32
///      operations in the same order:
///        Q4_K, Q5_K  w = (d·sc_s)·q − dmin·m_s   sub-blocks s of 32, 6-bit sc_s and m_s
///        Q6_K        w = (d·sc_s)·(q − 32)       sub-blocks s of 16, int8 sc_s
///
/// Both kernels walk a row in "pieces" of 32 weights (piece p: weights 32p .. 32p + 31 of the
/// row, piece p % 8 of super-block p / 8). Within a piece every weight shares its scale (and min),
/// so a piece decodes those once, then widens its 32 small integers one by one (Piece below).
///   naive         one thread per y[t][r]: every piece of the row in order — the definition.
///   warp_per_row  one warp per output row r; lane i takes pieces i, i + 32, ..: the 32 lanes read
///                 4 consecutive super-blocks (576 to 840 bytes) at once, each lane its own piece,
///                 and a shuffle reduction sums the lanes. Loops over the n rows of x (decode).
///                 A row of fewer than 32 pieces (cols < 1024) leaves lanes idle; llama.cpp's
///                 kernels split a super-block finer, at the price of more index arithmetic.
/// Bit for bit: nvcc would contract (d·sc)·q − dmin·m into one fma (rounded once, where ggml's C
/// rounds the product, then the difference); __fmul_rn forbids that, so each w is ggml's exactly
/// and the harness compares against the CPU's own dequantized weights.
/// ```
#include "common.cuh"

namespace glass::cuda {

constexpr int kPiece = 32;                                  // weights per piece
constexpr int kPiecesPerBlock = kSuperBlockSize / kPiece;  // 8

// The fp16 number at p (2-byte aligned: blocks are an even number of bytes, fields at even offsets).
__device__ __forceinline__ float half_at(const std::uint8_t* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
}

// ---- one piece of 32 weights: its scale decoded once, then weight(l) -----------------------------

// Q4_K (kFifthBit false) or Q5_K (true): piece s is sub-block s. Layout: [d][dmin][scales: 12 B]
// [qh: 32 B, Q5_K only][qs: 128 B]; qs chunk s / 2 holds sub-block s in its low (s even) or high
// (s odd) nibbles; Q5_K's fifth bit of weight l is bit s of qh[l].
template <bool kFifthBit>
struct Q45KPiece {
    const std::uint8_t* qs;  // the 32 bytes holding this sub-block's nibbles
    const std::uint8_t* qh;  // Q5_K: the 32 bytes of fifth bits
    int s;
    float d1, min1;          // d·sc_s and dmin·m_s, as ggml computes them
    __device__ Q45KPiece(const std::uint8_t* block, int piece) : s(piece) {
        const std::uint8_t* scales = block + 4;
        int sc, m;  // 6 bits each, packed in 12 bytes (ggml_blocks::k_scale_min)
        if (s < 4) {
            sc = scales[s] & 63;
            m = scales[s + 4] & 63;
        } else {
            sc = (scales[s + 4] & 0x0F) | ((scales[s - 4] >> 6) << 4);
            m = (scales[s + 4] >> 4) | ((scales[s] >> 6) << 4);
        }
        d1 = half_at(block) * static_cast<float>(sc);
        min1 = half_at(block + 2) * static_cast<float>(m);
        qh = block + 16;
        qs = block + (kFifthBit ? 48 : 16) + 32 * (s / 2);
    }
    __device__ __forceinline__ float weight(int l) const {
        int q = (qs[l] >> (4 * (s % 2))) & 0x0F;
        if (kFifthBit) q += ((qh[l] >> s) & 1) << 4;
        return __fmul_rn(d1, static_cast<float>(q)) - min1;
    }
};

// Q6_K: piece s is quarter s % 4 of half h = s / 4 (two sub-blocks of 16). Layout: [ql: 128 B]
// [qh: 64 B][scales: 16 int8][d]. Weight l of the quarter: 4 low bits from ql[64h + 32·(quarter
// % 2) + l] (low nibble for quarters 0, 1; high for 2, 3), 2 high bits from qh[32h + l] bits
// 2·quarter and 2·quarter + 1; scale 8h + 2·quarter + l / 16.
struct Q6KPiece {
    const std::uint8_t* ql;
    const std::uint8_t* qh;
    int low_shift, high_shift;
    float ds0, ds1;  // d·sc of the piece's two sub-blocks of 16 (weights 0-15, 16-31), as ggml computes them
    __device__ Q6KPiece(const std::uint8_t* block, int piece) {
        const int h = piece / 4, quarter = piece % 4;
        ql = block + 64 * h + 32 * (quarter % 2);
        qh = block + 128 + 32 * h;
        low_shift = 4 * (quarter / 2);
        high_shift = 2 * quarter;
        const auto* scales = reinterpret_cast<const std::int8_t*>(block + 192) + 8 * h + 2 * quarter;
        const float d = half_at(block + 208);
        ds0 = d * static_cast<float>(scales[0]);
        ds1 = d * static_cast<float>(scales[1]);
    }
    __device__ __forceinline__ float weight(int l) const {
        const int q = ((ql[l] >> low_shift) & 0x0F) | (((qh[l] >> high_shift) & 3) << 4);
        return (l < 16 ? ds0 : ds1) * static_cast<float>(q - 32);  // a select, not an indexed array: registers
    }
};

// Σ_l w_l · x[l] over one piece (x: the piece's 32 inputs).
template <typename Piece>
__device__ __forceinline__ float piece_dot(const Piece& piece, const float* x) {
    float sum = 0.0f;
    for (int l = 0; l < kPiece; ++l) sum += piece.weight(l) * x[l];
    return sum;
}

__device__ __forceinline__ const std::uint8_t* row_blocks(const DeviceKQuantMatrix& w, int r) {
    return w.blocks + std::int64_t{r} * (w.cols / kSuperBlockSize) * w.block_bytes;
}

// ---- naive ---------------------------------------------------------------------------------------

template <typename Piece>
__global__ void kquant_matmul_naive_kernel(const float* x, int n, DeviceKQuantMatrix w, float* y) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into y
    if (i >= std::int64_t{n} * w.rows) return;
    const std::int64_t t = i / w.rows;
    const int r = static_cast<int>(i % w.rows);
    const std::uint8_t* row = row_blocks(w, r);
    const float* xt = x + t * w.cols;
    float sum = 0.0f;
    for (int p = 0; p < w.cols / kPiece; ++p) {
        const Piece piece(row + (p / kPiecesPerBlock) * w.block_bytes, p % kPiecesPerBlock);
        sum += piece_dot(piece, xt + p * kPiece);
    }
    y[i] = sum;
}

// ---- warp per row --------------------------------------------------------------------------------

constexpr int kKQuantWarpsPerBlock = 8;

template <typename Piece>
__global__ void kquant_matmul_warp_per_row_kernel(const float* x, int n, DeviceKQuantMatrix w, float* y) {
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * kKQuantWarpsPerBlock + threadIdx.x / 32;  // this warp's output row
    if (r >= w.rows) return;  // a whole warp leaves together, so the shuffles below stay full
    const std::uint8_t* row = row_blocks(w, r);
    for (int t = 0; t < n; ++t) {
        const float* xt = x + std::int64_t{t} * w.cols;
        float sum = 0.0f;
        for (int p = lane; p < w.cols / kPiece; p += 32) {
            const Piece piece(row + (p / kPiecesPerBlock) * w.block_bytes, p % kPiecesPerBlock);
            sum += piece_dot(piece, xt + p * kPiece);
        }
        sum = warp_sum(sum);
        if (lane == 0) y[std::int64_t{t} * w.rows + r] = sum;
    }
}

// ---- dispatch ------------------------------------------------------------------------------------

DeviceKQuantMatrix kquant_view(const DeviceMatrix& w) {
    if (!is_k_quant(w.type)) fail("kquant_view: the matrix is ", to_string(w.type), ", not q4_k, q5_k or q6_k");
    DeviceKQuantMatrix k;
    k.blocks = static_cast<const std::uint8_t*>(w.data);
    k.type = w.type;
    k.rows = w.rows;
    k.cols = w.cols;
    k.block_bytes = kquant_block_bytes(w.type);
    return k;
}

static void check_kquant_matrix(const char* who, int n, const DeviceKQuantMatrix& w) {
    if (n < 1 || w.rows < 1 || w.cols < 1)
        fail(who, ": empty shape: x [", n, ", ", w.cols, "], W [", w.rows, ", ", w.cols, "]");
    if (!is_k_quant(w.type)) fail(who, ": the matrix is ", to_string(w.type), ", not q4_k, q5_k or q6_k");
    if (w.cols % kSuperBlockSize != 0)
        fail(who, ": W [", w.rows, ", ", w.cols, "] in ", to_string(w.type), ": rows of ", w.cols,
             " weights are not whole super-blocks of ", kSuperBlockSize);
    if (w.block_bytes != kquant_block_bytes(w.type))
        fail(who, ": ", to_string(w.type), " blocks are ", kquant_block_bytes(w.type), " bytes, not ", w.block_bytes);
    if (reinterpret_cast<std::uintptr_t>(w.blocks) % 2 != 0) fail(who, ": the blocks must start on a 2-byte boundary");
}

using Q4KPiece = Q45KPiece<false>;
using Q5KPiece = Q45KPiece<true>;

template <typename Piece>
static void launch_naive(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y) {
    kquant_matmul_naive_kernel<Piece><<<grid_for(std::int64_t{n} * w.rows, 256), 256>>>(d_x, n, w, d_y);
    CHECK_LAUNCH("kquant_matmul_naive_kernel");
}

template <typename Piece>
static void launch_warp_per_row(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y) {
    kquant_matmul_warp_per_row_kernel<Piece><<<grid_for(w.rows, kKQuantWarpsPerBlock), kKQuantWarpsPerBlock * 32>>>(
        d_x, n, w, d_y);
    CHECK_LAUNCH("kquant_matmul_warp_per_row_kernel");
}

// Each kernel is a template over the piece type: the type is chosen once, on the host, so the
// kernel's inner loop has no per-weight branch on it.
void kquant_matmul_naive(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y) {
    check_kquant_matrix("kquant_matmul_naive", n, w);
    if (w.type == WeightType::q4_k) launch_naive<Q4KPiece>(d_x, n, w, d_y);
    else if (w.type == WeightType::q5_k) launch_naive<Q5KPiece>(d_x, n, w, d_y);
    else launch_naive<Q6KPiece>(d_x, n, w, d_y);
}

void kquant_matmul(const float* d_x, int n, const DeviceKQuantMatrix& w, float* d_y) {
    check_kquant_matrix("kquant_matmul", n, w);
    if (w.type == WeightType::q4_k) launch_warp_per_row<Q4KPiece>(d_x, n, w, d_y);
    else if (w.type == WeightType::q5_k) launch_warp_per_row<Q5KPiece>(d_x, n, w, d_y);
    else launch_warp_per_row<Q6KPiece>(d_x, n, w, d_y);
}

}  // namespace glass::cuda
