// Models from GGUF files (issue "Real models", step 2): the tensor table, ggml's types dequantized,
// the config from the metadata, and every way a file can be wrong.
#include <unistd.h>

#include <fstream>

#include "glass/formats/gguf_export.hpp"
#include "glass/formats/gguf_model.hpp"
#include "test_support.hpp"

namespace test_gguf_model {  // this file's own names (tests are built in unity batches)

namespace {

// A file in this program's temporary directory (removed at exit: test::temp_dir).
std::string temp_path(const std::string& name) { return test::temp_dir("gguf_model") + "/" + name; }

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

// The shipped model exported once per type (glass's own GGUF writer, the files llama.cpp runs in
// scripts/llama-cpp-compare).
const std::string& exported(glass::GgufTensorType type) {
    static std::map<glass::GgufTensorType, std::string> paths;
    auto it = paths.find(type);
    if (it != paths.end()) return it->second;
    const std::string path = temp_path("shipped_" + std::to_string(static_cast<int>(type)) + ".gguf");
    glass::write_gguf(test::shipped(), type, path);
    return paths.emplace(type, path).first->second;
}

// Greedy ids and the logits of every step: prefill `prompt`, then `steps` decodes.
struct Run {
    std::vector<int> ids;
    std::vector<std::vector<float>> logits;
};
Run greedy(const glass::Model& m, const std::vector<int>& prompt, int steps) {
    glass::CpuSession s(m);
    Run r;
    std::span<const float> l = s.prefill(prompt);
    for (int i = 0; i < steps; ++i) {
        r.logits.emplace_back(l.begin(), l.end());
        r.ids.push_back(glass::sample_argmax(l));
        l = s.decode(r.ids.back());
    }
    return r;
}

// The byte offset of the tensor description named `name` in a GGUF file's bytes (just past the
// name's 8-byte length and text): where n_dims, ne[], type and offset follow.
size_t description_of(const std::string& bytes, const std::string& name) {
    std::string key(8, '\0');
    const std::uint64_t n = name.size();
    std::memcpy(key.data(), &n, 8);
    key += name;
    const size_t at = bytes.find(key);
    REQUIRE_MESSAGE(at != std::string::npos, "no tensor " << name);
    return at + key.size();
}

void expect_load_error(const std::string& bytes, const std::vector<std::string>& fragments) {
    const std::string path = temp_path("bad.gguf");
    write_all(path, bytes);
    try {
        glass::load_gguf_model(path);
        FAIL("loaded a bad file");
    } catch (const glass::Error& e) {
        const std::string what = e.what();
        for (const std::string& f : fragments) {
            CAPTURE(what);
            CHECK(what.find(f) != std::string::npos);
        }
    }
    ::unlink(path.c_str());
}

}  // namespace

TEST_CASE("an F32 GGUF loads as the very model it was written from: config, views, logits bit for bit") {
    const glass::Model& shipped = test::shipped();
    const glass::Model m = glass::load_gguf_model(exported(glass::GgufTensorType::f32));
    const glass::ModelConfig& c = m.config;
    CHECK(c.dim == shipped.config.dim);
    CHECK(c.hidden_dim == shipped.config.hidden_dim);
    CHECK(c.n_layers == shipped.config.n_layers);
    CHECK(c.n_heads == shipped.config.n_heads);
    CHECK(c.n_kv_heads == shipped.config.n_kv_heads);
    CHECK(c.head_dim == shipped.config.head_dim);
    CHECK(c.vocab_size == shipped.config.vocab_size);
    CHECK(c.seq_len == shipped.config.seq_len);
    CHECK(m.output_classifier() == shipped.output_classifier());
    CHECK(c.rope_layout == glass::RopeLayout::adjacent_pairs);
    CHECK(glass::family_deltas(c).empty());
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    const Run want = greedy(shipped, prompt, 12), got = greedy(m, prompt, 12);
    CHECK(got.ids == want.ids);
    CHECK(got.logits == want.logits);
}

TEST_CASE("F16 and Q8_0/Q4_0 GGUFs dequantize to ggml's values") {
    const glass::Model& shipped = test::shipped();
    const std::vector<int> prompt = {1, 403, 407, 261, 378};
    SUBCASE("F16: every weight is the fp16 rounding of the fp32 one") {
        const glass::Model m = glass::load_gguf_model(exported(glass::GgufTensorType::f16));
        const auto& w = m.layers[2].w2;
        const auto& w0 = shipped.layers[2].w2;
        for (Eigen::Index i = 0; i < w.rows(); ++i)
            for (Eigen::Index j = 0; j < w.cols(); ++j)
                REQUIRE(w(i, j) == glass::fp16_to_fp32(glass::fp32_to_fp16(w0(i, j))));
        // fp16 weights move the logits by ~1e-4 relative; greedy ids of this model hold.
        const Run want = greedy(shipped, prompt, 8), got = greedy(m, prompt, 8);
        CHECK(got.ids == want.ids);
        CHECK(test::relative_error(got.logits[0], want.logits[0]) < 1e-2);
    }
    // Q8_0/Q4_0 need rows of whole 32-weight blocks: a random model of such a shape.
    const glass::Model random = glass::fast::random_model_in_memory(glass::llama2_config(64, 128, 2, 4, 2, 300, 64), 9);
    for (const auto& [type, format] : {std::pair{glass::GgufTensorType::q8_0, glass::QuantFormat::q8_0},
                                       std::pair{glass::GgufTensorType::q4_0, glass::QuantFormat::q4_0}}) {
        CAPTURE(static_cast<int>(type));
        // gguf_export writes quantize.hpp's integers and scales: dequantized by ggml's rule
        // (d · q, d · (nibble − 8)) they are exactly the weights glass's quantized model multiplies.
        const std::string path = temp_path("random_" + std::to_string(static_cast<int>(type)) + ".gguf");
        glass::write_gguf(random, type, path);
        const glass::Model m = glass::load_gguf_model(path);
        const glass::Model q = glass::quantized_model(random, format);
        for (int l = 0; l < random.config.n_layers; ++l) {
            CHECK(m.layers[static_cast<size_t>(l)].wq == q.layers[static_cast<size_t>(l)].wq);
            CHECK(m.layers[static_cast<size_t>(l)].w2 == q.layers[static_cast<size_t>(l)].w2);
        }
        CHECK(m.output_classifier() == q.output_classifier());
        ::unlink(path.c_str());
    }
}

TEST_CASE("the weights stay in the mapped file when they are F32 (no copy)") {
    const std::string path = exported(glass::GgufTensorType::f32);
    const glass::GgufModelFile g = glass::open_gguf_model(path);
    const glass::Model m = glass::load_gguf_model(path);
    const glass::GgufTensorInfo* t = g.find("blk.1.attn_q.weight");
    REQUIRE(t != nullptr);
    // Same offset inside two mappings of the same file: the weight view points into the file.
    const std::span<const char> b = g.bytes_of(*t);
    CHECK(std::memcmp(m.layers[1].wq.data(), b.data(), b.size()) == 0);
    CHECK(m.weight_bytes > 0);
}

TEST_CASE("bad GGUF models: a clear error naming the value, never a crash") {
    const std::string good = read_all(exported(glass::GgufTensorType::f32));
    REQUIRE(good.size() > 1000);

    SUBCASE("unknown architecture, named with the supported ones") {
        std::string bytes = good;
        const std::string key = "general.architecture";
        const size_t at = bytes.find(key);
        REQUIRE(at != std::string::npos);
        const size_t value = at + key.size() + 4 + 8;  // type u32, then the string's length
        REQUIRE(bytes.substr(value, 5) == "llama");
        bytes.replace(value, 5, "falcn");
        expect_load_error(bytes, {"architecture 'falcn'", "llama, qwen2, qwen3, gemma2, gemma3"});
    }
    SUBCASE("a tensor type glass does not read (Q2_K), named with the ones it does") {
        std::string bytes = good;
        const size_t at = description_of(bytes, "blk.0.attn_q.weight");
        const std::uint32_t q2_k = 10;
        std::memcpy(bytes.data() + at + 4 + 16, &q2_k, 4);  // n_dims, ne[2], then the type
        expect_load_error(bytes, {"blk.0.attn_q.weight", "Q2_K", "Q4_K, Q5_K, Q6_K"});
    }
    SUBCASE("an unknown tensor type number") {
        std::string bytes = good;
        const size_t at = description_of(bytes, "blk.0.ffn_up.weight");
        const std::uint32_t junk = 977;
        std::memcpy(bytes.data() + at + 4 + 16, &junk, 4);
        expect_load_error(bytes, {"blk.0.ffn_up.weight", "type 977"});
    }
    SUBCASE("a missing tensor, named with the shape expected") {
        std::string bytes = good;
        const size_t at = description_of(bytes, "blk.3.ffn_up.weight");
        bytes[at - 6] = 'X';  // "blk.3.ffn_up" -> "blk.3.ffX_up"
        expect_load_error(bytes, {"'blk.3.ffn_up.weight' is missing", "[172, 64]"});
    }
    SUBCASE("a mis-shaped tensor, named with both shapes") {
        std::string bytes = good;
        const size_t at = description_of(bytes, "blk.0.attn_k.weight");
        const std::uint64_t wrong = 48;
        std::memcpy(bytes.data() + at + 4 + 8, &wrong, 8);  // ne[1]: 32 KV rows -> 48
        expect_load_error(bytes, {"blk.0.attn_k.weight", "ne [64, 48]", "expected [64, 32]"});
    }
    SUBCASE("a truncated file") {
        expect_load_error(good.substr(0, good.size() * 9 / 10), {"past the end of the file", "truncated"});
        expect_load_error(good.substr(0, 100), {"GGUF file"});
    }
    SUBCASE("not a GGUF file at all") {
        expect_load_error(read_all(test::shipped_model()), {"not a GGUF file"});
    }
    SUBCASE("a missing hyperparameter") {
        std::string bytes = good;
        const size_t at = bytes.find("llama.block_count");
        REQUIRE(at != std::string::npos);
        bytes[at + 6] = 'X';  // "llama.Xlock_count"
        expect_load_error(bytes, {"llama.block_count"});
    }
}

TEST_CASE("glass generate -m FILE.gguf runs the file; with the shipped tokenizer, exactly the .bin's greedy ids") {
    const std::string gguf = exported(glass::GgufTensorType::f32);
    const std::string glass = test::bin_dir() + "/glass generate --temperature 0 -n 40 --json -p 'Once upon a time' ";
    const test::Run bin = test::run(glass);
    const test::Run file = test::run(glass + "-m " + test::sh(gguf) + " -t " + test::sh(test::shipped_tokenizer()));
    REQUIRE(bin.exit_code == 0);
    REQUIRE(file.exit_code == 0);
    const auto last_json = [](const std::string& out) { return nlohmann::json::parse(out.substr(out.find("\n{") + 1)); };
    const nlohmann::json a = last_json(bin.out), b = last_json(file.out);
    CHECK(b["prompt_ids"] == a["prompt_ids"]);
    CHECK(b["generated_ids"] == a["generated_ids"]);
    CHECK(b["generated_ids"].size() > 5);
    // Without -t the file's own (placeholder) vocabulary tokenizes the prompt: other ids, BOS first
    // because the SentencePiece vocabulary says so (tokenizer.ggml.add_bos_token absent: true).
    const test::Run own = test::run(glass + "-m " + test::sh(gguf));
    REQUIRE(own.exit_code == 0);
    const nlohmann::json c = last_json(own.out);
    CHECK(c["prompt_ids"][0] == 1);
    CHECK(c["prompt_ids"] != a["prompt_ids"]);
}

TEST_CASE("glass inspect: the header's architecture, config with sources, tensor table and figures") {
    const std::string gguf = exported(glass::GgufTensorType::f32);
    const test::Run r = test::run(test::bin_dir() + "/glass inspect " + test::sh(gguf) + " --json");
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const glass::ModelConfig& c = test::shipped().config;
    CHECK(j["architecture"] == "llama");
    CHECK(j["config"]["dim"] == c.dim);
    CHECK(j["config"]["n_kv_heads"] == c.n_kv_heads);
    CHECK(j["config"]["head_dim"] == c.head_dim);
    CHECK(j["config_sources"]["dim"] == "llama.embedding_length");
    CHECK(j["config_sources"]["head_dim"] == "default: dim / n_heads");
    CHECK(j["family_deltas"].empty());
    // The table is the file's own: compare with the tensor descriptions read independently here.
    const glass::GgufModelFile g = glass::open_gguf_model(gguf);
    REQUIRE(j["tensors"].size() == g.tensors.size());
    std::int64_t weights = 0;
    for (size_t i = 0; i < g.tensors.size(); ++i) {
        const glass::GgufTensorInfo& t = g.tensors[i];
        const nlohmann::json& row = j["tensors"][i];
        CHECK(row["name"] == t.name);
        CHECK(row["type"] == "F32");
        std::int64_t n = 1;
        for (const std::int64_t d : t.ne) n *= d;
        weights += n;
        CHECK(row["bytes"] == 4 * n);
        CHECK(row["shape"][0] == t.ne.back());  // row-major: rows first
    }
    CHECK(j["parameters"] == weights);
    CHECK(j["bytes_per_weight"] == 4.0);
    CHECK(j["embedding_table_bytes"] == std::int64_t{4} * c.vocab_size * c.dim);
    CHECK(j["kv_bytes_per_token_fp32"] == glass::kv_bytes_per_token(c, glass::KvType::fp32));
    // The llama2.c checkpoint too, and a clear error for a folder.
    const test::Run bin = test::run(test::bin_dir() + "/glass inspect " + test::sh(test::shipped_model()) + " --json");
    REQUIRE(bin.exit_code == 0);
    // (glass's export writes the tied classifier out as output.weight; the checkpoint shares it)
    const std::int64_t output = g.find("output.weight") ? std::int64_t{c.vocab_size} * c.dim : 0;
    CHECK(nlohmann::json::parse(bin.out)["parameters"] == weights - output);
    const test::Run dir = test::run(test::bin_dir() + "/glass inspect /tmp");  // a folder, but not a model's
    CHECK(dir.exit_code == 1);
    CHECK(dir.err.find("config.json") != std::string::npos);
}

}  // namespace test_gguf_model
