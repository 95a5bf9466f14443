// llama.cpp's tokenizer test vectors: every vocabulary in ../shared/tokenizers/llamacpp/ gives the
// ids llama.cpp's tests expect (Hugging Face encode, add_special_tokens=False). GGUF files where
// they exist; llama-bpe and qwen2 through their tokenizer.json; gpt-4o through o200k_base.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "glass/formats/gguf_export.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"
#include "test_support.hpp"

namespace test_gguf_vocab {  // this file's own names (tests are built in unity batches)

namespace {

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing " << path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Vector {
    std::string text;
    std::vector<int> ids;
};

// .inp: texts separated by "\n__ggml_vocab_test__\n"; .out: one line of " id" per text.
std::vector<Vector> read_vectors(const std::string& base) {
    const std::string inp = read_all(base + ".inp"), out = read_all(base + ".out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t at = 0;;) {
        const size_t next = inp.find(sep, at);
        if (next == std::string::npos) break;  // what follows the last separator is not a test
        texts.push_back(inp.substr(at, next - at));
        at = next + sep.size();
    }
    std::vector<Vector> vectors;
    std::istringstream lines(out);
    std::string line;
    for (const std::string& t : texts) {
        REQUIRE(std::getline(lines, line));
        Vector v{t, {}};
        std::istringstream ids(line);
        for (int id; ids >> id;) v.ids.push_back(id);
        vectors.push_back(v);
    }
    return vectors;
}

std::string llamacpp(const std::string& name) { return test::shared_dir() + "/tokenizers/llamacpp/" + name; }

void check_vectors(const glass::Tokenizer& tok, const std::string& base) {
    const std::vector<Vector> vectors = read_vectors(base);
    CHECK(vectors.size() >= 40);
    int equal = 0;
    for (const Vector& v : vectors) {
        CAPTURE(v.text);
        const std::vector<int> got = tok.encode(v.text, false, false);
        CHECK(got == v.ids);
        equal += got == v.ids;
    }
    MESSAGE(base << ": " << equal << "/" << vectors.size() << " equal");
}

}  // namespace

TEST_CASE("every llama.cpp GGUF vocabulary reproduces its test vectors") {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(llamacpp(""))) {
        const std::string path = entry.path().string();
        if (entry.path().extension() != ".gguf") continue;
        SUBCASE(entry.path().filename().string().c_str()) {
            const auto tok = glass::load_gguf_tokenizer(path);
            check_vectors(*tok, path);
        }
        ++files;
    }
    CHECK(files >= 9);
}

TEST_CASE("llama-bpe and qwen2 vectors through their tokenizer.json; gpt-4o through o200k_base") {
    const auto llama3 = glass::load_hf_tokenizer(test::shared_dir() + "/tokenizers/hf/llama3/tokenizer.json");
    check_vectors(*llama3, llamacpp("ggml-vocab-llama-bpe.gguf"));
    const auto qwen3 = glass::load_hf_tokenizer(test::shared_dir() + "/tokenizers/hf/qwen3/tokenizer.json");
    check_vectors(*qwen3, llamacpp("ggml-vocab-qwen2.gguf"));
    const auto o200k = glass::load_tiktoken(test::shared_dir() + "/tokenizers/tiktoken/o200k_base.tiktoken", "o200k");
    check_vectors(o200k, llamacpp("extra/ggml-vocab-gpt-4o.gguf"));
}

TEST_CASE("GGUF files that are not vocabularies, or are damaged, give clear errors") {
    CHECK_THROWS_WITH_AS(glass::load_gguf_tokenizer("/nonexistent.gguf"), doctest::Contains("/nonexistent.gguf"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_gguf_tokenizer(test::shipped_tokenizer()), doctest::Contains("GGUF"), glass::Error);
    // A real file cut short: the reader must notice, not read past the end.
    const std::string whole = read_all(llamacpp("ggml-vocab-gpt-2.gguf"));
    const std::string cut = "/tmp/glass_test_cut_" + std::to_string(::getpid()) + ".gguf";
    for (size_t keep : {size_t{10}, size_t{30}, whole.size() / 2, whole.size() - 1}) {
        std::ofstream(cut, std::ios::binary).write(whole.data(), static_cast<std::streamsize>(keep));
        CHECK_THROWS_WITH_AS(glass::load_gguf_tokenizer(cut), doctest::Contains("GGUF"), glass::Error);
    }
    // A count field rewritten to something absurd: refused without a huge allocation.
    std::string absurd = whole;
    const std::uint64_t huge = ~std::uint64_t{0} >> 1;
    std::memcpy(absurd.data() + 16, &huge, 8);  // metadata_kv_count
    std::ofstream(cut, std::ios::binary).write(absurd.data(), static_cast<std::streamsize>(absurd.size()));
    CHECK_THROWS_WITH_AS(glass::load_gguf_tokenizer(cut), doctest::Contains("exceeds"), glass::Error);
    std::remove(cut.c_str());
    CHECK_THROWS_WITH_AS(glass::gguf_split_patterns("no-such-pre"), doctest::Contains("no-such-pre"), glass::Error);
}

TEST_CASE("glass tokenize --gguf prints the ids llama.cpp expects") {
    const std::string file = llamacpp("ggml-vocab-gpt-2.gguf");
    const std::vector<Vector> vectors = read_vectors(file);
    const Vector& hello = vectors.at(11);  // "Hello world"
    REQUIRE(hello.text == "Hello world");
    const test::Run r = test::run(test::bin_dir() + "/glass tokenize --gguf " + test::sh(file) + " --json -- " + test::sh(hello.text));
    REQUIRE(r.exit_code == 0);
    CHECK(nlohmann::json::parse(r.out)["ids"].get<std::vector<int>>() == hello.ids);
    const test::Run bad = test::run(test::bin_dir() + "/glass tokenize --gguf /nonexistent.gguf -- hi");
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("/nonexistent.gguf") != std::string::npos);
}

TEST_CASE("byte-level GGUF vocabularies decode what they encode, invalid UTF-8 included") {
    const std::string invalid = "ok \xFF\xFE \x80 end \xE2\x82";  // stray bytes, a cut-off euro sign
    for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-mpt.gguf", "ggml-vocab-falcon.gguf",
                             "ggml-vocab-starcoder.gguf", "ggml-vocab-refact.gguf",
                             "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-llm.gguf"}) {
        CAPTURE(name);
        const auto tok = glass::load_gguf_tokenizer(llamacpp(name));
        const auto* bpe = dynamic_cast<const glass::ByteLevelBpe*>(tok.get());
        REQUIRE(bpe != nullptr);
        for (const Vector& v : read_vectors(llamacpp(name))) CHECK(bpe->decode_all(bpe->encode(v.text, false, false)) == v.text);
        // DeepSeek's vocabularies have no token for bytes that never occur in valid UTF-8
        // (0xC0, 0xC1, 0xF5..0xFF): such input is refused with the byte named, never dropped.
        if (bpe->find("\xFF") < 0) {
            CHECK_THROWS_WITH_AS(bpe->encode(invalid, false, false), doctest::Contains("0xFF"), glass::Error);
        } else {
            CHECK(bpe->decode_all(bpe->encode(invalid, false, false)) == invalid);
        }
    }
}

// glass export-gguf (formats/gguf_export.hpp): llama.cpp reads what glass writes
// (scripts/llama-cpp-compare runs it). Here: the metadata read back, the tensor count, and ggml's
// block layouts checked against llama.cpp's dequantization rule, y = d · (q − 8) with the
// block's first 16 weights in the low nibbles (q4_0), y = d · q (q8_0), on quantize()'s integers.
TEST_CASE("export-gguf: metadata llama.cpp needs; q8_0/q4_0 blocks in ggml's layout hold quantize()'s weights") {
    const std::string path = "/tmp/glass_test_export_" + std::to_string(::getpid()) + ".gguf";
    const test::Run r = test::run(test::bin_dir() + "/glass export-gguf -m " + test::shipped_model() + " -o " + path);
    REQUIRE(r.exit_code == 0);
    const glass::GgufFile f = glass::read_gguf_metadata(path);
    const glass::ModelConfig& c = test::shipped().config;
    CHECK(f.version == 3);
    CHECK(f.tensor_count == std::uint64_t(1 + 9 * c.n_layers + 2));
    CHECK(f.get_string("general.architecture", "") == "llama");
    CHECK(f.get_int("llama.block_count", 0) == c.n_layers);
    CHECK(f.get_int("llama.attention.head_count_kv", 0) == c.n_kv_heads);
    CHECK(f.get_int("llama.feed_forward_length", 0) == c.hidden_dim);
    const auto& tokens = f.get<std::vector<std::string>>("tokenizer.ggml.tokens");
    REQUIRE(tokens.size() == size_t(c.vocab_size));
    CHECK(tokens[3] == "<0x00>");
    CHECK(tokens[258] == "<0xFF>");
    std::filesystem::remove(path);
    // stories260K's hidden_dim 172 is no multiple of 32: q4_0 is refused, naming it.
    const test::Run q4 = test::run(test::bin_dir() + "/glass export-gguf --type q4_0 -o " + path);
    CHECK(q4.exit_code == 1);
    CHECK(q4.err.find("blk.0.ffn_down.weight has rows of 172 numbers") != std::string::npos);
    CHECK(!std::filesystem::exists(path));  // refused before anything was written
    CHECK(test::run(test::bin_dir() + "/glass export-gguf --type q5_0 -o " + path).exit_code == 2);

    // f16: every matrix as IEEE halves (half.hpp's rounding), the norm gains in f32. The token
    // embedding's first 64 weights appear in the file as their halves, and the file is the f32
    // one less 2 bytes per matrix weight (give or take each tensor's 32-byte padding).
    {
        const std::string f32_path = path + ".f32", f16_path = path + ".f16";
        REQUIRE(test::run(test::bin_dir() + "/glass export-gguf -o " + f32_path).exit_code == 0);
        REQUIRE(test::run(test::bin_dir() + "/glass export-gguf --type f16 -o " + f16_path).exit_code == 0);
        std::ifstream in(f16_path, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::string halves;
        for (int i = 0; i < 64; ++i) {
            const std::uint16_t h = glass::fp32_to_fp16(test::shipped().token_embedding[i]);
            halves.append(reinterpret_cast<const char*>(&h), 2);
        }
        CHECK(bytes.find(halves) != std::string::npos);
        // token_embd and output (tensor_count above), and the seven matrices of every layer
        const double matrix_weights = 2.0 * c.vocab_size * c.dim +
            double(c.n_layers) * (2.0 * c.dim * c.dim + 2.0 * c.kv_dim() * c.dim + 3.0 * c.hidden_dim * c.dim);
        const double saved = double(std::filesystem::file_size(f32_path)) - double(bytes.size());
        CHECK(saved == doctest::Approx(2 * matrix_weights).epsilon(0.01));
        std::filesystem::remove(f32_path);
        std::filesystem::remove(f16_path);
    }

    std::vector<float> w(2 * 64);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 7));
    for (const glass::QuantFormat format : {glass::QuantFormat::q8_0, glass::QuantFormat::q4_0}) {
        CAPTURE(glass::to_string(format));
        const auto bytes = glass::ggml_quantized_rows(w.data(), 2, 64, format);
        const glass::QuantizedMatrix want = glass::quantize(w.data(), 2, 64, format);
        const size_t block = size_t(glass::quant_block_bytes(format));
        REQUIRE(bytes.size() == 4 * block);
        for (int r = 0; r < 2; ++r)
            for (int b = 0; b < 2; ++b) {
                const std::uint8_t* p = bytes.data() + (size_t(r) * 2 + size_t(b)) * block;
                const float d = glass::fp16_to_fp32(std::uint16_t(p[0] | p[1] << 8));
                for (int j = 0; j < 32; ++j) {
                    const int q = format == glass::QuantFormat::q8_0 ? int(std::int8_t(p[2 + j]))
                                  : j < 16 ? (p[2 + j] & 0x0F) - 8 : (p[2 + j - 16] >> 4) - 8;
                    CHECK(d * float(q) == want.at(r, b * 32 + j));
                }
            }
    }
}

}  // namespace test_gguf_vocab
