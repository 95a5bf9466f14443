// ThreadCommunicator (glass/dist/thread_communicator.hpp): the transport checks of
// communicator_checks.hpp on groups of 1 to 4 threads, then the ways a group fails: a rank that
// throws, a rank that never answers, messages of the wrong size, a rank that talks to itself.
// Every failure must end the whole group with an Error naming the rank, never hang.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "communicator_checks.hpp"
#include "glass/dist/thread_communicator.hpp"

using glass::dist::Communicator;
using glass::dist::run_ranks;
using namespace std::chrono_literals;

namespace {

// A hang guard for the tests that expect success: far above their run time, far below ctest's limit.
const glass::dist::ThreadRanksOptions kGuard{.patience = 30s};

/// The message of the Error run_ranks throws (fails the test when it throws nothing).
std::string failure_of(int size, const std::function<void(Communicator&)>& body, std::chrono::milliseconds patience) {
    try {
        run_ranks(size, body, {.patience = patience});
    } catch (const glass::Error& e) {
        return e.what();
    }
    FAIL("run_ranks returned normally");
    return "";
}

}  // namespace

TEST_CASE("threads: every transport check, on groups of 1 to 4 ranks") {
    for (int size = 1; size <= 4; ++size) {
        CAPTURE(size);
        CHECK_NOTHROW(run_ranks(size, dist_checks::every_check, kGuard));
    }
}

TEST_CASE("threads: the transport names itself and numbers its ranks") {
    std::vector<int> seen(3, -1);
    run_ranks(3, [&](Communicator& comm) {
        CHECK(std::string(comm.transport()) == "threads");
        CHECK(comm.size() == 3);
        seen[static_cast<size_t>(comm.rank())] = comm.rank();
    }, kGuard);
    CHECK(seen == std::vector<int>{0, 1, 2});
}

TEST_CASE("threads: a rank that throws ends the group with an Error naming it") {
    // Ranks 0 and 1 wait for rank 2 (a recv, a broadcast from it); rank 2 fails first.
    const std::string what = failure_of(3, [](Communicator& comm) {
        std::vector<float> data(4);
        if (comm.rank() == 2) glass::fail("rank 2 gives up on purpose");
        if (comm.rank() == 0) comm.recv(2, std::span(data));
        else comm.broadcast(std::span(data), 2);
    }, 30s);
    CHECK(what.find("rank 2") == 0);
    CHECK(what.find("gives up on purpose") != std::string::npos);
}

TEST_CASE("threads: a rank that never answers ends the group after the patience") {
    const auto start = std::chrono::steady_clock::now();
    const std::string what = failure_of(2, [](Communicator& comm) {
        float value = 0.0f;
        if (comm.rank() == 0) comm.recv(1, std::span(&value, 1));  // rank 1 returns without sending
    }, 2s);
    CHECK(what.find("rank 0") == 0);
    CHECK(what.find("for rank 1, which did not answer") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start < 60s);  // a hang guard, not a timing
}

TEST_CASE("threads: a collective whose peer is gone ends the waiting ranks too") {
    // Rank 0 never reaches all_reduce_sum; ranks 1 and 2 wait inside it and must wake.
    const std::string what = failure_of(3, [](Communicator& comm) {
        std::vector<float> values(8, 1.0f);
        if (comm.rank() == 0) throw std::runtime_error("rank 0 stops before the all-reduce");
        comm.all_reduce_sum(std::span(values));
    }, 30s);
    CHECK(what.find("rank 0: rank 0 stops before the all-reduce") == 0);
}

TEST_CASE("threads: a message of the wrong size is an error, not a silent truncation") {
    const std::string what = failure_of(2, [](Communicator& comm) {
        std::vector<float> data(comm.rank() == 0 ? 4 : 8);
        if (comm.rank() == 0) comm.send(1, std::span<const float>(data));
        else comm.recv(0, std::span(data));
    }, 30s);
    CHECK(what.find("expected 32 bytes from rank 0 but got 16") != std::string::npos);
}

TEST_CASE("threads: a rank cannot send to itself or to a rank outside the group") {
    const std::string to_self = failure_of(2, [](Communicator& comm) {
        float value = 0.0f;
        if (comm.rank() == 1) comm.send(1, std::span<const float>(&value, 1));
    }, 30s);
    CHECK(to_self.find("rank 1 cannot talk to rank 1") != std::string::npos);
    const std::string outside = failure_of(2, [](Communicator& comm) {
        float value = 0.0f;
        if (comm.rank() == 0) comm.recv(5, std::span(&value, 1));
    }, 30s);
    CHECK(outside.find("rank 0 cannot talk to rank 5 (group of 2)") != std::string::npos);
}
