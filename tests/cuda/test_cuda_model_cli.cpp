// tests/cuda/test_cuda_model_cli.cpp — the `glass` program with --device cuda: llama2.c's story
// through the launched and graph decode, fp16 weights, a draft, the int8 KV cache and flash.
// (part of the test_cuda_model program; cuda_model_support.hpp has the shared pieces)
#include <string>

#include "cuda_model_support.hpp"

using namespace cuda_model_test;


// The CLI linked to the same library: `glass`, or with the emulator `glass-emulated`.
TEST_CASE("glass generate --device cuda prints llama2.c's story") {
    for (const auto& rec : test::read_jsonl(test::golden("stories260K_greedy.jsonl"))) {
        if (rec["case"].get<std::string>() != "once_upon_n32") continue;
        const std::string glass = test::bin_dir() + (kEmulated ? "/glass-emulated" : "/glass");
        const auto r = test::run(glass + " generate --device cuda --temperature 0 -n 32 -p " +
                                 test::sh(rec["prompt"].get<std::string>()));
        CHECK(r.exit_code == 0);
        CHECK(r.out == rec["stdout_exact"].get<std::string>());
        const auto graphed = test::run(glass + " generate --device cuda --cuda-graph --temperature 0 -n 32 -p " +
                                       test::sh(rec["prompt"].get<std::string>()));
        CHECK(graphed.exit_code == 0);
        CHECK(graphed.out == rec["stdout_exact"].get<std::string>());
        const auto half = test::run(glass + " generate --device cuda --precision fp16 "
                                                      "--temperature 0 -n 32 -p 'Once upon a time'");
        CHECK(half.exit_code == 0);
        // Speculative decoding on the device, the draft (the first 4 layers) there too.
        const auto drafted = test::run(glass + " generate --device cuda --draft layers:4 --temperature 0 -n 32 -p " +
                                       test::sh(rec["prompt"].get<std::string>()));
        CHECK(drafted.exit_code == 0);
        CHECK(drafted.out == rec["stdout_exact"].get<std::string>());
        CHECK(drafted.err.find("drafted tokens accepted") != std::string::npos);
        // The int8 KV cache on the device (--kv int8), decoded through the graph: the CPU's int8
        // story (greedy; the logits agree within kInt8, inside this story's top-2 margins: the
        // same text on both, checked here).
        const auto int8 = test::run(glass + " generate --device cuda --kv int8 --cuda-graph --temperature 0 -n 32 -p " +
                                    test::sh(rec["prompt"].get<std::string>()));
        const auto int8_cpu = test::run(glass + " generate --device cpu --kv int8 --temperature 0 -n 32 -p " +
                                        test::sh(rec["prompt"].get<std::string>()));
        CHECK(int8.exit_code == 0);
        CHECK(int8_cpu.exit_code == 0);
        CHECK(int8.out == int8_cpu.out);
        // FlashAttention in the session (--cuda-attention flash): run.c's story, prefill through
        // the tiled kernel (decode stays below flash_decode_min_keys here: tested in the session).
        const auto flash = test::run(glass + " generate --device cuda --cuda-attention flash --temperature 0 -n 32 -p " +
                                     test::sh(rec["prompt"].get<std::string>()));
        CHECK(flash.exit_code == 0);
        CHECK(flash.out == rec["stdout_exact"].get<std::string>());
    }
}
