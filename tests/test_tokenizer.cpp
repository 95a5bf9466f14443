// Tokenization (journey step 1): equal to llama2.c's encode() on both shipped vocabularies,
// dummy prefix and byte fallback (pitfalls 4 and 5), and the shared BPE merge rule.
#include "test_support.hpp"

namespace test_tokenizer {  // this file's own names (tests are built in unity batches)

namespace {

std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
}

const glass::Llama2cTokenizer& llama2_tok() {
    static const auto tok = glass::Llama2cTokenizer::load(test::shared_dir() + "/models/tokenizer.bin");
    return tok;
}

void check_against_golden(const glass::Llama2cTokenizer& tok, const std::string& file) {
    int cases = 0;
    for (const auto& rec : test::read_jsonl(test::golden(file))) {
        CAPTURE(rec["name"].get<std::string>());
        const std::string text = from_hex(rec["text_hex"].get<std::string>());
        const std::vector<int> ids = tok.encode(text, rec["bos"].get<int>() == 1, rec["eos"].get<int>() == 1);
        CHECK(ids == test::ids_of(rec["ids"]));
        if (rec.contains("sentencepiece_ids") && rec["runc_matches_sentencepiece"] == true)
            CHECK(ids == test::ids_of(rec["sentencepiece_ids"]));
        // Decoding gives the bytes back, whatever they were (byte fallback covers every byte).
        CHECK(tok.decode_all(ids) == text);
        ++cases;
    }
    CHECK(cases == 42);
}

}  // namespace

TEST_CASE("the shipped 512-piece vocabulary equals llama2.c's encode() on every golden") {
    CHECK(test::shipped_tok().vocab_size() == 512);
    check_against_golden(test::shipped_tok(), "tok512_tokenizer.jsonl");
}

TEST_CASE("Llama 2's 32k vocabulary equals llama2.c (and SentencePiece where they agree)") {
    CHECK(llama2_tok().vocab_size() == 32000);  // every entry of the file: no model given
    check_against_golden(llama2_tok(), "llama2_tokenizer.jsonl");
}

TEST_CASE("dummy prefix: non-empty text starts with a space piece, which decoding after BOS drops (pitfall 4)") {
    const auto& tok = llama2_tok();
    const std::vector<int> ids = tok.encode("Hello", true, false);
    REQUIRE(ids.size() == 2);
    CHECK(ids[0] == 1);
    CHECK(tok.piece(ids[1]) == " Hello");  // " Hello", not "Hello": every word carries its space
    CHECK(tok.find("Hello") != ids[1]);
    CHECK(tok.decode(1, ids[1]) == "Hello");        // after BOS the prefix space goes
    CHECK(tok.decode(ids[1], ids[1]) == " Hello");  // anywhere else it stays
    CHECK(tok.encode("", true, false) == std::vector<int>{1});  // empty text: no prefix at all
    CHECK(tok.encode("", false, false).empty());
}

TEST_CASE("byte fallback: a character outside the vocabulary becomes its bytes at id byte+3 (pitfall 5)") {
    const auto& tok = test::shipped_tok();
    const std::string emoji = "\xF0\x9F\x98\x80";  // 😀: not a piece of the 512 vocabulary
    REQUIRE(tok.find(emoji) < 0);
    const std::vector<int> ids = tok.encode(emoji, false, false);
    const std::vector<int> want = {tok.find(" "), 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3};
    CHECK(ids == want);
    for (int b = 0; b < 256; ++b) {
        CHECK(tok.byte_id(static_cast<unsigned char>(b)) == b + 3);
        CHECK(tok.decode(5, b + 3) == std::string(1, static_cast<char>(b)));
    }
    // Byte pieces decode to raw bytes even right after BOS (no space stripping applies).
    CHECK(tok.decode(1, 0x20 + 3) == " ");
}

TEST_CASE("merges pick the highest score, leftmost on a tie, and repeat") {
    // Hand-made merge table: (1,2)->10 rank 5, (2,3)->11 rank 1, (10,3)->12 rank 0, (3,3)->13 rank 1.
    auto lookup = [](int a, int b) -> std::optional<glass::Merge> {
        if (a == 1 && b == 2) return glass::Merge{10, 5};
        if (a == 2 && b == 3) return glass::Merge{11, 1};
        if (a == 10 && b == 3) return glass::Merge{12, 0};
        if (a == 3 && b == 3) return glass::Merge{13, 1};
        return std::nullopt;
    };
    std::vector<int> ids = {1, 2, 3};
    glass::bpe_merge(ids, lookup);  // (2,3) rank 1 beats (1,2) rank 5 -> [1, 11]; nothing more
    CHECK(ids == std::vector<int>{1, 11});
    ids = {2, 3, 3, 3};  // (2,3) and (3,3) tie at rank 1: the leftmost pair merges first
    glass::bpe_merge(ids, lookup);
    CHECK(ids == std::vector<int>{11, 13});
    ids = {7};
    glass::bpe_merge(ids, lookup);
    CHECK(ids == std::vector<int>{7});
}

TEST_CASE("the llama2.c scores drive merges: a more frequent merge wins") {
    const auto& tok = test::shipped_tok();
    // "Once" is one piece after merging; its score must exceed every partial merge we skipped.
    const std::vector<int> ids = tok.encode("Once", false, false);
    REQUIRE(ids.size() == 1);
    CHECK(tok.piece(ids[0]) == " Once");
}

}  // namespace test_tokenizer
