// What the parallelism tests share: greedy decoding at rank 0 of a grid of ranks that are threads
// (dist/parallel_session.hpp), and llama2.c's greedy goldens as prompt and expected ids.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "test_support.hpp"

namespace test {

// Each step's logits and greedy id, `steps` tokens after the prompt.
struct Trace {
    std::vector<int> ids;
    std::vector<std::vector<float>> logits;
};

inline int argmax(std::span<const float> v) {
    return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline Trace greedy_trace(glass::Session& s, std::span<const int> prompt, int steps) {
    Trace t;
    std::span<const float> l = s.prefill(prompt);
    for (int i = 0; i < steps; ++i) {
        t.logits.emplace_back(l.begin(), l.end());
        t.ids.push_back(argmax(l));
        l = s.decode(t.ids.back());
    }
    return t;
}

// The same, at rank 0 of a tp × pp grid of threads; the other ranks follow.
inline Trace grid_trace(const glass::Model& m, glass::dist::ParallelShape shape, std::span<const int> prompt, int steps,
                        glass::dist::ParallelSessionOptions options = {}) {
    Trace t;
    glass::dist::run_ranks(shape.tp * shape.pp, [&](glass::dist::Communicator& comm) {
        glass::dist::ParallelSession s(m, comm, shape, options);
        if (comm.rank() != 0) {
            s.follow();
            return;
        }
        t = greedy_trace(s, prompt, steps);
        s.finish();
    });
    return t;
}

// llama2.c's greedy continuations of the shipped model (../shared/goldens).
struct GreedyGolden {
    std::string name;
    std::vector<int> prompt, expected;
    int steps() const { return static_cast<int>(expected.size()); }
};

inline std::vector<GreedyGolden> greedy_goldens() {
    std::vector<GreedyGolden> goldens;
    for (const nlohmann::json& g : read_jsonl(golden("stories260K_greedy.jsonl")))
        if (g["temperature"].get<double>() == 0.0)
            goldens.push_back({g["case"].get<std::string>(), ids_of(g["prompt_ids"]), ids_of(g["generated_ids"])});
    return goldens;
}

}  // namespace test
