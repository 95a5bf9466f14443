/// \file
/// \brief glass/fast/kernel_table.hpp — what a kernel set is: one table of inner loops.
/// ```text
/// Every set (kernels_portable.hpp, kernels_avx2*.hpp, kernels_avx512*.hpp, kernels_neon*.hpp)
/// fills this table with functions of the same meaning; kernels.hpp picks one at run time.
/// The table also carries the set's two probe loops (a read-only sum and independent FMA
/// chains), so benchmark.hpp measures the ceilings of the very instructions the set uses.
/// ```
#pragma once

#include <cstdint>

#include "glass/fast/packed_weights.hpp"

namespace glass::fast {

struct Kernels {
    const char* name;  // "portable", "avx2", "avx512", "neon" (GLASS_KERNELS takes these)
    const char* isa;   // the instructions it needs, for people: "AVX2 + FMA + F16C"
    // y[r] (+)= Σ_k W(r,k) x[k], rows of panels [p0, p1)                       (decode)
    void (*matvec)(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate);
    // Y[t][r] (+)= Σ_k W(r,k) X[t][k], t < n, rows of panels [p0, p1)          (prefill)
    // X comes packed into token tiles (pack_tokens, token_tiles.hpp).
    void (*matmul)(const PackedMatrix& w, const float* xp, int n, float* y, long ldy, int p0, int p1,
                   bool accumulate, float* scratch);
    // decode attention over a run of cached positions (rows ld floats apart):
    // out[j] = scale · (q · rows[j]);   y += Σ_j a[j] · rows[j] in order of j
    void (*dot_rows)(const float* q, const float* rows, long ld, int n_rows, int n, float scale, float* out);
    void (*add_rows)(float* y, const float* a, const float* rows, long ld, int n_rows, int n);
    // an int8 KV cache's rows in fp32: out[j·n + i] = s[j·lds] · rows[j·ld + i]
    void (*dequantize_rows)(const std::int8_t* rows, long ld, const float* s, long lds, int n_rows, int n, float* out);
    void (*softmax)(float* x, int n);
    void (*silu_mul)(float* gate, const float* up, int n);
    // prefill attention, m ≤ 4 query rows: S = scale · Q Kᵀ (keys given transposed), O = P V
    void (*attention_scores)(const float* q, long ldq, int m, const float* kt, long ldkt, int n_keys,
                             int hd, float scale, float* s, long lds);
    void (*attention_mix)(const float* p, long ldp, int m, const float* v, long ldv, int n_keys, int hd,
                          float* o, long ldo);
    // max of x[0..n), n ≥ 1, and x[i] = e^(x[i] − shift), i < n, returning the sum: the two
    // steps of FlashAttention's online softmax on one row of a score tile
    float (*row_max)(const float* x, int n);
    float (*exp_shift)(float* x, int n, float shift);
    // y[r] (+)= Σ_b d_{r,b} dx_b Σ_k q_{r,k} qx_k: Q8_0/Q4_0 times int8 x   (decode, int8 activations)
    void (*matvec_int8)(const PackedMatrix& w, const Int8Vector& x, float* y, int p0, int p1, bool accumulate);
    const char* int8_dot;  // which matvec_int8: "avx512-vnni", "avx-vnni", "avx2", "neon-dot" or "portable"
    // matvec_int8's x: x [n] -> q [blocks · 32] int8 (the last block padded with 0), scales
    // [blocks] and sums [blocks] = Σ q, blocks of 32 as quantize.hpp's quantize_activations cuts
    // and rounds them (int8.hpp), the same bytes in every set         (decode, int8 activations)
    void (*quantize_int8)(const float* x, int n, std::int8_t* q, float* scales, std::int32_t* sums);
    // The probes (benchmark.hpp): Σ p[0..n) read front to back (n a multiple of 64, p 64-byte
    // aligned), and `iterations` rounds of 12 independent FMA chains of fma_lanes fp32 lanes
    // each (12 · fma_lanes · 2 FLOPs a round), seeded with `start` so nothing is precomputed.
    float (*read_sum)(const float* p, std::int64_t n);
    float (*fma_chains)(std::int64_t iterations, float start);
    int fma_lanes;
};

// Floats of per-thread scratch the matmul kernels need (one unpacked panel chunk).
constexpr int kScratchFloats = 256 * kPanel;
// Query rows per prefill attention tile (attention_scores / attention_mix take m ≤ this).
constexpr int kAttentionRows = 4;
// Independent chains in every set's fma_chains probe.
constexpr int kProbeChains = 12;

}  // namespace glass::fast
