// The kernel checks (tests/kernel_checks.hpp) on every kernel set this machine runs: each vector
// set's kernels against the portable loops or the scalar definitions. The same checks run on
// NEON under qemu (tests/neon/test_neon.cpp); test_fast_kernels.cpp holds every kernel in one
// table of shapes and types.
#include "fast_cpu_support.hpp"

namespace test_fast_kernel_checks {  // this file's own names (tests are built in unity batches)

TEST_CASE("kernels: each vector set's matrix–vector and matrix–matrix products equal the plain loops") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_products(fast);
}

TEST_CASE("kernels: each vector set's softmax, silu_mul, exp_shift and row_max equal the scalar definitions (std::exp)") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_elementwise(fast);
}

TEST_CASE("kernels: matvec_int8 (every set's integer dot product and plain) equals quantized_dot_int8; rounding x moves y by < 2 %") {
    std::vector<Kernels> sets = simd_sets();
    sets.push_back(glass::fast::portable_kernels());
#if defined(__x86_64__)
    // A CPU with AVX-VNNI gets the vpdpbusd form in the avx2 set: test the vpmaddubsw form too.
    if (glass::fast::cpu_has_avx_vnni()) sets.push_back(glass::fast::avx2_kernels(false));
#endif
    kernel_checks::check_matvec_int8(sets);
}

TEST_CASE("kernels: decode attention over a run of cached rows equals the plain loops, and one row at a time bit for bit") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_decode_attention(fast);
}

TEST_CASE("kernels: each vector set's prefill attention tiles equal the plain loops (tails in rows, keys, head_dim)") {
    for (const Kernels& fast : simd_sets()) kernel_checks::check_prefill_attention(fast);
}

TEST_CASE("kernels: dequantize_rows gives dequantize_kv_row's values bit for bit") {
    for (const Kernels& k : simd_sets()) kernel_checks::check_dequantize_rows(k);
    kernel_checks::check_dequantize_rows(glass::fast::portable_kernels());
}

TEST_CASE("kernels: quantize_int8 gives quantize_activations' bytes, scales and sums (ties, zeros, NaN and inf blocks)") {
    for (const Kernels& k : simd_sets()) kernel_checks::check_quantize_int8(k);
    kernel_checks::check_quantize_int8(glass::fast::portable_kernels());
}

TEST_CASE("kernels: each vector set's probes sum what they read and run their FMA chains") {
    for (const Kernels& k : simd_sets()) kernel_checks::check_probes(k);
}

}  // namespace test_fast_kernel_checks
