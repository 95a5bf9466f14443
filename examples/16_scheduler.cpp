// 16_scheduler — serving: continuous batching, chunked prefill and preemption, one step at a time.
//
// In:  the shipped model and tok512; four greedy requests, one of which arrives late; an engine
//      with a small token budget per step (8), a small pool (12 blocks of 4 positions = 48) and
//      the CPU reference backend (serve/paged_transformer.hpp).
// Out: every engine step on one line, from its StepReport: which request decodes which position,
//      which prefills (or recomputes) which chunk [start, end) of its tokens, who is preempted,
//      who finishes, who waits, and how many blocks are free after the step. Then each request's
//      text, and whether it equals the same request run alone (generate_from_ids on a
//      PagedSession, computed here).
//
// A step is ONE forward pass over a batch of pieces of different requests. The budget caps the
// tokens of one step: decodes (one token each) go first, then prompts, cut into chunks when they
// do not fit. When a running request needs a block and the pool has none, the newest running
// request is preempted: its blocks are freed and it is computed again later from its tokens.
//
// Usage: 16_scheduler [--budget T] [--blocks N] [--block-size B]
//   --budget      tokens per step, 1..512 (default 8)
//   --blocks      blocks in the pool (default 12); the pool must hold the longest request
//   --block-size  positions per block, 1..64 (default 4)
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "args.hpp"
#include "glass/checkpoint.hpp"
#include "glass/errors.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/generate.hpp"
#include "glass/serve/engine.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_transformer.hpp"

using glass::serve::StepReport;

struct PlannedRequest {
    const char* prompt;
    int max_new_tokens;
    int arrival_step;  // added just before this step (steps count from 1)
};

// The text on one line: newlines shown as \n.
static std::string one_line(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
    return out;
}

static std::string ids_text(const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) s += (s.empty() ? "r" : " r") + std::to_string(id);
    return s;
}

static int run(int argc, char** argv) {
    int budget = 8, num_blocks = 12, block_size = 4;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) glass::fail("usage: 16_scheduler [--budget T] [--blocks N] [--block-size B]; '", a, "' needs a value");
        if (a == "--budget") budget = example::int_arg(argv[++i], "budget", 1, 512);
        else if (a == "--blocks") num_blocks = example::int_arg(argv[++i], "blocks", 1, 4096);
        else if (a == "--block-size") block_size = example::int_arg(argv[++i], "block size", 1, 64);
        else glass::fail("unknown argument '", a, "' (try --budget T, --blocks N or --block-size B)");
    }

    const glass::Model model = glass::load_llama2c_checkpoint(std::string(GLASS_MODELS_DIR) + "/stories260K.bin");
    const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(std::string(GLASS_MODELS_DIR) + "/tok512.bin", 512);

    const std::vector<PlannedRequest> planned = {
        {"Once upon a time", 18, 1},
        {"Lily and Ben went to the park with their mom and saw a big dog", 10, 1},
        {"The sun was hot", 14, 1},
        {"One day, a little bird", 8, 6},
    };
    glass::GenerateOptions greedy;
    greedy.sampling.temperature = 0.0f;  // greedy: the same story every run

    glass::serve::EngineOptions eo;
    eo.block_size = block_size;
    eo.num_blocks = num_blocks;
    eo.scheduler.max_tokens_per_step = budget;
    glass::serve::CpuPagedBackend backend(model);
    glass::serve::Engine engine(backend, tok, eo);

    std::printf("engine: budget %d tokens per step, pool %d blocks of %d positions, prefix caching on\n", budget,
                num_blocks, block_size);
    std::map<int, int> prompt_len;  // request id -> prompt tokens
    for (size_t i = 0; i < planned.size(); ++i) {
        const int n = static_cast<int>(tok.encode(planned[i].prompt, true, false).size());
        const int positions = n + planned[i].max_new_tokens - 1;  // the last token never needs K/V
        if (positions > num_blocks * block_size)
            glass::fail("request r", i, " needs ", positions, " positions but the pool holds only ", num_blocks * block_size,
                        " (", num_blocks, " blocks of ", block_size, "); give at least ",
                        (positions + block_size - 1) / block_size, " blocks");
        std::printf("r%zu: \"%s\" (%d prompt tokens), %d new tokens, arrives before step %d\n", i, planned[i].prompt, n,
                    planned[i].max_new_tokens, planned[i].arrival_step);
    }
    std::printf("\n");

    std::set<int> preempted_ever;
    std::map<int, glass::serve::RequestResult> results;
    int computed_tokens = 0, recomputed_tokens = 0;
    for (int step = 1; results.size() < planned.size(); ++step) {
        for (size_t i = 0; i < planned.size(); ++i)
            if (planned[i].arrival_step == step) {
                greedy.max_new_tokens = planned[i].max_new_tokens;
                prompt_len[engine.add_request(planned[i].prompt, greedy)] =
                    static_cast<int>(tok.encode(planned[i].prompt, true, false).size());
            }
        const StepReport report = engine.step();
        for (int id : report.preempted) preempted_ever.insert(id);

        // step 7: r0 decode 12, r1 prefill [8,16) | preempted r2 | finished r0 | waiting r3 | free 2
        std::string line;
        int tokens = 0;
        for (const StepReport::Part& p : report.batch) {
            if (!line.empty()) line += ", ";
            line += 'r';  // (one append at a time: GCC 12 warns falsely on "r" + std::string)
            line += std::to_string(p.id);
            if (!p.prefill) {
                line += " decode " + std::to_string(p.start);
            } else {
                line += preempted_ever.count(p.id) ? " recompute [" : " prefill [";
                line += std::to_string(p.start) + "," + std::to_string(p.start + p.n) + ")";
                if (preempted_ever.count(p.id)) recomputed_tokens += p.n;
            }
            tokens += p.n;
        }
        computed_tokens += tokens;
        std::printf("step %2d: %s (%d token%s)", step, line.empty() ? "nothing" : line.c_str(), tokens,
                    tokens == 1 ? "" : "s");
        if (!report.preempted.empty()) std::printf(" | preempted %s", ids_text(report.preempted).c_str());
        if (!report.finished.empty()) std::printf(" | finished %s", ids_text(report.finished).c_str());
        if (!report.waiting.empty()) std::printf(" | waiting %s", ids_text(report.waiting).c_str());
        std::printf(" | free %d\n", engine.blocks().num_free());
        for (glass::serve::RequestResult& r : engine.take_finished()) results[r.id] = std::move(r);
        if (step > 10000) glass::fail("the engine did not finish in 10000 steps");
    }
    std::printf("\ntokens computed: %d, of them recomputed after preemption: %d\n", computed_tokens, recomputed_tokens);

    // Each request alone, through generate() on one sequence of the same backend: the engine
    // must give exactly the same tokens, whatever ran beside them.
    glass::serve::CpuPagedBackend alone_backend(model);
    glass::serve::PagedSession alone(alone_backend, block_size);
    int same = 0;
    for (const auto& [id, r] : results) {
        const glass::GenerateResult want = glass::generate_from_ids(alone, tok, r.prompt_ids, [&] {
            glass::GenerateOptions o = greedy;
            o.max_new_tokens = planned[static_cast<size_t>(id)].max_new_tokens;
            return o;
        }());
        const bool equal = want.generated_ids == r.generated_ids;
        same += equal;
        std::printf("r%d text: %s%s\n", id, planned[static_cast<size_t>(id)].prompt, one_line(r.text).c_str());
        std::printf("r%d result: %zu new tokens, preempted %d time%s, same as alone: %s\n", id, r.generated_ids.size(),
                    r.preemptions, r.preemptions == 1 ? "" : "s", equal ? "yes" : "NO");
    }
    std::printf("requests equal to their run alone: %d of %zu\n", same, results.size());
    return 0;
}

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
