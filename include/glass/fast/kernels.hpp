/// \file
/// \brief glass/fast/kernels.hpp — one table of inner loops, chosen once at run time.
/// ```text
/// The AVX-512 set (kernels_avx512.hpp, kernels_avx512_attention.hpp) needs AVX-512
/// F/BW/VL/DQ (Intel since Skylake-X, AMD since Zen 4); anything else gets the portable set
/// (kernels_portable.hpp). The choice is a run-time CPU check, not a compile flag, so one binary
/// runs everywhere. The integer matrix–vector product (matvec_int8, for int8 activations) needs
/// AVX-512 VNNI on top (Intel since Ice Lake / Cascade Lake, AMD since Zen 4); without it the
/// table holds the portable loop, and `int8_dot` says which one runs.
/// ```
#pragma once

#include "glass/fast/kernels_avx512.hpp"
#include "glass/fast/kernels_avx512_attention.hpp"
#include "glass/fast/kernels_portable.hpp"
#include "glass/fast/packed_weights.hpp"

namespace glass::fast {

struct Kernels {
    const char* name;
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
    const char* int8_dot;  // which matvec_int8: "avx512-vnni" or "portable"
};

// Floats of per-thread scratch the matmul kernels need (one unpacked panel chunk).
constexpr int kScratchFloats = 256 * kPanel;
// Query rows per prefill attention tile (attention_scores / attention_mix take m ≤ this).
constexpr int kAttentionRows = 4;

inline bool cpu_has_avx512() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

inline bool cpu_has_vnni() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

inline Kernels portable_kernels() {
    return {"portable", portable::matvec, portable::matmul, portable::dot_rows, portable::add_rows,
            portable::dequantize_rows,
            portable::softmax, portable::silu_mul, portable::attention_scores, portable::attention_mix,
            portable::row_max, portable::exp_shift, portable::matvec_int8, "portable"};
}

inline Kernels best_kernels() {
#if defined(__x86_64__)
    static_assert(avx512::kChunk * kPanel == kScratchFloats);
    if (cpu_has_avx512())
        return {"avx512", avx512::matvec, avx512::matmul, avx512::dot_rows, avx512::add_rows,
                avx512::dequantize_rows,
                avx512::softmax, avx512::silu_mul, avx512::attention_scores, avx512::attention_mix,
                avx512::row_max, avx512::exp_shift, cpu_has_vnni() ? avx512::matvec_int8 : portable::matvec_int8,
                cpu_has_vnni() ? "avx512-vnni" : "portable"};
#endif
    return portable_kernels();
}

}  // namespace glass::fast
