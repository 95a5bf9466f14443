// Chat templates at work (issue 33): where a model keeps its template, `glass chat-template` byte
// for byte, `glass chat` turn by turn (each prompt = the conversation re-rendered and tokenized,
// the earlier turns' KV kept), the server's /v1/chat/completions (the model's template, tools,
// chat_template_kwargs, refusals) and `glass explain --chat`. The models are the random-weight
// family files of scripts/make-family-models: Qwen3 (ChatML, in the GGUF and in
// tokenizer_config.json), Gemma 3 (BOS written by its template), Llama 3 (no template of its own:
// Meta's real Llama 3.1 template from ../shared/templates given with --chat-template).
//
// The expected texts of the two small templates are written out by hand below (their layout is
// plain); the real Llama 3.1 template's text comes from python3-jinja2 rendering it with Hugging
// Face's settings (tests/chat/render_reference.py). Rendering itself, construct by construct and
// on every real template, is tests/test_chat_template.cpp and the chat_templates test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "serve_http_client.hpp"
#include "test_support.hpp"

namespace test_chat_models {  // this file's own names (tests are built in unity batches)

namespace {

using json = nlohmann::json;
using serve_test::ServerProcess;

// Made once per test program; test::temp_dir removes it at exit.
const std::string& chat_models_dir() {
    static const std::string dir = [] {
        const std::string d = test::temp_dir("chat_models");
        const test::Run r = test::run("python3 " + test::sh(std::string(GLASS_SOURCE_DIR) + "/scripts/make-family-models") +
                                      " --families llama3,qwen3,gemma3 --context 1024 " + test::sh(d));
        INFO(r.err);
        REQUIRE_MESSAGE(r.exit_code == 0, "scripts/make-family-models failed (python3-numpy missing? scripts/install-deps)");
        return d;
    }();
    return dir;
}

std::string model(const std::string& name) { return chat_models_dir() + "/" + name; }
std::string glass_cmd() { return test::bin_dir() + "/glass"; }

std::string write_temp(const std::string& name, const std::string& text) {
    const std::string path = test::temp_dir("chat_files") + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// ChatML as the family files spell it: <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, then
// <|im_start|>assistant\n when a reply is wanted.
std::string chatml(const json& messages, bool generation_prompt = true) {
    std::string text;
    for (const json& m : messages)
        text += "<|im_start|>" + m["role"].get<std::string>() + "\n" + m["content"].get<std::string>() + "<|im_end|>\n";
    return text + (generation_prompt ? "<|im_start|>assistant\n" : "");
}

// The family files' Gemma template: BOS, then <start_of_turn>ROLE\nCONTENT<end_of_turn>\n with
// "assistant" spelled "model".
std::string gemma(const json& messages) {
    std::string text = "<s>";
    for (const json& m : messages) {
        const std::string role = m["role"] == "assistant" ? "model" : m["role"].get<std::string>();
        text += "<start_of_turn>" + role + "\n" + m["content"].get<std::string>() + "<end_of_turn>\n";
    }
    return text + "<start_of_turn>model\n";
}

int count_of(const std::vector<int>& ids, int id) { return static_cast<int>(std::count(ids.begin(), ids.end(), id)); }

const json kConversation = json::array({{{"role", "system"}, {"content", "You answer briefly."}},
                                        {{"role", "user"}, {"content", "Hello there"}},
                                        {{"role", "assistant"}, {"content", "Hi! How can I help?"}},
                                        {{"role", "user"}, {"content", "Tell me about {braces} and \"quotes\"\tand été."}}});

}  // namespace

namespace {

// python3-jinja2 rendering `conversation` through `template_file` with Hugging Face's settings
// (tests/chat/render_reference.py): the ground truth. Empty optional: jinja2 is not installed.
std::optional<test::Run> jinja2_render(const std::string& template_file, const json& conversation) {
    if (test::run("/usr/bin/python3 -c 'import jinja2'").exit_code != 0) return std::nullopt;
    const std::string conversation_file = write_temp("reference.json", conversation.dump());
    return test::run("/usr/bin/python3 " + test::sh(std::string(GLASS_SOURCE_DIR) + "/tests/chat/render_reference.py") + " " +
                     test::sh(template_file) + " " + test::sh(conversation_file));
}

const std::string kLlama31 = test::shared_dir() + "/templates/meta-llama-Llama-3.1-8B-Instruct.jinja";

json weather_tools() {
    return json::array({{{"type", "function"},
                         {"function", {{"name", "get_weather"},
                                       {"description", "The weather in a city"},
                                       {"parameters", {{"type", "object"},
                                                       {"properties", {{"city", {{"type", "string"}}}}},
                                                       {"required", json::array({"city"})}}}}}}});
}

// A tool call as OpenAI's API sends it: "arguments" is a JSON string.
json tool_call(const std::string& id, const std::string& city) {
    return {{"id", id}, {"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", json{{"city", city}}.dump()}}}};
}

}  // namespace

TEST_CASE("chat-template: the model's own template from a GGUF and from a folder, byte for byte, and its ids") {
    const std::string messages = write_temp("conversation.json", kConversation.dump());
    for (const std::string& m : {model("qwen3-F32.gguf"), model("qwen3-hf-f32")}) {
        CAPTURE(m);
        const test::Run with = test::run(glass_cmd() + " chat-template -m " + test::sh(m) + " --messages " + test::sh(messages));
        INFO(with.err);
        REQUIRE(with.exit_code == 0);
        CHECK(with.out == chatml(kConversation));  // nothing added, not even a newline
        const test::Run without = test::run(glass_cmd() + " chat-template --no-generation-prompt -m " + test::sh(m) +
                                            " --messages - < " + test::sh(messages));
        CHECK(without.out == chatml(kConversation, false));
    }
    // The ids: the text tokenized with special tokens recognised, no BOS added (Gemma's template
    // writes its one BOS itself).
    for (const auto& [file, text] : {std::pair{model("qwen3-F32.gguf"), chatml(kConversation)},
                                     std::pair{model("gemma3-F32.gguf"), gemma(kConversation)}}) {
        CAPTURE(file);
        const test::Run r = test::run(glass_cmd() + " chat-template --ids -m " + test::sh(file) + " --messages " + test::sh(messages));
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        const std::vector<int> ids = json::parse(r.out).get<std::vector<int>>();
        const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
        CHECK(ids == tok->encode_with_specials(text));
        const std::vector<int> end_ids = tok->end_of_generation_ids();
        REQUIRE_FALSE(end_ids.empty());
        CHECK(count_of(ids, end_ids.back()) == 4);  // <|im_end|> / <end_of_turn>: one token per message
        CHECK(count_of(ids, tok->bos_id()) == (text.rfind("<s>", 0) == 0 ? 1 : 0));
    }
}

TEST_CASE("chat-template: variables, tools, the clock, and every refusal with its exit status") {
    const std::string messages = write_temp("one.json", R"([{"role": "user", "content": "hi"}])");
    const std::string tools = write_temp("tools.json", R"([{"type": "function", "function": {"name": "a"}},
                                                            {"type": "function", "function": {"name": "b"}}])");
    const std::string probe = write_temp("probe.jinja",
                                         "{{ strftime_now('%d %b %Y %H:%M') }}|{{ enable_thinking }}|{{ tools | length }}|"
                                         "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages[0].content }}");
    const test::Run r = test::run(glass_cmd() + " chat-template --template " + test::sh(probe) + " --messages " + test::sh(messages) +
                                  " --tools " + test::sh(tools) + " --set enable_thinking=false --bos-token '<B>' --eos-token '<E>'" +
                                  " --now 2026-12-04T23:30:00-01:00 --no-generation-prompt");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.out == "05 Dec 2026 00:30|False|2|<B>|<E>|False|hi");  // -01:00 is 00:30 UTC the next day
    // Without --tools the variable is undefined; the model's BOS/EOS texts when no flag overrides.
    const std::string undefined_tools = write_temp("undefined.jinja", "{{ tools is defined }}|{{ bos_token }}|{{ eos_token }}");
    const test::Run own = test::run(glass_cmd() + " chat-template -m " + test::sh(model("gemma3-F32.gguf")) + " --messages " +
                                    test::sh(messages) + " --template " + test::sh(undefined_tools));
    INFO(own.err);
    CHECK(own.out == "False|<s>|</s>");  // --template with -m: the model's BOS/EOS texts
    const test::Run plain = test::run(glass_cmd() + " chat-template --template " + test::sh(undefined_tools) + " --messages " + test::sh(messages));
    CHECK(plain.out == "False||");

    // raise_exception: exit 1, the template's own message.
    const std::string refuses = write_temp("refuses.jinja", "{% if messages[0].role != 'system' %}{{ raise_exception('A system "
                                                            "message must come first, got ' + messages[0].role) }}{% endif %}");
    const test::Run refused = test::run(glass_cmd() + " chat-template --template " + test::sh(refuses) + " --messages " + test::sh(messages));
    CHECK(refused.exit_code == 1);
    CHECK(refused.err.find("A system message must come first, got user") != std::string::npos);
    // A template that cannot be parsed names its line.
    const std::string broken = write_temp("broken.jinja", "line one\n{% if x %}\nno endif");
    const test::Run bad = test::run(glass_cmd() + " chat-template --template " + test::sh(broken) + " --messages " + test::sh(messages));
    CHECK(bad.exit_code == 1);
    CHECK(bad.err.find("line") != std::string::npos);

    const auto status = [&](const std::string& args) {
        const test::Run x = test::run(glass_cmd() + " chat-template " + args);
        CAPTURE(args);
        CAPTURE(x.err);
        CHECK(x.err.find("glass:") != std::string::npos);  // one line naming the problem
        return x.exit_code;
    };
    const std::string m = " --messages " + test::sh(messages);
    CHECK(status("--template " + test::sh(probe)) == 2);                          // no --messages
    CHECK(status(m) == 2);                                                        // no template at all
    CHECK(status("--template " + test::sh(probe) + m + " --set enable_thinking") == 2);
    CHECK(status("--template " + test::sh(probe) + m + " --set 'x=not json'") == 2);
    CHECK(status("--template " + test::sh(probe) + m + " --now 2026-13-01") == 2);
    CHECK(status("--template " + test::sh(probe) + m + " --now yesterday") == 2);
    CHECK(status("--template " + test::sh(probe) + m + " --ids") == 2);           // --ids needs -m
    CHECK(status("--template " + test::sh(probe) + m + " --generation-prompt --no-generation-prompt") == 2);
    CHECK(status("-m " + test::sh(test::shipped_model()) + m) == 1);             // a llama2.c model has none
    CHECK(status("--template " + test::sh(probe) + " --messages " + test::sh(write_temp("obj.json", "{}"))) == 1);
    CHECK(status("--template /nonexistent.jinja" + m) == 1);
}

TEST_CASE("chat: with a template, each turn's prompt is the conversation re-rendered; the earlier turns stay cached") {
    const std::string file = model("qwen3-F32.gguf");
    const test::Run r = test::run("printf 'Hello there\\nAnd then?\\n' | " + glass_cmd() + " chat --temperature 0 --max-new-tokens 6 --json " +
                                  "--system 'You answer briefly.' -m " + test::sh(file));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<json> turns;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        if (!line.empty() && line[0] == '{') turns.push_back(json::parse(line));
    REQUIRE(turns.size() == 2);

    const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
    json messages = json::array({{{"role", "system"}, {"content", "You answer briefly."}}, {{"role", "user"}, {"content", "Hello there"}}});
    CHECK(turns[0]["prompt_ids"].get<std::vector<int>>() == tok->encode_with_specials(chatml(messages)));
    CHECK(turns[0]["cached_tokens"] == 0);
    messages.push_back({{"role", "assistant"}, {"content", turns[0]["reply"]}});
    messages.push_back({{"role", "user"}, {"content", "And then?"}});
    const std::vector<int> prompt2 = turns[1]["prompt_ids"];
    CHECK(prompt2 == tok->encode_with_specials(chatml(messages)));

    // The session held turn 1's prompt and every generated token but the last: turn 2 computes
    // only what follows their common prefix.
    std::vector<int> held = turns[0]["prompt_ids"];
    const std::vector<int> generated1 = turns[0]["generated_ids"];
    held.insert(held.end(), generated1.begin(), generated1.end() - 1);
    size_t common = 0;
    while (common < held.size() && common + 1 < prompt2.size() && held[common] == prompt2[common]) ++common;
    CHECK(turns[1]["cached_tokens"] == common);
    CHECK(common >= turns[0]["prompt_ids"].size());  // at least turn 1's whole prompt

    // A reply stops at an end-of-generation id (<|im_end|>) or at the limit; never runs past one.
    for (const json& t : turns) {
        const std::vector<int> ids = t["generated_ids"];
        for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK_FALSE(tok->ends_generation(ids[i]));
        CHECK((t["stop_reason"] == "eos") == tok->ends_generation(ids.back()));
        if (t["stop_reason"] != "eos") CHECK(ids.size() == 6);
    }
    // The cached turn generates what a fresh session generates from the whole prompt.
    const glass::Model weights = glass::load_model(file);
    glass::CpuSession fresh(weights);
    glass::GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_new_tokens = 6;
    CHECK(glass::generate_from_ids(fresh, *tok, prompt2, o).generated_ids == turns[1]["generated_ids"].get<std::vector<int>>());
}

TEST_CASE("chat with --chat-template: a Llama-3-shaped model's first turn is Meta's Llama 3.1 template as Jinja2 renders it") {
    const std::string file = model("llama3-F32.gguf");
    const json messages = json::array({{{"role", "system"}, {"content", "You answer briefly."}}, {{"role", "user"}, {"content", "Hello there"}}});
    const std::optional<test::Run> reference =
        jinja2_render(kLlama31, {{"messages", messages}, {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
    if (!reference) {
        MESSAGE("python3-jinja2 is not installed: skipped (scripts/install-deps installs it)");
        return;
    }
    REQUIRE(reference->exit_code == 0);
    const test::Run r = test::run("printf 'Hello there\\n' | " + glass_cmd() + " chat --temperature 0 --max-new-tokens 3 --json " +
                                  "--system 'You answer briefly.' --chat-template " + test::sh(kLlama31) + " -m " + test::sh(file));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json turn = json::parse(r.out.substr(r.out.find('{')));
    CHECK(turn["prompt_ids"].get<std::vector<int>>() == glass::load_gguf_tokenizer(file)->encode_with_specials(reference->out));
}

TEST_CASE("chat and explain --chat: a model without a template is refused by name where one is needed") {
    const test::Run explain = test::run(glass_cmd() + " explain --chat -p hi -n 1");
    CHECK(explain.exit_code == 1);
    CHECK(explain.err.find("carries no chat template") != std::string::npos);
    CHECK(test::run(glass_cmd() + " explain --system hi -p hi -n 1").exit_code == 2);  // --system goes with --chat
    CHECK(test::run("printf 'x\\n' | " + glass_cmd() + " chat --set a=1 --max-new-tokens 1").exit_code == 2);
}

TEST_CASE("explain --chat: the rendered prompt and its tokens, special tokens and all") {
    const std::string file = model("qwen3-F32.gguf");
    const test::Run r = test::run(glass_cmd() + " explain --chat --system 'Be brief.' -p 'Hello there' -n 1 --json -m " + test::sh(file));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json x = json::parse(r.out.substr(r.out.rfind("\n{") + 1));
    const std::string text = chatml(json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello there"}}}));
    CHECK(x["prompt"] == text);
    CHECK(x["prompt_ids"].get<std::vector<int>>() == glass::load_gguf_tokenizer(file)->encode_with_specials(text));
    CHECK(x["chat_template"].get<std::string>().find("tokenizer.chat_template") != std::string::npos);
}

TEST_CASE("serve: chat through the model's template; turn 2 reuses turn 1's blocks; tools need a template" *
          doctest::skip(serve_test::no_curl())) {
    const std::string file = model("qwen3-F32.gguf");
    const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
    ServerProcess server({"-m", file, "--block-size", "4", "--threads", "1"});
    json turn = {{"temperature", 0}, {"max_tokens", 5}, {"messages", json::array({{{"role", "system"}, {"content", "You answer briefly."}},
                                                                                  {{"role", "user"}, {"content", "Hello there"}}})}};
    const json r1 = serve_test::post(server, "/v1/chat/completions", turn).json_body();
    CHECK(r1["usage"]["prompt_tokens"] == tok->encode_with_specials(chatml(turn["messages"])).size());
    const std::string reply = r1["choices"][0]["message"]["content"];
    turn["messages"].push_back({{"role", "assistant"}, {"content", reply}});
    turn["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
    const json r2 = serve_test::post(server, "/v1/chat/completions", turn).json_body();
    CHECK(r2["usage"]["prompt_tokens"] == tok->encode_with_specials(chatml(turn["messages"])).size());
    CHECK(r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() >= 4);
    // The reply ends at <|im_end|> ("stop") or at max_tokens ("length"), and never shows it.
    for (const json& r : {r1, r2}) {
        CHECK(r["choices"][0]["message"]["content"].get<std::string>().find("<|im_end|>") == std::string::npos);
        const std::string finish = r["choices"][0]["finish_reason"];
        CHECK((finish == "stop" || (finish == "length" && r["usage"]["completion_tokens"] == 5)));
    }
    // content: null reaches the template as none, which Jinja prints as "None" (as Hugging Face does).
    json null_content = turn;
    null_content["messages"] = json::array({{{"role", "user"}, {"content", nullptr}}});
    const json r3 = serve_test::post(server, "/v1/chat/completions", null_content).json_body();
    CHECK(r3["usage"]["prompt_tokens"] == tok->encode_with_specials("<|im_start|>user\nNone<|im_end|>\n<|im_start|>assistant\n").size());
    json kwargs = turn;
    kwargs["chat_template_kwargs"] = "not an object";
    CHECK(serve_test::post(server, "/v1/chat/completions", kwargs).status == 400);

    // The shipped story model has no template: its plain layout refuses tools by name.
    ServerProcess plain({"--threads", "1"});
    json with_tools = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"tools", json::array()}};
    const serve_test::Reply refused = serve_test::post(plain, "/v1/chat/completions", with_tools);
    CHECK(refused.status == 400);
    CHECK(refused.json_body()["error"]["param"] == "tools");
}


TEST_CASE("serve and chat-template: tools and tool calls through Meta's Llama 3.1 template, token for token as Jinja2 renders") {
    const std::string file = model("llama3-F32.gguf");
    const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
    const json messages = json::array({{{"role", "system"}, {"content", "You check the weather."}},
                                       {{"role", "user"}, {"content", "Is it warm in Paris?"}},
                                       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({tool_call("call_1", "Paris")})}},
                                       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"celsius\": 21}"}}});
    // What the template is given: the arguments as an object (as vLLM passes them), the model's
    // BOS/EOS texts, the date as a variable.
    json given = messages;
    given[2]["tool_calls"][0]["function"]["arguments"] = json{{"city", "Paris"}};
    const json conversation = {{"messages", given}, {"tools", weather_tools()}, {"add_generation_prompt", true},
                               {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"extra", {{"date_string", "04 Dec 2026"}}}};
    const std::optional<test::Run> reference = jinja2_render(kLlama31, conversation);
    if (!reference) {
        MESSAGE("python3-jinja2 is not installed: skipped (scripts/install-deps installs it)");
        return;
    }
    INFO(reference->err);
    REQUIRE(reference->exit_code == 0);
    const std::string& text = reference->out;
    REQUIRE(text.find("04 Dec 2026") != std::string::npos);
    REQUIRE(text.find("\"city\": \"Paris\"") != std::string::npos);
    const std::vector<int> ids = tok->encode_with_specials(text);

    // glass chat-template --ids: the same tokens.
    const test::Run cli = test::run(glass_cmd() + " chat-template --ids -m " + test::sh(file) + " --template " + test::sh(kLlama31) +
                                    " --messages " + test::sh(write_temp("given.json", given.dump())) + " --tools " +
                                    test::sh(write_temp("tools.json", weather_tools().dump())) + " --set 'date_string=\"04 Dec 2026\"'");
    INFO(cli.err);
    REQUIRE(cli.exit_code == 0);
    CHECK(json::parse(cli.out).get<std::vector<int>>() == ids);

    if (serve_test::no_curl()) return;
    // The server: OpenAI's shapes in (arguments as a string, tools, chat_template_kwargs), the
    // same prompt.
    ServerProcess server({"-m", file, "--chat-template", kLlama31, "--threads", "1"});
    const json body = {{"messages", messages}, {"tools", weather_tools()}, {"max_tokens", 2}, {"temperature", 0},
                       {"chat_template_kwargs", {{"date_string", "04 Dec 2026"}}}};
    const json r = serve_test::post(server, "/v1/chat/completions", body).json_body();
    CHECK(r["usage"]["prompt_tokens"] == ids.size());
    // Two calls at once: the template refuses ("This model only supports single tool-calls at
    // once!"), and the server answers 400 with its words.
    json two_calls = body;
    two_calls["messages"][2]["tool_calls"].push_back(tool_call("call_2", "Lyon"));
    const serve_test::Reply refused = serve_test::post(server, "/v1/chat/completions", two_calls);
    CHECK(refused.status == 400);
    CHECK(refused.json_body()["error"]["code"] == "chat_template_refused");
    CHECK(refused.json_body()["error"]["message"].get<std::string>().find("single tool-calls") != std::string::npos);
    // Arguments that are not JSON are the client's mistake, named.
    json bad_arguments = body;
    bad_arguments["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{city: Paris";
    const serve_test::Reply bad = serve_test::post(server, "/v1/chat/completions", bad_arguments);
    CHECK(bad.status == 400);
    CHECK(bad.json_body()["error"]["param"] == "messages[2].tool_calls[0].function.arguments");
}

// ---- example 28_chat_templates: what it prints, recomputed ----------------------------------------

TEST_CASE("example 28_chat_templates: three real templates and vocabularies, the tokens and the special ones") {
    const test::Run r = test::run_example("28_chat_templates");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    // The conversation has 4 messages and asks for a reply: each family's markers, counted from
    // its layout, and the ids its real vocabulary gives them (from the models' published configs).
    struct Expected {
        std::string name;
        int specials;      // per layout: markers per message × 4 (+ the generation prompt's)
        int closing_id;    // the end-of-turn token: Llama 3 <|eot_id|>, Qwen <|im_end|>, Phi-3 <|end|>
    };
    const std::vector<Expected> expected = {{"llama3", 1 + 5 + 5 + 4, 128009},  // BOS, 5 × start/end header, 4 × eot
                                            {"qwen3", 5 + 4 + 2, 151645},       // 5 × im_start, 4 × im_end, <think></think>
                                            {"phi3.5", 5 + 4, 32007}};          // 5 role markers, 4 × <|end|>
    const std::string shared = test::shared_dir();
    const std::unique_ptr<glass::Tokenizer> llama = glass::load_hf_tokenizer(shared + "/tokenizers/hf/llama3/tokenizer.json");
    const std::unique_ptr<glass::Tokenizer> qwen = glass::load_hf_tokenizer(shared + "/tokenizers/hf/qwen3/tokenizer.json");
    const std::unique_ptr<glass::Tokenizer> phi = glass::load_gguf_tokenizer(shared + "/tokenizers/llamacpp/ggml-vocab-phi-3.gguf");
    const std::vector<const glass::Tokenizer*> toks = {llama.get(), qwen.get(), phi.get()};
    for (size_t i = 0; i < expected.size(); ++i) {
        const Expected& e = expected[i];
        CAPTURE(e.name);
        std::smatch m;
        const std::regex line("\n  " + e.name + R"( +(\d+) tokens, +(\d+) special; each message closes with (\S+) \(id (-?\d+)\))");
        REQUIRE(std::regex_search(r.out, m, line));
        CHECK(std::stoi(m[2]) == e.specials);
        CHECK(std::stoi(m[4]) == e.closing_id);
        CHECK(m[3] == toks[i]->piece(e.closing_id));
        // The prompt's text is printed line by line ("    | TEXT↵"): rebuilt, tokenized with
        // special tokens recognised, it has the printed number of tokens...
        const size_t from = r.out.find("  " + e.name + " (template: ");
        REQUIRE(from != std::string::npos);
        std::string text;
        std::istringstream lines(r.out.substr(r.out.find('\n', from) + 1));
        for (std::string l; std::getline(lines, l) && l.rfind("    | ", 0) == 0;) {
            const std::string body = l.substr(6);
            const std::string mark = "↵";
            text += body.size() >= mark.size() && body.compare(body.size() - mark.size(), mark.size(), mark) == 0
                        ? body.substr(0, body.size() - mark.size()) + "\n"
                        : body;
        }
        const std::vector<int> ids = toks[i]->encode_with_specials(text);
        CHECK(static_cast<int>(ids.size()) == std::stoi(m[1]));
        CHECK(std::count(ids.begin(), ids.end(), e.closing_id) == 4);
        // ...and tokenized as plain text, the printed larger number.
        const std::regex plain("\n    " + e.name + R"( +(\d+) tokens instead of +(\d+);)");
        std::smatch p;
        REQUIRE(std::regex_search(r.out, p, plain));
        CHECK(std::stoul(p[1]) == toks[i]->encode(text, false, false).size());
        CHECK(std::stoul(p[2]) == ids.size());
        if (e.name != "llama3") continue;
        // Llama 3's template writes BOS itself: one, first; BOS added on top makes two.
        CHECK(ids[0] == toks[i]->bos_id());
        CHECK(std::count(ids.begin(), ids.end(), toks[i]->bos_id()) == 1);
        const std::string doubled = "llama3 starts " + std::to_string(toks[i]->bos_id()) + " " + std::to_string(ids[0]) + " " +
                                    std::to_string(ids[1]) + " = ";
        CHECK(r.out.find(doubled) != std::string::npos);
    }
}

TEST_CASE("chat and serve end a reply at the model's end-of-turn token (<end_of_turn>), not only at EOS") {
    // A random model rarely chooses <end_of_turn>; find a user message after which greedy does,
    // by a clear margin, through the model's own template on the reference.
    const std::string file = model("gemma3-F32.gguf");
    const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
    const glass::chat::ModelChatTemplate own = *glass::chat::find_model_chat_template(file);
    const glass::chat::ChatTemplate tpl(own.source);
    const glass::Model weights = glass::load_model(file);
    glass::CpuSession session(weights);
    std::string user;
    int end_id = -1;
    for (int a = 0; a < 600 && end_id < 0; ++a) {
        const std::string candidate = "word" + std::to_string(a * 7919 % 1000) + " x" + std::to_string(a);
        const std::string text = tpl.render({.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", candidate}}}),
                                             .bos_token = own.bos_token, .eos_token = own.eos_token});
        session.reset();
        const std::span<const float> logits = session.prefill(glass::chat::chat_prompt_ids(*tok, text));
        std::vector<float> sorted(logits.begin(), logits.end());
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const int best = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (tok->ends_generation(best) && best != tok->eos_id() && sorted[0] - sorted[1] > 1e-3f * std::fabs(sorted[0]))
            user = candidate, end_id = best;
    }
    REQUIRE_MESSAGE(end_id >= 0, "no user message in 600 made the random Gemma 3 end its turn at once; try other candidates");
    CHECK(tok->piece(end_id) == "<end_of_turn>");

    const test::Run r = test::run("printf '%s\\n' " + test::sh(user) + " | " + glass_cmd() +
                                  " chat --temperature 0 --max-new-tokens 8 --json -m " + test::sh(file));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json turn = json::parse(r.out.substr(r.out.find('{')));
    CHECK(turn["generated_ids"] == json::array({end_id}));
    CHECK(turn["stop_reason"] == "eos");
    CHECK(turn["reply"] == "");

    if (serve_test::no_curl()) return;
    ServerProcess server({"-m", file, "--threads", "1"});
    const json a = serve_test::post(server, "/v1/chat/completions",
                                    {{"messages", json::array({{{"role", "user"}, {"content", user}}})}, {"temperature", 0}, {"max_tokens", 8}})
                       .json_body();
    CHECK(a["choices"][0]["finish_reason"] == "stop");
    CHECK(a["choices"][0]["message"]["content"] == "");
    CHECK(a["usage"]["completion_tokens"] == 1);
}

TEST_CASE("chat and serve end a sampled reply at <|im_end|> (Qwen3's end of turn)") {
    // <|im_end|> is unlikely under the random Qwen3 (p ≈ 5e-4 after this prompt): find a seed whose
    // first draw (temperature 1, top-p 1, the generate loop's sampler and generator) is it.
    const std::string file = model("qwen3-F32.gguf");
    const std::unique_ptr<glass::Tokenizer> tok = glass::load_gguf_tokenizer(file);
    const glass::chat::ModelChatTemplate own = *glass::chat::find_model_chat_template(file);
    const std::string text = glass::chat::ChatTemplate(own.source).render(
        {.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hello there"}}}), .eos_token = own.eos_token});
    const glass::Model weights = glass::load_model(file);
    glass::CpuSession session(weights);
    const std::span<const float> logits = session.prefill(glass::chat::chat_prompt_ids(*tok, text));
    glass::SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    const int im_end = tok->end_of_generation_ids().back();
    REQUIRE(tok->piece(im_end) == "<|im_end|>");
    std::uint64_t seed = 0;
    for (bool found = false; !found && seed < 100000;) {
        glass::Llama2cRng rng(seed);
        if (glass::sample(logits, p, rng) == im_end) found = true;
        else ++seed;
    }
    REQUIRE_MESSAGE(seed < 100000, "no seed in 100000 drew <|im_end|> first");

    const test::Run r = test::run("printf 'Hello there\\n' | " + glass_cmd() + " chat --temperature 1 --top-p 1 --seed " +
                                  std::to_string(seed) + " --max-new-tokens 8 --json -m " + test::sh(file));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json turn = json::parse(r.out.substr(r.out.find('{')));
    CHECK(turn["generated_ids"] == json::array({im_end}));
    CHECK(turn["stop_reason"] == "eos");

    if (serve_test::no_curl()) return;
    ServerProcess server({"-m", file, "--backend", "reference"});
    const json a = serve_test::post(server, "/v1/chat/completions",
                                    {{"messages", json::array({{{"role", "user"}, {"content", "Hello there"}}})},
                                     {"temperature", 1}, {"top_p", 1}, {"seed", seed}, {"max_tokens", 8}})
                       .json_body();
    CHECK(a["choices"][0]["finish_reason"] == "stop");
    CHECK(a["choices"][0]["message"]["content"] == "");
}

}  // namespace test_chat_models
