// fuzz/fuzz_hf_model.cpp — the two files of a Hugging Face model folder that glass parses itself:
// byte 0 picks which. Even: a safetensors file (open_safetensors: the 8-byte header length, the
// JSON header, every tensor's dtype, shape and data_offsets checked against the file), whose F32
// tensors are then read end to end. Odd: a config.json (hf_model_config: model_type, every
// number range-checked, rope_scaling, Gemma's layer_types), whose config must then be usable:
// head_dim even and heads a multiple of KV heads.
#include "fuzz_common.hpp"
#include "glass/formats/hf_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
    if (size < 1) return 0;
    try {
        if (data[0] % 2 == 0) {
            const glass_fuzz::MemFile file(data + 1, size - 1);
            const glass::SafetensorsFile f = glass::open_safetensors(file.path());
            float sum = 0.0f;
            for (const auto& [name, t] : f.tensors)
                if (t.dtype == "F32")
                    for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) {
                        float v;
                        std::memcpy(&v, t.bytes.data() + i, 4);
                        sum += v;
                    }
            (void)sum;
        } else {
            const nlohmann::json j = nlohmann::json::parse(data + 1, data + size, nullptr, /*allow_exceptions=*/false);
            if (j.is_discarded() || !j.is_object()) return 0;
            const glass::ModelConfig c = glass::hf_model_config(j, 512);
            FUZZ_CHECK(c.head_dim % 2 == 0 && c.n_heads % c.n_kv_heads == 0, "config with head_dim %d, %d heads on %d",
                       c.head_dim, c.n_heads, c.n_kv_heads);
        }
    } catch (const glass::Error& e) {
        glass_fuzz::refused(e);
    }
    return 0;
}
