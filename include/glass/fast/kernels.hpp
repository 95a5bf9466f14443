/// \file
/// \brief glass/fast/kernels.hpp — one table of inner loops, chosen once at run time.
/// \verbatim
/// The AVX-512 set (kernels_avx512.hpp) needs AVX-512 F/BW/VL/DQ (Intel since Skylake-X, AMD
/// since Zen 4); anything else gets the portable set (kernels_portable.hpp). The choice is a
/// run-time CPU check, not a compile flag, so one binary runs everywhere.
/// \endverbatim
#pragma once

#include "glass/fast/kernels_avx512.hpp"
#include "glass/fast/kernels_portable.hpp"
#include "glass/fast/packed_weights.hpp"

namespace glass::fast {

struct Kernels {
    const char* name;
    // y[r] (+)= Σ_k W(r,k) x[k], rows of panels [p0, p1)                       (decode)
    void (*matvec)(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate);
    // Y[t][r] (+)= Σ_k W(r,k) X[t][k], t < n, rows of panels [p0, p1)          (prefill)
    void (*matmul)(const PackedMatrix& w, const float* x, long ldx, int n, float* y, long ldy,
                   int p0, int p1, bool accumulate, float* scratch);
    float (*dot)(const float* a, const float* b, int n);
    void (*axpy)(float* y, float a, const float* x, int n);
    void (*softmax)(float* x, int n);
    void (*silu_mul)(float* gate, const float* up, int n);
};

// Floats of per-thread scratch the matmul kernels need (one unpacked panel chunk).
constexpr int kScratchFloats = 256 * kPanel;

inline bool cpu_has_avx512() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

inline Kernels portable_kernels() {
    return {"portable", portable::matvec, portable::matmul, portable::dot, portable::axpy,
            portable::softmax, portable::silu_mul};
}

inline Kernels best_kernels() {
#if defined(__x86_64__)
    static_assert(avx512::kChunk * kPanel == kScratchFloats);
    if (cpu_has_avx512())
        return {"avx512", avx512::matvec, avx512::matmul, avx512::dot, avx512::axpy,
                avx512::softmax, avx512::silu_mul};
#endif
    return portable_kernels();
}

}  // namespace glass::fast
