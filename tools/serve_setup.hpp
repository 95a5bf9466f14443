// What `glass serve` and `glass serve-bench` both set up before the engine runs, from the same
// flags (each command adds its own to these):
//
//   model     -m FILE (llama2.c, GGUF or a folder) or --shape NAME: random weights of that shape,
//             made in memory; --context N
//   backend   --backend fast|reference|cuda (fast), --threads N (every core), --precision TYPE
//             (what the file stores), --kv fp32|int8 (fp32); cuda: the GPU (tools/cuda_backend.hpp)
//   engine    --block-size B (16), --pool-blocks N (0: four context windows' worth), --budget T
//             (256 tokens a step), --max-running N (64 requests in a batch), --no-prefix-cache,
//             --no-chunked-prefill, --draft SPEC [--draft-k K] (speculative decoding)
//   ranks     --tp N, --pp N (a grid of N × M ranks: threads here, or processes under mpirun),
//             --micro-batches M (1: a step's requests cut into M groups through the stages),
//             --rank-memory BYTES (what one rank may hold); any of them: a backend split over
//             ranks (dist/parallel_paged_backend.hpp), the reference's unless --backend fast is
//             given (dist/fast_rank_part.hpp: --threads per rank, every core shared out by default)
//             or --backend cuda (each rank's part on its GPU: cuda/parallel_paged.hpp)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <span>
#include <vector>

#include "cli.hpp"
#include "cuda_backend.hpp"
#include "draft_setup.hpp"
#include "glass/glass.hpp"
#include "parallel_setup.hpp"

namespace cli {

// The flags above (true: the flag takes a value), with a command's own added.
inline std::map<std::string, bool> with_engine_flags(std::map<std::string, bool> own) {
    own.insert({{"-m", true}, {"--shape", true}, {"--context", true}, {"--backend", true}, {"--threads", true},
                {"--precision", true}, {"--kv", true}, {"--block-size", true}, {"--pool-blocks", true},
                {"--budget", true}, {"--max-running", true}, {"--no-prefix-cache", false},
                {"--no-chunked-prefill", false}, {"--draft", true}, {"--draft-k", true}, {"--tp", true},
                {"--pp", true}, {"--micro-batches", true}, {"--rank-memory", true}});
    return own;
}

// --backend and --threads (and the ranks), checked before anything is loaded.
struct BackendChoice {
    std::string name;  // "fast", "reference" or "cuda"
    int threads = 1;   // the fast backend's
    bool on_grid = false;  // --tp, --pp or --rank-memory: split over ranks (the reference unless --backend fast)
    glass::dist::ParallelShape grid{};
    glass::dist::ParallelPagedOptions grid_options{};  // micro-batches, rank memory (kv: --kv)
};

// What the startup lines say after the backend's name: ", 2 threads, q4" (fast), ", q4" (cuda),
// nothing for the reference (it has no threads or precision to choose).
inline std::string backend_words(const BackendChoice& b, const std::string& precision) {
    if (b.name == "fast") return ", " + std::to_string(b.threads) + " threads, " + precision;
    if (b.name == "cuda") return ", " + precision;
    return "";
}

// --tp, --pp, --micro-batches, --rank-memory into `b`; any of them picks the reference backend,
// split, unless --backend fast asks for the fast path's (whose ranks then share the cores out,
// unless --threads says how many each).
inline void grid_from_flags(const Flags& flags, BackendChoice& b) {
    b.on_grid = flags.has("--tp") || flags.has("--pp") || flags.has("--rank-memory");
    b.grid = {.tp = ranks_from_flags(flags, "--tp"), .pp = ranks_from_flags(flags, "--pp")};
    b.grid_options.micro_batches = flags.number<int>("--micro-batches").value_or(1);
    b.grid_options.rank_memory = rank_memory_from_flags(flags);
    if (flags.has("--micro-batches") && !b.on_grid) throw UsageError("--micro-batches applies to --tp/--pp");
    if (b.grid_options.micro_batches < 1 || b.grid_options.micro_batches > 256)
        throw UsageError("--micro-batches must be in [1, 256], got " + std::to_string(b.grid_options.micro_batches));
    if (!b.on_grid) return;
    if (!flags.has("--backend")) b.name = "reference";
    if (!flags.has("--threads")) b.threads = std::max(1, b.threads / (b.grid.tp * b.grid.pp));
}

// The GPU backend's options from the fast path's: the same precision and KV storage.
inline CudaBackendOptions cuda_options(const glass::fast::FastOptions& fast_options) {
    return {.precision = glass::fast::to_string(fast_options.weights), .kv = fast_options.kv};
}

// Each rank's part of a split backend: the fast path's (--backend fast), a GPU's (--backend cuda)
// or the reference's.
inline glass::dist::MakeRankPart rank_parts(const BackendChoice& choice, const glass::fast::FastOptions& fast_options) {
    if (choice.name == "fast") return glass::dist::fast_rank_parts(fast_options);
    if (choice.name == "cuda") return cuda_rank_parts(cuda_options(fast_options));
    return {};
}

inline BackendChoice backend_from_flags(const Flags& flags) {
    BackendChoice b{.name = flags.get("--backend", "fast"),
                    .threads = flags.number<int>("--threads").value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))};
    if (b.name != "fast" && b.name != "reference" && b.name != "cuda")
        throw UsageError("--backend must be fast, reference or cuda, got '" + b.name + "'");
    grid_from_flags(flags, b);
    if (b.name == "reference" && (flags.has("--threads") || flags.has("--precision")))
        throw UsageError("--threads and --precision apply to --backend fast (and --precision to cuda)");
    if (b.name == "cuda" && flags.has("--threads")) throw UsageError("--threads applies to --backend fast, not cuda");
    if (b.threads < 1 || b.threads > 256) throw UsageError("--threads must be in [1, 256], got " + std::to_string(b.threads));
    return b;
}

// The engine's options (all but the draft, which needs the model: engine_draft_from_flags).
inline glass::serve::EngineOptions engine_options_from_flags(const Flags& flags) {
    glass::serve::EngineOptions eo;
    eo.block_size = flags.number<int>("--block-size").value_or(eo.block_size);
    eo.num_blocks = flags.number<int>("--pool-blocks").value_or(eo.num_blocks);
    eo.prefix_caching = !flags.has("--no-prefix-cache");
    eo.scheduler.max_tokens_per_step = flags.number<int>("--budget").value_or(eo.scheduler.max_tokens_per_step);
    eo.scheduler.max_running = flags.number<int>("--max-running").value_or(eo.scheduler.max_running);
    eo.scheduler.chunked_prefill = !flags.has("--no-chunked-prefill");
    if (eo.block_size < 1) throw UsageError("--block-size must be >= 1, got " + std::to_string(eo.block_size));
    if (eo.num_blocks < 0)
        throw UsageError("--pool-blocks must be >= 1 (or 0: four context windows' worth), got " + std::to_string(eo.num_blocks));
    if (eo.scheduler.max_tokens_per_step < 1)
        throw UsageError("--budget must be >= 1, got " + std::to_string(eo.scheduler.max_tokens_per_step));
    if (eo.scheduler.max_running < 1)
        throw UsageError("--max-running must be >= 1, got " + std::to_string(eo.scheduler.max_running));
    return eo;
}

// --shape NAME's configuration, its context window changed by --context N when given.
inline glass::ModelConfig shape_config_from_flags(const Flags& flags) {
    glass::ModelConfig c = glass::fast::shape_config(flags.get("--shape", ""));
    if (const auto ctx = flags.number<int>("--context")) {
        if (*ctx < 16 || *ctx > 65536) throw UsageError("--context must be in [16, 65536], got " + std::to_string(*ctx));
        c.seq_len = *ctx;
    }
    return c;
}

// The model: with --shape, random weights of that shape drawn from `seed`; else the file at
// `path` (the fast backend packs from the stored blocks), its window set by --context.
inline glass::Model model_from_flags(const Flags& flags, const BackendChoice& backend, const std::string& path,
                                     std::uint64_t seed) {
    if (flags.has("--shape")) return glass::fast::random_model_in_memory(shape_config_from_flags(flags), seed);
    // The fast path packs from the file's own blocks; a split model is cut from fp32 rows (shard.hpp).
    const bool as_stored = backend.name == "fast" && !backend.on_grid;
    glass::Model m = glass::load_model(path, as_stored ? glass::LoadWeights::as_stored : glass::LoadWeights::fp32);
    context_from_flags(flags, m);
    return m;
}

// --precision (default: the type the file stores its matrices in, fp32 for llama2.c and shapes).
inline std::string precision_from_flags(const Flags& flags, const glass::Model& model) {
    return flags.get("--precision", glass::fast::to_string(glass::fast::stored_weight_type(model)));
}

// The fast path's options: threads, weights at `precision`, --kv (which the reference backend
// takes too).
inline glass::fast::FastOptions fast_options_from_flags(const Flags& flags, const BackendChoice& backend,
                                                        const std::string& precision) {
    glass::fast::FastOptions fo;
    fo.threads = backend.threads;
    fo.weights = glass::fast::weight_type_from_string(precision);
    fo.kv = kv_from_flags(flags);
    return fo;
}

// The backend named by --backend (already checked to be "fast", "reference" or "cuda");
// fast_options.kv (--kv) applies to all three, its weights (--precision) to fast and cuda.
inline std::unique_ptr<glass::serve::PagedBackend> make_paged_backend(const std::string& name, const glass::Model& model,
                                                                      const glass::fast::FastOptions& fast_options) {
    if (name == "reference") return std::make_unique<glass::serve::CpuPagedBackend>(model, fast_options.kv);
    if (name == "cuda") return make_cuda_paged_backend(model, cuda_options(fast_options));
    return std::make_unique<glass::fast::FastPagedBackend>(model, fast_options);
}

// Every rank's StageClock, gathered at rank 0 and printed there on stderr: how much of its forward
// passes each rank spent waiting (for the stage before it, for the logits, for the all-reduces).
// `comm` is the grid's own group; a disaggregated side names itself (`side`: "decode", "prefill")
// and its ranks by their number in the whole job (`first_rank` + the rank in the grid).
inline void report_stage_clocks(glass::dist::Communicator& comm, const glass::dist::ParallelPagedBackend& backend,
                                int micro_batches, int first_rank = 0, const std::string& side = "") {
    const glass::dist::StageClock& clock = backend.clock();
    const double mine[3] = {clock.busy_seconds, clock.step_seconds, static_cast<double>(clock.passes)};
    std::vector<double> all(comm.rank() == 0 ? 3 * static_cast<size_t>(comm.size()) : 0);
    comm.gather(std::span<const double>(mine), std::span<double>(all), 0);
    if (comm.rank() != 0) return;
    const glass::dist::ParallelShape shape = backend.place().shape;
    for (int r = 0; r < comm.size(); ++r) {
        const glass::dist::StageClock c{.busy_seconds = all[3 * static_cast<size_t>(r)],
                                        .step_seconds = all[3 * static_cast<size_t>(r) + 1],
                                        .passes = static_cast<std::int64_t>(all[3 * static_cast<size_t>(r) + 2])};
        std::fprintf(stderr, "[rank %d%s: stage %d, tensor rank %d] %lld forward passes, %.1f%% of their time waiting "
                     "(%d micro-batch%s a step)\n", first_rank + r, side.empty() ? "" : (", " + side).c_str(), r / shape.tp,
                     r % shape.tp, static_cast<long long>(c.passes),
                     100.0 * c.idle_share(), micro_batches, micro_batches == 1 ? "" : "es");
    }
}

// body(backend) on the backend `choice` names: one process's; or, with --tp/--pp/--rank-memory,
// that backend split at rank 0 of the group, the other ranks following it until body returns.
// Rank 0 then reports on stderr what the group's talking and waiting cost.
inline void with_paged_backend(const BackendChoice& choice, const glass::Model& model,
                               const glass::fast::FastOptions& fast_options,
                               const std::function<void(glass::serve::PagedBackend&)>& body) {
    if (!choice.on_grid) {
        const std::unique_ptr<glass::serve::PagedBackend> backend = make_paged_backend(choice.name, model, fast_options);
        body(*backend);
        return;
    }
    const glass::dist::ParallelShape shape = choice.grid;
    glass::dist::ParallelPagedOptions options = choice.grid_options;
    options.kv = fast_options.kv;
    run_group(shape.tp * shape.pp, "--tp " + std::to_string(shape.tp) + " --pp " + std::to_string(shape.pp),
              [&](glass::dist::Communicator& comm) {
                  glass::dist::ParallelPagedBackend backend(model, comm, shape, options, rank_parts(choice, fast_options));
                  if (comm.rank() != 0) {
                      backend.follow();
                      report_stage_clocks(comm, backend, options.micro_batches);
                      return;
                  }
                  const auto start = std::chrono::steady_clock::now();
                  body(backend);
                  backend.finish();
                  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
                  print_group_report(comm.counters(), backend.stage_group().counters(), shape, seconds.count());
                  report_stage_clocks(comm, backend, options.micro_batches);
              });
}

// --draft SPEC [--draft-k K] into the engine's options (speculative decoding in the engine). Each
// request's model draft runs in a one-thread session of the backend's kind, beside the batched
// target pass. Without --draft, only checks that --draft-k is not given alone.
inline void engine_draft_from_flags(const Flags& flags, const std::string& backend_name, const glass::Model& model,
                                    glass::fast::FastOptions fast_options,
                                    std::vector<std::unique_ptr<glass::Model>>& keep_alive,
                                    glass::serve::EngineOptions& eo) {
    const int k = draft_k_from_flags(flags);
    if (!flags.has("--draft")) return;
    fast_options.threads = 1;
    eo.draft_k = k;
    eo.make_drafter = drafter_factory(flags.get("--draft", ""), model, keep_alive,
                                      [backend_name, fast_options](const glass::Model& m) -> std::unique_ptr<glass::Session> {
                                          if (backend_name == "reference") return std::make_unique<glass::CpuSession>(m, fast_options.kv);
                                          return std::make_unique<glass::fast::FastCpuSession>(m, fast_options);
                                      });
}

}  // namespace cli
