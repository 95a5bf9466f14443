// Tensor parallelism on the CPU reference (dist/shard.hpp, dist/tensor_parallel.hpp), with the
// ranks as threads of this process (dist/thread_communicator.hpp). The same session over Open MPI
// processes is tests/dist/.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>

#include "glass/glass.hpp"
#include "parallel_support.hpp"
#include "relative_error.hpp"
#include "test_support.hpp"

namespace test_tensor_parallel {  // this file's own names (tests are built in unity batches)

using glass::dist::Communicator;
using glass::dist::TensorParallelSession;
using glass::dist::TensorSplit;

namespace {

using test::argmax;
using test::greedy_trace;
using test::Trace;

Trace tensor_parallel_trace(const glass::Model& m, int tp, std::span<const int> prompt, int steps) {
    return test::grid_trace(m, {.tp = tp, .pp = 1}, prompt, steps);
}

// Largest |a - b| / max|b| over a step's logits.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < b.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    }
    return worst / scale;
}

}  // namespace

TEST_CASE("tensor_split: heads, KV heads, MLP units and vocabulary rows per rank; splits that do not divide are refused") {
    const glass::ModelConfig c = test::shipped().config;  // 8 heads, 4 KV heads, hidden 172, vocab 512
    SUBCASE("tp 2: KV heads split like query heads") {
        const TensorSplit s = glass::dist::tensor_split(c, 1, 2);
        CHECK(s.head_begin == 4);
        CHECK(s.heads == 4);
        CHECK(s.kv_head_begin == 2);
        CHECK(s.kv_heads == 2);
        CHECK(s.hidden_begin == 86);
        CHECK(s.hidden == 86);
        CHECK(s.vocab_begin == 256);
        CHECK(s.vocab == 256);
    }
    SUBCASE("more ranks than KV heads: each rank keeps the one its query heads read") {
        glass::ModelConfig g = c;
        g.hidden_dim = 176;
        for (int r = 0; r < 8; ++r) {
            const TensorSplit s = glass::dist::tensor_split(g, r, 8);
            CHECK(s.heads == 1);
            CHECK(s.kv_heads == 1);
            CHECK(s.kv_head_begin == s.head_begin / g.heads_per_kv_head());  // the KV head of its query head
        }
    }
    SUBCASE("a vocabulary that does not divide: equal slices, the last shorter") {
        int total = 0;
        glass::ModelConfig g = c;
        g.n_heads = 6;
        g.n_kv_heads = 3;
        g.hidden_dim = 171;
        for (int r = 0; r < 3; ++r) {
            const TensorSplit s = glass::dist::tensor_split(g, r, 3);
            CHECK(s.vocab_stride == 171);
            CHECK(s.vocab_begin == 171 * r);
            total += s.vocab;
        }
        CHECK(total == 512);
        CHECK(glass::dist::tensor_split(g, 2, 3).vocab == 170);
    }
    SUBCASE("refusals name the count") {
        CHECK_THROWS_WITH_AS(glass::dist::tensor_split(c, 0, 8), doctest::Contains("hidden_dim 172"), glass::Error);
        glass::ModelConfig six = c;
        six.n_heads = 6;
        six.n_kv_heads = 6;
        CHECK_THROWS_WITH_AS(glass::dist::tensor_split(six, 0, 4), doctest::Contains("6 heads"), glass::Error);
        glass::ModelConfig three_kv = c;
        three_kv.n_kv_heads = 3;
        three_kv.n_heads = 12;
        CHECK_THROWS_WITH_AS(glass::dist::tensor_split(three_kv, 0, 2), doctest::Contains("3 KV heads"), glass::Error);
        CHECK_THROWS_WITH_AS(glass::dist::tensor_split(c, 2, 2), doctest::Contains("rank 2"), glass::Error);
        CHECK_THROWS_AS(glass::dist::tensor_split(c, 0, 0), glass::Error);
    }
}

TEST_CASE("shard_model: the ranks' slices put back together are the whole model's weights") {
    const glass::Model& m = test::shipped();
    const int tp = 2;
    std::vector<glass::Model> shards;
    for (int r = 0; r < tp; ++r) shards.push_back(glass::dist::shard_model(m, glass::dist::tensor_split(m.config, r, tp)));
    const glass::LayerWeights& w = m.layers[1];
    const Eigen::Index half_q = m.config.q_dim() / 2, half_kv = m.config.kv_dim() / 2, half_h = m.config.hidden_dim / 2;
    for (int r = 0; r < tp; ++r) {
        const glass::LayerWeights& s = shards[static_cast<size_t>(r)].layers[1];
        CHECK(s.wq == w.wq.middleRows(r * half_q, half_q));
        CHECK(s.wk == w.wk.middleRows(r * half_kv, half_kv));
        CHECK(s.wv == w.wv.middleRows(r * half_kv, half_kv));
        CHECK(s.wo == w.wo.middleCols(r * half_q, half_q));
        CHECK(s.w1 == w.w1.middleRows(r * half_h, half_h));
        CHECK(s.w2 == w.w2.middleCols(r * half_h, half_h));
        CHECK(s.w3 == w.w3.middleRows(r * half_h, half_h));
        CHECK(s.rms_att == w.rms_att);
        CHECK(shards[static_cast<size_t>(r)].embedding_table() == m.embedding_table().middleRows(r * 256, 256));
    }
    // Each rank holds about half of the per-position weights (the norms are whole on both).
    CHECK(shards[0].weight_bytes + shards[1].weight_bytes >= m.weight_bytes);
    CHECK(shards[0].weight_bytes < m.weight_bytes * 6 / 10);
}

TEST_CASE("tp 1 is the reference itself: the same logits, bit for bit") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    glass::CpuSession one(m);
    const Trace reference = greedy_trace(one, prompt, 8);
    const Trace tp1 = tensor_parallel_trace(m, 1, prompt, 8);
    CHECK(tp1.ids == reference.ids);
    for (size_t i = 0; i < reference.logits.size(); ++i) CHECK(tp1.logits[i] == reference.logits[i]);
}

TEST_CASE("tp 2 and 4 on the shipped model: logits within 1e-5 of one process, every greedy golden's ids exactly") {
    const glass::Model& m = test::shipped();
    const std::vector<test::GreedyGolden> goldens = test::greedy_goldens();
    REQUIRE(goldens.size() >= 30);
    for (const test::GreedyGolden& g : goldens) {
        INFO("golden " << g.name);
        CHECK(tensor_parallel_trace(m, 2, g.prompt, g.steps()).ids == g.expected);
    }
    const std::vector<int>& prompt = goldens[0].prompt;
    const std::vector<int>& expected = goldens[0].expected;
    const int steps = goldens[0].steps();
    glass::CpuSession one(m);
    const Trace reference = greedy_trace(one, prompt, steps);
    for (const int tp : {2, 4}) {
        INFO("tp " << tp);
        const Trace split = tensor_parallel_trace(m, tp, prompt, steps);
        CHECK(split.ids == expected);
        double worst = 0.0;
        for (size_t i = 0; i < split.logits.size(); ++i)
            worst = std::max(worst, relative_gap(split.logits[i], reference.logits[i]));
        // Wo's and W2's dot products summed in tp pieces instead of one: a few fp32 roundings.
        CHECK(worst < 1e-5);
        CHECK(worst > 0.0);  // the pieces really are summed differently (else this test shows nothing)
    }
}

TEST_CASE("every family's deltas split: biases, per-head norms, sandwich norms, soft-caps, windows (tp 2 and 4)") {
    const std::vector<int> prompt = {1, 5, 17, 33, 60, 2, 71, 90, 11, 42};
    for (const char* family : {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"}) {
        const glass::Model m = glass::fast::random_family_model(glass::fast::small_family_config(family), 7);
        glass::CpuSession one(m);
        const Trace reference = greedy_trace(one, prompt, 12);
        for (const int tp : {2, 4}) {  // 4 heads, 2 KV heads: tp 4 replicates each KV head on 2 ranks
            INFO(family << ", tp " << tp);
            const Trace split = tensor_parallel_trace(m, tp, prompt, 12);
            CHECK(split.ids == reference.ids);
            for (size_t i = 0; i < split.logits.size(); ++i) CHECK(relative_gap(split.logits[i], reference.logits[i]) < 1e-5);
        }
    }
}

TEST_CASE("every rank holds the same bits after each all-reduce, and two runs agree exactly") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    const Trace first = tensor_parallel_trace(m, 2, prompt, 6);
    const Trace second = tensor_parallel_trace(m, 2, prompt, 6);
    CHECK(first.logits == second.logits);
    // The residual stream after the last layer, compared across ranks: verify() on every rank
    // returns logits only at rank 0, so look at the final norm's input through a one-layer model.
    std::vector<std::vector<float>> streams(2);
    glass::dist::run_ranks(2, [&](Communicator& comm) {
        const TensorSplit s = glass::dist::tensor_split(m.config, comm.rank(), 2);
        const glass::Model shard = glass::dist::shard_model(m, s);
        glass::KVCache cache(shard.config);
        glass::RowMatrix x = glass::dist::embed_split(shard, s, prompt, 1.0f, comm);
        glass::dist::AllReducePartials partials(comm);
        for (int l = 0; l < m.config.n_layers; ++l)
            glass::transformer_block(shard.config, shard.layers[static_cast<size_t>(l)], l, x, cache, nullptr, &partials);
        streams[static_cast<size_t>(comm.rank())].assign(x.data(), x.data() + x.size());
    });
    CHECK(streams[0] == streams[1]);
}

TEST_CASE("the driver refuses bad input before the workers hear of it; the session keeps working") {
    const glass::Model& m = test::shipped();
    std::vector<int> after;
    glass::dist::run_ranks(2, [&](Communicator& comm) {
        TensorParallelSession s(m, comm);
        if (comm.rank() != 0) {
            s.follow();
            return;
        }
        const int bad[1] = {512};
        CHECK_THROWS_WITH_AS(s.prefill(bad), doctest::Contains("token id 512"), glass::Error);
        CHECK_THROWS_WITH_AS(s.rewind(3), doctest::Contains("rewind"), glass::Error);
        const int good[2] = {1, 403};
        s.prefill(good);
        s.rewind(1);
        CHECK(s.position() == 1);
        after.push_back(argmax(s.decode(403)));
        s.reset();
        after.push_back(argmax(s.prefill(good)));
    });
    CHECK(after[0] == after[1]);  // rewinding to 1 and decoding 403 is prefilling {1, 403}
}

TEST_CASE("a model that cannot be split is refused on every rank with the count named") {
    glass::ModelConfig c = glass::fast::small_family_config("llama2");  // 4 heads
    const glass::Model m = glass::fast::random_family_model(c, 3);
    CHECK_THROWS_WITH_AS(glass::dist::run_ranks(3, [&](Communicator& comm) { TensorParallelSession s(m, comm); }),
                         doctest::Contains("4 heads"), glass::Error);
}

}  // namespace test_tensor_parallel
