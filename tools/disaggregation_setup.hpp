// Disaggregated prefill/decode from flags, for `glass serve` and `glass serve-bench`:
//
//   --disaggregate D:P      one process: the engine's backend runs on D threads, and a prefill
//                           worker with its own backend and P threads computes every prompt
//                           (serve/remote_prefill.hpp: ThreadPrefill)
//       with --tp T --pp P, each side is a grid of G = T × P thread ranks, as --role's below
//                           (D threads per decode rank, P per prefill rank)
//   --role decode|prefill   two processes under mpirun (dist/disaggregated.hpp):
//       mpirun -np 1 glass serve --role decode ... : -np 1 glass serve --role prefill ...
//                           rank 0 decodes (the engine and the server), rank 1 computes the
//                           prompts; both load the same model with the same --kv
//       with --tp T --pp P on both sides, each side is a grid of G = T × P processes:
//       mpirun -np G glass serve --role decode --tp T ... : -np G glass serve --role prefill --tp T ...
//                           ranks 0 .. G-1 decode (a ParallelPagedBackend, rank 0 drives it),
//                           ranks G .. 2G-1 prefill (rank G drives theirs); ranks 0 and G talk
//
// Either way the engine computes no prompt: each request's K/V arrives from the worker, and the
// text equals serving without it, bit for bit.
#pragma once

#include <charconv>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cli.hpp"
#include "glass/glass.hpp"
#include "parallel_setup.hpp"
#include "serve_setup.hpp"

namespace cli {

struct Disaggregation {
    std::string role;         // --role: "decode" or "prefill"; empty without it
    int side_ranks = 1;       // ranks per side (tp × pp with --tp/--pp, else 1)
    int decode_threads = 0;   // --disaggregate D:P; 0 without it
    int prefill_threads = 0;
    bool split = false;       // --tp/--pp/--rank-memory: each side a grid of ranks
    bool in_process() const { return decode_threads > 0; }
    bool over_ranks() const { return !role.empty(); }
    // Rank 0 of 2G ranks decodes and rank G computes prompts: --role, or --disaggregate with a
    // grid (its ranks threads of one process).
    bool two_sides() const { return over_ranks() || (in_process() && split); }
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
    d.split = choice.on_grid;
    d.side_ranks = choice.on_grid ? choice.grid.tp * choice.grid.pp : 1;
    if (flags.has("--disaggregate")) {
        if (choice.on_grid && started_by_mpirun())
            throw UsageError("--disaggregate D:P runs both sides in one process (thread ranks with --tp/--pp); under "
                             "mpirun, give each side --role decode|prefill");
        if (!threads_too && flags.has("--threads"))
            throw UsageError("--disaggregate D:P gives the threads (D to decode, P to the prefill worker): leave --threads out");
        std::tie(d.decode_threads, d.prefill_threads) = thread_split_from_flags(flags);
        return d;
    }
    d.role = flags.get("--role", "");
    if (d.role != "decode" && d.role != "prefill") throw UsageError("--role must be decode or prefill, got '" + d.role + "'");
    if (!started_by_mpirun())
        throw UsageError("--role needs two processes started by mpirun: mpirun -np 1 glass serve --role decode ... : "
                         "-np 1 glass serve --role prefill ... (-np tp × pp each with --tp/--pp); in one process, use "
                         "--disaggregate D:P");
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

// --role, every rank: ranks 0 .. G-1 must have said decode and G .. 2G-1 prefill.
inline void check_roles(glass::dist::Communicator& comm, const Disaggregation& d) {
    const int mine = d.role == "decode" ? 0 : 1;
    std::vector<int> roles(static_cast<size_t>(comm.size()));
    comm.all_gather(std::span<const int>(&mine, 1), std::span<int>(roles));
    const int g = d.side_ranks;
    for (int r = 0; r < comm.size(); ++r)
        if (roles[static_cast<size_t>(r)] != (r < g ? 0 : 1))
            glass::fail("--role: ranks 0 .. ", g - 1, " must decode and ranks ", g, " .. ", 2 * g - 1,
                        " prefill (mpirun -np ", g, " glass ... --role decode : -np ", g,
                        " glass ... --role prefill), got rank ", r, " ", roles[static_cast<size_t>(r)] == 0 ? "decode" : "prefill");
}

// --role (processes), or --disaggregate with --tp/--pp (threads): the decode side (ranks 0 .. G-1)
// runs body(backend) with its prompts sent to the prefill side (ranks G .. 2G-1), which computes
// them until the decode side is done. With --tp/--pp each side is its own grid, a
// ParallelPagedBackend over a subgroup whose rank 0 (0 and G) drives it and talks to the other
// side; the rest follow their grid. Ranks 0 and G say on stderr what they did.
inline void with_prefill_rank(const Disaggregation& d, const BackendChoice& choice, const glass::Model& model,
                              const glass::fast::FastOptions& side_options, glass::serve::EngineOptions& eo,
                              const std::function<void(glass::serve::PagedBackend&)>& body) {
    const int g = d.side_ranks;
    run_group(2 * g, d.over_ranks() ? "--role decode|prefill" : "--disaggregate", [&](glass::dist::Communicator& comm) {
        if (d.over_ranks()) check_roles(comm, d);  // (thread ranks know their side by number)
        const bool decode = comm.rank() < g;
        glass::fast::FastOptions fo = side_options;
        if (d.in_process()) fo.threads = decode ? d.decode_threads : d.prefill_threads;
        std::unique_ptr<glass::dist::SubCommunicator> side;  // this side's grid (outlives its backend)
        std::unique_ptr<glass::serve::PagedBackend> backend;
        glass::dist::ParallelPagedBackend* grid = nullptr;
        if (!choice.on_grid) {
            backend = make_paged_backend(choice.name, model, fo);
        } else {
            std::vector<int> members(static_cast<size_t>(g));
            std::iota(members.begin(), members.end(), decode ? 0 : g);
            side = std::make_unique<glass::dist::SubCommunicator>(comm, members);
            glass::dist::ParallelPagedOptions options = choice.grid_options;
            options.kv = fo.kv;
            auto split = std::make_unique<glass::dist::ParallelPagedBackend>(model, *side, choice.grid, options, rank_parts(choice, fo));
            grid = split.get();
            backend = std::move(split);
            if (side->rank() != 0) {  // a follower of its side's grid, until that side's rank 0 finishes
                grid->follow();
                report_stage_clocks(*side, *grid, options.micro_batches, decode ? 0 : g, decode ? "decode" : "prefill");
                return;
            }
        }
        if (!decode) {
            const glass::dist::DisaggregatedCounters c =
                glass::dist::run_prefill_rank(comm, 0, *backend, eo.block_size, eo.scheduler.max_tokens_per_step);
            if (grid) {
                grid->finish();
                report_stage_clocks(*side, *grid, choice.grid_options.micro_batches, g, "prefill");
            }
            std::fprintf(stderr, "[rank %d, prefill] %lld prompts, %lld positions computed, %lld shipped, %.3f MB sent\n",
                         comm.rank(), static_cast<long long>(c.jobs), static_cast<long long>(c.positions),
                         static_cast<long long>(c.shipped_rows), c.shipped_bytes / 1e6);
            return;
        }
        glass::dist::DisaggregatedCounters c;
        {
            glass::dist::CommPrefill prefill(comm, g, model.config, fo.kv);
            eo.remote_prefill = &prefill;
            body(*backend);
            eo.remote_prefill = nullptr;
            c = prefill.counters();
        }  // tells rank g to stop
        if (grid) {
            grid->finish();
            report_stage_clocks(*side, *grid, choice.grid_options.micro_batches, 0, "decode");
        }
        std::fprintf(stderr, "[rank 0, decode] %lld prompts prefilled by rank %d, %lld positions received, %.3f MB\n",
                     static_cast<long long>(c.jobs), g, static_cast<long long>(c.shipped_rows), c.shipped_bytes / 1e6);
    });
}

// body(backend) on the backend the flags name: with_paged_backend (one process, or a grid of
// ranks), or with a prefill worker beside it (--disaggregate, --role).
inline void with_serving_backend(const Disaggregation& d, const BackendChoice& choice, const glass::Model& model,
                                 const glass::fast::FastOptions& fo, glass::serve::EngineOptions& eo,
                                 const std::function<void(glass::serve::PagedBackend&)>& body) {
    if (d.two_sides()) return with_prefill_rank(d, choice, model, fo, eo, body);
    if (d.in_process()) return with_thread_prefill(d, choice, model, fo, eo, body);
    with_paged_backend(choice, model, fo, body);
}

// The startup line's words for it.
inline std::string disaggregation_details(const Disaggregation& d) {
    if (d.in_process() && d.split)
        return " | disaggregated: decode ranks 0-" + std::to_string(d.side_ranks - 1) + " (" +
               std::to_string(d.decode_threads) + " threads each), prefill ranks " + std::to_string(d.side_ranks) + "-" +
               std::to_string(2 * d.side_ranks - 1) + " (" + std::to_string(d.prefill_threads) + " threads each)";
    if (d.in_process())
        return " | disaggregated: decode " + std::to_string(d.decode_threads) + " threads, prefill worker " +
               std::to_string(d.prefill_threads) + " threads";
    if (d.over_ranks() && d.side_ranks == 1) return " | disaggregated: decode rank 0, prefill rank 1";
    if (d.over_ranks())
        return " | disaggregated: decode ranks 0-" + std::to_string(d.side_ranks - 1) + ", prefill ranks " +
               std::to_string(d.side_ranks) + "-" + std::to_string(2 * d.side_ranks - 1);
    return "";
}

}  // namespace cli
