// tests/install/story.cpp: a program of its own that uses glass as a library. check_install.sh
// builds it three ways: against an installed glass through find_package(glass) and through
// pkg-config, and with glass's source tree added by add_subdirectory. It tells the shipped model's
// story for the golden's prompt, greedily, and checks it token for token against llama2.c's run.c
// (the golden file named on the command line).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <glass/glass.hpp>

int main(int argc, char** argv) try {
    if (argc != 2) {
        std::fprintf(stderr, "usage: story GOLDEN (../shared/goldens/stories260K_greedy.jsonl)\n");
        return 2;
    }
    // llama2.c's run.c, greedy, on "Once upon a time" for 32 positions.
    nlohmann::json golden;
    std::ifstream in(argv[1]);
    for (std::string line; golden.is_null() && std::getline(in, line);) {
        if (line.empty()) continue;
        nlohmann::json row = nlohmann::json::parse(line);
        if (row["case"] == "once_upon_n32") golden = row;
    }
    if (golden.is_null()) {
        std::fprintf(stderr, "story: no case once_upon_n32 in %s\n", argv[1]);
        return 1;
    }
    const std::string prompt = golden["prompt"];

    // README's lines: the shipped model and its tokenizer, a session, generate.
    glass::Model model = glass::load_llama2c_checkpoint(GLASS_MODELS_DIR "/stories260K.bin");
    glass::Llama2cTokenizer tokenizer = glass::Llama2cTokenizer::load(GLASS_MODELS_DIR "/tok512.bin");
    glass::CpuSession session(model);
    glass::GenerateOptions options;
    options.sampling.temperature = 0.0f;  // greedy, like the golden
    options.max_new_tokens = glass::new_tokens_for_steps(golden["steps"], static_cast<int>(golden["prompt_ids"].size()));
    const glass::GenerateResult story = glass::generate(session, tokenizer, prompt, options);

    std::printf("models: %s\n", GLASS_MODELS_DIR);
    std::printf("story: %s%s\n", prompt.c_str(), story.text.c_str());
    if (story.generated_ids != golden["generated_ids"].get<std::vector<int>>() ||
        prompt + story.text != golden["text"].get<std::string>()) {
        std::fprintf(stderr, "story: differs from llama2.c's: %s\n", golden["text"].get<std::string>().c_str());
        return 1;
    }
    std::printf("equals llama2.c's story, %zu tokens\n", story.generated_ids.size());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "story: %s\n", e.what());
    return 1;
}
