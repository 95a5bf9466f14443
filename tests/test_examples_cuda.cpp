// The CUDA example (14_cuda_twin), in the build that links the CPU emulator: every stage against
// the CPU within 1e-5, and the whole model's greedy story against llama2.c's golden.
#include <sstream>
#include <string>
#include <vector>

#include "example_output.hpp"
#include "test_support.hpp"

namespace test_examples_cuda {  // this file's own names (tests are built in unity batches)

using test::example_output::greedy_golden;
using test::example_output::numbers;
using test::example_output::run_example;
using test::value_of;

#ifndef GLASS_WITHOUT_CUDA_EMULATOR
TEST_CASE("example 14_cuda_twin: every CUDA stage within 1e-5 of the CPU, and llama2.c's story") {
    const test::Run r = run_example("14_cuda_twin");
    CHECK(value_of(r.out, "device").find("emulator") != std::string::npos);  // this build links the emulator
    // Every stage line ends in "ok" and shows an error at most 1e-5 (checked from the number itself).
    int stages = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("  ", 0) != 0 || line.find(" [") == std::string::npos) continue;
        INFO(line);
        const std::vector<double> v = numbers(line.substr(line.find(']') + 1));
        REQUIRE(v.size() == 1);
        CHECK(v[0] <= 1e-5);
        CHECK(line.substr(line.size() - 2) == "ok");
        ++stages;
    }
    CHECK(stages == 12);  // embedding, rmsnorm, 4 matmul kernels, k, rope q/k, attention, 2 residuals
    // The whole model: run.c's greedy story for the default prompt at -n 32.
    const nlohmann::json g = greedy_golden("Once upon a time", 32);
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    const std::string want = tok.decode_all(test::ids_of(g["generated_ids"]));
    CHECK(value_of(r.out, "  CudaSession") == want);
    CHECK(value_of(r.out, "  CpuSession") == " " + want);  // one more space: aligned under CudaSession
    CHECK(value_of(r.out, "  same tokens") == "yes");
    CHECK(numbers(value_of(r.out, "  worst logits error, all steps")).at(0) <= 1e-5);
    // The graph holds the whole step: the embedding, 16 launches per layer (norm, 3 projections,
    // 2 ropes, the cache write, attention, output projection, residual, norm, 4 for the MLP,
    // residual), the final norm and the classifier; replaying it changes no number.
    const int layers = test::shipped().config.n_layers;
    CHECK(numbers(value_of(r.out, "  launches recorded in one decode step")).at(0) == 16 * layers + 3);
    CHECK(numbers(value_of(r.out, "  largest logit difference from launching one by one")).at(0) == 0.0);
}
#endif

}  // namespace test_examples_cuda
