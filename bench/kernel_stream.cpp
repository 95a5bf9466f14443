// kernel_stream — one kernel set's product on weights streamed from memory, as a decoded token or
// a batch meets them: `matrices` copies of one random [rows, cols] matrix (together far more than
// the last-level cache holds), each multiplied by the same n tokens in one parallel region cut
// into items as FastModel::run_products cuts its regions (ItemLayout).
//
//   kernel_stream [--kernels SET] [--type fp32|fp16|bf16|q8_0|q4_0|q4_k|q5_k|q6_k] [--tokens N]
//                 [--int8] [--rows R] [--cols C] [--matrices M] [--threads T] [--passes P]
//
// n = 1 runs matvec (matvec_int8 with --int8: x in int8 blocks, integer weights only); n > 1
// runs matmul on x regrouped into token tiles. Prints one JSON line: the median [min, max] over P passes of the
// weights' GB/s and of GFLOP/s (2 · rows · cols · n per matrix), and `hash`, an FNV-1a hash of the
// last pass's y bits. scripts/paired-bench runs two builds of this program in turn: the VM this
// project is measured on drifts up to 2x from one minute to the next, so only runs taken side by
// side, many times over, can show a change of 10 %; the hash says whether both builds computed
// the same bits.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "glass/fast/benchmark.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/fast/token_tiles.hpp"

namespace {

using namespace glass::fast;

struct Options {
    std::string kernels = best_kernels().name;
    WeightType type = WeightType::fp32;
    int tokens = 1, rows = 2048, cols = 768, matrices = 64, threads = 2, passes = 9;
    bool int8 = false;
};

int positive(const std::string& flag, const char* value) {
    const int v = std::atoi(value);
    if (v < 1) glass::fail(flag, " takes a positive integer, not '", value, "'");
    return v;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--int8") {
            o.int8 = true;
            continue;
        }
        if (i + 1 >= argc) glass::fail("kernel_stream: ", a, " needs a value (or is unknown)");
        const char* v = argv[++i];
        if (a == "--kernels") o.kernels = v;
        else if (a == "--type") o.type = weight_type_from_string(v);
        else if (a == "--tokens") o.tokens = positive(a, v);
        else if (a == "--rows") o.rows = positive(a, v);
        else if (a == "--cols") o.cols = positive(a, v);
        else if (a == "--matrices") o.matrices = positive(a, v);
        else if (a == "--threads") o.threads = positive(a, v);
        else if (a == "--passes") o.passes = positive(a, v);
        else glass::fail("kernel_stream: unknown flag ", a);
    }
    if (o.int8 && (o.tokens != 1 || !has_integer_weights(o.type)))
        glass::fail("--int8 multiplies one token by integer weights, q8_0, q4_0 or a k-quant (asked: ", o.tokens, " tokens, ",
                    to_string(o.type), ")");
    return o;
}

std::uint64_t fnv1a(const float* p, std::size_t n) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

}  // namespace

int main(int argc, char** argv) try {
    const Options o = parse(argc, argv);
    const Kernels k = kernels_of(o.kernels);
    const int n = o.tokens;

    // The weights: one random matrix packed once, copied `matrices` times.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> w(static_cast<std::size_t>(o.rows) * o.cols), x(static_cast<std::size_t>(n) * o.cols);
    for (float& v : w) v = uniform(rng);
    for (float& v : x) v = uniform(rng);
    const std::int64_t bytes = packed_bytes(o.rows, o.cols, o.type);
    HugeBuffer arena(static_cast<std::size_t>(bytes * o.matrices));
    const PackedMatrix first = pack_matrix(w.data(), o.rows, o.cols, o.type, arena.as<unsigned char>());
    std::vector<PackedMatrix> mats(static_cast<std::size_t>(o.matrices), first);
    for (int m = 1; m < o.matrices; ++m) {
        mats[m].data = first.data + bytes * m;
        std::memcpy(const_cast<unsigned char*>(mats[m].data), first.data, static_cast<std::size_t>(bytes));
    }

    // The inputs as the kernels take them: x itself, its int8 blocks, or its token tiles.
    std::vector<float> xp(x.size()), y(static_cast<std::size_t>(n) * o.rows);
    pack_tokens(x.data(), o.cols, n, o.cols, xp.data());
    const int blocks = (o.cols + 31) / 32;
    std::vector<std::int8_t> xq(static_cast<std::size_t>(blocks) * 32);
    std::vector<float> xs(static_cast<std::size_t>(blocks));
    std::vector<std::int32_t> xsum(static_cast<std::size_t>(blocks));
    k.quantize_int8(x.data(), o.cols, xq.data(), xs.data(), xsum.data());
    const Int8Vector x8{xq.data(), xs.data(), xsum.data()};
    // matmul's scratch: one chunk per thread, 32-byte aligned (a HugeBuffer is page-aligned)
    HugeBuffer scratch_buffer(sizeof(float) * static_cast<std::size_t>(o.threads) * kScratchFloats);
    float* scratch = scratch_buffer.as<float>();

    // The passes: every matrix once, one parallel region each.
    ThreadPool pool(o.threads);
    ItemLayout items;
    items.add(first.panels(), first.panel_bytes(), o.threads);
    std::vector<double> gbs, gflops;
    for (int pass = -1; pass < o.passes; ++pass) {  // pass -1 warms up
        const auto t0 = std::chrono::steady_clock::now();
        for (const PackedMatrix& m : mats) {
            auto job = [&](int item, int thread) {
                const int p0 = item * items.panels_of_item[0], p1 = std::min(m.panels(), p0 + items.panels_of_item[0]);
                if (o.int8) k.matvec_int8(m, x8, y.data(), p0, p1, false);
                else if (n == 1) k.matvec(m, x.data(), y.data(), p0, p1, false);
                else k.matmul(m, xp.data(), n, y.data(), o.rows, p0, p1, false,
                              scratch + std::int64_t{thread} * kScratchFloats);
            };
            pool.run(items.total, job);
        }
        const double s = seconds_since(t0);
        if (pass < 0) continue;
        gbs.push_back(static_cast<double>(bytes) * o.matrices / s / 1e9);
        gflops.push_back(2.0 * o.rows * o.cols * n * o.matrices / s / 1e9);
    }

    const Stat g = stat_of(gbs), f = stat_of(gflops);
    std::printf("{\"kernels\": \"%s\", \"isa\": \"%s\", \"type\": \"%s\", \"tokens\": %d, \"int8\": %s, \"rows\": %d, \"cols\": %d, "
                "\"matrices\": %d, \"threads\": %d, \"passes\": %d, \"gb_per_s\": [%.3f, %.3f, %.3f], "
                "\"gflop_per_s\": [%.3f, %.3f, %.3f], \"hash\": \"%016llx\"}\n",
                k.name, k.isa, to_string(o.type), n, o.int8 ? "true" : "false", o.rows, o.cols, o.matrices, o.threads, o.passes,
                g.median, g.min, g.max, f.median, f.min, f.max,
                static_cast<unsigned long long>(fnv1a(y.data(), y.size())));
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_stream: %s\n", e.what());
    return 1;
}
