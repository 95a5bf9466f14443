// glass loadgen against a real `glass serve --port 0` on the shipped model, on loopback. What
// loadgen reports is checked against what the server counted (its /metrics counters, read here
// with curl before and after) and against arithmetic: greedy requests with "ignore_eos" generate
// exactly --max-tokens tokens each, prompts are exactly --prompt-len token ids, and a second run
// with the same --seed sends the same prompts, so their full blocks come from the prefix cache.
// No timings are checked beyond their order (p50 <= p99, TTFT <= latency). Skipped where curl is
// missing.
#include <doctest/doctest.h>

#include <string>

#include "serve_http_client.hpp"

namespace test_loadgen {  // this file's own names (tests are built in unity batches)

using namespace serve_test;

namespace {

const bool kNoCurl = no_curl();  // before the cases register

// `glass loadgen ARGS --json`: its exit status and its JSON (the last line of stdout).
struct LoadgenRun {
    int exit_code = -1;
    json report;
    std::string out, err;
};
LoadgenRun loadgen(const std::string& args) {
    const test::Run r = test::run(glass_bin() + " loadgen " + args + " --json");
    LoadgenRun lr{r.exit_code, json(), r.out, r.err};
    const size_t end = r.out.find_last_not_of('\n');
    INFO("glass loadgen " << args << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(end != std::string::npos);
    const size_t start = r.out.rfind('\n', end);
    lr.report = json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1, std::string::npos), nullptr, false);
    REQUIRE_FALSE(lr.report.is_discarded());
    return lr;
}

// The field names of loadgen's JSON, as its file's top comment promises them.
const char* const kFields[] = {"url", "clients", "requests", "stream", "chat", "prompt_len", "max_tokens", "ok", "errors",
                               "errors_by_status", "wall_s", "generated_tokens", "prompt_tokens", "cached_tokens",
                               "throughput_tokens_per_s", "requests_per_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50",
                               "tpot_ms_p99", "max_gap_ms", "latency_ms_p50", "latency_ms_p99"};

double generated_total(const ServerProcess& s) { return get_metrics(s).at("glass_generation_tokens_total"); }

}  // namespace

TEST_CASE("loadgen: what it reports is what the server counted" * doctest::skip(kNoCurl)) {
    ServerProcess server({});
    INFO("server log:\n" << server.log());
    const int n = 7, prompt_len = 20, max_tokens = 9, block = 16;  // glass serve's default --block-size

    for (const bool stream : {true, false}) {
        CAPTURE(stream);
        const double before = generated_total(server);
        const LoadgenRun r = loadgen("--url " + server.base_url() + " --clients 3 --requests " + std::to_string(n) +
                                     " --prompt-len " + std::to_string(prompt_len) + " --max-tokens " +
                                     std::to_string(max_tokens) + " --seed " + (stream ? "11" : "12") +
                                     (stream ? " --stream" : ""));
        const double after = generated_total(server);
        const json& j = r.report;
        INFO(j.dump());
        CHECK(r.exit_code == 0);
        for (const char* field : kFields) CHECK_MESSAGE(j.contains(field), "no field " << field);
        CHECK(j["ok"] == n);
        CHECK(j["errors"] == 0);
        CHECK(j["errors_by_status"] == json::object());
        CHECK(j["clients"] == 3);
        CHECK(j["stream"] == stream);
        // Tokens: the server's own counter moved by exactly what loadgen summed from the usages,
        // and that is n x max_tokens (greedy, ignore_eos: nothing stops a request early).
        CHECK(j["generated_tokens"].get<double>() == after - before);
        CHECK(j["generated_tokens"] == n * max_tokens);
        CHECK(j["prompt_tokens"] == n * prompt_len);
        CHECK(j["cached_tokens"] == 0);  // fresh random prompts share no full block
        // Rates are the counts over the wall time (to the rounding of a double).
        const double wall = j["wall_s"].get<double>();
        REQUIRE(wall > 0);
        CHECK(j["throughput_tokens_per_s"].get<double>() == doctest::Approx(n * max_tokens / wall).epsilon(1e-9));
        CHECK(j["requests_per_s"].get<double>() == doctest::Approx(n / wall).epsilon(1e-9));
        CHECK(j["latency_ms_p50"].get<double>() <= j["latency_ms_p99"].get<double>());
        CHECK(j["latency_ms_p99"].get<double>() <= wall * 1000);
        if (stream) {
            for (const char* f : {"ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "max_gap_ms"})
                CHECK_MESSAGE(j[f].is_number(), f << " should be a number when streaming");
            CHECK(j["ttft_ms_p50"].get<double>() <= j["ttft_ms_p99"].get<double>());
            CHECK(j["tpot_ms_p50"].get<double>() <= j["tpot_ms_p99"].get<double>());
            CHECK(j["ttft_ms_p99"].get<double>() <= j["latency_ms_p99"].get<double>());
        } else {
            for (const char* f : {"ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "max_gap_ms"})
                CHECK_MESSAGE(j[f].is_null(), f << " is unknown without --stream");
            CHECK(r.out.find("unknown without --stream") != std::string::npos);
        }
    }

    // The same seed again sends the same prompts: each finds its first full block in the prefix
    // cache (20 tokens = one full block of 16 + 4), so cached = n x 16. Another seed: none.
    const LoadgenRun again = loadgen("--url " + server.base_url() + " --clients 2 --requests " + std::to_string(n) +
                                     " --prompt-len " + std::to_string(prompt_len) + " --max-tokens 3 --seed 11");
    CHECK(again.report["cached_tokens"] == n * (prompt_len / block) * block);
    const LoadgenRun other = loadgen("--url " + server.base_url() + " --clients 2 --requests " + std::to_string(n) +
                                     " --prompt-len " + std::to_string(prompt_len) + " --max-tokens 3 --seed 13");
    CHECK(other.report["cached_tokens"] == 0);
}

TEST_CASE("loadgen: refused requests are counted by status" * doctest::skip(kNoCurl)) {
    ServerProcess server({"--api-key", "sekrit"});
    INFO("server log:\n" << server.log());
    const std::string common = "--url " + server.base_url() + " --clients 2 --requests 5 --max-tokens 4 --stream";

    const LoadgenRun without = loadgen(common);
    CHECK(without.exit_code == 1);  // some request failed
    CHECK(without.report["ok"] == 0);
    CHECK(without.report["errors"] == 5);
    CHECK(without.report["errors_by_status"] == json{{"401", 5}});
    CHECK(without.report["generated_tokens"] == 0);
    CHECK(without.report["latency_ms_p50"].is_null());
    CHECK(without.out.find("first error: HTTP 401") != std::string::npos);

    const LoadgenRun wrong = loadgen(common + " --api-key nope");
    CHECK(wrong.report["errors_by_status"] == json{{"401", 5}});

    const LoadgenRun with = loadgen(common + " --api-key sekrit");
    CHECK(with.exit_code == 0);
    CHECK(with.report["ok"] == 5);
    CHECK(with.report["errors"] == 0);
    CHECK(with.report["generated_tokens"] == 5 * 4);
}

TEST_CASE("loadgen: bad flags and URLs off this machine are refused, naming the value") {
    const auto refused = [](const std::string& args, const std::string& named) {
        const test::Run r = test::run(glass_bin() + " loadgen " + args);
        INFO("glass loadgen " << args << "\nstdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.exit_code == 2);
        CHECK(r.out.empty());  // refused before any request
        CHECK(r.err.find(named) != std::string::npos);
    };
    const std::string url = "--url http://127.0.0.1:9";
    refused(url + " --clients 0", "--clients must be in [1, 1024], got 0");
    refused(url + " --requests -3", "--requests must be in [1, 1000000], got -3");
    refused(url + " --max-tokens many", "invalid value 'many' for --max-tokens");
    refused(url + " --prompt-len 0", "--prompt-len must be in [1, 1000000], got 0");
    refused(url + " --temperature 3", "--temperature must be in [0, 2], got 3");
    refused(url + " --timeout 0", "--timeout must be in [1, 3600] seconds, got 0");
    refused(url + " --bogus", "unknown flag '--bogus'");
    refused("--clients 2", "needs --url");
    refused("--url http://127.0.0.1:70000", "bad port '70000'");
    refused("--url http://127.0.0.1:8000/v1/completions", "without a path");
    // Loopback only: any other host, by name or address, and TLS, are refused.
    refused("--url http://example.com:8000", "got 'example.com'");
    refused("--url http://10.1.2.3:8000", "got '10.1.2.3'");
    refused("--url http://[2001:db8::1]:8000", "got '2001:db8::1'");
    refused("--url http://127.0.0.2:8000", "got '127.0.0.2'");
    refused("--url https://127.0.0.1:8000", "must start with http://");
}

TEST_CASE("loadgen: no server at the URL is one clear error") {
    // Port 9 (discard) on loopback: nothing listens there on a test machine.
    const test::Run r = test::run(glass_bin() + " loadgen --url http://127.0.0.1:9 --requests 3");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("no server answers at http://127.0.0.1:9") != std::string::npos);
}

}  // namespace test_loadgen
