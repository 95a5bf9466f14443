// 21_http_server — serving over HTTP: start `glass serve`, chat with it twice, read its /metrics.
//
// In:  the glass program (--glass PATH; default: the glass beside this example, build/bin/glass),
//      which this example starts as a child process: `glass serve --port 0 --block-size B` on the
//      shipped stories260K (--port 0: any free port; its first line on stdout names it).
// Out: two chat turns through POST /v1/chat/completions, greedy (temperature 0): turn 1 asks a
//      question; turn 2 sends the whole history again (the question, the reply, a new question),
//      as every OpenAI client does. Each answer with its usage: prompt tokens, completion tokens,
//      and the prompt tokens the prefix cache supplied (usage.prompt_tokens_details.cached_tokens).
//      Then the lines of GET /metrics that tell the same story from the server's side: tokens in
//      and out, prefix-cache hit tokens, KV blocks in use and free. Last, SIGTERM, and the
//      server's exit status (0: it stopped cleanly).
//
// Why. Turn 2's prompt starts with turn 1's prompt and reply, token for token (the chat template
// in glass/serve/openai_api.hpp makes sure of that), and the blocks that held their K/V are still
// in the server's pool, named by the hash of their tokens. So turn 2's full blocks of that shared
// start are found, not computed: cached_tokens = block size x the full blocks they fill. Only
// the new question (and the partly filled last block) is prefilled.
//
// Usage: 21_http_server [--glass PATH] [--max-tokens N] [--block-size B]
//   --glass       the glass program to start (default: glass in this program's directory)
//   --max-tokens  the most tokens per answer, 1..200 (default 48; a reply ends at its newline)
//   --block-size  the server's KV block size in positions, 1..64 (default 16)
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "glass/errors.hpp"

// After glass's headers (see tools/cmd_serve.cpp).
#include <httplib.h>

extern char** environ;

using json = nlohmann::json;

namespace {

const char* const kQuestion1 = "Tell me a story about a little dog who finds a red ball in the park.";
const char* const kQuestion2 = "What did the dog do with the ball?";

// The glass beside this program (both are built into build/bin).
std::string default_glass() {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("glass") : (exe.parent_path() / "glass").string();
}

// `glass serve --port 0 ...` as a child: its stdout comes to us through a pipe (the first line
// names the port), its log (stderr) goes to /dev/null.
struct Server {
    pid_t pid = -1;
    int port = 0;
};

Server start_server(const std::string& glass, int block_size) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) glass::fail("cannot make a pipe");
    const std::vector<std::string> args = {glass, "serve", "--port", "0", "--block-size", std::to_string(block_size)};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    Server s;
    const int rc = posix_spawn(&s.pid, glass.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) glass::fail("cannot start '", glass, "' (", std::strerror(rc), "); give its path with --glass");

    // Its first line: "listening on http://127.0.0.1:PORT" (20 s at most).
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd p{fds[0], POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        char buf[256];
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n <= 0) break;
        line.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    const std::string prefix = "listening on http://127.0.0.1:";
    if (line.rfind(prefix, 0) != 0) {
        ::kill(s.pid, SIGKILL);
        ::waitpid(s.pid, nullptr, 0);
        glass::fail("'", glass, " serve' did not start (its stdout: '", line, "')");
    }
    s.port = std::stoi(line.substr(prefix.size()));
    return s;
}

// POST /v1/chat/completions; the answer's JSON (a status other than 200 is an error).
json chat(httplib::Client& client, const json& messages, int max_tokens) {
    const json body = {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
    const httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!r) glass::fail("POST /v1/chat/completions: no answer (", httplib::to_string(r.error()), ")");
    if (r->status != 200) glass::fail("POST /v1/chat/completions: HTTP ", r->status, ": ", r->body);
    return json::parse(r->body);
}

// One turn as the reader sees it; returns the assistant's reply.
std::string show_turn(int turn, const json& answer) {
    const std::string reply = answer["choices"][0]["message"]["content"];
    const json& usage = answer["usage"];
    std::printf("turn %d answer: %s\n", turn, json(reply).dump().c_str());
    std::printf("turn %d finish_reason: %s\n", turn, answer["choices"][0]["finish_reason"].get<std::string>().c_str());
    std::printf("turn %d usage: prompt_tokens %d, completion_tokens %d, cached_tokens %d\n", turn,
                usage["prompt_tokens"].get<int>(), usage["completion_tokens"].get<int>(),
                usage["prompt_tokens_details"]["cached_tokens"].get<int>());
    return reply;
}

int run(int argc, char** argv) {
    std::string glass = default_glass();
    int max_tokens = 48, block_size = 16;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) glass::fail("'", a, "' needs a value (or is not an option: --glass, --max-tokens, --block-size)");
        if (a == "--glass") glass = argv[++i];
        else if (a == "--max-tokens") max_tokens = example::int_arg(argv[++i], "max tokens", 1, 200);
        else if (a == "--block-size") block_size = example::int_arg(argv[++i], "block size", 1, 64);
        else glass::fail("unknown option '", a, "'");
    }

    // 1. The server, as a child process.
    const Server server = start_server(glass, block_size);
    std::printf("started: glass serve --port 0 --block-size %d\n", block_size);
    std::printf("listening on http://127.0.0.1:%d\n", server.port);
    httplib::Client client("127.0.0.1", server.port);
    client.set_read_timeout(60, 0);

    // 2. Turn 1: one question.
    std::printf("\n== turn 1: POST /v1/chat/completions, one user message\n");
    std::printf("turn 1 user: %s\n", kQuestion1);
    json messages = json::array({{{"role", "user"}, {"content", kQuestion1}}});
    const std::string reply1 = show_turn(1, chat(client, messages, max_tokens));

    // 3. Turn 2: the history again, with the reply, and a new question.
    std::printf("\n== turn 2: the same history, the reply, a new question\n");
    std::printf("turn 2 user: %s\n", kQuestion2);
    messages.push_back({{"role", "assistant"}, {"content", reply1}});
    messages.push_back({{"role", "user"}, {"content", kQuestion2}});
    show_turn(2, chat(client, messages, max_tokens));

    // 4. The server's own counters.
    std::printf("\n== GET /metrics: the lines that matter\n");
    const httplib::Result m = client.Get("/metrics");
    if (!m || m->status != 200) glass::fail("GET /metrics: ", m ? "HTTP " + std::to_string(m->status) : httplib::to_string(m.error()));
    const char* const kShown[] = {"glass_prompt_tokens_total ", "glass_generation_tokens_total ",
                                  "glass_prefix_cache_hit_tokens_total ", "glass_kv_blocks_total ", "glass_kv_blocks_used ",
                                  "glass_kv_blocks_free "};
    for (const char* name : kShown) {
        std::istringstream lines(m->body);
        for (std::string line; std::getline(lines, line);)
            if (line.rfind(name, 0) == 0) std::printf("%s\n", line.c_str());
    }

    // 5. SIGTERM: the server stops taking requests, finishes those in flight (none), exits.
    std::printf("\n== SIGTERM\n");
    ::kill(server.pid, SIGTERM);
    int status = 0;
    for (int waited_ms = 0; ::waitpid(server.pid, &status, WNOHANG) != server.pid; waited_ms += 10) {
        if (waited_ms > 30000) {
            ::kill(server.pid, SIGKILL);
            ::waitpid(server.pid, &status, 0);
            glass::fail("glass serve did not exit within 30 s of SIGTERM (killed)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFEXITED(status)) std::printf("glass serve exited with status %d\n", WEXITSTATUS(status));
    else std::printf("glass serve was killed by signal %d\n", WTERMSIG(status));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return example::run_reporting_errors(run, argc, argv); }
