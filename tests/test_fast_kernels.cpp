// tests/test_fast_kernels.cpp — every fast CPU kernel in one table: each kernel set this CPU runs ×
// shapes × weight types × the entries of fast::Kernels (kernel_table.hpp), in the spirit of the
// CUDA op harness (tests/cuda/test_cuda_ops.cpp).
//
// A case is one op on one shape and type, with its own seeded random inputs (a failure
// reproduces). It runs on every set under test, and each run is a row of the printed table:
//   portable      against the definition: the sum in double over the weights as the packed
//                 layout holds them (PackedMatrix::at), std::exp in double, the scalar maximum
//   any other set against portable's output on the same inputs
// error = max |got − want| / max |want| (kernel_checks.hpp's measure; max |got − want| where
// want is all zeros; "per value" rows: max |got − want| / |want| value by value). A row fails
// where the error passes its bound, where a kernel leaves a NaN in what it must write, or where
// it changes a sentinel it must not write (past a row's end, between rows, before its panels).
// The bounds:
//   0     the same fp32 operations in the same order: dequantize_rows (one product per value),
//         row_max, add_rows cut into runs against one piece, a token's matmul row alone against
//         among 12 others (the serving batch's invariance)
//   1e-6  the probes (a sum read front to back; FMA chains, each set against its own seeds: each
//         chain exact, only the final sum over lanes may round apart); e^x value by value
//         (~1e-7 each: the vector e^x)
//   1e-5  the same products summed in another order (vector lanes, FMA; or fp32 against double):
//         a few ulps of the largest partial sums for these lengths, about 80 ulps of room, where
//         a real bug (a wrong row, a lane of padding, a wrong scale, an off-by-one) moves the
//         outputs at the 1e-2 .. 1 level
// Sets under test: available_kernel_sets(), and the variant a set holds besides the one the CPU
// picks (avx2's vpmaddubsw matvec_int8 on a CPU with AVX-VNNI; neon's without sdot on a CPU with
// it), which runs the int8 rows only. GLASS_KERNELS=NAME keeps portable and NAME only. A set this
// CPU lacks is skipped with a message. Sizes are odd on purpose (kernel_checks.hpp says why).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/fast/token_tiles.hpp"
#include "glass/kv_cache.hpp"
#include "glass/quantize.hpp"
#include "kernel_checks.hpp"

namespace test_fast_kernels {  // this file's own names (tests are built in unity batches)

namespace fast = glass::fast;
using fast::Kernels;
using fast::WeightType;
using kernel_checks::random_vector;

namespace {

// ---- The sets under test ------------------------------------------------------------------------

struct SetUnderTest {
    Kernels kernels;
    bool int8_only;  // a variant that differs from its set only in matvec_int8
};

std::vector<SetUnderTest> sets_under_test() {
    const char* env = std::getenv("GLASS_KERNELS");
    const std::string forced = env != nullptr ? env : "";
    if (!forced.empty()) {
        fast::kernel_set_from_string(forced);  // a name that is no set fails the test
        MESSAGE("GLASS_KERNELS=" << forced << ": the table runs portable and " << forced << " only");
    }
    std::vector<SetUnderTest> sets;
    for (fast::KernelSet s : {fast::KernelSet::portable, fast::KernelSet::avx2, fast::KernelSet::avx512, fast::KernelSet::neon}) {
        const std::string name = fast::to_string(s);
        if (!forced.empty() && s != fast::KernelSet::portable && name != forced) continue;
        if (!fast::cpu_runs(s)) {
            MESSAGE("kernel set " << name << ": skipped, this CPU lacks it (it has: " << fast::cpu_feature_list() << ")");
            continue;
        }
        sets.push_back({fast::kernels_of(s), false});
#if defined(__x86_64__)
        if (s == fast::KernelSet::avx2 && fast::cpu_has_avx_vnni()) sets.push_back({fast::avx2_kernels(false), true});
#endif
#if defined(__aarch64__)
        if (s == fast::KernelSet::neon && fast::neon_has_dotprod()) sets.push_back({fast::neon_kernels(false), true});
#endif
    }
    return sets;
}

// ---- A case: one op, shape and type --------------------------------------------------------------

// What a kernel produced: the values it must write, and whether all it must not write kept its
// sentinel.
struct Output {
    std::vector<float> values;
    bool kept = true;
};

// A case's inputs, made once: `run` gives a set's output, `definition` what portable's must be.
// own_definition, where a set's result is its own (the probes' seeds differ by set): what each
// set's must be, instead of portable's output.
struct Prepared {
    std::function<Output(const Kernels&)> run;
    std::function<std::vector<float>()> definition;
    std::function<std::vector<float>(const Kernels&)> own_definition = nullptr;
};

enum class Measure { largest, per_value };

struct Case {
    std::string op, shape, type;
    double bound;
    std::function<Prepared(std::uint64_t seed)> prepare;
    bool int8 = false;  // a matvec_int8 case: the int8-only variants run it too
    Measure measure = Measure::largest;
};

std::string fmt(const char* f, auto... args) {
    char buf[160];
    std::snprintf(buf, sizeof buf, f, args...);
    return buf;
}

// A buffer of `bytes` zeroed bytes starting on a 64-byte boundary (the panels' alignment).
struct Aligned {
    std::vector<unsigned char> storage;
    unsigned char* data;
    explicit Aligned(std::size_t bytes) : storage(bytes + 64, 0) {
        data = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) / 64 * 64);
    }
};

// A random [rows, cols] matrix packed as `type`, with its packing buffer.
struct Packed {
    Aligned buffer;
    fast::PackedMatrix m;
    Packed(int rows, int cols, WeightType type, std::uint64_t seed)
        : buffer(std::size_t(fast::packed_bytes(rows, cols, type))) {
        const std::vector<float> w = random_vector(std::size_t(rows) * cols, seed);
        m = fast::pack_matrix(w.data(), rows, cols, type, buffer.data);
    }
};

// Σ_k W(r, k) x[k] in double, W as the panels hold it.
double row_dot(const fast::PackedMatrix& m, int r, const float* x) {
    double sum = 0;
    for (int k = 0; k < m.cols; ++k) sum += double(m.at(r, k)) * x[k];
    return sum;
}

alignas(64) float g_scratch[fast::kScratchFloats];  // the matmul kernels' per-thread scratch

// ---- Products: matvec and matmul on every weight type ---------------------------------------------

struct ProductShape { int rows, cols; };

// The shapes of each type: a panel partly filled (3, 77 and 100 rows: 32-row panels), partial
// Q8 blocks and 256-input chunks (300, 1000 inputs), one block; the k-quants take rows of whole
// 256-input super-blocks.
std::vector<ProductShape> product_shapes(WeightType type) {
    if (fast::is_k_quant(type)) return {{32, 256}, {77, 512}, {100, 1024}};
    return {{3, 5}, {77, 300}, {100, 1000}};
}

// matvec over all panels into NaN (every row must be written), and accumulating onto 0.5 over
// panels [1, end) only: panel 0's rows must keep their 0.5.
void add_matvec(std::vector<Case>& cases, WeightType type, ProductShape s) {
    for (bool from_panel_1 : {false, true}) {
        if (from_panel_1 && s.rows <= fast::kPanel) continue;
        cases.push_back({from_panel_1 ? "matvec += (panels 1..)" : "matvec", fmt("%dx%d", s.rows, s.cols),
                         fast::to_string(type), 1e-5, [=](std::uint64_t seed) {
            auto w = std::make_shared<Packed>(s.rows, s.cols, type, seed);
            auto x = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.cols), seed + 1));
            const int p0 = from_panel_1 ? 1 : 0, r0 = p0 * fast::kPanel;
            const float start = from_panel_1 ? 0.5f : NAN;
            return Prepared{[=](const Kernels& k) {
                std::vector<float> y(std::size_t(s.rows), start);
                k.matvec(w->m, x->data(), y.data(), p0, w->m.panels(), from_panel_1);
                Output out{{y.begin() + r0, y.end()}};
                for (int r = 0; r < r0; ++r) out.kept = out.kept && y[std::size_t(r)] == 0.5f;
                return out;
            }, [=] {
                std::vector<float> want;
                for (int r = r0; r < s.rows; ++r) want.push_back(float((from_panel_1 ? 0.5 : 0.0) + row_dot(w->m, r, x->data())));
                return want;
            }};
        }});
    }
}

// matmul on n tokens packed into tiles: one (decode through the prefill kernel), 13 accumulating
// onto 0.5 into rows of y further apart than the matrix is tall (ldy = rows + 3: the gaps keep
// their 9), 64 (several tiles).
void add_matmul(std::vector<Case>& cases, WeightType type, ProductShape s) {
    for (int n : {1, 13, 64}) {
        const bool accumulate = n == 13;
        const long ldy = accumulate ? s.rows + 3 : s.rows;
        cases.push_back({accumulate ? "matmul +=" : "matmul", fmt("%dx%d, n=%d%s", s.rows, s.cols, n, accumulate ? ", ldy+3" : ""),
                         fast::to_string(type), 1e-5, [=](std::uint64_t seed) {
            auto w = std::make_shared<Packed>(s.rows, s.cols, type, seed);
            auto x = std::make_shared<std::vector<float>>(random_vector(std::size_t(n) * s.cols, seed + 1));
            auto xp = std::make_shared<std::vector<float>>(x->size());
            fast::pack_tokens(x->data(), s.cols, n, s.cols, xp->data());
            return Prepared{[=](const Kernels& k) {
                std::vector<float> y(std::size_t(n * ldy), 9.0f);
                for (int t = 0; t < n; ++t) std::fill_n(y.begin() + t * ldy, s.rows, accumulate ? 0.5f : NAN);
                k.matmul(w->m, xp->data(), n, y.data(), ldy, 0, w->m.panels(), accumulate, g_scratch);
                Output out;
                for (int t = 0; t < n; ++t) {
                    out.values.insert(out.values.end(), y.begin() + t * ldy, y.begin() + t * ldy + s.rows);
                    for (long r = s.rows; r < ldy; ++r) out.kept = out.kept && y[std::size_t(t * ldy + r)] == 9.0f;
                }
                return out;
            }, [=] {
                std::vector<float> want;
                for (int t = 0; t < n; ++t)
                    for (int r = 0; r < s.rows; ++r)
                        want.push_back(float((accumulate ? 0.5 : 0.0) + row_dot(w->m, r, x->data() + std::size_t(t) * s.cols)));
                return want;
            }};
        }});
    }
}

// A token's row does not depend on the tokens beside it (the paged backend's batch invariance):
// token 7 alone gives the very bits it got among 13. The output is alone − among: all zeros.
void add_matmul_invariance(std::vector<Case>& cases, WeightType type, ProductShape s) {
    cases.push_back({"matmul: token alone - in batch", fmt("%dx%d, n=13, token 7", s.rows, s.cols), fast::to_string(type), 0.0,
                     [=](std::uint64_t seed) {
        auto w = std::make_shared<Packed>(s.rows, s.cols, type, seed);
        auto x = std::make_shared<std::vector<float>>(random_vector(std::size_t(13) * s.cols, seed + 1));
        auto xp = std::make_shared<std::vector<float>>(x->size());
        fast::pack_tokens(x->data(), s.cols, 13, s.cols, xp->data());
        return Prepared{[=](const Kernels& k) {
            std::vector<float> batch(std::size_t(13) * s.rows), alone(std::size_t(s.rows));
            k.matmul(w->m, xp->data(), 13, batch.data(), s.rows, 0, w->m.panels(), false, g_scratch);
            k.matmul(w->m, x->data() + 7 * s.cols, 1, alone.data(), s.rows, 0, w->m.panels(), false, g_scratch);
            for (int r = 0; r < s.rows; ++r) alone[std::size_t(r)] -= batch[std::size_t(7 * s.rows + r)];
            return Output{alone};
        }, [=] { return std::vector<float>(std::size_t(s.rows), 0.0f); }};
    }});
}

// ---- int8 activations: matvec_int8 on the integer types -------------------------------------------

// x in int8 blocks of 32 (quantize_activations), times the integers of Q8_0/Q4_0/k-quant panels.
// The definition in double: each weight as the panel holds it times each x as its block holds it
// (dx · qx). Into NaN over all panels, and accumulating onto 0.5.
void add_matvec_int8(std::vector<Case>& cases, WeightType type, ProductShape s) {
    for (bool accumulate : {false, true})
        cases.push_back({accumulate ? "matvec_int8 +=" : "matvec_int8", fmt("%dx%d", s.rows, s.cols),
                         std::string(fast::to_string(type)) + " x int8", 1e-5, [=](std::uint64_t seed) {
            struct Inputs {
                std::vector<float> x, xs;
                std::vector<std::int8_t> xq;
                std::vector<std::int32_t> sums;
            };
            auto w = std::make_shared<Packed>(s.rows, s.cols, type, seed);
            auto in = std::make_shared<Inputs>();
            const int blocks = (s.cols + 31) / 32;
            in->x = random_vector(std::size_t(s.cols), seed + 1);
            in->xq.resize(std::size_t(blocks) * 32);
            in->xs.resize(std::size_t(blocks));
            in->sums.assign(std::size_t(blocks), 0);
            glass::quantize_activations(in->x.data(), s.cols, in->xq.data(), in->xs.data());
            for (int i = 0; i < blocks * 32; ++i) in->sums[std::size_t(i / 32)] += in->xq[std::size_t(i)];
            return Prepared{[=](const Kernels& k) {
                std::vector<float> y(std::size_t(s.rows), accumulate ? 0.5f : NAN);
                k.matvec_int8(w->m, {in->xq.data(), in->xs.data(), in->sums.data()}, y.data(), 0, w->m.panels(), accumulate);
                return Output{y};
            }, [=] {
                std::vector<float> want;
                for (int r = 0; r < s.rows; ++r) {
                    double dot = accumulate ? 0.5 : 0.0;
                    for (int k = 0; k < s.cols; ++k)
                        dot += double(w->m.at(r, k)) * double(in->xs[std::size_t(k / 32)]) * double(in->xq[std::size_t(k)]);
                    want.push_back(float(dot));
                }
                return want;
            }};
        }, true});
}

void add_products(std::vector<Case>& cases) {
    for (WeightType type : kernel_checks::every_panel_type())
        for (ProductShape s : product_shapes(type)) {
            add_matvec(cases, type, s);
            add_matmul(cases, type, s);
            add_matmul_invariance(cases, type, s);
        }
    for (WeightType type : {WeightType::q8_0, WeightType::q4_0, WeightType::q4_k, WeightType::q5_k, WeightType::q6_k})
        for (ProductShape s : product_shapes(type)) add_matvec_int8(cases, type, s);
}

// ---- Decode attention: a run of cached rows -------------------------------------------------------

// head_dim 8 and 48 fill part of a register block (AVX-512: one of 64 floats; NEON: 16), 64
// exactly one, 80 spills into another, 128 two; one cached row, 21, 100. Rows lie ld = hd + 13
// floats apart (a cache row holds more than one head).
struct RowsShape { int hd, n_rows; };
const RowsShape kRowsShapes[] = {{8, 21}, {48, 21}, {64, 1}, {64, 21}, {80, 21}, {128, 100}};

// out[j] = scale · q · rows[j]; out[n_rows] must keep its sentinel.
void add_dot_rows(std::vector<Case>& cases, RowsShape s) {
    cases.push_back({"dot_rows", fmt("hd=%d, rows=%d", s.hd, s.n_rows), "fp32", 1e-5, [=](std::uint64_t seed) {
        const long ld = s.hd + 13;
        auto q = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.hd), seed));
        auto rows = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.n_rows * ld), seed + 1));
        return Prepared{[=](const Kernels& k) {
            std::vector<float> out(std::size_t(s.n_rows) + 1, NAN);
            out.back() = 7.0f;
            k.dot_rows(q->data(), rows->data(), ld, s.n_rows, s.hd, 0.25f, out.data());
            return Output{{out.begin(), out.end() - 1}, out.back() == 7.0f};
        }, [=] {
            std::vector<float> want;
            for (int j = 0; j < s.n_rows; ++j) {
                double dot = 0;
                for (int d = 0; d < s.hd; ++d) dot += double((*q)[std::size_t(d)]) * (*rows)[std::size_t(j * ld + d)];
                want.push_back(float(0.25 * dot));
            }
            return want;
        }};
    }});
}

// y += Σ_j a[j] · rows[j] onto y = 0.5; the 16 floats past hd must keep their sentinel. In runs
// (1 row, 5, the rest: blocks of a paged cache) it is the same bits as in one piece: each element
// is one chain over the rows in order, however it is cut (output: runs − one piece).
void add_add_rows(std::vector<Case>& cases, RowsShape s) {
    for (bool in_runs : {false, true}) {
        if (in_runs && s.n_rows < 7) continue;
        cases.push_back({in_runs ? "add_rows: in runs - one piece" : "add_rows", fmt("hd=%d, rows=%d", s.hd, s.n_rows), "fp32",
                         in_runs ? 0.0 : 1e-5, [=](std::uint64_t seed) {
            const long ld = s.hd + 13;
            auto a = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.n_rows), seed));
            auto rows = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.n_rows * ld), seed + 1));
            auto sum = [=](const Kernels& k, std::initializer_list<int> cuts) {  // cuts: run lengths
                std::vector<float> y(std::size_t(s.hd) + 16, 0.5f);
                std::fill(y.begin() + s.hd, y.end(), 7.0f);
                int j0 = 0;
                for (int n : cuts) {
                    k.add_rows(y.data(), a->data() + j0, rows->data() + j0 * ld, ld, n, s.hd);
                    j0 += n;
                }
                Output out{{y.begin(), y.begin() + s.hd}};
                out.kept = std::all_of(y.begin() + s.hd, y.end(), [](float v) { return v == 7.0f; });
                return out;
            };
            return Prepared{[=](const Kernels& k) {
                Output whole = sum(k, {s.n_rows});
                if (!in_runs) return whole;
                Output runs = sum(k, {1, 5, s.n_rows - 6});
                for (std::size_t i = 0; i < runs.values.size(); ++i) runs.values[i] -= whole.values[i];
                runs.kept = runs.kept && whole.kept;
                return runs;
            }, [=] {
                std::vector<float> want;
                for (int d = 0; d < s.hd; ++d) {
                    double y = 0.5;
                    for (int j = 0; j < s.n_rows; ++j) y += double((*a)[std::size_t(j)]) * (*rows)[std::size_t(j * ld + d)];
                    want.push_back(in_runs ? 0.0f : float(y));
                }
                return want;
            }};
        }});
    }
}

// An int8 KV cache's rows (3 KV heads a row; head 1 read) in fp32: exactly dequantize_kv_row's
// values (one fp32 product s · q each); nothing past the n_rows · hd outputs is written.
void add_dequantize_rows(std::vector<Case>& cases, RowsShape s) {
    cases.push_back({"dequantize_rows", fmt("hd=%d, rows=%d, head 1 of 3", s.hd, s.n_rows), "int8 kv", 0.0, [=](std::uint64_t seed) {
        struct Cache {
            std::vector<std::int8_t> rows;
            std::vector<float> scales, dequantized;
        };
        const int heads = 3, head = 1;
        const long ld = long{heads} * s.hd;
        auto c = std::make_shared<Cache>();
        const std::vector<float> x = random_vector(std::size_t(s.n_rows * ld), seed);
        c->rows.resize(x.size());
        c->scales.resize(std::size_t(s.n_rows * heads));
        c->dequantized.resize(x.size());
        for (int r = 0; r < s.n_rows; ++r) {
            glass::quantize_kv_row(x.data() + r * ld, heads, s.hd, c->rows.data() + r * ld, c->scales.data() + r * heads);
            glass::dequantize_kv_row(c->rows.data() + r * ld, c->scales.data() + r * heads, heads, s.hd, c->dequantized.data() + r * ld);
        }
        return Prepared{[=](const Kernels& k) {
            std::vector<float> got(std::size_t(s.n_rows * s.hd) + 16, 7.0f);
            k.dequantize_rows(c->rows.data() + head * s.hd, ld, c->scales.data() + head, heads, s.n_rows, s.hd, got.data());
            return Output{{got.begin(), got.end() - 16}, std::all_of(got.end() - 16, got.end(), [](float v) { return v == 7.0f; })};
        }, [=] {
            std::vector<float> want;
            for (int r = 0; r < s.n_rows; ++r)
                want.insert(want.end(), c->dequantized.begin() + r * ld + head * s.hd, c->dequantized.begin() + r * ld + (head + 1) * s.hd);
            return want;
        }};
    }});
}

void add_decode_attention(std::vector<Case>& cases) {
    for (RowsShape s : kRowsShapes) {
        add_dot_rows(cases, s);
        add_add_rows(cases, s);
        add_dequantize_rows(cases, s);
    }
}

// ---- Prefill attention tiles ----------------------------------------------------------------------

// S = scale · Q Kᵀ and O = P V for m = 1..4 query rows (kAttentionRows), head_dim below one
// 64-wide block, one, and spilling into a second; key counts leaving partial registers (16 keys
// on AVX-512, 4 on NEON) and a partial block of keys. Every matrix has a leading dimension past
// its width, and what lies past each output row's end must keep its sentinel.
struct TileShape { int hd, n_keys, m; };

// Output: the m rows of `cols` values of a [m][ld] buffer; kept: what lies past each row's end.
Output rows_of(const std::vector<float>& buf, int m, int cols, long ld, float sentinel) {
    Output out;
    for (int r = 0; r < m; ++r) {
        out.values.insert(out.values.end(), buf.begin() + r * ld, buf.begin() + r * ld + cols);
        for (long i = cols; i < ld; ++i) out.kept = out.kept && buf[std::size_t(r * ld + i)] == sentinel;
    }
    return out;
}

void add_attention_tiles(std::vector<Case>& cases, TileShape s) {
    const std::string shape = fmt("hd=%d, keys=%d, m=%d", s.hd, s.n_keys, s.m);
    cases.push_back({"attention_scores", shape, "fp32", 1e-5, [=](std::uint64_t seed) {
        const long ldq = s.hd + 3, ldkt = s.n_keys + 5, lds = s.n_keys + 7;
        auto q = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.m * ldq), seed));
        auto kt = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.hd * ldkt), seed + 1));
        return Prepared{[=](const Kernels& k) {
            std::vector<float> scores(std::size_t(s.m * lds), 7.0f);
            k.attention_scores(q->data(), ldq, s.m, kt->data(), ldkt, s.n_keys, s.hd, 0.125f, scores.data(), lds);
            return rows_of(scores, s.m, s.n_keys, lds, 7.0f);
        }, [=] {
            std::vector<float> want;
            for (int r = 0; r < s.m; ++r)
                for (int j = 0; j < s.n_keys; ++j) {
                    double dot = 0;
                    for (int d = 0; d < s.hd; ++d) dot += double((*q)[std::size_t(r * ldq + d)]) * (*kt)[std::size_t(d * ldkt + j)];
                    want.push_back(float(0.125 * dot));
                }
            return want;
        }};
    }});
    cases.push_back({"attention_mix", shape, "fp32", 1e-5, [=](std::uint64_t seed) {
        const long ldp = s.n_keys + 7, ldv = s.hd + 9, ldo = s.hd + 2;
        auto p = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.m * ldp), seed));
        auto v = std::make_shared<std::vector<float>>(random_vector(std::size_t(s.n_keys * ldv), seed + 1));
        return Prepared{[=](const Kernels& k) {
            std::vector<float> o(std::size_t(s.m * ldo), 7.0f);
            k.attention_mix(p->data(), ldp, s.m, v->data(), ldv, s.n_keys, s.hd, o.data(), ldo);
            return rows_of(o, s.m, s.hd, ldo, 7.0f);
        }, [=] {
            std::vector<float> want;
            for (int r = 0; r < s.m; ++r)
                for (int d = 0; d < s.hd; ++d) {
                    double sum = 0;
                    for (int j = 0; j < s.n_keys; ++j) sum += double((*p)[std::size_t(r * ldp + j)]) * (*v)[std::size_t(j * ldv + d)];
                    want.push_back(float(sum));
                }
            return want;
        }};
    }});
}

void add_prefill_attention(std::vector<Case>& cases) {
    for (int hd : {8, 48, 64, 80})
        for (int n_keys : {1, 17, 70})
            for (int m = 1; m <= fast::kAttentionRows; ++m) add_attention_tiles(cases, {hd, n_keys, m});
}

// ---- Row operations: softmax, silu_mul, exp_shift, row_max ------------------------------------------

// Lengths: one value, less than a register, a tail of 3 past whole registers, a long row.
const int kRowLengths[] = {1, 7, 83, 1000};

// Scores and gates spanning e^±30.
std::vector<float> wide_values(std::size_t n, std::uint64_t seed) {
    std::vector<float> v = random_vector(n, seed);
    for (float& x : v) x *= 30;
    return v;
}

// An in-place row op on `n` values, with x[n] a sentinel it must not write.
Output in_place(std::vector<float> x, const std::function<void(float*)>& op) {
    x.push_back(5.0f);
    op(x.data());
    const bool kept = x.back() == 5.0f;
    x.pop_back();
    return {x, kept};
}

void add_softmax_silu(std::vector<Case>& cases, int n) {
    cases.push_back({"softmax", fmt("n=%d", n), "fp32", 1e-5, [=](std::uint64_t seed) {
        auto x = std::make_shared<std::vector<float>>(wide_values(std::size_t(n), seed));
        return Prepared{[=](const Kernels& k) { return in_place(*x, [&](float* v) { k.softmax(v, n); }); }, [=] {
            const double mx = *std::max_element(x->begin(), x->end());
            double sum = 0;
            for (float v : *x) sum += std::exp(double(v) - mx);
            std::vector<float> want;
            for (float v : *x) want.push_back(float(std::exp(double(v) - mx) / sum));
            return want;
        }};
    }});
    cases.push_back({"silu_mul", fmt("n=%d", n), "fp32", 1e-5, [=](std::uint64_t seed) {
        auto gate = std::make_shared<std::vector<float>>(wide_values(std::size_t(n), seed));
        auto up = std::make_shared<std::vector<float>>(random_vector(std::size_t(n), seed + 1));
        return Prepared{[=](const Kernels& k) { return in_place(*gate, [&](float* g) { k.silu_mul(g, up->data(), n); }); }, [=] {
            std::vector<float> want;
            for (int i = 0; i < n; ++i) {
                const double g = (*gate)[std::size_t(i)];
                want.push_back(float(g / (1.0 + std::exp(-g)) * (*up)[std::size_t(i)]));
            }
            return want;
        }};
    }});
}

// FlashAttention's step: x[i] = e^(x[i] − shift) for i < n (the row's maximum as the shift), and
// their sum; x[n] untouched.
void add_exp_shift(std::vector<Case>& cases, int n) {
    for (bool sum_only : {false, true})
        cases.push_back({sum_only ? "exp_shift: the sum" : "exp_shift", fmt("n=%d", n), "fp32", 1e-5, [=](std::uint64_t seed) {
            auto x = std::make_shared<std::vector<float>>(wide_values(std::size_t(n), seed));
            const float shift = *std::max_element(x->begin(), x->end());
            return Prepared{[=](const Kernels& k) {
                float sum = 0;
                Output out = in_place(*x, [&](float* v) { sum = k.exp_shift(v, n, shift); });
                if (sum_only) out.values = {sum};
                return out;
            }, [=] {
                std::vector<float> want;
                double sum = 0;
                for (float v : *x) sum += std::exp(double(v) - shift);
                for (float v : *x) want.push_back(float(std::exp(double(v) - shift)));
                return sum_only ? std::vector<float>{float(sum)} : want;
            }};
        }});
}

void add_row_ops(std::vector<Case>& cases) {
    for (int n : kRowLengths) {
        add_softmax_silu(cases, n);
        add_exp_shift(cases, n);
    }
    // Decode's x in int8 blocks: the bytes, then the scales, then the sums, all exact (the same
    // division and rounding). NaN and inf blocks: kernel_checks::check_quantize_int8.
    for (int n : {33, 768, 2051}) {
        cases.push_back({"quantize_int8", fmt("n=%d", n), "int8 x", 0.0, [n](std::uint64_t seed) {
            auto x = std::make_shared<std::vector<float>>(random_vector(std::size_t(n), seed));
            auto quantized = [n](const std::vector<float>& in, auto quantize) {
                const std::size_t blocks = static_cast<std::size_t>((n + 31) / 32);
                std::vector<std::int8_t> q(blocks * 32);
                std::vector<float> scales(blocks);
                std::vector<std::int32_t> sums(blocks);
                quantize(in.data(), q.data(), scales.data(), sums.data());
                std::vector<float> out(q.begin(), q.end());
                out.insert(out.end(), scales.begin(), scales.end());
                out.insert(out.end(), sums.begin(), sums.end());
                return out;
            };
            return Prepared{[=](const Kernels& k) {
                return Output{quantized(*x, [&](const float* in, std::int8_t* q, float* sc, std::int32_t* su) {
                    k.quantize_int8(in, n, q, sc, su);
                })};
            }, [=] {
                return quantized(*x, [&](const float* in, std::int8_t* q, float* sc, std::int32_t* su) {
                    glass::quantize_activations(in, n, q, sc);
                    for (int b = 0; b * 32 < n; ++b)
                        for (int i = 0; i < 32; ++i) su[b] += q[b * 32 + i];
                });
            }};
        }});
    }
    // e^x itself over the clamp's whole range, value by value (a shift of 0).
    Case e{"exp_shift: e^x", "x in [-80, 80] by 0.37", "fp32", 1e-6, [](std::uint64_t) {
        auto x = std::make_shared<std::vector<float>>();
        for (float t = -80.0f; t <= 80.0f; t += 0.37f) x->push_back(t);
        return Prepared{[=](const Kernels& k) {
            std::vector<float> e = *x;
            k.exp_shift(e.data(), static_cast<int>(e.size()), 0.0f);
            return Output{e};
        }, [=] {
            std::vector<float> want;
            for (float v : *x) want.push_back(float(std::exp(double(v))));
            return want;
        }};
    }};
    e.measure = Measure::per_value;
    cases.push_back(e);
    // The tile maximum over the first n values, each n in 1..83 and 1000, with a larger value just
    // past n (it must not be seen): the scalar maximum exactly.
    cases.push_back({"row_max", "n=1..83 and 1000, 1e30 at x[n]", "fp32", 0.0, [](std::uint64_t seed) {
        auto x = std::make_shared<std::vector<float>>(wide_values(1001, seed));
        std::vector<int> lengths;
        for (int n = 1; n <= 83; ++n) lengths.push_back(n);
        lengths.push_back(1000);
        return Prepared{[=](const Kernels& k) {
            std::vector<float> peaks = *x, got;
            for (int n : lengths) {
                peaks[std::size_t(n)] = 1e30f;
                got.push_back(k.row_max(peaks.data(), n));
                peaks[std::size_t(n)] = (*x)[std::size_t(n)];
            }
            return Output{got};
        }, [=] {
            std::vector<float> want;
            for (int n : lengths) want.push_back(*std::max_element(x->begin(), x->begin() + n));
            return want;
        }};
    }});
}

// ---- The probes (benchmark.hpp's ceilings) --------------------------------------------------------

// read_sum: the sum of what it reads. fma_chains: 12 chains of acc = acc · 0.999999 + 1e-7 in
// each of fma_lanes lanes, each chain a sum of its own definition: the vector sets seed every lane
// of chain i with start + 0.001·i and use FMA (each chain is the scalar fmaf loop's exactly);
// portable seeds lane j with start + 0.001·i + 0.0001·j and rounds the product, then the sum
// (computed here in double, where both are exact, then rounded once: fp32's own two steps).
// Only the final sum over lanes and chains may round apart.
float fma_chains_definition(const Kernels& k, int rounds) {
    const bool portable = std::string(k.name) == "portable";
    double sum = 0;
    for (int i = 0; i < fast::kProbeChains; ++i)
        for (int j = 0; j < k.fma_lanes; ++j) {
            float acc = 1.0f + 0.001f * float(i);
            if (portable) acc += 0.0001f * float(j);
            for (int it = 0; it < rounds; ++it)
                acc = portable ? float(double(float(double(acc) * double(0.999999f))) + double(1e-7f))
                               : std::fmaf(acc, 0.999999f, 1e-7f);
            sum += acc;
        }
    return float(sum);
}

void add_probes(std::vector<Case>& cases) {
    for (int n : {64, 1024})
        cases.push_back({"read_sum", fmt("n=%d", n), "fp32", 1e-6, [=](std::uint64_t) {
            auto p = std::make_shared<Aligned>(std::size_t(n) * sizeof(float));
            float* values = reinterpret_cast<float*>(p->data);
            for (int i = 0; i < n; ++i) values[i] = 0.25f * float(i % 7) - 0.5f;
            return Prepared{[=](const Kernels& k) { return Output{{k.read_sum(reinterpret_cast<const float*>(p->data), n)}}; }, [=] {
                double sum = 0;
                for (int i = 0; i < n; ++i) sum += reinterpret_cast<const float*>(p->data)[i];
                return std::vector<float>{float(sum)};
            }};
        }});
    for (int rounds : {0, 1000})
        cases.push_back({"fma_chains", fmt("rounds=%d (own seeds)", rounds), "fp32", 1e-6, [=](std::uint64_t) {
            return Prepared{[=](const Kernels& k) { return Output{{k.fma_chains(rounds, 1.0f)}}; }, nullptr,
                            [=](const Kernels& k) { return std::vector<float>{fma_chains_definition(k, rounds)}; }};
        }});
}

// ---- The table ------------------------------------------------------------------------------------

struct Row {
    std::string op, set, shape, type;
    double error, bound;
    std::string note;
    bool pass() const { return error <= bound; }  // NaN fails
};

double error_of(const Output& got, const std::vector<float>& want, Measure measure) {
    if (got.values.size() != want.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(got.values[i])) return INFINITY;
        const double d = std::fabs(double(got.values[i]) - double(want[i]));
        diff = std::max(diff, measure == Measure::per_value ? d / std::fabs(double(want[i])) : d);
        scale = std::max(scale, std::fabs(double(want[i])));
    }
    return measure == Measure::per_value || scale == 0 ? diff : diff / scale;
}

// One case on every set: portable against the definition, every other set against portable.
void run_case(const Case& c, std::uint64_t seed, const std::vector<SetUnderTest>& sets, std::vector<Row>& rows) {
    const Prepared p = c.prepare(seed);
    const Output portable = p.run(fast::portable_kernels());
    for (const SetUnderTest& s : sets) {
        if (s.int8_only && !c.int8) continue;
        const bool is_portable = std::string(s.kernels.name) == "portable";
        const Output got = is_portable ? portable : p.run(s.kernels);
        const std::vector<float> want = p.own_definition ? p.own_definition(s.kernels)
                                        : is_portable    ? p.definition()
                                                         : portable.values;
        Row row{c.op, c.int8 ? std::string(s.kernels.name) + "/" + s.kernels.int8_dot : s.kernels.name,
                c.shape, c.type, error_of(got, want, c.measure), c.bound, got.kept ? "" : "wrote a sentinel"};
        if (!got.kept) row.error = INFINITY;
        rows.push_back(row);
    }
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    add_products(cases);
    add_decode_attention(cases);
    add_prefill_attention(cases);
    add_row_ops(cases);
    add_probes(cases);
    return cases;
}

}  // namespace

TEST_CASE("fast kernels: every set this CPU runs × shapes × types × every kernel, against portable (one table)") {
    const std::vector<SetUnderTest> sets = sets_under_test();
    REQUIRE(!sets.empty());
    REQUIRE(std::string(sets.front().kernels.name) == "portable");
    const std::vector<Case> cases = all_cases();
    std::vector<Row> rows;
    for (std::size_t i = 0; i < cases.size(); ++i) run_case(cases[i], 1000 + 10 * i, sets, rows);

    std::printf("%-30s %-20s %-34s %-12s %10s %7s  %s\n", "op", "set", "shape", "type", "error", "bound", "pass");
    int failed = 0;
    for (const Row& r : rows) {
        std::printf("%-30s %-20s %-34s %-12s %10.3g %7g  %s%s%s\n", r.op.c_str(), r.set.c_str(), r.shape.c_str(),
                    r.type.c_str(), r.error, r.bound, r.pass() ? "OK" : "FAIL", r.note.empty() ? "" : ": ", r.note.c_str());
        failed += !r.pass();
    }
    std::string names;
    for (const SetUnderTest& s : sets) names += " " + std::string(s.kernels.name) + (s.int8_only ? std::string("/") + s.kernels.int8_dot : "");
    std::printf("%zu/%zu rows passed (%zu cases; sets:%s)\n", rows.size() - std::size_t(failed), rows.size(), cases.size(), names.c_str());
    for (const Row& r : rows) {
        CAPTURE(r.op + " | " + r.set + " | " + r.shape + " | " + r.type + " | " + r.note);
        CHECK(r.error <= r.bound);
    }
}

}  // namespace test_fast_kernels

// Decode's roofline counts the cache rows each step reads (benchmark.hpp), counted here by hand
// for 4 layers where layers 0 and 2 are local with a window of 3 (pattern 2: every second layer
// global): the steps at positions 2, 3, 4 read 3 + 3 local rows and 3, 4, 5 rows in each global
// layer: 12, 14 and 16 rows, 14 on average, each layer's share of a position's K and V bytes.
TEST_CASE("decode_cache_bytes_per_token counts the rows each step reads, windows included") {
    glass::ModelConfig c{};
    c.dim = 64;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.sliding_window = 3;
    c.sliding_window_pattern = 2;
    for (glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
        const double per_layer_row = static_cast<double>(glass::kv_bytes_per_token(c, kv)) / 4;
        CHECK(glass::fast::decode_cache_bytes_per_token(c, kv, 2, 3) == doctest::Approx(14 * per_layer_row));
        // One step at position 0 reads the one row every layer has.
        CHECK(glass::fast::decode_cache_bytes_per_token(c, kv, 0, 1) == doctest::Approx(4 * per_layer_row));
    }
    c.sliding_window = 0;  // every layer global: positions 2, 3, 4 read 3, 4, 5 rows
    CHECK(glass::fast::decode_cache_bytes_per_token(c, glass::KvType::fp32, 2, 3) == doctest::Approx(4 * 4 * 2 * 16 * 4 * 2));
}

// region_read_probe's regions are decode's: per layer q|k|v, o, gate|up (up sharing the gate's
// items), down, then the classifier; each matrix's panels cut into runs that tile it once, in
// order. Its bytes are every packed matrix's, counted here from the shapes: the model's streamed
// bytes less the norm gains (two per layer and the final one, fp32). Shapes with a few panels per
// matrix (dim 96 = 3 panels, hidden 160 = 5, vocab 300 = 10), Q4_0 and fp32 panels, 2 threads.
TEST_CASE("region_read_probe reads decode's regions: every panel of every matrix once, in decode's order") {
    const glass::ModelConfig c = glass::llama2_config(96, 160, 2, 4, 2, 300, 32);  // head_dim 24
    const glass::Model model = glass::fast::random_model_in_memory(c, 7);
    for (glass::fast::WeightType type : {glass::fast::WeightType::q4_0, glass::fast::WeightType::fp32}) {
        CAPTURE(glass::fast::to_string(type));
        glass::fast::FastModel m(model, {.threads = 2, .weights = type}, glass::fast::SingleRow::matvec);
        const auto regions = glass::fast::decode_read_regions(m, 2);
        REQUIRE(regions.size() == std::size_t(4 * c.n_layers + 1));
        std::int64_t matrix_bytes = 0;
        for (std::size_t r = 0; r < regions.size(); ++r) {
            const int l = static_cast<int>(r / 4);
            const glass::fast::FastModel::Layer* w = r + 1 < regions.size() ? &m.layer(l) : nullptr;
            const std::vector<const glass::fast::PackedMatrix*> want =
                !w ? std::vector<const glass::fast::PackedMatrix*>{&m.classifier()}
                : r % 4 == 0 ? std::vector<const glass::fast::PackedMatrix*>{&w->wq, &w->wk, &w->wv}
                : r % 4 == 1 ? std::vector<const glass::fast::PackedMatrix*>{&w->wo}
                : r % 4 == 2 ? std::vector<const glass::fast::PackedMatrix*>{&w->w1}
                             : std::vector<const glass::fast::PackedMatrix*>{&w->w2};
            const glass::fast::PackedMatrix* paired = w && r % 4 == 2 ? &w->w3 : nullptr;
            std::size_t at = 0;  // the region's items: each wanted matrix's panels, front to back
            for (const glass::fast::PackedMatrix* matrix : want) {
                int next = 0;
                while (at < regions[r].size() && regions[r][at].w == matrix) {
                    const glass::fast::ReadItem& item = regions[r][at++];
                    CHECK(item.paired == paired);
                    CHECK(item.p0 == next);
                    CHECK(item.p1 > item.p0);
                    next = item.p1;
                }
                CHECK(next == matrix->panels());
                matrix_bytes += matrix->bytes() * (paired ? 2 : 1);
            }
            CHECK(at == regions[r].size());
        }
        const std::int64_t norms = std::int64_t{2 * c.n_layers + 1} * c.dim * 4;
        CHECK(matrix_bytes == m.weight_bytes() - norms);
        const glass::fast::RegionReadProbe probe = glass::fast::region_read_probe(m, 3);
        CHECK(probe.bytes == matrix_bytes);
        CHECK(probe.bytes_per_s.min > 0);
        CHECK(probe.bytes_per_s.min <= probe.bytes_per_s.median);
        CHECK(probe.bytes_per_s.median <= probe.bytes_per_s.max);
    }
}

// A batch's roofline by hand: 400 MB of weights, 1 MB of cache per sequence, 200 MFLOP per token,
// 50 GB/s and 200 GFLOP/s. Batch 1: read 8.02 ms, FMAs 1 ms: read-bound, 124.7 tokens/s. Batch 16:
// read (400 + 16) MB = 8.32 ms, FMAs 16 ms: FMA-bound, 1000 tokens/s, 8.02x batch 1 at most.
TEST_CASE("batch_decode_roofline takes the longer of a step's read and its FMAs") {
    using glass::fast::batch_decode_roofline;
    const auto one = batch_decode_roofline(1, 400e6, 1e6, 200e6, 50e9, 200e9);
    CHECK(one.read_s == doctest::Approx(8.02e-3));
    CHECK(one.fma_s == doctest::Approx(1e-3));
    CHECK_FALSE(one.fma_bound());
    CHECK(one.tokens_per_s == doctest::Approx(1 / 8.02e-3));
    const auto sixteen = batch_decode_roofline(16, 400e6, 1e6, 200e6, 50e9, 200e9);
    CHECK(sixteen.read_s == doctest::Approx(8.32e-3));
    CHECK(sixteen.fma_s == doctest::Approx(16e-3));
    CHECK(sixteen.fma_bound());
    CHECK(sixteen.tokens_per_s == doctest::Approx(1000));
    CHECK(sixteen.tokens_per_s / one.tokens_per_s == doctest::Approx(8.02));
    CHECK_THROWS_WITH(batch_decode_roofline(0, 1, 0, 1, 1, 1), doctest::Contains("batch 0"));
    CHECK_THROWS_WITH(batch_decode_roofline(1, 1, 0, 1, 0, 1), doctest::Contains("positive ceilings"));
}

// Every benchmark figure is a median with its range (stat_of): one slow reading among several,
// as a preempted pass or step gives on a shared machine, moves the median by at most one place.
TEST_CASE("stat_of: the median (the middle reading, or the mean of the two middle ones), min and max") {
    using glass::fast::stat_of;
    const glass::fast::Stat odd = stat_of({30.0, 10.0, 95.0, 20.0, 25.0});  // sorted: 10 20 25 30 95
    CHECK(odd.median == 25.0);
    CHECK(odd.min == 10.0);
    CHECK(odd.max == 95.0);
    CHECK(odd.mean == 36.0);  // 180 / 5: the one slow reading pulls the mean, not the median
    const glass::fast::Stat even = stat_of({41.0, 80.0, 40.0, 42.0, 84.0, 43.0});  // 40 41 42 43 80 84
    CHECK(even.median == 42.5);
    CHECK(even.min == 40.0);
    CHECK(even.max == 84.0);
    CHECK(even.mean == doctest::Approx(330.0 / 6));
    CHECK(stat_of({7.0}).median == 7.0);
    CHECK(stat_of({}).median == 0.0);  // nothing measured: zeros, not a read past the end
}

// paired_ratios by hand: 3 runs, 4 passes of each probe (one before the first run, one after each).
// Run i's prefill over FMA pass i (the one before it), its decode over read pass i + 1 (after it).
// 1e9 FLOPs per prompt token and 1e8 bytes per decoded token:
//   prefill: 100 · 1e9 / 200e9 = 0.5,  50 · 1e9 / 100e9 = 0.5,  90 · 1e9 / 150e9 = 0.6
//   decode:   30 · 1e8 / 10e9 = 0.3,    12 · 1e8 / 4e9 = 0.3,    40 · 1e8 / 8e9 = 0.5
// Each run kept its ratio while the machine halved and recovered; the medians of the runs over the
// medians of the passes (90 · 1e9 / 175e9 = 0.51 and 30 · 1e8 / 9e9 = 0.33) would have mixed them.
TEST_CASE("paired_ratios divides each run by the probe pass beside it") {
    glass::fast::PhaseSpeeds speeds;
    speeds.prefill_runs = {100, 50, 90};
    speeds.decode_runs = {30, 12, 40};
    const std::vector<double> fma = {200e9, 100e9, 150e9, 999e9}, read = {999e9, 10e9, 4e9, 8e9};
    const glass::fast::PairedRatios r = glass::fast::paired_ratios(speeds, fma, read, 1e9, 1e8);
    CHECK(r.prefill_to_fma.median == doctest::Approx(0.5));
    CHECK(r.prefill_to_fma.max == doctest::Approx(0.6));
    CHECK(r.decode_to_read.median == doctest::Approx(0.3));
    CHECK(r.decode_to_read.min == doctest::Approx(0.3));
    CHECK(r.decode_to_read.max == doctest::Approx(0.5));
    CHECK_THROWS_WITH(glass::fast::paired_ratios(speeds, {1, 2, 3}, read, 1, 1), doctest::Contains("3 FMA and 4 read"));
}

// measure_phases keeps every run's speed, in order, and calls between_runs before the first timed
// run and after each (never around the warm-up): runs + 1 calls, where the probe passes of
// paired_ratios go. The probes made once (ReadProbe, FmaProbe) give positive rates pass after pass.
TEST_CASE("measure_phases keeps each run and calls between_runs runs + 1 times; the probes' passes") {
    const glass::ModelConfig c = glass::llama2_config(96, 160, 2, 4, 2, 300, 32);
    const glass::Model model = glass::fast::random_model_in_memory(c, 7);
    glass::fast::FastCpuSession session(model, {.threads = 2, .weights = glass::fast::WeightType::fp32});
    int calls = 0;
    const glass::fast::PhaseSpeeds s = glass::fast::measure_phases(session, 8, 4, 3, [&] { ++calls; });
    CHECK(calls == 4);
    REQUIRE(s.decode_runs.size() == 3);
    REQUIRE(s.prefill_runs.size() == 3);
    CHECK(s.decode_tokens_per_s.median == glass::fast::stat_of(s.decode_runs).median);
    CHECK(s.prefill_tokens_per_s.max == glass::fast::stat_of(s.prefill_runs).max);
    glass::fast::ReadProbe read(2, std::int64_t{16} << 20);
    glass::fast::FmaProbe fma(2);
    for (int pass = 0; pass < 2; ++pass) {
        CHECK(read.pass() > 0);
        CHECK(fma.pass() > 0);
    }
}
