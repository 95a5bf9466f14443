// glass serve-bench — the serving engine under load, and the figures C16, C17, C18, C20, each
// measured beside its baseline in the same command (bench/measure/serve_measure.hpp does the measuring).
//
//   glass serve-bench (-m FILE | --shape NAME [--context N]) [--backend fast|reference]
//       [--threads N] [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored] [--kv fp32|int8]
//       [--requests N] [--rate R] [--prompt-len A:B] [--gen A:B] [--shared-prefix T]
//       [--block-size B] [--pool-blocks N] [--budget T] [--max-running N]
//       [--no-prefix-cache] [--no-chunked-prefill] [--seed S]
//       [--batch-sweep [--unpaired]] [--chat-turns N] [--stall] [--long-prompt N] [--decoders N] [--json]
//       [--draft layers:N|ngram[:N]|MODEL [--draft-k K]]
//       [--tp N] [--pp N] [--micro-batches M] [--rank-memory BYTES]   (the backend split over ranks)
//       [--disaggregate D:P | --role decode|prefill]   (disaggregated prefill/decode beside the combined engine)
//
// Without -m, --shape builds a model of that shape with random weights in memory (speed depends
// on shapes, not on what the weights say); --context sets its context window.
#include <charconv>
#include <functional>
#include <map>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>

#include "cli.hpp"
#include "disaggregation_setup.hpp"
#include "serve_setup.hpp"
#include "glass/glass.hpp"
#include "serve_measure.hpp"  // the benchmarks' harness (bench/measure/)

namespace cli {

namespace {

std::pair<int, int> range_flag(const Flags& flags, const std::string& name, std::pair<int, int> fallback) {
    if (!flags.has(name)) return fallback;
    const std::string v = flags.get(name, "");
    const size_t colon = v.find(':');
    int a = 0, b = 0;
    const auto parse = [&](const std::string& s, int& out) {
        const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
    };
    const bool ok = colon == std::string::npos ? parse(v, a) && (b = a, true)
                                               : parse(v.substr(0, colon), a) && parse(v.substr(colon + 1), b);
    if (!ok || a < 1 || b < a) throw UsageError(name + " must be A:B with 1 <= A <= B (or one number), got '" + v + "'");
    return {a, b};
}

// The measuring flags: the load run's spec, and the sizes of the C16 and C18 experiments.
struct Measures {
    serve_measure::LoadSpec load;
    int chat_turns = 0;      // C16: --chat-turns
    int long_prompt = 2000;  // C18: --long-prompt
    int decoders = 8;        // C18: --decoders
};

Measures measures_from_flags(const Flags& flags) {
    Measures m;
    serve_measure::LoadSpec& load = m.load;
    load.requests = flags.number<int>("--requests").value_or(32);
    load.rate_per_s = flags.number<double>("--rate").value_or(4.0);
    std::tie(load.prompt_min, load.prompt_max) = range_flag(flags, "--prompt-len", {16, 128});
    std::tie(load.gen_min, load.gen_max) = range_flag(flags, "--gen", {16, 64});
    load.shared_prefix = flags.number<int>("--shared-prefix").value_or(0);
    load.seed = flags.number<std::uint64_t>("--seed").value_or(1);
    if (load.requests < 1) throw UsageError("--requests must be >= 1, got " + std::to_string(load.requests));
    m.chat_turns = flags.number<int>("--chat-turns").value_or(0);
    m.long_prompt = flags.number<int>("--long-prompt").value_or(2000);
    m.decoders = flags.number<int>("--decoders").value_or(8);
    if (m.chat_turns < 0) throw UsageError("--chat-turns must be >= 0, got " + std::to_string(m.chat_turns));
    if (flags.has("--unpaired") && !flags.has("--batch-sweep"))
        throw UsageError("--unpaired belongs to --batch-sweep (it leaves out the sweep's paired speedups)");
    return m;
}

// What every experiment runs on.
struct Bench {
    const glass::ModelConfig& c;
    glass::serve::PagedBackend& backend;
    const glass::Tokenizer& tok;
    const glass::serve::EngineOptions& eo;  // with the draft, when --draft
    const BackendChoice& choice;
    // A second backend of the same model (C20's paired speedups step a batch of one on it beside
    // the batch on `backend`); empty where the backend cannot be made twice (--tp/--pp, --role)
    // or with --unpaired.
    std::function<std::unique_ptr<glass::serve::PagedBackend>()> another_backend{};
};

// The first line (the model, the backend, the engine's options) and the JSON's fields for it.
nlohmann::json describe_setup(const Bench& b, const std::string& model_name, const std::string& precision,
                              glass::KvType kv) {
    const glass::ModelConfig& c = b.c;
    const glass::serve::EngineOptions& eo = b.eo;
    const bool fast = b.choice.name == "fast", cuda = b.choice.name == "cuda";
    const std::string details = backend_words(b.choice, precision);
    std::printf("model %s: dim %d, %d layers, vocab %d | backend %s%s, KV %s | block %d, budget %d, prefix cache %s, chunked prefill %s\n",
                model_name.c_str(), c.dim, c.n_layers, c.vocab_size, b.choice.name.c_str(), details.c_str(),
                glass::to_string(kv), eo.block_size, eo.scheduler.max_tokens_per_step, eo.prefix_caching ? "on" : "off",
                eo.scheduler.chunked_prefill ? "on" : "off");
    const glass::fast::Kernels kernels = glass::fast::best_kernels();  // what the fast backend runs
    nlohmann::json j = {{"model", model_name}, {"backend", b.choice.name},
                        {"kernels", fast ? kernels.name : cuda ? "cuda" : "eigen"},
                        {"isa", fast ? kernels.isa : cuda ? "cuda" : Eigen::SimdInstructionSetsInUse()},
                        {"cpu", glass::fast::cpu_model_name()}, {"cpu_flags", glass::fast::cpu_feature_list()}, {"block_size", eo.block_size},
                        {"budget", eo.scheduler.max_tokens_per_step}, {"prefix_cache", eo.prefix_caching},
                        {"chunked_prefill", eo.scheduler.chunked_prefill}, {"kv", glass::to_string(kv)},
                        {"kv_bytes_per_token", glass::kv_bytes_per_token(c, kv)}};
    if (fast) j["threads"] = b.choice.threads;
    if (fast || cuda) j["precision"] = precision;
    if (b.choice.on_grid) {  // --tp/--pp: the backend over a grid of ranks (this is rank 0)
        std::printf("ranks: tp %d × pp %d, %d micro-batch(es) per step\n", b.choice.grid.tp, b.choice.grid.pp,
                    b.choice.grid_options.micro_batches);
        j.update({{"tp", b.choice.grid.tp}, {"pp", b.choice.grid.pp}, {"micro_batches", b.choice.grid_options.micro_batches}});
    }
    return j;
}

// The load run (always): throughput, latency percentiles, C17's memory.
serve_measure::LoadResult load_run(const Bench& b, const serve_measure::LoadSpec& load, nlohmann::json& j) {
    glass::serve::Engine engine(b.backend, b.tok, b.eo);
    const serve_measure::LoadResult r = serve_measure::run_load(engine, load);
    const double waste = r.kv_reserved_bytes > 0 ? 1.0 - static_cast<double>(r.kv_used_bytes) / r.kv_reserved_bytes : 0.0;
    std::printf("load: %d requests at %.2f/s, prompts %d:%d, gen %d:%d -> %.1f tokens/s over %.2f s (%d steps)\n",
                r.requests, load.rate_per_s, load.prompt_min, load.prompt_max, load.gen_min, load.gen_max,
                r.throughput_tokens_per_s, r.wall_s, r.steps);
    std::printf("      TTFT p50 %.1f ms p99 %.1f ms | TPOT p50 %.2f ms p99 %.2f ms | largest gap %.1f ms | prefix hits %d tokens\n",
                r.ttft_ms_p50, r.ttft_ms_p99, r.tpot_ms_p50, r.tpot_ms_p99, r.max_gap_ms, r.prefix_hit_tokens);
    std::printf("C17 KV memory at the busiest step: %.2f MB held in blocks, %.2f MB used (%.1f%% reserved but unused); "
                "one context each for those %d requests: %.2f MB\n",
                r.kv_reserved_bytes / 1e6, r.kv_used_bytes / 1e6, 100.0 * waste, r.peak_running,
                r.max_length_reserved_bytes / 1e6);
    std::printf("C17 requests at once in this pool: %d held (paged), %d with one context window each\n",
                r.peak_running, r.max_length_fit);
    j.update({{"requests", r.requests}, {"rate", load.rate_per_s}, {"throughput_tokens_per_s", r.throughput_tokens_per_s},
              {"ttft_ms_p50", r.ttft_ms_p50}, {"ttft_ms_p99", r.ttft_ms_p99}, {"tpot_ms_p50", r.tpot_ms_p50},
              {"tpot_ms_p99", r.tpot_ms_p99}, {"max_gap_ms", r.max_gap_ms}, {"kv_reserved_bytes", r.kv_reserved_bytes},
              {"kv_used_bytes", r.kv_used_bytes}, {"kv_waste_fraction", waste},
              {"max_length_reserved_bytes", r.max_length_reserved_bytes}, {"peak_running", r.peak_running},
              {"max_length_fit", r.max_length_fit}, {"prefix_hit_tokens", r.prefix_hit_tokens},
              {"generated_tokens", r.generated_tokens}, {"wall_s", r.wall_s}});
    return r;
}

// C15 in the engine: the same load without the draft (options `plain`), beside the run with it (`r`).
void draft_comparison(const Bench& b, const glass::serve::EngineOptions& plain, const serve_measure::LoadSpec& load,
                      const serve_measure::LoadResult& r, const std::string& draft_spec, nlohmann::json& j) {
    glass::serve::Engine plain_engine(b.backend, b.tok, plain);
    const serve_measure::LoadResult p = serve_measure::run_load(plain_engine, load);
    const double rate = r.draft_proposed > 0 ? static_cast<double>(r.draft_accepted) / r.draft_proposed : 0.0;
    std::printf("C15 draft %s, k %d: %lld of %lld drafted tokens accepted (%.1f%%); %d steps vs %d without; "
                "%.1f vs %.1f tokens/s (%.2fx); TPOT p50 %.2f vs %.2f ms\n",
                draft_spec.c_str(), b.eo.draft_k, static_cast<long long>(r.draft_accepted),
                static_cast<long long>(r.draft_proposed), 100.0 * rate, r.steps, p.steps,
                r.throughput_tokens_per_s, p.throughput_tokens_per_s,
                p.throughput_tokens_per_s > 0 ? r.throughput_tokens_per_s / p.throughput_tokens_per_s : 0.0,
                r.tpot_ms_p50, p.tpot_ms_p50);
    j.update({{"draft", draft_spec}, {"draft_k", b.eo.draft_k}, {"draft_proposed", r.draft_proposed},
              {"draft_accepted", r.draft_accepted}, {"acceptance_rate", rate}, {"steps", r.steps},
              {"steps_without_draft", p.steps}, {"throughput_tokens_per_s_without_draft", p.throughput_tokens_per_s},
              {"tpot_ms_p50_without_draft", p.tpot_ms_p50}});
}

// C20: decode throughput by batch size (from each batch's median step: measure_decode_batch),
// against the FMA peak measured now. On the fast backend,
// also against the roofline of each batch (batch_decode_roofline: the longer of reading every
// weight once and doing every sequence's FMAs, from the read and FMA probes of this run), so
// "batch B ÷ batch 1" can be read against the most this machine allows. Where a second backend can
// be made, "batch B ÷ batch 1" is also measured paired (measure_batch_speedup: a step of batch 1,
// then one of batch B, in turn), the figure a shared machine's slow phases move least.
void print_and_add_paired(const serve_measure::BatchSpeedup& s, nlohmann::json& point) {
    std::printf("  | paired %5.2fx [%.2f – %.2f]", s.speedup.median, s.speedup.min, s.speedup.max);
    point.update({{"speedup_paired", s.speedup.median}, {"speedup_paired_range", {s.speedup.min, s.speedup.max}},
                  {"paired_single_step_ms", s.single_ms}, {"paired_batched_step_ms", s.batched_ms}});
}

void batch_sweep(const Bench& b, nlohmann::json& j) {
    const bool fast = b.choice.name == "fast";
    const int threads = fast ? b.choice.threads : 1;
    const double peak = glass::fast::fma_peak_probe(threads).median;
    const double bandwidth = fast ? glass::fast::read_bandwidth_probe(threads).median : 0;
    const double flops_per_token = glass::fast::prefill_flops(b.c, 1);  // 2 per weight (+ a little attention)
    const double weight_bytes = static_cast<double>(b.backend.weight_bytes());
    constexpr int kPrompt = 16;  // measure_decode_batch's prompts; its warm-up decodes position 16, then it times 17 ..
    constexpr int kPairs = 10;   // measure_batch_speedup's pairs of steps
    const std::unique_ptr<glass::serve::PagedBackend> single = b.another_backend ? b.another_backend() : nullptr;
    nlohmann::json sweep = nlohmann::json::array();
    double base = 0, roofline_base = 0;
    std::printf("C20 decode throughput by batch (FMA peak %.1f GFLOP/s", peak / 1e9);
    if (fast) std::printf(", read %.1f GB/s, %.1f MB of weights a step", bandwidth / 1e9, weight_bytes / 1e6);
    std::printf("):\n");
    for (int batch = 1; batch <= 64; batch *= 2) {
        if (batch * 24 > b.c.seq_len * 64) break;
        const int steps = batch >= 16 ? 6 : 10;
        const serve_measure::BatchPoint p = serve_measure::measure_decode_batch(b.backend, b.tok, batch, steps, kPrompt);
        if (batch == 1) base = p.decode_tokens_per_s;
        const double of_peak = p.decode_tokens_per_s * flops_per_token / peak;
        std::printf("  batch %2d: %9.1f tokens/s  %5.2fx batch 1  %5.1f%% of FMA peak  (%.1f ms/step, mean %.1f)", batch,
                    p.decode_tokens_per_s, p.decode_tokens_per_s / base, 100.0 * of_peak, p.step_ms, p.mean_step_ms);
        nlohmann::json point = {{"batch", batch}, {"decode_tokens_per_s", p.decode_tokens_per_s}, {"step_ms", p.step_ms},
                                {"mean_step_ms", p.mean_step_ms}, {"min_step_ms", p.min_step_ms},
                                {"max_step_ms", p.max_step_ms}, {"fraction_of_fma_peak", of_peak}};
        if (single && batch > 1)
            print_and_add_paired(serve_measure::measure_batch_speedup(*single, b.backend, b.tok, batch, kPairs, kPrompt), point);
        if (fast) {
            const double kv = glass::fast::decode_cache_bytes_per_token(b.c, b.backend.kv_type(), kPrompt + 1, steps);
            const glass::fast::BatchRoofline r =
                glass::fast::batch_decode_roofline(batch, weight_bytes, kv, flops_per_token, bandwidth, peak);
            if (batch == 1) roofline_base = r.tokens_per_s;
            std::printf("  | roofline %9.1f (%s-bound, %5.2fx batch 1), %5.1f%% of it", r.tokens_per_s,
                        r.fma_bound() ? "FMA" : "read", r.tokens_per_s / roofline_base,
                        100.0 * p.decode_tokens_per_s / r.tokens_per_s);
            point.update({{"kv_bytes_read_per_token", kv}, {"roofline_tokens_per_s", r.tokens_per_s},
                          {"roofline_bound", r.fma_bound() ? "fma" : "read"},
                          {"roofline_ratio_to_batch_1", r.tokens_per_s / roofline_base},
                          {"fraction_of_roofline", p.decode_tokens_per_s / r.tokens_per_s}});
        }
        std::printf("\n");
        sweep.push_back(point);
    }
    j["batch_sweep"] = sweep;
    j["fma_peak_gflops"] = peak / 1e9;
    if (fast)
        j.update({{"read_bandwidth_gbps", bandwidth / 1e9}, {"weight_bytes_per_step", weight_bytes},
                  {"flops_per_token", flops_per_token}});
}

// C16: a chat re-sending its history, TTFT per turn with and without prefix caching.
nlohmann::json chat_turns(const Bench& b, int turns_n, std::uint64_t seed) {
    const int per_turn = std::max(2, (b.c.seq_len - 1) / turns_n);
    const int user = per_turn * 2 / 3, reply = per_turn - user;
    nlohmann::json turns = nlohmann::json::array();
    glass::serve::EngineOptions on = b.eo, off = b.eo;
    on.prefix_caching = true;
    off.prefix_caching = false;
    const auto with = serve_measure::measure_chat(b.backend, b.tok, on, turns_n, user, reply, seed);
    const auto without = serve_measure::measure_chat(b.backend, b.tok, off, turns_n, user, reply, seed);
    std::printf("C16 chat of %d turns (%d user + %d reply tokens each), TTFT per turn:\n", turns_n, user, reply);
    for (size_t t = 0; t < with.size(); ++t) {
        std::printf("  turn %zu: %5d prompt tokens | cache off %8.1f ms | cache on %8.1f ms (%d cached) | %.2fx\n", t + 1,
                    with[t].prompt_tokens, without[t].ttft_ms, with[t].ttft_ms, with[t].cached_tokens,
                    with[t].ttft_ms / without[t].ttft_ms);
        turns.push_back({{"turn", t + 1}, {"prompt_tokens", with[t].prompt_tokens}, {"ttft_ms_cache_off", without[t].ttft_ms},
                         {"ttft_ms_cache_on", with[t].ttft_ms}, {"cached_tokens", with[t].cached_tokens}});
    }
    return turns;
}

// C18: decoders' largest gap while a long prompt arrives, chunked prefill off vs on.
nlohmann::json stall(const Bench& b, int decoders, int long_prompt) {
    if (long_prompt + 8 > b.c.seq_len)
        glass::fail("--long-prompt ", long_prompt, " does not fit the context window of ", b.c.seq_len, " (use --context)");
    glass::serve::EngineOptions chunked = b.eo, whole = b.eo;
    chunked.scheduler.chunked_prefill = true;
    whole.scheduler.chunked_prefill = false;
    const auto off = serve_measure::measure_stall(b.backend, b.tok, whole, decoders, long_prompt);
    const auto on = serve_measure::measure_stall(b.backend, b.tok, chunked, decoders, long_prompt);
    std::printf("C18 %d decoders while a %d-token prompt arrives (budget %d):\n", decoders, long_prompt,
                b.eo.scheduler.max_tokens_per_step);
    std::printf("  chunked prefill off: largest gap %8.1f ms, mean %.1f ms, %8.1f tokens/s, long prompt TTFT %.1f ms\n",
                off.max_gap_ms, off.mean_gap_ms, off.throughput_tokens_per_s, off.long_prompt_ttft_ms);
    std::printf("  chunked prefill on:  largest gap %8.1f ms, mean %.1f ms, %8.1f tokens/s, long prompt TTFT %.1f ms\n",
                on.max_gap_ms, on.mean_gap_ms, on.throughput_tokens_per_s, on.long_prompt_ttft_ms);
    std::printf("  gap ratio %.2f, throughput ratio %.2f\n", on.max_gap_ms / off.max_gap_ms,
                on.throughput_tokens_per_s / off.throughput_tokens_per_s);
    return {{"decoders", decoders}, {"long_prompt", long_prompt},
            {"max_gap_ms_unchunked", off.max_gap_ms}, {"max_gap_ms_chunked", on.max_gap_ms},
            {"throughput_unchunked", off.throughput_tokens_per_s}, {"throughput_chunked", on.throughput_tokens_per_s}};
}

// Disaggregated prefill/decode under a mixed load: `decoders` requests decode while a long prompt
// arrives, on the combined engine (b: chunked prefill, every thread of --threads) and on an engine
// whose prompts a prefill worker computes (`decode`, with `remote`: --disaggregate's threads, or
// rank 1 with --role). The decoders' time per token, and the long prompt's TTFT.
nlohmann::json disaggregated_stall(const Bench& b, glass::serve::PagedBackend& decode, const glass::serve::EngineOptions& remote,
                                   const std::string& worker, int decoders, int long_prompt) {
    if (long_prompt + 8 > b.c.seq_len)
        glass::fail("--long-prompt ", long_prompt, " does not fit the context window of ", b.c.seq_len, " (use --context)");
    glass::serve::EngineOptions combined = b.eo;
    combined.scheduler.chunked_prefill = true;
    // Each twice, the second measured: the first maps the pools' pages (a fresh pool's first
    // touch of 73 MB costs tens of ms) on both sides, as a server that has been up a while has.
    const auto twice = [&](glass::serve::PagedBackend& backend, const glass::serve::EngineOptions& eo) {
        serve_measure::measure_stall(backend, b.tok, eo, decoders, long_prompt);
        return serve_measure::measure_stall(backend, b.tok, eo, decoders, long_prompt);
    };
    const auto together = twice(b.backend, combined);
    const auto apart = twice(decode, remote);
    std::printf("disaggregated prefill/decode: %d decoders while a %d-token prompt arrives (budget %d; warm pools):\n",
                decoders, long_prompt, b.eo.scheduler.max_tokens_per_step);
    const auto row = [](const char* name, const serve_measure::StallResult& r) {
        std::printf("  %-34s decoders' TPOT p50 %7.2f ms, p99 %7.2f ms, largest gap %7.1f ms | long prompt TTFT %8.1f ms\n",
                    name, r.p50_gap_ms, r.p99_gap_ms, r.max_gap_ms, r.long_prompt_ttft_ms);
    };
    row("combined (chunked prefill):", together);
    row(("disaggregated (" + worker + "):").c_str(), apart);
    std::printf("  p99 TPOT ratio (disaggregated / combined) %.2f; KV shipped per prompt token: %lld bytes\n",
                apart.p99_gap_ms / together.p99_gap_ms,
                static_cast<long long>(glass::kv_bytes_per_token(b.c, decode.kv_type())));
    const auto fields = [](const serve_measure::StallResult& r) {
        return nlohmann::json{{"tpot_ms_p50", r.p50_gap_ms}, {"tpot_ms_p99", r.p99_gap_ms}, {"max_gap_ms", r.max_gap_ms},
                              {"long_prompt_ttft_ms", r.long_prompt_ttft_ms}};
    };
    return {{"decoders", decoders}, {"long_prompt", long_prompt}, {"worker", worker}, {"combined", fields(together)},
            {"disaggregated", fields(apart)}, {"kv_bytes_per_token", glass::kv_bytes_per_token(b.c, decode.kv_type())}};
}

// The experiments on `b`, each beside its baseline; `disaggregated` (when given) adds the
// disaggregated run beside the combined one.
void run_experiments(const Bench& b, const Flags& flags, const Measures& m, const glass::serve::EngineOptions& plain,
                     nlohmann::json& j, const std::function<void(const Bench&, nlohmann::json&)>& disaggregated) {
    const serve_measure::LoadResult r = load_run(b, m.load, j);
    if (flags.has("--draft")) draft_comparison(b, plain, m.load, r, flags.get("--draft", ""), j);
    if (flags.has("--batch-sweep")) batch_sweep(b, j);
    if (m.chat_turns > 0) j["chat"] = chat_turns(b, m.chat_turns, m.load.seed);
    if (flags.has("--stall")) j["stall"] = stall(b, m.decoders, m.long_prompt);
    if (disaggregated) disaggregated(b, j);
    if (flags.has("--json")) std::printf("%s\n", dump(j).c_str());
}

}  // namespace

int cmd_serve_bench(int argc, char** argv) {
    std::map<std::string, bool> own = {{"--requests", true},    {"--rate", true},       {"--prompt-len", true},
                                       {"--gen", true},         {"--shared-prefix", true}, {"--seed", true},
                                       {"--batch-sweep", false}, {"--unpaired", false}, {"--chat-turns", true}, {"--stall", false},
                                       {"--long-prompt", true}, {"--decoders", true},   {"--json", false}};
    add_disaggregation_flags(own);
    Flags flags("serve-bench", with_engine_flags(own));
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    if (flags.has("-m") == flags.has("--shape"))
        throw UsageError("glass serve-bench needs a model: -m FILE, or --shape stories15M|stories110M|tinyllama1b");
    const BackendChoice choice = backend_from_flags(flags);
    const Disaggregation dis = disaggregation_from_flags(flags, choice, /*threads_too=*/true);
    glass::serve::EngineOptions eo = engine_options_from_flags(flags);
    const Measures m = measures_from_flags(flags);

    // The model: a file, or a shape with random weights made here; a stand-in vocabulary.
    const glass::Model model = model_from_flags(flags, choice, flags.get("-m", ""), m.load.seed);
    const std::string model_name = flags.has("-m") ? flags.get("-m", "")
                                                   : flags.get("--shape", "") + " (random weights, context " +
                                                         std::to_string(model.config.seq_len) + ")";
    const glass::NumberTokenizer tok(model.config.vocab_size);
    const std::string precision = precision_from_flags(flags, model);
    const glass::fast::FastOptions fast_options = fast_options_from_flags(flags, choice, precision);
    const glass::serve::EngineOptions plain = eo;  // for the C15 comparison
    std::vector<std::unique_ptr<glass::Model>> draft_models;
    engine_draft_from_flags(flags, choice.name, model, fast_options, draft_models, eo);  // --draft

    // The experiments, each beside its baseline (with --tp/--pp: at rank 0 of the group).
    // --role: at rank 0, its own backend for the combined runs, rank 1 as the prefill worker of
    // the disaggregated one; --disaggregate: the combined runs on --threads, then a decode
    // backend and a prefill worker with D and P threads.
    glass::serve::EngineOptions remote = eo;
    const auto bench_on = [&](glass::serve::PagedBackend& backend, const std::function<void(const Bench&, nlohmann::json&)>& dis_run) {
        Bench b{.c = model.config, .backend = backend, .tok = tok, .eo = eo, .choice = choice};
        // The paired speedups hold a second copy of the weights while the sweep runs; --unpaired
        // does without them where memory is short.
        if (!choice.on_grid && !dis.two_sides() && !flags.has("--unpaired"))
            b.another_backend = [&] { return make_paged_backend(choice.name, model, fast_options); };
        nlohmann::json j = describe_setup(b, model_name, precision, fast_options.kv);
        run_experiments(b, flags, m, plain, j, dis_run);
    };
    if (dis.two_sides()) {  // --role, or --disaggregate with a grid: the combined runs on the decode side's backend
        const std::string worker = dis.side_ranks == 1 ? "prefill rank 1" : "prefill ranks " + std::to_string(dis.side_ranks) + "-" +
                                                                                 std::to_string(2 * dis.side_ranks - 1);
        with_prefill_rank(dis, choice, model, fast_options, remote, [&](glass::serve::PagedBackend& backend) {
            bench_on(backend, [&](const Bench& b, nlohmann::json& j) {
                j["disaggregation"] = disaggregated_stall(b, backend, remote, worker, m.decoders, m.long_prompt);
            });
        });
        return 0;
    }
    with_paged_backend(choice, model, fast_options, [&](glass::serve::PagedBackend& backend) {
        if (!dis.in_process()) return bench_on(backend, {});
        bench_on(backend, [&](const Bench& b, nlohmann::json& j) {
            with_thread_prefill(dis, choice, model, fast_options, remote, [&](glass::serve::PagedBackend& decode) {
                const std::string worker = "decode " + std::to_string(dis.decode_threads) + " + prefill worker " +
                                           std::to_string(dis.prefill_threads) + " threads";
                j["disaggregation"] = disaggregated_stall(b, decode, remote, worker, m.decoders, m.long_prompt);
            });
        });
    });
    return 0;
}

}  // namespace cli
