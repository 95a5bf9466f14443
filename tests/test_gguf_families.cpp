// Real model families from GGUF files (issue "Real models"): scripts/make-family-models writes small
// random-weight Llama 2, Llama 3.1, Mistral, Qwen2, Qwen3, Gemma 2 and Gemma 3 models the way
// llama.cpp's converter writes real ones (Q/K permutation, Gemma's w+1 norms, rope_freqs, ...) in
// F32, F16, BF16, Q8_0 and Q4_0, plus a float64 reference forward pass that follows transformers'
// modeling code on the f32 weights — an oracle written independently of glass. Here glass loads
// every file and follows the reference's greedy path. (llama.cpp itself on the same files:
// tests/families/, ctest llama_cpp_families.)
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "glass/fast/fast_paged_backend.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/formats/gguf_model.hpp"
#include "glass/formats/model_files.hpp"
#include "glass/serve/paged_transformer.hpp"
#include "kernel_checks.hpp"
#include "test_support.hpp"

namespace test_gguf_families {  // this file's own names (tests are built in unity batches)

namespace {

const std::vector<std::string> kFamilies = {"llama2", "llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};

// The models, written once per test run (about 5 s, 320 MB) into a folder of the build tree.
const std::string& families_dir() {
    static const std::string dir = [] {
        const std::string d = test::bin_dir() + "/../families-" + std::to_string(::getpid());
        const test::Run r = test::run("python3 " + test::sh(std::string(GLASS_SOURCE_DIR) + "/scripts/make-family-models") + " " +
                                      test::sh(d));
        INFO(r.err);
        REQUIRE_MESSAGE(r.exit_code == 0, "scripts/make-family-models failed (python3-numpy missing? scripts/install-deps)");
        return d;
    }();
    return dir;
}

struct RemoveFamilies {
    ~RemoveFamilies() {
        // Only the folder this process made (never anything outside the build tree).
        const std::string d = test::bin_dir() + "/../families-" + std::to_string(::getpid());
        std::error_code ignored;
        std::filesystem::remove_all(d, ignored);
    }
} remove_families_at_exit;

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    return nlohmann::json::parse(in);
}

// ‖got − want‖² / ‖want‖² over one logits vector.
double nmse(std::span<const float> got, const std::vector<double>& want) {
    double d = 0, n = 0;
    for (size_t i = 0; i < want.size(); ++i) d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
    return d / n;
}

}  // namespace

TEST_CASE("every family's GGUF: the config llama.cpp's loader derives, from the header") {
    const nlohmann::json manifest = read_json(families_dir() + "/manifest.json");
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const nlohmann::json& want = manifest["families"][f]["config"]["gguf"];
        const glass::Model m = glass::load_gguf_model(families_dir() + "/" + f + "-F32.gguf");
        const glass::ModelConfig& c = m.config;
        CHECK(c.dim == want["dim"]);
        CHECK(c.hidden_dim == want["hidden_dim"]);
        CHECK(c.n_layers == want["n_layers"]);
        CHECK(c.n_heads == want["n_heads"]);
        CHECK(c.n_kv_heads == want["n_kv_heads"]);
        CHECK(c.head_dim == want["head_dim"]);
        CHECK(c.vocab_size == want["vocab_size"]);
        CHECK(c.rope_layout == (want["rope_layout"] == "half_split" ? glass::RopeLayout::half_split
                                                                    : glass::RopeLayout::adjacent_pairs));
        CHECK(c.qkv_bias == want["qkv_bias"].get<bool>());
        CHECK(c.qk_norm == want["qk_norm"].get<bool>());
        CHECK(c.sandwich_norms == want["sandwich_norms"].get<bool>());
        CHECK(c.shared_classifier == want["tied"].get<bool>());
        CHECK(c.sliding_window == (want["sliding_window"].is_null() ? 0 : want["sliding_window"].get<int>()));
        if (want["sliding_window_pattern"].is_number())
            CHECK(c.sliding_window_pattern == want["sliding_window_pattern"].get<int>());
    }
}

TEST_CASE("every family, every type: glass on the GGUF follows the float64 reference's greedy path") {
    // Tolerances (NMSE of the logits at each of 9 steps, against float64 on the f32 weights):
    //   F32: fp32 arithmetic in another order, ~1e-12 measured; 1e-9 leaves room for any CPU.
    //   F16/BF16/Q8_0: the weights themselves are rounded (relative 5e-4 / 4e-3 / 4e-3 per weight):
    //   ~1e-6 / 1e-4 / 1e-3 measured, bounds 1e-5 / 1e-3 / 1e-2, and the greedy ids must hold.
    //   Q4_0: 4-bit weights move the logits by ~1e-1 NMSE: other tokens are expected, so only the
    //   bound 0.5 (a broken dequantization gives ~1 or NaN) is checked here; llama.cpp on the same
    //   Q4_0 file is the real check (tests/families/). The same for the other quantized files,
    //   bounds a few times their measured worst over the families (0.23 Q4_1, 0.13 Q4_K_M; 0.081
    //   Q5_0, 0.048 Q5_1, 0.041 Q5_K_M; 0.013 Q6_K): the error falls with the bits per weight.
    const std::map<std::string, double> bound = {
        {"F32", 1e-9},  {"F16", 1e-5},  {"BF16", 1e-3},   {"Q8_0", 1e-2},   {"Q4_0", 0.5}, {"Q4_1", 0.5},
        {"Q5_0", 0.25}, {"Q5_1", 0.25}, {"Q4_K_M", 0.5}, {"Q5_K_M", 0.25}, {"Q6_K", 0.05}};
    const std::set<std::string> follows_greedy = {"F32", "F16", "BF16", "Q8_0"};
    for (const std::string& f : kFamilies) {
        const nlohmann::json ref = read_json(families_dir() + "/" + f + "-reference.json");
        const std::vector<int> prompt = ref["prompt_ids"], path = ref["greedy_ids"];
        for (const auto& [type, limit] : bound) {
            CAPTURE(f);
            CAPTURE(type);
            const glass::Model m = glass::load_gguf_model(families_dir() + "/" + f + "-" + type + ".gguf");
            glass::CpuSession s(m);
            std::span<const float> logits = s.prefill(prompt);
            for (size_t step = 0; step < path.size(); ++step) {
                CAPTURE(step);
                const std::vector<double> want = ref["logits"][step];
                REQUIRE(logits.size() == want.size());
                CHECK(nmse(logits, want) < limit);
                if (follows_greedy.count(type)) CHECK(glass::sample_argmax(logits) == path[step]);
                logits = s.decode(path[step]);  // teacher-forced along the reference's path
            }
        }
    }
}

TEST_CASE("every family: glass on the Hugging Face folder == glass on the GGUF, bit for bit") {
    // The folder holds the weights before llama.cpp's converter touched them (half-split q/k rows
    // for Llama and Mistral, Gemma's norm gains as w for x·(1+w)); load_hf_model does what the
    // converter does, so the same numbers come out. f16 / bf16 folders hold the bytes of the F16 /
    // BF16 files. One exception, bounded instead: Llama 3.1's rope scaling, which the GGUF carries
    // as divisors computed by the converter's float32 pow (torch's, or here numpy's), and glass
    // computes with the C library's powf: one divisor may differ by an ulp (1e-5 relative bound).
    for (const std::string& f : kFamilies) {
        const nlohmann::json ref = read_json(families_dir() + "/" + f + "-reference.json");
        const std::vector<int> prompt = ref["prompt_ids"], path = ref["greedy_ids"];
        for (const auto& [gguf, folder] : {std::pair{"F32", "f32"}, std::pair{"F16", "f16"}, std::pair{"BF16", "bf16"}}) {
            CAPTURE(f);
            CAPTURE(folder);
            const glass::Model a = glass::load_gguf_model(families_dir() + "/" + f + "-" + gguf + ".gguf");
            const glass::Model b = glass::load_model(families_dir() + "/" + f + "-hf-" + folder);
            CHECK(b.config.norm_weight_offset == (f.rfind("gemma", 0) == 0 ? 1.0f : 0.0f));
            glass::CpuSession sa(a), sb(b);
            std::vector<float> la = [&] { const auto l = sa.prefill(prompt); return std::vector<float>(l.begin(), l.end()); }();
            std::span<const float> lb = sb.prefill(prompt);
            for (size_t step = 0; step <= path.size(); ++step) {
                CAPTURE(step);
                if (f == "llama3") CHECK(test::relative_error(lb, la) < 1e-5);
                else CHECK(std::vector<float>(lb.begin(), lb.end()) == la);
                if (step == path.size()) break;
                const auto next = sa.decode(path[step]);
                la.assign(next.begin(), next.end());
                lb = sb.decode(path[step]);
            }
        }
    }
}

TEST_CASE("a Hugging Face folder's tokenizer.json tokenizes the prompt as llama.cpp tokenized it for the GGUF") {
    const nlohmann::json manifest = read_json(families_dir() + "/manifest.json");
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        const nlohmann::json& fam = manifest["families"][f];
        const std::string dir = families_dir() + "/" + f + "-hf-f32";
        const glass::Model m = glass::load_model(dir);
        const auto from_folder = glass::load_model_tokenizer(dir, m, "", "");
        const auto from_gguf = glass::load_model_tokenizer(families_dir() + "/" + f + "-F32.gguf", m, "", "");
        const std::string text = fam["prompt_text"];
        const std::vector<int> want = fam["prompt_ids"];
        // The prompt ids are BOS (when the family adds one) + llama.cpp's tokenization, cut to length.
        std::vector<int> got = from_gguf->encode(text, from_gguf->adds_bos(), false);
        REQUIRE(got.size() >= want.size());
        got.resize(want.size());
        CHECK(got == want);
        std::vector<int> got_folder = from_folder->encode(text, from_gguf->adds_bos(), false);
        got_folder.resize(want.size());
        CHECK(got_folder == want);
    }
}

TEST_CASE("bad Hugging Face folders: a clear error naming the file and the value") {
    namespace fs = std::filesystem;
    const std::string good = families_dir() + "/qwen3-hf-f32";  // sharded: the index names two files
    const std::string bad = test::bin_dir() + "/../bad-hf-" + std::to_string(::getpid());
    const auto fresh_copy = [&] {
        fs::remove_all(bad);
        fs::copy(good, bad);
    };
    const auto expect = [&](const std::vector<std::string>& fragments) {
        try {
            glass::load_model(bad);
            FAIL("loaded a bad folder");
        } catch (const glass::Error& e) {
            const std::string what = e.what();
            CAPTURE(what);
            for (const std::string& s : fragments) CHECK(what.find(s) != std::string::npos);
        }
    };
    const auto edit_json = [&](const std::string& file, const std::function<void(nlohmann::json&)>& change) {
        nlohmann::json j = read_json(bad + "/" + file);
        change(j);
        std::ofstream(bad + "/" + file) << j.dump();
    };
    SUBCASE("config.json without a required field") {
        fresh_copy();
        edit_json("config.json", [](nlohmann::json& j) { j.erase("hidden_size"); });
        expect({"config.json has no \"hidden_size\""});
    }
    SUBCASE("an unknown model type, named with the supported ones") {
        fresh_copy();
        edit_json("config.json", [](nlohmann::json& j) { j["model_type"] = "falcon"; });
        expect({"model_type 'falcon'", "llama, mistral, qwen2, qwen3, gemma2, gemma3_text"});
    }
    SUBCASE("an index naming a shard that is not there") {
        fresh_copy();
        fs::remove(bad + "/model-00002-of-00002.safetensors");
        expect({"model-00002-of-00002.safetensors", "not in the folder"});
    }
    SUBCASE("a truncated shard") {
        fresh_copy();
        fs::resize_file(bad + "/model-00001-of-00002.safetensors", fs::file_size(bad + "/model-00001-of-00002.safetensors") / 2);
        expect({"model-00001-of-00002.safetensors", "data_offsets outside the data"});
    }
    SUBCASE("a mis-shaped tensor, named with both shapes") {
        fresh_copy();
        edit_json("config.json", [](nlohmann::json& j) { j["intermediate_size"] = 640; });
        expect({"mlp.gate_proj.weight", "expected [640, 256]"});
    }
    fs::remove_all(bad);
}

TEST_CASE("glass generate -m GGUF and -m FOLDER: the model's own tokenizer, the same greedy ids (reference and fast path), explain and chat on them; glass inspect FOLDER") {
    const nlohmann::json manifest = read_json(families_dir() + "/manifest.json");
    const auto last_json = [](const std::string& out) { return nlohmann::json::parse(out.substr(out.find("\n{") + 1)); };
    for (const std::string& f : {std::string("qwen3"), std::string("gemma3")}) {
        CAPTURE(f);
        const std::string full = manifest["families"][f]["prompt_text"];
        const std::string text = full.substr(0, full.rfind(' ', 60));  // whole words: a prefix of the tokens
        const std::string cmd = test::bin_dir() + "/glass generate --temperature 0 --max-new-tokens 6 --json -p " + test::sh(text) + " -m ";
        const test::Run gguf = test::run(cmd + test::sh(families_dir() + "/" + f + "-F32.gguf"));
        const test::Run folder = test::run(cmd + test::sh(families_dir() + "/" + f + "-hf-f32"));
        INFO(gguf.err << folder.err);
        REQUIRE(gguf.exit_code == 0);
        REQUIRE(folder.exit_code == 0);
        const nlohmann::json a = last_json(gguf.out), b = last_json(folder.out);
        // prompt_ids: the text through the model's own vocabulary, BOS when the model adds one.
        const std::vector<int> want_prefix = manifest["families"][f]["prompt_ids"];
        const std::vector<int> got = a["prompt_ids"];
        REQUIRE(got.size() <= want_prefix.size());
        CHECK(std::equal(got.begin(), got.end(), want_prefix.begin()));
        CHECK(b["prompt_ids"] == a["prompt_ids"]);
        CHECK(b["generated_ids"] == a["generated_ids"]);
        CHECK(a["generated_ids"].size() == 6);
        // The fast CPU path on the same file: the same greedy ids (its logits are within 1e-5 of
        // the reference's, tests/test_fast_families.cpp; these prompts have no near tie).
        const test::Run fast = test::run(cmd + test::sh(families_dir() + "/" + f + "-F32.gguf") + " --threads 2");
        INFO(fast.err);
        REQUIRE(fast.exit_code == 0);
        CHECK(last_json(fast.out)["generated_ids"] == a["generated_ids"]);
        // Quantized files, the reference (which widens them) against the fast path: a Q4_0 file
        // with --threads alone runs on its own blocks (q4, the stored type); a Q4_K_M file (Q4_K
        // and Q6_K tensors) on its own blocks too (`stored`: q4_k and q6_k panels), or with
        // --precision fp32 its exact values widened. The same weights every way, so the same
        // greedy ids.
        for (const auto& [file, fast_flags] : {std::pair<std::string, std::string>{"-Q4_0.gguf", " --threads 2"},
                                               {"-Q4_K_M.gguf", " --threads 2"},
                                               {"-Q4_K_M.gguf", " --threads 2 --precision fp32"}}) {
            CAPTURE(file);
            const std::string path = test::sh(families_dir() + "/" + f + file);
            const test::Run reference = test::run(cmd + path), fast_path = test::run(cmd + path + fast_flags);
            INFO(reference.err << fast_path.err);
            REQUIRE(reference.exit_code == 0);
            REQUIRE(fast_path.exit_code == 0);
            CHECK(last_json(fast_path.out)["generated_ids"] == last_json(reference.out)["generated_ids"]);
        }
        // explain and chat take the same -m: explain's greedy steps are generate's; chat's prompt
        // is its plain-text template around the turn, through the model's own tokenizer.
        const test::Run explain = test::run(test::bin_dir() + "/glass explain --temperature 0 -n 3 --json -p " + test::sh(text) +
                                            " -m " + test::sh(families_dir() + "/" + f + "-F32.gguf"));
        INFO(explain.err);
        REQUIRE(explain.exit_code == 0);
        const nlohmann::json x = nlohmann::json::parse(explain.out.substr(explain.out.rfind("\n{") + 1));  // after the text
        CHECK(x["prompt_ids"] == a["prompt_ids"]);
        CHECK(x["model"]["head_dim"] == manifest["families"][f]["config"]["gguf"]["head_dim"]);
        // The token sampled after the prompt, then one per decode step: 1 + 3 ids.
        const std::vector<int> generated = a["generated_ids"], first4(generated.begin(), generated.begin() + 4);
        CHECK(x["generated_ids"].get<std::vector<int>>() == first4);
        const test::Run chat = test::run("printf 'hello there\n' | " + test::bin_dir() + "/glass chat --temperature 0 --max-new-tokens 3 --json -m " +
                                         test::sh(families_dir() + "/" + f + "-hf-f32"));
        INFO(chat.err);
        REQUIRE(chat.exit_code == 0);
        const nlohmann::json turn = last_json("\n" + chat.out);
        CHECK(turn["turn"] == 1);
        CHECK(turn["prompt_tokens"].get<int>() > 3);
    }
    // The serving engine on a family file: serve-bench -m drives the fast paged backend (its
    // logits against the reference's: tests/test_fast_families.cpp).
    const test::Run bench = test::run(test::bin_dir() + "/glass serve-bench --threads 2 --requests 6 --json -m " +
                                      test::sh(families_dir() + "/gemma2-F32.gguf"));
    INFO(bench.err);
    REQUIRE(bench.exit_code == 0);
    const nlohmann::json sb = last_json("\n" + bench.out);
    CHECK(sb["requests"] == 6);
    CHECK(sb["generated_tokens"].get<int>() >= 6);
    const test::Run r = test::run(test::bin_dir() + "/glass inspect " + test::sh(families_dir() + "/qwen3-hf-f32") + " --json");
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json index = read_json(families_dir() + "/qwen3-hf-f32/model.safetensors.index.json");
    CHECK(j["tensors"].size() == index["weight_map"].size());
    CHECK(j["config"]["head_dim"] == 128);
    CHECK(j["config"]["qk_norm"] == true);
    CHECK(j["config_sources"]["head_dim"] == "config.json head_dim");
    CHECK(std::find(j["family_deltas"].begin(), j["family_deltas"].end(), "qk_norm") != j["family_deltas"].end());
}

TEST_CASE("end of generation: EOS and each family's end-of-turn token, from the GGUF and from the folder; generate stops on either") {
    const nlohmann::json manifest = read_json(families_dir() + "/manifest.json");
    for (const std::string& f : kFamilies) {
        CAPTURE(f);
        std::vector<int> want = manifest["families"][f]["config"]["gguf"]["stop_ids"];  // eos, then <|im_end|> ...
        std::sort(want.begin(), want.end());
        const std::string gguf = families_dir() + "/" + f + "-F32.gguf", folder = families_dir() + "/" + f + "-hf-f32";
        const glass::Model m = glass::load_model(gguf), m_folder = glass::load_model(folder);
        const std::unique_ptr<glass::Tokenizer> from_gguf = glass::load_model_tokenizer(gguf, m, "", "");
        const std::unique_ptr<glass::Tokenizer> from_folder = glass::load_model_tokenizer(folder, m_folder, "", "");
        CHECK(from_gguf->end_of_generation_ids() == want);
        CHECK(from_folder->end_of_generation_ids() == want);
        // A folder's ids come with its ModelConfig (config.json and generation_config.json), each one of `want`.
        CHECK(!m_folder.config.end_of_generation_ids.empty());
        for (const int id : m_folder.config.end_of_generation_ids)
            CHECK(std::find(want.begin(), want.end(), id) != want.end());
        // The stop rule generate() and the serving engine share: any of them ends the reply as EOS.
        for (const int id : want) {
            glass::GenerateOptions o;
            o.max_new_tokens = 8;
            glass::TokenOutput out(*from_gguf, o, 0);
            CHECK(out.push(id, 1, 64).empty());
            CHECK(out.done());
            CHECK(out.stop_reason() == glass::StopReason::eos);
        }
        glass::GenerateOptions o;
        glass::TokenOutput out(*from_gguf, o, 0);
        int ordinary = 0;  // the first id that is neither BOS nor an end
        while (ordinary == from_gguf->bos_id() || std::find(want.begin(), want.end(), ordinary) != want.end()) ++ordinary;
        out.push(ordinary, 1, 64);
        CHECK(!out.done());
    }
    // A folder whose eos_token_id is not a token id is refused by name, when the model loads.
    const std::string bad = test::bin_dir() + "/../families-bad-eos-" + std::to_string(::getpid());
    std::filesystem::remove_all(bad);
    std::filesystem::copy(families_dir() + "/qwen2-hf-f32", bad);
    std::ofstream(bad + "/generation_config.json") << R"({"eos_token_id": ["<|im_end|>"]})";
    CHECK_THROWS_WITH_AS(glass::load_model(bad), doctest::Contains("generation_config.json: eos_token_id"), glass::Error);
    std::filesystem::remove_all(bad);
}

TEST_CASE("weights in their stored type: the fast path packs every GGUF and folder matrix from the file's own blocks, with no fp32 copy") {
    // Loaded LoadWeights::as_stored, an F16, BF16, Q8_0 or Q4_0 matrix gets no fp32 view (null:
    // nothing widened) and the fast path packs it from the stored bytes, in the same type: every
    // packed weight then equals the widened reference weight bit for bit (a requantization would
    // move some), and the fast logits follow the reference on the widened file within 1e-5, the
    // fp32 rule (tests/test_fast_session.cpp): the same weights, only the order of fp32 sums
    // differs.
    const std::vector<std::pair<std::string, glass::fast::WeightType>> files = {
        {"F16.gguf", glass::fast::WeightType::fp16}, {"BF16.gguf", glass::fast::WeightType::bf16},
        {"Q8_0.gguf", glass::fast::WeightType::q8_0}, {"Q4_0.gguf", glass::fast::WeightType::q4_0},
        {"hf-f16", glass::fast::WeightType::fp16},    {"hf-bf16", glass::fast::WeightType::bf16}};
    for (const std::string& f : kFamilies) {
        const nlohmann::json ref = read_json(families_dir() + "/" + f + "-reference.json");
        const std::vector<int> prompt = ref["prompt_ids"], path = ref["greedy_ids"];
        for (const auto& [file, type] : files) {
            CAPTURE(f);
            CAPTURE(file);
            const std::string p = families_dir() + "/" + f + "-" + file;
            const glass::Model stored = glass::load_model(p, glass::LoadWeights::as_stored);
            const glass::Model widened = glass::load_model(p, glass::LoadWeights::fp32);
            CHECK_FALSE(stored.fp32_weights);
            CHECK(stored.token_embedding == nullptr);
            CHECK(stored.layers[0].w2.data() == nullptr);
            CHECK(glass::fast::stored_weight_type(stored) == type);
            CHECK_THROWS_WITH_AS(glass::CpuSession{stored}, doctest::Contains("stored type"), glass::Error);

            const glass::fast::FastOptions options{.threads = 2, .weights = type};
            glass::fast::FastModel packed(stored, options, glass::fast::SingleRow::matvec);
            const auto same_bits = [](const glass::fast::PackedMatrix& got, const glass::ConstMatrixMap& want) {
                for (int r = 0; r < want.rows(); ++r)
                    for (int k = 0; k < want.cols(); ++k)
                        if (got.at(r, k) != want(r, k)) return false;
                return true;
            };
            const int last = widened.config.n_layers - 1;
            CHECK(same_bits(packed.layer(0).wq, widened.layers[0].wq));  // q: permuted rows for a Llama folder
            CHECK(same_bits(packed.layer(0).wk, widened.layers[0].wk));
            CHECK(same_bits(packed.layer(last).w2, widened.layers[static_cast<size_t>(last)].w2));
            CHECK(same_bits(packed.classifier(), widened.output_classifier()));

            glass::CpuSession reference(widened);
            glass::fast::FastCpuSession fast(stored, options);
            const std::vector<int> next(path.begin(), path.begin() + 4);
            CHECK(kernel_checks::worst_error(reference, fast, prompt, next) <= 1e-5);
        }
    }
}

TEST_CASE("legacy and k-quant files on the fast path: the file's exact values as fp32, and as q8 panels") {
    // Q4_1, Q5_0 and Q5_1 have no panels of their own: the fast path widens each 32-row slice and
    // packs it (q8 by default). Any of these files asked for fp32 gets the reference's widened
    // weights bit for bit, so the logits follow the reference within the fp32 rule (1e-5); asked
    // for q8, within q8's weight tolerance (kernel_checks::weight_tolerance). The k-quant files'
    // default, their own panels, is the next test's.
    for (const std::string& f : kFamilies) {
        const nlohmann::json ref = read_json(families_dir() + "/" + f + "-reference.json");
        const std::vector<int> prompt = ref["prompt_ids"], path = ref["greedy_ids"];
        const std::vector<int> next(path.begin(), path.begin() + 3);
        for (const std::string type : {"Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K"}) {
            CAPTURE(f);
            CAPTURE(type);
            const std::string p = families_dir() + "/" + f + "-" + type + ".gguf";
            const glass::Model stored = glass::load_model(p, glass::LoadWeights::as_stored);
            const glass::Model widened = glass::load_model(p, glass::LoadWeights::fp32);
            const bool k_quant = type.find("_K") != std::string::npos;
            const auto default_type = !k_quant ? glass::fast::WeightType::q8_0
                                      : type == "Q6_K" ? glass::fast::WeightType::q6_k : glass::fast::WeightType::stored;
            CHECK(glass::fast::stored_weight_type(stored) == default_type);

            const glass::fast::FastOptions exact{.threads = 2, .weights = glass::fast::WeightType::fp32};
            glass::fast::FastModel packed(stored, exact, glass::fast::SingleRow::matvec);
            const int last = widened.config.n_layers - 1;
            bool same = true;
            for (const auto& [got, want] : {std::pair{&packed.layer(0).wv, &widened.layers[0].wv},
                                            std::pair{&packed.layer(last).w2, &widened.layers[static_cast<size_t>(last)].w2}})
                for (int r = 0; r < want->rows(); ++r)
                    for (int k = 0; k < want->cols(); ++k) same = same && got->at(r, k) == (*want)(r, k);
            CHECK(same);
            glass::CpuSession reference(widened), reference_again(widened);  // each check runs its own steps
            glass::fast::FastCpuSession fast_exact(stored, exact);
            CHECK(kernel_checks::worst_error(reference, fast_exact, prompt, next) <= 1e-5);

            glass::fast::FastCpuSession fast_q8(stored, {.threads = 2, .weights = glass::fast::WeightType::q8_0});
            CHECK(kernel_checks::worst_error(reference_again, fast_q8, prompt, next) <=
                  kernel_checks::weight_tolerance(glass::fast::WeightType::q8_0));
        }
    }
}

TEST_CASE("k-quant files on the fast path: each matrix in its file's own blocks, the reference's logits within 1e-5") {
    // A Q4_K_M or Q5_K_M file mixes types (llama-quant.cpp's choice: Q6_K for the output and some
    // attn_v / ffn_down, Q4_K or Q5_K elsewhere); by default (`stored`) the fast path packs each
    // matrix in the panel type of its file type (packed_kquants.hpp): nothing is rounded again,
    // so every packed weight is the reference's widened weight bit for bit, and the logits follow
    // the reference within the fp32 rule (1e-5: only the order of fp32 sums differs). With int8
    // activations the x side is rounded too: within q8's weight tolerance, the same rounding.
    using glass::fast::WeightType;
    for (const std::string& f : kFamilies) {
        const nlohmann::json ref = read_json(families_dir() + "/" + f + "-reference.json");
        const std::vector<int> prompt = ref["prompt_ids"], path = ref["greedy_ids"];
        const std::vector<int> next(path.begin(), path.begin() + 3);
        for (const std::string type : {"Q4_K_M", "Q5_K_M", "Q6_K"}) {
            CAPTURE(f);
            CAPTURE(type);
            const std::string p = families_dir() + "/" + f + "-" + type + ".gguf";
            const glass::Model stored = glass::load_model(p, glass::LoadWeights::as_stored);
            const glass::Model widened = glass::load_model(p, glass::LoadWeights::fp32);
            const glass::fast::FastOptions options{.threads = 2, .weights = glass::fast::stored_weight_type(stored)};
            glass::fast::FastModel packed(stored, options, glass::fast::SingleRow::matvec);
            // Each matrix's panel type is its file type's.
            const auto panel_of = [](const glass::StoredMatrix& m) { return glass::fast::weight_type_of_stored(m.type); };
            bool types_follow_file = packed.classifier().type == panel_of(stored.stored_classifier);
            int k_quant_matrices = 0;
            for (int l = 0; l < stored.config.n_layers; ++l) {
                const auto& got = packed.layer(l);
                const auto& file = stored.layers[static_cast<size_t>(l)].stored;
                for (const auto& [g, w] : {std::pair{&got.wq, &file.wq}, {&got.wv, &file.wv}, {&got.w1, &file.w1}, {&got.w2, &file.w2}}) {
                    types_follow_file = types_follow_file && g->type == panel_of(*w);
                    k_quant_matrices += glass::fast::is_k_quant(g->type);
                }
            }
            CHECK(types_follow_file);
            CHECK(k_quant_matrices == 4 * stored.config.n_layers);  // every row here is whole super-blocks
            if (f == "llama3" && type == "Q4_K_M") {
                // glass bench names the mix it runs: counted here from the packed matrices.
                const test::Run bench = test::run(test::bin_dir() + "/glass bench --runs 5 --gen 2 --prompt-len 2 --json -m " + test::sh(p));
                INFO(bench.err);
                REQUIRE(bench.exit_code == 0);
                const nlohmann::json j = nlohmann::json::parse(bench.out.substr(bench.out.rfind("\n{") + 1));
                CHECK(j["precision"] == "stored");
                CHECK(j["panel_types"] == packed.panel_types());
                CHECK(packed.panel_types().find("q4_k") != std::string::npos);
                CHECK(packed.panel_types().find("q6_k") != std::string::npos);
                // Decode's bytes: the weights, and the cache rows read by the steps at positions
                // 2 and 3 (3 and 4 rows in every layer of this file, which has no sliding window).
                const double kv_read = 3.5 * static_cast<double>(glass::kv_bytes_per_token(stored.config, glass::KvType::fp32));
                CHECK(j["kv_bytes_read_per_token"].get<double>() == doctest::Approx(kv_read).epsilon(1e-12));
                const double read = (j["weight_bytes_per_token"].get<double>() + kv_read) * j["decode_tokens_per_s"].get<double>();
                CHECK(j["decode_bytes_per_s"].get<double>() == doctest::Approx(read).epsilon(1e-9));
            }
            const int last = widened.config.n_layers - 1;
            bool same = true;
            for (const auto& [got, want] : {std::pair{&packed.layer(0).wv, &widened.layers[0].wv},
                                            std::pair{&packed.layer(last).w2, &widened.layers[static_cast<size_t>(last)].w2},
                                            std::pair{&packed.layer(0).w1, &widened.layers[0].w1}})
                for (int r = 0; r < want->rows(); ++r)
                    for (int k = 0; k < want->cols(); ++k) same = same && got->at(r, k) == (*want)(r, k);
            CHECK(same);
            glass::CpuSession reference(widened), reference_again(widened);
            glass::fast::FastCpuSession fast(stored, options);
            CHECK(kernel_checks::worst_error(reference, fast, prompt, next) <= 1e-5);
            glass::fast::FastOptions int8_x = options;
            int8_x.int8_activations = true;
            glass::fast::FastCpuSession fast_int8(stored, int8_x);
            CHECK(kernel_checks::worst_error(reference_again, fast_int8, prompt, next) <= kernel_checks::weight_tolerance(WeightType::q8_0));
            // The serving engine's paged backend packs the same panels: the reference's paged
            // engine on the widened weights, within the fp32 rule.
            glass::serve::CpuPagedBackend reference_paged(widened);
            glass::fast::FastPagedBackend fast_paged(stored, options);
            glass::serve::PagedSession want_paged(reference_paged, 4), got_paged(fast_paged, 4);
            CHECK(kernel_checks::worst_error(want_paged, got_paged, prompt, next) <= 1e-5);
        }
    }
}

TEST_CASE("glass inspect on a Q4_K_M file: each tensor's type and its bits per weight") {
    // llama-quant.cpp's Q4_K_M mix (scripts/make-family-models tensor_type): a tied embedding and
    // the output in Q6_K; attn_v / ffn_down in Q6_K where use_more_bits(layer, 3) holds (i < 3/8,
    // i ≥ 7·3/8 = 2, or (i − 0) % 3 == 2: layer 2 only), Q4_K on the other matrices, norms F32.
    // Bits per weight from the bytes: 144 B / 256 = 4.5, 210 / 256 = 6.5625.
    const test::Run r = test::run(test::bin_dir() + "/glass inspect --json " + test::sh(families_dir() + "/llama3-Q4_K_M.gguf"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    std::map<std::string, std::pair<std::string, double>> seen;
    for (const auto& t : j["tensors"]) seen[t["name"]] = {t["type"], t["bits_per_weight"]};
    CHECK(seen["token_embd.weight"] == std::pair<std::string, double>{"Q6_K", 6.5625});
    CHECK(seen["blk.2.attn_v.weight"] == std::pair<std::string, double>{"Q6_K", 6.5625});
    CHECK(seen["blk.2.ffn_down.weight"].first == "Q6_K");
    CHECK(seen["blk.0.attn_v.weight"].first == "Q4_K");
    CHECK(seen["blk.1.ffn_down.weight"] == std::pair<std::string, double>{"Q4_K", 4.5});
    CHECK(seen["blk.0.attn_q.weight"] == std::pair<std::string, double>{"Q4_K", 4.5});
    CHECK(seen["blk.0.attn_norm.weight"] == std::pair<std::string, double>{"F32", 32.0});
}

TEST_CASE("glass quantize: an F32 GGUF rewritten as Q4_K_M ... Q5_1 is, byte for byte, the file llama.cpp reads") {
    // scripts/make-family-models writes the same file types with numpy (its own code for the same
    // block rules and llama-quantize's type mix), and ctest llama_cpp_families runs llama.cpp on
    // those files. glass quantize (C++, ggml_quants.hpp) must produce exactly those bytes: same
    // metadata, same tensor table, same blocks.
    const std::string dir = test::temp_dir("quantize");
    for (const std::string& f : kFamilies)
        for (const std::string type : {"Q4_K_M", "Q5_K_M", "Q6_K", "Q4_1", "Q5_0", "Q5_1"}) {
            CAPTURE(f);
            CAPTURE(type);
            const std::string out = dir + "/" + f + "-" + type + ".gguf";
            const test::Run r = test::run(test::bin_dir() + "/glass quantize --json -m " + test::sh(families_dir() + "/" + f + "-F32.gguf") +
                                          " --type " + type + " -o " + test::sh(out));
            INFO(r.err);
            REQUIRE(r.exit_code == 0);
            const nlohmann::json j = nlohmann::json::parse(r.out);
            CHECK(j["bytes_out"] == std::filesystem::file_size(out));
            CHECK(test::read_file(out) == test::read_file(families_dir() + "/" + f + "-" + type + ".gguf"));
        }
    // Bad input, named: an unknown type (before reading anything), a llama2.c file, the input as output.
    const std::string f32 = test::sh(families_dir() + "/qwen2-F32.gguf");
    const test::Run unknown = test::run(test::bin_dir() + "/glass quantize -m " + f32 + " --type q3_k_s -o " + test::sh(dir + "/x.gguf"));
    CHECK(unknown.exit_code == 1);
    CHECK(unknown.err.find("unknown file type 'Q3_K_S'") != std::string::npos);
    const test::Run same = test::run(test::bin_dir() + "/glass quantize -m " + f32 + " --type q8_0 -o " + f32);
    CHECK(same.exit_code == 1);
    CHECK(same.err.find("is the input") != std::string::npos);
    const test::Run llama2c = test::run(test::bin_dir() + "/glass quantize -m " + test::sh(test::models_dir() + "/stories260K.bin") +
                                        " --type q8_0 -o " + test::sh(dir + "/y.gguf"));
    CHECK(llama2c.exit_code == 1);
    CHECK(llama2c.err.find("glass export-gguf first") != std::string::npos);
    std::filesystem::remove_all(dir);
}

}  // namespace test_gguf_families
