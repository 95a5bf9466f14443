// glass loadgen — a load generator for `glass serve` (or any OpenAI-compatible server) on this machine.
//
//   glass loadgen --url URL [--clients C] [--requests N] [--stream] [--json] [--prompt-len P]
//                 [--max-tokens M] [--temperature T] [--seed S] [--api-key KEY] [--chat] [--timeout SEC]
//
// C closed-loop clients (one thread each, one keep-alive connection each) share N requests: each
// client sends a request, waits for the whole answer, sends the next, until N have been sent.
//
//   requests   POST /v1/completions, the prompt as token ids: BOS (1), then P - 1 ids drawn from
//              [3, 259) by a generator seeded with S (request i always gets the same prompt).
//              Those are the 256 byte pieces of every llama2.c vocabulary, so the same prompts
//              work on the shipped model and on `glass serve --shape` (which has no text
//              vocabulary); speed depends on how many tokens, not which. "max_tokens": M,
//              "ignore_eos": true and temperature T (default 0, greedy): every request generates
//              exactly M tokens unless a stop string ends it. --chat sends POST
//              /v1/chat/completions instead, one user message of P random words (its reply ends
//              at the chat template's newline, so it may be shorter than M).
//   timing     latency: from sending the request to the last byte of the answer. With --stream
//              (server-sent events, "stream_options": {"include_usage": true}): TTFT = first event
//              that carries text; TPOT = (last text event - first text event) / (tokens - 1);
//              the largest gap between two text events. Without --stream the answer comes whole,
//              so TTFT and TPOT are unknown (null in the JSON). Tokens come from each answer's
//              "usage" (completion_tokens), as the server counted them.
//   wall time  from the first request sent to the last answer received; throughput = generated
//              tokens / wall time, requests/s = ok requests / wall time.
//
// --json adds one JSON object as the last line of stdout, with these fields:
//   url, clients, requests, stream, chat, prompt_len, max_tokens,
//   ok, errors, errors_by_status ({"401": 4, ...}; "connection" for no HTTP answer at all),
//   wall_s, generated_tokens, prompt_tokens, cached_tokens (usage's prompt_tokens_details),
//   throughput_tokens_per_s, requests_per_s,
//   ttft_ms_p50, ttft_ms_p99, tpot_ms_p50, tpot_ms_p99, max_gap_ms   (null without --stream),
//   latency_ms_p50, latency_ms_p99   (null when no request succeeded).
// Percentiles are nearest-rank over the successful requests (bench/measure/serve_measure.hpp's
// percentile, as serve-bench). Exit status 0 when every request succeeded, 1 when any failed (the report is
// printed either way), 2 for bad usage.
//
// Loopback only: the URL's host must be 127.0.0.1, localhost or [::1]. A load generator pointed
// at someone else's server is an attack, not a benchmark.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "glass/errors.hpp"
#include "serve_measure.hpp"  // percentile: the benchmarks' harness (bench/measure/)

// After glass's headers (see tools/cmd_serve.cpp).
#include <httplib.h>

namespace cli {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// http://HOST[:PORT][/] with HOST on this machine.
struct Target {
    std::string host;  // as httplib wants it: 127.0.0.1, localhost, ::1
    int port = 80;
};

Target parse_url(const std::string& url) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0)
        throw UsageError("--url must start with http:// (a server on this machine needs no TLS), got '" + url + "'");
    std::string rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (rest.find('/') != std::string::npos)
        throw UsageError("--url is the server's base URL, http://HOST:PORT, without a path; got '" + url + "'");
    Target t;
    std::string port_text;
    if (!rest.empty() && rest[0] == '[') {  // [::1]:8000
        const size_t close = rest.find(']');
        if (close == std::string::npos) throw UsageError("--url has an unclosed '[' in '" + url + "'");
        t.host = rest.substr(1, close - 1);
        if (close + 1 < rest.size()) {
            if (rest[close + 1] != ':') throw UsageError("--url: expected ':PORT' after ']' in '" + url + "'");
            port_text = rest.substr(close + 2);
        }
    } else {
        const size_t colon = rest.find(':');
        t.host = rest.substr(0, colon);
        if (colon != std::string::npos) port_text = rest.substr(colon + 1);
    }
    if (t.host != "127.0.0.1" && t.host != "localhost" && t.host != "::1")
        throw UsageError("glass loadgen only talks to this machine: the --url host must be 127.0.0.1, localhost or [::1], got '" +
                         t.host + "' in '" + url + "'");
    if (!port_text.empty()) {
        int port = 0;
        const auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 1 || port > 65535)
            throw UsageError("--url has a bad port '" + port_text + "' (1..65535) in '" + url + "'");
        t.port = port;
    }
    return t;
}

// What one request came to.
struct Outcome {
    int status = 0;             // HTTP status; 0: no HTTP answer (connection refused, timeout, ...)
    std::string error;          // why it failed ("" when it did not)
    int completion_tokens = 0;  // usage, as the server counted
    int prompt_tokens = 0;
    int cached_tokens = 0;
    double latency_ms = 0;
    std::optional<double> ttft_ms, tpot_ms;
    double max_gap_ms = 0;
};

// Everything a run needs to know, the same for every client.
struct Plan {
    Target target;
    std::string api_key;
    bool stream = false, chat = false;
    int max_tokens = 0;
    double temperature = 0;
    std::uint64_t seed = 0;
    int timeout_s = 0;
    std::vector<json> bodies;  // request i's body (without the stream fields)
};

// The N request bodies, from the seed alone.
std::vector<json> make_bodies(int n, int prompt_len, int max_tokens, double temperature, std::uint64_t seed, bool chat) {
    static const char* const kWords[] = {"once", "upon", "a",     "time", "there", "was",  "little", "girl", "named", "lily",
                                         "who",  "liked", "to",   "play", "in",    "the",  "park",   "with", "her",   "dog",
                                         "sun",  "big",   "happy", "tree", "ball",  "said", "mom",    "and",  "went",  "home"};
    std::mt19937_64 rng(seed);
    std::vector<json> bodies;
    for (int i = 0; i < n; ++i) {
        json body = {{"max_tokens", max_tokens}, {"temperature", temperature}, {"seed", seed + static_cast<std::uint64_t>(i)}};
        if (chat) {
            std::string text;
            for (int w = 0; w < prompt_len; ++w) {
                if (w > 0) text += ' ';
                text += kWords[std::uniform_int_distribution<size_t>(0, std::size(kWords) - 1)(rng)];
            }
            body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
        } else {
            std::vector<int> ids = {1};  // BOS
            std::uniform_int_distribution<int> byte_piece(3, 258);
            while (static_cast<int>(ids.size()) < prompt_len) ids.push_back(byte_piece(rng));
            body["prompt"] = ids;
            body["ignore_eos"] = true;
        }
        bodies.push_back(std::move(body));
    }
    return bodies;
}

// The error message of an OpenAI-shaped error body, or the body's start.
std::string error_message(int status, const std::string& body) {
    const json j = json::parse(body, nullptr, false);
    std::string what = body.substr(0, 200);
    if (!j.is_discarded() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
        j["error"]["message"].is_string())
        what = j["error"]["message"].get<std::string>();
    return "HTTP " + std::to_string(status) + ": " + what;
}

void read_usage(const json& usage, Outcome& o) {
    o.completion_tokens = usage.value("completion_tokens", 0);
    o.prompt_tokens = usage.value("prompt_tokens", 0);
    if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object())
        o.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", 0);
}

// A streamed answer's server-sent events, read as they arrive: "data: JSON\n\n" ... "data: [DONE]\n\n".
struct EventReader {
    bool chat = false;
    Outcome& o;
    std::string raw = "";  // the body as it arrives
    size_t parsed = 0;     // bytes of `raw` already split into events
    bool usage_seen = false, done_seen = false;
    std::optional<Clock::time_point> first_text = std::nullopt, last_text = std::nullopt;
    std::string stream_error = "";

    // Splits off every complete event that arrived.
    void read_events() {
        for (size_t end; (end = raw.find("\n\n", parsed)) != std::string::npos; parsed = end + 2) {
            const std::string event = raw.substr(parsed, end - parsed);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string data = event.substr(6);
            if (data == "[DONE]") done_seen = true;
            else read_chunk(data);
        }
    }

    // One chunk: an error, the usage, or text (whose arrival times TTFT and the gaps).
    void read_chunk(const std::string& data) {
        const json chunk = json::parse(data, nullptr, false);
        if (chunk.is_discarded()) return;
        if (chunk.contains("error")) stream_error = error_message(200, data);
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
            read_usage(chunk["usage"], o);
            usage_seen = true;
        }
        if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return;
        const json& c = chunk["choices"][0];
        const json text = chat ? (c.contains("delta") ? c["delta"].value("content", json("")) : json("")) : c.value("text", json(""));
        if (!text.is_string() || text.get<std::string>().empty()) return;
        const Clock::time_point now = Clock::now();
        if (!first_text) first_text = now;
        else o.max_gap_ms = std::max(o.max_gap_ms, ms_since(*last_text, now));
        last_text = now;
    }

    // After the last byte: whether the stream was whole, and TTFT, TPOT from the text's times.
    void finish(Clock::time_point sent) {
        if (!stream_error.empty()) o.error = stream_error;
        else if (!done_seen) o.error = "the stream ended without data: [DONE]";
        else if (!usage_seen) o.error = "the stream carried no usage chunk (stream_options.include_usage)";
        if (first_text) {
            o.ttft_ms = ms_since(sent, *first_text);
            if (o.completion_tokens >= 2) o.tpot_ms = ms_since(*first_text, *last_text) / (o.completion_tokens - 1);
        }
    }
};

// Request i's POST, streamed when the plan says so.
httplib::Request completion_request(const Plan& plan, const json& body_in) {
    json body = body_in;
    if (plan.stream) {
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
    }
    httplib::Request req;
    req.method = "POST";
    req.path = plan.chat ? "/v1/chat/completions" : "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    if (!plan.api_key.empty()) req.set_header("Authorization", "Bearer " + plan.api_key);
    return req;
}

// One request, start to end, on this client's connection.
Outcome send_one(httplib::Client& client, const Plan& plan, const json& body) {
    httplib::Request req = completion_request(plan, body);
    Outcome o;
    EventReader reader{.chat = plan.chat, .o = o};
    const Clock::time_point sent = Clock::now();
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        reader.raw.append(data, n);
        if (plan.stream) reader.read_events();
        return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool answered = client.send(req, res, err);
    o.latency_ms = ms_since(sent, Clock::now());
    if (!answered) {
        o.error = "no HTTP answer: " + httplib::to_string(err);
        return o;
    }
    o.status = res.status;
    if (res.status != 200) {
        o.error = error_message(res.status, reader.raw);
    } else if (plan.stream) {
        reader.finish(sent);
    } else {  // the answer whole: its usage
        const json j = json::parse(reader.raw, nullptr, false);
        if (j.is_discarded() || !j.contains("usage")) o.error = "HTTP 200 but not a completion: " + reader.raw.substr(0, 200);
        else read_usage(j["usage"], o);
    }
    return o;
}

std::optional<double> p(const std::vector<double>& v, double q) {
    if (v.empty()) return std::nullopt;
    return serve_measure::percentile(v, q);
}

json or_null(const std::optional<double>& x) { return x ? json(*x) : json(nullptr); }

std::string shown_ms(const std::optional<double>& x, int decimals) {
    if (!x) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, *x);
    return buf;
}

// ---- The run: flags, a probe, the clients, the report ------------------------------------------

// The flags that shape the run besides the plan.
struct RunSize {
    std::string url;
    int clients = 1;
    int requests = 8;
    int prompt_len = 32;
};

Plan plan_from_flags(const Flags& flags, RunSize& size) {
    if (!flags.has("--url")) throw UsageError("glass loadgen needs --url http://127.0.0.1:PORT (the server's base URL)");
    size.url = flags.get("--url", "");
    Plan plan;
    plan.target = parse_url(size.url);
    size.clients = flags.number<int>("--clients").value_or(1);
    size.requests = flags.number<int>("--requests").value_or(8);
    size.prompt_len = flags.number<int>("--prompt-len").value_or(32);
    plan.max_tokens = flags.number<int>("--max-tokens").value_or(32);
    plan.temperature = flags.number<double>("--temperature").value_or(0.0);
    plan.seed = flags.number<std::uint64_t>("--seed").value_or(1);
    plan.timeout_s = flags.number<int>("--timeout").value_or(300);
    plan.stream = flags.has("--stream");
    plan.chat = flags.has("--chat");
    plan.api_key = flags.get("--api-key", "");
    if (size.clients < 1 || size.clients > 1024) throw UsageError("--clients must be in [1, 1024], got " + flags.get("--clients", ""));
    if (size.requests < 1 || size.requests > 1000000)
        throw UsageError("--requests must be in [1, 1000000], got " + flags.get("--requests", ""));
    if (size.prompt_len < 1 || size.prompt_len > 1000000)
        throw UsageError("--prompt-len must be in [1, 1000000], got " + flags.get("--prompt-len", ""));
    if (plan.max_tokens < 1 || plan.max_tokens > 1000000)
        throw UsageError("--max-tokens must be in [1, 1000000], got " + flags.get("--max-tokens", ""));
    if (!(plan.temperature >= 0 && plan.temperature <= 2))
        throw UsageError("--temperature must be in [0, 2], got " + flags.get("--temperature", ""));
    if (plan.timeout_s < 1 || plan.timeout_s > 3600) throw UsageError("--timeout must be in [1, 3600] seconds, got " + flags.get("--timeout", ""));
    plan.bodies = make_bodies(size.requests, size.prompt_len, plan.max_tokens, plan.temperature, plan.seed, plan.chat);
    return plan;
}

// Is anyone there? One GET /health first, so that a wrong port is one clear error, not N.
void probe(const Plan& plan, const std::string& url) {
    httplib::Client probe(plan.target.host, plan.target.port);
    probe.set_connection_timeout(5, 0);
    probe.set_read_timeout(10, 0);
    const httplib::Result r = probe.Get("/health");
    if (!r) glass::fail("no server answers at ", url, " (", httplib::to_string(r.error()), ")");
}

// The clients: each takes the next request number until all N are taken. Returns the wall time.
double run_clients(const Plan& plan, int clients, std::vector<Outcome>& outcomes) {
    const int requests = static_cast<int>(outcomes.size());
    std::atomic<int> next{0};
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&] {
            httplib::Client client(plan.target.host, plan.target.port);
            client.set_keep_alive(true);
            client.set_tcp_nodelay(true);  // small requests go out at once (no Nagle delay)
            client.set_connection_timeout(10, 0);
            client.set_read_timeout(plan.timeout_s, 0);
            client.set_write_timeout(plan.timeout_s, 0);
            for (int i; (i = next++) < requests;) outcomes[static_cast<size_t>(i)] = send_one(client, plan, plan.bodies[static_cast<size_t>(i)]);
        });
    }
    for (std::thread& t : threads) t.join();
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The outcomes added up.
struct Report {
    int ok = 0, errors = 0;
    long long generated = 0, prompt_tokens = 0, cached = 0;
    std::map<std::string, int> errors_by_status;  // "401", ...; "connection" for no HTTP answer
    std::string first_error;
    std::vector<double> ttft, tpot, latency;
    std::optional<double> max_gap;  // with --stream and some success only
    double wall_s = 0, tokens_per_s = 0, requests_per_s = 0;
};

Report tally(const std::vector<Outcome>& outcomes, double wall_s, bool stream) {
    Report r;
    double max_gap = 0;
    for (const Outcome& o : outcomes) {
        if (!o.error.empty()) {
            ++r.errors_by_status[o.status == 0 ? "connection" : std::to_string(o.status)];
            if (r.first_error.empty()) r.first_error = o.error;
            continue;
        }
        ++r.ok;
        r.generated += o.completion_tokens;
        r.prompt_tokens += o.prompt_tokens;
        r.cached += o.cached_tokens;
        r.latency.push_back(o.latency_ms);
        if (o.ttft_ms) r.ttft.push_back(*o.ttft_ms);
        if (o.tpot_ms) r.tpot.push_back(*o.tpot_ms);
        max_gap = std::max(max_gap, o.max_gap_ms);
    }
    r.errors = static_cast<int>(outcomes.size()) - r.ok;
    r.wall_s = wall_s;
    r.tokens_per_s = wall_s > 0 ? static_cast<double>(r.generated) / wall_s : 0;
    r.requests_per_s = wall_s > 0 ? r.ok / wall_s : 0;
    if (stream && r.ok > 0) r.max_gap = max_gap;
    return r;
}

void print_report(const Report& r, bool stream) {
    std::string by_status;
    for (const auto& [status, n] : r.errors_by_status) by_status += (by_status.empty() ? " (" : ", ") + status + ": " + std::to_string(n);
    if (!by_status.empty()) by_status += ")";
    std::printf("requests: %d ok, %d errors%s\n", r.ok, r.errors, by_status.c_str());
    if (!r.first_error.empty()) std::printf("first error: %s\n", r.first_error.c_str());
    std::printf("wall: %.2f s | %.1f generated tokens/s | %.2f requests/s | tokens: %lld generated, %lld prompt (%lld cached)\n",
                r.wall_s, r.tokens_per_s, r.requests_per_s, r.generated, r.prompt_tokens, r.cached);
    if (stream) {
        std::printf("TTFT ms: p50 %s p99 %s | TPOT ms: p50 %s p99 %s | largest gap %s ms\n", shown_ms(p(r.ttft, 0.5), 1).c_str(),
                    shown_ms(p(r.ttft, 0.99), 1).c_str(), shown_ms(p(r.tpot, 0.5), 2).c_str(), shown_ms(p(r.tpot, 0.99), 2).c_str(),
                    shown_ms(r.max_gap, 1).c_str());
    } else {
        std::printf("TTFT, TPOT: unknown without --stream (a plain response arrives whole)\n");
    }
    std::printf("latency ms: p50 %s p99 %s\n", shown_ms(p(r.latency, 0.5), 1).c_str(), shown_ms(p(r.latency, 0.99), 1).c_str());
}

// --json's object (the fields listed at the top of this file).
json report_json(const Report& r, const RunSize& size, const Plan& plan) {
    return {{"url", size.url},
            {"clients", size.clients},
            {"requests", size.requests},
            {"stream", plan.stream},
            {"chat", plan.chat},
            {"prompt_len", size.prompt_len},
            {"max_tokens", plan.max_tokens},
            {"ok", r.ok},
            {"errors", r.errors},
            {"errors_by_status", r.errors_by_status},
            {"wall_s", r.wall_s},
            {"generated_tokens", r.generated},
            {"prompt_tokens", r.prompt_tokens},
            {"cached_tokens", r.cached},
            {"throughput_tokens_per_s", r.tokens_per_s},
            {"requests_per_s", r.requests_per_s},
            {"ttft_ms_p50", or_null(p(r.ttft, 0.5))},
            {"ttft_ms_p99", or_null(p(r.ttft, 0.99))},
            {"tpot_ms_p50", or_null(p(r.tpot, 0.5))},
            {"tpot_ms_p99", or_null(p(r.tpot, 0.99))},
            {"max_gap_ms", or_null(r.max_gap)},
            {"latency_ms_p50", or_null(p(r.latency, 0.5))},
            {"latency_ms_p99", or_null(p(r.latency, 0.99))}};
}

}  // namespace

int cmd_loadgen(int argc, char** argv) {
    Flags flags("loadgen", {{"--url", true}, {"--clients", true}, {"--requests", true}, {"--stream", false}, {"--json", false},
                            {"--prompt-len", true}, {"--max-tokens", true}, {"--temperature", true}, {"--seed", true},
                            {"--api-key", true}, {"--chat", false}, {"--timeout", true}});
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    RunSize size;
    const Plan plan = plan_from_flags(flags, size);
    probe(plan, size.url);
    std::printf("loadgen: %d requests, %d clients, %s%s, %s of %d %s, max_tokens %d, temperature %g -> %s\n", size.requests,
                size.clients, plan.stream ? "streaming" : "not streaming", plan.chat ? ", chat" : "",
                plan.chat ? "messages" : "prompts", size.prompt_len, plan.chat ? "words" : "token ids", plan.max_tokens,
                plan.temperature, size.url.c_str());
    std::fflush(stdout);

    std::vector<Outcome> outcomes(static_cast<size_t>(size.requests));
    const double wall_s = run_clients(plan, size.clients, outcomes);
    const Report report = tally(outcomes, wall_s, plan.stream);
    print_report(report, plan.stream);
    if (flags.has("--json")) std::printf("%s\n", dump(report_json(report, size, plan)).c_str());
    return report.errors == 0 ? 0 : 1;
}

}  // namespace cli
