// tests/chat/render_glass.cpp — glass's side of the differential test (check_templates.py):
// renders one chat template x one conversation with glass::chat::ChatTemplate.
//   render_glass TEMPLATE_FILE CONVERSATION_JSON
// CONVERSATION_JSON: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool,
//                     "bos_token": str, "eos_token": str, "extra": {...}, "now": unix seconds}
// Prints the prompt exactly (no newline added), exit 0. The template refused the conversation
// (raise_exception): its message on stderr, exit 1. A TemplateError: exit 3. Bad usage: exit 2.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "glass/chat/chat_template.hpp"

namespace {

std::string read_file(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(std::string("cannot open ") + path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

glass::chat::ChatInputs inputs_of(const nlohmann::ordered_json& c) {
    glass::chat::ChatInputs in;
    in.messages = c.at("messages");
    if (c.contains("tools") && !c["tools"].is_null()) in.tools = c["tools"];
    in.add_generation_prompt = c.value("add_generation_prompt", true);
    in.bos_token = c.value("bos_token", "");
    in.eos_token = c.value("eos_token", "");
    if (c.contains("extra")) in.extra = c["extra"];
    in.now_unix_seconds = c.value("now", std::int64_t{1767225600});
    return in;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: render_glass TEMPLATE_FILE CONVERSATION_JSON\n");
        return 2;
    }
    try {
        const glass::chat::ChatTemplate chat_template(read_file(argv[1]));
        const std::string prompt = chat_template.render(inputs_of(nlohmann::ordered_json::parse(read_file(argv[2]))));
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        return 0;
    } catch (const glass::chat::TemplateRaised& e) {
        std::fprintf(stderr, "%s", e.what());
        return 1;
    } catch (const glass::chat::TemplateError& e) {
        std::fprintf(stderr, "%s", e.what());
        return 3;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s", e.what());
        return 2;
    }
}
