// The generate loop (journey steps 6–8) driven through a scripted Session, so every stopping rule
// and the position bookkeeping can be checked exactly; plus the same rules on the real model, the
// per-token timestamps (TTFT, TPOT) through a deliberately slow Session, and the logprobs against
// an independent log-softmax (library and `glass generate --json --top-logprobs`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "test_support.hpp"

namespace test_generate {  // this file's own names (tests are built in unity batches)

namespace {

// A fake backend whose greedy choice at each step is a scripted token.
class ScriptedSession : public glass::Session {
public:
    ScriptedSession(std::vector<int> script, int seq_len) : script_(std::move(script)) {
        config_ = test::shipped().config;
        config_.seq_len = seq_len;
    }
    const glass::ModelConfig& config() const override { return config_; }
    int position() const override { return position_; }
    void reset() override { position_ = 0; }
    std::span<const float> prefill(std::span<const int> ids) override {
        prefill_sizes.push_back(static_cast<int>(ids.size()));
        position_ += static_cast<int>(ids.size());
        return next_logits();
    }
    std::span<const float> decode(int id) override {
        decoded.push_back(id);
        decode_positions.push_back(position_);  // where this token's K/V would be written
        position_ += 1;
        return next_logits();
    }
    std::int64_t kv_bytes_used() const override { return position_ * config_.kv_bytes_per_token(); }
    std::int64_t weight_bytes() const override { return 0; }

    std::vector<int> prefill_sizes, decoded, decode_positions;

private:
    std::span<const float> next_logits() {
        logits_.assign(size_t(config_.vocab_size), 0.0f);
        logits_[size_t(script_.at(step_++))] = 10.0f;
        return logits_;
    }
    glass::ModelConfig config_;
    std::vector<int> script_;
    size_t step_ = 0;
    int position_ = 0;
    std::vector<float> logits_;
};

glass::GenerateOptions greedy(int max_new) {
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = max_new;
    return o;
}

// The id of a piece that must exist in the shipped vocabulary.
int id(const char* piece) {
    const int i = test::shipped_tok().find(piece);
    REQUIRE_MESSAGE(i >= 0, "no piece '" << piece << "' in tok512");
    return i;
}

}  // namespace

TEST_CASE("prefill once, then one decode per token at positions n_prompt, n_prompt+1, ... (pitfall 9)") {
    const std::vector<int> script = {id(" a"), id(" c"), id("at"), id(" on")};
    ScriptedSession s(script, 512);
    const auto r = glass::generate(s, test::shipped_tok(), "Once upon", greedy(4));
    const int n_prompt = static_cast<int>(r.prompt_ids.size());
    CHECK(s.prefill_sizes == std::vector<int>{n_prompt});  // the whole prompt in one call
    CHECK(r.generated_ids == script);
    // The first token is chosen from prefill's logits and has no K/V until the next step.
    CHECK(s.decoded == std::vector<int>{script[0], script[1], script[2]});
    CHECK(s.decode_positions == std::vector<int>{n_prompt, n_prompt + 1, n_prompt + 2});
    CHECK(r.stop_reason == glass::StopReason::length);
    CHECK(r.text == " a cat on");
}

TEST_CASE("stopping: BOS (llama2.c's rule), EOS, stop strings, context full") {
    const auto& tok = test::shipped_tok();
    SUBCASE("BOS") {
        ScriptedSession s({id(" a"), 1, id(" the")}, 512);
        const auto r = glass::generate(s, tok, "Hi", greedy(10));
        CHECK(r.generated_ids == std::vector<int>{id(" a"), 1});
        CHECK(r.stop_reason == glass::StopReason::bos);
        CHECK(r.text == " a");
    }
    SUBCASE("EOS") {
        ScriptedSession s({id(" a"), 2, id(" the")}, 512);
        const auto r = glass::generate(s, tok, "Hi", greedy(10));
        CHECK(r.generated_ids == std::vector<int>{id(" a"), 2});
        CHECK(r.stop_reason == glass::StopReason::eos);
    }
    SUBCASE("stop string across tokens, not shown") {
        ScriptedSession s({id(" a"), id(" c"), id("at"), id(" on"), id(" the"), id(" a")}, 512);
        auto o = greedy(10);
        o.stop_strings = {"t on"};
        std::string streamed;
        const auto r = glass::generate(s, tok, "Hi", o, [&](std::string_view t) { streamed += t; });
        CHECK(r.stop_reason == glass::StopReason::stop_string);
        CHECK(r.text == " a ca");
        CHECK(streamed == r.text);
        CHECK(r.generated_ids.size() == 4);  // " on" completed the stop string
    }
    SUBCASE("the context window ends generation") {
        ScriptedSession s(std::vector<int>(20, id(" a")), 8);
        const auto r = glass::generate(s, tok, "Hi", greedy(100));
        const int n_prompt = static_cast<int>(r.prompt_ids.size());
        CHECK(r.stop_reason == glass::StopReason::context_full);
        CHECK(s.position() == 8);                                  // every position used, none past
        CHECK(static_cast<int>(r.generated_ids.size()) == 8 - n_prompt + 1);
    }
}

TEST_CASE("-n steps counts positions including the prompt, as run.c does") {
    CHECK(glass::new_tokens_for_steps(32, 5) == 28);
    CHECK(glass::new_tokens_for_steps(5, 5) == 1);
    CHECK(glass::new_tokens_for_steps(4, 5) == 0);
}

TEST_CASE("bad requests are clear errors") {
    glass::CpuSession session(test::shipped());
    std::string long_prompt;
    for (int i = 0; i < 600; ++i) long_prompt += " cat";
    CHECK_THROWS_WITH_AS(glass::generate(session, test::shipped_tok(), long_prompt, greedy(5)),
                         doctest::Contains("longer than the context window of 512"), glass::Error);
    const auto big = glass::Llama2cTokenizer::load(test::shared_dir() + "/models/tokenizer.bin");
    CHECK_THROWS_WITH_AS(glass::generate(session, big, "Hi", greedy(5)), doctest::Contains("32000"), glass::Error);
    auto negative = greedy(-1);
    CHECK_THROWS_WITH_AS(glass::generate(session, test::shipped_tok(), "Hi", negative), doctest::Contains("-1"), glass::Error);
}

TEST_CASE("real model: a stop string ends the story before it is shown; metrics are consistent") {
    glass::CpuSession session(test::shipped());
    auto o = greedy(100);
    o.stop_strings = {"Lily"};
    const auto r = glass::generate(session, test::shipped_tok(), "Once upon a time", o);
    CHECK(r.stop_reason == glass::StopReason::stop_string);
    CHECK(r.text == ", there was a little girl named ");  // golden: "... named Lily. She ..."
    const auto& m = r.metrics;
    CHECK(m.generated_tokens == static_cast<int>(r.generated_ids.size()));
    CHECK(m.ttft_ms > 0);
    CHECK(m.total_ms >= m.ttft_ms);
    CHECK(m.kv_bytes_per_token == 2 * 5 * 4 * 8 * 4);  // 2 · layers · kv_heads · head_dim · fp32
}

namespace {

using steady = std::chrono::steady_clock;

double ms_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// The real model, with every decode() first sleeping `delay` (a slow decode step on purpose), and
// the moment decode() was first called noted.
class SlowDecodeSession : public glass::Session {
public:
    SlowDecodeSession(glass::Session& inner, std::chrono::milliseconds delay) : inner_(inner), delay_(delay) {}
    const glass::ModelConfig& config() const override { return inner_.config(); }
    int position() const override { return inner_.position(); }
    void reset() override { inner_.reset(); }
    std::span<const float> prefill(std::span<const int> ids) override { return inner_.prefill(ids); }
    std::span<const float> decode(int id) override {
        if (decode_calls++ == 0) first_decode_call = steady::now();
        std::this_thread::sleep_for(delay_);
        return inner_.decode(id);
    }
    std::int64_t kv_bytes_used() const override { return inner_.kv_bytes_used(); }
    std::int64_t weight_bytes() const override { return inner_.weight_bytes(); }

    int decode_calls = 0;
    steady::time_point first_decode_call{};

private:
    glass::Session& inner_;
    std::chrono::milliseconds delay_;
};

}  // namespace

TEST_CASE("timestamps: TTFT ends when prefill's token is chosen, before any decode; TPOT is the mean gap") {
    // Not a speed test: every bound below follows from the order of events, and sleep_for never
    // returns early. A TTFT taken after the first decode step would include a 50 ms sleep that
    // begins after first_decode_call, so it could not be <= first_decode_call - t_before.
    glass::CpuSession cpu(test::shipped());
    SlowDecodeSession slow(cpu, std::chrono::milliseconds(50));
    const auto t_before = steady::now();
    const auto r = glass::generate(slow, test::shipped_tok(), "Once upon a time", greedy(4));
    const auto t_after = steady::now();
    REQUIRE(slow.decode_calls == 3);  // 4 tokens: the first from prefill, three decode steps
    const glass::GenerationMetrics& m = r.metrics;
    CHECK(m.ttft_ms > 0);
    CHECK(m.ttft_ms <= ms_between(t_before, slow.first_decode_call));

    REQUIRE(m.token_ms.size() == 4);  // one timestamp per generated token
    CHECK(m.token_ms.front() == m.ttft_ms);
    CHECK(m.token_ms.back() == m.total_ms);
    CHECK(m.total_ms <= ms_between(t_before, t_after));
    double gap_sum = 0;
    for (size_t i = 1; i < m.token_ms.size(); ++i) {
        CHECK(m.token_ms[i] - m.token_ms[i - 1] >= 50.0);  // each later token waited for one decode
        gap_sum += m.token_ms[i] - m.token_ms[i - 1];
    }
    CHECK(m.tpot_ms == doctest::Approx(gap_sum / 3).epsilon(1e-12));  // the mean gap after the first
    // The delay changed when, not what.
    glass::CpuSession plain(test::shipped());
    CHECK(r.generated_ids == glass::generate(plain, test::shipped_tok(), "Once upon a time", greedy(4)).generated_ids);
}

namespace {

// ln softmax(logits) in long double, written out here independently of glass.
std::vector<long double> log_softmax_ld(std::span<const float> logits) {
    long double max_value = logits[0], sum = 0;
    for (float l : logits) max_value = std::max(max_value, static_cast<long double>(l));
    for (float l : logits) sum += std::exp(static_cast<long double>(l) - max_value);
    std::vector<long double> out;
    for (float l : logits) out.push_back(static_cast<long double>(l) - max_value - std::log(sum));
    return out;
}

// Feeds the prompt and the generated ids through a fresh CpuSession and checks every step's
// logprobs against log_softmax_ld of the logits that step saw. Tolerance 1e-9: both sides start
// from the same fp32 logits (a CpuSession is deterministic) and work in double or better; a
// 512-term double sum of exponentials is off by ~1e-13 relative, so 1e-9 is loose yet far below
// any real difference (logprobs of neighbouring tokens differ by > 1e-6).
void check_logprobs_against_replay(const glass::GenerateResult& r, int k) {
    REQUIRE(r.logprobs.size() == r.generated_ids.size());
    glass::CpuSession replay(test::shipped());
    std::vector<float> logits;
    for (size_t step = 0; step < r.generated_ids.size(); ++step) {
        CAPTURE(step);
        const std::span<const float> l =
            step == 0 ? replay.prefill(r.prompt_ids) : replay.decode(r.generated_ids[step - 1]);
        const std::vector<long double> expected = log_softmax_ld(l);
        const glass::StepLogprobs& s = r.logprobs[step];
        CHECK(s.chosen.id == r.generated_ids[step]);
        CHECK(std::fabs(s.chosen.logprob - static_cast<double>(expected[static_cast<size_t>(s.chosen.id)])) <= 1e-9);
        REQUIRE(static_cast<int>(s.top.size()) == k);
        // The k largest, found here by sorting every id (ties: lower id first).
        std::vector<int> order(expected.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return expected[static_cast<size_t>(a)] > expected[static_cast<size_t>(b)];
        });
        double mass = 0;
        for (int i = 0; i < k; ++i) {
            CHECK(s.top[size_t(i)].id == order[size_t(i)]);
            CHECK(std::fabs(s.top[size_t(i)].logprob - static_cast<double>(expected[size_t(order[size_t(i)])])) <= 1e-9);
            if (i > 0) CHECK(s.top[size_t(i)].logprob <= s.top[size_t(i - 1)].logprob);  // descending
            CHECK(s.top[size_t(i)].logprob <= 0.0);
            mass += std::exp(s.top[size_t(i)].logprob);
        }
        CHECK(mass <= 1.0 + 1e-12);  // probabilities of distinct tokens
    }
}

}  // namespace

TEST_CASE("logprobs: log-softmax of the raw logits, the chosen token and the top K, descending") {
    SUBCASE("greedy: the chosen token is the most likely one") {
        glass::CpuSession session(test::shipped());
        auto o = greedy(12);
        o.top_logprobs = 5;
        const auto r = glass::generate(session, test::shipped_tok(), "Once upon a time", o);
        check_logprobs_against_replay(r, 5);
        for (const glass::StepLogprobs& s : r.logprobs) {
            CHECK(s.top.front().id == s.chosen.id);
            CHECK(s.chosen.logprob < 0.0);  // not 0: the model's own probability, not greedy's one-hot
        }
    }
    SUBCASE("sampled at T = 0.7 with top-p 0.5: still temperature 1, before truncation") {
        glass::CpuSession session(test::shipped());
        glass::GenerateOptions o;
        o.sampling.temperature = 0.7f;
        o.sampling.top_p = 0.5f;
        o.seed = 7;
        o.max_new_tokens = 20;
        o.top_logprobs = glass::kMaxTopLogprobs;
        const auto r = glass::generate(session, test::shipped_tok(), "Once upon a time", o);
        check_logprobs_against_replay(r, 20);
    }
    SUBCASE("logprobs without alternatives") {
        glass::CpuSession session(test::shipped());
        auto o = greedy(6);
        o.logprobs = true;
        const auto r = glass::generate(session, test::shipped_tok(), "Once upon a time", o);
        check_logprobs_against_replay(r, 0);
    }
    SUBCASE("K = 0 and no logprobs: nothing recorded") {
        glass::CpuSession session(test::shipped());
        const auto r = glass::generate(session, test::shipped_tok(), "Once upon a time", greedy(6));
        CHECK(r.generated_ids.size() == 6);
        CHECK(r.logprobs.empty());
    }
    SUBCASE("K outside 0..20 is an error naming it") {
        glass::CpuSession session(test::shipped());
        for (int bad : {-1, 21}) {
            auto o = greedy(3);
            o.top_logprobs = bad;
            CHECK_THROWS_WITH_AS(glass::generate(session, test::shipped_tok(), "Hi", o),
                                 doctest::Contains(std::to_string(bad).c_str()), glass::Error);
        }
    }
    SUBCASE("equal logits: ties list the lower id first") {
        const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
        const glass::StepLogprobs s = glass::step_logprobs(logits, 2, 4);
        REQUIRE(s.top.size() == 4);
        CHECK(s.top[0].id == 1);
        CHECK(s.top[1].id == 2);
        CHECK(s.top[2].id == 4);
        CHECK(s.top[3].id == 0);
        // ln(e^3 / (e^1 + 3 e^3 + e^0)), by hand
        const double expected = 3.0 - std::log(std::exp(1.0) + 3 * std::exp(3.0) + 1.0);
        CHECK(std::fabs(s.chosen.logprob - expected) <= 1e-12);
        CHECK(glass::step_logprobs(logits, 0, 99).top.size() == 5);  // at most the vocabulary
    }
}

TEST_CASE("cli: generate --json --top-logprobs K reports each step's logprobs; bad K is refused") {
    const std::string glass_cmd = test::bin_dir() + "/glass generate -p 'Once upon a time' -n 12 --temperature 0";
    const auto json_of = [](const test::Run& run) {
        REQUIRE(run.exit_code == 0);
        const std::string last = run.out.substr(run.out.rfind('\n', run.out.size() - 2) + 1);
        return nlohmann::json::parse(last);
    };
    // The library's numbers (checked against an independent log-softmax above), for comparison.
    glass::CpuSession session(test::shipped());
    const int n_prompt = static_cast<int>(test::shipped_tok().encode("Once upon a time", true, false).size());
    auto o = greedy(glass::new_tokens_for_steps(12, n_prompt));
    o.top_logprobs = 3;
    const auto lib = glass::generate(session, test::shipped_tok(), "Once upon a time", o);

    const nlohmann::json j = json_of(test::run(glass_cmd + " --json --top-logprobs 3"));
    REQUIRE(j.contains("logprobs"));
    const nlohmann::json& steps = j["logprobs"];
    REQUIRE(steps.size() == j["generated_ids"].size());
    REQUIRE(steps.size() == lib.logprobs.size());
    std::string text;
    for (size_t i = 0; i < steps.size(); ++i) {
        CAPTURE(i);
        CHECK(steps[i]["id"] == j["generated_ids"][i]);
        CHECK(steps[i]["logprob"].get<double>() == lib.logprobs[i].chosen.logprob);  // JSON round-trips doubles
        text += steps[i]["token"].get<std::string>();
        REQUIRE(steps[i]["top_logprobs"].size() == 3);
        for (size_t t = 0; t < 3; ++t) {
            const nlohmann::json& alt = steps[i]["top_logprobs"][t];
            CHECK(alt["id"] == lib.logprobs[i].top[t].id);
            CHECK(alt["logprob"].get<double>() == lib.logprobs[i].top[t].logprob);
            CHECK(alt["token"] == test::shipped_tok().decode(i == 0 ? lib.prompt_ids.back() : lib.generated_ids[i - 1],
                                                             alt["id"].get<int>()));
        }
    }
    CHECK(text == j["text"].get<std::string>());  // each chosen "token" is the text it added

    CHECK_FALSE(json_of(test::run(glass_cmd + " --json")).contains("logprobs"));
    CHECK_FALSE(json_of(test::run(glass_cmd + " --json --top-logprobs 0")).contains("logprobs"));
    for (const char* bad : {"21", "-1"}) {
        const test::Run r = test::run(glass_cmd + " --json --top-logprobs " + bad);
        CHECK(r.exit_code == 2);
        CHECK(r.err.find(bad) != std::string::npos);
    }
    const test::Run no_json = test::run(glass_cmd + " --top-logprobs 3");
    CHECK(no_json.exit_code == 2);
    CHECK(no_json.err.find("--json") != std::string::npos);
}

}  // namespace test_generate
