// Helpers for the tests that talk to `glass serve` over loopback HTTP (test_serve_http,
// test_serve_metrics, test_loadgen): start the server as a child process (`--port 0`; it prints
// "listening on http://127.0.0.1:PORT"), send requests with curl (every call with --max-time),
// read server-sent events frame by frame, hang up or read slowly by hand, read Prometheus text.
// The server is killed when its ServerProcess goes out of scope, whatever happened.
#pragma once

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

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "glass/glass.hpp"
#include "test_support.hpp"

extern char** environ;

namespace serve_test {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// How long a test waits for what must happen (the server's first line, a stream's first or last
// event, an answer, a process's exit) before it fails. A hang guard, not a speed check: what is
// awaited takes well under a second with the AVX-512 or AVX2 kernels, but can take tens of seconds
// with the plain-loop kernels (GLASS_KERNELS=portable) on a busy 2-core machine under ctest -j2;
// only a hang comes near two minutes. Tests bound their work by token counts instead.
inline constexpr Ms kHangGuard{120000};
// The same in whole seconds: curl's --max-time, glass serve's --shutdown-timeout.
inline std::string hang_guard_seconds() { return std::to_string(kHangGuard.count() / 1000); }

inline bool no_curl() {
    static const bool missing = std::system("command -v curl >/dev/null 2>&1") != 0;
    return missing;
}

inline std::string glass_bin() { return test::bin_dir() + "/glass"; }

// One directory for this process's files, removed at exit.
inline const std::string& work_dir() {
    static const struct Dir {
        std::string path = test::temp_dir("serve_client");
        ~Dir() { std::filesystem::remove_all(path); }
    } dir;
    return dir.path;
}

inline std::string new_path(const std::string& tag) {
    static int counter = 0;
    return work_dir() + "/" + tag + std::to_string(counter++);
}

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

inline std::string read_if_exists(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Starts a program (PATH lookup) with stdout to `stdout_fd` (-1: inherited), stderr to a file.
inline pid_t spawn(const std::vector<std::string>& args, int stdout_fd, const std::string& stderr_path) {
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
inline std::optional<int> wait_exit(pid_t pid, Ms timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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

// `glass serve --port 0 FLAGS` as a child process (`program`: another build of glass, such as
// glass-emulated); killed when this goes out of scope.
class ServerProcess {
public:
    explicit ServerProcess(const std::vector<std::string>& flags, const std::string& program = glass_bin())
        : log_path_(new_path("server") + ".log") {
        int fds[2];
        REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);  // the server gets its end as stdout; no other child inherits either
        std::vector<std::string> args = {program, "serve", "--port", "0"};
        args.insert(args.end(), flags.begin(), flags.end());
        pid_ = spawn(args, fds[1], log_path_);
        ::close(fds[1]);
        stdout_ = fds[0];
        // Its first line on stdout names the port (a --shape model is made first).
        std::string line;
        const Clock::time_point deadline = Clock::now() + kHangGuard;
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
    std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    std::string url(const std::string& path) const { return base_url() + path; }
    std::string log() const { return read_if_exists(log_path_); }
    void signal(int sig) const { ::kill(pid_, sig); }
    // Its exit status once it exits within `timeout` (then it is reaped), else nullopt.
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
    int status = 0;  // 0: no HTTP answer (see curl_exit)
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
inline Reply http(const std::string& url, const std::optional<std::string>& body = std::nullopt,
                  const std::vector<std::string>& extra = {}) {
    const std::string base = new_path("req");
    std::string cmd = "curl -sS -N --max-time " + hang_guard_seconds() + " -D " + test::sh(base + ".h") + " -o " +
                      test::sh(base + ".b") + " -w '%{http_code}'";
    if (body) {
        write_file(base + ".in", *body);
        cmd += " -H 'Content-Type: application/json' --data-binary @";
        cmd += test::sh(base + ".in");
    }
    // Appended piece by piece: `cmd += " " + x` trips GCC 12's -Wrestrict (a false positive) at -O3.
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
inline Reply post(const ServerProcess& s, const std::string& path, const json& body, const std::vector<std::string>& extra = {}) {
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
inline Sse parse_sse(const std::string& raw, bool chat) {
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

// A random-weight model with tok512's vocabulary (so real prompts work), `layers` layers of width
// 384 (default 8), a context of `seq_len`: a few ms per token, slow enough that a request is surely
// still running while a test looks. Written to work_dir()/NAME.bin.
inline std::string write_wide_model(const std::string& name, int seq_len, std::uint64_t seed, int layers = 8) {
    glass::ModelConfig c;
    c.dim = 384;
    c.hidden_dim = 1024;
    c.n_layers = layers;
    c.n_heads = 6;
    c.n_kv_heads = 6;
    c.vocab_size = 512;
    c.seq_len = seq_len;
    c.head_dim = c.dim / c.n_heads;
    const std::string path = work_dir() + "/" + name + ".bin";
    glass::fast::write_random_checkpoint(c, path, seed);
    return path;
}

// The wide model with a context of 512 (written once).
inline const std::string& slow_model() {
    static const std::string path = write_wide_model("slow_model", 512, 7);
    return path;
}

// A client that sends one request by hand and can hang up at any moment (curl cannot be told to).
class RawClient {
public:
    // `receive_buffer` > 0: that small a socket receive buffer (a client that stops reading then
    // holds up the server's writes sooner).
    RawClient(int port, const std::string& path, const std::string& body, int receive_buffer = 0) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not inherited by curl: hanging up must close it
        REQUIRE(fd_ >= 0);
        if (receive_buffer > 0) REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer) == 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
        const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        REQUIRE(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    }
    RawClient(const RawClient&) = delete;
    RawClient& operator=(const RawClient&) = delete;
    ~RawClient() { hang_up(); }
    // Reads until what came contains `needle`, `timeout` at most.
    // A slow reader takes `chunk` bytes at a time and rests `pause` between reads.
    bool read_until(const std::string& needle, Ms timeout, size_t chunk = 4096, Ms pause = Ms(0)) {
        const Clock::time_point deadline = Clock::now() + timeout;
        std::vector<char> buf(chunk);
        while (received_.find(needle) == std::string::npos && Clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
            if (n <= 0) break;
            received_.append(buf.data(), static_cast<size_t>(n));
            if (pause.count() > 0) std::this_thread::sleep_for(pause);
        }
        return received_.find(needle) != std::string::npos;
    }
    // Reads until the chunked body has ended (its last, empty chunk), `timeout` at most, so that
    // body() holds every event. Waiting for "data: [DONE]" alone is not enough: those bytes can
    // arrive before the rest of the HTTP chunk that carries them, and body() keeps whole chunks
    // only (a slow reader in CI once lost the usage event and [DONE] that way).
    bool read_until_end(Ms timeout, size_t chunk = 4096, Ms pause = Ms(0)) {
        return read_until("\r\n0\r\n\r\n", timeout, chunk, pause);
    }
    // Takes everything that has arrived by now, waiting for nothing more.
    const std::string& drain() { return drain_for(Ms(0)); }
    // The same, waiting up to `wait` for the first bytes.
    const std::string& drain_for(Ms wait) {
        char buf[4096];
        pollfd p{fd_, POLLIN, 0};
        for (int ms = static_cast<int>(wait.count()); ::poll(&p, 1, ms) > 0; ms = 0) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) break;
            received_.append(buf, static_cast<size_t>(n));
        }
        return received_;
    }
    // A whole response with a Content-Length (not streamed): its body, or "" if it did not come
    // within `timeout`.
    std::string read_response(Ms timeout) {
        const Clock::time_point deadline = Clock::now() + timeout;
        if (!read_until("\r\n\r\n", timeout)) return "";
        const size_t start = received_.find("\r\n\r\n") + 4;
        const size_t at = received_.find("Content-Length: ");
        if (at == std::string::npos || at > start) return "";
        const size_t length = std::stoul(received_.substr(at + 16));
        while (received_.size() < start + length && Clock::now() < deadline) drain_for(Ms(50));
        return received_.size() < start + length ? "" : received_.substr(start, length);
    }
    // The response body so far, its chunked transfer framing removed ("" before the headers end).
    std::string body() const {
        const size_t start = received_.find("\r\n\r\n");
        if (start == std::string::npos) return "";
        std::string out;
        size_t pos = start + 4;
        while (pos < received_.size()) {
            const size_t line_end = received_.find("\r\n", pos);
            if (line_end == std::string::npos) break;
            const size_t size = std::stoul(received_.substr(pos, line_end - pos), nullptr, 16);
            if (size == 0 || line_end + 2 + size > received_.size()) break;
            out.append(received_, line_end + 2, size);
            pos = line_end + 2 + size + 2;
        }
        return out;
    }
    void hang_up() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
    std::string received_;
};

// Prometheus text format 0.0.4 read back: "name{labels}" -> value for every sample line, and the
// # TYPE of every metric family. Lines it cannot read fail the test.
struct Metrics {
    std::map<std::string, double> samples;
    std::map<std::string, std::string> types;  // family name -> counter | gauge | histogram
    std::map<std::string, std::string> helps;  // family name -> help text

    double at(const std::string& key) const {
        const auto it = samples.find(key);
        INFO("metric " << key);
        REQUIRE(it != samples.end());
        return it->second;
    }
};
inline Metrics parse_metrics(const std::string& text) {
    Metrics m;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.empty()) continue;
        if (line.rfind("# TYPE ", 0) == 0 || line.rfind("# HELP ", 0) == 0) {
            const size_t space = line.find(' ', 7);
            REQUIRE_MESSAGE(space != std::string::npos, "bad line: " << line);
            (line[2] == 'T' ? m.types : m.helps)[line.substr(7, space - 7)] = line.substr(space + 1);
            continue;
        }
        REQUIRE_MESSAGE(line[0] != '#', "unexpected comment: " << line);
        const size_t space = line.rfind(' ');
        REQUIRE_MESSAGE(space != std::string::npos, "no value: " << line);
        char* end = nullptr;
        const std::string value = line.substr(space + 1);
        const double v = std::strtod(value.c_str(), &end);
        REQUIRE_MESSAGE((end != nullptr && *end == '\0' && !value.empty()), "not a number: " << line);
        REQUIRE_MESSAGE(m.samples.count(line.substr(0, space)) == 0, "sample twice: " << line);
        m.samples[line.substr(0, space)] = v;
    }
    return m;
}
inline Metrics get_metrics(const ServerProcess& s) {
    const Reply r = http(s.url("/metrics"));
    REQUIRE(r.status == 200);
    REQUIRE_MESSAGE(r.headers.find("Content-Type: text/plain; version=0.0.4") != std::string::npos, r.headers);
    return parse_metrics(r.body);
}

}  // namespace serve_test
