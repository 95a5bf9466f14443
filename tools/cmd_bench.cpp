// glass bench — prefill and decode speed of the fast CPU path, as medians of several runs.
//
//   glass bench -m FILE [--threads N] [--prompt-len P] [--gen N] [--runs R]
//               [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored] [--kv fp32|int8] [--activations fp32|int8]
//               [--kernels portable|avx2|avx512|neon] [--probes] [--json]
// (--weights is an older name for --precision, still accepted.)
// --probes also measures read bandwidth and FMA peak with the same threads and prints the
// ratios (decode: (weight bytes + the K/V bytes a step reads) × tokens/s ÷ bandwidth; prefill: FLOP/s ÷ FMA peak), each probe
// running the kernel set's own instructions; and the read of the model's matrices in decode's own
// parallel regions (benchmark.hpp), decode's second ratio; and each run against a probe pass taken
// beside it (paired_ratios: the figure a noisy VM moves least). --kernels forces a set, as
// GLASS_KERNELS does.
#include <thread>

#include "cli.hpp"
#include "glass/checkpoint.hpp"
#include "glass/formats/model_files.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_session.hpp"

namespace cli {

namespace {

// What the flags ask for, checked before the model is read.
struct BenchOptions {
    std::string model_path;
    int threads = 1, prompt_len = 128, gen = 32, runs = 5;
    glass::KvType kv = glass::KvType::fp32;
    bool int8_activations = false;
    std::string kernels;  // --kernels; "": the best set this CPU runs
};

BenchOptions bench_options_from_flags(const Flags& flags) {
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (!flags.has("-m")) throw UsageError("glass bench needs a model: -m FILE (glass random-model makes one)");
    BenchOptions o;
    o.model_path = flags.get("-m", "");
    o.threads = flags.number<int>("--threads").value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    o.prompt_len = flags.number<int>("--prompt-len").value_or(128);
    o.gen = flags.number<int>("--gen").value_or(32);
    o.runs = flags.number<int>("--runs").value_or(5);
    if (o.threads < 1 || o.threads > 256)
        throw UsageError("--threads must be in [1, 256], got " + std::to_string(o.threads));
    if (o.prompt_len < 1) throw UsageError("--prompt-len must be ≥ 1, got " + std::to_string(o.prompt_len));
    if (o.gen < 1) throw UsageError("--gen must be ≥ 1, got " + std::to_string(o.gen));
    if (o.runs < 5) throw UsageError("--runs must be ≥ 5 (medians need several runs), got " + std::to_string(o.runs));
    if (flags.has("--precision") && flags.has("--weights"))
        throw UsageError("--weights is another name for --precision: give one of them");
    o.kv = kv_from_flags(flags);
    // --activations int8 needs --precision q8 or q4 given (checked before the model is read).
    o.int8_activations = int8_activations_from_flags(flags, flags.get("--precision", flags.get("--weights", "")));
    o.kernels = flags.get("--kernels", "");
    return o;
}

// The measured speeds, and what they are divided by: bytes read per token, FLOPs per prompt.
struct BenchFigures {
    double pack_s = 0;
    glass::fast::PhaseSpeeds speeds{};
    double weight_bytes = 0;      // per decoded token
    double cache_bytes = 0;       // K/V read per decoded token, on average (decode_cache_bytes_per_token)
    double flops_per_prompt = 0;  // prefill of prompt_len tokens
    // --probes: one pass of each ceiling before the first run and after every run (measure_phases'
    // between_runs), for paired_ratios
    std::vector<double> fma_passes{}, read_passes{};
};

void print_bench_text(const BenchOptions& o, const glass::ModelConfig& c, const glass::fast::FastCpuSession& session,
                      const BenchFigures& f) {
    const auto& pf = f.speeds.prefill_tokens_per_s;
    const auto& dc = f.speeds.decode_tokens_per_s;
    std::printf("model %s: dim %d, hidden %d, %d layers, %d/%d heads, vocab %d | %s weights, %s kernels, "
                "%s dot products, %d threads (packed in %.1f s)\n",
                o.model_path.c_str(), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                c.vocab_size, session.panel_types().c_str(), session.kernel_name(), session.dot_products().c_str(),
                o.threads, f.pack_s);
    std::printf("prefill (%d tokens): %.1f tokens/s median [%.1f – %.1f] = %.1f GFLOP/s\n", o.prompt_len,
                pf.median, pf.min, pf.max, f.flops_per_prompt * pf.median / o.prompt_len / 1e9);
    std::printf("decode (%d tokens):  %.2f tokens/s median [%.2f – %.2f] = %.1f GB/s read (%.1f MB of weights + "
                "%.1f MB of K/V a token)\n",
                o.gen, dc.median, dc.min, dc.max, (f.weight_bytes + f.cache_bytes) * dc.median / 1e9,
                f.weight_bytes / 1e6, f.cache_bytes / 1e6);
}

nlohmann::json bench_json(const BenchOptions& o, glass::fast::WeightType weights, const glass::fast::FastCpuSession& session,
                          const BenchFigures& f) {
    const auto& pf = f.speeds.prefill_tokens_per_s;
    const auto& dc = f.speeds.decode_tokens_per_s;
    return {
        {"model", o.model_path}, {"threads", o.threads}, {"precision", glass::fast::to_string(weights)},
        {"panel_types", session.panel_types()}, {"kv", glass::to_string(o.kv)},
        {"kernels", session.kernel_name()}, {"isa", session.kernels().isa}, {"cpu", glass::fast::cpu_model_name()},
        {"cpu_flags", glass::fast::cpu_feature_list()}, {"dot_products", session.dot_products()}, {"prompt_len", o.prompt_len}, {"gen", o.gen}, {"runs", o.runs},
        {"prefill_tokens_per_s", pf.median}, {"prefill_tokens_per_s_range", {pf.min, pf.max}},
        {"decode_tokens_per_s", dc.median}, {"decode_tokens_per_s_range", {dc.min, dc.max}},
        {"weight_bytes_per_token", session.weight_bytes()},
        {"decode_weight_bytes_per_s", f.weight_bytes * dc.median},
        {"kv_bytes_read_per_token", f.cache_bytes},
        {"decode_bytes_per_s", (f.weight_bytes + f.cache_bytes) * dc.median},
        {"prefill_flops_per_s", f.flops_per_prompt * pf.median / o.prompt_len},
    };
}

// --probes: read bandwidth and FMA peak with the same threads and kernels, and the speeds as
// fractions of them; printed, and added to `j`.
// The regions' read (region_read_probe): the model's matrices read in decode's parallel regions,
// the ceiling of decode's structure on these threads, beside the plain read's.
void run_probes(const BenchOptions& o, glass::fast::FastCpuSession& session, const BenchFigures& f,
                nlohmann::json& j) {
    const auto bw = glass::fast::read_bandwidth_probe(o.threads, std::int64_t{1} << 30, 7, session.kernels());
    const auto regions = glass::fast::region_read_probe(session.fast_model()).bytes_per_s;
    const auto peak = glass::fast::fma_peak_probe(o.threads, 7, session.kernels());
    const double decode_bytes_per_token = f.weight_bytes + f.cache_bytes;
    const double decode_bytes_per_s = decode_bytes_per_token * f.speeds.decode_tokens_per_s.median;
    const double decode_ratio = decode_bytes_per_s / bw.median, region_ratio = decode_bytes_per_s / regions.median;
    const double prefill_ratio = f.flops_per_prompt * f.speeds.prefill_tokens_per_s.median / o.prompt_len / peak.median;
    const auto paired = glass::fast::paired_ratios(f.speeds, f.fma_passes, f.read_passes,
                                                   f.flops_per_prompt / o.prompt_len, decode_bytes_per_token);
    std::printf("probes (%d threads): read %.1f GB/s [%.1f – %.1f], in decode's regions %.1f GB/s [%.1f – %.1f], "
                "FMA peak %.1f GFLOP/s [%.1f – %.1f]\n",
                o.threads, bw.median / 1e9, bw.min / 1e9, bw.max / 1e9, regions.median / 1e9, regions.min / 1e9,
                regions.max / 1e9, peak.median / 1e9, peak.min / 1e9, peak.max / 1e9);
    std::printf("decode at %.0f %% of read bandwidth (%.0f %% of the read in its regions); prefill at %.0f %% of FMA peak\n",
                100 * decode_ratio, 100 * region_ratio, 100 * prefill_ratio);
    std::printf("each run against a probe pass beside it: decode at %.0f %% of read [%.0f – %.0f], "
                "prefill at %.0f %% of FMA peak [%.0f – %.0f]\n",
                100 * paired.decode_to_read.median, 100 * paired.decode_to_read.min, 100 * paired.decode_to_read.max,
                100 * paired.prefill_to_fma.median, 100 * paired.prefill_to_fma.min, 100 * paired.prefill_to_fma.max);
    j["read_bandwidth_bytes_per_s"] = bw.median;
    j["read_bandwidth_range"] = {bw.min, bw.max};
    j["region_read_bytes_per_s"] = regions.median;
    j["region_read_range"] = {regions.min, regions.max};
    j["decode_region_ratio"] = region_ratio;
    j["fma_peak_flops_per_s"] = peak.median;
    j["fma_peak_range"] = {peak.min, peak.max};
    j["decode_bandwidth_ratio"] = decode_ratio;
    j["prefill_fma_ratio"] = prefill_ratio;
    j["decode_bandwidth_ratio_paired"] = paired.decode_to_read.median;
    j["decode_bandwidth_ratio_paired_range"] = {paired.decode_to_read.min, paired.decode_to_read.max};
    j["prefill_fma_ratio_paired"] = paired.prefill_to_fma.median;
    j["prefill_fma_ratio_paired_range"] = {paired.prefill_to_fma.min, paired.prefill_to_fma.max};
    j["decode_runs_tokens_per_s"] = f.speeds.decode_runs;
    j["prefill_runs_tokens_per_s"] = f.speeds.prefill_runs;
    j["read_passes_bytes_per_s"] = f.read_passes;
    j["fma_passes_flops_per_s"] = f.fma_passes;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    Flags flags("bench", {{"-m", true}, {"--threads", true}, {"--prompt-len", true}, {"--gen", true},
                          {"--runs", true}, {"--precision", true}, {"--weights", true}, {"--kv", true}, {"--activations", true},
                          {"--kernels", true}, {"--probes", false}, {"--json", false}, {"--context", true}});
    flags.parse(argc, argv, 2);
    const BenchOptions o = bench_options_from_flags(flags);

    glass::Model model = glass::load_model(o.model_path, glass::LoadWeights::as_stored);  // llama2.c, GGUF or a folder
    context_from_flags(flags, model);
    // No --precision: the type the file stores its matrices in (fp32 for llama2.c).
    const std::string stored = glass::fast::to_string(glass::fast::stored_weight_type(model));
    const std::string precision = flags.get("--precision", flags.get("--weights", stored));
    const auto weights = glass::fast::weight_type_from_string(precision);
    const glass::ModelConfig& c = model.config;
    if (o.prompt_len + o.gen > c.seq_len)
        glass::fail("--prompt-len ", o.prompt_len, " + --gen ", o.gen, " exceeds the context window of ", c.seq_len);

    const auto t0 = std::chrono::steady_clock::now();
    const glass::fast::FastOptions options{.threads = o.threads, .weights = weights, .prefill_chunk = 512, .kv = o.kv,
                                           .int8_activations = o.int8_activations, .kernels = o.kernels};
    glass::fast::FastCpuSession session(model, options);
    BenchFigures f{.pack_s = glass::fast::seconds_since(t0)};
    if (flags.has("--probes")) {  // a pass of each ceiling beside every run (paired_ratios)
        glass::fast::ReadProbe read(o.threads, std::int64_t{1} << 30, session.kernels());
        glass::fast::FmaProbe fma(o.threads, session.kernels());
        f.speeds = glass::fast::measure_phases(session, o.prompt_len, o.gen, o.runs, [&] {
            f.read_passes.push_back(read.pass());  // just after the last run's decode
            f.fma_passes.push_back(fma.pass());    // just before the next run's prefill
        });
    } else {
        f.speeds = glass::fast::measure_phases(session, o.prompt_len, o.gen, o.runs);
    }
    f.weight_bytes = static_cast<double>(session.weight_bytes());
    f.cache_bytes = glass::fast::decode_cache_bytes_per_token(c, o.kv, o.prompt_len, o.gen);
    f.flops_per_prompt = glass::fast::prefill_flops(c, o.prompt_len);

    print_bench_text(o, c, session, f);
    nlohmann::json j = bench_json(o, weights, session, f);
    if (flags.has("--probes")) run_probes(o, session, f, j);
    if (flags.has("--json")) std::printf("%s\n", dump(j).c_str());
    return 0;
}

}  // namespace cli
