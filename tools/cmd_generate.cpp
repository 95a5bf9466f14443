// glass generate — the main job: prompt in, streamed text and timings out.
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "draft_setup.hpp"
#include "glass/fast/benchmark.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/glass.hpp"
#include "parallel_setup.hpp"
#ifdef GLASS_HAVE_CUDA
#include "cuda_session.hpp"
#endif

namespace cli {

namespace {

// The backend behind the one generate loop:
//   --device cpu (default)                the plain reference (transformer.hpp)
//   --device cpu --threads N / --precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored
//                                         the fast CPU path (fast/fast_session.hpp); without
//                                         --precision, the type the model's file stores
//   --device cuda [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k] [--cuda-graph]
//                 [--cuda-attention standard|flash]
//                                         the GPU (cuda/); --cuda-graph replays each decode step
//                                         as one CUDA graph; flash: FlashAttention for prefill and
//                                         (from 1,024 cached keys) split-K decode
//   --kv fp32|int8                        how the KV cache stores keys and values (kv_cache.hpp;
//                                         CPU and CUDA alike)
//   --activations fp32|int8 (CPU)         decode's inputs in int8 blocks, integer dot products
//                                         (integer weights: q8, q4, the k-quants)
//   --tp N (CPU)                          every layer split over N ranks (dist/tensor_parallel.hpp)
//   --pp N (CPU)                          the layers dealt out to N ranks (dist/pipeline_parallel.hpp)
//                                         both: a grid of tp × pp ranks, processes under mpirun,
//                                         else threads; the reference split (dist/parallel_session.hpp),
//                                         or with --threads/--precision each rank's part on the fast
//                                         path (--threads per rank; dist/fast_rank_part.hpp, the
//                                         sequence run by the split serving backend)
//   --rank-memory BYTES (CPU)             what one rank may hold (its weights + its KV cache): a
//                                         model over the cap is refused on one rank, runs on two
struct Backend {
    std::string device = "cpu";  // cpu or cuda
    std::string precision;       // "": the file's own type (fast CPU path), fp32 (CUDA)
    std::optional<int> threads;  // --threads: the fast CPU path
    bool cuda_graph = false, cuda_flash = false;
    glass::KvType kv = glass::KvType::fp32;
    bool int8_activations = false;
    int tp = 1;  // --tp: ranks of a tensor-parallel group
    int pp = 1;  // --pp: stages of a pipeline
    std::int64_t rank_memory = 0;  // --rank-memory: bytes one rank may hold; 0: no cap
    bool on_grid = false;          // any of the three: split over ranks (the reference, or fast_cpu())

    // Whether --device cpu means the fast CPU path rather than the plain reference.
    bool fast_cpu() const { return device == "cpu" && (threads || !precision.empty() || int8_activations); }
};

std::unique_ptr<glass::Session> make_session(const Backend& b, const glass::Model& model) {
    if (b.device == "cpu" && !b.fast_cpu()) return std::make_unique<glass::CpuSession>(model, b.kv);
    if (b.device == "cpu") {
        // No --precision: the type the file stores its matrices in (Q4_0 -> q4, BF16 -> bf16, ...).
        const glass::fast::FastOptions options{
            .threads = b.threads.value_or(1),
            .weights = b.precision.empty() ? glass::fast::stored_weight_type(model)
                                           : glass::fast::weight_type_from_string(b.precision),
            .kv = b.kv,
            .int8_activations = b.int8_activations};
        return std::make_unique<glass::fast::FastCpuSession>(model, options);
    }
#ifdef GLASS_HAVE_CUDA
    const glass::cuda::CudaOptions options{
        .weights = glass::cuda::weight_type_from_string(b.precision.empty() ? "fp32" : b.precision),
        .graph = b.cuda_graph,
        .kv = b.kv,
        .attention = b.cuda_flash ? glass::cuda::SessionAttention::flash : glass::cuda::SessionAttention::standard};
    return std::make_unique<glass::cuda::CudaSession>(model, options);  // "no CUDA device: ..." if none
#else
    glass::fail("--device cuda: this glass was built without CUDA (configured with GLASS_CUDA=OFF, "
                "or no nvcc was found); install the CUDA toolkit and reconfigure, or use --device cpu");
#endif
}

Backend backend_from_flags(const Flags& flags) {
    Backend b;
    b.device = flags.get("--device", "cpu");
    if (b.device != "cpu" && b.device != "cuda") throw UsageError("--device must be cpu or cuda, got '" + b.device + "'");
    b.precision = flags.get("--precision", "");
    if (!b.precision.empty()) {
        try {
            glass::fast::weight_type_from_string(b.precision);
        } catch (const glass::Error& e) {
            throw UsageError(std::string("--precision: ") + e.what());
        }
    }
    b.cuda_graph = flags.has("--cuda-graph");
    if (b.cuda_graph && b.device != "cuda") throw UsageError("--cuda-graph applies to --device cuda");
    const std::string cuda_attention = flags.get("--cuda-attention", "standard");
    if (cuda_attention != "standard" && cuda_attention != "flash")
        throw UsageError("--cuda-attention must be standard or flash, got '" + cuda_attention + "'");
    if (flags.has("--cuda-attention") && b.device != "cuda") throw UsageError("--cuda-attention applies to --device cuda");
    b.cuda_flash = cuda_attention == "flash";
    b.kv = kv_from_flags(flags);
    b.int8_activations = int8_activations_from_flags(flags, b.precision);  // integer weights only
    if (b.int8_activations && b.device != "cpu")
        throw UsageError("--activations int8 is the CPU's integer dot product (VNNI); --device cuda widens q8/q4 "
                         "weights and multiplies fp32 inputs: drop --activations");
    if (b.int8_activations && flags.has("--draft"))
        throw UsageError("--draft checks drafts with a prefill pass, which multiplies fp32 inputs; with "
                         "--activations int8 its greedy text would not be plain decoding's: drop one of them");
    b.threads = flags.number<int>("--threads");
    if (b.threads && b.device != "cpu") throw UsageError("--threads applies to --device cpu");
    if (b.threads && (*b.threads < 1 || *b.threads > 256))
        throw UsageError("--threads must be in [1, 256], got " + std::to_string(*b.threads));
    b.tp = ranks_from_flags(flags, "--tp");
    b.pp = ranks_from_flags(flags, "--pp");
    b.rank_memory = rank_memory_from_flags(flags);
    b.on_grid = flags.has("--tp") || flags.has("--pp") || flags.has("--rank-memory");
    const std::string grid_flag = flags.has("--tp") ? "--tp" : flags.has("--pp") ? "--pp" : "--rank-memory";
    if (b.on_grid && b.device != "cpu")
        throw UsageError(grid_flag + " splits the model over CPU ranks (the reference, or the fast path with "
                                     "--threads/--precision): drop --device cuda");
    if (b.on_grid && b.int8_activations)
        throw UsageError(grid_flag + " runs each rank's part on fp32 inputs (the split serving backend): drop "
                                     "--activations int8");
    return b;
}

// Sampling, seed, stop strings and --top-logprobs; max_new_tokens waits for the prompt's length.
glass::GenerateOptions generate_options_from_flags(const Flags& flags) {
    glass::GenerateOptions options;
    options.sampling = sampling_from_flags(flags);
    options.seed = seed_from_flags(flags);
    options.stop_strings = flags.all("--stop");
    // --top-logprobs K: per step, the chosen token's logprob and the K most likely (JSON only).
    options.top_logprobs = flags.number<int>("--top-logprobs").value_or(0);
    if (options.top_logprobs < 0 || options.top_logprobs > glass::kMaxTopLogprobs)
        throw UsageError("--top-logprobs must be in [0, " + std::to_string(glass::kMaxTopLogprobs) + "], got " +
                         std::to_string(options.top_logprobs));
    if (flags.has("--top-logprobs") && !flags.has("--json"))
        throw UsageError("--top-logprobs adds to the --json record: give --json too");
    return options;
}

// Everything generate's flags ask for, checked before the model loads.
struct GenerateRequest {
    Backend backend;
    std::string draft_spec;  // --draft: speculative decoding (speculative.hpp); "" for none
    int draft_k = 4;         // --draft-k: tokens drafted per round
    glass::GenerateOptions options;
    std::optional<int> steps, max_new_tokens;  // -n counts the prompt's tokens; --max-new-tokens does not
};

GenerateRequest request_from_flags(const Flags& flags) {
    if (!flags.positional().empty())
        throw UsageError("unexpected argument '" + flags.positional()[0] + "' (the prompt goes after -p)");
    if (!flags.has("-p")) throw UsageError("glass generate needs a prompt: -p PROMPT");
    if (flags.has("-n") && flags.has("--max-new-tokens"))
        throw UsageError("give -n STEPS or --max-new-tokens N, not both");
    GenerateRequest r;
    r.backend = backend_from_flags(flags);
    r.draft_spec = flags.get("--draft", "");
    r.draft_k = draft_k_from_flags(flags);
    r.options = generate_options_from_flags(flags);
    r.steps = flags.number<int>("-n");
    r.max_new_tokens = flags.number<int>("--max-new-tokens");
    if (r.steps && *r.steps <= 0) throw UsageError("-n (steps) must be > 0, got " + std::to_string(*r.steps));
    if (r.max_new_tokens && *r.max_new_tokens <= 0)
        throw UsageError("--max-new-tokens must be > 0, got " + std::to_string(*r.max_new_tokens));
    return r;
}

// The prompt's length decides how many tokens -n leaves to generate (it must fit the window).
void set_max_new_tokens(GenerateRequest& r, const glass::Tokenizer& tok, const std::string& prompt, int seq_len) {
    const int n_prompt = static_cast<int>(tok.encode(prompt, tok.adds_bos(), false).size());
    if (n_prompt > seq_len)  // before anything is printed
        glass::fail("prompt of ", n_prompt, " tokens is longer than the context window of ", seq_len);
    r.options.max_new_tokens =
        r.max_new_tokens ? *r.max_new_tokens : glass::new_tokens_for_steps(r.steps.value_or(256), n_prompt);
    if (r.options.max_new_tokens == 0)
        std::fprintf(stderr, "glass: -n %d leaves no room to generate after a %d-token prompt\n",
                     r.steps.value_or(256), n_prompt);
}

// What one generation produced; `spec` stays empty without a drafter.
struct Generation {
    glass::GenerateResult result;
    glass::SpeculativeStats spec;
};

// The prompt, then the text as it streams, then a newline: the story first, the timings after.
Generation run_generation(glass::Session& session, glass::Drafter* drafter, const glass::Tokenizer& tok,
                          const std::string& prompt, const GenerateRequest& r) {
    std::cout << glass::utf8::sanitize(prompt) << std::flush;
    const auto print = [](std::string_view text) { std::cout << text << std::flush; };
    Generation g;
    if (drafter) {
        glass::SpeculativeResult s =
            glass::generate_speculative(session, *drafter, tok, prompt, r.options, {.k = r.draft_k}, print);
        g.result = std::move(s.result);
        g.spec = std::move(s.stats);
    } else {
        g.result = glass::generate(session, tok, prompt, r.options, print);
    }
    std::cout << "\n" << std::flush;
    return g;
}

void print_timings(const Generation& g, const glass::Drafter* drafter, int draft_k) {
    const glass::GenerationMetrics& m = g.result.metrics;
    std::fprintf(stderr,
                 "[%d prompt tokens, %d generated, stop: %s] TTFT %.2f ms | TPOT %.3f ms | "
                 "%.1f tokens/s decode | %.1f tokens/s end to end\n",
                 m.prompt_tokens, m.generated_tokens, glass::to_string(g.result.stop_reason), m.ttft_ms,
                 m.tpot_ms, m.decode_tokens_per_s, m.tokens_per_s);
    if (drafter)
        std::fprintf(stderr, "[draft %s, k %d] %lld of %lld drafted tokens accepted (%.1f%%); %d target passes for %d tokens\n",
                     drafter->name().c_str(), draft_k, static_cast<long long>(g.spec.accepted),
                     static_cast<long long>(g.spec.proposed), 100.0 * g.spec.acceptance_rate(), g.spec.target_passes,
                     m.generated_tokens);
}

// --roofline (C7): each decode step reads every weight once plus the cache rows it attends over
// (decode_cache_bytes_per_token, the same count `glass bench` uses); the read bandwidth measured now
// turns those bytes into the decode speed they allow.
struct Roofline {
    double weight_bytes = 0;      // per decoded token
    double kv_bytes_read = 0;     // per decoded token, on average over this generation's steps
    double read_bytes_per_s = 0;  // measure_read_bandwidth()
    double tokens_per_s = 0;      // read_bytes_per_s / (weight_bytes + kv_bytes_read)
};

Roofline print_roofline(const glass::GenerationMetrics& m, const glass::ModelConfig& config, glass::KvType kv) {
    Roofline r{.weight_bytes = static_cast<double>(m.weight_bytes_per_token),
               // Decode steps feed positions prompt .. prompt + generated - 2 (prefill chose the first token).
               .kv_bytes_read = glass::fast::decode_cache_bytes_per_token(config, kv, m.prompt_tokens,
                                                                          std::max(1, m.generated_tokens - 1)),
               .read_bytes_per_s = glass::measure_read_bandwidth()};
    const double bytes = r.weight_bytes + r.kv_bytes_read;
    r.tokens_per_s = glass::bandwidth_bound_tokens_per_s(bytes, r.read_bytes_per_s);
    std::fprintf(stderr,
                 "[roofline] %.2f MB read per token (%.2f MB of weights + %.2f MB of K/V) at %.1f GB/s measured "
                 "read bandwidth -> decode limit %.0f tokens/s; achieved %.0f%% of it%s\n",
                 bytes / 1e6, r.weight_bytes / 1e6, r.kv_bytes_read / 1e6, r.read_bytes_per_s / 1e9, r.tokens_per_s,
                 100.0 * m.decode_tokens_per_s / r.tokens_per_s,
                 bytes < 8e6 ? " (these weights fit in CPU cache, so DRAM is not the limit here)" : "");
    return r;
}

// --top-logprobs: per step, the chosen token and the most likely ones. "token": the text the id
// adds after the token before it.
nlohmann::json logprobs_json(const glass::GenerateResult& r, const glass::Tokenizer& tok) {
    nlohmann::json steps = nlohmann::json::array();
    for (std::size_t i = 0; i < r.logprobs.size(); ++i) {
        const int prev = i == 0 ? r.prompt_ids.back() : r.generated_ids[i - 1];
        const auto entry = [&](const glass::TokenLogprob& t) {
            return nlohmann::json{{"id", t.id}, {"token", tok.decode(prev, t.id)}, {"logprob", t.logprob}};
        };
        nlohmann::json step = entry(r.logprobs[i].chosen);
        step["top_logprobs"] = nlohmann::json::array();
        for (const glass::TokenLogprob& t : r.logprobs[i].top) step["top_logprobs"].push_back(entry(t));
        steps.push_back(step);
    }
    return steps;
}

nlohmann::json generation_json(const std::string& prompt, const Generation& g, const glass::GenerateOptions& options) {
    const glass::GenerateResult& r = g.result;
    const glass::GenerationMetrics& m = r.metrics;
    return {
        {"prompt", prompt},
        {"prompt_ids", r.prompt_ids},
        {"generated_ids", r.generated_ids},
        {"text", r.text},
        {"full_text", glass::utf8::sanitize(prompt) + r.text},
        {"stop_reason", glass::to_string(r.stop_reason)},
        {"seed", options.seed},
        {"temperature", as_decimal(options.sampling.temperature)},
        {"top_p", as_decimal(options.sampling.top_p)},
        {"top_k", options.sampling.top_k},
        {"min_p", as_decimal(options.sampling.min_p)},
        {"prompt_tokens", m.prompt_tokens},
        {"generated_tokens", m.generated_tokens},
        {"ttft_ms", m.ttft_ms},
        {"tpot_ms", m.tpot_ms},
        {"tokens_per_s", m.tokens_per_s},
        {"decode_tokens_per_s", m.decode_tokens_per_s},
        {"prefill_tokens_per_s", m.prefill_tokens_per_s},
        {"kv_bytes_per_token", m.kv_bytes_per_token},
        {"weight_bytes_per_token", m.weight_bytes_per_token},
    };
}

void print_generate_json(const std::string& prompt, const Generation& g, const GenerateRequest& r,
                         const glass::Drafter* drafter, const Roofline* roofline, const glass::Tokenizer& tok) {
    nlohmann::json j = generation_json(prompt, g, r.options);
    if (roofline) {
        j["bandwidth_bound_tokens_per_s"] = roofline->tokens_per_s;
        j["roofline"] = {{"weight_bytes_per_token", roofline->weight_bytes},
                         {"kv_bytes_read_per_token", roofline->kv_bytes_read},
                         {"read_bytes_per_s", roofline->read_bytes_per_s},
                         {"tokens_per_s", roofline->tokens_per_s}};
    }
    if (drafter) {
        j["draft"] = drafter->name();
        j["draft_k"] = r.draft_k;
        j["draft_proposed"] = g.spec.proposed;
        j["draft_accepted"] = g.spec.accepted;
        j["acceptance_rate"] = g.spec.acceptance_rate();
        j["target_passes"] = g.spec.target_passes;
    }
    if (!g.result.logprobs.empty()) j["logprobs"] = logprobs_json(g.result, tok);
    std::cout << dump(j) << "\n";
}


// Rank 0's report on stderr: what talking cost over the `seconds` the generation took.
void report_talk(const Backend& b, glass::dist::Communicator& world, glass::dist::Communicator& stage_group,
                 std::chrono::steady_clock::time_point start) {
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    print_group_report(world.counters(), stage_group.counters(), {.tp = b.tp, .pp = b.pp}, seconds.count());
}

// The reference split: a ParallelSession on every rank (its heads of its layers, its KV cache).
void generate_on_reference_rank(const Backend& b, const glass::Model& model, glass::dist::Communicator& comm,
                                const std::function<void(glass::Session&)>& generate_on) {
    glass::dist::ParallelSession session(model, comm, {.tp = b.tp, .pp = b.pp}, {.kv = b.kv, .rank_memory = b.rank_memory});
    if (comm.rank() != 0) {
        session.follow();
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    generate_on(session);
    session.finish();
    report_talk(b, session.communicator(), session.stage_group(), start);
}

// The fast path split: the one sequence (a PagedSession at rank 0) through the split serving
// backend, each rank's part a FastPagedBackend over its shard (dist/fast_rank_part.hpp).
void generate_on_fast_rank(const Backend& b, const glass::Model& model, glass::dist::Communicator& comm,
                           const std::function<void(glass::Session&)>& generate_on) {
    const glass::fast::FastOptions fo{.threads = b.threads.value_or(1),
                                      .weights = b.precision.empty() ? glass::fast::WeightType::fp32
                                                                     : glass::fast::weight_type_from_string(b.precision),
                                      .kv = b.kv};
    glass::dist::ParallelPagedBackend backend(model, comm, {.tp = b.tp, .pp = b.pp}, {.kv = b.kv, .rank_memory = b.rank_memory},
                                              glass::dist::fast_rank_parts(fo));
    if (comm.rank() != 0) {
        backend.follow();
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    {
        glass::serve::PagedSession session(backend);
        generate_on(session);
    }
    backend.finish();
    report_talk(b, comm, backend.stage_group(), start);
}

// --tp / --pp / --rank-memory: a grid of tp × pp ranks, each with its part of the model; rank 0 runs
// `generate_on` and reports what talking cost, the others follow its steps.
void generate_on_grid(const Backend& b, const glass::Model& model,
                      const std::function<void(glass::Session&)>& generate_on) {
    run_group(b.tp * b.pp, "--tp " + std::to_string(b.tp) + " --pp " + std::to_string(b.pp),
              [&](glass::dist::Communicator& comm) {
                  if (b.fast_cpu())
                      generate_on_fast_rank(b, model, comm, generate_on);
                  else
                      generate_on_reference_rank(b, model, comm, generate_on);
              });
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    Flags flags("generate", {{"-m", true}, {"-t", true}, {"-p", true}, {"-n", true},
                             {"--max-new-tokens", true}, {"--temperature", true}, {"--top-p", true},
                             {"--top-k", true}, {"--min-p", true}, {"--seed", true},
                             {"--stop", true}, {"--json", false}, {"--roofline", false},
                             {"--device", true}, {"--precision", true}, {"--threads", true},
                             {"--cuda-graph", false}, {"--top-logprobs", true},
                             {"--draft", true}, {"--draft-k", true}, {"--kv", true},
                             {"--activations", true}, {"--cuda-attention", true}, {"--context", true},
                             {"--tp", true}, {"--pp", true}, {"--rank-memory", true}});
    flags.parse(argc, argv, 2);
    GenerateRequest request = request_from_flags(flags);

    // -m: a llama2.c checkpoint, or a GGUF file whose own vocabulary is the tokenizer (-t overrides).
    // The fast CPU path packs a GGUF's or folder's matrices from their stored blocks: loaded
    // as_stored, no fp32 copy of them is made. The reference and CUDA read fp32.
    const std::string model_path = flags.get("-m", kDefaultModel);
    // A split model is cut from fp32 rows (dist/shard.hpp), on the fast path too.
    const bool as_stored = request.backend.fast_cpu() && !request.backend.on_grid;
    glass::Model model = glass::load_model(model_path, as_stored ? glass::LoadWeights::as_stored : glass::LoadWeights::fp32);
    context_from_flags(flags, model);
    const std::unique_ptr<glass::Tokenizer> tok_owned =
        glass::load_model_tokenizer(model_path, model, flags.get("-t", ""), kDefaultTokenizer);
    const glass::Tokenizer& tok = *tok_owned;
    const std::string prompt = flags.get("-p", "");
    set_max_new_tokens(request, tok, prompt, model.config.seq_len);

    // The generation and its report, on one session (rank 0's, under --tp).
    const auto generate_on = [&](glass::Session& session) {
        // --draft: the draft model runs where the model does (no CUDA graph, fp32 inputs; under
        // --tp, whole on rank 0).
        Backend draft_backend = request.backend;
        draft_backend.cuda_graph = draft_backend.int8_activations = false;
        std::vector<std::unique_ptr<glass::Model>> draft_models;
        const std::unique_ptr<glass::Drafter> drafter =
            request.draft_spec.empty()
                ? nullptr
                : drafter_factory(request.draft_spec, model, draft_models,
                                  [&](const glass::Model& m) { return make_session(draft_backend, m); })();
        const Generation g = run_generation(session, drafter.get(), tok, prompt, request);
        print_timings(g, drafter.get(), request.draft_k);
        std::optional<Roofline> roofline;
        if (flags.has("--roofline")) roofline = print_roofline(g.result.metrics, session.config(), session.kv_type());
        if (flags.has("--json"))
            print_generate_json(prompt, g, request, drafter.get(), roofline ? &*roofline : nullptr, tok);
    };
    if (!request.backend.on_grid) {
        const std::unique_ptr<glass::Session> session = make_session(request.backend, model);
        generate_on(*session);
        return 0;
    }
    generate_on_grid(request.backend, model, generate_on);
    return 0;
}

}  // namespace cli
