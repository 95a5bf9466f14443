// Speculative decoding inside the serving engine (engine.hpp with draft_k > 0): greedy ids are
// the goldens whatever the budget, drafted positions come out of the step's budget and give
// their blocks back, a sampled request draws what generate_speculative() draws alone, and the
// paged backends' every-row logits are the decode logits. Plus `glass serve-bench --draft`.
#include <doctest/doctest.h>

#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/speculative.hpp"
#include "relative_error.hpp"
#include "test_support.hpp"

namespace test_speculative_engine {  // this file's own names (tests are built in unity batches)

using glass::serve::CpuPagedBackend;
using glass::serve::Engine;
using glass::serve::EngineOptions;

namespace {

// The drafters of the engine tests: prompt lookup, and the target's first 4 layers (each request
// gets its own ModelDrafter, with its own CpuSession and so its own K/V).
const glass::Model& layers4() {
    static const glass::Model m = glass::first_layers(test::shipped(), 4);
    return m;
}

std::function<std::unique_ptr<glass::Drafter>()> drafter_named(const std::string& name) {
    if (name == "ngram:3") return [] { return std::make_unique<glass::NgramDrafter>(3); };
    return [] { return std::make_unique<glass::ModelDrafter>(std::make_unique<glass::CpuSession>(layers4()), "layers:4"); };
}

std::vector<nlohmann::json> goldens(const char* file) { return test::read_jsonl(test::golden(file)); }

// Steps an engine to the end, checking each step's plan: no more positions than the budget,
// drafts only on decode parts, and no running request holding blocks past what its tokens use.
struct StepTotals {
    long long drafted = 0, accepted = 0;
    int steps = 0, steps_with_drafts = 0, trimmed = 0;  // trimmed: a decode given fewer drafts than draft_k
};

StepTotals run_checked(Engine& engine, int budget, int draft_k) {
    StepTotals t;
    while (engine.has_unfinished()) {
        const glass::serve::StepReport report = engine.step();
        ++t.steps;
        int positions = 0;
        bool drafted = false;
        for (const auto& part : report.batch) {
            positions += part.n;
            if (part.drafted > 0) {
                drafted = true;
                CHECK_FALSE(part.prefill);
                CHECK(part.n == 1 + part.drafted);
                CHECK(part.accepted >= 0);
                CHECK(part.accepted <= part.drafted);
                t.drafted += part.drafted;
                t.accepted += part.accepted;
                t.trimmed += part.drafted < draft_k;
            } else {
                CHECK(part.accepted == -1);
            }
        }
        CHECK(positions <= budget);
        t.steps_with_drafts += drafted;
        for (const glass::serve::Request* r : engine.scheduler().running())
            CHECK(static_cast<int>(r->block_table.size()) <= engine.blocks().blocks_for(static_cast<int>(r->tokens.size())));
    }
    CHECK(engine.blocks().num_free() == engine.blocks().num_blocks());  // the pool comes back whole
    return t;
}

}  // namespace

TEST_CASE("paged backends: verify's rows are the decode logits one by one; rewind forgets") {
    const glass::Model& m = test::shipped();
    CpuPagedBackend reference(m);
    glass::fast::FastOptions fo;
    fo.threads = 2;
    glass::fast::FastPagedBackend fast(m, fo);
    const std::vector<int> prompt = test::shipped_tok().encode("Once upon a time", true, false);
    const std::vector<int> chunk = {263, 2217, 29871, 1};  // any ids: verify checks whatever it is given
    for (glass::serve::PagedBackend* backend : {static_cast<glass::serve::PagedBackend*>(&reference),
                                                static_cast<glass::serve::PagedBackend*>(&fast)}) {
        glass::serve::PagedSession one_by_one(*backend, 5);
        one_by_one.prefill(prompt);
        std::vector<std::vector<float>> want;
        for (const int id : chunk) {
            const std::span<const float> l = one_by_one.decode(id % m.config.vocab_size);
            want.emplace_back(l.begin(), l.end());
        }
        glass::serve::PagedSession checked(*backend, 5);
        checked.prefill(prompt);
        std::vector<int> ids;
        for (const int id : chunk) ids.push_back(id % m.config.vocab_size);
        const std::span<const float> rows = checked.verify(ids);
        const size_t vocab = static_cast<size_t>(m.config.vocab_size);
        REQUIRE(rows.size() == ids.size() * vocab);
        CHECK(checked.position() == static_cast<int>(prompt.size() + ids.size()));
        // Same backend, same per-row arithmetic: a row of a chunk is computed as a lone token is.
        for (size_t i = 0; i < ids.size(); ++i)
            CHECK(test::relative_error(rows.subspan(i * vocab, vocab), want[i]) <= 1e-6);
        // Keep the first two checked tokens; the next decode sees positions 0..len+1 only.
        checked.rewind(static_cast<int>(prompt.size()) + 2);
        const std::span<const float> again = checked.decode(ids[2]);
        CHECK(test::relative_error(again, want[2]) <= 1e-6);
        CHECK_THROWS_WITH_AS(checked.rewind(checked.position() + 1), doctest::Contains("rewind"), glass::Error);
    }
}

TEST_CASE("greedy in the engine: all 36 goldens, batched, for each drafter and a roomy or a tight budget") {
    // Budget 512: every decode gets its full lookahead. Budget 9: most decodes get fewer drafts
    // than k, or none; the ids cannot change either way.
    const std::vector<nlohmann::json> all = goldens("stories260K_greedy.jsonl");
    REQUIRE(all.size() == 36);
    for (const std::string drafter : {"ngram:3", "layers:4"})
        for (const int budget : {512, 9}) {
            CAPTURE(drafter);
            CAPTURE(budget);
            CpuPagedBackend backend(test::shipped());
            EngineOptions eo;
            eo.num_blocks = 36 * 32;
            eo.block_size = 7;
            eo.scheduler.max_running = 64;
            eo.scheduler.max_tokens_per_step = budget;
            eo.draft_k = 4;
            eo.make_drafter = drafter_named(drafter);
            Engine engine(backend, test::shipped_tok(), eo);
            for (const nlohmann::json& g : all) engine.add_request(g["prompt"].get<std::string>(), test::golden_options(g));
            const StepTotals t = run_checked(engine, budget, eo.draft_k);
            const std::vector<glass::serve::RequestResult> results = engine.take_finished();
            REQUIRE(results.size() == all.size());
            long long proposed = 0, accepted = 0;
            for (const glass::serve::RequestResult& r : results) {
                const nlohmann::json& g = all[static_cast<size_t>(r.id)];
                CAPTURE(g["case"].get<std::string>());
                CHECK(r.generated_ids == test::ids_of(g["generated_ids"]));
                proposed += r.draft_proposed;
                accepted += r.draft_accepted;
            }
            CHECK(proposed == t.drafted);  // the results count what the steps checked
            CHECK(accepted == t.accepted);
            CHECK(t.steps_with_drafts > 0);
            CHECK(accepted > 0);
            if (budget == 9) CHECK(t.trimmed > 0);  // the budget did cut drafts
        }
}

TEST_CASE("sampled in the engine: each request draws exactly what generate_speculative() draws alone") {
    // With a roomy budget every request gets its full lookahead each step, so its RNG is spent
    // in the same order as alone: draft draws, then the rule's coins. The target alone is a
    // PagedSession over a second backend of the same kind (the same arithmetic per row).
    std::vector<nlohmann::json> cases = goldens("stories260K_sampling.jsonl");
    for (const nlohmann::json& g : goldens("stories260K_greedy.jsonl"))
        if (g["case"].get<std::string>().ends_with("_n32")) cases.push_back(g);
    for (const std::string drafter : {"ngram:3", "layers:4"}) {
        CAPTURE(drafter);
        CpuPagedBackend backend(test::shipped()), alone_backend(test::shipped());
        EngineOptions eo;
        eo.num_blocks = 64 * 32;
        eo.scheduler.max_running = 64;
        eo.scheduler.max_tokens_per_step = 4096;
        eo.draft_k = 3;
        eo.make_drafter = drafter_named(drafter);
        Engine engine(backend, test::shipped_tok(), eo);
        std::vector<glass::GenerateOptions> options;
        for (const nlohmann::json& g : cases) {
            glass::GenerateOptions o = test::golden_options(g);
            if (o.sampling.temperature == 0.0f) {  // also sampled: a seed per case, top-p on half
                o.sampling.temperature = 0.8f;
                o.seed = 7 + options.size();
                if (options.size() % 2) o.sampling.top_p = 0.9f;
            }
            options.push_back(o);
            engine.add_request(g["prompt"].get<std::string>(), o);
        }
        const std::vector<glass::serve::RequestResult> results = engine.run_to_completion();
        REQUIRE(results.size() == cases.size());
        glass::serve::PagedSession target(alone_backend);
        long long accepted = 0;
        for (size_t i = 0; i < cases.size(); ++i) {
            CAPTURE(cases[i]["case"].get<std::string>());
            const std::unique_ptr<glass::Drafter> d = drafter_named(drafter)();
            const glass::SpeculativeResult alone = glass::generate_speculative(
                target, *d, test::shipped_tok(), cases[i]["prompt"].get<std::string>(), options[i], {3});
            CHECK(results[i].generated_ids == alone.result.generated_ids);
            CHECK(results[i].draft_proposed == alone.stats.proposed);
            CHECK(results[i].draft_accepted == alone.stats.accepted);
            accepted += results[i].draft_accepted;
        }
        CHECK(accepted > 0);
    }
}

TEST_CASE("engine speculation: preemption, prefix caching and cancels keep the pool consistent; greedy ids hold") {
    // A pool too small for everyone: requests are preempted and recomputed while others draft.
    const std::vector<nlohmann::json> all = goldens("stories260K_greedy.jsonl");
    CpuPagedBackend backend(test::shipped());
    EngineOptions eo;
    eo.block_size = 4;
    eo.num_blocks = 96;  // 384 positions for 12 requests of up to 256 each
    eo.scheduler.max_tokens_per_step = 48;
    eo.draft_k = 5;
    eo.make_drafter = drafter_named("layers:4");
    Engine engine(backend, test::shipped_tok(), eo);
    std::vector<const nlohmann::json*> picked;
    for (const nlohmann::json& g : all)
        if (g["case"].get<std::string>().ends_with("_n256") && picked.size() < 12) picked.push_back(&g);
    REQUIRE(picked.size() >= 6);
    for (const nlohmann::json* g : picked) engine.add_request((*g)["prompt"].get<std::string>(), test::golden_options(*g));
    const int cancelled = engine.add_request("Once upon a time", test::golden_options(*picked[0]));
    for (int i = 0; i < 5; ++i) engine.step();
    engine.cancel(cancelled);
    run_checked(engine, eo.scheduler.max_tokens_per_step, eo.draft_k);
    int preempted = 0;
    for (const glass::serve::RequestResult& r : engine.take_finished()) {
        if (r.id == cancelled) {
            CHECK(r.stop_reason == glass::StopReason::cancelled);
            continue;
        }
        CAPTURE((*picked[static_cast<size_t>(r.id)])["case"].get<std::string>());
        CHECK(r.generated_ids == test::ids_of((*picked[static_cast<size_t>(r.id)])["generated_ids"]));
        CHECK(r.draft_accepted <= r.draft_proposed);
        preempted += r.preemptions;
    }
    CHECK(preempted > 0);  // the pool was small enough to matter
}

TEST_CASE("engine speculation refuses bad options, naming them") {
    CpuPagedBackend backend(test::shipped());
    EngineOptions eo;
    eo.draft_k = 17;
    eo.make_drafter = drafter_named("ngram:3");
    CHECK_THROWS_WITH_AS(Engine(backend, test::shipped_tok(), eo), doctest::Contains("must be in [0, 16], got 17"),
                         glass::Error);
    eo.draft_k = 2;
    eo.make_drafter = nullptr;
    CHECK_THROWS_WITH_AS(Engine(backend, test::shipped_tok(), eo), doctest::Contains("draft k is 2 but no drafter"),
                         glass::Error);
}

TEST_CASE("glass serve-bench --draft: the same tokens in fewer steps, the counts in --json, flag errors") {
    const std::string base = test::bin_dir() + "/glass serve-bench -m " + test::shipped_model() +
                             " --requests 6 --rate 0 --prompt-len 8:24 --gen 40:60 --backend reference --json ";
    for (const std::string draft : {"layers:4", "ngram"}) {
        CAPTURE(draft);
        const test::Run r = test::run(base + "--draft " + draft + " --draft-k 4");
        REQUIRE(r.exit_code == 0);
        const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1));
        const long long proposed = j["draft_proposed"], accepted = j["draft_accepted"];
        CHECK(j["draft"] == draft);
        CHECK(j["draft_k"] == 4);
        CHECK(proposed > 0);
        CHECK(accepted <= proposed);
        CHECK(j["acceptance_rate"].get<double>() == doctest::Approx(double(accepted) / double(proposed)));
        // Every step with drafts emits its accepted ones on top: fewer steps than without, by
        // at most the accepted count (the same load, the same greedy tokens).
        const int steps = j["steps"], plain = j["steps_without_draft"];
        CHECK(steps <= plain);
        CHECK(plain - steps <= accepted);
        CHECK(r.out.find("C15 draft " + draft + ", k 4:") != std::string::npos);
    }
    const test::Run bad = test::run(base + "--draft-k 3");
    CHECK(bad.exit_code != 0);
    CHECK(bad.err.find("--draft-k applies with --draft") != std::string::npos);
    const test::Run bad_layers = test::run(base + "--draft layers:9");
    CHECK(bad_layers.exit_code != 0);
    CHECK(bad_layers.err.find("N in [1, 4]") != std::string::npos);
}

}  // namespace test_speculative_engine
