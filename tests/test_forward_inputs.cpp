// A forward pass given input it cannot run: token ids outside the vocabulary, prompts longer than
// the context window. Each must become a glass::Error naming the value and leave the session as it
// was.
#include <climits>
#include <span>
#include <string>
#include <vector>

#include "bad_input_support.hpp"
#include "test_support.hpp"

namespace test_forward_inputs {  // this file's own names (tests are built in unity batches)

using test::error_of;
using test::mentions;

// ---- forward-pass errors -------------------------------------------------------------------

TEST_CASE("forward: a token id outside the vocabulary is rejected and leaves the session usable") {
    const glass::Model& m = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378};  // "Once upon a time" (golden)
    for (const int bad : {-1, 512, 100000, INT32_MIN}) {
        CAPTURE(bad);
        glass::CpuSession s(m);
        std::vector<int> ids = prompt;
        ids.push_back(bad);
        std::string msg = error_of([&] { (void)s.prefill(ids); });
        CAPTURE(msg);
        CHECK(mentions(msg, bad));
        CHECK(s.position() == 0);

        ids.assign(1, bad);
        msg = error_of([&] { (void)s.prefill(ids); });
        CHECK(mentions(msg, bad));
        CHECK(s.position() == 0);

        (void)s.prefill(prompt);
        REQUIRE(s.position() == 5);
        msg = error_of([&] { (void)s.decode(bad); });
        CHECK(mentions(msg, bad));
        CHECK(s.position() == 5);
    }
    // The failed call must not have corrupted the cache: the next decode matches a session that
    // never saw the bad id.
    glass::CpuSession dirty(m), clean(m);
    (void)dirty.prefill(prompt);
    (void)clean.prefill(prompt);
    (void)error_of([&] { (void)dirty.decode(512); });
    const auto a = dirty.decode(432);
    const std::vector<float> got(a.begin(), a.end());
    const auto b = clean.decode(432);
    const std::vector<float> want(b.begin(), b.end());
    CHECK(dirty.position() == 6);
    CHECK(got == want);
}

TEST_CASE("forward: a prompt longer than the context window and decoding past it are rejected") {
    const glass::Model& m = test::shipped();
    REQUIRE(m.config.seq_len == 512);
    std::vector<int> ids(513);
    ids[0] = 1;
    for (size_t i = 1; i < ids.size(); ++i) ids[i] = 3 + static_cast<int>(i % 500);

    glass::CpuSession s(m);
    std::string msg = error_of([&] { (void)s.prefill(ids); });
    CAPTURE(msg);
    CHECK(mentions(msg, 513));
    CHECK(mentions(msg, 512));
    CHECK(s.position() == 0);

    msg = error_of([&] { (void)s.prefill(std::vector<int>{}); });
    CHECK(s.position() == 0);

    // 512 positions fit exactly; the 513th does not, whether decoded or prefilled.
    ids.pop_back();
    const auto logits = s.prefill(ids);
    CHECK(logits.size() == 512);
    CHECK(s.position() == 512);
    msg = error_of([&] { (void)s.decode(300); });
    CAPTURE(msg);
    CHECK(mentions(msg, 512));
    CHECK(s.position() == 512);
    msg = error_of([&] { (void)s.prefill(std::vector<int>{300, 301}); });
    CHECK(mentions(msg, 512));
    CHECK(s.position() == 512);

    // Prefill in two chunks that overflow together.
    glass::CpuSession t(m);
    (void)t.prefill(std::span<const int>(ids.data(), 500));
    std::vector<int> more(13, 300);
    msg = error_of([&] { (void)t.prefill(more); });
    CHECK(mentions(msg, 513));
    CHECK(mentions(msg, 512));
    CHECK(t.position() == 500);
    // 12 more still fit.
    more.pop_back();
    (void)t.prefill(more);
    CHECK(t.position() == 512);
}

TEST_CASE("forward: generate() rejects a prompt longer than the context window") {
    const glass::Model& m = test::shipped();
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    // Digits are single pieces in tok512 and never merge (golden 'pi': 3.14159 -> one id each).
    std::string prompt(511, '7');
    const int n = static_cast<int>(tok.encode(prompt, true, false).size());
    REQUIRE(n == 513);  // BOS, dummy space, 511 digits
    glass::CpuSession s(m);
    glass::GenerateOptions opt;
    opt.max_new_tokens = 4;
    const std::string msg = error_of([&] { (void)glass::generate(s, tok, prompt, opt); });
    CAPTURE(msg);
    CHECK(mentions(msg, 513));
    CHECK(mentions(msg, 512));
}

}  // namespace test_forward_inputs
