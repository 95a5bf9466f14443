// Disaggregated prefill/decode from flags, for `glass serve` and `glass serve-bench`:
//
//   --disaggregate D:P      one process: the engine's backend runs on D threads, and a prefill
//                           worker with its own backend and P threads computes every prompt
//                           (serve/remote_prefill.hpp: ThreadPrefill)
//   --role decode|prefill   two processes under mpirun (dist/disaggregated.hpp):
//       mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
//                           rank 0 decodes (the engine and the server), rank 1 computes the
//                           prompts; both load the same model with the same --kv
//
// Either way the engine computes no prompt: each request's K/V arrives from the worker, and the
// text equals serving without it, bit for bit.
#pragma once

#include <charconv>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "cli.hpp"
#include "glass/glass.hpp"
#include "parallel_setup.hpp"
#include "serve_setup.hpp"

namespace cli {

struct Disaggregation {
    std::string role;         // --role: "decode" or "prefill"; empty without it
    int decode_threads = 0;   // --disaggregate D:P; 0 without it
    int prefill_threads = 0;
    bool in_process() const { return decode_threads > 0; }
    bool over_ranks() const { return !role.empty(); }
};

// The flags each command that serves takes (true: the flag takes a value).
inline void add_disaggregation_flags(std::map<std::string, bool>& flags) {
    flags.insert({{"--role", true}, {"--disaggregate", true}});
}

// --disaggregate D:P, each in [1, 256].
inline std::pair<int, int> thread_split_from_flags(const Flags& flags) {
    const std::string v = flags.get("--disaggregate", "");
    const size_t colon = v.find(':');
    int d = 0, p = 0;
    const auto parse = [](const std::string& s, int& out) {
        const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return ec == std::errc() && ptr == s.data() + s.size() && !s.empty() && out >= 1 && out <= 256;
    };
    if (colon == std::string::npos || !parse(v.substr(0, colon), d) || !parse(v.substr(colon + 1), p))
        throw UsageError("--disaggregate must be D:P, the decode and the prefill worker's threads, each in [1, 256], got '" +
                         v + "'");
    return {d, p};
}

// What the flags ask for, checked before anything is loaded. `threads_too`: the command also
// takes --threads beside --disaggregate (serve-bench's combined baseline runs on it).
inline Disaggregation disaggregation_from_flags(const Flags& flags, const BackendChoice& choice, bool threads_too) {
    Disaggregation d;
    if (!flags.has("--role") && !flags.has("--disaggregate")) return d;
    if (flags.has("--role") && flags.has("--disaggregate"))
        throw UsageError("give --role (two processes under mpirun) or --disaggregate D:P (one process), not both");
    if (choice.on_grid) throw UsageError("--role and --disaggregate do not combine with --tp, --pp or --rank-memory yet");
    if (flags.has("--disaggregate")) {
        if (!threads_too && flags.has("--threads"))
            throw UsageError("--disaggregate D:P gives the threads (D to decode, P to the prefill worker): leave --threads out");
        std::tie(d.decode_threads, d.prefill_threads) = thread_split_from_flags(flags);
        return d;
    }
    d.role = flags.get("--role", "");
    if (d.role != "decode" && d.role != "prefill") throw UsageError("--role must be decode or prefill, got '" + d.role + "'");
    if (!started_by_mpirun())
        throw UsageError("--role needs two processes started by mpirun: mpirun -np 1 glass serve --role decode ... : "
                         "-np 1 glass serve --role prefill ...; in one process, use --disaggregate D:P");
    return d;
}

// --disaggregate: body(backend) with the prefill worker on its own thread and backend.
inline void with_thread_prefill(const Disaggregation& d, const BackendChoice& choice, const glass::Model& model,
                                glass::fast::FastOptions fo, glass::serve::EngineOptions& eo,
                                const std::function<void(glass::serve::PagedBackend&)>& body) {
    glass::fast::FastOptions worker_fo = fo;
    fo.threads = d.decode_threads;
    worker_fo.threads = d.prefill_threads;
    const std::unique_ptr<glass::serve::PagedBackend> backend = make_paged_backend(choice.name, model, fo);
    const std::unique_ptr<glass::serve::PagedBackend> worker = make_paged_backend(choice.name, model, worker_fo);
    glass::serve::ThreadPrefill prefill(*worker, eo.block_size, eo.scheduler.max_tokens_per_step);
    eo.remote_prefill = &prefill;
    body(*backend);
    eo.remote_prefill = nullptr;
}

// --role: rank 0 runs body(backend) with its prompts sent to rank 1, which computes them until
// rank 0 is done. Each rank says on stderr what it did.
inline void with_prefill_rank(const Disaggregation& d, const BackendChoice& choice, const glass::Model& model,
                              const glass::fast::FastOptions& fo, glass::serve::EngineOptions& eo,
                              const std::function<void(glass::serve::PagedBackend&)>& body) {
    run_group(2, "--role decode|prefill", [&](glass::dist::Communicator& comm) {
        const int mine = d.role == "decode" ? 0 : 1;
        int roles[2] = {};
        comm.all_gather(std::span<const int>(&mine, 1), std::span<int>(roles));
        const auto name = [](int role) { return role == 0 ? "decode" : "prefill"; };
        if (roles[0] != 0 || roles[1] != 1)
            glass::fail("--role: rank 0 must decode and rank 1 prefill (mpirun -np 1 glass ... --role decode : -np 1 "
                        "glass ... --role prefill), got rank 0 ", name(roles[0]), " and rank 1 ", name(roles[1]));
        const std::unique_ptr<glass::serve::PagedBackend> backend = make_paged_backend(choice.name, model, fo);
        if (comm.rank() == 1) {
            const glass::dist::DisaggregatedCounters c =
                glass::dist::run_prefill_rank(comm, 0, *backend, eo.block_size, eo.scheduler.max_tokens_per_step);
            std::fprintf(stderr, "[rank 1, prefill] %lld prompts, %lld positions computed, %lld shipped, %.3f MB sent\n",
                         static_cast<long long>(c.jobs), static_cast<long long>(c.positions),
                         static_cast<long long>(c.shipped_rows), c.shipped_bytes / 1e6);
            return;
        }
        glass::dist::DisaggregatedCounters c;
        {
            glass::dist::CommPrefill prefill(comm, 1, model.config, fo.kv);
            eo.remote_prefill = &prefill;
            body(*backend);
            eo.remote_prefill = nullptr;
            c = prefill.counters();
        }  // tells rank 1 to stop
        std::fprintf(stderr, "[rank 0, decode] %lld prompts prefilled by rank 1, %lld positions received, %.3f MB\n",
                     static_cast<long long>(c.jobs), static_cast<long long>(c.shipped_rows), c.shipped_bytes / 1e6);
    });
}

// body(backend) on the backend the flags name: with_paged_backend (one process, or a grid of
// ranks), or with a prefill worker beside it (--disaggregate, --role).
inline void with_serving_backend(const Disaggregation& d, const BackendChoice& choice, const glass::Model& model,
                                 const glass::fast::FastOptions& fo, glass::serve::EngineOptions& eo,
                                 const std::function<void(glass::serve::PagedBackend&)>& body) {
    if (d.in_process()) return with_thread_prefill(d, choice, model, fo, eo, body);
    if (d.over_ranks()) return with_prefill_rank(d, choice, model, fo, eo, body);
    with_paged_backend(choice, model, fo, body);
}

// The startup line's words for it.
inline std::string disaggregation_details(const Disaggregation& d) {
    if (d.in_process())
        return " | disaggregated: decode " + std::to_string(d.decode_threads) + " threads, prefill worker " +
               std::to_string(d.prefill_threads) + " threads";
    if (d.over_ranks()) return " | disaggregated: decode rank 0, prefill rank 1";
    return "";
}

}  // namespace cli
