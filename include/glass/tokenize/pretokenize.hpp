/// \file
/// \brief glass/tokenize/pretokenize.hpp — journey step 1a: cut text into "words" before BPE sees it.
/// ```text
/// In:  text (any bytes; normally UTF-8).
/// Out: pieces [n_pieces] — string_views into the text that, concatenated, give the text back.
///
/// Byte-level BPE never merges across the pieces this split makes, so the split decides, e.g.,
/// that " world" stays one word with its leading space and that "123456" is at most 3 digits per
/// token (cl100k). Every family has its own regular expression; they are written out below as
/// the reference implementations use them. glass runs them with PCRE2 in UTF mode with Unicode
/// properties (\p{L} letters, \p{N} numbers, \s Unicode white space), JIT-compiled when the
/// platform allows it.
///
/// Invalid UTF-8: the patterns are compiled with PCRE2_MATCH_INVALID_UTF, under which a byte that
/// is not part of a valid character never matches anything. Whatever stretch of text no match
/// covers (such bytes, or characters a custom pattern leaves out) becomes a piece of its own,
/// so no byte is ever dropped and decode(encode(x)) == x holds for any x.
/// Several patterns (Hugging Face "Sequence" of Splits, llama.cpp's lists): the first splits the
/// text, the second splits each piece again, and so on.
/// ```
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "glass/errors.hpp"

namespace glass {

// GPT-2 and r50k_base (tiktoken's gpt2/r50k/p50k).
inline constexpr const char* kSplitR50k =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base (GPT-3.5/4) and Llama 3.
inline constexpr const char* kSplitCl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k_base (GPT-4o): cased words, contractions attached to the word.
inline constexpr const char* kSplitO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 / Qwen3: cl100k with one digit per piece (applied after NFC normalization).
inline constexpr const char* kSplitQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// One compiled pattern. Move-only (owns PCRE2 memory); matching is const and thread-safe.
class SplitPattern {
public:
    explicit SplitPattern(const std::string& pattern) : text_(pattern) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code* code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
        if (!code) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            fail("split pattern '", pattern, "' does not compile at offset ", offset, ": ",
                 reinterpret_cast<const char*>(message));
        }
        code_.reset(code);
        jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter is used
    }

    const std::string& text() const { return text_; }

    // Calls emit(piece) for each piece of `text`, in order (pieces are views into `text`).
    template <typename Emit>
    void for_each_piece(std::string_view text, const Emit& emit) const {
        std::unique_ptr<pcre2_match_data, MatchDataFree> match(
            pcre2_match_data_create_from_pattern(code_.get(), nullptr));
        std::unique_ptr<pcre2_jit_stack, JitStackFree> stack;
        std::unique_ptr<pcre2_match_context, ContextFree> context;
        if (jit_) {  // long runs (100 kB of spaces) can need more than the default 32 kB stack
            stack.reset(pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr));
            context.reset(pcre2_match_context_create(nullptr));
            pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
        }
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t at = 0;          // where the next search starts
        size_t covered = 0;     // everything before this is in `pieces` already
        while (at < text.size()) {
            int rc = pcre2_match(code_.get(), subject, text.size(), at, 0, match.get(), context.get());
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // retry without JIT (heap-allocated frames)
                rc = pcre2_match(code_.get(), subject, text.size(), at, PCRE2_NO_JIT, match.get(), nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR message[256];
                pcre2_get_error_message(rc, message, sizeof message);
                fail("split pattern '", text_, "' failed at byte ", at, ": ",
                     reinterpret_cast<const char*>(message));
            }
            const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
            const size_t start = span[0], end = span[1];
            if (start > covered) emit(text.substr(covered, start - covered));  // a gap
            if (end > start) {
                emit(text.substr(start, end - start));
                covered = end;
                at = end;
            } else {  // an empty match: step over one character so the loop moves on
                at = start + 1;
                while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
                covered = start;
            }
        }
        if (covered < text.size()) emit(text.substr(covered));
    }

    void split(std::string_view text, std::vector<std::string_view>& pieces) const {
        for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
    }

private:
    struct CodeFree { void operator()(pcre2_code* p) const { pcre2_code_free(p); } };
    struct MatchDataFree { void operator()(pcre2_match_data* p) const { pcre2_match_data_free(p); } };
    struct JitStackFree { void operator()(pcre2_jit_stack* p) const { pcre2_jit_stack_free(p); } };
    struct ContextFree { void operator()(pcre2_match_context* p) const { pcre2_match_context_free(p); } };

    std::string text_;
    std::unique_ptr<pcre2_code, CodeFree> code_;
    bool jit_ = false;
};

// A chain of patterns, applied one after the other. No patterns: the text is one piece.
class Pretokenizer {
public:
    Pretokenizer() = default;
    explicit Pretokenizer(const std::vector<std::string>& patterns) {
        for (const std::string& p : patterns) patterns_.emplace_back(p);
    }

    // Calls emit(piece) for each piece, in order, without collecting them (10 MB of text is
    // 2 million pieces; streaming them keeps the working set in cache).
    template <typename Emit>
    void for_each_piece(std::string_view text, const Emit& emit) const {
        if (!text.empty()) split_from(0, text, emit);
    }

    std::vector<std::string_view> split(std::string_view text) const {
        std::vector<std::string_view> pieces;
        for_each_piece(text, [&](std::string_view piece) { pieces.push_back(piece); });
        return pieces;
    }

    std::vector<std::string> patterns() const {
        std::vector<std::string> out;
        for (const SplitPattern& p : patterns_) out.push_back(p.text());
        return out;
    }

private:
    // Pattern `level` splits `text`; each of its pieces goes on to pattern level + 1.
    template <typename Emit>
    void split_from(size_t level, std::string_view text, const Emit& emit) const {
        if (level == patterns_.size()) {
            emit(text);
            return;
        }
        patterns_[level].for_each_piece(text, [&](std::string_view piece) { split_from(level + 1, piece, emit); });
    }

    std::vector<SplitPattern> patterns_;
};

}  // namespace glass
