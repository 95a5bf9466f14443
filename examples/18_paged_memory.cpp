// 18_paged_memory — serving: fixed-size KV blocks waste far less memory than one max-length
// reservation per request (C17), measured on the engine and drawn as a chart.
//
// In:  the shipped model (1,280 KV bytes per token, a 512-token context window) and a mixed
//      workload: 32 requests arriving at once, prompt and output lengths drawn uniformly
//      (seeded); a memory budget of 4 context windows of KV cache.
// Out: (a) one reservation of a whole context window per request — plain arithmetic: bytes
//      reserved, how many requests fit in the budget at once, the share reserved but unused;
//      (b) paging — the same requests driven through a real Engine with a pool of the same bytes
//      at block sizes 1, 16 and 64: after every step, the blocks in use against the tokens that
//      hold K/V, and from them the share reserved but unused and how many requests fit at once;
//      the serving targets and whether they hold; the same arithmetic for Llama-2-7B (C8:
//      524,288 bytes per token) with a 4,096-token window; an SVG of memory over the steps;
//      (c) the same bytes as an int8 pool (kv_cache.hpp: one byte per value and one fp32 scale
//      per KV head and position): how many positions they hold, and the same requests through
//      the engine on the int8 reference backend at block size 16.
//
// Where the waste comes from. A max-length reservation holds the whole window from the first
// token to the last, however short the request turns out. A paged request holds only the blocks
// its tokens fill; all that is unused is the rest of its last block: less than one block per
// request, whatever the window.
//
// Usage: 18_paged_memory [--requests N] [--prompt-len A:B] [--gen A:B] [--seed S] [--windows K] [chart.svg]
//   --requests    requests in the workload, 1..256 (default 32)
//   --prompt-len  prompt lengths, drawn uniformly from A..B tokens (default 16:256)
//   --gen         new tokens per request, drawn uniformly from A..B (default 16:256);
//                 the longest prompt plus the longest output must fit the 512-token window
//   --seed        seed of the workload (default 1)
//   --windows     the memory budget, in context windows of KV cache, 1..64 (default 4)
//   chart.svg     default: paged_memory.svg beside this program, i.e. build/bin/paged_memory.svg
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/kv_cache.hpp"
#include "glass/generate.hpp"
#include "glass/metrics.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "glass/serve/request.hpp"
#include "glass/tokenizer.hpp"
#include "svg.hpp"

struct Range {
    int lo, hi;
};

// "A:B" with lo <= A <= B <= hi.
static Range range_arg(const std::string& text, const char* what, int lo, int hi) {
    const size_t colon = text.find(':');
    if (colon == std::string::npos) glass::fail(what, " '", text, "' is not a range A:B");
    const int a = example::int_arg(text.substr(0, colon).c_str(), what, lo, hi);
    const int b = example::int_arg(text.substr(colon + 1).c_str(), what, lo, hi);
    if (a > b) glass::fail(what, " '", text, "' is not a range A:B with A <= B");
    return {a, b};
}

struct WorkloadRequest {
    int prompt_len;
    int new_tokens;
};

// The lengths come from their own generator, seeded with `seed`: prompt length, then output
// length, request after request. (The prompt ids do not matter for memory: see main.)
static std::vector<WorkloadRequest> make_workload(int n, Range prompt, Range gen, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<WorkloadRequest> w;
    for (int i = 0; i < n; ++i) {
        const int p = std::uniform_int_distribution<int>(prompt.lo, prompt.hi)(rng);
        const int g = std::uniform_int_distribution<int>(gen.lo, gen.hi)(rng);
        w.push_back({p, g});
    }
    return w;
}

// One engine step, seen from the pool: positions reserved (blocks in use x block size) and
// positions whose K/V are written (tokens held), summed over the running requests.
struct StepMemory {
    int running;
    int waiting;
    std::int64_t reserved_positions;
    std::int64_t held_positions;
};

struct PagedRun {
    int block_size = 0, num_blocks = 0, preemptions = 0;
    std::int64_t computed_tokens = 0;
    std::vector<StepMemory> steps;
    int peak_running() const {
        int peak = 0;
        for (const StepMemory& s : steps) peak = std::max(peak, s.running);
        return peak;
    }
    // Over all steps: the share of reserved positions that held no K/V.
    double unused_share() const {
        double reserved = 0, held = 0;
        for (const StepMemory& s : steps) reserved += static_cast<double>(s.reserved_positions), held += static_cast<double>(s.held_positions);
        return reserved > 0 ? 1.0 - held / reserved : 0.0;
    }
    // Positions one running request keeps reserved, on average over steps and requests.
    double reserved_per_request() const {
        double reserved = 0, running = 0;
        for (const StepMemory& s : steps) reserved += static_cast<double>(s.reserved_positions), running += s.running;
        return running > 0 ? reserved / running : 0.0;
    }
};

// Drives every request through a real Engine on the shipped model, all arriving at once, with a
// pool of `pool_positions` positions cut into blocks of `block_size`; records the pool after
// every step. Prefix caching is off: these prompts share nothing, and a cached free block would
// blur "in use".
static PagedRun run_paged(glass::serve::PagedBackend& backend, const glass::Tokenizer& tok,
                          const std::vector<WorkloadRequest>& workload, int block_size, int pool_positions) {
    glass::serve::EngineOptions eo;
    eo.block_size = block_size;
    eo.num_blocks = pool_positions / block_size;
    eo.prefix_caching = false;
    eo.scheduler.max_tokens_per_step = 512;
    eo.scheduler.max_running = 256;  // memory, not a cap on the batch, decides who runs
    glass::serve::Engine engine(backend, tok, eo);

    std::mt19937 ids(12345);  // prompt ids: BOS, then anything from the vocabulary
    std::uniform_int_distribution<int> any_id(3, backend.config().vocab_size - 1);
    for (const WorkloadRequest& w : workload) {
        std::vector<int> prompt = {tok.bos_id()};
        while (static_cast<int>(prompt.size()) < w.prompt_len) prompt.push_back(any_id(ids));
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.max_new_tokens = w.new_tokens;
        o.stop_on_bos = o.stop_on_eos = false;  // every request generates exactly its new tokens
        engine.add_request_ids(prompt, o);
    }

    PagedRun run;
    run.block_size = block_size;
    run.num_blocks = eo.num_blocks;
    while (engine.has_unfinished()) {
        const glass::serve::StepReport report = engine.step();
        run.preemptions += static_cast<int>(report.preempted.size());
        for (const glass::serve::StepReport::Part& p : report.batch) run.computed_tokens += p.n;
        StepMemory m{0, static_cast<int>(engine.scheduler().waiting().size()), 0, 0};
        for (const glass::serve::Request* r : engine.scheduler().running()) {
            ++m.running;
            m.held_positions += r->computed;
        }
        // Blocks in use: every block not in the free list (no prefix caching, so no sharing).
        m.reserved_positions = std::int64_t{engine.blocks().num_blocks() - engine.blocks().num_free()} * block_size;
        run.steps.push_back(m);
        if (run.steps.size() > 100000) glass::fail("the engine did not finish in 100000 steps");
    }
    return run;
}

static void draw_chart(const PagedRun& run, std::int64_t bytes_per_token, int context, std::int64_t budget_bytes,
                       const std::string& path) {
    double max_bytes = static_cast<double>(budget_bytes);
    for (const StepMemory& s : run.steps)
        max_bytes = std::max(max_bytes, static_cast<double>(s.running) * context * static_cast<double>(bytes_per_token));
    const double mb_step = svg::nice_step(max_bytes / 1e6, 6);
    max_bytes = std::ceil(max_bytes / 1e6 / mb_step) * mb_step * 1e6;  // the axis ends on a tick
    const double left = 80, right = 700, top = 50, bottom = 390;  // plot area in pixels
    const double n_steps = static_cast<double>(run.steps.size());
    const auto px = [&](double step) { return left + (right - left) * step / n_steps; };
    const auto py = [&](double bytes) { return bottom - (bottom - top) * bytes / max_bytes; };

    svg::Svg s;
    s.width = 740;
    s.height = 470;
    s.root_attributes = "data-figure=\"C17\" data-block-size=\"" + std::to_string(run.block_size) +
                        "\" data-steps=\"" + std::to_string(run.steps.size()) + "\" data-plot-left=\"" + svg::num(left) +
                        "\" data-plot-right=\"" + svg::num(right) + "\" data-plot-top=\"" + svg::num(top) +
                        "\" data-plot-bottom=\"" + svg::num(bottom) + "\" data-max-bytes=\"" + svg::num(max_bytes) + "\"";
    s.text(370, 25, "KV memory after each engine step: paged blocks vs one context window per request", "middle", 15);
    for (double mb = 0; mb <= max_bytes / 1e6 + 1e-9; mb += mb_step) {
        char label[16];
        std::snprintf(label, sizeof label, "%g", mb);
        s.line(left - 5, py(mb * 1e6), right, py(mb * 1e6), "stroke:#ddd");
        s.text(left - 10, py(mb * 1e6) + 4, label, "end");
    }
    const double step_step = svg::nice_step(n_steps, 6);
    for (double step = 0; step <= n_steps + 1e-9; step += step_step) {
        s.line(px(step), bottom, px(step), bottom + 5, "stroke:black");
        s.text(px(step), bottom + 20, std::to_string(static_cast<int>(step)), "middle");
    }
    s.line(left, bottom, right, bottom, "stroke:black");  // axes over the grid
    s.line(left, top, left, bottom, "stroke:black");
    s.text((left + right) / 2, bottom + 45, "engine step", "middle", 13);
    s.text(20, (top + bottom) / 2, "MB", "middle", 13);

    // After step k (k = 1, 2, ...): what the running requests hold, and what the same requests
    // would reserve at one context window each.
    std::vector<std::pair<double, double>> max_length, reserved, held;
    for (size_t k = 0; k < run.steps.size(); ++k) {
        const StepMemory& m = run.steps[k];
        const double x = px(static_cast<double>(k + 1));
        max_length.push_back({x, py(static_cast<double>(m.running) * context * static_cast<double>(bytes_per_token))});
        reserved.push_back({x, py(static_cast<double>(m.reserved_positions * bytes_per_token))});
        held.push_back({x, py(static_cast<double>(m.held_positions * bytes_per_token))});
    }
    const std::string red = "stroke:#c0392b;stroke-width:2", blue = "stroke:#2471a3;stroke-width:2",
                      green = "stroke:#1e8449;stroke-width:1.5;stroke-dasharray:4 3";
    s.polyline(max_length, red, "data-series=\"max-length\"");
    s.polyline(reserved, blue, "data-series=\"paged-reserved\"");
    s.polyline(held, green, "data-series=\"held\"");
    const double budget_y = py(static_cast<double>(budget_bytes));
    s.line(left, budget_y, right, budget_y, "stroke:black;stroke-dasharray:8 4", "data-series=\"budget\"");
    s.text(right - 5, budget_y - 6, "memory budget", "end");

    // The legend, top right: a short stroke of each line's style, then what it is.
    const char* names[] = {"one context window per running request", "paged: blocks of " , "paged: positions holding K/V"};
    const std::string styles[] = {red, blue, green};
    for (int i = 0; i < 3; ++i) {
        const double y = top + 12 + 18 * i;
        s.line(right - 330, y - 4, right - 305, y - 4, styles[i]);
        s.text(right - 298, y, std::string(names[i]) + (i == 1 ? std::to_string(run.block_size) + " in use" : ""));
    }
    s.save(path);
}

static const char* holds(bool yes) { return yes ? "holds" : "does not hold"; }

static int run(int argc, char** argv) {
    int n_requests = 32, windows = 4;
    Range prompt{16, 256}, gen{16, 256};
    unsigned seed = 1;
    std::string svg_path = svg::default_path("paged_memory.svg");
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool flag = a.rfind("--", 0) == 0;
        if (flag && i + 1 >= argc) glass::fail("'", a, "' needs a value");
        if (a == "--requests") n_requests = example::int_arg(argv[++i], "requests", 1, 256);
        else if (a == "--prompt-len") prompt = range_arg(argv[++i], "prompt lengths", 1, 512);
        else if (a == "--gen") gen = range_arg(argv[++i], "new tokens", 1, 512);
        else if (a == "--seed") seed = static_cast<unsigned>(example::int_arg(argv[++i], "seed", 0, 1 << 30));
        else if (a == "--windows") windows = example::int_arg(argv[++i], "windows", 1, 64);
        else if (flag) glass::fail("unknown option '", a, "'");
        else svg_path = a;
    }

    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);
    const glass::ModelConfig& c = model.config;
    const int context = c.seq_len;
    const std::int64_t per_token = c.kv_bytes_per_token();
    if (prompt.hi + gen.hi > context)
        glass::fail("prompts of up to ", prompt.hi, " tokens plus up to ", gen.hi, " new tokens do not fit the ",
                    context, "-token context window");

    const std::vector<WorkloadRequest> workload = make_workload(n_requests, prompt, gen, seed);
    double prompt_sum = 0, gen_sum = 0;
    for (const WorkloadRequest& w : workload) prompt_sum += w.prompt_len, gen_sum += w.new_tokens;
    const int budget_positions = windows * context;
    const std::int64_t budget_bytes = budget_positions * per_token;

    std::printf("C17: KV memory of many requests, paged vs one context-window reservation each\n");
    std::printf("model: stories260K, %lld KV bytes per token, context window %d tokens\n",
                static_cast<long long>(per_token), context);
    std::printf("workload: %d requests arriving at once, seed %u\n", n_requests, seed);
    std::printf("prompt tokens: %d..%d, mean %.1f\n", prompt.lo, prompt.hi, prompt_sum / n_requests);
    std::printf("new tokens: %d..%d, mean %.1f\n", gen.lo, gen.hi, gen_sum / n_requests);
    std::printf("memory budget: %d context windows = %d positions = %lld bytes\n", windows, budget_positions,
                static_cast<long long>(budget_bytes));

    // ---- (a) one context window per request: arithmetic on the lengths ----
    // A request's K/V after each of its steps: the prompt, then one token more per decode step;
    // the last sampled token is never computed. Averaged over every request's steps.
    double held_sum = 0, steps_sum = 0;
    for (const WorkloadRequest& w : workload)
        for (int k = 0; k < w.new_tokens; ++k) held_sum += w.prompt_len + k, steps_sum += 1;
    const double mean_held = held_sum / steps_sum;
    const int max_length_fit = budget_positions / context;
    std::printf("\n(a) one context window reserved per request (arithmetic)\n");
    std::printf("max-length reserved per request: %d positions = %lld bytes\n", context,
                static_cast<long long>(context * per_token));
    std::printf("max-length requests at once: %d\n", max_length_fit);
    std::printf("mean tokens held by a running request: %.1f\n", mean_held);
    std::printf("max-length reserved but unused: %.2f %%\n", 100.0 * (1.0 - mean_held / context));

    // ---- (b) paged: the same requests through the engine, at three block sizes ----
    std::printf("\n(b) paged, measured on the engine over every step (prefix caching off)\n");
    glass::serve::CpuPagedBackend backend(model);
    std::vector<PagedRun> runs;
    for (const int block_size : {1, 16, 64}) {
        runs.push_back(run_paged(backend, tok, workload, block_size, budget_positions));
        const PagedRun& r = runs.back();
        const double at_once = budget_positions / r.reserved_per_request();
        std::printf("block %d: %d blocks, %zu steps, %d preemptions, %lld tokens computed\n", block_size, r.num_blocks,
                    r.steps.size(), r.preemptions, static_cast<long long>(r.computed_tokens));
        std::printf("block %d reserved but unused: %.2f %%\n", block_size, 100.0 * r.unused_share());
        std::printf("block %d positions reserved per running request: %.1f\n", block_size, r.reserved_per_request());
        std::printf("block %d requests at once: %.1f (%.2fx max-length), peak running %d\n", block_size, at_once,
                    at_once / max_length_fit, r.peak_running());
    }
    const PagedRun& paged16 = runs[1];
    const double ratio16 = budget_positions / paged16.reserved_per_request() / max_length_fit;

    // ---- The same requests on Llama-2-7B: a 4,096-token window, 524,288 bytes per token ----
    const int llama_context = 4096;
    const std::int64_t llama_per_token = glass::kv_cache_bytes_per_token(32, 32, 128, 2);  // C8
    const std::int64_t llama_budget = std::int64_t{windows} * llama_context * llama_per_token;
    const double llama_at_once = static_cast<double>(windows) * llama_context / paged16.reserved_per_request();
    std::printf("\nLlama-2-7B: %lld KV bytes per token, context window %d, the same requests, %d windows = %lld bytes\n",
                static_cast<long long>(llama_per_token), llama_context, windows, static_cast<long long>(llama_budget));
    std::printf("llama max-length reserved per request: %lld bytes\n", static_cast<long long>(llama_context * llama_per_token));
    std::printf("llama max-length reserved but unused: %.2f %%\n", 100.0 * (1.0 - mean_held / llama_context));
    std::printf("llama block 16 reserved per running request: %.0f bytes\n",
                paged16.reserved_per_request() * static_cast<double>(llama_per_token));
    std::printf("llama block 16 requests at once: %.1f (%.2fx max-length)\n", llama_at_once, llama_at_once / windows);

    std::printf("\nserving targets\n");
    std::printf("target reserved-but-unused < 4 %% with paging (block 16): %.2f %%, %s\n", 100.0 * paged16.unused_share(),
                holds(paged16.unused_share() < 0.04));
    std::printf("target >= 3x concurrent requests (stories260K, 512-token window): %.2fx, %s\n", ratio16,
                holds(ratio16 >= 3.0));
    std::printf("target >= 3x concurrent requests (Llama-2-7B, 4096-token window): %.2fx, %s\n", llama_at_once / windows,
                holds(llama_at_once / windows >= 3.0));

    // ---- (c) the same bytes as an int8 pool ----
    // A position costs 2 · layers · KV heads · (head_dim + 4) bytes: the budget holds more of them.
    const std::int64_t int8_per_token = glass::kv_bytes_per_token(c, glass::KvType::int8);
    const int int8_positions = static_cast<int>(budget_bytes / (int8_per_token * 16) * 16);  // whole blocks of 16
    std::printf("\n(c) the same %lld bytes as an int8 pool (one byte per value, one fp32 scale per KV head and position)\n",
                static_cast<long long>(budget_bytes));
    std::printf("int8 KV bytes per token: %lld (fp32 %lld, %.2fx)\n", static_cast<long long>(int8_per_token),
                static_cast<long long>(per_token), static_cast<double>(per_token) / static_cast<double>(int8_per_token));
    std::printf("int8 pool positions: %d (fp32 %d)\n", int8_positions, budget_positions);
    glass::serve::CpuPagedBackend int8_backend(model, glass::KvType::int8);
    const PagedRun int8_run = run_paged(int8_backend, tok, workload, 16, int8_positions);
    const double int8_at_once = int8_positions / int8_run.reserved_per_request();
    std::printf("int8 block 16: %d blocks, %zu steps, %d preemptions, peak running %d\n", int8_run.num_blocks,
                int8_run.steps.size(), int8_run.preemptions, int8_run.peak_running());
    std::printf("int8 block 16 requests at once: %.1f (%.2fx fp32 paged, %.2fx max-length fp32)\n", int8_at_once,
                int8_at_once / (budget_positions / paged16.reserved_per_request()), int8_at_once / max_length_fit);

    draw_chart(paged16, per_token, context, budget_bytes, svg_path);
    std::printf("\nsvg written: %s\n", svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
