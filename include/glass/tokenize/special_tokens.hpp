/// \file
/// \brief glass/tokenize/special_tokens.hpp — finding special tokens ("<|endoftext|>", "<s>") written in text.
/// ```text
/// In:  text, and the special tokens of a vocabulary (text + id).
/// Out: the text cut into ordinary stretches and special tokens, left to right.
///
/// Only encode_with_specials uses this (Hugging Face's encode; a chat template). Plain encode()
/// treats such text as ordinary characters, so user text can never smuggle in a control token.
/// Rule (Hugging Face's added-token matcher): scanning left to right, at each position the
/// LONGEST special token that starts there wins; the scan resumes after it. A token marked
/// lstrip / rstrip also swallows the whitespace on its left / right (Hugging Face's added-token
/// flags; llama.cpp's token attributes, which it sets for Phi-3: "<|end|>\n<|user|>" is
/// <|end|> <|user|>, no newline between).
/// ```
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace glass {

struct SpecialToken {
    std::string text;
    int id;
    bool lstrip = false;  // swallows the whitespace before it
    bool rstrip = false;  // swallows the whitespace after it
};

class SpecialMatcher {
public:
    SpecialMatcher() = default;
    explicit SpecialMatcher(const std::vector<SpecialToken>& specials) {
        for (const SpecialToken& s : specials)
            if (!s.text.empty()) by_first_byte_[static_cast<unsigned char>(s.text[0])].push_back(s);
    }

    // Calls ordinary(text_view) for each stretch between special tokens (possibly empty) and
    // special(id) for each special token, in text order.
    template <typename Ordinary, typename Special>
    void split(std::string_view text, const Ordinary& ordinary, const Special& special) const {
        size_t ordinary_from = 0, i = 0;
        while (i < text.size()) {
            const SpecialToken* best = nullptr;
            for (const SpecialToken& s : by_first_byte_[static_cast<unsigned char>(text[i])])
                if (text.substr(i, s.text.size()) == s.text && (!best || s.text.size() > best->text.size()))
                    best = &s;
            if (!best) {
                ++i;
                continue;
            }
            size_t ordinary_to = i;
            if (best->lstrip)
                while (ordinary_to > ordinary_from && is_space(text[ordinary_to - 1])) --ordinary_to;
            ordinary(text.substr(ordinary_from, ordinary_to - ordinary_from));
            special(best->id);
            i += best->text.size();
            if (best->rstrip)
                while (i < text.size() && is_space(text[i])) ++i;
            ordinary_from = i;
        }
        ordinary(text.substr(ordinary_from));
    }

private:
    static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

public:

private:
    std::vector<SpecialToken> by_first_byte_[256];  // candidates by their first byte
};

}  // namespace glass
