// fuzz/fuzz_chat_template.cpp — chat templates (glass/chat/): the input is a template's source,
// parsed (lexer + parser) and, when it parses, rendered with a fixed small conversation (a
// system, user, assistant-with-tool-call and tool message; two tools; enable_thinking) under
// tighter limits than glass uses, so each input runs in milliseconds. The documented failures
// are TemplateError (a bad or unsupported template, or a limit reached) and TemplateRaised
// (raise_exception), both glass::Error; anything else — a crash, a sanitizer report, another
// exception, a hang — is a finding. A rendered prompt must stay within the output limit.
#include <memory>
#include <string>

#include "fuzz_common.hpp"
#include "glass/chat/chat_template.hpp"

namespace {

const char* const kConversation = R"({
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris? {{ not jinja }} \u00e9\u2615"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "metric": true}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 18.5}"},
    {"role": "assistant", "content": "<think>\nok\n</think>\n\n18.5 \u00b0C"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    namespace jinja = glass::chat::jinja;
    static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(kConversation);
    const std::string source(reinterpret_cast<const char*>(data), size);
    try {
        // ChatTemplate::render_variables, with limits small enough for fuzzing speed.
        const jinja::Body body = jinja::parse_template(source);
        auto globals = std::make_shared<jinja::Scope>();
        for (auto& [name, value] : jinja::global_functions()) globals->variables[name] = value;
        auto scope = std::make_shared<jinja::Scope>();
        scope->parent = globals;
        for (const auto& [key, value] : variables.items()) scope->variables[key] = jinja::from_json(value);
        jinja::RenderState state;
        state.limits = {.max_call_depth = 50, .max_eval_depth = 300, .max_loop_iterations = 20000,
                        .max_output_bytes = 1u << 20, .max_allocated_bytes = 64u << 20};
        state.now_unix_seconds = 1767225600;
        std::string prompt;
        jinja::exec_body(state, body, scope, prompt);
        scope->variables.clear();
        FUZZ_CHECK(prompt.size() <= state.limits.max_output_bytes, "prompt of %zu bytes", prompt.size());
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    // The public API on the same input (default limits; parse only, the render above covered it).
    try {
        const glass::chat::ChatTemplate t(source);
        (void)t.source();
    } catch (const glass::chat::TemplateError& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
