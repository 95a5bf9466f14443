// Loading a llama2.c checkpoint, and every way the file can be bad.
//
// Bad input must become a glass::Error whose message names the problem and the offending value
// (a size, a field). Expected values come from the file bytes read here independently, from
// models/README.md, or from arithmetic done here in 128-bit integers.
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "bad_input_support.hpp"
#include "test_support.hpp"

namespace test_checkpoint {  // this file's own names (tests are built in unity batches)

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

std::string load_error(const std::string& path) {
    return error_of([&] { (void)glass::load_llama2c_checkpoint(path); });
}

const std::vector<char>& model_bytes() {
    static const std::vector<char> bytes = read_bytes(test::shipped_model());
    return bytes;
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

}  // namespace test_checkpoint
