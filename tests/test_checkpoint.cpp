// Loading the checkpoint and the tokenizer, and every way their input can be bad.
//
// Bad input must become a glass::Error whose message names the problem and the offending value
// (a size, a field, an id). Expected values come from the file bytes read here independently,
// from models/README.md, or from arithmetic done here in 128-bit integers.
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

// ---- helpers -------------------------------------------------------------------------------

std::vector<char> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file under /tmp with a unique name, removed when the test is done.
struct TempFile {
    std::string path;
    explicit TempFile(const std::vector<char>& bytes, const std::string& suffix = ".bin") {
        static int counter = 0;
        path = "/tmp/glass_test_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + suffix;
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        REQUIRE_MESSAGE(out.good(), "cannot write " << path);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.close();
        REQUIRE(std::filesystem::file_size(path) == bytes.size());
    }
    ~TempFile() { std::remove(path.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
};

// The message of the glass::Error `f` throws; fails the test if it throws nothing or anything else.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const glass::Error& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL("expected a glass::Error, got another exception: " << e.what());
    } catch (...) {
        FAIL("expected a glass::Error, got a non-std exception");
    }
    FAIL("expected a glass::Error, but nothing was thrown");
    return {};
}

// Whether `message` contains the integer `v` as a whole number (not as part of a longer one).
bool mentions(const std::string& message, long long v) {
    const std::string s = std::to_string(v);
    size_t at = 0;
    while ((at = message.find(s, at)) != std::string::npos) {
        const bool left_ok = at == 0 || !(std::isdigit(static_cast<unsigned char>(message[at - 1])) ||
                                          (v >= 0 && message[at - 1] == '-'));
        const size_t end = at + s.size();
        const bool right_ok = end >= message.size() || !std::isdigit(static_cast<unsigned char>(message[end]));
        if (left_ok && right_ok) return true;
        ++at;
    }
    return false;
}
bool contains(const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
}

std::string load_error(const std::string& path) {
    return error_of([&] { (void)glass::load_llama2c_checkpoint(path); });
}

const std::vector<char>& model_bytes() {
    static const std::vector<char> bytes = read_bytes(test::shipped_model());
    return bytes;
}
const std::vector<char>& tok512_bytes() {
    static const std::vector<char> bytes = read_bytes(test::shipped_tokenizer());
    return bytes;
}
std::string llama2_tokenizer_path() { return test::shared_dir() + "/models/tokenizer.bin"; }

std::int32_t i32_at(const std::vector<char>& b, size_t at) {
    std::int32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
}
void put_i32(std::vector<char>& b, size_t at, std::int32_t v) { std::memcpy(b.data() + at, &v, 4); }
float f32_at(const std::vector<char>& b, size_t at) {
    float v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
}

// The shipped model's bytes with a different 7-int header.
std::vector<char> with_header(const std::int32_t h[7], size_t body_bytes = SIZE_MAX) {
    std::vector<char> b = model_bytes();
    if (body_bytes != SIZE_MAX) b.resize(28 + body_bytes);
    for (int i = 0; i < 7; ++i) put_i32(b, 4 * static_cast<size_t>(i), h[i]);
    return b;
}

constexpr std::int32_t kShippedHeader[7] = {64, 172, 5, 8, 4, 512, 512};  // models/README.md
constexpr std::int64_t kShippedBytes = 1056540;                           // models/README.md
// A header whose sizes imply terabytes must be refused from the header alone. A loader that
// allocated or read what the header claims would take hours (or be killed); refusing takes
// microseconds. A minute tells the two apart on any machine, however busy: a guard against that
// hang, not a speed check.
constexpr std::chrono::seconds kReadingItAll{60};
const char* const kFieldNames[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                    "vocab_size", "seq_len"};

// Independent size of a legacy checkpoint, in 128-bit arithmetic (cannot overflow here).
__int128 independent_file_bytes(std::int64_t d, std::int64_t h, std::int64_t L, std::int64_t nh,
                                std::int64_t nkv, std::int64_t vocab_field, std::int64_t S) {
    const __int128 V = vocab_field < 0 ? -vocab_field : vocab_field;
    const __int128 hd = d / nh, kvd = nkv * hd;
    __int128 floats = V * d;
    floats += __int128(L) * (2 * d + 2 * __int128(d) * d + 2 * kvd * d + 3 * __int128(h) * d);
    floats += d;
    floats += __int128(S) * hd;  // two tables of S * hd/2
    if (vocab_field < 0) floats += V * d;
    return 28 + 4 * floats;
}
std::string to_string128(__int128 v) {
    if (v == 0) return "0";
    const bool neg = v < 0;
    std::string s;
    while (v != 0) {
        int digit = static_cast<int>(v % 10);
        s.insert(s.begin(), static_cast<char>('0' + (neg ? -digit : digit)));
        v /= 10;
    }
    return neg ? "-" + s : s;
}

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

// ---- the shipped model ---------------------------------------------------------------------

TEST_CASE("checkpoint: the shipped model loads with the header's config and exact file size") {
    const std::vector<char>& bytes = model_bytes();
    REQUIRE(bytes.size() >= 28);
    // Header read here, straight from the bytes, and checked against models/README.md.
    std::int32_t header[7];
    for (int i = 0; i < 7; ++i) header[i] = i32_at(bytes, 4 * static_cast<size_t>(i));
    for (int i = 0; i < 7; ++i) {
        const std::string field = kFieldNames[i];
        CAPTURE(field);
        CHECK(header[i] == kShippedHeader[i]);
    }
    CHECK(static_cast<std::int64_t>(bytes.size()) == kShippedBytes);
    CHECK(static_cast<std::int64_t>(std::filesystem::file_size(test::shipped_model())) == kShippedBytes);

    const glass::Model m = glass::load_llama2c_checkpoint(test::shipped_model());
    const glass::ModelConfig& c = m.config;
    CHECK(c.dim == header[0]);
    CHECK(c.hidden_dim == header[1]);
    CHECK(c.n_layers == header[2]);
    CHECK(c.n_heads == header[3]);
    CHECK(c.n_kv_heads == header[4]);
    CHECK(c.vocab_size == header[5]);
    CHECK(c.seq_len == header[6]);
    CHECK(c.dim == 64);
    CHECK(c.hidden_dim == 172);
    CHECK(c.n_layers == 5);
    CHECK(c.n_heads == 8);
    CHECK(c.n_kv_heads == 4);
    CHECK(c.vocab_size == 512);
    CHECK(c.seq_len == 512);
    CHECK(c.shared_classifier);
    CHECK(c.head_dim == 8);
    CHECK(c.kv_dim() == 32);
    CHECK(glass::llama2c_file_bytes(c) == kShippedBytes);
    CHECK(glass::llama2c_file_bytes(c) ==
          static_cast<std::int64_t>(independent_file_bytes(64, 172, 5, 8, 4, 512, 512)));
    REQUIRE(m.layers.size() == 5);

    // The views point at the right bytes: compare with floats read here at computed offsets.
    const size_t d = 64, kv = 32, h = 172, L = 5, V = 512;
    const size_t emb = 28, rms_att = emb + 4 * V * d, wq = rms_att + 4 * L * d,
                 wk = wq + 4 * L * d * d, wv = wk + 4 * L * kv * d, wo = wv + 4 * L * kv * d,
                 rms_ffn = wo + 4 * L * d * d, w1 = rms_ffn + 4 * L * d, w2 = w1 + 4 * L * h * d,
                 w3 = w2 + 4 * L * d * h, rms_final = w3 + 4 * L * h * d;
    CHECK(m.token_embedding[0] == f32_at(bytes, emb));
    CHECK(m.embedding_table()(511, 63) == f32_at(bytes, emb + 4 * (511 * d + 63)));
    CHECK(m.classifier == m.token_embedding);
    CHECK(m.layers[0].rms_att(0) == f32_at(bytes, rms_att));
    CHECK(m.layers[4].rms_att(63) == f32_at(bytes, rms_att + 4 * (4 * d + 63)));
    CHECK(m.layers[2].wq(3, 5) == f32_at(bytes, wq + 4 * (2 * d * d + 3 * d + 5)));
    CHECK(m.layers[1].wk(31, 63) == f32_at(bytes, wk + 4 * (1 * kv * d + 31 * d + 63)));
    CHECK(m.layers[3].wv(7, 2) == f32_at(bytes, wv + 4 * (3 * kv * d + 7 * d + 2)));
    CHECK(m.layers[4].wo(63, 0) == f32_at(bytes, wo + 4 * (4 * d * d + 63 * d)));
    CHECK(m.layers[0].rms_ffn(10) == f32_at(bytes, rms_ffn + 4 * 10));
    CHECK(m.layers[2].w1(171, 63) == f32_at(bytes, w1 + 4 * (2 * h * d + 171 * d + 63)));
    CHECK(m.layers[2].w2(63, 171) == f32_at(bytes, w2 + 4 * (2 * d * h + 63 * h + 171)));
    CHECK(m.layers[4].w3(0, 1) == f32_at(bytes, w3 + 4 * (4 * h * d + 1)));
    CHECK(m.final_norm()(63) == f32_at(bytes, rms_final + 4 * 63));
    // Then 2 × seq_len × head_dim/2 RoPE floats, and the file ends.
    CHECK(rms_final + 4 * d + 4 * 512 * 8 == bytes.size());
}

TEST_CASE("checkpoint: a negative vocab_size means a separate classifier stored at the end") {
    std::int32_t h[7] = {64, 172, 5, 8, 4, -512, 512};
    SUBCASE("without the classifier the file is too short, and the message says by how much") {
        TempFile f(with_header(h));
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(mentions(msg, kShippedBytes));
        CHECK(mentions(msg, kShippedBytes + 512 * 64 * 4));
        CHECK(contains(msg, f.path));
    }
    SUBCASE("with the classifier appended it loads and points at the appended rows") {
        std::vector<char> b = with_header(h);
        std::vector<char> wcls(512 * 64 * 4);
        for (size_t i = 0; i < 512 * 64; ++i) {
            const float v = 0.001f * static_cast<float>(i % 997) - 0.5f;
            std::memcpy(wcls.data() + 4 * i, &v, 4);
        }
        b.insert(b.end(), wcls.begin(), wcls.end());
        TempFile f(b);
        const glass::Model m = glass::load_llama2c_checkpoint(f.path);
        CHECK_FALSE(m.config.shared_classifier);
        CHECK(m.config.vocab_size == 512);
        CHECK(m.classifier != m.token_embedding);
        CHECK(m.output_classifier()(0, 0) == f32_at(wcls, 0));
        CHECK(m.output_classifier()(511, 63) == f32_at(wcls, 4 * (511 * 64 + 63)));
        CHECK(m.output_classifier()(100, 7) == f32_at(wcls, 4 * (100 * 64 + 7)));
    }
}

// ---- wrong file sizes ----------------------------------------------------------------------

TEST_CASE("checkpoint: a truncated file is rejected, naming its size and the expected size") {
    for (const std::int64_t cut : {std::int64_t{1}, std::int64_t{4}, std::int64_t{1000},
                                   kShippedBytes / 2, kShippedBytes - 28}) {
        CAPTURE(cut);
        std::vector<char> b = model_bytes();
        b.resize(static_cast<size_t>(kShippedBytes - cut));
        TempFile f(b);
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(mentions(msg, kShippedBytes - cut));
        CHECK(mentions(msg, kShippedBytes));
        CHECK(contains(msg, f.path));
    }
}

TEST_CASE("checkpoint: a file with extra bytes is rejected, naming its size and the expected size") {
    for (const std::int64_t extra : {std::int64_t{1}, std::int64_t{4}, std::int64_t{4096}}) {
        CAPTURE(extra);
        std::vector<char> b = model_bytes();
        b.resize(static_cast<size_t>(kShippedBytes + extra), '\x7f');
        TempFile f(b);
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(mentions(msg, kShippedBytes + extra));
        CHECK(mentions(msg, kShippedBytes));
        CHECK(contains(msg, f.path));
    }
}

TEST_CASE("checkpoint: missing file, directory, empty file, file shorter than the header") {
    SUBCASE("missing file") {
        const std::string path = "/tmp/glass_test_ckpt_does_not_exist_" + std::to_string(::getpid()) + ".bin";
        const std::string msg = load_error(path);
        CAPTURE(msg);
        CHECK(contains(msg, path));
    }
    SUBCASE("a directory") {
        const std::string dir = "/tmp/glass_test_ckpt_dir_" + std::to_string(::getpid());
        std::filesystem::create_directory(dir);
        const std::string msg = load_error(dir);
        std::filesystem::remove(dir);
        CAPTURE(msg);
        CHECK(contains(msg, dir));
        CHECK((contains(msg, "directory") || contains(msg, "regular file")));
    }
    SUBCASE("empty file") {
        TempFile f({});
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
        CHECK(mentions(msg, 0));
        CHECK(mentions(msg, 28));  // the header it cannot hold
    }
    for (const size_t n : {size_t{1}, size_t{10}, size_t{27}}) {
        CAPTURE(n);
        std::vector<char> b(model_bytes().begin(), model_bytes().begin() + static_cast<long>(n));
        TempFile f(b);
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(contains(msg, f.path));
        CHECK(mentions(msg, static_cast<long long>(n)));
    }
    SUBCASE("the 28-byte header alone") {
        std::vector<char> b(model_bytes().begin(), model_bytes().begin() + 28);
        TempFile f(b);
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(mentions(msg, 28));
        CHECK(mentions(msg, kShippedBytes));
    }
}

// ---- corrupted headers ---------------------------------------------------------------------

TEST_CASE("checkpoint: a zero header field is rejected, naming the field and the value") {
    for (int i = 0; i < 7; ++i) {
        const std::string field = kFieldNames[i];
        CAPTURE(field);
        std::int32_t h[7];
        std::memcpy(h, kShippedHeader, sizeof h);
        h[i] = 0;
        TempFile f(with_header(h));
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(contains(msg, kFieldNames[i]));
        CHECK(mentions(msg, 0));
        CHECK(contains(msg, f.path));
    }
}

TEST_CASE("checkpoint: a negative header field is rejected, naming the field and the value") {
    for (int i = 0; i < 7; ++i) {
        if (i == 5) continue;  // a negative vocab_size is legal (separate classifier), above
        for (const std::int32_t v : {-1, -64, -100000}) {
            const std::string field = kFieldNames[i];
        CAPTURE(field);
            CAPTURE(v);
            std::int32_t h[7];
            std::memcpy(h, kShippedHeader, sizeof h);
            h[i] = v;
            TempFile f(with_header(h));
            const std::string msg = load_error(f.path);
            CAPTURE(msg);
            CHECK(contains(msg, kFieldNames[i]));
            CHECK(mentions(msg, v));
        }
    }
}

TEST_CASE("checkpoint: inconsistent head counts and odd head_dim are rejected with the values") {
    struct Case {
        const char* what;
        std::int32_t dim, n_heads, n_kv_heads;
        std::vector<long long> named;  // values the message must contain
    };
    const Case cases[] = {
        {"dim not divisible by n_heads", 64, 7, 7, {64, 7}},
        {"dim not divisible by n_heads (more heads than dim)", 64, 128, 128, {64, 128}},
        {"n_heads not a multiple of n_kv_heads", 64, 8, 3, {8, 3}},
        {"more kv heads than heads", 64, 8, 16, {8, 16}},
        {"odd head_dim 3", 24, 8, 4, {3}},
        {"odd head_dim 1", 8, 8, 4, {1}},
        {"odd head_dim 9", 72, 8, 4, {9}},
    };
    for (const Case& k : cases) {
        const std::string what = k.what;
        CAPTURE(what);
        const std::int32_t h[7] = {k.dim, 172, 5, k.n_heads, k.n_kv_heads, 512, 512};
        TempFile f(with_header(h));
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        for (long long v : k.named) {
            CAPTURE(v);
            CHECK(mentions(msg, v));
        }
        // And the pure header check agrees, without any file.
        const std::string direct = error_of([&] { (void)glass::parse_llama2c_header(h); });
        CHECK(direct.size() > 0);
    }
}

TEST_CASE("checkpoint: header fields at INT32_MAX and INT32_MIN are rejected with the value") {
    for (int i = 0; i < 7; ++i) {
        for (const std::int32_t v : {INT32_MAX, INT32_MIN}) {
            const std::string field = kFieldNames[i];
        CAPTURE(field);
            CAPTURE(v);
            std::int32_t h[7];
            std::memcpy(h, kShippedHeader, sizeof h);
            h[i] = v;
            const auto t0 = std::chrono::steady_clock::now();
            TempFile f(with_header(h));
            const std::string msg = load_error(f.path);
            CAPTURE(msg);
            CHECK(contains(msg, kFieldNames[i]));
            if (i == 5 && v == INT32_MIN) {
                // A negative vocab_size is the vocabulary size with its sign as a flag; -2^31 has
                // no positive counterpart. The message must still show the value in the file,
                // not some substitute such as 0.
                CHECK(contains(msg, "2147483648"));
            } else {
                CHECK(mentions(msg, v));
            }
            CHECK(std::chrono::steady_clock::now() - t0 < kReadingItAll);
        }
    }
    SUBCASE("vocab_size -INT32_MAX: vocabulary 2147483647 with a separate classifier") {
        std::int32_t h[7];
        std::memcpy(h, kShippedHeader, sizeof h);
        h[5] = -INT32_MAX;
        TempFile f(with_header(h));
        const std::string msg = load_error(f.path);
        CAPTURE(msg);
        CHECK(contains(msg, "vocab_size"));
        CHECK(contains(msg, "2147483647"));
    }
}

TEST_CASE("checkpoint: absurd but in-range sizes are rejected fast by size, without allocating") {
    // Every field at glass's documented maximum: a naive int32 size computation overflows
    // (65536 * 65536 alone is 2^32); the true size is ~2^48 bytes.
    const std::int32_t h[7] = {65536, 1 << 18, 1024, 1024, 1024, 1 << 22, 1 << 22};
    const __int128 expected = independent_file_bytes(65536, 1 << 18, 1024, 1024, 1024, 1 << 22, 1 << 22);
    REQUIRE(expected > (__int128(1) << 40));
    const glass::ModelConfig c = glass::parse_llama2c_header(h);
    CHECK(glass::llama2c_file_bytes(c) == static_cast<std::int64_t>(expected));

    const auto t0 = std::chrono::steady_clock::now();
    TempFile f(with_header(h));
    const std::string msg = load_error(f.path);
    CAPTURE(msg);
    CHECK(std::chrono::steady_clock::now() - t0 < kReadingItAll);
    CHECK(mentions(msg, kShippedBytes));                // the file's size
    CHECK(contains(msg, to_string128(expected)));       // what the header implies

    SUBCASE("one past each maximum is rejected by range, naming the value") {
        const std::int32_t over[7] = {(1 << 16) + 2, (1 << 18) + 1, 1025, 1025, 1025, (1 << 22) + 1, (1 << 22) + 1};
        for (int i = 0; i < 7; ++i) {
            const std::string field = kFieldNames[i];
        CAPTURE(field);
            std::int32_t hh[7] = {65536, 1 << 18, 1024, 1024, 1024, 1 << 22, 1 << 22};
            hh[i] = over[i];
            if (i == 0) hh[3] = hh[4] = 2;  // keep dim divisible by the heads so range is what fails
            TempFile g(with_header(hh));
            const std::string m = load_error(g.path);
            CAPTURE(m);
            CHECK(contains(m, kFieldNames[i]));
            CHECK(mentions(m, over[i]));
        }
    }
}

TEST_CASE("checkpoint: a header whose size wraps to the file size in 32 bits is still rejected") {
    // 28 + 4 * floats for this header is 73,015,500,572 bytes, which is 1,056,540 (the shipped
    // file's size) modulo 2^32: code computing sizes in 32 bits would accept this file and read
    // far past its end.
    const std::int32_t h[7] = {65536, 1000, 1, 1024, 1024, 13381, 4127};
    const __int128 expected = independent_file_bytes(65536, 1000, 1, 1024, 1024, 13381, 4127);
    REQUIRE(expected == __int128(73015500572LL));
    REQUIRE(static_cast<std::uint32_t>(expected) == static_cast<std::uint32_t>(kShippedBytes));
    TempFile f(with_header(h));
    const std::string msg = load_error(f.path);
    CAPTURE(msg);
    CHECK(mentions(msg, kShippedBytes));
    CHECK(mentions(msg, 73015500572LL));
}

TEST_CASE("checkpoint: llama2.c's versioned format (magic 'ak42') is named, not misread") {
    // export.py --version 1/2 writes struct.pack('I', 0x616b3432) first.
    std::int32_t h[7];
    std::memcpy(h, kShippedHeader, sizeof h);
    h[0] = 0x616b3432;
    h[1] = 1;  // version
    TempFile f(with_header(h));
    const std::string msg = load_error(f.path);
    CAPTURE(msg);
    CHECK(contains(msg, "ak42"));
    CHECK(contains(msg, f.path));
}

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
