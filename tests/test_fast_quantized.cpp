// The fast path's reduced-precision weights and int8 activations, each against the fp32
// reference: within the stated tolerance of fp32 weights, equal (fp32 rule) to CpuSession on
// quantize.hpp's rounded weights, and int8 activations within 5e-2 of fp32 ones.
#include <string>

#include "fast_cpu_support.hpp"

namespace test_fast_quantized {  // this file's own names (tests are built in unity batches)

// Each type's tolerance, and why: kernel_checks.hpp's weight_tolerance.
TEST_CASE("reduced-precision weights stay within their stated tolerance of the fp32 reference") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419};
    for (WeightType type : kAllTypes) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        glass::CpuSession ref(test::shipped());
        FastCpuSession fast(test::shipped(), {.threads = 2, .weights = type});
        const double error = worst_error(ref, fast, prompt, next);
        MESSAGE(std::string(glass::fast::to_string(type)) << ": largest logit error / largest logit = " << error);
        CHECK(error <= kernel_checks::weight_tolerance(type));
        if (type != WeightType::fp32) CHECK(error > 1e-5);  // the weights really were rounded
    }
}

// The quantized fast path computes what the reference computes on quantize.hpp's rounded weights
// (quantized_model): the same integers and scales, only the order of fp32 additions differs, so
// the fp32 tolerance applies. This is what makes the reference's C14 numbers (example 24) the
// fast path's numbers too.
TEST_CASE("q8/q4 fast path equals CpuSession on quantized_model (fp32 tolerance)") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        CAPTURE(std::string(glass::fast::to_string(type)));
        const glass::Model rounded = glass::quantized_model(test::shipped(), glass::fast::quant_format_of(type));
        for (const std::string& set : all_sets()) {
            CAPTURE(set);
            glass::CpuSession ref(rounded);
            FastOptions options{.threads = 2, .weights = type, .prefill_chunk = 4};  // chunks of 4: prefill and decode kernels
            options.kernels = set;
            FastCpuSession fast(test::shipped(), options);
            CHECK(worst_error(ref, fast, prompt, next) <= 1e-5);
        }
    }
}

// Int8 activations in a whole session: decode's products (and the logits row after a prefill,
// one row through the matrix–vector kernel) take x in int8, which moves the logits by about what
// q8_0's own rounding does (measured below; bound 5e-2, the int8 KV cache's); a session that
// could not use them (fp32 weights, the paged backend) says so instead of ignoring them.
TEST_CASE("int8 activations: logits within 5e-2 of fp32 activations; refused where unused") {
    const std::vector<int> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    const std::vector<int> next = {376, 298, 315, 421, 395, 317, 426, 338};
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0})
        for (const std::string& set : all_sets()) {
            CAPTURE(std::string(glass::fast::to_string(type)));
            CAPTURE(set);
            FastOptions o{.threads = 2, .weights = type};
            o.kernels = set;
            FastCpuSession fp32_x(test::shipped(), o);
            o.int8_activations = true;
            FastCpuSession int8_x(test::shipped(), o);
            CHECK(int8_x.dot_products() == "int8 (" + std::string(glass::fast::kernels_of(set).int8_dot) + ")");
            const double worst = worst_error(int8_x, fp32_x, prompt, next);
            MESSAGE((std::string(glass::fast::to_string(type)) + " " + set +
                     ": logits, int8 x vs fp32 x: " + std::to_string(worst)));
            CHECK(worst > 1e-6);  // the int8 products really ran
            CHECK(worst <= 5e-2);
        }
    FastOptions bad{.threads = 1, .weights = WeightType::fp32};
    bad.int8_activations = true;
    CHECK_THROWS_WITH_AS(FastCpuSession(test::shipped(), bad), doctest::Contains("the weights are fp32"), glass::Error);
    bad.weights = WeightType::q4_0;
    CHECK_THROWS_WITH_AS(glass::fast::FastPagedBackend(test::shipped(), bad),
                         doctest::Contains("int8 activations are FastCpuSession's decode only"), glass::Error);
}

}  // namespace test_fast_quantized
