/// \file
/// \brief glass/fast/benchmark.hpp — measure the two phases, and the two ceilings they run into.
/// ```text
/// Journey step 9 in numbers:
///   decode  reads every weight once per token, and the K/V rows cached so far:
///           achieved bandwidth = (weight bytes + cache bytes read) × tokens/s, compared with
///           read_bandwidth_probe() (summing a 1 GiB buffer: the best a loop that only reads can
///           do on this machine, with the same threads).
///           On several threads decode cannot stream the way that probe does: a token is ~5
///           parallel regions per layer (q|k|v, attention, o, gate|up, down), each a few hundred
///           KB per thread, and every region ends with the threads waiting for each other.
///           region_read_probe() reads the model's own matrices with that same loop, in decode's
///           regions and work items, and nothing else: the ceiling of decode's structure, which
///           the kernels can only approach.
///   prefill does 2 FLOPs per weight per prompt token (+ attention): achieved FLOP/s compared
///           with fma_peak_probe() (independent fused multiply-adds, nothing else).
/// Every figure is a median of several runs, with the range, because a shared VM is noisy.
/// ```
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/fast/buffer.hpp"
#include "glass/fast/fast_model.hpp"
#include "glass/fast/kernels.hpp"
#include "glass/fast/thread_pool.hpp"
#include "glass/session.hpp"

namespace glass::fast {

struct Stat {
    double median = 0, min = 0, max = 0;
    double mean = 0;  // what the readings took together, slow ones included
};
inline Stat stat_of(std::vector<double> v) {
    if (v.empty()) return {};
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    double sum = 0;
    for (const double x : v) sum += x;
    return {median, v.front(), v.back(), sum / static_cast<double>(n)};
}

// K and V bytes one decoded token reads, on average over the decode steps at positions first ..
// first + steps - 1: the step at position p reads the cached rows 0 .. p of every layer (a local
// layer, with a sliding window, only the window's last rows), keys and values, in `kv`'s type.
// Decode's roofline counts them beside the weights: at the 64-96 positions `glass bench` decodes by
// default, stories110M's fp32 cache adds 5.9 MB a token, a tenth of what its Q4_0 weights read.
inline double decode_cache_bytes_per_token(const ModelConfig& c, KvType kv, int first, int steps) {
    if (steps < 1) return 0;
    const double row_bytes = static_cast<double>(kv_bytes_per_token(c, kv)) / c.n_layers;  // one position, one layer
    double rows = 0;  // rows read, summed over layers and steps
    for (int p = first; p < first + steps; ++p)
        for (int l = 0; l < c.n_layers; ++l) {
            const int window = c.window_of_layer(l);
            rows += window > 0 ? std::min(p + 1, window) : p + 1;
        }
    return rows * row_bytes / steps;
}

// The CPU's name as the kernel reports it ("AMD EPYC 7763 64-Core Processor"), for bench records.
inline std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        for (const char* key : {"model name", "Model"})  // x86-64, and some AArch64 kernels
            if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
                const std::string name = line.substr(line.find(':') + 1);
                return name.substr(std::min(name.size(), name.find_first_not_of(' ')));
            }
    return "unknown CPU";
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Read bandwidth (bytes/s) of `threads` threads each summing its slice of one `bytes` buffer
// (huge pages, like the weights) with the kernel set's own loads, one value per pass(). The buffer
// and the threads are made once, so a pass can be taken beside each run of a benchmark
// (measure_phases' between_runs) as well as several in a row (read_bandwidth_probe).
class ReadProbe {
public:
    ReadProbe(int threads, std::int64_t bytes = std::int64_t{1} << 30, const Kernels& k = best_kernels())
        : kernels_(k), bytes_(bytes), buffer_(static_cast<std::size_t>(bytes)), pool_(threads),
          sinks_(static_cast<size_t>(threads)) {
        float* data = buffer_.as<float>();
        for (std::int64_t i = 0; i < bytes / 4; ++i) data[i] = 1.0f;  // touch every page before timing
    }
    ~ReadProbe() {
        volatile float keep_alive = sinks_[0];  // the sums must look used, or the loop is deleted
        (void)keep_alive;
    }
    double pass() {
        const std::int64_t n = bytes_ / 4;
        const float* data = buffer_.as<float>();
        const int pieces = 64;  // 16 MiB each for 1 GiB, shared out like the weight panels are
        auto job = [&](int piece, int t) {
            const std::int64_t b = n / pieces * piece, e = n / pieces * (piece + 1);
            sinks_[static_cast<size_t>(t)] += kernels_.read_sum(data + b, e - b);
        };
        const auto t0 = std::chrono::steady_clock::now();
        pool_.run(pieces, job);
        return static_cast<double>(bytes_) / seconds_since(t0);
    }

private:
    Kernels kernels_;  // a copy: best_kernels() returns one by value
    std::int64_t bytes_;
    HugeBuffer buffer_;
    ThreadPool pool_;
    std::vector<float> sinks_;
};

inline Stat read_bandwidth_probe(int threads, std::int64_t bytes = std::int64_t{1} << 30, int passes = 7,
                                 const Kernels& k = best_kernels()) {
    ReadProbe probe(threads, bytes, k);
    std::vector<double> rates;
    for (int pass = 0; pass < passes; ++pass) rates.push_back(probe.pass());
    return stat_of(rates);
}

// One work item of a decoded token's products: panels [p0, p1) of `w` (and of `paired`, the
// up matrix that shares the gate's items in FastModel::run_products; else nullptr).
struct ReadItem {
    const PackedMatrix* w;
    const PackedMatrix* paired;
    int p0, p1;
};

// A decoded token's matrices as FastModel::run_products shares them among `threads` threads:
// one region per run_products call (per layer q|k|v, o, gate|up, down; then the classifier), cut
// into items by the layout run_products itself uses (ItemLayout, thread_pool.hpp).
// (Decode's attention region reads the K/V cache, not weights: it is not here.) A whole model.
inline std::vector<std::vector<ReadItem>> decode_read_regions(const FastModel& m, int threads) {
    std::vector<std::vector<ReadItem>> regions;
    auto add = [&](std::initializer_list<const PackedMatrix*> products, const PackedMatrix* paired = nullptr) {
        const std::span<const PackedMatrix* const> matrices(products.begin(), products.size());
        ItemLayout layout;
        for (const PackedMatrix* w : matrices) layout.add(w->panels(), w->panel_bytes(), threads);
        std::vector<ReadItem>& items = regions.emplace_back();
        for (size_t i = 0; i < matrices.size(); ++i) {
            const int end = i + 1 < matrices.size() ? layout.items_before[i + 1] : layout.total;
            for (int item = layout.items_before[i]; item < end; ++item) {
                const int p0 = (item - layout.items_before[i]) * layout.panels_of_item[i];
                items.push_back({matrices[i], paired, p0, std::min(p0 + layout.panels_of_item[i], matrices[i]->panels())});
            }
        }
    };
    for (int l = 0; l < m.config().n_layers; ++l) {
        const FastModel::Layer& w = m.layer(l);
        add({&w.wq, &w.wk, &w.wv});
        add({&w.wo});
        add({&w.w1}, &w.w3);
        add({&w.w2});
    }
    add({&m.classifier()});
    return regions;
}

// Read bandwidth (bytes/s) of the model's own matrices read as decode reads them: each region of
// decode_read_regions in one parallel region of the model's pool, each item's panels summed by
// read_bandwidth_probe's loop (the packed bytes taken as floats: the sum means nothing, the
// reading is what counts), nothing between the regions. One value per pass over all of them;
// `bytes` per pass.
// Unlike the 1 GiB buffer, a small model's matrices (stories110M in Q4_0: 62 MB) may stay partly in
// the last-level cache from one pass to the next, as they do from one decoded token to the next:
// this probe then reads faster than read_bandwidth_probe, and so does decode.
// `bytes` counts every item's panels whole, while read_sum stops at its last whole step (32 floats
// in the AVX2 set, 64 in the AVX-512 set): an item's last partial step, under 0.3 % of the
// smallest item, is counted but not read, so the rate is at most that much too high.
struct RegionReadProbe {
    Stat bytes_per_s;
    std::int64_t bytes = 0;
};
inline RegionReadProbe region_read_probe(FastModel& m, int passes = 7) {
    ThreadPool& pool = m.pool();
    const Kernels& k = m.kernels();
    const auto regions = decode_read_regions(m, pool.size());
    RegionReadProbe probe;
    for (const auto& region : regions)
        for (const ReadItem& item : region)
            probe.bytes += (item.p1 - item.p0) * item.w->panel_bytes() * (item.paired ? 2 : 1);
    std::vector<float> sinks(static_cast<size_t>(pool.size()));
    auto read = [&](const PackedMatrix* w, int p0, int p1, int t) {
        const float* first = reinterpret_cast<const float*>(w->panel(p0));  // panels are 64-byte multiples
        sinks[static_cast<size_t>(t)] += k.read_sum(first, (p1 - p0) * w->panel_bytes() / 4);
    };
    std::vector<double> rates;
    for (int pass = -1; pass < passes; ++pass) {  // pass -1 warms up
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& region : regions) {
            auto job = [&](int i, int t) {
                const ReadItem& item = region[static_cast<size_t>(i)];
                read(item.w, item.p0, item.p1, t);
                if (item.paired) read(item.paired, item.p0, item.p1, t);
            };
            pool.run(static_cast<int>(region.size()), job);
        }
        if (pass >= 0) rates.push_back(static_cast<double>(probe.bytes) / seconds_since(t0));
    }
    volatile float keep_alive = sinks[0];  // the sums must look used, or the loop is deleted
    (void)keep_alive;
    probe.bytes_per_s = stat_of(rates);
    return probe;
}

// Peak fp32 FMA throughput (FLOP/s) of `threads` threads running the kernel set's own
// fused multiply-adds (12 independent chains; nothing else), one value per pass(); made once,
// like ReadProbe, so that a pass can sit beside each run of a benchmark.
class FmaProbe {
public:
    explicit FmaProbe(int threads, const Kernels& k = best_kernels())
        : kernels_(k), threads_(threads), pool_(threads), sinks_(static_cast<size_t>(threads)) {}
    ~FmaProbe() {
        volatile float keep_alive = sinks_[0];
        (void)keep_alive;
    }
    double pass() {
        const double flops_per_round = 2.0 * kProbeChains * kernels_.fma_lanes;
        // ≈ 7.7 GFLOP per thread per pass whatever the vector width (20M rounds of 16 lanes)
        const std::int64_t iterations = 20'000'000LL * 16 / kernels_.fma_lanes;
        auto job = [&](int piece, int t) {  // 10 pieces per thread
            // (a different start per piece, so the compiler cannot compute one and reuse it)
            sinks_[static_cast<size_t>(t)] += kernels_.fma_chains(iterations / 10, 0.01f * piece);
        };
        const auto t0 = std::chrono::steady_clock::now();
        pool_.run(10 * threads_, job);
        const double s = seconds_since(t0);
        return flops_per_round * static_cast<double>(iterations / 10 * 10) * threads_ / s;
    }

private:
    Kernels kernels_;  // a copy: best_kernels() returns one by value
    int threads_;
    ThreadPool pool_;
    std::vector<float> sinks_;
};

inline Stat fma_peak_probe(int threads, int passes = 7, const Kernels& k = best_kernels()) {
    FmaProbe probe(threads, k);
    std::vector<double> rates;
    for (int pass = 0; pass < passes; ++pass) rates.push_back(probe.pass());
    return stat_of(rates);
}

// FLOPs of prefilling n positions from an empty cache: 2 per weight per position for every
// layer matrix, 4·head_dim per (query head, visible key) pair for attention (scores + weighted
// sum), and the classifier once (only the last position's logits are computed).
inline double prefill_flops(const ModelConfig& c, int n) {
    const double d = c.dim, kv = c.kv_dim(), h = c.hidden_dim;
    const double per_layer_weights = 2 * d * d + 2 * kv * d + 3 * h * d;
    const double pairs = static_cast<double>(n) * (n + 1) / 2;  // Σ visible keys over positions
    return c.n_layers * (2 * per_layer_weights * n + 4.0 * c.n_heads * c.head_dim * pairs) +
           2.0 * c.vocab_size * d;
}

// The most decode can do with `batch` sequences sharing each step (continuous batching), from
// the two ceilings measured on this machine: a step reads every weight once whatever the batch
// (plus each sequence's cached K/V rows) and does `flops_per_token` for each sequence, so it
// takes at least the longer of the read time and the FMA time.
//   read_s = (weight_bytes + batch · kv_bytes_per_token) / read_bytes_per_s
//   fma_s  = batch · flops_per_token / fma_flops_per_s
//   tokens_per_s = batch / max(read_s, fma_s)
// At batch 1 the read is the limit; batching spreads it over more tokens until the FMAs take
// longer, so "batch B ÷ batch 1" can reach at most roofline(B) / roofline(1): with fp32 weights
// (4 bytes, 2 FLOPs each) that is about 2 · peak / bandwidth, e.g. 220 GFLOP/s over 64 GB/s ≈ 7x.
struct BatchRoofline {
    double read_s = 0, fma_s = 0;  // a step's two lower bounds, seconds
    double tokens_per_s = 0;       // batch / max(read_s, fma_s)
    bool fma_bound() const { return fma_s > read_s; }
};
inline BatchRoofline batch_decode_roofline(int batch, double weight_bytes, double kv_bytes_per_token,
                                           double flops_per_token, double read_bytes_per_s, double fma_flops_per_s) {
    if (batch < 1 || read_bytes_per_s <= 0 || fma_flops_per_s <= 0)
        fail("batch_decode_roofline needs batch >= 1 and positive ceilings, got batch ", batch, ", ",
             read_bytes_per_s, " B/s, ", fma_flops_per_s, " FLOP/s");
    BatchRoofline r;
    r.read_s = (weight_bytes + batch * kv_bytes_per_token) / read_bytes_per_s;
    r.fma_s = batch * flops_per_token / fma_flops_per_s;
    r.tokens_per_s = batch / std::max(r.read_s, r.fma_s);
    return r;
}

struct PhaseSpeeds {
    Stat prefill_tokens_per_s;
    Stat decode_tokens_per_s;
    std::vector<double> prefill_runs{}, decode_runs{};  // [runs] tokens/s, in the order they ran
};

// `runs` times: reset, prefill `prompt_len` ids, decode `gen` greedy tokens; one warm-up first.
// `between_runs`, if given, is called before the first timed run and after every timed run
// (runs + 1 calls): where the ceilings' probe passes go when each run is paired with its own
// (paired_ratios, below).
inline PhaseSpeeds measure_phases(Session& s, int prompt_len, int gen, int runs,
                                  const std::function<void()>& between_runs = {}) {
    const ModelConfig& c = s.config();
    if (prompt_len < 1 || gen < 1 || prompt_len + gen > c.seq_len)
        fail("prompt length ", prompt_len, " + generated ", gen, " must be ≥ 1 each and fit the context of ",
             c.seq_len);
    if (runs < 1) fail("runs must be ≥ 1, got ", runs);
    std::vector<int> prompt(static_cast<size_t>(prompt_len));
    for (int i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = 1 + (i * 7919) % (c.vocab_size - 1);
    auto argmax = [](std::span<const float> v) {
        return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
    };
    PhaseSpeeds speeds;
    for (int run = -1; run < runs; ++run) {  // run -1 warms up (page faults, caches, clocks)
        if (run == 0 && between_runs) between_runs();
        s.reset();
        auto t0 = std::chrono::steady_clock::now();
        int next = argmax(s.prefill(prompt));
        const double prefill_s = seconds_since(t0);
        t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < gen; ++i) next = argmax(s.decode(next));
        const double decode_s = seconds_since(t0);
        if (run >= 0) {
            speeds.prefill_runs.push_back(prompt_len / prefill_s);
            speeds.decode_runs.push_back(gen / decode_s);
            if (between_runs) between_runs();
        }
    }
    speeds.prefill_tokens_per_s = stat_of(speeds.prefill_runs);
    speeds.decode_tokens_per_s = stat_of(speeds.decode_runs);
    return speeds;
}

// Each run against the probe pass taken beside it, rather than a median of runs over a median of
// passes taken a minute later. On a shared VM the host slows the vCPUs in phases lasting seconds
// (RESULTS.md measured the read probe at 17-36 GB/s within one morning): a run and the pass next to
// it share the phase, so their ratio barely moves with it, where the unpaired ratio takes the
// phase of each side apart. With `fma_passes` and `read_passes` the values of measure_phases'
// runs + 1 between_runs calls (pass i just before run i, pass i + 1 just after it), run i's
// prefill is divided by the FMA pass just before it (prefill runs first) and its decode by the
// read pass just after it (decode runs last):
//   prefill_to_fma[i] = prefill_runs[i] · flops_per_prompt_token / fma_passes[i]
//   decode_to_read[i] = decode_runs[i] · bytes_per_decoded_token / read_passes[i + 1]
struct PairedRatios {
    Stat prefill_to_fma;
    Stat decode_to_read;
};
inline PairedRatios paired_ratios(const PhaseSpeeds& speeds, const std::vector<double>& fma_passes,
                                  const std::vector<double>& read_passes, double flops_per_prompt_token,
                                  double bytes_per_decoded_token) {
    const size_t runs = speeds.decode_runs.size();
    if (speeds.prefill_runs.size() != runs || fma_passes.size() != runs + 1 || read_passes.size() != runs + 1)
        fail("paired_ratios needs runs + 1 probe passes of each kind for ", runs, " runs, got ", fma_passes.size(),
             " FMA and ", read_passes.size(), " read passes");
    std::vector<double> to_fma, to_read;
    for (size_t i = 0; i < runs; ++i) {
        to_fma.push_back(speeds.prefill_runs[i] * flops_per_prompt_token / fma_passes[i]);
        to_read.push_back(speeds.decode_runs[i] * bytes_per_decoded_token / read_passes[i + 1]);
    }
    return {stat_of(to_fma), stat_of(to_read)};
}

}  // namespace glass::fast
