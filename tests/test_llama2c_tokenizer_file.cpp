// Loading a llama2.c tokenizer file (tok512.bin, Llama 2's tokenizer.bin), and every way the
// file or an id can be bad.
//
// Bad input must become a glass::Error whose message names the problem and the offending value
// (a size, a piece, an id). Expected values come from the file bytes parsed here independently.
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "bad_input_support.hpp"
#include "test_support.hpp"

namespace test_llama2c_tokenizer_file {  // this file's own names (tests are built in unity batches)

using test::contains;
using test::error_of;
using test::f32_at;
using test::i32_at;
using test::mentions;
using test::put_i32;
using test::read_bytes;
using test::TempFile;

namespace {

// ---- helpers -------------------------------------------------------------------------------

const std::vector<char>& tok512_bytes() {
    static const std::vector<char> bytes = read_bytes(test::shipped_tokenizer());
    return bytes;
}
std::string llama2_tokenizer_path() { return test::shared_dir() + "/models/tokenizer.bin"; }

// Offsets of every entry of a llama2.c tokenizer file, parsed here independently.
struct TokEntry {
    size_t score_at, len_at, bytes_at;
    std::int32_t len;
};
std::vector<TokEntry> tok_entries(const std::vector<char>& b) {
    std::vector<TokEntry> e;
    size_t at = 4;
    while (at + 8 <= b.size()) {
        TokEntry t{at, at + 4, at + 8, i32_at(b, at + 4)};
        if (t.len < 0) break;
        e.push_back(t);
        at = t.bytes_at + static_cast<size_t>(t.len);
    }
    REQUIRE(at == b.size());
    return e;
}

}  // namespace

// ---- the tokenizer file --------------------------------------------------------------------

TEST_CASE("tokenizer file: without a model the vocabulary is every entry in the file") {
    const std::vector<char> tok512 = tok512_bytes();
    CHECK(tok_entries(tok512).size() == 512);
    CHECK(glass::Llama2cTokenizer::load(test::shipped_tokenizer()).vocab_size() == 512);

    const std::vector<char> llama2 = read_bytes(llama2_tokenizer_path());
    CHECK(tok_entries(llama2).size() == 32000);
    const auto big = glass::Llama2cTokenizer::load(llama2_tokenizer_path());
    CHECK(big.vocab_size() == 32000);
    // And the pieces are the file's pieces, read here independently.
    const auto entries = tok_entries(llama2);
    for (const int id : {0, 1, 2, 3, 258, 259, 1000, 31999}) {
        CAPTURE(id);
        const TokEntry& e = entries[static_cast<size_t>(id)];
        CHECK(big.piece(id) == std::string(llama2.data() + e.bytes_at, static_cast<size_t>(e.len)));
        CHECK(big.score(id) == f32_at(llama2, e.score_at));
    }
}

TEST_CASE("tokenizer file: a vocabulary size other than the model's is rejected with both sizes") {
    SUBCASE("Llama 2's 32000 pieces for the 512-token model") {
        const std::string msg = error_of([] { (void)glass::Llama2cTokenizer::load(llama2_tokenizer_path(), 512); });
        CAPTURE(msg);
        CHECK(mentions(msg, 32000));
        CHECK(mentions(msg, 512));
        CHECK(contains(msg, llama2_tokenizer_path()));
    }
    SUBCASE("tok512 for a 32000-token model") {
        const std::string msg = error_of([] { (void)glass::Llama2cTokenizer::load(test::shipped_tokenizer(), 32000); });
        CAPTURE(msg);
        CHECK(mentions(msg, 32000));
        CHECK(mentions(msg, 512));
    }
    SUBCASE("the shipped model's vocabulary matches tok512") {
        CHECK(glass::Llama2cTokenizer::load(test::shipped_tokenizer(), test::shipped().config.vocab_size)
                  .vocab_size() == 512);
    }
}

TEST_CASE("tokenizer file: missing, empty, and bad max_token_length") {
    SUBCASE("missing") {
        const std::string path = "/tmp/glass_test_tok_does_not_exist_" + std::to_string(::getpid()) + ".bin";
        const std::string msg = error_of([&] { (void)glass::Llama2cTokenizer::load(path); });
        CAPTURE(msg);
        CHECK(contains(msg, path));
    }
    SUBCASE("empty") {
        TempFile f({});
        const std::string msg = error_of([&] { (void)glass::Llama2cTokenizer::load(f.path); });
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
    }
    for (const std::int32_t v : {0, -1, INT32_MIN, (1 << 16) + 1, INT32_MAX}) {
        CAPTURE(v);
        std::vector<char> b = tok512_bytes();
        put_i32(b, 0, v);
        TempFile f(b);
        const std::string msg = error_of([&] { (void)glass::Llama2cTokenizer::load(f.path); });
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
        CHECK(mentions(msg, v));
    }
}

TEST_CASE("tokenizer file: a truncated entry names the piece") {
    const std::vector<char>& full = tok512_bytes();
    const std::vector<TokEntry> entries = tok_entries(full);
    const TokEntry& last = entries.back();  // id 511
    REQUIRE(entries.size() == 512);
    REQUIRE(last.len >= 2);
    struct Cut {
        const char* what;
        size_t keep;
    };
    const Cut cuts[] = {
        {"inside the last piece's text", last.bytes_at + static_cast<size_t>(last.len) - 1},
        {"right after the last piece's length", last.bytes_at},
        {"inside the last piece's length", last.len_at + 2},
        {"inside the last piece's score", last.score_at + 1},
    };
    for (const Cut& c : cuts) {
        const std::string what = c.what;
        CAPTURE(what);
        std::vector<char> b(full.begin(), full.begin() + static_cast<long>(c.keep));
        TempFile f(b);
        const std::string msg = error_of([&] { (void)glass::Llama2cTokenizer::load(f.path); });
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
        CHECK(mentions(msg, 511));
    }
}

TEST_CASE("tokenizer file: a negative or too long piece length names the piece and the length") {
    const std::vector<TokEntry> entries = tok_entries(tok512_bytes());
    const std::int32_t max_len = i32_at(tok512_bytes(), 0);
    REQUIRE(max_len >= 1);
    for (const std::int32_t bad : {-1, -7, INT32_MIN, max_len + 1, 1 << 20, INT32_MAX}) {
        CAPTURE(bad);
        std::vector<char> b = tok512_bytes();
        put_i32(b, entries[100].len_at, bad);
        TempFile f(b);
        const std::string msg = error_of([&] { (void)glass::Llama2cTokenizer::load(f.path); });
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
        CHECK(mentions(msg, 100));
        CHECK(mentions(msg, bad));
    }
}

TEST_CASE("tokenizer: piece/decode/score of an id outside the vocabulary names the id") {
    const glass::Llama2cTokenizer& tok = test::shipped_tok();
    for (const int id : {-1, 512, 513, INT32_MIN, INT32_MAX}) {
        CAPTURE(id);
        std::string msg = error_of([&] { (void)tok.piece(id); });
        CAPTURE(msg);
        CHECK(mentions(msg, id));
        CHECK(mentions(msg, 512));
        msg = error_of([&] { (void)tok.decode(1, id); });
        CHECK(mentions(msg, id));
        msg = error_of([&] { (void)tok.decode(-1, id); });
        CHECK(mentions(msg, id));
        msg = error_of([&] { (void)tok.score(id); });
        CHECK(mentions(msg, id));
        msg = error_of([&] { (void)tok.decode_all({1, 300, id}); });
        CHECK(mentions(msg, id));
    }
    // The edges of the valid range work.
    CHECK(tok.piece(0) == "<unk>");
    CHECK(tok.piece(511).size() > 0);
    const auto big = glass::Llama2cTokenizer::load(llama2_tokenizer_path());
    const std::string msg = error_of([&] { (void)big.piece(32000); });
    CHECK(mentions(msg, 32000));
}

}  // namespace test_llama2c_tokenizer_file
