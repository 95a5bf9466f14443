// Streaming text (journey step 8): never half a UTF-8 character, never part of a stop string.
#include "test_support.hpp"

namespace test_streaming {  // this file's own names (tests are built in unity batches)

namespace {

bool is_valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const int n = glass::utf8::char_length_at(s, i);
        if (n <= 0) return false;
        i += size_t(n);
    }
    return true;
}

}  // namespace

TEST_CASE("bytes fed one at a time come out as whole characters only") {
    const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87!";  // café 😀 中文!
    glass::Utf8Stream stream;
    std::string out;
    for (char byte : text) {
        const std::string chunk = stream.push(std::string(1, byte));
        CHECK(is_valid_utf8(chunk));  // every chunk on its own is whole characters
        out += chunk;
    }
    out += stream.finish();
    CHECK(out == text);
    glass::Utf8Stream s2;
    CHECK(s2.push("\xF0\x9F") == "");  // half an emoji is held back...
    CHECK(s2.held_bytes() == 2);
    CHECK(s2.push("\x98\x80") == "\xF0\x9F\x98\x80");  // ...until it completes
}

TEST_CASE("invalid bytes become U+FFFD; an unfinished tail at the end too") {
    glass::Utf8Stream stream;
    CHECK(stream.push("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
    CHECK(stream.push("\x80") == "\xEF\xBF\xBD");         // lone continuation byte
    CHECK(stream.push("\xC3(") == "\xEF\xBF\xBD(");       // lead byte followed by a non-continuation
    CHECK(stream.push("\xE2\x82") == "");                 // could still become €
    CHECK(stream.finish() == "\xEF\xBF\xBD\xEF\xBF\xBD"); // but the stream ended
    CHECK(glass::utf8::sanitize("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
    CHECK(glass::utf8::sanitize("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
}

TEST_CASE("tokens decoded through the tokenizer stream an emoji whole (byte fallback + stream)") {
    const auto& tok = test::shipped_tok();
    const std::vector<int> ids = tok.encode("The dog \xF0\x9F\x90\xB6 was happy", true, false);
    glass::Utf8Stream stream;
    std::vector<std::string> chunks;
    for (size_t i = 1; i < ids.size(); ++i) chunks.push_back(stream.push(tok.decode(ids[i - 1], ids[i])));
    std::string all;
    for (const auto& c : chunks) {
        CHECK(is_valid_utf8(c));
        all += c;
    }
    CHECK(all + stream.finish() == "The dog \xF0\x9F\x90\xB6 was happy");
    // Three of the chunks were empty: the emoji's first three bytes waited for the fourth.
    CHECK(std::count(chunks.begin(), chunks.end(), std::string()) == 3);
}

TEST_CASE("stop strings are cut out, even when they arrive split across tokens") {
    glass::StopStringFilter f({"the end", "###"});
    std::string shown;
    for (const char* piece : {"and that was ", "th", "e e", "nd of it"}) shown += f.push(piece);
    CHECK(f.stopped());
    CHECK(shown == "and that was ");
    CHECK(f.push("more") == "");

    glass::StopStringFilter g({"the end"});
    CHECK(g.push("so th") == "so ");    // "th" might start "the end": held
    CHECK(g.push("ey left") == "they lef");  // it did not; but the final "t" might
    CHECK(g.push(" #") == "t #");
    CHECK(g.finish() == "");
    CHECK(!g.stopped());

    glass::StopStringFilter none({});
    CHECK(none.push("anything") == "anything");
}

}  // namespace test_streaming
