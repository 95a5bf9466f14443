// Stage 1, byte-level BPE: the merge engine, the split patterns, the loaders, and equality with
// tiktoken / GPT-2's encoder.py / Hugging Face tokenizers on the goldens in ../shared/goldens/.
#include <map>
#include <memory>
#include <random>

#include "glass/tokenize/byte_level_bpe.hpp"
#include "glass/formats/hf_loader.hpp"
#include "glass/streaming.hpp"
#include "glass/formats/tiktoken_loader.hpp"
#include "test_support.hpp"

namespace test_byte_bpe {  // this file's own names (tests are built in unity batches)

namespace {

std::string tokenizers_dir() { return test::shared_dir() + "/tokenizers"; }

// Loading a 200k vocabulary takes a moment: load each once.
const glass::ByteLevelBpe& tiktoken(const std::string& name) {
    static std::map<std::string, std::unique_ptr<glass::ByteLevelBpe>> cache;
    auto& slot = cache[name];
    if (!slot) {
        const std::string file = name == "r50k" ? "r50k_base" : name == "cl100k" ? "cl100k_base" : "o200k_base";
        slot = std::make_unique<glass::ByteLevelBpe>(
            glass::load_tiktoken(tokenizers_dir() + "/tiktoken/" + file + ".tiktoken", name));
    }
    return *slot;
}
const glass::ByteLevelBpe& gpt2_files() {
    static const glass::ByteLevelBpe tok = glass::load_gpt2(tokenizers_dir() + "/gpt2/encoder.json",
                                                            tokenizers_dir() + "/gpt2/vocab.bpe");
    return tok;
}
const glass::Tokenizer& hf(const std::string& name) {
    static std::map<std::string, std::unique_ptr<glass::Tokenizer>> cache;
    auto& slot = cache[name];
    if (!slot) slot = glass::load_hf_tokenizer(tokenizers_dir() + "/hf/" + name + "/tokenizer.json");
    return *slot;
}

std::string decode_all(const glass::Tokenizer& tok, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) out += tok.decode(-1, id);
    return out;
}

// Random bytes: mostly ASCII letters/spaces, some valid multi-byte characters, some invalid bytes.
std::string random_bytes(std::mt19937& rng, size_t n) {
    const std::vector<std::string> parts = {"a", "b", " ", "  ", "\n", "'s", "1", "é", "中", "😀", "\xE2\x82",
                                            "\xFF", "\x80", "\xC3", "\xF0\x9F", "\x00", "\t", "!!", "<|endoftext|>"};
    std::string s;
    while (s.size() < n) s += parts[rng() % parts.size()];
    return s;
}

}  // namespace

TEST_CASE("bpe_merge: the heap version equals the plain rescan, ties go to the leftmost pair") {
    // A toy vocabulary over ids 0..3 where many pairs share a rank: ties everywhere.
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        glass::PairMerges table;
        for (int l = 0; l < 12; ++l)
            for (int r = 0; r < 12; ++r)
                if (rng() % 3 == 0) table.add(l, r, glass::Merge{static_cast<int>(rng() % 12), static_cast<double>(rng() % 4)});
        std::vector<int> ids(1 + rng() % 80);
        for (int& id : ids) id = static_cast<int>(rng() % 12);
        std::vector<int> naive = ids, heap = ids;
        const auto lookup = [&](int l, int r) { return table.find(l, r); };
        glass::bpe_merge_naive(naive, lookup);
        glass::bpe_merge_heap(heap, lookup);
        REQUIRE(naive == heap);
    }
    // By hand: a=0, aa=1, a+a -> aa (rank 0), aa+aa -> 2 (rank 1). "aaaaa": the leftmost pairs
    // merge first: [aa][aa][a] -> [aaaa][a] = {2, 0}. (Rightmost-first would give [a][2].)
    glass::PairMerges t;
    t.add(0, 0, {1, 0.0});
    t.add(1, 1, {2, 1.0});
    std::vector<int> ids = {0, 0, 0, 0, 0};
    glass::bpe_merge_heap(ids, [&](int l, int r) { return t.find(l, r); });
    CHECK(ids == std::vector<int>{2, 0});
}

TEST_CASE("byte_level: GPT-2's printable stand-ins") {
    // From GPT-2's bytes_to_unicode: space (0x20) is the 33rd non-printing byte -> U+0120 "Ġ",
    // newline 0x0A -> U+010A "Ċ", 'A' stays 'A'.
    CHECK(glass::byte_level::encode(" ") == "\xC4\xA0");
    CHECK(glass::byte_level::encode("\n") == "\xC4\x8A");
    CHECK(glass::byte_level::encode("A") == "A");
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    CHECK(glass::byte_level::decode(glass::byte_level::encode(all)) == all);
    CHECK_FALSE(glass::byte_level::decode("\xE4\xB8\xAD").has_value());  // not a stand-in
}

TEST_CASE("pretokenize: cl100k split by hand") {
    const glass::Pretokenizer p({glass::kSplitCl100k});
    const std::vector<std::string_view> pieces = p.split("Hello world's 12345  \n\nok");
    const std::vector<std::string_view> expected = {"Hello", " world", "'s", " ", "123", "45", "  \n\n", "ok"};
    CHECK(pieces == expected);
    // Invalid bytes never vanish: they become pieces of their own.
    const std::vector<std::string_view> bad = p.split("ab\xFF\xFE cd");
    std::string joined;
    for (auto s : bad) joined += s;
    CHECK(joined == "ab\xFF\xFE cd");
}

TEST_CASE("tiktoken goldens: r50k, cl100k, o200k (ordinary encoding)") {
    int checked = 0;
    for (const auto& row : test::read_jsonl(test::golden("tokenize_tiktoken.jsonl"))) {
        const std::string enc = row["encoding"].get<std::string>();
        const std::string name = enc.substr(0, enc.find('_'));
        const std::string text = row["text"].get<std::string>();
        const glass::ByteLevelBpe& tok = tiktoken(name);
        const std::vector<int> ids = tok.encode(text, false, false);
        CHECK_MESSAGE(ids == test::ids_of(row["ids"]), enc, " / ", row["case"].get<std::string>());
        CHECK(tok.decode_all(ids) == text);
        ++checked;
    }
    CHECK(checked == 207);
}

TEST_CASE("GPT-2 encoder.json + vocab.bpe goldens, with the printable token strings") {
    int checked = 0;
    for (const auto& row : test::read_jsonl(test::golden("tokenize_gpt2.jsonl"))) {
        const std::string text = row["text"].get<std::string>();
        const std::vector<int> ids = gpt2_files().encode(text, false, false);
        CHECK_MESSAGE(ids == test::ids_of(row["ids"]), row["case"].get<std::string>());
        std::vector<std::string> printable;
        for (int id : ids) printable.push_back(glass::byte_level::encode(gpt2_files().piece(id)));
        CHECK(printable == row["tokens"].get<std::vector<std::string>>());
        ++checked;
    }
    CHECK(checked == 69);
}

TEST_CASE("Hugging Face tokenizer.json goldens: gpt2, llama3, qwen3 (special-token text matched)") {
    int checked = 0;
    for (const auto& row : test::read_jsonl(test::golden("tokenize_hf.jsonl"))) {
        const std::string name = row["tokenizer"].get<std::string>();
        const std::string text = row["text"].get<std::string>();
        const glass::Tokenizer& tok = hf(name);
        const std::vector<int> ids = tok.encode_with_specials(text);
        CHECK_MESSAGE(ids == test::ids_of(row["ids"]), name, " / ", row["case"].get<std::string>());
        // Qwen normalizes to NFC first, so its round trip gives the NFC form.
        CHECK(decode_all(tok, ids) == (name == "qwen3" ? glass::nfc(text) : text));
        ++checked;
    }
    CHECK(checked == 207);
}

TEST_CASE("every byte-level vocabulary: decode(encode(x)) == x for any bytes, invalid UTF-8 too") {
    std::mt19937 rng(42);
    std::vector<std::pair<std::string, const glass::Tokenizer*>> all = {
        {"r50k", &tiktoken("r50k")}, {"cl100k", &tiktoken("cl100k")}, {"o200k", &tiktoken("o200k")},
        {"gpt2 files", &gpt2_files()}, {"hf gpt2", &hf("gpt2")}, {"hf llama3", &hf("llama3")},
        {"hf qwen3", &hf("qwen3")}};
    std::string every_byte;
    for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
    for (const auto& [name, tok] : all) {
        CAPTURE(name);
        for (int trial = 0; trial < 40; ++trial) {
            const std::string x = trial == 0 ? every_byte : random_bytes(rng, 1 + rng() % 300);
            const std::vector<int> ids = tok->encode(x, false, false);
            const std::string expected = name == "hf qwen3" ? glass::nfc(x) : x;
            REQUIRE(decode_all(*tok, ids) == expected);
            // Plain encode never produces a special token, even from "<|endoftext|>" text.
            const auto* bl = dynamic_cast<const glass::ByteLevelBpe*>(tok);
            REQUIRE(bl != nullptr);
            for (int id : ids) REQUIRE_FALSE(bl->is_special(id));
        }
    }
}

TEST_CASE("special tokens: only when asked for") {
    const glass::ByteLevelBpe& cl = tiktoken("cl100k");
    const std::string text = "a<|endoftext|>b";
    const std::vector<int> plain = cl.encode(text, false, false);
    CHECK(std::find(plain.begin(), plain.end(), 100257) == plain.end());
    // With specials matched: "a", then <|endoftext|> (100257, tiktoken's cl100k table), then "b".
    const std::vector<int> with = cl.encode_with_specials(text);
    REQUIRE(with.size() == 3);
    CHECK(with[1] == 100257);
    CHECK(with[0] == cl.find("a"));
    CHECK(with[2] == cl.find("b"));
    CHECK(cl.eos_id() == 100257);
    CHECK(cl.bos_id() == -1);
    CHECK_THROWS_WITH_AS(cl.encode("x", true, false), doctest::Contains("no BOS"), glass::Error);
    // Llama 3: BOS/EOS from tokenizer_config.json beside tokenizer.json.
    CHECK(hf("llama3").bos_id() == 128000);
    CHECK(hf("llama3").piece(128000) == "<|begin_of_text|>");
}

TEST_CASE("streaming decode holds partial UTF-8 for every vocabulary") {
    // Each token's bytes go through Utf8Stream one token at a time; the stream must give back
    // exactly the text, and never emit half a character (checked by validity of each chunk).
    const std::string text = "naïve café 中文字符 😀👍🏽 🇫🇷 — ok";
    std::vector<const glass::Tokenizer*> all = {&tiktoken("r50k"), &tiktoken("cl100k"), &tiktoken("o200k"),
                                                &gpt2_files(), &hf("llama3"), &hf("qwen3"), &test::shipped_tok()};
    for (const glass::Tokenizer* tok : all) {
        const std::vector<int> ids = tok->encode(text, false, false);
        glass::Utf8Stream stream;
        std::string out;
        int prev = -1;
        bool split_somewhere = false;
        for (int id : ids) {
            const std::string bytes = tok->decode(prev, id);
            const std::string chunk = stream.push(bytes);
            split_somewhere |= chunk != bytes;
            CHECK(glass::utf8::sanitize(chunk) == chunk);
            out += chunk;
            prev = id;
        }
        out += stream.finish();
        // tok512 puts a dummy-prefix space before the text (dropped only right after BOS).
        CHECK(out == (tok == &test::shipped_tok() ? " " + text : text));
        if (tok == &tiktoken("r50k")) CHECK(split_somewhere);  // GPT-2 cuts emoji bytes apart
    }
}

TEST_CASE("long inputs: a 100 kB word and long runs encode exactly and round-trip") {
    const glass::ByteLevelBpe& cl = tiktoken("cl100k");
    // A long "word" (no split points) through the heap merge equals the plain rescan.
    std::string word;
    std::mt19937 rng(3);
    while (word.size() < 3000) word += "abcdefghij"[rng() % 10];
    std::vector<int> a, b;
    for (unsigned char c : word) a.push_back(cl.find(std::string(1, static_cast<char>(c))));
    b = a;
    const auto lookup = [&](int l, int r) { return cl.pair_merges().find(l, r); };
    glass::bpe_merge_naive(a, lookup);
    glass::bpe_merge_heap(b, lookup);
    CHECK(a == b);
    for (const std::string& big : {std::string(100000, 'x'), std::string(100000, ' '), word + std::string(97000, 'q'),
                                   std::string(100000, '9'), std::string(50000, '\n') + "x"}) {
        const std::vector<int> ids = cl.encode(big, false, false);
        CHECK(cl.decode_all(ids) == big);
    }
}

TEST_CASE("bad files: clear errors naming the file and the problem") {
    const std::string dir = "/tmp/glass_test_byte_bpe";
    std::system(("mkdir -p " + dir).c_str());
    const auto write = [&](const std::string& name, const std::string& content) {
        std::ofstream(dir + "/" + name, std::ios::binary) << content;
        return dir + "/" + name;
    };
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(dir + "/missing.tiktoken", "cl100k"),
                         doctest::Contains("missing.tiktoken"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(write("bad64.tiktoken", "IQ== 0\n!!!! 1\n"), "r50k"),
                         doctest::Contains("line 2"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(write("dup.tiktoken", "IQ== 0\nIg== 0\n"), "r50k"),
                         doctest::Contains("appears twice"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(write("norank.tiktoken", "IQ==\n"), "r50k"),
                         doctest::Contains("BASE64 RANK"), glass::Error);
    // A rank file without all 256 single bytes cannot encode arbitrary text.
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(write("few.tiktoken", "IQ== 0\n"), "r50k"),
                         doctest::Contains("single byte"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_tiktoken(tokenizers_dir() + "/tiktoken/r50k_base.tiktoken", "p99k"),
                         doctest::Contains("p99k"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_hf_tokenizer(write("notjson.json", "{oops")),
                         doctest::Contains("notjson.json"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_hf_tokenizer(write("wp.json", R"({"model":{"type":"WordPiece","vocab":{}}})")),
                         doctest::Contains("WordPiece"), glass::Error);
    CHECK_THROWS_WITH_AS(
        glass::load_hf_tokenizer(write("badmerge.json",
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a zz"]},"pre_tokenizer":{"type":"ByteLevel"}})")),
        doctest::Contains("zz"), glass::Error);
    CHECK_THROWS_WITH_AS(glass::load_gpt2(write("enc.json", "[1,2]"), tokenizers_dir() + "/gpt2/vocab.bpe"),
                         doctest::Contains("enc.json"), glass::Error);
    std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("cli: glass tokenize --tiktoken / --gpt2 / --hf print the goldens' ids") {
    const std::string glass = test::sh(test::bin_dir() + "/glass");
    const std::string t = tokenizers_dir();
    const auto ids_from = [&](const std::string& args, const std::string& text) {
        const test::Run r = test::run(glass + " tokenize " + args + " --json -- " + test::sh(text));
        CAPTURE(r.err);
        REQUIRE(r.exit_code == 0);
        return test::ids_of(nlohmann::json::parse(r.out)["ids"]);
    };
    // One case per golden file that has special-token text in it: the two semantics differ there.
    const auto find_row = [](const std::string& file, const std::string& key, const std::string& who) {
        for (const auto& row : test::read_jsonl(test::golden(file)))
            if (row[key] == who && row["case"] == "special_token_text") return row;
        FAIL("no special_token_text row for " << who);
        return nlohmann::json();
    };
    const auto cl = find_row("tokenize_tiktoken.jsonl", "encoding", "cl100k_base");
    CHECK(ids_from("--tiktoken " + test::sh(t + "/tiktoken/cl100k_base.tiktoken") + " --pattern cl100k",
                   cl["text"].get<std::string>()) == test::ids_of(cl["ids"]));
    const auto g2 = find_row("tokenize_gpt2.jsonl", "encoding", "gpt2(encoder.json+vocab.bpe)");
    CHECK(ids_from("--gpt2 " + test::sh(t + "/gpt2/encoder.json") + " " + test::sh(t + "/gpt2/vocab.bpe"),
                   g2["text"].get<std::string>()) == test::ids_of(g2["ids"]));
    const auto l3 = find_row("tokenize_hf.jsonl", "tokenizer", "llama3");
    CHECK(ids_from("--hf " + test::sh(t + "/hf/llama3/tokenizer.json"), l3["text"].get<std::string>()) ==
          test::ids_of(l3["ids"]));
    // C1 with cl100k (by hand from tiktoken: What / is / the / capital / of / France / ?).
    CHECK(ids_from("--tiktoken " + test::sh(t + "/tiktoken/cl100k_base.tiktoken") + " --pattern cl100k",
                   "What is the capital of France?") == std::vector<int>{3923, 374, 279, 6864, 315, 9822, 30});

    // Usage errors exit 2, bad files exit 1, each with one line naming the problem.
    test::Run r = test::run(glass + " tokenize --tiktoken x --pattern p99k hi");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("p99k") != std::string::npos);
    r = test::run(glass + " tokenize --tiktoken /nonexistent.tiktoken --pattern cl100k hi");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("/nonexistent.tiktoken") != std::string::npos);
    r = test::run(glass + " tokenize --gpt2 " + test::sh(t + "/gpt2/encoder.json") + " -- hi");
    CHECK(r.exit_code == 2);  // vocab.bpe missing: "hi" was taken as vocab.bpe, no TEXT left
}

TEST_CASE("tokenizer.json, SentencePiece style (▁ + byte_fallback): Llama 2 rebuilt as HF stores it") {
    // No Llama 2 tokenizer.json ships here, so build one the way Hugging Face's converter does
    // from the SentencePiece model: pieces with "▁" for spaces, and a merges list holding every
    // cut of every piece into two pieces, best-scored result first. Then check it against the
    // SentencePiece ids in the golden (Google's sentencepiece on Llama 2's tokenizer.model).
    const std::string bin = test::shared_dir() + "/models/tokenizer.bin";
    if (!std::ifstream(bin).good()) {
        MESSAGE("Llama 2 tokenizer.bin not found: skipped");
        return;
    }
    const glass::Llama2cTokenizer l2 = glass::Llama2cTokenizer::load(bin);
    const auto marked = [](std::string s) {
        std::string out;
        for (char c : s) out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
        return out;
    };
    nlohmann::json vocab = nlohmann::json::object();
    std::vector<std::tuple<float, int, std::string, std::string>> merges;  // (-score, id, l, r)
    for (int id = 0; id < l2.vocab_size(); ++id) {
        const std::string p = marked(l2.piece(id));
        if (!vocab.contains(p)) vocab[p] = id;
    }
    for (int id = 3 + 256; id < l2.vocab_size(); ++id) {
        const std::string p = marked(l2.piece(id));
        for (size_t cut = 1; cut < p.size(); ++cut)
            if (vocab.contains(p.substr(0, cut)) && vocab.contains(p.substr(cut)))
                merges.emplace_back(-l2.score(id), id, p.substr(0, cut), p.substr(cut));
    }
    std::sort(merges.begin(), merges.end());
    nlohmann::json merge_list = nlohmann::json::array();
    for (const auto& m : merges) merge_list.push_back({std::get<2>(m), std::get<3>(m)});
    const nlohmann::json j = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"byte_fallback", true},
                   {"unk_token", "<unk>"}}},
        {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
        {"pre_tokenizer", nullptr},
        {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}, {{"id", 2}, {"content", "</s>"}, {"special", true}}}}};
    const std::string path = "/tmp/glass_test_llama2_tokenizer.json";
    std::ofstream(path) << j.dump();
    const std::unique_ptr<glass::Tokenizer> tok = glass::load_hf_tokenizer(path);
    std::remove(path.c_str());
    REQUIRE(dynamic_cast<const glass::SentencePieceBpe*>(tok.get()) != nullptr);
    int checked = 0;
    for (const auto& row : test::read_jsonl(test::golden("llama2_tokenizer.jsonl"))) {
        std::string text;  // from text_hex: some cases are not valid UTF-8 (text is null)
        const std::string hex = row["text_hex"].get<std::string>();
        for (size_t i = 0; i + 1 < hex.size(); i += 2) text += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
        if (!row.contains("sentencepiece_ids") || !row["sentencepiece_ids"].is_array()) continue;
        std::vector<int> expected = test::ids_of(row["sentencepiece_ids"]);
        expected.erase(expected.begin());  // the golden has BOS first
        CHECK_MESSAGE(tok->encode(text, false, false) == expected, row["name"].get<std::string>());
        ++checked;
    }
    CHECK(checked == 38);  // the rows that carry sentencepiece_ids
    // Special-token text: matched only when asked.
    CHECK(tok->encode_with_specials("<s>hi").front() == 1);
    CHECK(tok->encode("<s>hi", false, false).front() != 1);
}

}  // namespace test_byte_bpe
