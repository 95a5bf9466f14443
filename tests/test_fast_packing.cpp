// The fast path's weight packing (include/glass/fast/packed_weights.hpp): every weight of a matrix
// packed in each precision, read back through PackedMatrix::at, against the source value or the
// quantized reference's. The kernels that read these panels: tests/test_fast_kernel_checks.cpp.
#include <algorithm>
#include <cmath>

#include "fast_cpu_support.hpp"

namespace test_fast_packing {  // this file's own names (tests are built in unity batches)

TEST_CASE("packing: every weight lands where PackedMatrix::at says, in the requested precision") {
    const int rows = 45, cols = 70;  // neither a multiple of the 32-row panel nor the 32-input block
    const auto w = random_vector(rows * cols, 1);
    for (WeightType type : kAllTypes) {
        std::vector<unsigned char> buf(size_t(glass::fast::packed_bytes(rows, cols, type)), 0);
        const auto m = glass::fast::pack_matrix(w.data(), rows, cols, type, buf.data());
        const bool quantized = glass::fast::is_quantized(type);
        const glass::QuantizedMatrix reference =
            quantized ? glass::quantize(w.data(), rows, cols, glass::fast::quant_format_of(type)) : glass::QuantizedMatrix{};
        for (int r = 0; r < rows; ++r) {
            float amax = 0;  // for Q8_0: the block's largest magnitude sets the step
            for (int k = 0; k < cols; ++k) {
                const float src = w[size_t(r * cols + k)];
                if (k % 32 == 0) {
                    amax = 0;
                    for (int j = k; j < std::min(cols, k + 32); ++j) amax = std::max(amax, std::fabs(w[size_t(r * cols + j)]));
                }
                const float got = m.at(r, k);
                switch (type) {
                    case WeightType::fp32: REQUIRE(got == src); break;
                    // Independent reference: the hardware/compiler conversions, round to nearest.
                    case WeightType::fp16: REQUIRE(got == float(static_cast<_Float16>(src))); break;
                    case WeightType::bf16:  // 8 significant bits, round to nearest: relative error ≤ 2^-8
                        REQUIRE(std::fabs(got - src) <= std::fabs(src) * 0x1p-8f); break;
                    case WeightType::q8_0:  // half a step of d = amax/127, plus fp16 rounding of d
                        REQUIRE(std::fabs(got - src) <= amax / 127 * 0.5f * 1.01f + 1e-7f); break;
                    case WeightType::q4_0:  // half a step of d = amax/7, plus fp16 rounding of d
                        REQUIRE(std::fabs(got - src) <= amax / 7 * 0.5f * 1.01f + 1e-7f); break;
                    // k-quant panels take whole 256-input super-blocks (check_k_panels in
                    // kernel_checks.hpp); `stored` names a file's own types, not a packing.
                    case WeightType::q4_k: case WeightType::q5_k: case WeightType::q6_k: case WeightType::stored:
                        FAIL("kAllTypes should not list " << glass::fast::to_string(type)); break;
                }
                if (quantized) REQUIRE(got == reference.at(r, k));  // the reference's integers and scales
            }
        }
    }
}

}  // namespace test_fast_packing
