// The tokenization example (01_tokenize): run it and check the ids and counts it prints against
// the goldens in ../shared and the arithmetic of claim C1, never against the program itself.
#include <fstream>
#include <string>
#include <vector>

#include "example_output.hpp"
#include "test_support.hpp"

namespace test_examples_tokenize {  // this file's own names (tests are built in unity batches)

using test::example_output::ints;
using test::example_output::lines_starting;
using test::example_output::number;
using test::example_output::run_example;
using test::value_of;

TEST_CASE("example 01_tokenize: ids are the tokenizer's, and Llama 2 splits C1's sentence in 7") {
    const std::string text = "What is the capital of France?";
    const test::Run r = run_example("01_tokenize");
    CHECK(value_of(r.out, "text") == text);

    // tok512: the ids the library's encoder gives, and they decode back to the sentence.
    const glass::Llama2cTokenizer& tok512 = test::shipped_tok();
    const std::vector<int> ids512 = ints(value_of(r.out, "tok512 ids"));
    CHECK(ids512 == tok512.encode(text, true, false));
    CHECK(ids512.front() == 1);  // BOS
    CHECK(static_cast<size_t>(number(r.out, "tok512 token count")) == ids512.size());
    CHECK(tok512.decode_all(ids512) == text);
    CHECK(value_of(r.out, "tok512 round trip") == "yes");

    const std::string llama2_path = test::shared_dir() + "/models/tokenizer.bin";
    if (!std::ifstream(llama2_path).good()) {
        MESSAGE("Llama 2 tokenizer not found at " << llama2_path << "; only the skip note is checked");
        CHECK(!lines_starting(r.out, "llama2 skipped").empty());
        return;
    }
    const glass::Llama2cTokenizer llama2 = glass::Llama2cTokenizer::load(llama2_path);
    const std::vector<int> ids = ints(value_of(r.out, "llama2 ids"));
    CHECK(ids == llama2.encode(text, true, false));
    CHECK(number(r.out, "llama2 token count") == 8);
    CHECK(llama2.decode_all(ids) == text);
    CHECK(value_of(r.out, "llama2 round trip") == "yes");
    // C1, by hand: a real 32k BPE vocabulary has each word (with its leading space) as one piece:
    // [What][ is][ the][ capital][ of][ France][?]. The llama2.c file stores SentencePiece's "▁"
    // as a plain space. Each piece text occurs once in the vocabulary, so this pins the ids too.
    const std::vector<std::string> c1 = {" What", " is", " the", " capital", " of", " France", "?"};
    REQUIRE(ids.size() == c1.size() + 1);
    CHECK(ids[0] == 1);
    for (size_t i = 0; i < c1.size(); ++i) CHECK(llama2.piece(ids[i + 1]) == c1[i]);
}

TEST_CASE("example 01_tokenize: C1 with cl100k is 7 tokens") {
    const std::string cl100k = test::shared_dir() + "/tokenizers/tiktoken/cl100k_base.tiktoken";
    const test::Run r = run_example("01_tokenize");
    if (!std::ifstream(cl100k).good()) {
        MESSAGE("cl100k file not found at " << cl100k << "; only the skip note is checked");
        CHECK(!lines_starting(r.out, "cl100k skipped").empty());
        return;
    }
    // The ids tiktoken gives (issue 4's C1): What / is / the / capital / of / France / ?
    CHECK(ints(value_of(r.out, "cl100k ids")) == std::vector<int>{3923, 374, 279, 6864, 315, 9822, 30});
    CHECK(number(r.out, "cl100k token count") == 7);
    CHECK(value_of(r.out, "cl100k round trip") == "yes");

    // Why the size printed is not 100,256: one ordinary token per line of the file, plus
    // tiktoken's 5 special tokens for cl100k (<|endoftext|> 100257, <|fim_prefix|> 100258,
    // <|fim_middle|> 100259, <|fim_suffix|> 100260, <|endofprompt|> 100276); ids run to the last.
    std::ifstream file(cl100k);
    int lines = 0;
    for (std::string line; std::getline(file, line);) lines += !line.empty();
    const std::vector<int> specials = {100257, 100258, 100259, 100260, 100276};
    const int ids_in_all = specials.back() + 1;
    const int unused = ids_in_all - lines - static_cast<int>(specials.size());
    CHECK(lines == 100256);
    CHECK(number(r.out, "cl100k vocabulary size") == ids_in_all);
    CHECK(value_of(r.out, "cl100k vocabulary") ==
          std::to_string(lines) + " ordinary tokens, " + std::to_string(specials.size()) + " special tokens, " +
              std::to_string(unused) + " unused ids (" + std::to_string(ids_in_all) + " ids in all)");
}

TEST_CASE("example 01_tokenize: a missing Llama 2 file is a note, not a failure") {
    const test::Run r = run_example("01_tokenize", "/nonexistent/tokenizer.bin");
    CHECK(!lines_starting(r.out, "llama2 skipped").empty());
    CHECK(lines_starting(r.out, "llama2 ids").empty());
    CHECK(!lines_starting(r.out, "tok512 ids").empty());
}

}  // namespace test_examples_tokenize
