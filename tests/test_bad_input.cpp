// Bad input (issue 16): every class of malformed file a loader once crashed on, files truncated at
// many offsets, and README's "Bad input" table re-run row by row.
//
// Each case goes through the loader entry point the CLI uses (Llama2cTokenizer::load,
// load_hf_tokenizer, load_gpt2, load_tiktoken, load_gguf_tokenizer, load_llama2c_checkpoint and
// the sessions built on it), or through build/bin/glass itself, and expects a glass::Error (exit
// status 1) whose message names the offending value — never a crash, never a silent success.
// Inputs are the small files in tests/bad_inputs/ (made by make_bad_inputs.py there) or built
// here when they are large (a 200,000-deep JSON array, a sparse 2 TiB-KV-cache checkpoint).
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "test_support.hpp"

namespace test_bad_input {  // this file's own names (tests are built in unity batches)

namespace {

// (Built with append: GCC 12 warns falsely, -Warray-bounds, on `function() + "literal"`.)
std::string repo_dir() { return test::models_dir().append("/.."); }
std::string bad(const std::string& name) { return repo_dir().append("/tests/bad_inputs/").append(name); }
std::string glass_cmd() { return test::bin_dir().append("/glass"); }

// "ulimit -v KIB && ": a cap on the address space, so that an allocation of the size a bad file
// claims fails (std::bad_alloc, naming nothing) instead of quietly succeeding. An AddressSanitizer
// build cannot start under such a cap (its shadow memory reserves terabytes of address space), so
// the sanitizer lane runs these commands without it; the error text is checked either way.
std::string address_space_cap(const std::string& kib) {
#if defined(__SANITIZE_ADDRESS__)
    (void)kib;
    return "";
#else
    return "ulimit -v " + kib + " && ";
#endif
}

void write_file(const std::string& path, const std::string& bytes) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

// Runs `load` and requires a glass::Error whose message holds every one of `parts`.
void expect_error(const std::function<void()>& load, const std::vector<std::string>& parts) {
    std::string message;
    try {
        load();
    } catch (const glass::Error& e) {
        message = e.what();
    }
    INFO("message: " << message);
    REQUIRE_MESSAGE(!message.empty(), "expected a glass::Error, the call succeeded");
    for (const std::string& part : parts) {
        CAPTURE(part);
        CHECK(message.find(part) != std::string::npos);
    }
    CHECK(message.size() < 1000);  // one readable line, never a dump of the input
}

// Runs glass with `args` (from the repository root) and requires exit status 1 and every part
// in stderr.
void expect_cli_error(const std::string& args, const std::vector<std::string>& parts) {
    const test::Run r = test::run("cd " + test::sh(repo_dir()) + " && " + glass_cmd() + " " + args);
    INFO("glass " << args << "\nstdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("glass: error: ", 0) == 0);
    for (const std::string& part : parts) {
        CAPTURE(part);
        CHECK(r.err.find(part) != std::string::npos);
    }
}

// ---- little file builders -----------------------------------------------------------------------

std::string le32(std::int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string le64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string f32(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

std::string gguf_string(const std::string& s) { return le64(s.size()) + s; }

// A GGUF v3 vocabulary: tokenizer.ggml.model "llama", tokens (strings) and scores (f32).
std::string gguf_llama_vocab(const std::vector<std::string>& tokens) {
    std::string out = "GGUF" + le32(3) + le64(0) + le64(3);
    out += gguf_string("tokenizer.ggml.model") + le32(8) + gguf_string("llama");
    out += gguf_string("tokenizer.ggml.tokens") + le32(9) + le32(8) + le64(tokens.size());
    for (const std::string& t : tokens) out += gguf_string(t);
    out += gguf_string("tokenizer.ggml.scores") + le32(9) + le32(6) + le64(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) out += f32(-static_cast<float>(i));
    return out;
}

// GPT-2's printable form of the 256 bytes (byte_level.hpp) as a tokenizer.json vocab, ids 0..255.
nlohmann::json byte_vocab() {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[glass::byte_level::encode(std::string(1, static_cast<char>(b)))] = b;
    return vocab;
}

nlohmann::json hf_byte_level(const nlohmann::json& vocab) {
    return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
            {"added_tokens", nlohmann::json::array()},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
}

// A SentencePiece-style tokenizer.json (Metaspace) with these pieces, no merges.
nlohmann::json hf_sentencepiece(const nlohmann::json& vocab, bool byte_fallback) {
    return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()},
                       {"unk_token", nullptr}, {"byte_fallback", byte_fallback}}},
            {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                               {"prepend_scheme", "first"}, {"split", false}}}};
}

// A fresh folder per case (the HF loader reads tokenizer_config.json beside tokenizer.json).
std::string case_dir(const std::string& name) {
    const std::string dir = test::temp_dir("bad_input") + "/" + name;
    std::filesystem::create_directories(dir);
    return dir;
}

std::string write_json(const std::string& name, const nlohmann::json& j) {
    const std::string path = case_dir(name) + "/tokenizer.json";
    write_file(path, j.dump());
    return path;
}

}  // namespace

// ---- 1. byte pieces: exactly "<0x" + two hex digits + ">" ----------------------------------------

TEST_CASE("bad input 1: byte pieces are parsed by one strict function") {
    CHECK(glass::byte_piece_value("<0x0A>") == 10);
    CHECK(glass::byte_piece_value("<0xff>") == 255);
    CHECK(glass::byte_piece_value("<0x00>") == 0);
    for (const char* not_a_byte : {"<0x-2>", "<0x+2>", "<0x 2>", "<0x2>", "<0x123>", "<0xG0>", "<0X0A>", "<0x0A ",
                                   "<0x-0>", "<0x1\xff>"}) {
        CAPTURE(not_a_byte);
        CHECK(glass::byte_piece_value(not_a_byte) == -1);
    }
}

TEST_CASE("bad input 1: a piece written <0x-2> is ordinary text in all three loaders (no table index -2)") {
    // Before: sscanf("<0x%2X>") read "-2" as 0xFFFFFFFE and wrote byte_to_id_[0xFFFFFFFE]: exit 139.
    const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "<0x-2>", " ", "a"};
    SUBCASE("llama2.c tokenizer.bin") {
        const auto tok = glass::Llama2cTokenizer::load(bad("byte_piece_sign.tokenizer.bin"));
        CHECK(tok.decode(5, 3) == "<0x-2>");  // its text, not a byte
        for (int b = 0; b < 256; ++b) CHECK(tok.byte_id(static_cast<unsigned char>(b)) != 3);
    }
    SUBCASE("GGUF") {
        const std::string path = case_dir("gguf_sign") + "/vocab.gguf";
        write_file(path, gguf_llama_vocab({"<unk>", "<s>", "</s>", "<0x-2>", "\xE2\x96\x81", "a"}));
        const auto tok = glass::load_gguf_tokenizer(path);
        CHECK(tok->decode(5, 3) == "<0x-2>");
    }
    SUBCASE("tokenizer.json") {
        const auto tok = glass::load_hf_tokenizer(
            write_json("hf_sign", hf_sentencepiece({{"<unk>", 0}, {"<0x-2>", 1}, {"\xE2\x96\x81", 2}, {"a", 3}}, true)));
        CHECK(tok->decode(3, 1) == "<0x-2>");
    }
    SUBCASE("the CLI") {
        const test::Run r = test::run("cd " + test::sh(repo_dir()) + " && " + glass_cmd() +
                                      " tokenize -t tests/bad_inputs/byte_piece_sign.tokenizer.bin --json a");
        INFO(r.err);
        CHECK(r.exit_code == 0);
        CHECK(r.out == "{\"ids\":[4,5],\"pieces\":[\" \",\"a\"]}\n");  // dummy prefix " ", then "a"
    }
}

// ---- 2. deep JSON: depth checked before parsing; messages describe, never dump --------------------

namespace {

// A tokenizer.json (byte-level, 256 byte tokens) whose merges list holds `merge_json`, written into
// case directory `name`; returns its path.
std::string tokenizer_json_with_merge(const std::string& name, const std::string& merge_json) {
    const std::string path = case_dir(name) + "/tokenizer.json";
    std::string text = hf_byte_level(byte_vocab()).dump();
    text.replace(text.find("\"merges\":[]"), 11, "\"merges\":[" + merge_json + "]");
    write_file(path, text);
    return path;
}

// GPT-2 files in case directory `name`: encoder.json maps "a" to `id_json`; returns the directory.
std::string gpt2_files_with_id(const std::string& name, const std::string& id_json) {
    const std::string dir = case_dir(name);
    write_file(dir + "/encoder.json", "{\"a\": " + id_json + "}");
    write_file(dir + "/vocab.bpe", "#version: 0.2\n");
    return dir;
}

}  // namespace

TEST_CASE("bad input 2: 200,000 nested '[' are refused before parsing, in every JSON loader") {
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    SUBCASE("tokenizer.json merges") {
        const std::string path = tokenizer_json_with_merge("deep_merges", deep);
        expect_error([&] { glass::load_hf_tokenizer(path); }, {"nested more than 64 levels"});
    }
    SUBCASE("encoder.json ids") {
        const std::string dir = gpt2_files_with_id("deep_encoder", deep);
        expect_error([&] { glass::load_gpt2(dir + "/encoder.json", dir + "/vocab.bpe"); },
                     {"encoder.json", "nested more than 64 levels"});
    }
    SUBCASE("the CLI, with the committed 100-deep file") {
        expect_cli_error("tokenize --hf tests/bad_inputs/deep_json/tokenizer.json x",
                         {"deep_json/tokenizer.json", "nested more than 64 levels"});
    }
}

TEST_CASE("bad input 2: a bad value inside the depth limit is described, not dumped") {
    const std::string nested = std::string(50, '[') + std::string(50, ']');
    SUBCASE("a merge that is neither \"a b\" nor [a, b]") {
        const std::string path = tokenizer_json_with_merge("nested_merge", nested);
        expect_error([&] { glass::load_hf_tokenizer(path); }, {"merge an array of 1 elements is neither"});
    }
    SUBCASE("an encoder.json id that is an array") {
        const std::string dir = gpt2_files_with_id("nested_id", nested);
        expect_error([&] { glass::load_gpt2(dir + "/encoder.json", dir + "/vocab.bpe"); },
                     {"token 'a' has id an array of 1 elements, which is not an integer"});
    }
    SUBCASE("a long string is cut after 40 bytes") {
        CHECK(glass::describe_json(std::string(1000, 'x')) == "\"" + std::string(40, 'x') + "...\"");
    }
}

// ---- 3. added-token id 2147483647 (id + 1 overflowed) ---------------------------------------------

TEST_CASE("bad input 3: an added-token id of 2147483647 is refused before any arithmetic") {
    expect_error([] { glass::load_hf_tokenizer(bad("added_id_overflow/tokenizer.json")); },
                 {"added token '<|end|>' has id 2147483647, outside [0, 257)"});
    // The vocabulary class itself bounds special ids too (for callers that fill it by hand).
    glass::ByteLevelVocab v;
    v.name = "hand-made";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
    v.specials = {{"<|end|>", 2147483647}};
    expect_error([&] { glass::ByteLevelBpe tok(v); }, {"'<|end|>' has id 2147483647"});
    expect_cli_error("tokenize --hf tests/bad_inputs/added_id_overflow/tokenizer.json x", {"2147483647"});
}

// ---- 4. ids and counts bounded by what the file can hold, before allocating ----------------------

TEST_CASE("bad input 4: ids of 16,777,215 and 2,000,000,000 in files of a few bytes") {
    SUBCASE("tokenizer.json vocab id") {
        expect_error([] { glass::load_hf_tokenizer(bad("huge_id/tokenizer.json")); },
                     {"token 'hello' has id 16777215, outside [0, 257)"});
    }
    SUBCASE("tokenizer.json added-token id") {
        nlohmann::json j = hf_byte_level(byte_vocab());
        j["added_tokens"] = {{{"id", 2000000000}, {"content", "<|x|>"}, {"special", true}}};
        const std::string path = write_json("added_2e9", j);
        expect_error([&] { glass::load_hf_tokenizer(path); }, {"has id 2000000000, outside [0, 257)"});
    }
    SUBCASE("encoder.json id") {
        expect_error([] { glass::load_gpt2(bad("gpt2_huge_id/encoder.json"), bad("gpt2_huge_id/vocab.bpe")); },
                     {"token 'hello' has id 16777215, outside [0, 257)"});
    }
    SUBCASE(".tiktoken rank") {
        expect_error([] { glass::load_tiktoken(bad("huge_rank.tiktoken"), "r50k"); },
                     {"line 2: rank 2000000000 is outside [0, 3)"});
    }
    SUBCASE("GGUF array count") {
        expect_error([] { glass::load_gguf_tokenizer(bad("huge_count.gguf")); },
                     {"array of 2000000000 elements of type 8", "needs at least 8 bytes each"});
    }
    SUBCASE("the CLI, in 1 GiB of address space") {
        // ulimit -v: an allocation of the old size (0.5-2 GB) would end in std::bad_alloc, whose
        // message names no id; the checks fail first and name it.
        const std::string limit = address_space_cap("1048576");
        for (const auto& [args, part] : std::vector<std::pair<std::string, std::string>>{
                 {"tokenize --hf tests/bad_inputs/huge_id/tokenizer.json x", "16777215"},
                 {"tokenize --gpt2 tests/bad_inputs/gpt2_huge_id/encoder.json tests/bad_inputs/gpt2_huge_id/vocab.bpe x",
                  "16777215"},
                 {"tokenize --tiktoken tests/bad_inputs/huge_rank.tiktoken --pattern r50k x", "2000000000"},
                 {"tokenize --gguf tests/bad_inputs/huge_count.gguf x", "2000000000"}}) {
            const test::Run r = test::run("cd " + test::sh(repo_dir()) + " && " + limit + glass_cmd() + " " + args);
            INFO(args << "\nstderr: " << r.err);
            CHECK(r.exit_code == 1);
            CHECK(r.err.find(part) != std::string::npos);
        }
    }
}

// ---- 5. ids must be integer JSON numbers ------------------------------------------------------------

TEST_CASE("bad input 5: an id written as a float (1e20), a string or a negative number is named") {
    expect_error([] { glass::load_hf_tokenizer(bad("float_id/tokenizer.json")); },
                 {"token 'hello' has id 1e+20, which is not an integer"});
    for (const auto& [id, shown] : std::vector<std::pair<nlohmann::json, std::string>>{
             {1.0, "1.0, which is not an integer"}, {"7", "\"7\", which is not an integer"},
             {-1, "-1, outside [0, 257)"}, {18446744073709551615ull, "18446744073709551615, outside"}}) {
        CAPTURE(shown);
        nlohmann::json vocab = byte_vocab();
        vocab["hello"] = id;
        const std::string path = write_json("id_kind", hf_byte_level(vocab));
        expect_error([&] { glass::load_hf_tokenizer(path); }, {"token 'hello' has id " + shown});
        const std::string dir = case_dir("gpt2_id_kind");
        write_file(dir + "/encoder.json", vocab.dump());
        write_file(dir + "/vocab.bpe", "#version: 0.2\n");
        expect_error([&] { glass::load_gpt2(dir + "/encoder.json", dir + "/vocab.bpe"); },
                     {"token 'hello' has id " + shown});
    }
}

// ---- 6. a SentencePiece vocabulary that cannot encode a character ---------------------------------

TEST_CASE("bad input 6: no piece, no byte piece and no <unk> for a character: encode names it") {
    // Decision: the loader accepts such a vocabulary (text made of its pieces encodes fine);
    // encode fails on the first character it cannot represent, instead of emitting id -1.
    const auto tok = glass::load_hf_tokenizer(bad("no_unk/tokenizer.json"));
    CHECK(tok->encode("ab", false, false) == std::vector<int>{0, 1, 2});  // "▁", "a", "b"
    expect_error([&] { tok->encode("a\xC3\xA9", false, false); }, {"cannot encode '\xC3\xA9' (bytes C3 A9)"});
    expect_error([&] { tok->encode("a\x01", false, false); }, {"cannot encode byte 0x01", "no <0x01> byte piece"});
    expect_cli_error("tokenize --hf tests/bad_inputs/no_unk/tokenizer.json --json 'a\xC3\xA9'",
                     {"cannot encode '\xC3\xA9' (bytes C3 A9)"});
}

// ---- 7. a literal Split pattern is matched literally -----------------------------------------------

TEST_CASE("bad input 7: Split {String: \"a\\\\E(b\"} splits on exactly that text") {
    const auto tok = glass::load_hf_tokenizer(bad("split_literal/tokenizer.json"));
    const auto* byte_level = dynamic_cast<const glass::ByteLevelBpe*>(tok.get());
    REQUIRE(byte_level != nullptr);
    const glass::Pretokenizer split(byte_level->vocab().split_patterns);
    CHECK(split.split("xa\\E(by") == std::vector<std::string_view>{"x", "a\\E(b", "y"});
    CHECK(split.split("a(b") == std::vector<std::string_view>{"a(b"});  // not the regex a|(b...
    // Every ASCII punctuation character, alone: each must match only itself.
    for (char c = 0x21; c < 0x7F; ++c) {
        if (std::isalnum(static_cast<unsigned char>(c))) continue;
        const std::string literal(1, c);
        const glass::Pretokenizer one({glass::hf_detail::regex_for_literal(literal)});
        CAPTURE(literal);
        CHECK(one.split("x" + literal + "y") == std::vector<std::string_view>{"x", literal, "y"});
    }
}

// ---- 8. a valid header that asks for more memory than the machine has ------------------------------

// A llama2.c checkpoint with the committed header (1024 layers, 32 KV heads of 2, 4,194,304
// positions) and zero weights, as a sparse file: ~100 MB long, no disk used.
std::string huge_kv_checkpoint() {
    const std::string path = case_dir("huge_kv") + "/model.bin";
    const std::string header = test::read_file(bad("huge_kv_header.bin"));
    std::int32_t h[7];
    std::memcpy(h, header.data(), 28);
    const std::int64_t size = glass::llama2c_file_bytes(glass::parse_llama2c_header(h));
    write_file(path, header);
    REQUIRE(::truncate(path.c_str(), size) == 0);
    return path;
}

TEST_CASE("bad input 8: a header implying a 2 TiB KV cache fails before allocating, naming the size") {
    // 2 (K, V) x 1024 layers x 4,194,304 positions x 64 (32 KV heads x head_dim 2) x 4 bytes
    //   = 2^1 x 2^10 x 2^22 x 2^6 x 2^2 bytes = 2^41 bytes = 2048 GiB.
    const std::string path = huge_kv_checkpoint();
    const glass::Model model = glass::load_llama2c_checkpoint(path);  // mmap: nothing allocated
    const std::vector<std::string> parts = {"needs 2048.0 GiB", "n_layers 1024", "4194304 positions",
                                            "n_kv_heads 32", "head_dim 2", "of memory"};
    expect_error([&] { glass::CpuSession session(model); }, parts);
    expect_error([&] { glass::fast::FastCpuSession session(model, glass::fast::FastOptions{}); }, parts);
    // The paged backends (glass serve) check their pool the same way.
    glass::serve::CpuPagedBackend paged(model);
    expect_error([&] { paged.allocate_pool(262144, 16); }, {"KV pool needs 2048.0 GiB"});
    // The fast one on the shipped model: 2 x 5 layers x (2^27 blocks x 16) positions x 32 x 4 bytes
    // = 10 x 2^31 x 128 bytes = 2560 GiB.
    glass::fast::FastPagedBackend fast_paged(test::shipped(), glass::fast::FastOptions{});
    expect_error([&] { fast_paged.allocate_pool(1 << 27, 16); }, {"KV pool needs 2560.0 GiB"});
    // The CLI, with a 4 GiB address-space limit: it must not even try.
    const test::Run r = test::run(address_space_cap("4194304") + glass_cmd() + " generate -m " + test::sh(path) +
                                  " -t " + test::sh(test::shipped_tokenizer()) + " --context 4194304 -p Hi -n 2");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("needs 2048.0 GiB") != std::string::npos);
    std::filesystem::remove(path);
}

TEST_CASE("bad input 8: sizes in the check are computed without overflow") {
    glass::ModelConfig c;
    c.n_layers = 1024, c.n_heads = 1024, c.n_kv_heads = 1024, c.dim = 65536, c.head_dim = 64;
    expect_error([&] { glass::check_kv_cache_fits(c, std::int64_t{1} << 40, 4, "test"); }, {"more than 8 EiB"});
    c.n_layers = 1, c.n_heads = 1, c.n_kv_heads = 1, c.dim = 2, c.head_dim = 2;  // 2 x 1 x 16 x 2 x 4 = 256 bytes
    CHECK(glass::check_kv_cache_fits(c, 16, 4, "test") == 256);
}

// ---- truncation: every shipped model and vocabulary file, cut at many offsets ----------------------

namespace {

// Every cut in [0, dense), then `spread` cuts evenly over the rest, then the last `tail` bytes.
std::vector<size_t> cut_offsets(size_t size, size_t dense, size_t spread, size_t tail) {
    std::vector<size_t> cuts;
    for (size_t k = 0; k < std::min(dense, size); ++k) cuts.push_back(k);
    for (size_t i = 1; i <= spread && size > dense; ++i) cuts.push_back(dense + (size - dense) * i / (spread + 1));
    for (size_t k = size > tail ? size - tail : 0; k < size; ++k) cuts.push_back(k);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    return cuts;
}

// Cuts `source` at each offset, writes the prefix to `target` and loads it. A glass::Error is
// the expected answer; a successful load must be a prefix that is legitimately valid
// (`prefix_is_valid(cut)`); any other exception, or a crash, fails the test.
// Each load parses the whole prefix, so the counts are smaller for the big files (the test stays
// within seconds): the first bytes, where headers and counts live, are always cut at every byte.
void check_truncations(const std::string& source, const std::string& target, size_t dense, size_t spread,
                       size_t tail, const std::function<void(const std::string&)>& load,
                       const std::function<bool(size_t)>& prefix_is_valid) {
    const std::string bytes = test::read_file(source);
    int errors = 0, valid = 0;
    for (size_t cut : cut_offsets(bytes.size(), dense, spread, tail)) {
        write_file(target, bytes.substr(0, cut));
        try {
            load(target);
            INFO(source << " cut at byte " << cut << " of " << bytes.size() << " loaded");
            CHECK(prefix_is_valid(cut));
            ++valid;
        } catch (const glass::Error&) {
            ++errors;
        } catch (const std::exception& e) {
            FAIL_CHECK(source << " cut at byte " << cut << ": not a glass::Error: " << e.what());
        }
    }
    MESSAGE(source << ": " << errors << " cuts refused, " << valid << " valid prefixes loaded");
    CHECK(errors > 0);
}

bool never(size_t) { return false; }

// A line-based file cut at a line end is a shorter valid file.
std::function<bool(size_t)> at_line_end(const std::string& bytes) {
    return [&bytes](size_t cut) { return cut > 0 && (bytes[cut - 1] == '\n' || bytes[cut] == '\n'); };
}

// A JSON file is valid only when nothing but trailing whitespace was cut off.
std::function<bool(size_t)> whole_json(const std::string& bytes) {
    return [&bytes](size_t cut) { return bytes.find_first_not_of(" \t\r\n", cut) == std::string::npos; };
}

std::string shared_tok(const std::string& name) { return test::shared_dir() + "/tokenizers/" + name; }

}  // namespace

TEST_CASE("truncation: the checkpoint (its header fixes its size: every cut is refused)") {
    const std::string dir = case_dir("cut_model");
    check_truncations(test::shipped_model(), dir + "/model.bin", 400, 200, 8,
                      [](const std::string& p) { glass::load_llama2c_checkpoint(p); }, never);
}

TEST_CASE("truncation: llama2.c tokenizer.bin files") {
    // With the model's vocabulary size (as generate/chat load it) every cut is refused. Alone
    // (glass tokenize -t), the file has no piece count: a cut between two pieces is a smaller
    // valid vocabulary; a cut inside a piece is refused.
    for (const auto& [path, vocab] : std::vector<std::pair<std::string, int>>{
             {test::shipped_tokenizer(), 512}, {test::shared_dir() + "/models/tokenizer.bin", 32000}}) {
        const std::string bytes = test::read_file(path);
        std::vector<char> boundary(bytes.size() + 1, 0);  // piece boundaries, walked independently
        for (size_t at = 4; at + 8 <= bytes.size();) {
            std::int32_t len = 0;
            std::memcpy(&len, bytes.data() + at + 4, 4);
            at += 8 + static_cast<size_t>(len);
            if (at <= bytes.size()) boundary[at] = 1;
        }
        const std::string target = case_dir("cut_tok") + "/tokenizer.bin";
        check_truncations(path, target, 300, 120, 8,
                          [vocab](const std::string& p) { glass::Llama2cTokenizer::load(p, vocab); }, never);
        check_truncations(path, target, 300, 60, 8, [](const std::string& p) { glass::Llama2cTokenizer::load(p); },
                          [&boundary](size_t cut) { return boundary[cut] != 0; });
    }
}

TEST_CASE("truncation: .tiktoken files (a cut at a line end is a valid shorter vocabulary)") {
    for (const char* name : {"r50k_base", "cl100k_base"}) {
        const std::string path = shared_tok(std::string("tiktoken/") + name + ".tiktoken");
        const std::string bytes = test::read_file(path);
        check_truncations(path, case_dir("cut_tiktoken") + "/" + name + ".tiktoken", 300, 40, 8,
                          [](const std::string& p) { glass::read_tiktoken_ranks(p); }, at_line_end(bytes));
    }
}

TEST_CASE("truncation: GPT-2 encoder.json (JSON: refused) and vocab.bpe (lines: a cut at a line end is valid)") {
    const std::string encoder = shared_tok("gpt2/encoder.json"), merges = shared_tok("gpt2/vocab.bpe");
    const std::string dir = case_dir("cut_gpt2");
    const std::string encoder_bytes = test::read_file(encoder), merges_bytes = test::read_file(merges);
    check_truncations(encoder, dir + "/encoder.json", 300, 20, 8,
                      [&](const std::string& p) { glass::load_gpt2(p, merges); }, whole_json(encoder_bytes));
    // A merge line cut inside its right half ("Ġt he" -> "Ġt h") can itself be a valid merge of
    // two tokens: vocab.bpe has no count or checksum to tell. Such cuts are allowed here.
    const auto cut_line_is_a_merge = [&](size_t cut) {
        if (cut == 0 || at_line_end(merges_bytes)(cut)) return true;  // (an empty list: no merges)
        if (cut >= 8 && merges_bytes.compare(0, 8, "#version") == 0 && merges_bytes.find('\n') >= cut)
            return true;  // the "#version: 0.2" line cut after "#version": still that line, no merges
        const size_t start = merges_bytes.rfind('\n', cut - 1) + 1;
        const std::string line = merges_bytes.substr(start, cut - start);
        const size_t space = line.find(' ');
        return space != std::string::npos && space > 0 && space + 1 < line.size() && line.find(' ', space + 1) == std::string::npos;
    };
    check_truncations(merges, dir + "/vocab.bpe", 24, 6, 2,
                      [&](const std::string& p) { glass::load_gpt2(encoder, p); }, cut_line_is_a_merge);
}

TEST_CASE("truncation: tokenizer.json files (JSON: every cut that loses more than whitespace is refused)") {
    for (const auto& [name, spread, tail] : std::vector<std::tuple<std::string, size_t, size_t>>{
             {"hf/gpt2/tokenizer.json", 30, 8}, {"hf/llama3/tokenizer.json", 4, 1}, {"hf/qwen3/tokenizer.json", 4, 1}}) {
        const std::string path = shared_tok(name);
        const std::string bytes = test::read_file(path);
        check_truncations(path, case_dir("cut_hf") + "/tokenizer.json", 300, spread, tail,
                          [](const std::string& p) { glass::load_hf_tokenizer(p); }, whole_json(bytes));
    }
}

TEST_CASE("truncation: GGUF vocabularies (counts and lengths fix the size: every cut is refused)") {
    for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-coder.gguf"}) {
        check_truncations(shared_tok(std::string("llamacpp/") + name), case_dir("cut_gguf") + "/vocab.gguf", 300, 40, 8,
                          [](const std::string& p) { glass::load_gguf_tokenizer(p); }, never);
    }
}

// ---- README's "Bad input" table, row by row ---------------------------------------------------------

TEST_CASE("README: every row of the Bad input table gives exactly the error it shows") {
    std::ifstream in(repo_dir() + "/README.md");
    const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t begin = readme.find("\n## Bad input");
    REQUIRE(begin != std::string::npos);
    const size_t end = readme.find("\n## ", begin + 1);
    std::istringstream lines(readme.substr(begin, end - begin));
    // | what | `build/bin/glass ...` | 1 | `glass: error: ...` |
    const std::regex row(R"(^\| ([^|]+) \| `([^`]+)` \| (\d) \| `([^`]+)` \|$)");
    int rows = 0;
    for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (!std::regex_match(line, m, row)) continue;
        ++rows;
        std::string command = m[2].str();
        const int status = std::stoi(m[3].str());
        const std::string expected = m[4].str();
        // (the search goes on after each replacement: glass_cmd() itself may end in build/bin/glass)
        const std::string written = "build/bin/glass";
        for (size_t at = 0; (at = command.find(written, at)) != std::string::npos; at += glass_cmd().size())
            command.replace(at, written.size(), glass_cmd());
        const test::Run r = test::run("cd " + test::sh(repo_dir()) + " && " + command);
        INFO("row: " << m[1].str() << "\ncommand: " << command << "\nstderr: " << r.err);
        CHECK(r.exit_code == status);
        // "..." in the table stands for text that depends on the machine (its memory size).
        std::string err = r.err;
        while (!err.empty() && err.back() == '\n') err.pop_back();
        std::vector<std::string> parts;
        for (size_t from = 0;;) {
            const size_t dots = expected.find("...", from);
            parts.push_back(expected.substr(from, dots == std::string::npos ? std::string::npos : dots - from));
            if (dots == std::string::npos) break;
            from = dots + 3;
        }
        CHECK(err.rfind(parts.front(), 0) == 0);
        CHECK(err.size() >= parts.back().size());
        CHECK(err.compare(err.size() - std::min(err.size(), parts.back().size()), std::string::npos, parts.back()) == 0);
        size_t at = 0;
        for (const std::string& part : parts) {
            at = err.find(part, at);
            CHECK_MESSAGE(at != std::string::npos, "missing: " << part);
            if (at == std::string::npos) break;
            at += part.size();
        }
    }
    CHECK(rows >= 15);
    std::filesystem::remove("/tmp/glass_huge_kv.bin");  // the sparse file the huge-KV row makes
}

}  // namespace test_bad_input
