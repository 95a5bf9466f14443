// Tensor and pipeline parallelism (dist/tensor_parallel.hpp, dist/pipeline_parallel.hpp) with each
// rank a process: ctest runs this as `mpirun -n 2 ...`. Rank 0 drives the session, rank 1 follows;
// rank 0 also runs the same split with its ranks as threads of this process and compares: the
// transport must not change a bit. Pipeline stages must give one process's bits. The serving
// engine over the split backend (dist/parallel_paged_backend.hpp) too: the same bits over MPI as
// over threads, llama2.c's ids.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/checkpoint.hpp"
#include "glass/dist/mpi_communicator.hpp"
#include "glass/dist/parallel_paged_backend.hpp"
#include "glass/dist/parallel_session.hpp"
#include "glass/dist/thread_communicator.hpp"
#include "glass/serve/engine.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"

using glass::dist::Communicator;
using glass::dist::MpiCommunicator;
using glass::dist::TensorParallelSession;
using namespace std::chrono_literals;

namespace {

MpiCommunicator* g_world = nullptr;  // made in main
MpiCommunicator& world() { return *g_world; }

const glass::Model& shipped() {
    static const glass::Model model = glass::load_llama2c_checkpoint(GLASS_MODELS_DIR "/stories260K.bin");
    return model;
}

// The first greedy golden of llama2.c (ground truth: ../shared/goldens).
nlohmann::json first_greedy_golden() {
    std::ifstream in(GLASS_SHARED_DIR "/goldens/stories260K_greedy.jsonl");
    std::string line;
    REQUIRE(std::getline(in, line));
    return nlohmann::json::parse(line);
}

struct Trace {
    std::vector<int> ids;
    std::vector<std::vector<float>> logits;
};

// Rank 0: greedy decoding of `steps` tokens; the other ranks follow until rank 0 finishes.
template <typename SplitSession = TensorParallelSession>
Trace drive_or_follow(Communicator& comm, const std::vector<int>& prompt, int steps) {
    SplitSession s(shipped(), comm);
    Trace t;
    if (comm.rank() != 0) {
        s.follow();
        return t;
    }
    std::span<const float> l = s.prefill(prompt);
    for (int i = 0; i < steps; ++i) {
        t.logits.emplace_back(l.begin(), l.end());
        t.ids.push_back(static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin()));
        l = s.decode(t.ids.back());
    }
    s.finish();
    return t;
}

}  // namespace

TEST_CASE("mpi tp 2: the greedy golden's ids, and the same bits as the split run on threads") {
    const nlohmann::json g = first_greedy_golden();
    const std::vector<int> prompt = g["prompt_ids"].get<std::vector<int>>();
    const std::vector<int> expected = g["generated_ids"].get<std::vector<int>>();
    const int steps = static_cast<int>(expected.size());
    const Trace over_mpi = drive_or_follow(world(), prompt, steps);
    if (world().rank() != 0) return;
    CHECK(over_mpi.ids == expected);
    Trace over_threads;
    glass::dist::run_ranks(2, [&](Communicator& comm) {
        Trace t = drive_or_follow(comm, prompt, steps);
        if (comm.rank() == 0) over_threads = std::move(t);
    });
    REQUIRE(over_threads.logits.size() == over_mpi.logits.size());
    for (size_t i = 0; i < over_mpi.logits.size(); ++i) CHECK(over_mpi.logits[i] == over_threads.logits[i]);
}

TEST_CASE("mpi tp 2: per decoded token, one all-reduce for the embedding and two per layer, and one gather") {
    const int n_layers = shipped().config.n_layers;
    const std::vector<int> prompt = {1, 403, 407};
    TensorParallelSession s(shipped(), world());
    // The all-reduces and the gather run in the stage's group (here: both ranks), over MPI.
    if (world().rank() != 0) {
        const std::int64_t steps = s.follow();  // prefill and 4 decodes
        CHECK(steps == 5);
        CHECK(s.stage_group().counters().all_reduce.calls == 5 * (2 * n_layers + 1));
        CHECK(s.stage_group().counters().gather.calls == 5);
        return;
    }
    s.prefill(prompt);
    s.stage_group().reset_counters();  // after the prefill: rank 1 counts from its start, so 1 more step
    for (int i = 0; i < 4; ++i) s.decode(400 + i);
    const glass::dist::CommCounters c = s.stage_group().counters();
    CHECK(c.all_reduce.calls == 4 * (2 * n_layers + 1));
    // Each all-reduce of one row moves dim floats from each of the 2 ranks.
    CHECK(c.all_reduce.bytes == 4 * (2 * n_layers + 1) * 2 * shipped().config.dim * 4);
    CHECK(c.gather.calls == 4);
    s.finish();
}

TEST_CASE("mpi pp 2: one process's logits bit for bit, and the golden's ids") {
    const nlohmann::json g = first_greedy_golden();
    const std::vector<int> prompt = g["prompt_ids"].get<std::vector<int>>();
    const std::vector<int> expected = g["generated_ids"].get<std::vector<int>>();
    const int steps = static_cast<int>(expected.size());
    const Trace staged = drive_or_follow<glass::dist::PipelineParallelSession>(world(), prompt, steps);
    if (world().rank() != 0) return;
    CHECK(staged.ids == expected);
    glass::CpuSession one(shipped());
    std::span<const float> l = one.prefill(prompt);
    for (int i = 0; i < steps; ++i) {
        CHECK(std::equal(l.begin(), l.end(), staged.logits[static_cast<size_t>(i)].begin()));
        l = one.decode(expected[static_cast<size_t>(i)]);
    }
}

namespace {

struct GoldenRun {
    std::vector<std::vector<int>> ids;
    std::vector<std::vector<double>> logprobs;
};

// Every greedy golden of llama2.c as requests of one engine on the split backend at rank 0 of
// `comm` (the other ranks follow); what each request generated and its chosen logprobs.
GoldenRun engine_goldens(Communicator& comm, glass::dist::ParallelShape shape, int micro_batches) {
    static const glass::Llama2cTokenizer tok = glass::Llama2cTokenizer::load(GLASS_MODELS_DIR "/tok512.bin", 512);
    glass::dist::ParallelPagedBackend backend(shipped(), comm, shape, {.micro_batches = micro_batches});
    GoldenRun run;
    if (comm.rank() != 0) {
        backend.follow();
        return run;
    }
    glass::serve::EngineOptions eo;
    eo.num_blocks = 40 * 32;
    glass::serve::Engine engine(backend, tok, eo);
    std::ifstream in(GLASS_SHARED_DIR "/goldens/stories260K_greedy.jsonl");
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json g = nlohmann::json::parse(line);
        if (g["temperature"].get<double>() != 0.0) continue;
        glass::GenerateOptions o;
        o.sampling.temperature = 0.0f;
        o.logprobs = true;
        o.max_new_tokens = static_cast<int>(g["generated_ids"].size());
        engine.add_request_ids(g["prompt_ids"].get<std::vector<int>>(), o);
        run.ids.push_back(g["generated_ids"].get<std::vector<int>>());  // expected, replaced below
    }
    const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
    REQUIRE(results.size() == run.ids.size());
    for (size_t i = 0; i < results.size(); ++i) {
        CHECK(results[i].generated_ids == run.ids[i]);
        run.ids[i] = results[i].generated_ids;
        std::vector<double> lp;
        for (const auto& step : results[i].logprobs) lp.push_back(step.chosen.logprob);
        run.logprobs.push_back(lp);
    }
    backend.finish();
    return run;
}

}  // namespace

TEST_CASE("mpi: the serving engine on tp 2 and on pp 2 with 2 micro-batches: llama2.c's ids, the threads' bits") {
    const struct {
        glass::dist::ParallelShape shape;
        int micro;
    } grids[] = {{{.tp = 2, .pp = 1}, 1}, {{.tp = 1, .pp = 2}, 2}};
    for (const auto& g : grids) {
        INFO("tp " << g.shape.tp << ", pp " << g.shape.pp);
        const GoldenRun over_mpi = engine_goldens(world(), g.shape, g.micro);
        if (world().rank() != 0) continue;
        GoldenRun over_threads;
        glass::dist::run_ranks(2, [&](Communicator& comm) {
            GoldenRun r = engine_goldens(comm, g.shape, g.micro);
            if (comm.rank() == 0) over_threads = std::move(r);
        });
        CHECK(over_mpi.ids == over_threads.ids);
        CHECK(over_mpi.logprobs == over_threads.logprobs);
    }
}

int main(int argc, char** argv) {
    glass::dist::MpiRuntime runtime(&argc, &argv);
    int failed = 1;
    {
        MpiCommunicator world_comm({.patience = 20s});  // below mpirun's --timeout: a stuck rank names itself
        g_world = &world_comm;
        doctest::Context context(argc, argv);
        if (world_comm.rank() != 0) context.setOption("minimal", true);
        failed = context.run();
        g_world = nullptr;
    }
    return failed;
}
