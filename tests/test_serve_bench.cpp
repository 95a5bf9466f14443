// glass serve-bench: the serving engine under load and the C16/C17/C18/C20 experiments
// (bench/measure/serve_measure.hpp). Speeds are never asserted here (they belong to bench/RESULTS.md); what is
// checked is what the numbers are made of: token counts, block arithmetic, memory bounds, the
// JSON contract, and errors that name the bad value.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "glass/glass.hpp"
#include "test_support.hpp"

namespace test_serve_bench {  // this file's own names (tests are built in unity batches)

namespace {

std::string glass_cli() { return test::bin_dir() + "/glass"; }

// Runs serve-bench with --json and returns the JSON object on its last line.
nlohmann::json serve_bench(const std::string& args) {
    const test::Run r = test::run(glass_cli() + " serve-bench " + args + " --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const size_t end = r.out.find_last_not_of('\n');
    REQUIRE(end != std::string::npos);
    const size_t start = r.out.rfind('\n', end);
    nlohmann::json j;
    REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1)));
    return j;
}

}  // namespace

TEST_CASE("serve-bench load run: the issue's JSON fields, token counts and paged memory bounds (fp32 and int8 KV)") {
    const glass::ModelConfig& c = test::shipped().config;
    for (const glass::KvType kv : {glass::KvType::fp32, glass::KvType::int8}) {
    CAPTURE(glass::to_string(kv));
    const std::string model = "-m " + test::sh(test::shipped_model()) + " --threads 2 --kv " + glass::to_string(kv);
    // 12 requests at once, each exactly 5 new tokens: the generated count is known beforehand.
    const nlohmann::json j = serve_bench(model + " --requests 12 --rate 0 --prompt-len 8:60 --gen 5:5 --block-size 16");
    // A position costs what its type stores: 1,280 bytes in fp32, 2 x 5 layers x 4 KV heads x
    // (8 int8 values + one fp32 scale) = 480 in int8 (kv_cache.hpp).
    CHECK(j["kv"] == glass::to_string(kv));
    // Which loops ran, and on what: the fast backend's kernel set (GLASS_KERNELS, when set, is
    // read by this process and the CLI alike) and that set's instructions.
    CHECK(j["backend"] == "fast");
    CHECK(j["kernels"] == glass::fast::best_kernels().name);
    CHECK(j["isa"] == glass::fast::best_kernels().isa);
    const std::int64_t per_position = glass::kv_bytes_per_token(c, kv), block_bytes = 16 * per_position;
    CHECK(j["kv_bytes_per_token"].get<std::int64_t>() == per_position);
    CHECK(per_position == (kv == glass::KvType::fp32 ? 1280 : 480));
    for (const char* field : {"throughput_tokens_per_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99",
                              "max_gap_ms", "kv_reserved_bytes", "kv_used_bytes", "prefix_hit_tokens"})
        CHECK_MESSAGE(j.contains(field), "missing JSON field " << field);
    CHECK(j["generated_tokens"].get<int>() == 12 * 5);
    CHECK(j["throughput_tokens_per_s"].get<double>() ==
          doctest::Approx(60.0 / j["wall_s"].get<double>()).epsilon(1e-9));
    CHECK(j["ttft_ms_p50"].get<double>() <= j["ttft_ms_p99"].get<double>());
    CHECK(j["tpot_ms_p50"].get<double>() <= j["tpot_ms_p99"].get<double>());
    CHECK(j["prefix_hit_tokens"].get<int>() == 0);  // random prompts share nothing but BOS

    // Paging holds whole blocks: reserved is a whole number of blocks, at least what is used, and
    // wastes less than one block per running request (only each request's last block is partial).
    const std::int64_t reserved = j["kv_reserved_bytes"], used = j["kv_used_bytes"];
    const int running = j["peak_running"];
    CHECK(running >= 2);
    CHECK(reserved % block_bytes == 0);
    CHECK(used % per_position == 0);
    CHECK(used <= reserved);
    CHECK(reserved - used < running * block_bytes);
    CHECK(j["max_length_reserved_bytes"].get<std::int64_t>() == std::int64_t{running} * c.seq_len * per_position);
    }
    // The reference backend takes --kv too; a type that does not exist is a usage error naming it.
    const nlohmann::json ref = serve_bench("-m " + test::sh(test::shipped_model()) +
                                           " --backend reference --kv int8 --requests 2 --rate 0 --prompt-len 8:8 --gen 3:3");
    CHECK(ref["kv"] == "int8");
    CHECK(ref["kernels"] == "eigen");  // the reference's loops are Eigen's, at this build's flags
    CHECK(ref["isa"] == Eigen::SimdInstructionSetsInUse());
    CHECK(ref["generated_tokens"].get<int>() == 6);
    const test::Run bad = test::run(glass_cli() + " serve-bench -m " + test::sh(test::shipped_model()) + " --kv int4");
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--kv must be fp32 or int8, got 'int4'") != std::string::npos);
}

TEST_CASE("serve-bench: a shared system prompt is served from the prefix cache, and not with --no-prefix-cache") {
    const std::string model = "-m " + test::sh(test::shipped_model()) + " --threads 1";
    // 6 requests at once sharing their first 40 tokens, a budget that admits one prompt per step:
    // the first computes the shared blocks (two full blocks of 16), every later one finds them.
    const std::string load = " --requests 6 --rate 0 --prompt-len 50:60 --gen 3:3 --shared-prefix 40 --budget 64 --no-chunked-prefill";
    const nlohmann::json on = serve_bench(model + load);
    const nlohmann::json off = serve_bench(model + load + " --no-prefix-cache");
    CHECK(on["prefix_hit_tokens"].get<int>() == 5 * 32);
    CHECK(off["prefix_hit_tokens"].get<int>() == 0);
    CHECK(on["generated_tokens"] == off["generated_tokens"]);
}

TEST_CASE("serve-bench --chat-turns (C16): the cached tokens of each turn follow from the block arithmetic") {
    const glass::ModelConfig& c = test::shipped().config;
    const int turns = 4, block = 8;
    const nlohmann::json j = serve_bench("-m " + test::sh(test::shipped_model()) + " --threads 1 --requests 1 --gen 2:2" +
                                         " --block-size " + std::to_string(block) + " --chat-turns " + std::to_string(turns));
    REQUIRE(j["chat"].size() == size_t(turns));
    // The command splits the window into turns: per turn (seq_len - 1) / turns tokens, two thirds user.
    const int per_turn = (c.seq_len - 1) / turns, user = per_turn * 2 / 3, reply = per_turn - user;
    int previous_prompt = 0;
    for (int t = 0; t < turns; ++t) {
        const nlohmann::json& turn = j["chat"][size_t(t)];
        CAPTURE(t + 1);
        const int prompt = 1 + (t + 1) * user + t * reply;  // BOS, every user turn, every earlier reply
        CHECK(turn["prompt_tokens"].get<int>() == prompt);
        // K/V exist for the previous turn's prompt and all but the last token of its reply (that
        // one was sampled, never fed back). Full blocks of those are found, never the block of this
        // prompt's last token (its logits are needed).
        const int with_kv = t == 0 ? 0 : previous_prompt + reply - 1;
        const int expected = std::min(with_kv, prompt - 1) / block * block;
        CHECK(turn["cached_tokens"].get<int>() == expected);
        CHECK(turn["ttft_ms_cache_on"].get<double>() > 0);
        CHECK(turn["ttft_ms_cache_off"].get<double>() > 0);
        previous_prompt = prompt;
    }
}

// --unpaired: the sweep without its second backend, so without the paired speedups; the
// medians' points are all still there.
TEST_CASE("serve-bench --batch-sweep --unpaired leaves out the paired speedups") {
    const nlohmann::json j = serve_bench("--shape stories15M --context 64 --threads 1 --requests 1 --rate 0 "
                                         "--prompt-len 2:2 --gen 1:1 --batch-sweep --unpaired");
    REQUIRE(j["batch_sweep"].size() == 7);  // batches 1, 2, 4, ... 64
    for (const nlohmann::json& p : j["batch_sweep"]) {
        CHECK(p["decode_tokens_per_s"].get<double>() > 0);
        CHECK_FALSE(p.contains("speedup_paired"));
    }
}

TEST_CASE("serve-bench --batch-sweep (C20) and --stall (C18) report every point they measure") {
    const nlohmann::json j = serve_bench("--shape stories15M --context 320 --threads 1 --requests 2 --rate 0 "
                                         "--prompt-len 4:8 --gen 2:2 --batch-sweep --stall --long-prompt 300 "
                                         "--decoders 3 --budget 64");
    REQUIRE(j["batch_sweep"].is_array());
    // The share of the FMA peak: the FLOP/s a batch achieves (2 per weight and a little attention
    // per decoded token, prefill_flops of one token) over the peak the command measured, whatever
    // that peak is on this CPU and kernel set.
    const double flops_per_token = glass::fast::prefill_flops(glass::fast::shape_config("stories15M"), 1);
    const double peak = j["fma_peak_gflops"].get<double>() * 1e9;
    const double bandwidth = j["read_bandwidth_gbps"].get<double>() * 1e9;
    REQUIRE(bandwidth > 0);  // the fast backend's sweep measures the read probe too
    CHECK(j["flops_per_token"].get<double>() == doctest::Approx(flops_per_token).epsilon(1e-12));
    // stories15M in fp32: what one decode step reads of its weights, whatever the batch.
    const double weight_bytes = j["weight_bytes_per_step"].get<double>();
    const glass::ModelConfig c15 = glass::fast::shape_config("stories15M");
    const double layer_weights = 2.0 * c15.dim * c15.dim + 2.0 * c15.kv_dim() * c15.dim + 3.0 * c15.hidden_dim * c15.dim;
    CHECK(weight_bytes >= 4 * (c15.n_layers * layer_weights + static_cast<double>(c15.vocab_size) * c15.dim));
    double roofline_batch_1 = 0;
    int expected_batch = 1;
    for (const nlohmann::json& p : j["batch_sweep"]) {
        CHECK(p["batch"].get<int>() == expected_batch);
        CHECK(p["decode_tokens_per_s"].get<double>() > 0);
        // tokens/s and ms per step are two readings of one timing: batch tokens per median step.
        CHECK(p["decode_tokens_per_s"].get<double>() ==
              doctest::Approx(1000.0 * expected_batch / p["step_ms"].get<double>()).epsilon(1e-9));
        // The median and the mean of the same steps both lie within their range (the mean to
        // within its own rounding: a sum of ≤ 10 readings divided, a few units in the last place).
        const double low = p["min_step_ms"], high = p["max_step_ms"];
        // Batch B ÷ batch 1 paired step by step (measure_batch_speedup): each pair's speedup is
        // B · (batch 1's step) / (batch B's step), recomputed here from the pairs the command kept.
        if (expected_batch == 1) {
            CHECK_FALSE(p.contains("speedup_paired"));
        } else {
            const std::vector<double> one = p["paired_single_step_ms"], many = p["paired_batched_step_ms"];
            REQUIRE(one.size() == 10);
            REQUIRE(many.size() == 10);
            std::vector<double> speedups;
            for (size_t i = 0; i < one.size(); ++i) speedups.push_back(expected_batch * one[i] / many[i]);
            const glass::fast::Stat want = glass::fast::stat_of(speedups);
            CHECK(p["speedup_paired"].get<double>() == doctest::Approx(want.median).epsilon(1e-12));
            CHECK(p["speedup_paired_range"][0].get<double>() == doctest::Approx(want.min).epsilon(1e-12));
            CHECK(p["speedup_paired_range"][1].get<double>() == doctest::Approx(want.max).epsilon(1e-12));
        }
        CHECK(low > 0);
        for (const char* field : {"step_ms", "mean_step_ms"}) {
            CHECK(p[field].get<double>() >= low * (1 - 1e-12));
            CHECK(p[field].get<double>() <= high * (1 + 1e-12));
        }
        CHECK(p["fraction_of_fma_peak"].get<double>() ==
              doctest::Approx(p["decode_tokens_per_s"].get<double>() * flops_per_token / peak).epsilon(1e-9));
        // The roofline, recomputed from the command's own readings: a step reads every weight once
        // and each sequence's cached rows, and does each sequence's FLOPs; the longer one bounds it.
        const double read_s = (weight_bytes + expected_batch * p["kv_bytes_read_per_token"].get<double>()) / bandwidth;
        const double fma_s = expected_batch * flops_per_token / peak;
        const double roofline = expected_batch / std::max(read_s, fma_s);
        CHECK(p["roofline_tokens_per_s"].get<double>() == doctest::Approx(roofline).epsilon(1e-9));
        CHECK(p["roofline_bound"] == (fma_s > read_s ? "fma" : "read"));
        CHECK(p["fraction_of_roofline"].get<double>() ==
              doctest::Approx(p["decode_tokens_per_s"].get<double>() / roofline).epsilon(1e-9));
        if (expected_batch == 1) roofline_batch_1 = roofline;
        CHECK(p["roofline_ratio_to_batch_1"].get<double>() == doctest::Approx(roofline / roofline_batch_1).epsilon(1e-9));
        // The timed steps decode positions 17 .. 16 + steps (6 steps from batch 16): rows 0 .. p
        // of every layer, keys and values, fp32.
        const int steps = expected_batch >= 16 ? 6 : 10;
        double rows = 0;
        for (int pos = 17; pos < 17 + steps; ++pos) rows += c15.n_layers * (pos + 1.0);
        CHECK(p["kv_bytes_read_per_token"].get<double>() ==
              doctest::Approx(rows * 2 * c15.kv_dim() * 4 / steps).epsilon(1e-12));
        expected_batch *= 2;
    }
    CHECK(expected_batch == 128);  // 1, 2, ..., 64
    REQUIRE(j.contains("stall"));
    CHECK(j["stall"]["decoders"] == 3);
    CHECK(j["stall"]["max_gap_ms_chunked"].get<double>() > 0);
    CHECK(j["stall"]["max_gap_ms_unchunked"].get<double>() > 0);
}

TEST_CASE("serve-bench refuses bad flags, naming the value") {
    const std::string model = " -m " + test::sh(test::shipped_model());
    const struct {
        std::string args, message;
    } cases[] = {
        {model + " --prompt-len 9:3", "'9:3'"},
        {model + " --gen x", "'x'"},
        {model + " --backend gpu", "'gpu'"},
        {model + " --threads 0", "got 0"},
        {model + " --requests 0", "got 0"},
        {model + " --block-size 0", "got 0"},
        {model + " --prompt-len 400:500 --gen 100:100", "exceed the 512 positions"},
        {model + " --shared-prefix 20 --prompt-len 10:30", "shared prefix of 20"},
        {model + " --stall --long-prompt 2000", "--long-prompt 2000"},
        {" --shape stories15M --context 5", "got 5"},
        {" --shape gpt5", "unknown shape 'gpt5'"},
        {"", "needs a model"},
        {model + " extra", "'extra'"},
        {model + " --unpaired", "--unpaired belongs to --batch-sweep"},
    };
    for (const auto& k : cases) {
        CAPTURE(k.args);
        const test::Run r = test::run(glass_cli() + " serve-bench" + k.args);
        CHECK(r.exit_code != 0);
        CHECK_MESSAGE(r.err.find(k.message) != std::string::npos, r.err);
    }
}

}  // namespace test_serve_bench
