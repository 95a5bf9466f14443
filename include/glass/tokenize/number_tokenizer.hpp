/// \file
/// \brief glass/tokenize/number_tokenizer.hpp — a stand-in vocabulary for models with random weights: token i reads " i".
/// ```text
/// A model made of random weights (glass/fast/random_model.hpp, `glass serve --shape`) has a
/// vocabulary size but no words. NumberTokenizer gives each id a text anyway, so the engine can
/// stream something: id 1234 decodes to " 1234". Ids 0/1/2 are llama2.c's <unk>/BOS/EOS. Text
/// does not encode (only BOS/EOS come back): clients of such a model send token ids.
/// ```
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "glass/tokenizer.hpp"

namespace glass {

/// A vocabulary of n ids where id i reads " i" (ids 0/1/2 as llama2.c's `<unk>`/BOS/EOS): enough
/// for the engine to stream text from a model whose weights, and so whose words, are random.
class NumberTokenizer : public Tokenizer {
public:
    explicit NumberTokenizer(int vocab_size) : vocab_(vocab_size) {}
    int vocab_size() const override { return vocab_; }
    int bos_id() const override { return 1; }
    int eos_id() const override { return 2; }
    std::vector<int> encode(std::string_view, bool add_bos, bool add_eos) const override {
        std::vector<int> ids;
        if (add_bos) ids.push_back(1);
        if (add_eos) ids.push_back(2);
        return ids;
    }
    std::string decode(int, int id) const override {
        std::string text = " ";  // (not " " + to_string: GCC 12 warns falsely on that, -Wrestrict)
        text += std::to_string(id);
        return text;
    }
    std::string piece(int id) const override { return std::to_string(id); }

private:
    int vocab_;
};

}  // namespace glass
