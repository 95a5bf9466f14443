// Speculative decoding (speculative.hpp): the acceptance rule keeps the target's distribution
// (a statistical test that a wrong rule fails), greedy speculation is greedy decoding token for
// token on every golden, rollback leaves the cache as a plain run would, and bad input is refused.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "glass/fast/fast_session.hpp"
#include "glass/fast/random_model.hpp"
#include "glass/speculative.hpp"
#include "test_support.hpp"

namespace test_speculative {  // this file's own names (tests are built in unity batches)

namespace {

// ---- The rule, on small random distributions ----------------------------------------------------

constexpr int kVocab = 10;

std::vector<float> random_distribution(std::mt19937& rng) {
    std::vector<float> p(kVocab);
    float sum = 0;
    for (float& x : p) {
        const float u = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
        x = u * u * u;  // peaky, so that p and q differ a lot
        sum += x;
    }
    for (float& x : p) x /= sum;
    return p;
}

double total_variation(const std::vector<double>& a, const std::vector<float>& b) {
    double d = 0;
    for (int i = 0; i < kVocab; ++i) d += std::abs(a[size_t(i)] - double(b[size_t(i)]));
    return d / 2;
}

// Histograms of the emitted tokens by their index in the round, over `rounds` rounds with drafts
// drawn from q_1..q_k and the target's p_0..p_k given as logits ln p (softmax at T = 1 gives p back).
struct Emitted {
    std::vector<std::vector<double>> freq;  // [k+1][vocab], normalised per index
    std::vector<int> count;                 // [k+1] rounds that reached index j
};

Emitted run_rounds(const std::vector<std::vector<float>>& p, const std::vector<std::vector<float>>& q, int rounds,
                   glass::AcceptRule rule, std::uint64_t seed) {
    const int k = int(q.size());
    std::vector<float> logits;
    for (const auto& row : p)
        for (float x : row) logits.push_back(std::log(x));
    glass::SamplingParams params;  // T = 1, no truncation
    glass::Llama2cRng rule_rng(seed), draft_rng(seed + 1);
    Emitted e{std::vector<std::vector<double>>(size_t(k + 1), std::vector<double>(kVocab, 0.0)),
              std::vector<int>(size_t(k + 1), 0)};
    for (int r = 0; r < rounds; ++r) {
        glass::Draft d;
        for (int i = 0; i < k; ++i) {
            d.tokens.push_back(glass::draw_in_id_order(q[size_t(i)], draft_rng.next_f32()));
            d.q.push_back(q[size_t(i)]);
        }
        const glass::SpeculativeRound round = glass::judge_draft(logits, kVocab, d, params, rule_rng, rule);
        REQUIRE(round.emitted.size() == size_t(round.accepted + 1));
        for (size_t j = 0; j < round.emitted.size(); ++j) {
            e.freq[j][size_t(round.emitted[j])] += 1;
            ++e.count[j];
        }
    }
    for (size_t j = 0; j < e.freq.size(); ++j)
        for (double& f : e.freq[j]) f /= std::max(1, e.count[j]);
    return e;
}

}  // namespace

TEST_CASE("the acceptance rule emits the target's distribution p, and always-accept is caught") {
    std::mt19937 rng(2026);
    for (int k = 2; k <= 4; ++k) {
        CAPTURE(k);
        std::vector<std::vector<float>> p, q;  // p_0..p_k (target), q_1..q_k (draft)
        for (int i = 0; i <= k; ++i) p.push_back(random_distribution(rng));
        for (int i = 0; i < k; ++i) q.push_back(random_distribution(rng));
        const std::vector<float> other = random_distribution(rng);  // a distribution to be far from
        for (int i = 0; i < k; ++i) {
            std::vector<double> qd(q[size_t(i)].begin(), q[size_t(i)].end());
            REQUIRE(total_variation(qd, p[size_t(i)]) > 0.2);  // else the wrong rule could pass
        }

        // Index 0 of each round (always emitted) at growing sample counts: the distance to p
        // falls like 1/sqrt(n) (expected ~0.4 sqrt(vocab / n): 0.006 at 50,000), the distance to
        // another distribution does not.
        double previous = 1.0;
        for (const int n : {500, 5000, 50000}) {
            const Emitted e = run_rounds(p, q, n, glass::AcceptRule::exact, 7 + std::uint64_t(k));
            const double to_p = total_variation(e.freq[0], p[0]), to_other = total_variation(e.freq[0], other);
            CAPTURE(n);
            CHECK(to_p < previous);
            CHECK(to_p < 0.25 * to_other);
            previous = to_p;
            if (n == 50000) {
                CHECK(to_p < 0.02);
                // Later indices, among the rounds that got there: p_j too (fewer samples, so a
                // bound of 4 expected deviations for that count).
                for (int j = 1; j <= k; ++j) {
                    CAPTURE(j);
                    if (e.count[size_t(j)] < 1000) continue;
                    CHECK(total_variation(e.freq[size_t(j)], p[size_t(j)]) < 1.6 * std::sqrt(double(kVocab) / e.count[size_t(j)]));
                }
            }
        }
        // The wrong rule keeps every draft: index 0 then follows q_1, not p_0.
        const Emitted wrong = run_rounds(p, q, 50000, glass::AcceptRule::always_accept, 7 + std::uint64_t(k));
        CHECK(total_variation(wrong.freq[0], p[0]) > 0.1);
        CHECK(total_variation(wrong.freq[0], q[0]) < 0.02);
    }
}

TEST_CASE("accept_or_resample: certain acceptance, certain rejection, and refusals") {
    glass::Llama2cRng rng(1);
    const std::vector<float> p = {0.0f, 0.5f, 0.5f}, q_on_1 = {0.0f, 1.0f, 0.0f}, q_on_0 = {1.0f, 0.0f, 0.0f};
    for (int i = 0; i < 20; ++i) {
        // p(1)/q(1) = 0.5: kept about half the time; a rejection must then emit 2 (the residual).
        const glass::Verdict v = glass::accept_or_resample(p, q_on_1, 1, rng);
        CHECK(v.token == (v.accepted ? 1 : 2));
        // p(0) = 0: always rejected, and the residual is p itself here.
        const glass::Verdict w = glass::accept_or_resample(p, q_on_0, 0, rng);
        CHECK(!w.accepted);
        CHECK(w.token != 0);
    }
    CHECK_THROWS_WITH_AS(glass::accept_or_resample(p, q_on_1, 2, rng), doctest::Contains("probability 0"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::accept_or_resample(p, q_on_1, 3, rng), doctest::Contains("outside the vocabulary"),
                         glass::Error);
    CHECK_THROWS_WITH_AS(glass::accept_or_resample(p, std::vector<float>(2, 0.5f), 0, rng),
                         doctest::Contains("p has 3 entries but q has 2"), glass::Error);
}

TEST_CASE("draws from a truncated distribution never land on a dropped token, even past rounding") {
    // The kept mass sums to a hair under 1 here, as renormalised fp32 can; a coin past it falls off
    // the end of the cdf. llama2.c's fallback (the last id) would emit token 3, which has p = 0.
    const std::vector<float> kept = {0.25f, 0.0f, 0.7499f, 0.0f};
    CHECK(glass::draw_in_id_order(kept, 0.99995f) == 3);        // llama2.c's rule, kept for its goldens
    CHECK(glass::draw_kept_in_id_order(kept, 0.99995f) == 2);   // the last token with mass
    CHECK(glass::draw_kept_in_id_order(kept, 0.1f) == 0);
    CHECK(glass::draw_kept_in_id_order(kept, 0.3f) == 2);
    CHECK_THROWS_WITH_AS(glass::draw_kept_in_id_order(std::vector<float>(3, 0.0f), 0.5f),
                         doctest::Contains("no mass (3 entries)"), glass::Error);
}

// ---- On the shipped model -----------------------------------------------------------------------

namespace {

struct NamedDrafter {
    std::string name;
    std::function<std::unique_ptr<glass::Drafter>()> make;
};

// One drafter of each kind: n-gram lookup, the target's first layers (self-speculative), and a
// different, smaller model with the same vocabulary (random weights: rarely right, so it drives
// the rejection path as hard as the others drive acceptance).
std::vector<NamedDrafter> drafters() {
    static const glass::Model tiny = [] {
        glass::ModelConfig c = test::shipped().config;
        c.dim = 16, c.hidden_dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8;
        return glass::fast::random_model_in_memory(c, 5);
    }();
    static const glass::Model layers4 = glass::first_layers(test::shipped(), 4);
    return {{"ngram:3", [] { return std::make_unique<glass::NgramDrafter>(3); }},
            {"layers:4", [] {
                 return std::make_unique<glass::ModelDrafter>(std::make_unique<glass::CpuSession>(layers4), "layers:4");
             }},
            {"random 1-layer model", [] {
                 return std::make_unique<glass::ModelDrafter>(std::make_unique<glass::CpuSession>(tiny), "tiny");
             }}};
}

}  // namespace

TEST_CASE("greedy: every drafter and k = 1..8 give plain greedy's ids on all 36 goldens") {
    const auto goldens = test::read_jsonl(test::golden("stories260K_greedy.jsonl"));
    REQUIRE(goldens.size() == 36);
    glass::CpuSession target(test::shipped());
    for (const NamedDrafter& nd : drafters()) {
        CAPTURE(nd.name);
        std::int64_t proposed = 0, accepted = 0;
        for (int k = 1; k <= 8; ++k) {
            CAPTURE(k);
            const std::unique_ptr<glass::Drafter> drafter = nd.make();
            for (const auto& rec : goldens) {
                CAPTURE(rec["case"].get<std::string>());
                const glass::GenerateOptions options = test::golden_options(rec);
                const glass::SpeculativeResult s = glass::generate_speculative_from_ids(
                    target, *drafter, test::shipped_tok(), test::ids_of(rec["prompt_ids"]), options, {.k = k});
                CHECK(s.result.generated_ids == test::ids_of(rec["generated_ids"]));
                // The prefill, then one pass per round; each round emits its accepted drafts + 1.
                const int rounds = int(s.stats.rounds.size());
                CHECK(s.stats.target_passes == (options.max_new_tokens == 0 ? 0 : 1 + rounds));
                int emitted = options.max_new_tokens == 0 ? 0 : 1;
                for (const glass::SpeculativeRound& r : s.stats.rounds) {
                    CHECK(r.emitted.size() == size_t(r.accepted + 1));
                    CHECK(int(r.drafted.size()) <= k);
                    emitted += int(r.emitted.size());
                }
                CHECK(emitted >= int(s.result.generated_ids.size()));  // a stop may discard a round's tail
                proposed += s.stats.proposed;
                accepted += s.stats.accepted;
            }
        }
        // Drafts were made and taken (else this would test plain decoding only).
        MESSAGE(nd.name, ": ", accepted, " of ", proposed, " drafted tokens accepted");
        CHECK(proposed > 1000);
        CHECK(accepted > 0);
    }
}

TEST_CASE("self-speculation saves target passes; n-gram drafting finds repeats") {
    glass::CpuSession target(test::shipped());
    glass::GenerateOptions options;
    options.sampling.temperature = 0;
    options.max_new_tokens = 200;
    const glass::Model draft_model = glass::first_layers(test::shipped(), test::shipped().config.n_layers - 1);
    glass::ModelDrafter drafter(std::make_unique<glass::CpuSession>(draft_model), "layers");
    const glass::SpeculativeResult s =
        glass::generate_speculative(target, drafter, test::shipped_tok(), "Once upon a time", options, {.k = 4});
    const int generated = int(s.result.generated_ids.size());
    CHECK(s.stats.acceptance_rate() > 0.2);  // 0.29 measured
    CHECK(s.stats.target_passes < generated);  // plain decoding: one pass per generated token
    // The draft model reads fewer weight bytes per token than the target.
    CHECK(draft_model.weight_bytes < test::shipped().weight_bytes);

    glass::NgramDrafter ngram(2);
    glass::Llama2cRng rng(1);
    const std::vector<int> ids = {1, 5, 6, 7, 8, 5, 6};  // "5 6" seen before, followed by 7 8 5
    CHECK(ngram.propose(ids, 3, {}, rng).tokens == std::vector<int>{7, 8, 5});
    CHECK(ngram.propose(ids, 1, {}, rng).tokens == std::vector<int>{7});
    CHECK(ngram.propose(std::vector<int>{1, 2, 3}, 3, {}, rng).tokens.empty());  // nothing repeats
}

TEST_CASE("sampling: a seed replays every decision; stop rules and the cache as without speculation") {
    glass::CpuSession target(test::shipped());
    glass::GenerateOptions options;
    options.sampling.temperature = 1.0f;
    options.sampling.top_p = 0.9f;
    options.seed = 1234;
    options.max_new_tokens = 120;
    const glass::Model draft_model = glass::first_layers(test::shipped(), 3);
    const auto run = [&] {
        glass::ModelDrafter drafter(std::make_unique<glass::CpuSession>(draft_model), "layers");
        return glass::generate_speculative(target, drafter, test::shipped_tok(), "Once upon a time", options, {.k = 5});
    };
    const glass::SpeculativeResult a = run();
    const int cached = target.position();
    const glass::SpeculativeResult b = run();
    CHECK(a.result.generated_ids == b.result.generated_ids);
    REQUIRE(a.stats.rounds.size() == b.stats.rounds.size());
    for (size_t i = 0; i < a.stats.rounds.size(); ++i) {
        CHECK(a.stats.rounds[i].drafted == b.stats.rounds[i].drafted);
        CHECK(a.stats.rounds[i].accepted == b.stats.rounds[i].accepted);
        CHECK(a.stats.rounds[i].emitted == b.stats.rounds[i].emitted);
    }
    CHECK(a.stats.accepted > 0);
    CHECK(a.stats.accepted < a.stats.proposed);  // some rejections, so rollback ran

    // After the last round the cache holds the prompt and every generated token but the last, or
    // fewer if a stop cut a round short; K/V rows equal a plain pass over those ids.
    std::vector<int> seq = a.result.prompt_ids;
    seq.insert(seq.end(), a.result.generated_ids.begin(), a.result.generated_ids.end());
    REQUIRE(cached <= int(seq.size()));
    CHECK(cached >= int(a.result.prompt_ids.size()));
    glass::CpuSession plain(test::shipped());
    plain.prefill(std::span<const int>(seq).first(size_t(cached)));
    // The target's cache now holds run b, which is run a again: compare it.
    REQUIRE(target.position() == cached);
    double worst = 0;
    for (int l = 0; l < test::shipped().config.n_layers; ++l) {
        const glass::RowMatrix dk = target.cache().keys(l, cached) - plain.cache().keys(l, cached);
        const glass::RowMatrix dv = target.cache().values(l, cached) - plain.cache().values(l, cached);
        worst = std::max({worst, dk.cwiseAbs().maxCoeff() / (plain.cache().keys(l, cached).cwiseAbs().maxCoeff() + 1e-30),
                          dv.cwiseAbs().maxCoeff() / (plain.cache().values(l, cached).cwiseAbs().maxCoeff() + 1e-30)});
    }
    // fp32 on both sides; only the chunk sizes of the matrix products differ.
    CHECK(worst <= 1e-5);

    // A budget that ends inside a round: exactly max_new_tokens come out, stop reason "length".
    options.max_new_tokens = 7;
    const glass::SpeculativeResult c = run();
    CHECK(c.result.generated_ids.size() == 7);
    CHECK(c.result.stop_reason == glass::StopReason::length);
}

TEST_CASE("at the context limit: the same tokens and stop reason as plain decoding") {
    glass::GenerateOptions options;
    options.sampling.temperature = 0;
    options.max_new_tokens = 1000;  // more than the window holds
    options.stop_on_bos = false;
    glass::CpuSession plain_session(test::shipped()), target(test::shipped());
    const glass::GenerateResult plain = glass::generate(plain_session, test::shipped_tok(), "Once upon a time", options);
    REQUIRE(plain.stop_reason == glass::StopReason::context_full);
    glass::NgramDrafter ngram(3);  // the story repeats itself near the end: long accepted runs
    const glass::SpeculativeResult s =
        glass::generate_speculative(target, ngram, test::shipped_tok(), "Once upon a time", options, {.k = 8});
    CHECK(s.result.generated_ids == plain.generated_ids);
    CHECK(s.result.stop_reason == glass::StopReason::context_full);
    CHECK(target.position() <= target.config().seq_len);
    CHECK(s.stats.accepted > 0);
}

TEST_CASE("speculative decoding refuses bad input, naming it") {
    glass::CpuSession target(test::shipped());
    glass::NgramDrafter ngram(3);
    glass::GenerateOptions options;
    const std::vector<int> prompt = {1, 403, 407};
    for (int k : {0, 17, -1}) {
        const std::string want = "must be in [1, 16], got " + std::to_string(k);
        CHECK_THROWS_WITH_AS(glass::generate_speculative_from_ids(target, ngram, test::shipped_tok(), prompt, options, {.k = k}),
                             doctest::Contains(want.c_str()), glass::Error);
    }
    CHECK_THROWS_WITH_AS(glass::first_layers(test::shipped(), test::shipped().config.n_layers),
                         doctest::Contains("N in [1, 4]"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::first_layers(test::shipped(), 0), doctest::Contains("got 0"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::NgramDrafter(0), doctest::Contains("got 0"), glass::Error);
    // A drafter that proposes more than asked, or a token outside the vocabulary.
    struct Greedy : glass::Drafter {
        std::vector<int> tokens;
        std::string name() const override { return "scripted"; }
        glass::Draft propose(std::span<const int>, int, const glass::SamplingParams&, glass::Llama2cRng&) override {
            return {tokens, {}};
        }
    } scripted;
    options.max_new_tokens = 20;
    options.sampling.temperature = 0;
    scripted.tokens = std::vector<int>(10, 5);
    CHECK_THROWS_WITH_AS(glass::generate_speculative_from_ids(target, scripted, test::shipped_tok(), prompt, options, {.k = 4}),
                         doctest::Contains("proposed 10 tokens, more than the 4 asked"), glass::Error);
    scripted.tokens = {512};
    CHECK_THROWS_WITH_AS(glass::generate_speculative_from_ids(target, scripted, test::shipped_tok(), prompt, options, {.k = 4}),
                         doctest::Contains("drafter scripted proposed token 512, outside the vocabulary"), glass::Error);
    // The cache cannot rewind forward or below 0.
    target.reset();
    target.prefill(prompt);
    CHECK_THROWS_WITH_AS(target.rewind(4), doctest::Contains("cannot rewind to position 4"), glass::Error);
    CHECK_THROWS_WITH_AS(target.rewind(-1), doctest::Contains("cannot rewind to position -1"), glass::Error);
    target.rewind(1);
    CHECK(target.position() == 1);
}

// ---- The fast CPU path ------------------------------------------------------------------------

TEST_CASE("fast path: verify gives each row's decode logits, rewind forgets, greedy speculation is greedy") {
    const glass::Model& m = test::shipped();
    for (const int threads : {1, 2}) {
        CAPTURE(threads);
        glass::fast::FastOptions options;
        options.threads = threads;
        options.prefill_chunk = 3;  // verify's 6 positions in two chunks
        glass::fast::FastCpuSession fast(m, options);
        glass::CpuSession reference(m);
        const std::vector<int> prompt = {1, 403, 407}, chunk = {261, 378, 5, 9, 300, 44};
        fast.prefill(prompt);
        const std::span<const float> verified = fast.verify(chunk);  // positions 3..8
        const std::vector<float> rows(verified.begin(), verified.end());
        REQUIRE(rows.size() == chunk.size() * size_t(m.config.vocab_size));
        CHECK(fast.position() == 9);
        reference.prefill(prompt);
        for (size_t i = 0; i < chunk.size(); ++i) {
            const std::span<const float> want = reference.decode(chunk[i]);
            double worst = 0, largest = 0;
            for (int v = 0; v < m.config.vocab_size; ++v) {
                worst = std::max(worst, double(std::abs(rows[i * size_t(m.config.vocab_size) + size_t(v)] - want[size_t(v)])));
                largest = std::max(largest, double(std::abs(want[size_t(v)])));
            }
            CHECK(worst <= 1e-5 * largest);  // fp32 both sides, different summation order
        }
        // Back to the prompt: decoding on gives the reference's logits at position 3 again.
        fast.rewind(3);
        CHECK(fast.position() == 3);
        CHECK_THROWS_WITH_AS(fast.rewind(4), doctest::Contains("cannot rewind to position 4"), glass::Error);
        const std::span<const float> next = fast.decode(chunk[0]);
        glass::CpuSession again(m);
        again.prefill(prompt);
        const std::span<const float> want = again.decode(chunk[0]);
        for (int v = 0; v < m.config.vocab_size; ++v)
            CHECK(std::abs(next[size_t(v)] - want[size_t(v)]) <= 1e-5 * (1 + std::abs(want[size_t(v)])));
    }

    // Greedy on every golden, target and draft both on the fast path.
    glass::fast::FastOptions options;
    options.threads = 2;
    glass::fast::FastCpuSession target(m, options);
    const glass::Model draft_model = glass::first_layers(m, 4);
    for (const int k : {3, 8}) {
        glass::ModelDrafter drafter(std::make_unique<glass::fast::FastCpuSession>(draft_model, options), "layers:4");
        std::int64_t accepted = 0;
        for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
            CAPTURE(rec["case"].get<std::string>());
            const glass::SpeculativeResult s = glass::generate_speculative_from_ids(
                target, drafter, test::shipped_tok(), test::ids_of(rec["prompt_ids"]), test::golden_options(rec), {k});
            CHECK(s.result.generated_ids == test::ids_of(rec["generated_ids"]));
            accepted += s.stats.accepted;
        }
        CHECK(accepted > 0);
    }
}

// ---- Example 22_speculative and `glass generate --draft` ----------------------------------------

namespace {

// The example's run recomputed here: the shipped model, "Once upon a time", greedy, 60 tokens.
glass::SpeculativeResult example_run(int k, int layers, glass::GenerateResult* plain = nullptr) {
    glass::GenerateOptions options;
    options.sampling.temperature = 0;
    options.max_new_tokens = 60;
    glass::CpuSession target(test::shipped());
    static std::vector<std::unique_ptr<glass::Model>> drafts;  // outlive the drafter's session
    drafts.push_back(std::make_unique<glass::Model>(glass::first_layers(test::shipped(), layers)));
    glass::ModelDrafter drafter(std::make_unique<glass::CpuSession>(*drafts.back()), "layers");
    if (plain) {
        glass::CpuSession s(test::shipped());
        *plain = glass::generate(s, test::shipped_tok(), "Once upon a time", options);
    }
    return glass::generate_speculative(target, drafter, test::shipped_tok(), "Once upon a time", options, {.k = k});
}

void check_example(const std::string& out, int k, int layers) {
    glass::GenerateResult plain;
    const glass::SpeculativeResult s = example_run(k, layers, &plain);
    CHECK(test::value_of(out, "identical to plain greedy") == (s.result.generated_ids == plain.generated_ids ? "yes" : "NO"));
    CHECK(test::value_of(out, "identical to plain greedy") == "yes");
    CHECK(test::number(out, "generated tokens") == double(s.result.generated_ids.size()));
    CHECK(test::number(out, "target passes, plain") == double(plain.generated_ids.size()));
    CHECK(test::number(out, "target passes, speculative") == s.stats.target_passes);
    CHECK(test::number(out, "drafted tokens") == double(s.stats.proposed));
    CHECK(test::number(out, "accepted tokens") == double(s.stats.accepted));
    CHECK(std::abs(test::number(out, "acceptance rate") - s.stats.acceptance_rate()) <= 5e-4);  // printed %.3f
    CHECK(std::abs(test::number(out, "tokens per target pass") -
                   double(s.result.generated_ids.size()) / s.stats.target_passes) <= 5e-4);
    const double ratio = double(glass::first_layers(test::shipped(), layers).weight_bytes) / double(test::shipped().weight_bytes);
    CHECK(std::abs(test::number(out, "draft weight bytes per token / target's") - ratio) <= 5e-4);
    CHECK(ratio < 1.0);
    // One line per round, each with its kept count.
    for (size_t i = 0; i < s.stats.rounds.size(); ++i) {
        const std::string line = test::value_of(out, "round " + std::to_string(i + 1));
        const glass::SpeculativeRound& r = s.stats.rounds[i];
        CHECK(line.find("-> kept " + std::to_string(r.accepted) + "/" + std::to_string(r.drafted.size()) + ",") !=
              std::string::npos);
    }
    CHECK(out.find("round " + std::to_string(s.stats.rounds.size() + 1) + ":") == std::string::npos);

    // The sampling part: the exact rule lands on p (100,000 rounds: expected distance ~0.004),
    // the wrong one on q, as far from p as q itself is.
    const double pq = test::number(out, "distance between the target's p and the draft's q");
    CHECK(pq > 0.2);
    CHECK(test::number(out, "first token per round, exact rule, distance to p") < 0.01);
    CHECK(std::abs(test::number(out, "first token per round, accept-every-draft rule, distance to p") - pq) < 0.01);
    CHECK(test::number(out, "first token per round, accept-every-draft rule, distance to q") < 0.01);
}

}  // namespace

TEST_CASE("example 22_speculative: rounds, passes and acceptance as computed here; bad arguments named") {
    check_example(test::run_example("22_speculative").out, 4, 4);
    check_example(test::run_example("22_speculative", "2 3").out, 2, 3);
    for (const std::string bad : {"0", "17", "4 5", "4 0", "x"}) {
        const test::Run r = test::run(test::bin_dir() + "/22_speculative " + bad);
        CHECK(r.exit_code == 1);
        CHECK(r.err.find("is not an integer in") != std::string::npos);
    }
}

TEST_CASE("glass generate --draft: greedy ids unchanged, the --json counts, errors naming the flag") {
    const std::string glass = test::bin_dir() + "/glass generate -p 'Once upon a time' --temperature 0 -n 80 --json ";
    const test::Run plain = test::run(glass);
    REQUIRE(plain.exit_code == 0);
    const nlohmann::json want = nlohmann::json::parse(plain.out.substr(plain.out.find("\n{") + 1));
    for (const std::string draft : {"layers:4", "layers:1", "ngram", "ngram:2", "layers:4 --threads 2"}) {
        CAPTURE(draft);
        const test::Run r = test::run(glass + "--draft " + draft + " --draft-k 5");
        REQUIRE(r.exit_code == 0);
        const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find("\n{") + 1));
        CHECK(j["generated_ids"] == want["generated_ids"]);
        CHECK(j["text"] == want["text"]);
        CHECK(j["draft_k"] == 5);
        const long long proposed = j["draft_proposed"], accepted = j["draft_accepted"];
        CHECK(proposed > 0);
        CHECK(accepted <= proposed);
        CHECK(j["acceptance_rate"].get<double>() == doctest::Approx(double(accepted) / double(proposed)));
        // Each pass emits its accepted drafts plus one token.
        CHECK(j["target_passes"].get<long long>() >= j["generated_tokens"].get<long long>() - accepted);
        CHECK(r.err.find("drafted tokens accepted") != std::string::npos);
    }
    // Sampling with a seed: runs again identically.
    const std::string sampled = test::bin_dir() + "/glass generate -p 'Once upon a time' -n 80 --seed 3 --json --draft layers:4";
    const test::Run a = test::run(sampled), b = test::run(sampled);
    REQUIRE(a.exit_code == 0);
    REQUIRE(b.exit_code == 0);
    const nlohmann::json ja = nlohmann::json::parse(a.out.substr(a.out.find("\n{") + 1));
    const nlohmann::json jb = nlohmann::json::parse(b.out.substr(b.out.find("\n{") + 1));
    for (const char* field : {"generated_ids", "draft_proposed", "draft_accepted", "target_passes"})
        CHECK(ja[field] == jb[field]);

    const std::string dir = test::temp_dir("speculative");
    glass::ModelConfig other = test::shipped().config;
    other.vocab_size = 100;
    glass::fast::write_random_checkpoint(other, dir + "/vocab100.bin", 1);
    const struct { std::string args, message; } bad[] = {
        {"--draft layers:5", "N in [1, 4]"},
        {"--draft layers:x", "expected a number after ':'"},
        {"--draft ngram:0", "n must be in [1, 64], got 0"},
        {"--draft layers:2 --draft-k 0", "--draft-k must be in [1, 16], got 0"},
        {"--draft layers:2 --draft-k 17", "--draft-k must be in [1, 16], got 17"},
        {"--draft-k 3", "--draft-k applies with --draft"},
        {"--draft " + dir + "/missing.bin", "missing.bin"},
        {"--draft " + dir + "/vocab100.bin", "its vocabulary has 100 tokens, the target's 512"},
    };
    for (const auto& [args, message] : bad) {
        CAPTURE(args);
        const test::Run r = test::run(test::bin_dir() + "/glass generate -p hi " + args);
        CHECK(r.exit_code != 0);
        CHECK(r.err.find(message) != std::string::npos);
    }

    // A smaller model with the target's vocabulary, from a file: the third kind of draft.
    glass::ModelConfig small = test::shipped().config;
    small.dim = 32, small.hidden_dim = 64, small.n_layers = 2, small.n_heads = 4, small.n_kv_heads = 2, small.head_dim = 8;
    glass::fast::write_random_checkpoint(small, dir + "/small.bin", 3);
    const test::Run with_file = test::run(glass + "--draft " + dir + "/small.bin --draft-k 3");
    REQUIRE(with_file.exit_code == 0);
    const nlohmann::json jf = nlohmann::json::parse(with_file.out.substr(with_file.out.find("\n{") + 1));
    CHECK(jf["generated_ids"] == want["generated_ids"]);
    CHECK(jf["draft"] == dir + "/small.bin");
    CHECK(jf["draft_proposed"].get<long long>() > 0);
    std::filesystem::remove_all(dir);
}

}  // namespace test_speculative
