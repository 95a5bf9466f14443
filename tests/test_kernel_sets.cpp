// Example 25_kernel_sets (kernel sets, kernels.hpp): what it prints, recomputed here. The sets it
// lists are available_kernel_sets(); each set's table is kernels_of(set)'s; the matrix–vector
// products are run again on the same matrix, against portable and against a double-precision
// product; the greedy ids are a FastCpuSession's with that set and llama2.c's goldens. Timings
// are printed, never checked: only that they are positive numbers. Passes whichever sets this
// CPU has (portable + avx2, portable + avx2 + avx512, portable + neon).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "glass/fast/buffer.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/random_model.hpp"
#include "test_support.hpp"

namespace test_kernel_sets {  // this file's own names (tests are built in unity batches)

namespace fast = glass::fast;

namespace {

const fast::KernelSet kAllSets[] = {fast::KernelSet::portable, fast::KernelSet::avx2, fast::KernelSet::avx512,
                                    fast::KernelSet::neon};

std::string names_of(const std::vector<fast::KernelSet>& sets) {
    std::string out;
    for (fast::KernelSet s : sets) {
        if (!out.empty()) out += ' ';
        out += fast::to_string(s);
    }
    return out;
}

// A set this CPU lacks (neon on x86-64, avx2 on AArch64).
fast::KernelSet missing_set() {
    for (fast::KernelSet s : kAllSets)
        if (!fast::cpu_runs(s)) return s;
    FAIL("this CPU runs every kernel set");
    return fast::KernelSet::portable;
}

// The number after "key: " anywhere in the line labelled `label`.
double number_after(const std::string& out, const std::string& label, const std::string& key) {
    const std::string line = test::value_of(out, label);
    const size_t at = line.find(key + ": ");
    REQUIRE_MESSAGE(at != std::string::npos, "no '" << key << ": ' in '" << line << "'");
    return std::stod(line.substr(at + key.size() + 2));
}

// The example's matrix and vector: [rows, cols] then cols floats from RandomFloats(25).
struct Product {
    int rows, cols;
    std::vector<float> w, x;
    Product(int r, int c) : rows(r), cols(c), w(static_cast<size_t>(r) * c), x(static_cast<size_t>(c)) {
        fast::RandomFloats rng(25);
        for (float& v : w) v = rng.next();
        for (float& v : x) v = rng.next();
    }
};

double largest_relative_difference(const std::vector<double>& y, const std::vector<double>& ref) {
    double diff = 0, scale = 0;
    for (size_t r = 0; r < ref.size(); ++r) {
        diff = std::max(diff, std::fabs(y[r] - ref[r]));
        scale = std::max(scale, std::fabs(ref[r]));
    }
    return scale > 0 ? diff / scale : diff;
}

// Part 3 of one run, for W [rows, cols]: every set's printed difference from portable is at most
// 1e-5 and, within a loose factor, the difference recomputed here; every set's y is within 1e-5
// of the product in double.
void check_products(const std::string& out, const std::vector<fast::KernelSet>& sets, int rows, int cols) {
    const Product p(rows, cols);
    const std::int64_t bytes = fast::packed_bytes(rows, cols, fast::WeightType::fp32);
    CHECK(test::value_of(out, "3. y = W x on each set").find("W [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                                           "] fp32") != std::string::npos);
    CHECK(test::value_of(out, "3. y = W x on each set").find(std::to_string(bytes) + " bytes") != std::string::npos);
    const fast::HugeBuffer buffer(static_cast<size_t>(bytes));
    const fast::PackedMatrix m = fast::pack_matrix(p.w.data(), rows, cols, fast::WeightType::fp32, buffer.as<unsigned char>());

    std::vector<double> exact(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < cols; ++k) exact[size_t(r)] += double(p.w[size_t(r) * cols + k]) * p.x[size_t(k)];
    std::vector<double> portable;
    for (fast::KernelSet s : sets) {
        const fast::Kernels k = fast::kernels_of(s);
        CAPTURE(k.name);
        std::vector<float> y(static_cast<size_t>(rows), NAN);
        k.matvec(m, p.x.data(), y.data(), 0, m.panels(), false);
        const std::vector<double> yd(y.begin(), y.end());
        if (portable.empty()) portable = yd;
        CHECK(largest_relative_difference(yd, exact) <= 1e-5);
        const double own = largest_relative_difference(yd, portable);
        const std::string label = std::string(k.name) + " matvec largest relative difference from portable";
        const double printed = test::number(out, label);
        CHECK(printed <= 1e-5);
        CHECK(test::value_of(out, label).find("(at most 1e-5: yes)") != std::string::npos);
        if (own == 0) CHECK(printed == 0);
        else CHECK((printed >= own / 2 && printed <= own * 2));
        // Timings: reported, not judged.
        CHECK(test::number(out, std::string(k.name) + " matvec µs per product") > 0);
        CHECK(number_after(out, std::string(k.name) + " matvec µs per product", "GB/s") > 0);
    }
}

// Part 5 of one run: each set's ids are a FastCpuSession's with that set, equal portable's, and
// agree with llama2.c's greedy goldens for the prompt (as far as both go).
void check_greedy(const std::string& out, const std::vector<fast::KernelSet>& sets) {
    const std::string prompt = "Once upon a time";
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = 32;
    std::vector<int> portable;
    for (fast::KernelSet s : sets) {
        CAPTURE(fast::to_string(s));
        fast::FastOptions options;
        options.kernels = fast::to_string(s);
        fast::FastCpuSession session(test::shipped(), options);
        const glass::GenerateResult r = glass::generate(session, test::shipped_tok(), prompt, o);
        REQUIRE(r.generated_ids.size() == 32);
        std::string ids;
        for (int id : r.generated_ids) {
            if (!ids.empty()) ids += ' ';
            ids += std::to_string(id);
        }
        CHECK(test::value_of(out, std::string(fast::to_string(s)) + " ids") == ids);
        if (portable.empty()) {
            portable = r.generated_ids;
            std::string text = prompt;
            for (char c : r.text) text += c == '\n' ? std::string("\\n") : std::string(1, c);
            CHECK(test::value_of(out, "portable text") == text);
        } else {
            CHECK(r.generated_ids == portable);
            CHECK(test::value_of(out, std::string(fast::to_string(s)) + " ids equal portable's") == "yes");
        }
    }
    int goldens = 0;
    for (const auto& g : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        if (g["prompt"] != prompt) continue;
        const std::vector<int> want = test::ids_of(g["generated_ids"]);
        const size_t n = std::min(want.size(), portable.size());
        CAPTURE(g["case"].get<std::string>());
        CHECK(n >= 28);  // once_upon_n32 has 28 new tokens, the longer ones more than 32
        CHECK(std::vector<int>(want.begin(), want.begin() + long(n)) == std::vector<int>(portable.begin(), portable.begin() + long(n)));
        ++goldens;
    }
    CHECK(goldens >= 2);
}

}  // namespace

TEST_CASE("example 25_kernel_sets: the sets this CPU runs, their tables, products and greedy ids recomputed here") {
    const std::string out = test::run_example("25_kernel_sets").out;
    const std::vector<fast::KernelSet> sets = fast::available_kernel_sets();
    REQUIRE(sets.front() == fast::KernelSet::portable);

    // 1. Which sets run: all four named, yes exactly for available_kernel_sets(); the default
    //    comparison is every one of them, narrowest first.
    for (fast::KernelSet s : kAllSets)
        CHECK(test::value_of(out, std::string(fast::to_string(s)) + " runs here") == (fast::cpu_runs(s) ? "yes" : "no"));
    CHECK(test::value_of(out, "compared below") == names_of(sets));
    const char* forced = std::getenv("GLASS_KERNELS");  // the example inherits this process's environment
    CHECK(test::value_of(out, "GLASS_KERNELS") == (forced != nullptr && *forced != '\0' ? forced : "(unset)"));
    CHECK(test::value_of(out, "a session that names no set takes (best_kernels())") == fast::best_kernels().name);

    // 2. Each set's table.
    for (fast::KernelSet s : sets) {
        const fast::Kernels k = fast::kernels_of(s);
        CAPTURE(k.name);
        const std::string label = std::string(k.name) + " fp32 lanes";
        CHECK(test::number(out, label) == k.fma_lanes);
        CHECK(test::value_of(out, label).find(std::string("int8_dot: ") + k.int8_dot + ",") != std::string::npos);
        CHECK(test::value_of(out, label).find(std::string("isa: ") + k.isa) != std::string::npos);
    }
    CHECK(test::number(out, "portable fp32 lanes") == 8);
    if (fast::cpu_runs(fast::KernelSet::avx2)) CHECK(test::number(out, "avx2 fp32 lanes") == 8);
    if (fast::cpu_runs(fast::KernelSet::avx512)) CHECK(test::number(out, "avx512 fp32 lanes") == 16);
    if (fast::cpu_runs(fast::KernelSet::neon)) CHECK(test::number(out, "neon fp32 lanes") == 4);

    // 3. The products, on the example's default [512, 1024].
    check_products(out, sets, 512, 1024);

    // 4. The FMA probe: the same FLOPs for every set (2 · 12 · 16 · 2M), a positive rate each, and
    //    the printed ratio is the printed rates' (portable's is 1); the rates themselves are not judged.
    CHECK(test::value_of(out, "4. FMA peak on one core").find(std::to_string(2 * fast::kProbeChains * 16 * 2) + " MFLOP a pass") !=
          std::string::npos);
    const double portable_rate = test::number(out, "portable FMA GFLOP/s");
    CHECK(number_after(out, "portable FMA GFLOP/s", "times portable") == 1.0);
    for (fast::KernelSet s : sets) {
        const std::string label = std::string(fast::to_string(s)) + " FMA GFLOP/s";
        const double rate = test::number(out, label);
        CHECK(rate > 0);
        if (portable_rate >= 1 && rate >= 1)  // enough digits printed for the ratio to be checked
            CHECK(number_after(out, label, "times portable") == doctest::Approx(rate / portable_rate).epsilon(0.1));
    }

    // 5. Greedy ids, per set.
    check_greedy(out, sets);
    CHECK(test::value_of(out, "every set within 1e-5 of portable and greedy-identical to it") == "yes");
}

TEST_CASE("example 25_kernel_sets: named sets, another matrix size, GLASS_KERNELS, and a set the CPU lacks") {
    const std::vector<fast::KernelSet> sets = fast::available_kernel_sets();
    // The widest set only, on a matrix with a partly filled panel and a column count that is no
    // multiple of any vector width: portable still comes first, as the reference.
    const fast::KernelSet widest = sets.back();
    const std::string out = test::run_example("25_kernel_sets", "--rows 40 --cols 70 " + std::string(fast::to_string(widest))).out;
    const std::vector<fast::KernelSet> compared =
        widest == fast::KernelSet::portable ? std::vector{widest} : std::vector{fast::KernelSet::portable, widest};
    CHECK(test::value_of(out, "compared below") == names_of(compared));
    check_products(out, compared, 40, 70);
    check_greedy(out, compared);

    // GLASS_KERNELS moves best_kernels() only: every session here names its set.
    const std::string forced = test::run("GLASS_KERNELS=portable " + test::bin_dir() + "/25_kernel_sets").out;
    CHECK(test::value_of(forced, "GLASS_KERNELS") == "portable");
    CHECK(test::value_of(forced, "a session that names no set takes (best_kernels())") == "portable");
    CHECK(test::value_of(forced, "compared below") == names_of(sets));

    // A set this CPU lacks is refused before anything runs, by name and by GLASS_KERNELS,
    // naming the sets it does run.
    const std::string missing = fast::to_string(missing_set());
    for (const std::string& command : {test::bin_dir() + "/25_kernel_sets " + missing,
                                       "GLASS_KERNELS=" + missing + " " + test::bin_dir() + "/25_kernel_sets"}) {
        CAPTURE(command);
        const test::Run r = test::run(command);
        CHECK(r.exit_code == 1);
        CHECK(r.out.empty());
        CHECK(r.err.find("kernel set " + missing + " needs instructions this CPU lacks") != std::string::npos);
        CHECK(r.err.find("kernel sets it runs: " + fast::available_kernel_names()) != std::string::npos);
    }
    CHECK(test::run(test::bin_dir() + "/25_kernel_sets sse9").err.find("unknown kernel set 'sse9'") != std::string::npos);
    CHECK(test::run(test::bin_dir() + "/25_kernel_sets --rows 0").err.find("rows '0' is not an integer in [1, 8192]") !=
          std::string::npos);
}

}  // namespace test_kernel_sets
