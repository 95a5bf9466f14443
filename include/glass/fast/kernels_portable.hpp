/// \file
/// \brief glass/fast/kernels_portable.hpp — the same kernels as kernels_avx512.hpp, as plain loops.
/// \verbatim
/// Used on CPUs without AVX-512 (and by the tests, to check the AVX-512 versions against).
/// They read the packed layout through PackedMatrix::at(), so they are slow but obviously right.
/// \endverbatim
#pragma once

#include <cmath>

#include "glass/fast/packed_weights.hpp"

namespace glass::fast::portable {

// y[r] (+)= Σ_k W(r,k) · x[k] for the rows of panels [p0, p1).
inline void matvec(const PackedMatrix& w, const float* x, float* y, int p0, int p1, bool accumulate) {
    const int r1 = std::min(w.rows, p1 * kPanel);
    for (int r = p0 * kPanel; r < r1; ++r) {
        float sum = 0;
        for (int k = 0; k < w.cols; ++k) sum += w.at(r, k) * x[k];
        y[r] = accumulate ? y[r] + sum : sum;
    }
}

// Y[t][r] (+)= Σ_k W(r,k) · X[t][k] for t < n and the rows of panels [p0, p1).
inline void matmul(const PackedMatrix& w, const float* x, long ldx, int n, float* y, long ldy,
                   int p0, int p1, bool accumulate, float* /*scratch*/) {
    for (int t = 0; t < n; ++t) matvec(w, x + t * ldx, y + t * ldy, p0, p1, accumulate);
}

inline float dot(const float* a, const float* b, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

inline void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

inline void softmax(float* x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
    float sum = 0;
    for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
    for (int i = 0; i < n; ++i) x[i] /= sum;
}

inline void silu_mul(float* gate, const float* up, int n) {
    for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace glass::fast::portable
