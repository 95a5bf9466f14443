// glass serve over real HTTP: the server runs as a child process on loopback (`--port 0`; it
// prints "listening on http://127.0.0.1:PORT") and curl talks to it, every call with --max-time;
// the server is killed at the end of each case whatever happens. Expected values never come from
// the server: text and token counts from `glass generate` with the same prompt and settings, token
// ids from the tokenizer called here, limits from the model file. Skipped (doctest's skip) where
// curl is missing.
//
// Two models: the shipped stories260K (real text, so it can be compared with generate), and a
// random-weight model with stories260K's vocabulary but 8 layers of width 384 (written here), slow
// enough (a few ms per token) that a request is surely still running while the test disconnects,
// fills the queue or sends SIGTERM.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "glass/glass.hpp"
#include "test_support.hpp"

extern char** environ;

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

const bool kNoCurl = std::system("command -v curl >/dev/null 2>&1") != 0;  // before the cases register

std::string glass_bin() { return test::bin_dir() + "/glass"; }

// One directory for this process's files, removed at exit.
const std::string& work_dir() {
    static const struct Dir {
        std::string path = test::temp_dir("serve_http");
        ~Dir() { std::filesystem::remove_all(path); }
    } dir;
    return dir.path;
}

std::string new_path(const std::string& tag) {
    static int counter = 0;
    return work_dir() + "/" + tag + std::to_string(counter++);
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

std::string read_if_exists(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Starts a program (PATH lookup) with stdout to `stdout_fd` (-1: inherited), stderr to a file.
pid_t spawn(const std::vector<std::string>& args, int stdout_fd, const std::string& stderr_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "cannot start " << args[0]);
    return pid;
}

// The child's exit status once it exits (128 + signal if killed), or nullopt after `timeout`.
std::optional<int> wait_exit(pid_t pid, Ms timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (Clock::now() > deadline) return std::nullopt;
        std::this_thread::sleep_for(Ms(5));
    }
}

// Polls until `ready()` or `timeout`; returns ready().
template <typename F>
bool eventually(F ready, Ms timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (!ready()) {
        if (Clock::now() > deadline) return ready();
        std::this_thread::sleep_for(Ms(5));
    }
    return true;
}

// `glass serve --port 0 FLAGS` as a child process; killed when this goes out of scope.
class ServerProcess {
public:
    explicit ServerProcess(const std::vector<std::string>& flags) : log_path_(new_path("server") + ".log") {
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);  // the server gets its end as stdout; no other child inherits either
        std::vector<std::string> args = {glass_bin(), "serve", "--port", "0"};
        args.insert(args.end(), flags.begin(), flags.end());
        pid_ = spawn(args, fds[1], log_path_);
        ::close(fds[1]);
        stdout_ = fds[0];
        // Its first line on stdout names the port; 20 s at most.
        std::string line;
        const Clock::time_point deadline = Clock::now() + Ms(20000);
        while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
            pollfd p{stdout_, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char buf[256];
            const ssize_t n = ::read(stdout_, buf, sizeof buf);
            if (n <= 0) break;
            line.append(buf, static_cast<size_t>(n));
        }
        const std::string prefix = "listening on http://127.0.0.1:";
        if (line.rfind(prefix, 0) != 0 || line.find('\n') == std::string::npos) {
            kill_now();
            FAIL("glass serve did not start: stdout '" << line << "', stderr:\n" << log());
        }
        port_ = std::stoi(line.substr(prefix.size()));
    }
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;
    ~ServerProcess() {
        kill_now();
        ::close(stdout_);
    }

    int port() const { return port_; }
    std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
    std::string log() const { return read_if_exists(log_path_); }
    void signal(int sig) const { ::kill(pid_, sig); }
    /// Its exit status once it exits within `timeout` (then it is reaped), else nullopt.
    std::optional<int> wait(Ms timeout) {
        const std::optional<int> status = wait_exit(pid_, timeout);
        if (status) exited_ = true;
        return status;
    }

private:
    void kill_now() {
        if (exited_ || pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        exited_ = true;
    }

    std::string log_path_;
    pid_t pid_ = -1;
    int stdout_ = -1;
    int port_ = 0;
    bool exited_ = false;
};

struct Reply {
    int status = 0;       // 0: no HTTP answer (see curl_exit)
    int curl_exit = 0;
    std::string headers;
    std::string body;
    json json_body() const {
        json j = json::parse(body, nullptr, false);
        INFO("body: " << body);
        REQUIRE_FALSE(j.is_discarded());
        return j;
    }
};

// One request with curl. `body`: sent as JSON with POST; none: GET.
Reply http(const std::string& url, const std::optional<std::string>& body = std::nullopt,
           const std::vector<std::string>& extra = {}) {
    const std::string base = new_path("req");
    std::string cmd = "curl -sS -N --max-time 20 -D " + test::sh(base + ".h") + " -o " + test::sh(base + ".b") + " -w '%{http_code}'";
    if (body) {
        write_file(base + ".in", *body);
        cmd += " -H 'Content-Type: application/json' --data-binary @";
        cmd += test::sh(base + ".in");
    }
    for (const std::string& a : extra) {
        cmd += ' ';
        cmd += test::sh(a);
    }
    cmd += ' ';
    cmd += test::sh(url);
    const test::Run r = test::run(cmd);
    Reply reply;
    reply.curl_exit = r.exit_code;
    reply.status = std::atoi(r.out.c_str());
    reply.headers = read_if_exists(base + ".h");
    reply.body = read_if_exists(base + ".b");
    return reply;
}
Reply post(const ServerProcess& s, const std::string& path, const json& body, const std::vector<std::string>& extra = {}) {
    return http(s.url(path), body.dump(), extra);
}

// A server-sent event stream, checked frame by frame: every event is exactly "data: X\n\n",
// X is JSON until the last one, "[DONE]", after which nothing follows.
struct Sse {
    std::vector<json> chunks;
    std::string text;     // the concatenated text / delta.content
    bool done = false;
    std::string problem;  // the first framing error, "" if none
};
Sse parse_sse(const std::string& raw, bool chat) {
    Sse s;
    size_t pos = 0;
    while (pos < raw.size() && s.problem.empty()) {
        const size_t end = raw.find("\n\n", pos);
        if (end == std::string::npos) {
            s.problem = "an event without its blank line: " + raw.substr(pos, 80);
            break;
        }
        const std::string event = raw.substr(pos, end - pos);
        pos = end + 2;
        if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
            s.problem = "not one 'data: ' line: " + event.substr(0, 80);
            break;
        }
        const std::string data = event.substr(6);
        if (data == "[DONE]") {
            s.done = true;
            if (pos != raw.size()) s.problem = "bytes after [DONE]: " + raw.substr(pos, 80);
            break;
        }
        json j = json::parse(data, nullptr, false);
        if (j.is_discarded()) {
            s.problem = "not JSON: " + data.substr(0, 80);
            break;
        }
        if (j.contains("choices") && !j["choices"].empty()) {
            const json& c = j["choices"][0];
            if (chat) s.text += c["delta"].value("content", std::string());
            else s.text += c["text"].get<std::string>();
        }
        s.chunks.push_back(std::move(j));
    }
    if (!s.done && s.problem.empty()) s.problem = "no [DONE] at the end";
    return s;
}

// `glass generate ... --json`: its JSON record (the last line of stdout).
json generate(const std::string& prompt, const std::string& flags) {
    const test::Run r = test::run(glass_bin() + " generate -p " + test::sh(prompt) + " " + flags + " --json");
    INFO("glass generate " << flags << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 0);
    const size_t end = r.out.find_last_not_of('\n');
    const size_t start = r.out.rfind('\n', end);
    return json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1));
}

// OpenAI's finish_reason for generate's stop_reason.
std::string finish_of(const json& generated) {
    const std::string r = generated["stop_reason"];
    return r == "length" || r == "context_full" ? "length" : "stop";
}

// The shipped model's context window, read from the file (not from the server).
int shipped_context() { return test::shipped().config.seq_len; }

// A random-weight model with tok512's vocabulary, slow enough to watch (written once).
const std::string& slow_model() {
    static const std::string path = [] {
        glass::ModelConfig c;
        c.dim = 384;
        c.hidden_dim = 1024;
        c.n_layers = 8;
        c.n_heads = 6;
        c.n_kv_heads = 6;
        c.vocab_size = 512;
        c.seq_len = 512;
        const std::string p = work_dir() + "/slow_model.bin";
        glass::fast::write_random_checkpoint(c, p, 7);
        return p;
    }();
    return path;
}

// A client that sends one request by hand and can hang up at any moment (curl cannot be told to).
class RawClient {
public:
    RawClient(int port, const std::string& path, const std::string& body) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not inherited by curl: hanging up must close it
        REQUIRE(fd_ >= 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
        const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        REQUIRE(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    }
    ~RawClient() { hang_up(); }
    // Reads until what came contains `needle`, `timeout` at most.
    bool read_until(const std::string& needle, Ms timeout) {
        const Clock::time_point deadline = Clock::now() + timeout;
        while (received_.find(needle) == std::string::npos && Clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            char buf[4096];
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) break;
            received_.append(buf, static_cast<size_t>(n));
        }
        return received_.find(needle) != std::string::npos;
    }
    void hang_up() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    std::string received_;
};

// The server's log line (stderr) for one response id ("cmpl-3"), or "" if none yet.
std::string log_line_of(const std::string& log, const std::string& id) {
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
        if (line.find("glass serve: " + id + " ") == 0) return line;
    return "";
}

// "KV blocks free F/T" in a log line -> {F, T}.
std::pair<int, int> free_blocks_in(const std::string& line) {
    const size_t at = line.find("KV blocks free ");
    REQUIRE_MESSAGE(at != std::string::npos, "no 'KV blocks free' in: " << line);
    int f = -1, t = -1;
    REQUIRE(std::sscanf(line.c_str() + at, "KV blocks free %d/%d", &f, &t) == 2);
    return {f, t};
}

}  // namespace

TEST_CASE("serve: completions equal glass generate, greedy and seeded; a stream's deltas are the same text" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({});
    // /health and /v1/models: the model's name is the file's, its context the file's.
    CHECK(http(server.url("/health")).json_body() == json{{"status", "ok"}});
    const json models = http(server.url("/v1/models")).json_body();
    CHECK(models["object"] == "list");
    REQUIRE(models["data"].size() == 1);
    CHECK(models["data"][0]["id"] == "stories260K");
    CHECK(models["data"][0]["max_model_len"] == shipped_context());

    struct Case {
        std::string prompt;
        json params;             // for the server
        std::string cli_flags;   // the same settings for glass generate
    };
    const std::vector<Case> cases = {
        {"Once upon a time", {{"temperature", 0}, {"max_tokens", 40}}, "--temperature 0 --max-new-tokens 40"},
        {"Lily and Ben went to the park", {{"temperature", 0}, {"max_tokens", 120}}, "--temperature 0 --max-new-tokens 120"},
        {"Once upon a time", {{"temperature", 1.0}, {"top_p", 0.9}, {"seed", 42}, {"max_tokens", 80}},
         "--temperature 1 --top-p 0.9 --seed 42 --max-new-tokens 80"},
        {"The little dog", {{"temperature", 0.8}, {"top_k", 40}, {"min_p", 0.05}, {"seed", 7}, {"max_tokens", 60}},
         "--temperature 0.8 --top-p 1 --top-k 40 --min-p 0.05 --seed 7 --max-new-tokens 60"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.prompt);
        CAPTURE(c.cli_flags);
        const json expected = generate(c.prompt, c.cli_flags);
        json body = c.params;
        body["model"] = "stories260K";
        body["prompt"] = c.prompt;
        const Reply plain = post(server, "/v1/completions", body);
        REQUIRE(plain.status == 200);
        const json r = plain.json_body();
        CHECK(r["object"] == "text_completion");
        CHECK(r["model"] == "stories260K");
        CHECK(r["id"].get<std::string>().rfind("cmpl-", 0) == 0);
        REQUIRE(r["choices"].size() == 1);
        CHECK(r["choices"][0]["index"] == 0);
        CHECK(r["choices"][0]["text"] == expected["text"]);
        CHECK(r["choices"][0]["finish_reason"] == finish_of(expected));
        CHECK(r["usage"]["prompt_tokens"] == expected["prompt_tokens"]);
        CHECK(r["usage"]["completion_tokens"] == expected["generated_ids"].size());
        CHECK(r["usage"]["total_tokens"] == expected["prompt_tokens"].get<int>() + static_cast<int>(expected["generated_ids"].size()));

        // The same request streamed (curl -N: the raw bytes on the wire).
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
        const Reply streamed = post(server, "/v1/completions", body);
        REQUIRE(streamed.status == 200);
        CHECK(streamed.headers.find("Content-Type: text/event-stream") != std::string::npos);
        const Sse sse = parse_sse(streamed.body, /*chat=*/false);
        INFO("stream: " << streamed.body.substr(0, 400));
        CHECK(sse.problem == "");
        CHECK(sse.text == expected["text"]);
        REQUIRE(sse.chunks.size() >= 2);
        // All chunks but the last two have text and no finish_reason; then the finish_reason;
        // then the usage, with no choices.
        for (size_t i = 0; i + 2 < sse.chunks.size(); ++i) {
            CHECK(sse.chunks[i]["choices"][0]["finish_reason"].is_null());
            CHECK(sse.chunks[i]["usage"].is_null());
        }
        const json& last = sse.chunks[sse.chunks.size() - 2];
        CHECK(last["choices"][0]["finish_reason"] == finish_of(expected));
        const json& usage = sse.chunks.back();
        CHECK(usage["choices"].empty());
        CHECK(usage["usage"]["prompt_tokens"] == expected["prompt_tokens"]);
        CHECK(usage["usage"]["completion_tokens"] == expected["generated_ids"].size());
        for (const json& chunk : sse.chunks) CHECK(chunk["id"] == sse.chunks[0]["id"]);
    }

    // Without include_usage: no usage chunk, the last chunk before [DONE] has the finish_reason.
    const Reply streamed = post(server, "/v1/completions",
                                {{"prompt", "Once upon a time"}, {"temperature", 0}, {"max_tokens", 10}, {"stream", true}});
    const Sse sse = parse_sse(streamed.body, false);
    CHECK(sse.problem == "");
    REQUIRE(!sse.chunks.empty());
    CHECK(sse.chunks.back()["choices"][0]["finish_reason"] == "length");
    for (const json& chunk : sse.chunks) CHECK_FALSE(chunk.contains("usage"));
}

TEST_CASE("serve: a greedy request equals glass generate while 8 other streams run at once" * doctest::skip(kNoCurl)) {
    ServerProcess server({});
    const std::string url = server.url("/v1/completions");
    // 8 long sampled streams (ignore_eos: each runs its full 480 tokens), each to its own file.
    std::vector<pid_t> curls;
    std::vector<std::string> outputs;
    std::vector<json> bodies;
    for (int i = 0; i < 8; ++i) {
        const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"temperature", 1.0}, {"seed", 100 + i},
                           {"ignore_eos", true}, {"stream", true}};
        const std::string base = new_path("stream");
        write_file(base + ".in", body.dump());
        outputs.push_back(base + ".out");
        bodies.push_back(body);
        curls.push_back(spawn({"curl", "-sS", "-N", "--max-time", "30", "-H", "Content-Type: application/json",
                               "--data-binary", "@" + base + ".in", "-o", base + ".out", url},
                              -1, base + ".err"));
    }
    // The greedy request goes as soon as one stream runs; when it is answered, the streams that
    // have started and not ended ran beside it (the precondition of the check).
    const auto started = [](const std::string& out) { return read_if_exists(out).find("data: ") != std::string::npos; };
    const auto any_started = [&] { return std::any_of(outputs.begin(), outputs.end(), started); };
    REQUIRE_MESSAGE(eventually(any_started, Ms(15000)), "no stream started");
    const std::string prompt = "Once upon a time, there was a big red ball";
    const Reply reply = post(server, "/v1/completions", {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 60}});
    int beside = 0;
    for (const std::string& o : outputs) beside += started(o) && read_if_exists(o).find("[DONE]") == std::string::npos;
    CHECK_MESSAGE(beside > 0, "no stream ran beside the greedy request: nothing was batched with it");

    REQUIRE(reply.status == 200);
    const json expected = generate(prompt, "--temperature 0 --max-new-tokens 60");
    CHECK(reply.json_body()["choices"][0]["text"] == expected["text"]);

    for (size_t i = 0; i < curls.size(); ++i) {
        CAPTURE(i);
        CHECK(wait_exit(curls[i], Ms(30000)) == std::optional<int>(0));
        const Sse sse = parse_sse(read_if_exists(outputs[i]), false);
        CHECK(sse.problem == "");
        // Each stream's text is its own: the same request alone gives it again (its own seed).
        json alone = bodies[i];
        alone.erase("stream");
        const Reply r = post(server, "/v1/completions", alone);
        REQUIRE(r.status == 200);
        CHECK(r.json_body()["choices"][0]["text"] == sse.text);
        CHECK(r.json_body()["usage"]["completion_tokens"] == 480);
    }
}

TEST_CASE("serve: chat renders the documented template, stops at the newline, and turn 2 hits the prefix cache" *
          doctest::skip(kNoCurl)) {
    const std::string system = "You are a storyteller who tells short stories about animals in the forest.";
    const std::string user1 = "Tell me a story about a cat.", user2 = "What did the cat do next?";
    // The template, written out here from the header's description.
    const std::string prompt1 = system + "\n" + "User: " + user1 + "\n" + "Assistant:";
    const std::string chat_flags = "--temperature 0 --max-new-tokens 60 --stop " + test::sh("\n");  // the end of turn
    const json expected1 = generate(prompt1, chat_flags);
    const std::string reply1 = expected1["text"];
    const std::string prompt2 = prompt1 + reply1 + "\n" + "User: " + user2 + "\n" + "Assistant:";
    const json expected2 = generate(prompt2, chat_flags);

    const json turn1 = {{"model", "stories260K"}, {"temperature", 0}, {"max_tokens", 60},
                        {"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user1}}}}};
    json turn2 = turn1;
    turn2["messages"].push_back({{"role", "assistant"}, {"content", reply1}});
    turn2["messages"].push_back({{"role", "user"}, {"content", user2}});

    // What the prefix cache must supply on turn 2, from the token ids: every full 16-token block
    // of the common prefix of the two prompts (turn 1 computed all of its prompt), but never the
    // block holding turn 2's last token.
    const std::vector<int> ids1 = test::shipped_tok().encode(prompt1, true, false);
    const std::vector<int> ids2 = test::shipped_tok().encode(prompt2, true, false);
    size_t common = 0;
    while (common < ids1.size() && common < ids2.size() && ids1[common] == ids2[common]) ++common;
    const int at_least = static_cast<int>(std::min(common, ids2.size() - 1) / 16 * 16);
    const int at_most = static_cast<int>((ids2.size() - 1) / 16 * 16);
    REQUIRE(at_least >= 16);  // the case is long enough to show a hit

    SUBCASE("prefix cache on") {
        ServerProcess server({"--block-size", "16"});
        const json r1 = post(server, "/v1/chat/completions", turn1).json_body();
        CHECK(r1["object"] == "chat.completion");
        CHECK(r1["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
        CHECK(r1["choices"][0]["message"]["role"] == "assistant");
        CHECK(r1["choices"][0]["message"]["content"] == reply1);
        CHECK(r1["choices"][0]["finish_reason"] == finish_of(expected1));
        CHECK(r1["usage"]["prompt_tokens"] == ids1.size());
        CHECK(r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);  // a fresh server

        const json r2 = post(server, "/v1/chat/completions", turn2).json_body();
        CHECK(r2["choices"][0]["message"]["content"] == expected2["text"]);
        CHECK(r2["usage"]["prompt_tokens"] == ids2.size());
        const int cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"];
        CHECK(cached >= at_least);
        CHECK(cached <= at_most);
        CHECK(cached % 16 == 0);

        // Streamed: a role chunk first, then content deltas equal to the whole reply, an empty
        // delta with the finish_reason, [DONE].
        json streamed = turn2;
        streamed["stream"] = true;
        const Reply s = post(server, "/v1/chat/completions", streamed);
        const Sse sse = parse_sse(s.body, /*chat=*/true);
        CHECK(sse.problem == "");
        CHECK(sse.text == expected2["text"]);
        REQUIRE(sse.chunks.size() >= 2);
        CHECK(sse.chunks.front()["object"] == "chat.completion.chunk");
        CHECK(sse.chunks.front()["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
        CHECK(sse.chunks.back()["choices"][0]["delta"] == json::object());
        CHECK(sse.chunks.back()["choices"][0]["finish_reason"] == finish_of(expected2));
    }
    SUBCASE("--no-prefix-cache: nothing cached, the same text") {
        ServerProcess server({"--no-prefix-cache"});
        CHECK(post(server, "/v1/chat/completions", turn1).json_body()["choices"][0]["message"]["content"] == reply1);
        const json r2 = post(server, "/v1/chat/completions", turn2).json_body();
        CHECK(r2["choices"][0]["message"]["content"] == expected2["text"]);
        CHECK(r2["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    }
}

TEST_CASE("serve: stop strings end the text before them, as glass generate's --stop" * doctest::skip(kNoCurl)) {
    ServerProcess server({});
    const std::string prompt = "Once upon a time";
    struct Case {
        json stop;
        std::string cli_flags;
    };
    for (const Case& c : std::vector<Case>{{"Lily", "--stop Lily"}, {json::array({"park", "Lily"}), "--stop park --stop Lily"}}) {
        CAPTURE(c.stop.dump());
        const json expected = generate(prompt, "--temperature 0 --max-new-tokens 100 " + c.cli_flags);
        REQUIRE(expected["stop_reason"] == "stop_string");  // the prompt leads to a stop string
        const json body = {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 100}, {"stop", c.stop}};
        const json r = post(server, "/v1/completions", body).json_body();
        CHECK(r["choices"][0]["text"] == expected["text"]);
        CHECK(r["choices"][0]["finish_reason"] == "stop");
        json streamed = body;
        streamed["stream"] = true;
        const Sse sse = parse_sse(post(server, "/v1/completions", streamed).body, false);
        CHECK(sse.problem == "");
        CHECK(sse.text == expected["text"]);
    }
}

TEST_CASE("serve: errors are OpenAI-shaped with the right status and name the offending value" * doctest::skip(kNoCurl)) {
    ServerProcess server({});
    const int context = shipped_context();
    std::string long_prompt;
    for (int i = 0; i < 150; ++i) long_prompt += "Once upon a time ";
    const size_t long_tokens = test::shipped_tok().encode(long_prompt, true, false).size();
    REQUIRE(long_tokens > static_cast<size_t>(context));

    struct Bad {
        std::string route;
        std::string body;
        int status;
        std::string param;  // "" = null
        std::vector<std::string> message_has;
    };
    const std::vector<Bad> cases = {
        {"/v1/completions", "{\"prompt\": \"x\",", 400, "", {"not valid JSON"}},
        {"/v1/completions", "[1, 2]", 400, "", {"JSON object"}},
        {"/v1/completions", R"({"prompt": "x", "frobnicate": 1})", 400, "frobnicate", {"'frobnicate'"}},
        {"/v1/completions", R"({"prompt": "x", "temperature": 3.5})", 400, "temperature", {"temperature", "3.5", "[0, 2]"}},
        {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p", {"top_p", "(0, 1]", "got 0"}},
        {"/v1/completions", R"({"prompt": "x", "top_k": -1})", 400, "top_k", {"top_k", "-1"}},
        {"/v1/completions", R"({"prompt": "x", "min_p": 1.5})", 400, "min_p", {"min_p", "1.5"}},
        {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens", {"max_tokens", "\"ten\""}},
        {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens", {"max_tokens", "got 0"}},
        {"/v1/completions", R"({"prompt": "x", "max_tokens": 600})", 400, "max_tokens", {"600", std::to_string(context)}},
        {"/v1/completions", R"({"prompt": "x", "n": 2})", 400, "n", {"n must be 1", "got 2"}},
        {"/v1/completions", R"({"prompt": "x", "seed": 1.5})", 400, "seed", {"seed", "1.5"}},
        {"/v1/completions", R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", {"stop", "1 to 4"}},
        {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream", {"stream", "\"yes\""}},
        {"/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options",
         {"stream_options", "stream"}},
        {"/v1/completions", R"({"prompt": [1, 2, 9999]})", 400, "prompt", {"prompt[2]", "9999"}},
        {"/v1/completions", R"({"max_tokens": 5})", 400, "prompt", {"prompt is required"}},
        {"/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "prompt", {std::to_string(long_tokens), std::to_string(context)}},
        {"/v1/completions", R"({"prompt": "x", "model": "gpt-4o"})", 404, "model", {"'gpt-4o'", "stories260K"}},
        {"/v1/chat/completions", R"({"messages": [{"role": "tool", "content": "x"}]})", 400, "messages[0].role", {"\"tool\""}},
        {"/v1/chat/completions", R"({"messages": []})", 400, "messages", {"messages"}},
        {"/v1/chat/completions", R"({"prompt": "x"})", 400, "prompt", {"'prompt'"}},
    };
    for (const Bad& b : cases) {
        CAPTURE(b.route);
        CAPTURE(b.body.substr(0, 80));
        const Reply r = http(server.url(b.route), b.body);
        CHECK(r.status == b.status);
        CHECK(r.headers.find("Content-Type: application/json") != std::string::npos);
        const json e = r.json_body();
        REQUIRE(e.contains("error"));
        const std::string message = e["error"]["message"];
        CAPTURE(message);
        for (const std::string& part : b.message_has) CHECK(message.find(part) != std::string::npos);
        CHECK(e["error"]["type"] == "invalid_request_error");
        CHECK(e["error"]["param"] == (b.param.empty() ? json(nullptr) : json(b.param)));
        CHECK(e["error"]["code"].is_string());
    }

    // Unknown routes (any method), and a body over the limit.
    for (const auto& [route, body] : std::vector<std::pair<std::string, std::optional<std::string>>>{
             {"/v1/nothing", std::nullopt}, {"/v2/completions", std::string("{}")}, {"/v1/completions", std::nullopt}}) {
        CAPTURE(route);
        const Reply r = http(server.url(route), body);
        CHECK(r.status == 404);
        CHECK(r.json_body()["error"]["message"].get<std::string>().find(route) != std::string::npos);
    }
    const std::string huge((1u << 20) + 1000, 'x');
    const Reply too_big = http(server.url("/v1/completions"), huge);
    CHECK(too_big.status == 413);
    const std::string message = too_big.json_body()["error"]["message"];
    CHECK(message.find(std::to_string(huge.size())) != std::string::npos);
    CHECK(message.find(std::to_string(1u << 20)) != std::string::npos);

    // The server still answers after all of that.
    CHECK(post(server, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}}).status == 200);
}

TEST_CASE("serve: --api-key: the /v1 routes want Authorization: Bearer KEY; 401 otherwise" * doctest::skip(kNoCurl)) {
    ServerProcess server({"--api-key", "sekrit-123"});
    const json body = {{"prompt", "Once"}, {"max_tokens", 3}};
    for (const std::vector<std::string>& headers : std::vector<std::vector<std::string>>{
             {}, {"-H", "Authorization: Bearer wrong"}, {"-H", "Authorization: Bearer sekrit-1234"}, {"-H", "Authorization: sekrit-123"}}) {
        CAPTURE(headers.size() > 1 ? headers[1] : "no header");
        const Reply r = post(server, "/v1/completions", body, headers);
        CHECK(r.status == 401);
        const json e = r.json_body();
        CHECK(e["error"]["code"] == "invalid_api_key");
        CHECK(e["error"]["message"].get<std::string>().find(headers.empty() ? "Authorization: Bearer" : "incorrect") !=
              std::string::npos);
        CHECK(http(server.url("/v1/models"), std::nullopt, headers).status == 401);
    }
    const std::vector<std::string> key = {"-H", "Authorization: Bearer sekrit-123"};
    CHECK(post(server, "/v1/completions", body, key).status == 200);
    CHECK(http(server.url("/v1/models"), std::nullopt, key).status == 200);
    CHECK(http(server.url("/health")).status == 200);  // health checks need no key
}

TEST_CASE("serve: a full queue answers 503 with Retry-After; a client that hangs up is cancelled; SIGTERM lets the "
          "request in flight finish and exits 0" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({"-m", slow_model(), "--max-queue", "2", "--threads", "1"});
    INFO("server log:\n" << server.log());
    const json long_request = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"temperature", 0},
                               {"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};

    // Two requests in flight: one by hand (it will hang up), one by curl (it will see SIGTERM).
    RawClient quitter(server.port(), "/v1/completions", long_request.dump());
    REQUIRE_MESSAGE(quitter.read_until("data: ", Ms(15000)), "the first stream did not start");
    const std::string stayer_base = new_path("stayer");
    write_file(stayer_base + ".in", long_request.dump());
    const pid_t stayer = spawn({"curl", "-sS", "-N", "--max-time", "60", "-H", "Content-Type: application/json",
                                "--data-binary", "@" + stayer_base + ".in", "-o", stayer_base + ".out",
                                server.url("/v1/completions")},
                               -1, stayer_base + ".err");
    REQUIRE_MESSAGE(eventually([&] { return read_if_exists(stayer_base + ".out").find("data: ") != std::string::npos; }, Ms(15000)),
                    "the second stream did not start");

    // 1. The queue (--max-queue 2) is full: 503, Retry-After, the limit in the message.
    const Reply full = post(server, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
    CHECK(full.status == 503);
    CHECK(full.headers.find("Retry-After: 1") != std::string::npos);
    CHECK(full.json_body()["error"]["code"] == "queue_full");
    CHECK(full.json_body()["error"]["message"].get<std::string>().find("2 requests") != std::string::npos);

    // 2. The hand-made client hangs up mid-stream: its request is cancelled (logged as such,
    //    short of its 480 tokens), which frees its place: the next request is served.
    quitter.hang_up();
    std::string cancelled;
    REQUIRE_MESSAGE(eventually([&] { return !(cancelled = log_line_of(server.log(), "cmpl-1")).empty(); }, Ms(10000)),
                    "no log line for the disconnected request:\n" << server.log());
    CHECK(cancelled.find("cancelled (client disconnected)") != std::string::npos);
    int generated = -1;
    REQUIRE(std::sscanf(cancelled.c_str() + cancelled.find("cached), "), "cached), %d generated", &generated) == 1);
    CHECK(generated < 480);
    const Reply after = post(server, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"temperature", 0}});
    CHECK(after.status == 200);

    // 3. SIGTERM while the curl stream runs: new requests are refused (503, or the connection is
    //    refused once the listener is closed), the stream still gets all 480 tokens, exit 0.
    REQUIRE(read_if_exists(stayer_base + ".out").find("[DONE]") == std::string::npos);
    server.signal(SIGTERM);
    REQUIRE(eventually([&] { return server.log().find("SIGTERM: shutting down") != std::string::npos; }, Ms(5000)));
    const Reply refused = post(server, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
    CHECK((refused.status == 503 || refused.status == 0));
    if (refused.status == 503) CHECK(refused.json_body()["error"]["code"] == "shutting_down");
    CHECK(wait_exit(stayer, Ms(30000)) == std::optional<int>(0));
    const Sse sse = parse_sse(read_if_exists(stayer_base + ".out"), false);
    CHECK(sse.problem == "");
    REQUIRE(!sse.chunks.empty());
    CHECK(sse.chunks.back()["usage"]["completion_tokens"] == 480);
    CHECK(server.wait(Ms(15000)) == std::optional<int>(0));

    // Every request gave its blocks back, the cancelled one included: the whole pool is free at the end.
    const std::string last = log_line_of(server.log(), "stopped");
    REQUIRE(!last.empty());
    const auto [free_blocks, total] = free_blocks_in(last);
    CHECK(free_blocks == total);
    CHECK(total == 4 * 512 / 16);  // the default pool: four contexts of 512 positions, blocks of 16
}

TEST_CASE("serve: SIGTERM past --shutdown-timeout cancels the stream with an error event and exits 0" *
          doctest::skip(kNoCurl)) {
    ServerProcess server({"-m", slow_model(), "--threads", "1", "--shutdown-timeout", "0.2"});
    INFO("server log:\n" << server.log());
    const json long_request = {{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0},
                               {"ignore_eos", true}, {"stream", true}};
    const std::string base = new_path("cut");
    write_file(base + ".in", long_request.dump());
    const pid_t client = spawn({"curl", "-sS", "-N", "--max-time", "60", "-H", "Content-Type: application/json",
                                "--data-binary", "@" + base + ".in", "-o", base + ".out", server.url("/v1/completions")},
                               -1, base + ".err");
    REQUIRE(eventually([&] { return read_if_exists(base + ".out").find("data: ") != std::string::npos; }, Ms(15000)));
    server.signal(SIGTERM);
    CHECK(server.wait(Ms(10000)) == std::optional<int>(0));
    CHECK(wait_exit(client, Ms(10000)) == std::optional<int>(0));
    const std::string raw = read_if_exists(base + ".out");
    const Sse sse = parse_sse(raw, false);
    CHECK(sse.problem == "");
    REQUIRE(!sse.chunks.empty());
    const json& error = sse.chunks.back();
    REQUIRE(error.contains("error"));
    CHECK(error["error"]["code"] == "shutting_down");
    CHECK(error["error"]["message"].get<std::string>().find("shutting down") != std::string::npos);
}

TEST_CASE("serve: --backend reference serves the same text; bad flags and a taken port are refused by name" *
          doctest::skip(kNoCurl)) {
    const std::string prompt = "Lily and Ben went to the park";
    const json expected = generate(prompt, "--temperature 0 --max-new-tokens 50");
    {
        ServerProcess reference({"--backend", "reference", "--no-chunked-prefill", "--budget", "64", "--block-size", "8"});
        const Reply r = post(reference, "/v1/completions", {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 50}});
        REQUIRE(r.status == 200);
        CHECK(r.json_body()["choices"][0]["text"] == expected["text"]);
        CHECK(reference.log().find("backend reference") != std::string::npos);
        CHECK(reference.log().find("KV pool 256 blocks of 8") != std::string::npos);  // four contexts of 512
        CHECK(reference.log().find("chunked prefill off, budget 64") != std::string::npos);

        // Usage errors (exit 2) name the flag and the value; a port in use (exit 1) names the port.
        // They fail before listening, so none of these waits.
        const std::string port = std::to_string(reference.port());
        for (const auto& [flags, status, words] : std::vector<std::tuple<std::string, int, std::vector<std::string>>>{
                 {"--port 70000", 2, {"--port", "70000"}},
                 {"--backend gpu", 2, {"--backend", "'gpu'"}},
                 {"--max-queue 0", 2, {"--max-queue", "0"}},
                 {"--block-size 0", 2, {"--block-size", "0"}},
                 {"--shutdown-timeout -1", 2, {"--shutdown-timeout", "-1"}},
                 {"--backend reference --threads 2", 2, {"--threads"}},
                 {"--bogus", 2, {"--bogus"}},
                 {"--port " + port, 1, {"127.0.0.1:" + port}}}) {
            CAPTURE(flags);
            const test::Run r = test::run("timeout 20 " + glass_bin() + " serve " + flags + " </dev/null");
            CHECK(r.exit_code == status);
            CHECK(r.out.empty());  // no "listening on" line
            for (const std::string& w : words) CHECK(r.err.find(w) != std::string::npos);
        }
    }
}
