// glass serve — an OpenAI-compatible HTTP server on the batching engine.
//
//   glass serve [-m MODEL | --shape NAME [--context N]] [-t TOKENIZER] [--host H] [--port P] [--api-key KEY]
//               [--backend fast|reference|cuda] [--threads N] [--precision fp32|fp16|bf16|q8|q4|q4_k|q5_k|q6_k|stored] [--kv fp32|int8]
//               [--max-queue N] [--block-size B] [--pool-blocks N] [--budget T] [--max-running N] [--no-prefix-cache]
//               [--no-chunked-prefill] [--shutdown-timeout S] [--draft layers:N|ngram[:N]|MODEL [--draft-k K]]
//               [--chat-template FILE] [--tp N] [--pp N] [--micro-batches M] [--rank-memory BYTES]
//               [--disaggregate D:P | --role decode|prefill]
//
// The model, backend and engine flags are serve-bench's too (tools/serve_setup.hpp); the
// disaggregated prefill/decode ones, tools/disaggregation_setup.hpp:
//
//   mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
//
// The JSON of the API (requests, responses, stream chunks, errors, the chat template) is in
// include/glass/serve/openai_api.hpp (requests) and openai_response.hpp (answers); the engine's thread and the mailboxes to it in
// include/glass/serve/engine_thread.hpp. This file is the HTTP glue between them:
//
//   threads    cpp-httplib runs each connection on a thread of its pool. A completion handler
//              parses the body (openai_api.hpp), submits a Ticket to the engine thread, then
//              waits on the ticket: for the whole result (a plain response), or piece by piece,
//              writing each piece as a server-sent event (stream: true). The one engine thread
//              steps the engine for all of them, so concurrent requests share forward passes.
//   cancel     a streaming client that disconnects makes the next write fail; the response's
//              releaser then cancels the ticket, and the engine frees the request's blocks.
//   shutdown   SIGINT/SIGTERM: new requests get 503; those in flight may finish for
//              --shutdown-timeout seconds (default 10), then are cancelled (a stream gets an
//              error event); then the listener closes and glass exits 0. A second signal
//              cancels at once.
//   log        one line per request on stderr: id, route, status, tokens, TTFT/TPOT, free KV blocks.
//   watching   GET /metrics (Prometheus text) and GET /v1/engine/state (JSON) serve copies that the
//              engine thread keeps (serve/prometheus_counters.hpp, serve/engine_state.hpp); GET / is
//              the live page that draws them (tools/serve_page.html, compiled in).
//
// HTTP library: cpp-httplib (Debian's libcpp-httplib-dev, found with pkg-config): well kept, in
// Debian, small and readable (one header; Debian builds its definitions into a shared library),
// a thread per connection (so a handler may simply wait for its tokens), and chunked responses
// through content providers that report a client that went away (server-sent events).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "chat_setup.hpp"
#include "cli.hpp"
#include "disaggregation_setup.hpp"
#include "serve_setup.hpp"
#include "glass/glass.hpp"
#include "glass/serve/engine_thread.hpp"
#include "glass/serve/engine_state.hpp"
#include "glass/serve/prometheus_counters.hpp"
#include "glass/serve/openai_api.hpp"
#include "glass/serve/openai_response.hpp"
#include "glass_serve_page.hpp"  // kServePage: tools/serve_page.html, generated at build time

// After glass's headers: httplib.h brings <resolv.h>, whose macro `_res` would rewrite a
// parameter name inside Eigen's headers.
#include <httplib.h>

namespace cli {

namespace {

namespace openai = glass::serve::openai;
using glass::serve::Ticket;
using Ms = std::chrono::milliseconds;

constexpr size_t kMaxBodyBytes = size_t{1} << 20;  // 1 MiB: far more than any prompt that fits a context

// What every handler shares.
struct Shared {
    openai::ServedModel model;
    const glass::Tokenizer& tokenizer;
    glass::serve::EngineThread& engine;
    std::string api_key;
    std::uint64_t seed_base;                   // seeds of requests that give none
    std::atomic<std::uint64_t> next_number{1};  // numbers the responses: cmpl-1, chatcmpl-2, ...
    std::atomic<int> open_responses{0};         // submitted, last byte not yet written
};

// Counts one response as open from before it is submitted until its last byte is written
// (held by the handler, and by a stream, which httplib's callbacks hold until they are destroyed).
struct OpenResponse {
    explicit OpenResponse(Shared& s) : s(s) { ++s.open_responses; }
    OpenResponse(const OpenResponse&) = delete;
    OpenResponse& operator=(const OpenResponse&) = delete;
    ~OpenResponse() { --s.open_responses; }
    Shared& s;
};

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(openai::to_text(body), "application/json");
}

void log_line(const std::string& line) { std::fprintf(stderr, "glass serve: %s\n", line.c_str()); }

void send_error(httplib::Response& res, const httplib::Request& req, const openai::ApiError& e) {
    send_json(res, e.status, openai::error_body(e));
    if (e.status == 503) res.set_header("Retry-After", "1");
    log_line(req.method + " " + req.path + " " + std::to_string(e.status) + " " + e.code + ": " + e.what());
}

// With --api-key, every /v1 route wants "Authorization: Bearer KEY" (compared in constant time).
bool authorized(const Shared& s, const httplib::Request& req, httplib::Response& res) {
    if (s.api_key.empty()) return true;
    const std::string got = req.get_header_value("Authorization");
    const std::string want = "Bearer " + s.api_key;
    unsigned diff = got.size() == want.size() ? 0u : 1u;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) diff |= static_cast<unsigned>(got[i] ^ want[i]);
    if (diff == 0) return true;
    send_error(res, req,
               openai::ApiError(401,
                                got.empty() ? "no API key: send the header 'Authorization: Bearer KEY' (the server's --api-key)"
                                            : "incorrect API key in the Authorization header",
                                "", "invalid_api_key"));
    return false;
}

std::string describe(const Ticket& t) {
    const glass::serve::RequestResult& r = t.result;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%zu prompt tokens (%d cached), %zu generated | TTFT %.2f ms, TPOT %.3f ms | KV blocks free %d/%d",
                  r.prompt_ids.size(), r.cached_tokens, r.generated_ids.size(), r.metrics.ttft_ms, r.metrics.tpot_ms,
                  t.free_blocks, t.num_blocks);
    return buf;
}

// A finished ticket that cannot be answered as a completion: why, as an API error.
std::optional<openai::ApiError> failure_of(const Ticket& t) {
    if (t.cancelled_by_shutdown)
        return openai::ApiError(503, "the server is shutting down; the request was cancelled after " +
                                         std::to_string(t.result.generated_ids.size()) + " tokens",
                                "", "shutting_down", "server_error");
    if (!t.error.empty()) return openai::ApiError(500, t.error, "", "engine_error", "server_error");
    if (t.result.stop_reason == glass::StopReason::cancelled)
        return openai::ApiError(500, "the request was cancelled", "", "cancelled", "server_error");
    return std::nullopt;
}

// A streamed completion ("stream": true) as server-sent events. httplib calls provide() again and
// again until it calls sink.done(); each call waits up to 100 ms for new text and writes what came.
// httplib calls release() when the response ends: written to the end, or cut short.
//
//   opening   a chat stream opens with the role, at once (before any text)
//   text      each piece of text the ticket hands out, with its tokens' logprobs when asked
//   closing   the finish reason (or an error event), the usage when asked, then [DONE]
class CompletionStream {
public:
    CompletionStream(Shared& s, openai::CompletionRequest cr, openai::ResponseHeader header, std::shared_ptr<Ticket> ticket,
                     std::string route)
        : s_(s), open_(s), cr_(std::move(cr)), header_(std::move(header)), ticket_(std::move(ticket)), route_(std::move(route)),
          logprobs_(cr_, s.tokenizer) {}

    // One call of httplib's content provider; false when the client is gone.
    bool provide(httplib::DataSink& sink) {
        bool finished = false;
        std::string out = opening();
        if (out.empty()) out = next_events(finished);
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;  // the client is gone
        if (finished) {
            complete_ = true;
            sink.done();
        }
        return true;
    }

    // httplib's releaser: the log line, or, when the stream ended early (the client left, or the
    // listener closed), the ticket cancelled so that the engine frees its blocks now.
    void release() {
        if (complete_) {
            log_line(header_.id + " " + route_ + " 200 stream | " + describe(*ticket_) + " | finish " +
                     (failure_of(*ticket_) ? "error" : openai::finish_reason(ticket_->result.stop_reason)));
            return;
        }
        s_.engine.cancel(ticket_);
        const bool finished = ticket_->wait_finished(Ms(2000));
        log_line(header_.id + " " + route_ + " cancelled (client disconnected)" +
                 (finished ? " | " + describe(*ticket_) : std::string(" | not finished yet")));
    }

private:
    std::string opening() {
        if (started_) return "";
        started_ = true;
        return cr_.chat ? openai::sse(openai::stream_chunk(cr_, header_, "", nullptr, /*first=*/true)) : "";
    }

    std::string next_events(bool& finished) {
        std::string text;
        finished = ticket_->wait(text, Ms(100));
        logprobs_.add(ticket_->take_logprobs());
        if (finished && !failure_of(*ticket_)) logprobs_.add_rest(ticket_->result);
        std::string out;
        if (!text.empty()) out += openai::sse(openai::stream_chunk(cr_, header_, text, nullptr, false, logprobs_.for_text(text)));
        if (finished) out += closing();
        return out;
    }

    std::string closing() {
        std::string out;
        if (const auto e = failure_of(*ticket_)) {
            out += openai::sse(openai::error_body(*e));
        } else {
            out += openai::sse(openai::stream_chunk(cr_, header_, "", openai::finish_reason(ticket_->result.stop_reason), false,
                                                    logprobs_.rest()));
            if (cr_.include_usage) out += openai::sse(openai::usage_chunk(cr_, header_, ticket_->result));
        }
        return out + openai::kSseDone;
    }

    Shared& s_;
    OpenResponse open_;  // open until httplib destroys the callbacks that hold this stream
    const openai::CompletionRequest cr_;
    const openai::ResponseHeader header_;
    const std::shared_ptr<Ticket> ticket_;
    const std::string route_;
    bool started_ = false;
    bool complete_ = false;  // the last event was written
    openai::LogprobsStream logprobs_;  // hands the tokens' logprobs out beside their text
};

// The parsed request as a ticket for the engine thread; null when it was refused (answered here).
std::shared_ptr<Ticket> submit(Shared& s, const httplib::Request& req, httplib::Response& res, const openai::CompletionRequest& cr,
                               const std::string& name, glass::serve::Clock::time_point arrival) {
    auto ticket = std::make_shared<Ticket>();
    ticket->prompt_ids = cr.prompt_ids;
    ticket->options = cr.options;
    ticket->arrival = arrival;
    ticket->name = name;  // the live view's name for it
    switch (s.engine.submit(ticket)) {
        case glass::serve::Admission::accepted: return ticket;
        case glass::serve::Admission::queue_full:
            send_error(res, req,
                       openai::ApiError(503, "the server is full: " + std::to_string(s.engine.max_in_flight()) +
                                                 " requests in flight (its --max-queue); retry later",
                                        "", "queue_full", "server_error"));
            break;
        case glass::serve::Admission::shutting_down:
            send_error(res, req, openai::ApiError(503, "the server is shutting down", "", "shutting_down", "server_error"));
            break;
        case glass::serve::Admission::backend_unavailable:  // --tp/--pp: a rank failed; nothing can run any more
            send_error(res, req, openai::ApiError(503, s.engine.unavailable() + "; restart the server", "",
                                                  "backend_unavailable", "server_error"));
            break;
    }
    s.engine.count_rejected();
    return nullptr;
}

// A plain response: the text comes whole in the result.
void answer_whole(Shared& s, const httplib::Request& req, httplib::Response& res, const openai::CompletionRequest& cr,
                  const openai::ResponseHeader& header, Ticket& ticket) {
    while (!ticket.wait_finished(Ms(1000))) {}
    if (const auto e = failure_of(ticket)) {
        send_error(res, req, *e);
        return;
    }
    send_json(res, 200, openai::completion_response(cr, header, ticket.result, s.tokenizer));
    log_line(header.id + " " + req.method + " " + req.path + " 200 | " + describe(ticket) + " | finish " +
             openai::finish_reason(ticket.result.stop_reason));
}

// POST /v1/completions and POST /v1/chat/completions: check the key, parse the body, submit,
// then answer whole or as a stream.
void handle_completion(Shared& s, const httplib::Request& req, httplib::Response& res, bool chat) {
    const glass::serve::Clock::time_point arrival = glass::serve::Clock::now();
    if (!authorized(s, req, res)) {
        s.engine.count_rejected();  // glass_requests_total{outcome="rejected"}
        return;
    }
    const std::uint64_t number = s.next_number++;
    openai::CompletionRequest cr;
    try {
        cr = openai::parse_request(req.body, chat, s.model, s.tokenizer, s.seed_base + number * 0x9E3779B97F4A7C15ull);
    } catch (const openai::ApiError& e) {
        send_error(res, req, e);
        s.engine.count_rejected();
        return;
    }
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(number);
    const OpenResponse open(s);  // a plain response is open until this handler returns; a stream holds its own
    const std::shared_ptr<Ticket> ticket = submit(s, req, res, cr, id, arrival);
    if (!ticket) return;
    const openai::ResponseHeader header{id, static_cast<std::int64_t>(std::time(nullptr)), s.model.name};
    if (!cr.stream) {
        answer_whole(s, req, res, cr, header, *ticket);
        return;
    }

    auto stream = std::make_shared<CompletionStream>(s, cr, header, ticket, req.method + " " + req.path);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->provide(sink); },
        [stream](bool) { stream->release(); });
}

// ---- Setting up: options, model, tokenizer ----------------------------------------------------

// serve's own flags (the engine's come from serve_setup.hpp).
struct ServeOptions {
    std::string host;
    int port = 8000;
    int max_queue = 64;        // requests in flight at most
    double shutdown_s = 10.0;  // grace period for those in flight after SIGINT/SIGTERM
};

ServeOptions serve_options_from_flags(const Flags& flags) {
    const ServeOptions o{.host = flags.get("--host", "127.0.0.1"),
                         .port = flags.number<int>("--port").value_or(8000),
                         .max_queue = flags.number<int>("--max-queue").value_or(64),
                         .shutdown_s = flags.number<double>("--shutdown-timeout").value_or(10.0)};
    if (o.port < 0 || o.port > 65535) throw UsageError("--port must be in [0, 65535] (0 = any free port), got " + std::to_string(o.port));
    if (o.max_queue < 1 || o.max_queue > 4096) throw UsageError("--max-queue must be in [1, 4096], got " + std::to_string(o.max_queue));
    if (!(o.shutdown_s >= 0 && o.shutdown_s <= 3600))
        throw UsageError("--shutdown-timeout must be in [0, 3600] seconds, got " + flags.get("--shutdown-timeout", ""));
    return o;
}

// The tokenizer: -t (default the shipped one) when its vocabulary is the model's. A shape's 32000
// ids are not the shipped tok512's: then NumberTokenizer (token i reads " i", as in serve-bench),
// and clients send prompts as token ids (a text prompt would be BOS alone).
std::unique_ptr<glass::Tokenizer> tokenizer_from_flags(const Flags& flags, const std::string& model_path, const glass::Model& model) {
    if (!flags.has("--shape")) return glass::load_model_tokenizer(model_path, model, flags.get("-t", ""), kDefaultTokenizer);
    auto file_tok = glass::Llama2cTokenizer::load(flags.get("-t", kDefaultTokenizer));
    if (file_tok.vocab_size() == model.config.vocab_size) return std::make_unique<glass::Llama2cTokenizer>(std::move(file_tok));
    if (flags.has("-t"))
        glass::fail("tokenizer '", flags.get("-t", ""), "' has ", file_tok.vocab_size(), " pieces but the shape ", model_path,
                    " has a vocabulary of ", model.config.vocab_size);
    return std::make_unique<glass::NumberTokenizer>(model.config.vocab_size);
}

// ---- The HTTP server: settings, routes, error handlers ------------------------------------------

void configure(httplib::Server& svr, int max_queue) {
    // Every request in flight holds its connection's thread while it waits or streams: room for
    // --max-queue of them, plus a few for /health, /v1/models and refusals.
    const size_t http_threads = static_cast<size_t>(max_queue) + 8;
    svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
    svr.set_payload_max_length(kMaxBodyBytes);
    // SO_REUSEADDR only (a restart may bind while old connections linger), not httplib's default
    // SO_REUSEPORT too: with it a second server on the same port would start and share the traffic.
    svr.set_socket_options([](socket_t sock) {
        const int yes = 1;
        ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    svr.set_tcp_nodelay(true);  // each event goes out when written (Nagle would hold it for the client's delayed ACK, ~40 ms)
    svr.set_keep_alive_timeout(2);  // an idle keep-alive connection holds a thread (and delays shutdown) this long
}

void add_routes(httplib::Server& svr, Shared& s) {
    glass::serve::EngineThread& engine = s.engine;  // ([&] on a reference captures what it refers to)
    svr.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) { handle_completion(s, req, res, false); });
    svr.Post("/v1/chat/completions",
             [&](const httplib::Request& req, httplib::Response& res) { handle_completion(s, req, res, true); });
    svr.Get("/v1/models", [&](const httplib::Request& req, httplib::Response& res) {
        if (authorized(s, req, res)) send_json(res, 200, openai::model_list(s.model));
    });
    svr.Get("/v1/models/(.+)", [&](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(s, req, res)) return;
        const std::string name = req.matches[1];
        if (name == s.model.name) send_json(res, 200, openai::model_object(s.model));
        else send_error(res, req, openai::ApiError(404, "the model '" + name + "' does not exist here (this server serves '" +
                                                            s.model.name + "')", "model", "model_not_found"));
    });
    svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
        if (engine.draining()) send_json(res, 503, {{"status", "shutting down"}});
        else if (const std::string why = engine.unavailable(); !why.empty())
            send_json(res, 503, {{"status", "unavailable"}, {"reason", why}});
        else send_json(res, 200, {{"status", "ok"}});
    });
    // Watching the engine. /metrics: Prometheus text (serve/prometheus_counters.hpp), without the
    // key (like /health: for a scraper). /v1/engine/state: the recent steps, the block pool, the
    // recent requests as JSON (serve/engine_state.hpp; a /v1 route: the key when one is set).
    // /: the live page, which polls it.
    svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(glass::serve::render_prometheus(engine.metrics()), "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/v1/engine/state", [&](const httplib::Request& req, httplib::Response& res) {
        if (authorized(s, req, res)) send_json(res, 200, glass::serve::engine_state_json(engine.engine_state()));
    });
    svr.Get("/", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(kServePage, "text/html; charset=utf-8");
    });
}

void add_error_handlers(httplib::Server& svr, Shared& s) {
    glass::serve::EngineThread& engine = s.engine;
    // Statuses httplib sets itself (404 no route, 413 body too large, ...) get an OpenAI body too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([&](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        if (res.status == 404)
            send_error(res, req, openai::ApiError(404, "no route " + req.method + " " + req.path +
                                                           " (routes: POST /v1/completions, POST /v1/chat/completions, "
                                                           "GET /v1/models, GET /health, GET /metrics, GET /v1/engine/state, GET /)",
                                                  "", "not_found"));
        else if (res.status == 413) {
            engine.count_rejected();  // a request refused before the engine saw it
            send_error(res, req, openai::ApiError(413, "the request body of " + req.get_header_value("Content-Length") +
                                                           " bytes is larger than this server's limit of " +
                                                           std::to_string(kMaxBodyBytes) + " bytes",
                                                  "", "request_too_large"));
        } else
            send_error(res, req, openai::ApiError(res.status, "HTTP status " + std::to_string(res.status), "", "",
                                                  res.status >= 500 ? "server_error" : "invalid_request_error"));
        return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, req, openai::ApiError(500, what, "", "internal_error", "server_error"));
    });
}

// ---- Signals: SIGINT and SIGTERM drain, then stop ---------------------------------------------

// SIGINT and SIGTERM go to one thread that waits for them (signal_thread): block them before any
// other thread exists (the engine's, the fast backend's pool, httplib's), which inherit this.
sigset_t block_stop_signals() {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server
    return stop_signals;
}

// The first signal drains (new requests get 503, the ones in flight get the grace period), then
// closes the listener once every response is written; a second signal cancels what is left at once.
std::thread signal_thread(const sigset_t& stop_signals, Shared& s, httplib::Server& svr, double shutdown_s,
                          const std::atomic<bool>& server_ended) {
    return std::thread([&stop_signals, &s, &svr, shutdown_s, &server_ended] {
        bool draining = false;
        glass::serve::Clock::time_point give_up{};
        while (!server_ended) {
            const timespec tick{0, 100'000'000};  // 100 ms
            const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
            if (sig > 0 && !draining) {
                draining = true;
                const Ms grace(static_cast<long long>(shutdown_s * 1000));
                give_up = glass::serve::Clock::now() + grace + Ms(5000);
                char line[160];
                std::snprintf(line, sizeof line, "%s: shutting down; %d requests in flight may finish within %g s",
                              sig == SIGINT ? "SIGINT" : "SIGTERM", s.open_responses.load(), shutdown_s);
                log_line(line);
                s.engine.drain(grace);
            } else if (sig > 0) {
                log_line("second signal: cancelling the requests in flight");
                s.engine.drain(Ms(0));
            }
            if (draining && (s.open_responses == 0 || glass::serve::Clock::now() > give_up)) {
                svr.stop();
                return;
            }
        }
    });
}

// The backend's details on the startup line: the fast path's threads and precision, or the grid.
std::string backend_details(const BackendChoice& choice, const std::string& precision) {
    const std::string words = backend_words(choice, precision);
    if (!choice.on_grid) return words;
    return words + ", split over tp " + std::to_string(choice.grid.tp) + " × pp " + std::to_string(choice.grid.pp) + " ranks, " +
           std::to_string(choice.grid_options.micro_batches) + " micro-batch(es)";
}

// The startup line on stderr: the model, the backend, the KV pool, the engine's options.
void log_startup(const Shared& s, const glass::ModelConfig& c, const BackendChoice& choice, const std::string& precision,
                 glass::KvType kv, const glass::serve::EngineOptions& eo, int max_queue, const std::string& draft,
                 const Disaggregation& disaggregation) {
    std::fprintf(stderr,
                 "glass serve: %s (dim %d, %d layers, vocab %d, context %d) | backend %s%s%s | KV pool %d blocks of %d, %s | "
                 "prefix cache %s, chunked prefill %s, budget %d | max queue %d%s | chat template %s\n",
                 s.model.name.c_str(), c.dim, c.n_layers, c.vocab_size, c.seq_len,
                 choice.name.c_str(), disaggregation.in_process() ? "" : backend_details(choice, precision).c_str(),
                 disaggregation_details(disaggregation).c_str(),
                 s.engine.num_blocks(), eo.block_size, glass::to_string(kv), eo.prefix_caching ? "on" : "off",
                 eo.scheduler.chunked_prefill ? "on" : "off", eo.scheduler.max_tokens_per_step, max_queue,
                 eo.draft_k > 0 ? (" | draft " + draft + ", k " + std::to_string(eo.draft_k)).c_str() : "",
                 s.model.chat.chat_template ? "the model's" : "none (plain layout)");
}

// The listening socket: --port, or any free port with --port 0. Returns the port.
int bind_listener(httplib::Server& svr, const ServeOptions& so) {
    const int bound = so.port == 0 ? svr.bind_to_any_port(so.host) : (svr.bind_to_port(so.host, so.port) ? so.port : -1);
    if (bound < 0) glass::fail("cannot listen on ", so.host, ":", so.port, " (address in use, or not an address of this machine?)");
    return bound;
}

// Announces the address on stdout, serves until the signal thread stops the server, then stops
// the engine.
void listen_until_stopped(httplib::Server& svr, Shared& s, const sigset_t& stop_signals, const ServeOptions& so, int bound) {
    std::printf("listening on http://%s:%d\n", so.host.c_str(), bound);
    std::fflush(stdout);
    std::atomic<bool> server_ended{false};
    std::thread signals = signal_thread(stop_signals, s, svr, so.shutdown_s, server_ended);
    const bool listened = svr.listen_after_bind();  // returns after stop(), once every connection thread is done
    server_ended = true;
    signals.join();
    s.engine.stop();
    if (!listened) glass::fail("the HTTP server on ", so.host, ":", bound, " stopped with an error");
    log_line("stopped | KV blocks free " + std::to_string(s.engine.free_blocks()) + "/" + std::to_string(s.engine.num_blocks()));
}

}  // namespace

int cmd_serve(int argc, char** argv) {
    const sigset_t stop_signals = block_stop_signals();  // first, before any thread starts

    // Options from flags: serve's own, then the engine's (shared with serve-bench).
    std::map<std::string, bool> own = {{"-t", true},         {"--host", true},
                                       {"--port", true},     {"--api-key", true},
                                       {"--max-queue", true}, {"--shutdown-timeout", true},
                                       {"--chat-template", true}};
    add_disaggregation_flags(own);
    Flags flags("serve", with_engine_flags(own));
    flags.parse(argc, argv, 2);
    if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "'");
    const ServeOptions so = serve_options_from_flags(flags);
    const BackendChoice choice = backend_from_flags(flags);
    const Disaggregation disaggregation = disaggregation_from_flags(flags, choice, /*threads_too=*/false);
    glass::serve::EngineOptions eo = engine_options_from_flags(flags);

    // The model: a file (-m, default the shipped one), or --shape NAME: random weights of that
    // shape made in memory (as serve-bench), to measure the server at a real model's size.
    if (flags.has("-m") && flags.has("--shape")) throw UsageError("give -m MODEL or --shape NAME, not both");
    const std::string model_path = flags.has("--shape") ? flags.get("--shape", "") : flags.get("-m", kDefaultModel);
    const glass::Model model = model_from_flags(flags, choice, model_path, /*seed=*/1);
    const std::unique_ptr<glass::Tokenizer> tok = tokenizer_from_flags(flags, model_path, model);
    const std::string precision = precision_from_flags(flags, model);
    const glass::fast::FastOptions fo = fast_options_from_flags(flags, choice, precision);
    // With --tp/--pp the engine and the server run at rank 0; the other ranks follow its steps.
    // With --role, rank 0 serves and rank 1 computes its prompts; --disaggregate, the same in one
    // process (a prefill worker thread).
    with_serving_backend(disaggregation, choice, model, fo, eo, [&](glass::serve::PagedBackend& backend) {
        std::vector<std::unique_ptr<glass::Model>> draft_models;  // --draft: speculative decoding in the engine
        engine_draft_from_flags(flags, choice.name, model, fo, draft_models, eo);
        glass::serve::EngineThread engine(backend, *tok, eo, so.max_queue);

        Shared s{{std::filesystem::path(model_path).stem().string(), engine.request_positions(), model.config.vocab_size,
                  static_cast<std::int64_t>(std::time(nullptr)), {}},
                 *tok,
                 engine,
                 flags.get("--api-key", ""),
                 static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count())};
        // A chat's messages become the prompt through the model's chat template (or --chat-template
        // FILE); a model without one (llama2.c, --shape) keeps the plain layout (openai_chat.hpp).
        s.model.chat = chat_format_from_flags(flags, flags.has("--shape") ? "" : model_path, *tok);

        // The routes; the startup line on stderr; then serve until a signal stops it.
        httplib::Server svr;
        configure(svr, so.max_queue);
        add_routes(svr, s);
        add_error_handlers(svr, s);
        const int bound = bind_listener(svr, so);
        log_startup(s, model.config, choice, precision, fo.kv, eo, so.max_queue, flags.get("--draft", ""), disaggregation);
        listen_until_stopped(svr, s, stop_signals, so, bound);
    });
    return 0;
}

}  // namespace cli
