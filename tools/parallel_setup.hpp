// The group of ranks behind `--tp N` and `--pp N` (dist/): Open MPI processes when mpirun started
// this one, else N threads of this process.
//
//   mpirun -np 2 glass generate ... --tp 2   each process is one rank (MpiCommunicator)
//   glass generate ... --pp 2                ranks 0 and 1 are threads here (run_ranks)
//
// body(comm) runs on every rank. Rank 0 is the driver and the only one that prints; a rank that
// fails under mpirun ends the whole group (abort_group: "glass: rank R: ..." on stderr, every
// process exits non-zero), so no rank waits for a dead peer.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "cli.hpp"
#include "glass/glass.hpp"
#ifdef GLASS_HAVE_MPI
#include "glass/dist/mpi_communicator.hpp"
#endif

namespace cli {

// --tp or --pp: ranks of the group, 1 .. 64 (absent: 1, no group).
inline int ranks_from_flags(const Flags& flags, const std::string& flag) {
    const int ranks = flags.number<int>(flag).value_or(1);
    if (ranks < 1 || ranks > 64) throw UsageError(flag + " must be in [1, 64], got " + std::to_string(ranks));
    return ranks;
}

// --rank-memory BYTES: what one rank may hold (weights + KV memory); 0 when the flag is absent.
inline std::int64_t rank_memory_from_flags(const Flags& flags) {
    const std::int64_t bytes = flags.number<std::int64_t>("--rank-memory").value_or(0);
    if (flags.has("--rank-memory") && bytes < 1)
        throw UsageError("--rank-memory must be a positive number of bytes, got " + flags.get("--rank-memory", ""));
    return bytes;
}

inline bool started_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

// `what` ("--tp 2 --pp 1") names the request in messages.
inline void run_group(int ranks, const std::string& what, const std::function<void(glass::dist::Communicator&)>& body) {
    if (!started_by_mpirun()) {
        glass::dist::run_ranks(ranks, body);
        return;
    }
#ifdef GLASS_HAVE_MPI
    glass::dist::MpiRuntime runtime;
    glass::dist::MpiCommunicator comm;
    if (comm.size() != ranks)
        comm.abort_group(2, what + " needs mpirun -np " + std::to_string(ranks) + ", but this group has " +
                                std::to_string(comm.size()) + " processes");
    try {
        body(comm);
    } catch (const std::exception& e) {
        comm.abort_group(1, e.what());
    }
#else
    glass::fail("mpirun started this glass, but it was built without Open MPI (install libopenmpi-dev and "
                "rebuild); without mpirun, ", what, " runs its ", ranks, " ranks as threads of one process");
#endif
}

// At rank 0 of a group, after a run of `seconds`: what talking to the other ranks cost
// (communicator.hpp's counters, the whole group's and this rank's stage's), calls, bytes and
// seconds per kind of call, and their share of the run, on stderr.
inline void print_group_report(const glass::dist::CommCounters& world, const glass::dist::CommCounters& group,
                               glass::dist::ParallelShape shape, double seconds) {
    const auto line = [&](const char* name, const glass::dist::CallCounter& c) {
        if (c.calls == 0) return;
        std::fprintf(stderr, "[rank 0 of tp %d × pp %d] %-10s %6lld calls %10.3f MB %8.2f ms (%.1f%% of the run)\n",
                     shape.tp, shape.pp, name, static_cast<long long>(c.calls), c.bytes / 1e6, c.seconds * 1e3,
                     100.0 * c.seconds / seconds);
    };
    line("all-reduce", group.all_reduce);
    line("gather", group.gather);
    line("broadcast", world.broadcast);
    line("send", world.send);
    line("recv", world.recv);
}

}  // namespace cli
