// fuzz/fuzz_openai_request.cpp — glass serve's request parsing: the input is a POST body, parsed
// by openai::parse_request both as /v1/completions and as /v1/chat/completions, for the shipped
// model's shape (context 512, vocabulary 512) with its real tokenizer (tok512.bin from ../shared).
// The documented failure is openai::ApiError (an HTTP 4xx); the server catches nothing else, so
// any other exception (glass::Error included) fails the harness. A parsed request must be
// runnable: prompt ids in the vocabulary, prompt + max_tokens within the context, sampling
// values in range, at most 20 alternatives per token.
#include <cmath>
#include <memory>
#include <string>

#include "fuzz_common.hpp"
#include "glass/formats/llama2c_tokenizer.hpp"
#include "glass/serve/openai_api.hpp"

namespace {

const glass::Tokenizer* tokenizer = nullptr;

void check_parsed(const glass::serve::openai::CompletionRequest& r, const glass::serve::openai::ServedModel& model) {
    const int n = static_cast<int>(r.prompt_ids.size());
    FUZZ_CHECK(n >= 1 && n < model.context, "prompt of %d ids, context %d", n, model.context);
    for (int id : r.prompt_ids) FUZZ_CHECK(id >= 0 && id < model.vocab_size, "prompt id %d", id);
    const glass::GenerateOptions& o = r.options;
    FUZZ_CHECK(o.max_new_tokens >= 1 && n + o.max_new_tokens <= model.context, "max_new_tokens %d after %d prompt ids",
               o.max_new_tokens, n);
    FUZZ_CHECK(o.sampling.temperature >= 0 && o.sampling.temperature <= 2, "temperature %g", o.sampling.temperature);
    FUZZ_CHECK(o.sampling.top_p > 0 && o.sampling.top_p <= 1, "top_p %g", o.sampling.top_p);
    FUZZ_CHECK(o.sampling.min_p >= 0 && o.sampling.min_p <= 1, "min_p %g", o.sampling.min_p);
    FUZZ_CHECK(o.sampling.top_k >= 0 && o.sampling.top_k <= model.vocab_size, "top_k %d", o.sampling.top_k);
    FUZZ_CHECK(r.top_logprobs >= 0 && r.top_logprobs <= glass::kMaxTopLogprobs, "top_logprobs %d", r.top_logprobs);
    for (const std::string& s : o.stop_strings) FUZZ_CHECK(!s.empty(), "empty stop string");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    static const glass::Llama2cTokenizer t = glass::Llama2cTokenizer::load(GLASS_SHARED_DIR "/models/tok512.bin", 512);
    tokenizer = &t;
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    using namespace glass::serve::openai;
    static const ServedModel model{"stories260K", 512, 512, 0, {}};
    const std::string body(reinterpret_cast<const char*>(data), size);
    for (bool chat : {false, true}) {
        try {
            check_parsed(parse_request(body, chat, model, *tokenizer, 42), model);
        } catch (const ApiError& e) {
            FUZZ_CHECK(e.status == 400 || e.status == 404, "ApiError with status %d: %s", e.status, e.what());
            (void)to_text(error_body(e));  // what the server sends back must serialize
        }
    }
    return 0;
}
