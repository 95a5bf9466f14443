// One rank of a two-process group fails on purpose; expect_group_failure.cmake runs it under
// mpirun and checks that every process ends soon, non-zero, with the failing rank named on stderr.
//
//   mpi_group_failure abort_group   rank 1 calls abort_group while rank 0 waits for it in recv
//   mpi_group_failure silent_rank   rank 1 stays alive and says nothing; rank 0's recv runs out of
//                                   patience (2 s) and rank 0 ends the group, naming rank 1
//   mpi_group_failure rank_exits    rank 1 leaves main by an exception (MPI not finalized) while
//                                   rank 0 waits for it; mpirun ends rank 0
//
// The first two end the group the way the CLI does: catch the Error, call abort_group.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "glass/dist/mpi_communicator.hpp"

using namespace std::chrono_literals;

namespace {

void run_case(glass::dist::MpiCommunicator& comm, const std::string& mode) {
    comm.synchronize();  // both processes are up
    if (comm.rank() == 0) {
        float value = 0.0f;
        comm.recv(1, std::span(&value, 1));
        glass::fail("rank 1 answered, but it was meant to fail");
    }
    if (mode == "abort_group") comm.abort_group(3, "rank 1 gives up on purpose");
    if (mode == "rank_exits") glass::fail("rank 1 leaves main on purpose");
    if (mode == "silent_rank")
        for (;;) std::this_thread::sleep_for(1s);  // alive, silent: ended when rank 0 aborts the group
    glass::fail("unknown case '", mode, "' (abort_group, silent_rank or rank_exits)");
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    int rank = -1;
    try {
        glass::dist::MpiRuntime runtime(&argc, &argv);
        glass::dist::MpiCommunicator comm({.patience = mode == "silent_rank" ? 2s : 60s});
        rank = comm.rank();
        try {
            run_case(comm, mode);
        } catch (const std::exception& e) {
            if (mode != "rank_exits") comm.abort_group(2, e.what());
            throw;  // out of MpiRuntime's scope by an exception: MPI_Finalize is skipped
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "glass: rank %d: %s\n", rank, e.what());
        return 1;
    }
    return 0;
}
