// The generate loop (journey steps 6–8) driven through a scripted Session, so every stopping rule
// and the position bookkeeping can be checked exactly; plus the same rules on the real model.
#include "test_support.hpp"

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
