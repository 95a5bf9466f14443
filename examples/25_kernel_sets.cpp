// 25_kernel_sets — journey step 9 continued: the same loop at four widths. The fast CPU path
// carries its inner loops four times (kernel sets: portable, avx2, avx512, neon) and picks one
// when a session is built; this program runs each set this CPU has on the same work.
//
// In:  the CPU this runs on; a [512, 1024] fp32 matrix W of uniform numbers in [-1, 1)
//      (RandomFloats, seed 25) and a vector x of 1024 from the same generator, W packed once
//      into 32-row panels (pack_matrix, into a page-aligned HugeBuffer) that every set reads as is;
//      the shipped model and tok512, the prompt "Once upon a time".
// Out: 1. which of the four sets this CPU runs (available_kernel_sets(), a run-time CPU check),
//         what GLASS_KERNELS says, and the set a session takes when it names none
//         (best_kernels());
//      2. each set's table (kernels_of(set)): its fp32 lanes (Kernels::fma_lanes), its int8 dot
//         product (Kernels::int8_dot) and the instructions it needs (Kernels::isa);
//      3. y = W x through each set's matvec: the largest difference from the portable set's y
//         relative to the largest |y| (another summation order, so a few units in the 7th
//         digit, and at most 1e-5), and the time per product with the bytes of W read per
//         second;
//      4. the set's own FMA probe (fma_chains: 12 independent chains of fma_lanes floats, the
//         same FLOPs for every set), GFLOP/s on one core and the ratio to the portable set's;
//      5. 32 greedy tokens from FastCpuSession with FastOptions::kernels naming each set: the
//         ids, and whether they are the portable set's (they are, and they are llama2.c's run.c
//         greedy goldens too).
//
// Timings (µs per product, GB/s, GFLOP/s and their ratios) change from run to run; everything
// else is computed, and tests/test_kernel_sets.cpp recomputes it.
//
// Usage: 25_kernel_sets [--rows R] [--cols C] [SET ...]
//   SET        portable, avx2, avx512 or neon (default: every set this CPU runs); portable, the
//              reference, always runs first; a set the CPU lacks is refused, naming what it has
//   --rows R   rows of W (1 to 8192, default 512)
//   --cols C   columns of W, the length of x (1 to 8192, default 1024)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/random_model.hpp"

namespace {

namespace fast = glass::fast;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The fastest mean time of `work` over 5 batches, each batch repeating it for at least 20 ms.
template <typename Work>
double best_seconds(Work&& work) {
    work();  // once untimed: caches and page tables warm
    double best = 1e30;
    for (int batch = 0; batch < 5; ++batch) {
        int n = 0;
        const auto t0 = Clock::now();
        do {
            work();
            ++n;
        } while (seconds_since(t0) < 0.02);
        best = std::min(best, seconds_since(t0) / n);
    }
    return best;
}

// max_r |y[r] − ref[r]| / max_r |ref[r]|: the largest difference, relative to the largest output.
double largest_relative_difference(const std::vector<float>& y, const std::vector<float>& ref) {
    double diff = 0, scale = 0;
    for (size_t r = 0; r < ref.size(); ++r) {
        diff = std::max(diff, std::fabs(double(y[r]) - ref[r]));
        scale = std::max(scale, std::fabs(double(ref[r])));
    }
    return scale > 0 ? diff / scale : diff;
}

std::string ids_text(const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) {
        if (!out.empty()) out += ' ';
        out += std::to_string(id);
    }
    return out;
}

// The text on one line: a newline the model wrote is shown as \n.
std::string one_line(const std::string& text) {
    std::string out;
    for (char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
    return out;
}

int run(int argc, char** argv) {
    int rows = 512, cols = 1024;
    std::vector<fast::KernelSet> sets = {fast::KernelSet::portable};
    bool named = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if ((a == "--rows" || a == "--cols") && i + 1 < argc) {
            (a == "--rows" ? rows : cols) = example::int_arg(argv[++i], a.c_str() + 2, 1, 8192);
        } else if (a.rfind("--", 0) == 0) {
            glass::fail("usage: 25_kernel_sets [--rows R] [--cols C] [SET ...]; unknown or incomplete option '", a, "'");
        } else {
            const fast::KernelSet s = fast::kernel_set_from_string(a);
            fast::kernels_of(s);  // refused here, naming what the CPU has, if it lacks the set
            if (std::find(sets.begin(), sets.end(), s) == sets.end()) sets.push_back(s);
            named = true;
        }
    }
    if (!named) sets = fast::available_kernel_sets();  // portable first, then avx2, avx512 or neon
    std::vector<fast::Kernels> tables;
    for (fast::KernelSet s : sets) tables.push_back(fast::kernels_of(s));
    // A GLASS_KERNELS the CPU cannot run is refused here too, before anything is printed.
    const fast::Kernels default_set = fast::best_kernels();

    std::printf("1. The four kernel sets, and which ones this CPU runs (a run-time check, kernels.hpp)\n");
    for (fast::KernelSet s : {fast::KernelSet::portable, fast::KernelSet::avx2, fast::KernelSet::avx512, fast::KernelSet::neon})
        std::printf("%s runs here: %s\n", fast::to_string(s), fast::cpu_runs(s) ? "yes" : "no");
    const char* forced = std::getenv("GLASS_KERNELS");
    std::printf("GLASS_KERNELS: %s\n", forced != nullptr && *forced != '\0' ? forced : "(unset)");
    std::printf("a session that names no set takes (best_kernels()): %s\n", default_set.name);
    std::printf("compared below:");
    for (const fast::Kernels& k : tables) std::printf(" %s", k.name);
    std::printf("\n");

    std::printf("\n2. Each set's table (kernels_of(set))\n");
    for (const fast::Kernels& k : tables)
        std::printf("%s fp32 lanes: %d, int8_dot: %s, isa: %s\n", k.name, k.fma_lanes, k.int8_dot, k.isa);

    // W and x from one generator, W packed once: every set reads the same bytes.
    fast::RandomFloats rng(25);
    std::vector<float> w(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(cols));
    for (float& v : w) v = rng.next();
    for (float& v : x) v = rng.next();
    const std::int64_t bytes = fast::packed_bytes(rows, cols, fast::WeightType::fp32);
    const fast::HugeBuffer buffer(static_cast<size_t>(bytes));  // zeroed, page (so 64-byte) aligned
    const fast::PackedMatrix packed = fast::pack_matrix(w.data(), rows, cols, fast::WeightType::fp32, buffer.as<unsigned char>());

    std::printf("\n3. y = W x on each set: W [%d, %d] fp32, uniform in [-1, 1) (RandomFloats, seed 25), "
                "%lld bytes in %d panels of 32 rows\n", rows, cols, static_cast<long long>(bytes), packed.panels());
    std::vector<std::vector<float>> ys;
    bool all_close = true;
    for (const fast::Kernels& k : tables) {
        std::vector<float> y(static_cast<size_t>(rows));
        k.matvec(packed, x.data(), y.data(), 0, packed.panels(), false);
        ys.push_back(y);
        const double diff = largest_relative_difference(y, ys.front());
        all_close = all_close && diff <= 1e-5;
        const double s = best_seconds([&] { k.matvec(packed, x.data(), y.data(), 0, packed.panels(), false); });
        std::printf("%s matvec largest relative difference from portable: %.2g (at most 1e-5: %s)\n", k.name, diff,
                    diff <= 1e-5 ? "yes" : "NO");
        std::printf("%s matvec µs per product: %.1f, GB/s: %.1f\n", k.name, s * 1e6, double(bytes) / s / 1e9);
    }

    // The same FLOPs for every set: 2 · 12 chains · fma_lanes · iterations, with iterations
    // = 2M · 16 / fma_lanes (2M rounds of 16 lanes, 4M of 8, 8M of 4).
    const double probe_flops = 2.0 * fast::kProbeChains * 16 * 2'000'000;
    std::printf("\n4. FMA peak on one core: each set's own fma_chains (%d independent chains of fma_lanes floats), "
                "%.0f MFLOP a pass, best of 3\n", fast::kProbeChains, probe_flops / 1e6);
    double portable_flops = 0;
    for (const fast::Kernels& k : tables) {
        const std::int64_t iterations = 2'000'000LL * 16 / k.fma_lanes;
        const double flops = 2.0 * fast::kProbeChains * k.fma_lanes * static_cast<double>(iterations);  // = probe_flops
        double best = 1e30;
        volatile float sink = 0;  // the sums must look used, or the loop is deleted
        for (int pass = 0; pass < 3; ++pass) {
            const auto t0 = Clock::now();
            sink = sink + k.fma_chains(iterations, 0.01f * (pass + 1));
            best = std::min(best, seconds_since(t0));
        }
        const double rate = flops / best;
        if (portable_flops == 0) portable_flops = rate;
        std::printf("%s FMA GFLOP/s: %.1f, times portable: %.2f\n", k.name, rate / 1e9, rate / portable_flops);
    }

    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const std::string prompt = "Once upon a time";
    glass::GenerateOptions options;
    options.sampling.temperature = 0.0f;  // greedy
    options.max_new_tokens = 32;
    std::printf("\n5. Greedy decoding, \"%s\", %d new tokens: FastCpuSession (1 thread, fp32 weights) with "
                "FastOptions::kernels naming each set\n", prompt.c_str(), options.max_new_tokens);
    std::vector<int> portable_ids;
    bool all_same = true;
    for (const fast::Kernels& k : tables) {
        fast::FastOptions o;
        o.kernels = k.name;
        fast::FastCpuSession session(model, o);
        const glass::GenerateResult r = glass::generate(session, tok, prompt, options);
        std::printf("%s ids: %s\n", k.name, ids_text(r.generated_ids).c_str());
        if (portable_ids.empty()) {
            portable_ids = r.generated_ids;
            std::printf("%s text: %s%s\n", k.name, prompt.c_str(), one_line(r.text).c_str());
        } else {
            all_same = all_same && r.generated_ids == portable_ids;
            std::printf("%s ids equal portable's: %s\n", k.name, r.generated_ids == portable_ids ? "yes" : "NO");
        }
    }

    std::printf("\nevery set within 1e-5 of portable and greedy-identical to it: %s\n", all_close && all_same ? "yes" : "NO");
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
