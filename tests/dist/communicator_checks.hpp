// The checks every Communicator transport must pass, written once for any transport: each
// function is called by every rank of a group with its own Communicator. A wrong result throws a
// glass::Error naming the rank and what differed (run_ranks, or the MPI test's CHECK_NOTHROW,
// turns it into a test failure), so the same code serves ranks that are threads and ranks that
// are processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <utility>
#include <vector>

#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"

namespace dist_checks {

using glass::dist::Communicator;

template <typename... Parts>
void expect(bool ok, const Communicator& comm, Parts&&... parts) {
    if (!ok) glass::fail("rank ", comm.rank(), ": ", std::forward<Parts>(parts)...);
}

/// The rank a rank exchanges messages with: ranks pair up (0,1), (2,3), ...; -1 for the last rank
/// of an odd group.
inline int partner(const Communicator& comm) {
    const int p = comm.rank() ^ 1;
    return p < comm.size() ? p : -1;
}

/// Byte i of a message of `size` bytes sent by `from`: different for every sender, size and index.
inline std::byte pattern(int from, size_t size, size_t i) {
    return static_cast<std::byte>((static_cast<size_t>(from) * 131 + size * 7 + i * 13 + i / 251) & 0xff);
}

inline void expect_pattern(const Communicator& comm, std::span<const std::byte> got, int from) {
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != pattern(from, got.size(), i))
            glass::fail("rank ", comm.rank(), ": byte ", i, " of ", got.size(), " from rank ", from, " differs");
}

/// Messages of 0, 1, 4 KiB and 1 MiB, there and back within each pair: the bytes arrive intact.
inline void send_recv_round_trip(Communicator& comm) {
    const int peer = partner(comm);
    if (peer < 0) return;
    for (const size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20}) {
        std::vector<std::byte> mine(size), theirs(size);
        for (size_t i = 0; i < size; ++i) mine[i] = pattern(comm.rank(), size, i);
        if (comm.rank() < peer) {  // the lower rank speaks first, the higher one answers
            comm.send(peer, std::span<const std::byte>(mine));
            comm.recv(peer, std::span(theirs));
        } else {
            comm.recv(peer, std::span(theirs));
            comm.send(peer, std::span<const std::byte>(mine));
        }
        expect_pattern(comm, theirs, peer);
    }
}

/// Several messages from one rank to another arrive in the order they were sent.
inline void messages_keep_their_order(Communicator& comm) {
    const int peer = partner(comm);
    if (peer < 0) return;
    constexpr int kMessages = 6;
    for (int m = 0; m < kMessages; ++m) {
        std::vector<std::int32_t> message(static_cast<size_t>(1 + m * 100), 0);
        if (comm.rank() < peer) {
            for (size_t i = 0; i < message.size(); ++i) message[i] = m * 100'000 + static_cast<std::int32_t>(i);
            comm.send(peer, std::span<const std::int32_t>(message));
        } else {
            comm.recv(peer, std::span(message));
            for (size_t i = 0; i < message.size(); ++i)
                expect(message[i] == m * 100'000 + static_cast<std::int32_t>(i), comm, "message ", m, " element ", i,
                       " is ", message[i]);
        }
    }
}

/// Rank r's slice for gather and all_gather: n values that say whose they are.
inline std::vector<double> slice_of(int rank, size_t n) {
    std::vector<double> slice(n);
    for (size_t i = 0; i < n; ++i) slice[i] = rank * 1000.0 + static_cast<double>(i) + 0.5;
    return slice;
}

inline void expect_rank_order(const Communicator& comm, std::span<const double> all, size_t n, const char* what) {
    for (int r = 0; r < comm.size(); ++r) {
        const std::vector<double> want = slice_of(r, n);
        expect(std::memcmp(all.data() + static_cast<size_t>(r) * n, want.data(), n * sizeof(double)) == 0, comm, what,
               ": slice ", r, " is not rank ", r, "'s");
    }
}

/// broadcast from every root, gather at every root, all_gather: exact contents, in rank order.
inline void collectives_in_rank_order(Communicator& comm) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{5000}}) {
        for (int root = 0; root < comm.size(); ++root) {
            std::vector<double> data = comm.rank() == root ? slice_of(root, n) : std::vector<double>(n, -1.0);
            comm.broadcast(std::span(data), root);
            const std::vector<double> want = slice_of(root, n);
            expect(data == want, comm, "broadcast of ", n, " from root ", root, " differs");

            const std::vector<double> mine = slice_of(comm.rank(), n);
            std::vector<double> all(comm.rank() == root ? n * static_cast<size_t>(comm.size()) : 0);
            comm.gather(std::span<const double>(mine), std::span(all), root);
            if (comm.rank() == root) expect_rank_order(comm, all, n, "gather");
        }
        const std::vector<double> mine = slice_of(comm.rank(), n);
        std::vector<double> all(n * static_cast<size_t>(comm.size()), -1.0);
        comm.all_gather(std::span<const double>(mine), std::span(all));
        expect_rank_order(comm, all, n, "all_gather");
    }
}

/// Rank r's partial for element i of all_reduce_sum. Huge and tiny values side by side, so that
/// in fp32 the sum depends on the order of the additions (1e8 + 1 rounds back to 1e8).
inline float partial(int rank, size_t i) {
    constexpr float kValues[] = {1.0f, 1e8f, -1e8f, 0.25f, 3e7f, -3.0f, 7e7f};  // (1 + 1e8) - 1e8 = 0, not 1
    return kValues[(static_cast<size_t>(rank) + i) % std::size(kValues)] * static_cast<float>(1 + i % 4);
}

/// all_reduce_sum equals the sum in rank order computed here from known partials, bit for bit,
/// and every rank holds the same bits. With three ranks or more, the test also proves it has
/// teeth: some elements sum differently in the reverse order.
inline void all_reduce_sum_in_rank_order(Communicator& comm) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{5000}}) {
        std::vector<float> values(n), in_order(n), reversed(n);
        for (size_t i = 0; i < n; ++i) {
            values[i] = partial(comm.rank(), i);
            in_order[i] = partial(0, i);
            for (int r = 1; r < comm.size(); ++r) in_order[i] += partial(r, i);
            reversed[i] = partial(comm.size() - 1, i);
            for (int r = comm.size() - 2; r >= 0; --r) reversed[i] += partial(r, i);
        }
        comm.all_reduce_sum(std::span(values));
        expect(std::memcmp(values.data(), in_order.data(), n * sizeof(float)) == 0, comm, "all_reduce_sum of ", n,
               " is not the rank-order sum");
        if (comm.size() >= 3 && n >= 7)
            expect(std::memcmp(in_order.data(), reversed.data(), n * sizeof(float)) != 0, comm,
                   "the partials sum the same in any order: the test would not see a change of order");

        std::vector<float> everyone(n * static_cast<size_t>(comm.size()));
        comm.all_gather(std::span<const float>(values), std::span(everyone));
        for (int r = 0; r < comm.size(); ++r)
            expect(std::memcmp(everyone.data() + static_cast<size_t>(r) * n, values.data(), n * sizeof(float)) == 0,
                   comm, "rank ", r, " holds other bits after all_reduce_sum of ", n);
    }
}

/// One call of each kind, then the counters: one call each, and the bytes this rank moved.
inline void counters_count_calls_and_bytes(Communicator& comm) {
    comm.reset_counters();
    const int peer = partner(comm);
    const auto size = static_cast<std::int64_t>(comm.size());
    std::vector<float> ten(10, 1.0f);
    if (peer >= 0 && comm.rank() < peer) {
        comm.send(peer, std::span<const float>(ten));
        comm.recv(peer, std::span(ten));
    } else if (peer >= 0) {
        comm.recv(peer, std::span(ten));
        comm.send(peer, std::span<const float>(ten));
    }
    std::vector<std::int32_t> seven(7, comm.rank());
    comm.broadcast(std::span(seven), 0);
    const std::vector<double> three(3, 2.0);
    std::vector<double> gathered(comm.rank() == 0 ? 3 * comm.size() : 0);
    comm.gather(std::span<const double>(three), std::span(gathered), 0);
    const std::vector<float> four(4, 3.0f);
    std::vector<float> all_four(4 * comm.size());
    comm.all_gather(std::span<const float>(four), std::span(all_four));
    std::vector<float> six(6, 0.5f);
    comm.all_reduce_sum(std::span(six));
    comm.synchronize();

    const glass::dist::CommCounters& c = comm.counters();
    const std::int64_t p2p_calls = peer >= 0 ? 1 : 0;
    expect(c.send.calls == p2p_calls && c.send.bytes == 40 * p2p_calls, comm, "send counter ", c.send.calls, " calls ",
           c.send.bytes, " bytes");
    expect(c.recv.calls == p2p_calls && c.recv.bytes == 40 * p2p_calls, comm, "recv counter ", c.recv.calls, " calls ",
           c.recv.bytes, " bytes");
    expect(c.broadcast.calls == 1 && c.broadcast.bytes == 28, comm, "broadcast counter ", c.broadcast.bytes);
    expect(c.gather.calls == 1 && c.gather.bytes == 24, comm, "gather counter ", c.gather.bytes);
    expect(c.all_gather.calls == 1 && c.all_gather.bytes == 16 * size, comm, "all_gather counter ", c.all_gather.bytes);
    // A group of one has nothing to add and moves nothing: its all-reduce is not counted.
    const std::int64_t reduces = size > 1 ? 1 : 0;
    expect(c.all_reduce.calls == reduces && c.all_reduce.bytes == 24 * size * reduces, comm, "all_reduce counter ",
           c.all_reduce.bytes);
    expect(c.barrier.calls == 1 && c.barrier.bytes == 0, comm, "barrier counter ", c.barrier.calls);
    for (const glass::dist::CallCounter* k : {&c.send, &c.recv, &c.broadcast, &c.gather, &c.all_gather, &c.all_reduce, &c.barrier})
        expect(k->seconds >= 0.0, comm, "a counter holds negative seconds");
    comm.reset_counters();
    expect(comm.counters().broadcast.calls == 0, comm, "reset_counters left calls behind");
}

/// Everything above, in one order every rank follows.
inline void every_check(Communicator& comm) {
    send_recv_round_trip(comm);
    messages_keep_their_order(comm);
    collectives_in_rank_order(comm);
    all_reduce_sum_in_rank_order(comm);
    counters_count_calls_and_bytes(comm);
}

}  // namespace dist_checks
