// 28_chat_templates — what an instruct model actually reads. One conversation goes through three
// families' own chat templates (Llama 3, Qwen3, Phi-3.5), rendered as Hugging Face renders them,
// and the tokens are laid side by side: where the special tokens land, which one closes a turn
// (the one generation must stop at), and the two classic mistakes.
//
// In:  the conversation below (system, user, assistant, user); each family's real vocabulary and
//      template: ../shared/tokenizers/hf/llama3 and hf/qwen3 (tokenizer.json, and
//      tokenizer_config.json whose "chat_template" is the model's), Phi-3.5's vocabulary
//      (../shared/tokenizers/llamacpp/ggml-vocab-phi-3.gguf) and template
//      (../shared/templates/microsoft-Phi-3.5-mini-instruct.jinja). Qwen3 gets
//      enable_thinking=false, as its model card shows for plain answers.
// Out: 1. per family, the prompt as rendered, line by line ("↵" marks each newline);
//      2. per family: its tokens, how many are special (text that becomes one id only when
//         special tokens are recognised), each special token's position and id, and the special
//         token that closes every message (the end-of-turn id generation stops at);
//      3. two mistakes, counted: BOS added on top of the one the template writes (Llama 3), and
//         the prompt tokenized as plain text, every marker spelled in ordinary pieces.
// Everything printed is computed; tests/test_chat_models.cpp recomputes it.
//
// Usage: 28_chat_templates
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/chat/chat_template.hpp"
#include "glass/chat/model_template.hpp"
#include "glass/formats/gguf_vocab.hpp"
#include "glass/formats/hf_loader.hpp"

namespace {

using nlohmann::ordered_json;

const std::string kShared = GLASS_SHARED_DIR;

const ordered_json kConversation = ordered_json::array({
    {{"role", "system"}, {"content", "You are a helpful assistant."}},
    {{"role", "user"}, {"content", "What is the capital of France?"}},
    {{"role", "assistant"}, {"content", "Paris."}},
    {{"role", "user"}, {"content", "And of Italy?"}},
});

struct Family {
    std::string name;
    std::unique_ptr<glass::Tokenizer> tok;
    glass::chat::ModelChatTemplate chat_template;
    ordered_json extra = ordered_json::object();  // the template's extra variables
};

std::vector<Family> load_families() {
    std::vector<Family> families;
    for (const char* name : {"llama3", "qwen3"}) {  // a tokenizer folder: tokenizer.json + tokenizer_config.json
        const std::string dir = kShared + "/tokenizers/hf/" + name;
        families.push_back({.name = name,
                            .tok = glass::load_hf_tokenizer(dir + "/tokenizer.json"),
                            .chat_template = *glass::chat::find_model_chat_template(dir)});
    }
    families[1].extra["enable_thinking"] = false;
    // Phi-3.5: a GGUF vocabulary, and the template from its own file (BOS/EOS texts from the vocabulary).
    const std::string phi_vocab = kShared + "/tokenizers/llamacpp/ggml-vocab-phi-3.gguf";
    const auto [bos, eos] = glass::chat::model_special_texts(phi_vocab);
    std::unique_ptr<glass::Tokenizer> phi = glass::load_gguf_tokenizer(phi_vocab);
    glass::chat::ModelChatTemplate phi_template =
        glass::chat::chat_template_from_file(kShared + "/templates/microsoft-Phi-3.5-mini-instruct.jinja", bos, eos);
    families.push_back({.name = "phi3.5", .tok = std::move(phi), .chat_template = std::move(phi_template)});
    return families;
}

std::string render(const Family& f) {
    const glass::chat::ChatTemplate t(f.chat_template.source, f.name + " chat template");
    return t.render({.messages = kConversation,
                     .add_generation_prompt = true,
                     .bos_token = f.chat_template.bos_token,
                     .eos_token = f.chat_template.eos_token,
                     .extra = f.extra});
}

// A special token: its text becomes this one id only when special tokens are recognised.
bool is_special(const glass::Tokenizer& tok, int id) {
    const std::string text = tok.piece(id);
    return tok.encode_with_specials(text) == std::vector<int>{id} && tok.encode(text, false, false) != std::vector<int>{id};
}

// 1. The prompt, line by line.
void show_prompt(const Family& f, const std::string& text) {
    const std::string& origin = f.chat_template.origin;  // "... '/path/to/shared/FILE'"
    const size_t from = origin.rfind("shared/");
    std::printf("  %s (template: ../%s)\n", f.name.c_str(), origin.substr(from, origin.size() - 1 - from).c_str());
    size_t start = 0;
    while (start < text.size()) {
        const size_t newline = text.find('\n', start);
        const bool ends_line = newline != std::string::npos;
        std::printf("    | %s%s\n", text.substr(start, (ends_line ? newline : text.size()) - start).c_str(), ends_line ? "↵" : "");
        start = ends_line ? newline + 1 : text.size();
    }
    std::printf("\n");
}

// 2. The tokens: specials with their positions, and the one that closes each of the messages.
void show_tokens(const Family& f, const std::vector<int>& ids) {
    std::map<int, int> special_counts;
    std::string listed;  // six to a line
    int n_listed = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
        if (!is_special(*f.tok, ids[p])) continue;
        ++special_counts[ids[p]];
        if (n_listed > 0 && n_listed % 6 == 0) listed += "\n         ";
        listed += " " + std::to_string(p) + ":" + f.tok->piece(ids[p]);
        ++n_listed;
    }
    int specials = 0, closing = -1;
    for (const auto& [id, n] : special_counts) {
        specials += n;
        if (n == static_cast<int>(kConversation.size())) closing = id;  // one per message
    }
    std::printf("  %-7s %3zu tokens, %2d special; each message closes with %s (id %d)\n", f.name.c_str(), ids.size(), specials,
                closing >= 0 ? f.tok->piece(closing).c_str() : "(none)", closing);
    std::printf("         %s\n", listed.c_str());
}

// 3. The mistakes: a second BOS, and the markers as plain text.
void show_mistakes(const std::vector<Family>& families, const std::vector<std::vector<int>>& ids) {
    const Family& llama = families[0];
    std::printf("  BOS added as well (a plain completion's habit): %s starts", llama.name.c_str());
    const std::vector<int> doubled = [&] {
        std::vector<int> v = {llama.tok->bos_id()};
        v.insert(v.end(), ids[0].begin(), ids[0].end());
        return v;
    }();
    for (size_t p = 0; p < 3; ++p) std::printf(" %d", doubled[p]);
    std::printf(" = %s %s %s: two BOS, a prompt it never saw in training\n", llama.tok->piece(doubled[0]).c_str(),
                llama.tok->piece(doubled[1]).c_str(), llama.tok->piece(doubled[2]).c_str());
    std::printf("  the prompt tokenized as plain text (special tokens not recognised):\n");
    for (size_t i = 0; i < families.size(); ++i) {
        const Family& f = families[i];
        const std::string text = render(f);
        const std::vector<int> plain = f.tok->encode(text, false, false);
        // The first special token of the prompt, spelled in ordinary pieces.
        std::string first_special;
        for (int id : ids[i])
            if (is_special(*f.tok, id)) {
                first_special = f.tok->piece(id);
                break;
            }
        std::printf("    %-7s %3zu tokens instead of %3zu; %s becomes %zu pieces\n", f.name.c_str(), plain.size(), ids[i].size(),
                    first_special.c_str(), f.tok->encode(first_special, false, false).size());
    }
}

}  // namespace

int main() {
    try {
        const std::vector<Family> families = load_families();
        std::printf("1. One conversation (system, user, assistant, user) through each family's own template\n\n");
        std::vector<std::vector<int>> ids;
        for (const Family& f : families) {
            const std::string text = render(f);
            show_prompt(f, text);
            ids.push_back(glass::chat::chat_prompt_ids(*f.tok, text));  // special tokens recognised, no BOS added
        }
        std::printf("2. The tokens the model reads (position:special token)\n\n");
        for (size_t i = 0; i < families.size(); ++i) show_tokens(families[i], ids[i]);
        std::printf("\n3. Two ways to get it wrong\n\n");
        show_mistakes(families, ids);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "28_chat_templates: %s\n", e.what());
        return 1;
    }
}
