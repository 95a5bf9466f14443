// fuzz/fuzz_fast.cpp — the fast path on a fuzzed small checkpoint: the header goes through the
// same checks a file's does (parse_llama2c_header, llama2c_file_bytes), the weights are packed
// (fp32, fp16, bf16 or Q8_0; portable or best kernels; 1 or 2 threads), then a prompt of 1-3
// ids (possibly out of range: glass::Error) and one decode step run in FastCpuSession.
// Sizes are bounded by the harness (at most 256K weights and a 16 MiB KV cache).
// Oracle: with fp32 weights made from small numbers, the decoded logits equal the reference
// forward pass's (transformer.hpp) to 1e-3 of the largest logit: the two sum in different orders,
// each error ~1e-6 relative per product, far below that. Unless the model itself is
// ill-conditioned (found by the long run: 257 layers of weights in [-2, 2] where a rounding in
// one layer grows to 1e-3 at the logits): so the reference also runs with every weight nudged
// by one ulp, and the tolerance widens by 10x the change that alone makes. (The fast path's other
// summation order is a perturbation of that size; on most inputs the nudge moves the logits by
// ~1e-8 and the bound stays 1e-3.)
//
// Input: byte 0 options, bytes 1-28 the 7 int32 header, bytes 29-32 token ids (signed), the
// rest the weights: raw float32 bits (option bit 4) or each byte b as int8(b) / 64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_common.hpp"
#include "glass/checkpoint.hpp"
#include "glass/fast/fast_session.hpp"
#include "glass/transformer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    if (size < 33) return 0;
    const std::uint8_t opt = data[0];
    std::int32_t header[7];
    std::memcpy(header, data + 1, 28);
    const std::int8_t* id_bytes = reinterpret_cast<const std::int8_t*>(data + 29);
    const std::uint8_t* w = data + 33;
    const size_t w_size = size - 33;
    try {
        const glass::ModelConfig c = glass::parse_llama2c_header(header);
        const std::int64_t file_bytes = glass::llama2c_file_bytes(c);
        constexpr std::int64_t kMaxWeights = 256 << 10, kMaxKvBytes = 16 << 20;
        const std::int64_t n_floats = (file_bytes - 28) / 4;
        if (n_floats > kMaxWeights || c.kv_bytes_per_token() * c.seq_len > kMaxKvBytes) return 0;

        const bool raw = opt & 16;
        auto floats = std::make_shared<std::vector<float>>(static_cast<size_t>(n_floats), 0.0f);
        if (w_size > 0) {
            for (std::int64_t i = 0; i < n_floats; ++i) {
                float v;
                if (raw) {
                    std::uint8_t b[4];
                    for (int k = 0; k < 4; ++k) b[k] = w[static_cast<size_t>(4 * i + k) % w_size];
                    std::memcpy(&v, b, 4);
                } else {
                    v = static_cast<float>(static_cast<std::int8_t>(w[static_cast<size_t>(i) % w_size])) / 64.0f;
                }
                (*floats)[static_cast<size_t>(i)] = v;
            }
        }
        const float* weights = floats->data();
        const glass::Model model = glass::model_from_llama2c_bytes(c, weights, floats);

        glass::fast::FastOptions options;
        options.weights = static_cast<glass::fast::WeightType>(opt & 3);
        options.portable_kernels = opt & 4;
        options.threads = opt & 8 ? 2 : 1;
        options.prefill_chunk = 1 + (opt >> 5);
        glass::fast::FastCpuSession fast(model, options);

        const int n_prompt = 1 + static_cast<std::uint8_t>(id_bytes[3]) % 3;
        std::vector<int> prompt;
        for (int i = 0; i < n_prompt; ++i) prompt.push_back(id_bytes[i]);
        const int next = std::abs(id_bytes[3]) % c.vocab_size;
        fast.prefill(prompt);  // ids < 0 or >= vocab, or a prompt past seq_len: glass::Error
        const std::span<const float> got = fast.decode(next);
        FUZZ_CHECK(got.size() == static_cast<size_t>(c.vocab_size), "%zu logits, vocabulary %d", got.size(), c.vocab_size);

        if (raw || options.weights != glass::fast::WeightType::fp32) return 0;
        glass::CpuSession reference(model);
        reference.prefill(prompt);
        const std::span<const float> want = reference.decode(next);
        float largest = 0;
        for (float x : want) {
            if (!std::isfinite(x)) return 0;  // overflowed: nothing to compare
            largest = std::max(largest, std::abs(x));
        }
        auto nudged = std::make_shared<std::vector<float>>(*floats);
        for (float& x : *nudged) x = std::nextafter(x, 10.0f);
        const glass::Model nudged_model = glass::model_from_llama2c_bytes(c, nudged->data(), nudged);
        glass::CpuSession nudged_reference(nudged_model);
        nudged_reference.prefill(prompt);
        const std::span<const float> moved = nudged_reference.decode(next);
        float sensitivity = 0;  // what one ulp on every weight does to the reference's logits
        for (size_t i = 0; i < want.size(); ++i) {
            if (!std::isfinite(moved[i])) return 0;
            sensitivity = std::max(sensitivity, std::abs(moved[i] - want[i]));
        }
        const float tolerance = 1e-3f * (1.0f + largest) + 10.0f * sensitivity;
        for (size_t i = 0; i < want.size(); ++i)
            FUZZ_CHECK(std::abs(got[i] - want[i]) <= tolerance,
                       "logit %zu: fast %g, reference %g (largest %g, one-ulp sensitivity %g)", i, got[i],
                       want[i], largest, sensitivity);
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
