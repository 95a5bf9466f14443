// MpiCommunicator (glass/dist/mpi_communicator.hpp), run by ctest as `mpirun -n 2 ...`: both
// processes run the same test cases in the same order, each as one rank. The transport checks of
// communicator_checks.hpp, once as glass uses MPI and once with messages cut into small parts
// (the path of messages longer than MPI's int counts), then the failures a group survives: a
// silent peer (the patience runs out, naming it) and a message of the wrong size. The failures
// that end the group are separate ctest tests (mpi_group_failure.cpp).
//
// Its own main: MPI starts before doctest and ends after it; rank 0 prints the usual report, the
// other ranks print only their failures.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "communicator_checks.hpp"
#include "glass/dist/mpi_communicator.hpp"

using glass::dist::MpiCommunicator;
using namespace std::chrono_literals;

namespace {

// A hang guard below mpirun's --timeout, so a rank stuck in a failed test reports itself.
constexpr std::chrono::milliseconds kPatience = 20s;

MpiCommunicator* g_world = nullptr;  // the group every test case uses (made in main)

MpiCommunicator& world() { return *g_world; }

}  // namespace

TEST_CASE("mpi: two processes, numbered, named") {
    CHECK(world().size() == 2);
    CHECK((world().rank() == 0 || world().rank() == 1));
    CHECK(std::string(world().transport()) == "mpi");
    CHECK(glass::dist::MpiRuntime::launched_by_mpirun());
}

TEST_CASE("mpi: every transport check") {
    CHECK_NOTHROW(dist_checks::every_check(world()));
}

TEST_CASE("mpi: every transport check, with messages cut into parts of 1000 bytes") {
    // 1 MiB sends and 5000-element collectives travel as many MPI calls (gather and all_gather of
    // more than the limit fall back to send/recv); the results must not change.
    MpiCommunicator small_parts({.patience = kPatience, .max_message_bytes = 1000});
    CHECK_NOTHROW(dist_checks::every_check(small_parts));
}

TEST_CASE("mpi: a silent peer ends the wait after the patience, naming that rank") {
    MpiCommunicator impatient({.patience = 1s});
    std::string what;
    if (impatient.rank() == 0) {
        float value = 0.0f;
        const std::clock_t cpu_start = std::clock();  // this process's CPU time, all threads
        try {
            impatient.recv(1, std::span(&value, 1));  // rank 1 never sends on this communicator
        } catch (const glass::Error& e) {
            what = e.what();
        }
        const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
        CHECK(what == "rank 0 waited 1 s for rank 1, which did not answer (recv)");
        // Waiting sleeps between polls: a few percent of a core. A spinning wait would use the
        // whole second; the bound sits far between the two.
        MESSAGE("CPU time of a 1 s wait: ", cpu_seconds, " s");
        CHECK(cpu_seconds < 0.4);
        // The communicator now refuses every call rather than risk a mismatched message.
        CHECK_THROWS_WITH_AS(impatient.barrier(), doctest::Contains("stopped after an earlier failure"), glass::Error);
    }
    world().synchronize();  // rank 1 waits here (on the group's own communicator) for rank 0
}

TEST_CASE("mpi: a message longer than the receiver expects is an error naming the sender") {
    MpiCommunicator comm({.patience = kPatience});  // MPI errors stop a communicator: not the group's
    std::vector<float> data(comm.rank() == 0 ? 8 : 4, 1.0f);
    if (comm.rank() == 0) comm.send(1, std::span<const float>(data));
    else CHECK_THROWS_WITH_AS(comm.recv(0, std::span(data)), doctest::Contains("recv with rank 0: MPI_ERR_TRUNCATE"), glass::Error);
    world().synchronize();
}

TEST_CASE("mpi: a message shorter than the receiver expects is an error too") {
    MpiCommunicator comm({.patience = kPatience});
    std::vector<float> data(comm.rank() == 0 ? 2 : 4, 1.0f);
    if (comm.rank() == 0) comm.send(1, std::span<const float>(data));
    else CHECK_THROWS_WITH_AS(comm.recv(0, std::span(data)), doctest::Contains("expected 16 bytes from rank 0"), glass::Error);
    world().synchronize();
}

int main(int argc, char** argv) {
    glass::dist::MpiRuntime runtime(&argc, &argv);
    int failed = 1;
    {
        MpiCommunicator world_comm({.patience = kPatience});
        g_world = &world_comm;
        doctest::Context context(argc, argv);
        if (world_comm.rank() != 0) context.setOption("minimal", true);
        failed = context.run();
        g_world = nullptr;
    }
    return failed;
}
