// tests/cuda/test_cuda_ops.cpp — every CUDA op × many shapes against the CPU reference.
//
// One table, in the spirit of ggml's test-backend-ops: each row is an op, a shape and a variant
// (kernel, weight type, layout); it gets fresh random inputs (seeded by its row number, so a
// failure reproduces), runs on the GPU with its output NaN-poisoned first (an element the kernel
// never writes fails), runs the include/glass/*.hpp reference on the CPU, and compares:
//   relative error ‖gpu − cpu‖₂ / ‖cpu‖₂ <= 1e-5 in fp32. Both sides compute in fp32 and differ
//   only in the order of additions and the last bit of expf/cosf (CUDA's are within 2 ulp), which
//   stays orders of magnitude below 1e-5 for these sizes. f16/bf16 weights are compared against
//   the CPU run on the *same rounded weights* (round trip on the device), so the kernels are held
//   to the same 1e-5; what rounding itself costs is measured at model level (test_cuda_model).
//   k-quant weights (q4_k/q5_k/q6_k) likewise: against ggml_to_float of the very blocks uploaded.
//   Token outputs (argmax, sampling) must match exactly. The int8 KV cache's writes
//   (kv_write_int8, kv_write_rows_int8 through a batch's slots) must give glass::quantize_kv_row's integers and scales
//   exactly; attention over int8 K/V + scales is held to 1e-5 against causal_attention over the
//   dequantized K/V (the same fp32 values on both sides).
//
// usage: test_cuda_ops [--quick] [--filter TEXT[,TEXT...]] [--list]
//   --quick   skip the big shapes (for compute-sanitizer, which runs kernels ~100x slower)
//   --filter  only rows whose name contains one of the comma-separated texts
// Exit: 0 all passed, 1 a failure, 77 no CUDA device (ctest: skipped).
//
// The rows live by op family in test_cuda_ops_{rowwise,matmul,attention,sampling,paged}.cpp, the
// shared pieces (Case, random inputs, poisoned outputs, references) in cuda_ops_harness.hpp.
#include "cuda_ops_harness.hpp"

using namespace cuda_ops_test;

namespace {

// --filter "a,b": rows whose name contains a or b (empty: all).
bool matches(const std::string& name, const std::string& filter) {
    if (filter.empty()) return true;
    std::size_t begin = 0;
    while (begin <= filter.size()) {
        const std::size_t end = std::min(filter.find(',', begin), filter.size());
        if (end > begin && name.find(filter.substr(begin, end - begin)) != std::string::npos) return true;
        begin = end + 1;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, list = false;
    std::string filter;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--list") list = true;
        else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
        else {
            std::fprintf(stderr, "usage: test_cuda_ops [--quick] [--filter TEXT[,TEXT...]] [--list]\n");
            return 2;
        }
    }
    std::vector<Case> cases;
    add_embedding(cases);
    add_rmsnorm(cases);
    add_rope(cases);
    add_matmul(cases);
    add_quantized_matmul(cases);
    add_kquant_matmul(cases);
    add_softmax(cases);
    add_attention(cases);
    add_mlp(cases);
    add_sampling(cases);
    add_kv_cache(cases);
    add_graph(cases);
    add_rope_rows(cases);
    add_paged(cases);
    add_families(cases);
    if (list) {
        for (const Case& c : cases) std::printf("%s\n", c.name.c_str());
        return 0;
    }
    std::string why;
    if (!gc::device_present(&why)) {
        std::printf("SKIPPED: no CUDA device (%s)\n", why.c_str());
        return 77;
    }
    std::printf("device: %s\n", gc::device_name().c_str());
    if (quick) g_sample_draws = 8;

    int ran = 0, failed = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        if ((quick && c.big) || !matches(c.name, filter)) continue;
        Rng rng(static_cast<unsigned>(1000 + i));  // fresh inputs per case, reproducible by row
        double error = INFINITY;
        std::string note;
        try {
            error = c.run(rng);
            gc::synchronize(c.name.c_str());
        } catch (const std::exception& e) {
            note = std::string("  threw: ") + e.what();
        }
        const bool ok = error <= c.tolerance;  // NaN fails too
        ++ran;
        failed += !ok;
        std::printf("  %-88s %10.3g <= %-6g %s%s\n", c.name.c_str(), error, c.tolerance, ok ? "OK" : "FAIL",
                    note.c_str());
        std::fflush(stdout);
    }
    std::printf("%d/%d cases passed%s\n", ran - failed, ran, quick ? " (--quick)" : "");
    return failed == 0 && ran > 0 ? 0 : 1;
}
