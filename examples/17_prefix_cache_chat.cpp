// 17_prefix_cache_chat — serving: a chat re-sends its whole history every turn; the prefix cache
// turns that growing cost into a constant one (C16), measured and drawn as a chart.
//
// In:  a model with stories15M's shape and random weights (--shape stories110M: the shape the
//      serving targets were set for; --shape stories260K: the shipped model's, seconds on any CPU),
//      served by the fast CPU path; a chat of --turns turns (default 8). Turn t sends BOS, every
//      earlier user message and reply, then --user new random tokens (default 32), and gets a
//      --reply-token answer (default 16, greedy) that joins the history. Blocks of --block-size
//      positions (default 16); a budget of one context window per step, so every prompt is computed
//      in one pass.
// Out: per turn, the prompt's tokens, how many of them the prefix cache served (cache on), how many
//      were computed, TTFT with the cache off and on, and on / off; the serving target (last turn:
//      on <= 1/4 of off) and whether it held this time; an SVG of TTFT per turn.
//
// Why. Without the cache every turn computes K and V for the whole history again, so TTFT grows
// with it. With the cache, the blocks the previous turn filled are still in the pool, each named by
// a chained hash of its tokens (glass/serve/block_manager.hpp). The new prompt starts with exactly
// those tokens, so its full blocks are found and shared, and only the new tail is computed: the
// user's tokens, the reply's last token (sampled, never fed back, so it has no K/V), and the
// positions of the previous turn's last, partly filled block. Served per turn:
//     block_size x floor((previous prompt + reply - 1) / block_size)
//
// Timings change from run to run and machine to machine; the token counts do not.
//
// Usage: 17_prefix_cache_chat [--shape stories260K|stories15M|stories110M] [--threads N] [--turns N]
//                             [--user N] [--reply N] [--block-size N] [chart.svg]
//   --threads     threads of the fast path, 1..64 (default 2)
//   --turns       turns of the chat, 1..64 (default 8)
//   --user        new user tokens per turn, 1..4096 (default 32)
//   --reply       tokens per reply, 1..4096 (default 16)
//   --block-size  positions per KV block, 1..256 (default 16)
//   chart.svg     default: prefix_cache_chat.svg beside this program, i.e. build/bin/prefix_cache_chat.svg
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/serve/engine.hpp"
#include "glass/tokenize/number_tokenizer.hpp"
#include "serve_measure.hpp"  // the benchmarks' harness (bench/measure/)
#include "serving.hpp"
#include "svg.hpp"

static int run(int argc, char** argv) {
    serving::Common common;
    common.svg_path = svg::default_path("prefix_cache_chat.svg");
    int turns = 8, user = 32, reply = 16, block_size = 16;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool flag = a.rfind("--", 0) == 0;
        if (serving::common_arg(common, argc, argv, i)) continue;
        if (flag && i + 1 >= argc) glass::fail("'", a, "' needs a value");
        if (a == "--turns") turns = example::int_arg(argv[++i], "turns", 1, 64);
        else if (a == "--user") user = example::int_arg(argv[++i], "user tokens", 1, 4096);
        else if (a == "--reply") reply = example::int_arg(argv[++i], "reply tokens", 1, 4096);
        else if (a == "--block-size") block_size = example::int_arg(argv[++i], "block size", 1, 256);
        else if (flag) glass::fail("unknown option '", a, "'");
        else common.svg_path = a;
    }
    // The whole chat must fit one context window: BOS + every turn's user tokens and reply.
    const int chat_tokens = 1 + turns * (user + reply);
    if (chat_tokens > 8192)
        glass::fail("a chat of ", turns, " turns x (", user, " + ", reply, ") tokens + BOS = ", chat_tokens,
                    " tokens; at most 8192");
    const glass::ModelConfig shape = serving::shape_config(common.shape);
    const glass::ModelConfig c = serving::shape_with_context(common.shape, chat_tokens);
    const int last_prompt = 1 + turns * user + (turns - 1) * reply;

    std::printf("C16: a chat that re-sends its whole history every turn, with and without prefix caching\n");
    serving::print_model(common.shape, c);
    std::printf("context window: %d tokens (%s's is %d; the chat needs %d)\n", c.seq_len, common.shape.c_str(),
                shape.seq_len, chat_tokens);
    std::printf("engine: fast CPU path, %d threads, block size %d, budget %d tokens per step\n", common.threads,
                block_size, c.seq_len);
    std::printf("chat: %d turns, each sends the history plus %d new user tokens and gets a %d-token reply\n", turns,
                user, reply);

    const glass::Model model = glass::fast::random_model_in_memory(c, /*seed=*/1);
    const glass::NumberTokenizer tok(c.vocab_size);
    glass::fast::FastPagedBackend backend(model, serving::fast_options(common.threads));
    serving::warm_up(backend, tok, last_prompt);

    // The same chat (same seed: same user tokens, and greedy replies) twice on one backend.
    glass::serve::EngineOptions on;
    on.block_size = block_size;
    on.scheduler.max_tokens_per_step = c.seq_len;
    glass::serve::EngineOptions off = on;
    off.prefix_caching = false;
    const std::vector<serve_measure::ChatTurn> cold = serve_measure::measure_chat(backend, tok, off, turns, user, reply);
    const std::vector<serve_measure::ChatTurn> warm = serve_measure::measure_chat(backend, tok, on, turns, user, reply);

    std::printf("\ncolumns: prompt tokens | cached (cache on) | computed (cache on) | TTFT ms cache off | "
                "TTFT ms cache on | on / off\n");
    serving::BarChart chart;
    chart.figure = "C16";
    chart.title = "Time to first token per chat turn, prefix cache off and on";
    chart.x_label = "turn (each re-sends the whole history)";
    chart.y_label = "TTFT ms";
    chart.series = {"prefix cache off", "prefix cache on"};
    double last_ratio = 0;
    for (int t = 0; t < turns; ++t) {
        const serve_measure::ChatTurn& a = cold[static_cast<size_t>(t)];
        const serve_measure::ChatTurn& b = warm[static_cast<size_t>(t)];
        if (a.prompt_tokens != b.prompt_tokens || a.cached_tokens != 0)
            glass::fail("turn ", t + 1, ": the two runs sent different prompts");
        last_ratio = b.ttft_ms / a.ttft_ms;
        std::printf("turn %d: %d | %d | %d | %.2f | %.2f | %.2f\n", t + 1, b.prompt_tokens, b.cached_tokens,
                    b.prompt_tokens - b.cached_tokens, a.ttft_ms, b.ttft_ms, last_ratio);
        chart.groups.push_back(std::to_string(t + 1));
        chart.values.push_back({a.ttft_ms, b.ttft_ms});
    }
    std::printf("\ntarget TTFT cache on / off <= 0.25 at turn %d: %.2f, %s\n", turns, last_ratio,
                serving::verdict(last_ratio <= 0.25));

    serving::draw(chart, common.svg_path);
    std::printf("\nsvg written: %s\n", common.svg_path.c_str());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
