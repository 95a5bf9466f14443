// Training a BPE vocabulary (bpe_train.hpp, bpe_train_file.hpp): merges worked out by hand,
// determinism, the fast trainer equal to the plain one, the tiktoken-format round trip,
// decode(encode(x)) == x for any bytes, bad input, and the numbers example 02 prints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "glass/tokenize/bpe_train.hpp"
#include "glass/formats/bpe_train_file.hpp"
#include "test_support.hpp"

namespace test_bpe_train {  // this file's own names (tests are built in unity batches)

namespace {

using glass::BpePair;
using glass::TrainedBpe;

std::string harbour_path() { return std::string(GLASS_DATA_DIR) + "/harbour.txt"; }
const std::string& harbour() {
    static const std::string text = glass::read_file_bytes(harbour_path(), "training text");
    return text;
}
// The plain trainer's 512-token vocabulary of the shipped text, computed once.
const TrainedBpe& harbour_512() {
    static const TrainedBpe bpe = glass::train_bpe_naive(harbour(), 512);
    return bpe;
}

std::string temp_path(const std::string& name) {
    return "/tmp/glass_test_bpe_train_" + std::to_string(::getpid()) + "_" + name;
}
std::string write_temp(const std::string& name, const std::string& contents) {
    const std::string path = temp_path(name);
    std::ofstream(path, std::ios::binary) << contents;
    return path;
}

// The message of the glass::Error that f throws ("" and a failed check if it throws none).
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const glass::Error& e) {
        return e.what();
    }
    FAIL("expected a glass::Error");
    return "";
}

// Both trainers, checked against the same hand-computed merges.
void check_both_trainers(const std::string& text, const std::vector<BpePair>& expected) {
    const int vocab_size = 256 + static_cast<int>(expected.size());
    CHECK(glass::train_bpe_naive(text, vocab_size).merges() == expected);
    CHECK(glass::train_bpe(text, vocab_size).merges() == expected);
}

// The 256 single-byte lines, the start of every trained vocabulary file.
std::string byte_lines() {
    std::string s;
    for (int b = 0; b < 256; ++b) s += glass::base64_encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    return s;
}

}  // namespace

TEST_CASE("the classic corpus aaabdaaabac gives the merges worked out by hand") {
    // One chunk (GPT-2's split keeps a run of letters together). a=97 b=98 c=99 d=100.
    //   a a a b d a a a b a c
    //   pairs: (a,a) 4, (a,b) 2, (b,d) 1, (d,a) 1, (b,a) 1, (a,c) 1      -> 256 = (97,97) "aa"
    //   [256 97 98 100 256 97 98 97 99]            ("aaa" -> [aa][a]: left to right, no overlap)
    //   pairs: (256,97) 2, (97,98) 2, (98,100) 1, (100,256) 1, (98,97) 1, (97,99) 1
    //   tie at 2: (97,98) < (256,97)                                      -> 257 = (97,98) "ab"
    //   (first-seen would have picked (256,97) here: the tie rule is visible in the result)
    //   [256 257 100 256 257 97 99]
    //   pairs: (256,257) 2, the rest 1                                    -> 258 = (256,257) "aaab"
    //   [258 100 258 97 99]
    //   pairs: (258,100) (100,258) (258,97) (97,99), all 1; smallest      -> 259 = (97,99) "ac"
    //   [258 100 258 259]: (258,100) (100,258) (258,259), all 1          -> 260 = (100,258) "daaab"
    //   [258 260 259]: (258,260) (260,259)                                -> 261 = (258,260)
    //   [261 259]                                                         -> 262 = (261,259), the whole text
    //   [262]: no pair left, so 263 tokens is the most this text can give.
    const std::string text = "aaabdaaabac";
    const std::vector<BpePair> expected = {{97, 97}, {97, 98}, {256, 257}, {97, 99},
                                           {100, 258}, {258, 260}, {261, 259}};
    check_both_trainers(text, expected);

    const TrainedBpe bpe = glass::train_bpe(text, 263);
    CHECK(bpe.bytes_of(258) == "aaab");
    CHECK(bpe.bytes_of(260) == "daaab");
    CHECK(bpe.bytes_of(262) == text);
    // Encoding replays the merges, earliest first, leftmost on ties:
    CHECK(bpe.encode(text) == std::vector<int>{262});
    CHECK(bpe.encode("aaab") == std::vector<int>{258});        // [aa][a][b] -> [aa][ab] -> [aaab]
    CHECK(bpe.encode("aaaa") == std::vector<int>{256, 256});   // [aa][a][a] -> [aa][aa]
    CHECK(bpe.encode("abab") == std::vector<int>{257, 257});
    CHECK(bpe.encode("ba") == std::vector<int>{98, 97});       // no merge (b,a): bytes stay bytes

    const std::string too_big = error_of([&] { glass::train_bpe(text, 264); });
    CHECK(too_big.find("264") != std::string::npos);
    CHECK(too_big.find("263") != std::string::npos);  // the largest possible size
    CHECK(error_of([&] { glass::train_bpe_naive(text, 264); }) == too_big);
}

TEST_CASE("ties between pairs with the same left id go to the smaller right id") {
    // "acab": (a,c) 1, (c,a) 1, (a,b) 1; (97,98) < (97,99) < (99,97)    -> 256 = (97,98) "ab"
    //   [97 99 256]: (97,99) 1, (99,256) 1                                -> 257 = (97,99) "ac"
    //   [257 256]                                                         -> 258 = (257,256)
    check_both_trainers("acab", {{97, 98}, {97, 99}, {257, 256}});
}

TEST_CASE("pairs are counted inside chunks, weighted by how often each chunk occurs") {
    // GPT-2's split: "ab" " ab" " ab" " cd" -> distinct chunks "ab" x1, " ab" x2, " cd" x1.
    //   (a,b) 1+2 = 3, (' ',a) 2, (' ',c) 1, (c,d) 1                     -> 256 = (97,98) "ab"
    //   "ab"=[256], " ab"=[32 256] x2, " cd"=[32 99 100]
    //   (32,256) 2, (32,99) 1, (99,100) 1                                 -> 257 = (32,256) " ab"
    //   (32,99) 1, (99,100) 1: tie, 32 < 99                               -> 258 = (32,99) " c"
    //   [258 100]                                                         -> 259 = (258,100) " cd"
    // The text has "b " three times too, as often as "ab", but it crosses a chunk boundary and
    // is never counted. After 259 every chunk is one token.
    const std::string text = "ab ab ab cd";
    check_both_trainers(text, {{97, 98}, {32, 256}, {32, 99}, {258, 100}});
    CHECK(error_of([&] { glass::train_bpe(text, 261); }).find("261") != std::string::npos);
    CHECK(glass::train_bpe(text, 260).encode(text) == std::vector<int>{256, 257, 257, 259});
}

TEST_CASE("training is deterministic, greedy, and the fast trainer equals the plain one") {
    const TrainedBpe fast = glass::train_bpe(harbour(), 512);
    CHECK(glass::train_bpe(harbour(), 512).merges() == fast.merges());  // two runs, same merges
    CHECK(fast.merges() == harbour_512().merges());                      // fast == plain
    CHECK(fast.vocab_size() == 512);

    // A larger vocabulary starts with the merges of a smaller one.
    const TrainedBpe small = glass::train_bpe(harbour(), 300);
    REQUIRE(small.merges().size() == 44);
    CHECK(std::equal(small.merges().begin(), small.merges().end(), fast.merges().begin()));

    // The order of the chunks does not matter (counts are sums; the tie rule is on ids alone):
    // the same chunks in reverse order give the same merges.
    std::vector<std::string_view> pieces = glass::bpe_train_split().split(harbour());
    std::reverse(pieces.begin(), pieces.end());
    CHECK(glass::train_bpe_on(glass::count_chunks(pieces), 512).merges() == fast.merges());
    CHECK(glass::train_bpe_naive_on(glass::count_chunks(pieces), 512).merges() == fast.merges());
}

TEST_CASE("the first merges on English prose are the common neighbours") {
    // Merge 0 is the most frequent adjacent pair inside chunks. Count it independently here,
    // over GPT-2 chunks, for every pair, and compare.
    std::map<std::pair<int, int>, long> counts;
    for (std::string_view chunk : glass::bpe_train_split().split(harbour()))
        for (size_t i = 0; i + 1 < chunk.size(); ++i)
            counts[{static_cast<unsigned char>(chunk[i]), static_cast<unsigned char>(chunk[i + 1])}]++;
    std::pair<int, int> best{};
    long best_count = 0;
    for (const auto& [pair, count] : counts)
        if (count > best_count) best = pair, best_count = count;
    CHECK(harbour_512().merges()[0] == BpePair{best.first, best.second});
    // And common English words end up as single tokens.
    for (const char* word : {" the", " and", " of"})
        CHECK(harbour_512().encode(word).size() == 1);
}

TEST_CASE("base64_encode matches the RFC 4648 test vectors and base64_decode undoes it") {
    const std::vector<std::pair<std::string, std::string>> vectors = {
        {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
    for (const auto& [bytes, text] : vectors) CHECK(glass::base64_encode(bytes) == text);
    CHECK(glass::base64_encode(std::string("\x00\xff", 2)) == "AP8=");
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        std::string bytes(static_cast<size_t>(trial % 23), '\0');
        for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
        std::string back;
        CHECK(glass::base64_decode(glass::base64_encode(bytes), back));
        CHECK(back == bytes);
    }
}

TEST_CASE("a trained vocabulary round-trips through the tiktoken rank format") {
    const TrainedBpe& bpe = harbour_512();
    const std::string path = temp_path("roundtrip.tiktoken");
    glass::save_trained_bpe(bpe, path);

    // The file, read here line by line: base64 of each token's bytes, a space, the rank = id.
    std::ifstream in(path, std::ios::binary);
    int rank = 0;
    for (std::string line; std::getline(in, line); ++rank) {
        const size_t space = line.find(' ');
        REQUIRE(space != std::string::npos);
        CHECK(line.substr(space + 1) == std::to_string(rank));
        std::string bytes;
        CHECK(glass::base64_decode(line.substr(0, space), bytes));
        CHECK(bytes == bpe.bytes_of(rank));
    }
    CHECK(rank == 512);

    const TrainedBpe loaded = glass::load_trained_bpe(path);
    CHECK(loaded.merges() == bpe.merges());
    CHECK(loaded.vocab_size() == 512);
    CHECK(loaded.encode(harbour()) == bpe.encode(harbour()));

    // The byte-level tokenizer reads the same file as any tiktoken vocabulary with GPT-2's
    // pattern, recovering merges its own way (byte_level_bpe.hpp): the same ids.
    const glass::ByteLevelBpe tiktoken = glass::load_tiktoken(path, "r50k");
    for (const std::string& text : {harbour(), std::string("It's 2024, caf\xc3\xa9 \xff\xfe  x")})
        CHECK(tiktoken.encode(text, false, false) == bpe.encode(text));
    std::remove(path.c_str());
}

TEST_CASE("decode(encode(x)) == x for any bytes, invalid UTF-8 included") {
    const TrainedBpe& bpe = harbour_512();
    const std::vector<std::string> fixed = {
        "", " ", "\n\n", "caf\xc3\xa9", "\xff\xfe\xfd", "\xc3", "\xe2\x80", "half \xe2\x80 dash",
        std::string("nul\0byte", 8), "   many   spaces   ", "It's 2024!!", harbour()};
    for (const std::string& x : fixed) {
        CAPTURE(x.substr(0, 40));
        const std::vector<int> ids = bpe.encode(x);
        for (int id : ids) CHECK((id >= 0 && id < 512));
        CHECK(bpe.decode(ids) == x);
    }
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int> byte(0, 255), length(0, 300);
    for (int trial = 0; trial < 300; ++trial) {
        std::string x(static_cast<size_t>(length(rng)), '\0');
        for (char& c : x) c = static_cast<char>(byte(rng));
        CHECK(bpe.decode(bpe.encode(x)) == x);
    }
}

TEST_CASE("more merges compress the training text more") {
    // With the first n merges, each merge the text still contains removes at least one token,
    // so bytes per token rises strictly. 0 merges: one token per byte.
    const std::vector<BpePair>& all = harbour_512().merges();
    double previous = 0.0;
    for (size_t n : {0, 16, 64, 128, 256}) {
        const TrainedBpe bpe = TrainedBpe::from_merges(std::vector<BpePair>(all.begin(), all.begin() + static_cast<long>(n)));
        const double ratio = static_cast<double>(harbour().size()) / static_cast<double>(bpe.encode(harbour()).size());
        CAPTURE(n);
        if (n == 0) CHECK(ratio == 1.0);
        CHECK(ratio > previous);
        previous = ratio;
    }
    CHECK(previous > 2.0);  // 256 merges on English prose: over two bytes per token
}

TEST_CASE("bad input gives clear errors naming the problem") {
    CHECK(error_of([] { glass::train_bpe("some text", 255); }).find("255") != std::string::npos);
    CHECK(error_of([] { glass::train_bpe_naive("some text", -3); }).find("-3") != std::string::npos);
    const std::string missing = "/nonexistent/glass/corpus.txt";
    CHECK(error_of([&] { glass::train_bpe_file(missing, 300); }).find(missing) != std::string::npos);
    CHECK(error_of([&] { glass::load_trained_bpe(missing); }).find(missing) != std::string::npos);
    CHECK(error_of([] { harbour_512().decode({5, 512}); }).find("512") != std::string::npos);
    CHECK(error_of([] { TrainedBpe::from_merges({{97, 300}}); }).find("300") != std::string::npos);

    // Malformed vocabulary files: each error names the file and the offending line or rank.
    struct Case {
        const char* name;
        std::string contents;
        std::string expect;  // part of the message: the offending value
    };
    const std::string bytes = byte_lines();
    const std::vector<Case> cases = {
        {"no space", "AA==0\n", "AA==0"},
        {"bad base64", "A@== 0\n", "A@=="},
        {"rank not a number", "AA== zero\n", "zero"},
        {"rank missing", bytes.substr(0, bytes.find("BQ== 5")) + bytes.substr(bytes.find("Bg== 6")) + "YWI= 256\n", "no rank 5"},
        {"byte out of place", "AQ== 0\n" + bytes.substr(bytes.find("AQ== 1")), "single byte 0"},
        {"too short", bytes.substr(0, bytes.find("AQ== 1")), "has 1 ranks"},
        {"not two tokens", bytes + "YWJj 256\n", "into 3 tokens"},  // "abc" with no merges yet
        {"repeated token", bytes + "YWI= 256\nYWI= 257\n", "same bytes as rank 256"},
        {"rank twice", bytes + "YWI= 255\n", "255"},
    };
    for (const Case& c : cases) {
        CAPTURE(std::string(c.name));
        const std::string path = write_temp("bad.tiktoken", c.contents);
        const std::string message = error_of([&] { glass::load_trained_bpe(path); });
        CHECK(message.find(path) != std::string::npos);
        CHECK_MESSAGE(message.find(c.expect) != std::string::npos, message);
        std::remove(path.c_str());
    }
    const std::string good = write_temp("good.tiktoken", bytes + "YWI= 256\n");  // "ab" = a + b
    CHECK(glass::load_trained_bpe(good).merges() == std::vector<BpePair>{{97, 98}});
    std::remove(good.c_str());
}

// ---- example 02: its printed numbers against the plain trainer called here ----

namespace {
std::string line_after(const std::string& out, const std::string& label) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(label + ": ", 0) == 0) return line.substr(label.size() + 2);
    FAIL("no line '" << label << ": ' in:\n" << out);
    return "";
}
}  // namespace

TEST_CASE("example 02 trains on the shipped text and prints the right numbers") {
    const std::string out_path = temp_path("09.tiktoken");
    const test::Run r = test::run(test::bin_dir() + "/02_train_bpe " + test::sh(harbour_path()) + " 512 " + test::sh(out_path));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    const TrainedBpe& bpe = harbour_512();

    CHECK(std::stoul(line_after(r.out, "training text bytes")) == harbour().size());
    CHECK(std::stoi(line_after(r.out, "vocabulary size")) == 512);
    CHECK(std::stoi(line_after(r.out, "merges learned")) == 256);
    for (int k = 0; k < 20; ++k) {  // "merge 1: 256 = 101 + 32 -> ..."
        std::istringstream fields(line_after(r.out, "merge " + std::to_string(k + 1)));
        int id = 0, left = 0, right = 0;
        std::string eq, plus;
        fields >> id >> eq >> left >> plus >> right;
        CAPTURE(k);
        CHECK(id == 256 + k);
        CHECK(BpePair{left, right} == bpe.merges()[k]);
    }
    const size_t tokens = bpe.encode(harbour()).size();
    CHECK(std::stoul(line_after(r.out, "tokens on the training text")) == tokens);
    // Printed with 3 decimals: within half a unit of the last place.
    const double ratio = static_cast<double>(harbour().size()) / static_cast<double>(tokens);
    CHECK(std::abs(std::stod(line_after(r.out, "compression ratio (bytes per token)")) - ratio) <= 0.0005 + 1e-9);
    for (size_t n : {0, 16, 32, 64, 128, 256}) {  // "after 64 merges: 320 <tokens> <ratio>"
        std::istringstream fields(line_after(r.out, "after " + std::to_string(n) + " merges"));
        size_t vocab = 0, n_tokens = 0;
        fields >> vocab >> n_tokens;
        const std::vector<BpePair> first(bpe.merges().begin(), bpe.merges().begin() + static_cast<long>(n));
        CAPTURE(n);
        CHECK(vocab == 256 + n);
        CHECK(n_tokens == TrainedBpe::from_merges(first).encode(harbour()).size());
    }
    CHECK(line_after(r.out, "round trip (decode(encode(text)) == text)") == "yes");
    CHECK(glass::load_trained_bpe(out_path).merges() == bpe.merges());
    std::remove(out_path.c_str());
}

TEST_CASE("example 02 rejects bad arguments with one line and a non-zero exit") {
    const std::string exe = test::bin_dir() + "/02_train_bpe";
    const test::Run missing = test::run(exe + " /nonexistent/corpus.txt");
    CHECK(missing.exit_code == 1);
    CHECK(missing.err.find("/nonexistent/corpus.txt") != std::string::npos);
    const test::Run small = test::run(exe + " " + test::sh(harbour_path()) + " 100");
    CHECK(small.exit_code == 1);
    CHECK(small.err.find("100") != std::string::npos);
    const test::Run word = test::run(exe + " " + test::sh(harbour_path()) + " many");
    CHECK(word.exit_code == 1);
    CHECK(word.err.find("many") != std::string::npos);
    for (const test::Run* r : {&missing, &small, &word}) CHECK(std::count(r->err.begin(), r->err.end(), '\n') == 1);
}

}  // namespace test_bpe_train
