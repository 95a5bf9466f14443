// glass serve's GET /metrics (Prometheus text) and GET /v1/engine/state (the live page's JSON),
// over real HTTP on loopback (tests/serve_http_client.hpp: the server as a child process, curl).
// Expected values never come from the endpoint under test: token counts from the responses'
// usage (and the tokenizer called here), outcomes from their finish_reason, the pool's size
// from the model file, prefill chunks from the prompt's length and the --budget given, bucket
// counts recomputed here from the per-request TTFT/TPOT. Skipped where curl is missing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "serve_http_client.hpp"

namespace test_serve_metrics {  // this file's own names (tests are built in unity batches)

using namespace serve_test;

namespace {

const bool kNoCurl = no_curl();  // before the cases register

// The default pool: four context windows of the model, in blocks of `block_size`.
int default_pool_blocks(int seq_len, int block_size) { return 4 * ((seq_len + block_size - 1) / block_size); }

const std::vector<std::string> kOutcomes = {"stop", "length", "cancelled", "error", "rejected"};
std::string requests_key(const std::string& outcome) { return "glass_requests_total{outcome=\"" + outcome + "\"}"; }

// A histogram read back: its le bounds in order (+Inf last) with their cumulative counts.
struct HistogramSeen {
    std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
    double sum = 0, count = 0;
};
HistogramSeen histogram_of(const Metrics& m, const std::string& name) {
    HistogramSeen h;
    const std::string prefix = name + "_bucket{le=\"";
    for (const auto& [key, value] : m.samples) {
        if (key.rfind(prefix, 0) != 0) continue;
        const std::string le = key.substr(prefix.size(), key.size() - prefix.size() - 2);
        h.buckets.push_back({le == "+Inf" ? INFINITY : std::stod(le), value});
    }
    std::sort(h.buckets.begin(), h.buckets.end());
    h.sum = m.at(name + "_sum");
    h.count = m.at(name + "_count");
    return h;
}

// Every family the issue names, with its type, HELP, and the samples that must be there.
void check_families(const Metrics& m) {
    const std::vector<std::pair<std::string, std::string>> families = {
        {"glass_requests_total", "counter"},
        {"glass_prompt_tokens_total", "counter"},
        {"glass_generation_tokens_total", "counter"},
        {"glass_prefix_cache_hit_tokens_total", "counter"},
        {"glass_time_to_first_token_seconds", "histogram"},
        {"glass_time_per_output_token_seconds", "histogram"},
        {"glass_requests_running", "gauge"},
        {"glass_requests_waiting", "gauge"},
        {"glass_kv_blocks_total", "gauge"},
        {"glass_kv_blocks_used", "gauge"},
        {"glass_kv_blocks_free", "gauge"},
        {"glass_kv_blocks_cached", "gauge"},
    };
    for (const auto& [name, type] : families) {
        CAPTURE(name);
        CHECK(m.types.count(name) == 1);
        if (m.types.count(name)) CHECK(m.types.at(name) == type);
        CHECK(m.helps.count(name) == 1);
        if (type != "histogram" && name != "glass_requests_total") CHECK(m.samples.count(name) == 1);
    }
    for (const std::string& o : kOutcomes) CHECK(m.samples.count(requests_key(o)) == 1);
}

// Cumulative, monotone buckets ending in +Inf == _count; and the count each bucket must hold,
// recomputed from `values` (seconds), one per request.
void check_histogram(const Metrics& m, const std::string& name, const std::vector<double>& values) {
    CAPTURE(name);
    const HistogramSeen h = histogram_of(m, name);
    REQUIRE(h.buckets.size() >= 2);
    CHECK(std::isinf(h.buckets.back().first));
    CHECK(h.buckets.back().second == h.count);
    for (size_t i = 1; i < h.buckets.size(); ++i) CHECK(h.buckets[i].second >= h.buckets[i - 1].second);
    CHECK(h.count == static_cast<double>(values.size()));
    for (const auto& [le, cumulative] : h.buckets) {
        // The live view rounds nothing, but its milliseconds went through JSON and a division by
        // 1000 here: a value within 1e-9 s of a bound could land on either side. None is that close
        // in practice; the check skips such a bound rather than guess.
        bool ambiguous = false;
        double expected = 0;
        for (double v : values) {
            if (std::abs(v - le) < 1e-9) ambiguous = true;
            expected += v <= le;
        }
        if (!ambiguous) CHECK_MESSAGE(cumulative == expected, "bucket le=" << le);
    }
    double sum = 0;
    for (double v : values) sum += v;
    // Same values summed in another order, milliseconds printed as JSON doubles: 1e-9 relative.
    CHECK(h.sum == doctest::Approx(sum).epsilon(1e-9));
}

json engine_state(const ServerProcess& s, const std::vector<std::string>& extra = {}) {
    const Reply r = http(s.url("/v1/engine/state"), std::nullopt, extra);
    REQUIRE(r.status == 200);
    return r.json_body();
}

// The finished request named `name` (cmpl-N) in the state's recent_finished.
json finished_named(const json& state, const std::string& name) {
    for (const json& r : state["recent_finished"])
        if (r["name"] == name) return r;
    FAIL("no finished request named " << name << " in " << state["recent_finished"].dump());
    return {};
}

}  // namespace

TEST_CASE("metrics: counters equal the responses' usage, outcomes their finish_reason; rejections counted; "
          "histograms cumulative; idle gauges" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({"--block-size", "16"});
    const int total_blocks = default_pool_blocks(test::shipped().config.seq_len, 16);

    // A fresh server: every counter 0, the whole pool free, nothing cached.
    {
        const Metrics m = get_metrics(server);
        check_families(m);
        for (const std::string& o : kOutcomes) CHECK(m.at(requests_key(o)) == 0);
        CHECK(m.at("glass_prompt_tokens_total") == 0);
        CHECK(m.at("glass_generation_tokens_total") == 0);
        CHECK(m.at("glass_time_to_first_token_seconds_count") == 0);
        CHECK(m.at("glass_kv_blocks_total") == total_blocks);
        CHECK(m.at("glass_kv_blocks_free") == total_blocks);
        CHECK(m.at("glass_kv_blocks_used") == 0);
        CHECK(m.at("glass_kv_blocks_cached") == 0);
    }

    // Requests of every kind that finishes: plain and streamed, completions and chat, greedy and
    // seeded, with and without a stop string, a two-turn chat that hits the prefix cache.
    const std::string system = "You are a storyteller who tells short stories about animals in the forest.";
    const json turn1 = {{"temperature", 0}, {"max_tokens", 60},
                        {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Tell me a story."}}}}};
    std::vector<std::pair<std::string, json>> requests = {
        {"/v1/completions", {{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 40}}},
        {"/v1/completions", {{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 100}, {"stop", "Lily"}}},
        {"/v1/completions", {{"prompt", "The little dog"}, {"temperature", 0.8}, {"seed", 7}, {"max_tokens", 30}}},
        {"/v1/completions", {{"prompt", "Lily and Ben"}, {"temperature", 0}, {"max_tokens", 25}, {"stream", true},
                             {"stream_options", {{"include_usage", true}}}}},
        {"/v1/chat/completions", turn1},
    };
    std::map<std::string, int> outcomes;
    long prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::vector<std::string> names;
    const auto count = [&](const json& usage, const std::string& finish_reason) {
        prompt_tokens += usage["prompt_tokens"].get<long>();
        completion_tokens += usage["completion_tokens"].get<long>();
        cached_tokens += usage["prompt_tokens_details"]["cached_tokens"].get<long>();
        ++outcomes[finish_reason];
    };
    std::string reply1;
    for (const auto& [route, body] : requests) {
        CAPTURE(body.dump());
        const Reply r = post(server, route, body);
        REQUIRE(r.status == 200);
        if (body.value("stream", false)) {
            const Sse sse = parse_sse(r.body, route == "/v1/chat/completions");
            REQUIRE(sse.problem == "");
            REQUIRE(sse.chunks.size() >= 2);
            count(sse.chunks.back()["usage"], sse.chunks[sse.chunks.size() - 2]["choices"][0]["finish_reason"]);
            names.push_back(sse.chunks[0]["id"]);
        } else {
            const json j = r.json_body();
            count(j["usage"], j["choices"][0]["finish_reason"]);
            names.push_back(j["id"]);
            if (route == "/v1/chat/completions") reply1 = j["choices"][0]["message"]["content"];
        }
    }
    json turn2 = turn1;  // re-sends turn 1: its prompt starts with turn 1's, whose blocks are cached
    turn2["messages"].push_back({{"role", "assistant"}, {"content", reply1}});
    turn2["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
    {
        const json j = post(server, "/v1/chat/completions", turn2).json_body();
        count(j["usage"], j["choices"][0]["finish_reason"]);
        names.push_back(j["id"]);
    }
    REQUIRE(cached_tokens > 0);            // the second turn hit the cache: the counter has something to show
    REQUIRE(outcomes["stop"] > 0);         // the stop string (and the chats' newline) end some
    REQUIRE(outcomes["length"] > 0);       // max_tokens ends others

    // Refused before the engine: malformed parameter (400), unknown model (404), body too large (413).
    // An unknown route is not a request refused: not counted.
    CHECK(post(server, "/v1/completions", {{"prompt", "x"}, {"temperature", 3.5}}).status == 400);
    CHECK(post(server, "/v1/completions", {{"prompt", "x"}, {"model", "gpt-4o"}}).status == 404);
    CHECK(http(server.url("/v1/completions"), std::string((1u << 20) + 10, 'x')).status == 413);
    CHECK(http(server.url("/v1/nothing")).status == 404);

    const Metrics m = get_metrics(server);
    check_families(m);
    CHECK(m.at(requests_key("stop")) == outcomes["stop"]);
    CHECK(m.at(requests_key("length")) == outcomes["length"]);
    CHECK(m.at(requests_key("cancelled")) == 0);
    CHECK(m.at(requests_key("error")) == 0);
    CHECK(m.at(requests_key("rejected")) == 3);
    CHECK(m.at("glass_prompt_tokens_total") == prompt_tokens);
    CHECK(m.at("glass_generation_tokens_total") == completion_tokens);
    CHECK(m.at("glass_prefix_cache_hit_tokens_total") == cached_tokens);

    // Idle: nothing runs or waits, no block is held; the finished requests' full blocks stay
    // cached (free, findable), so cached is at least 1 and at most the free ones.
    CHECK(m.at("glass_requests_running") == 0);
    CHECK(m.at("glass_requests_waiting") == 0);
    CHECK(m.at("glass_kv_blocks_total") == total_blocks);
    CHECK(m.at("glass_kv_blocks_used") == 0);
    CHECK(m.at("glass_kv_blocks_free") == total_blocks);
    CHECK(m.at("glass_kv_blocks_cached") >= 1);
    CHECK(m.at("glass_kv_blocks_cached") <= m.at("glass_kv_blocks_free"));

    // The histograms: one observation per finished request, bucketed as their TTFT and TPOT
    // (milliseconds in the engine state's records) say.
    const json state = engine_state(server);
    std::vector<double> ttft, tpot;
    for (const std::string& name : names) {
        const json r = finished_named(state, name);
        ttft.push_back(r["ttft_ms"].get<double>() / 1000);                                      // every request made a token
        if (r["generated_tokens"].get<int>() >= 2) tpot.push_back(r["tpot_ms"].get<double>() / 1000);  // a gap needs two
    }
    CHECK(ttft.size() == names.size());
    check_histogram(m, "glass_time_to_first_token_seconds", ttft);
    check_histogram(m, "glass_time_per_output_token_seconds", tpot);
    CHECK(m.at("glass_engine_steps_total") == state["steps"]);
}

TEST_CASE("engine state: each request's prefill chunks cover its prompt within the budget; one decode step per "
          "later token; the grid is the pool" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({"--block-size", "16", "--budget", "8"});
    const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    const int n_prompt = static_cast<int>(test::shipped_tok().encode(prompt, true, false).size());
    REQUIRE(n_prompt > 17);  // at least one full block (+1) to share, and several chunks of 8

    const json first = post(server, "/v1/completions", {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 10}}).json_body();
    const json second = post(server, "/v1/completions", {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 6}}).json_body();
    REQUIRE(first["usage"]["prompt_tokens"] == n_prompt);
    // The second finds every full block of the first's prompt except the one with the last token.
    const int expected_cached = (n_prompt - 1) / 16 * 16;
    CHECK(second["usage"]["prompt_tokens_details"]["cached_tokens"] == expected_cached);

    const json state = engine_state(server);
    CHECK(state["block_size"] == 16);
    const Metrics m = get_metrics(server);
    CHECK(state["num_blocks"] == m.at("glass_kv_blocks_total"));
    CHECK(state["blocks"].size() == m.at("glass_kv_blocks_total"));
    CHECK(state["steps"] == m.at("glass_engine_steps_total"));
    CHECK(state["live"].empty());
    for (const json& b : state["blocks"]) {  // idle: nobody holds a block
        CHECK(b["ref_count"] == 0);
        CHECK(b["owners"].empty());
    }
    REQUIRE(state["recent_steps"].size() <= 64);

    for (const auto& [reply, cached] : {std::pair<json, int>{first, 0}, std::pair<json, int>{second, expected_cached}}) {
        const json r = finished_named(state, reply["id"]);
        CAPTURE(r.dump());
        const int id = r["id"];
        CHECK(r["cached_tokens"] == cached);
        CHECK(r["generated_tokens"] == reply["usage"]["completion_tokens"]);
        // Its prefill chunks, in step order: contiguous from the first uncached position to the
        // prompt's end, none over the budget of 8; then one decode step per token after the first.
        int next = cached, decodes = 0;
        std::uint64_t last_step = 0;
        for (const json& s : state["recent_steps"]) {
            CHECK(s["step"].get<std::uint64_t>() > last_step);
            last_step = s["step"];
            for (const json& c : s["prefill"]) {
                if (c["id"] != id) continue;
                CHECK(c["start"] == next);
                CHECK(c["n"].get<int>() >= 1);
                CHECK(c["n"].get<int>() <= 8);
                next = c["start"].get<int>() + c["n"].get<int>();
            }
            for (const json& d : s["decode"]) decodes += d == id;
        }
        CHECK(next == n_prompt);
        CHECK(decodes == reply["usage"]["completion_tokens"].get<int>() - 1);
    }
}

TEST_CASE("metrics: a stream that hangs up is cancelled and its blocks come back; while it runs, the state shows "
          "its blocks and a shared prefix; a full queue is rejected" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({"-m", slow_model(), "--threads", "1", "--max-queue", "2", "--block-size", "16"});
    INFO("server log:\n" << server.log());
    const Metrics idle = get_metrics(server);
    REQUIRE(idle.at("glass_kv_blocks_used") == 0);

    // Two long streams with the same prompt of 40+ tokens: the second shares the first's full blocks.
    const std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.";
    const int n_prompt = static_cast<int>(test::shipped_tok().encode(prompt, true, false).size());
    const int shared_blocks = (n_prompt - 1) / 16;
    REQUIRE(shared_blocks >= 2);
    const json long_request = {{"prompt", prompt}, {"max_tokens", 400}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
    RawClient a(server.port(), "/v1/completions", long_request.dump());
    REQUIRE_MESSAGE(a.read_until("data: ", kHangGuard), "the first stream did not start");
    RawClient b(server.port(), "/v1/completions", long_request.dump());
    REQUIRE_MESSAGE(b.read_until("data: ", kHangGuard), "the second stream did not start");

    // While both run: each holds its blocks; the shared prefix blocks have ref count 2 and both owners.
    const json state = engine_state(server);
    REQUIRE(state["live"].size() == 2);
    std::set<int> ids;
    for (const json& r : state["live"]) {
        CHECK(r["status"] == "running");
        ids.insert(r["id"].get<int>());
        int held = 0;
        for (const json& blk : state["blocks"])
            for (const json& o : blk["owners"]) held += o == r["id"];
        CHECK(held == r["blocks"]);
        CHECK(held == (r["computed"].get<int>() + 15) / 16);  // ceil(positions with K/V / block size)
    }
    int shared = 0;
    for (const json& blk : state["blocks"]) {
        CHECK(blk["ref_count"] == blk["owners"].size());
        if (blk["ref_count"] == 2) {
            ++shared;
            CHECK(blk["cached"] == true);
            CHECK(std::set<int>(blk["owners"].begin(), blk["owners"].end()) == ids);
        }
    }
    CHECK(shared == shared_blocks);
    const Metrics busy = get_metrics(server);
    CHECK(busy.at("glass_requests_running") + busy.at("glass_requests_waiting") == 2);
    CHECK(busy.at("glass_kv_blocks_used") > 0);
    CHECK(busy.at("glass_kv_blocks_used") + busy.at("glass_kv_blocks_free") == busy.at("glass_kv_blocks_total"));

    // The queue (--max-queue 2) is full: a third request is refused and counted as rejected.
    CHECK(post(server, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}).status == 503);

    // Both hang up mid-stream: within a bounded poll their blocks are back and both count as cancelled.
    a.hang_up();
    b.hang_up();
    Metrics after;
    const bool back = eventually(
        [&] {
            after = get_metrics(server);
            return after.at("glass_kv_blocks_used") == idle.at("glass_kv_blocks_used") && after.at(requests_key("cancelled")) == 2;
        },
        kHangGuard);
    CHECK_MESSAGE(back, "blocks used " << after.at("glass_kv_blocks_used") << ", cancelled " << after.at(requests_key("cancelled")));
    CHECK(after.at(requests_key("rejected")) == 1);
    CHECK(after.at(requests_key("stop")) + after.at(requests_key("length")) == 0);
    CHECK(after.at("glass_requests_running") == 0);
    CHECK(after.at("glass_requests_waiting") == 0);
    CHECK(after.at("glass_kv_blocks_free") == after.at("glass_kv_blocks_total"));
    CHECK(after.at("glass_kv_blocks_cached") >= shared_blocks);  // the prompt's blocks stay findable
}

}  // namespace test_serve_metrics
