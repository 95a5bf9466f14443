/// \file
/// \brief glass/dist/kv_transfer.hpp — disaggregated prefill/decode: what a prompt left in one
/// pool, shipped to another.
/// ```text
/// Disaggregated serving runs prefill and decode on different workers: a prefill worker computes
/// the prompt (compute-bound, many rows per weight), a decode worker generates (bandwidth-bound,
/// one row per request per step), so neither slows the other. Between them travels what the
/// prompt left in the prefill worker's KV pool, and the logits of its last position, from which
/// the decode side samples the first token with the request's own generator:
///
///   header   ints: kv type, n_layers, n_kv_heads, head_dim, positions, vocab       [6]
///            (the receiver answers: accepted, or which field it cannot take)
///   blocks   for each layer, K then V, positions 0 .. positions-1 in order
///            (the sender's block table says which pool row holds each):
///              fp32 pool: the row                          kv_dim floats
///              int8 pool: the row's scales, then its codes n_kv_heads floats, kv_dim int8
///   logits   the prompt's last position                                           [vocab] floats
///
///   bytes of the blocks = kv_bytes_per_token(config, type) × positions      (config.hpp)
///
/// The blocks' layout, and how a pool packs and unpacks them, is serve/kv_shipment.hpp (every
/// backend exports and imports it: PagedBackend::export_kv / import_kv). This file moves them
/// over a Communicator: send_kv_shipment / receive_kv_shipment take the bytes as they are (the
/// decode side of the engine receives on one thread and imports on another: disaggregated.hpp);
/// ship_kv / receive_kv do the whole trip from one reference pool to another.
/// ```
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"
#include "glass/serve/kv_shipment.hpp"

namespace glass::dist {

// The wire layout is the serving engine's (serve/kv_shipment.hpp); its names, here too.
using serve::check_kv_table;
using serve::kv_shipment_bytes;
using serve::kv_shipment_header;
using serve::KvShipmentHeader;
using serve::pack_kv_blocks;
using serve::unpack_kv_blocks;

/// The header as it travels: KvShipmentHeader's fields, then the logits row's length.
constexpr int kShipmentHeaderInts = 6;
constexpr const char* kShipmentFieldNames[kShipmentHeaderInts] = {"KV type", "layers",    "KV heads",
                                                                  "head_dim", "positions", "vocabulary"};
/// The receiver's verdict when the header is fine but its blocks cannot hold the rows.
constexpr int kShipmentNoRoom = kShipmentHeaderInts;

inline std::array<int, kShipmentHeaderInts> shipment_ints(const KvShipmentHeader& h, int vocab) {
    return {h.kv_type, h.n_layers, h.n_kv_heads, h.head_dim, h.positions, vocab};
}

/// \brief The sending side: the header; the receiver's verdict (it checks the header against
/// its own pool before anything large moves); then the blocks and the last position's logits
/// row, to rank `to`. Returns the bytes sent.
inline std::int64_t send_kv_shipment(Communicator& comm, int to, const KvShipmentHeader& h,
                                     std::span<const std::byte> blocks, std::span<const float> last_logits) {
    const auto head = shipment_ints(h, static_cast<int>(last_logits.size()));
    comm.send(to, std::span<const int>(head));
    int verdict = 0;  // -1: accepted; else the index of the first field the receiver cannot take
    comm.recv(to, std::span<int>(&verdict, 1));
    if (verdict == kShipmentNoRoom)
        fail("KV shipment to rank ", to, " refused: its blocks cannot hold ", h.positions, " positions");
    if (verdict >= 0 && verdict < kShipmentHeaderInts)
        fail("KV shipment to rank ", to, " refused: its ", kShipmentFieldNames[verdict], " differs from this side's ",
             head[static_cast<size_t>(verdict)]);
    comm.send(to, blocks);
    comm.send(to, last_logits);
    return static_cast<std::int64_t>(sizeof head + blocks.size() + last_logits.size_bytes());
}

/// \brief What arrived: the rows in the wire layout, and the last position's logits.
struct KvShipment {
    std::vector<std::byte> blocks{};
    std::vector<float> last_logits{};  ///< [vocab]
    std::int64_t bytes = 0;            ///< what crossed: header, blocks, logits (send_kv_shipment's count)
};

/// \brief The receiving side: checks the header against `expected` (this side's type, shape
/// and the positions it asked for) and the logits row's length against `vocab`, then
/// `room()` (empty: its blocks can hold the rows; else why not); answers the sender; receives.
/// A mismatch is an Error naming both values (on both sides), and nothing more is received.
inline KvShipment receive_kv_shipment(Communicator& comm, int from, const KvShipmentHeader& expected, int vocab,
                                      const std::function<std::string()>& room = {}) {
    std::array<int, kShipmentHeaderInts> head{};
    comm.recv(from, std::span<int>(head));
    const auto want = shipment_ints(expected, vocab);
    int verdict = -1;
    for (int i = kShipmentHeaderInts - 1; i >= 0; --i)
        if (head[static_cast<size_t>(i)] != want[static_cast<size_t>(i)]) verdict = i;
    const std::string no_room = verdict < 0 && room ? room() : std::string();
    if (!no_room.empty()) verdict = kShipmentNoRoom;
    comm.send(from, std::span<const int>(&verdict, 1));
    if (verdict == kShipmentNoRoom) fail(no_room);
    if (verdict >= 0)
        fail("KV shipment from rank ", from, ": its ", kShipmentFieldNames[verdict], " is ", head[static_cast<size_t>(verdict)],
             ", this side's is ", want[static_cast<size_t>(verdict)]);
    KvShipment got{.blocks = std::vector<std::byte>(static_cast<size_t>(kv_shipment_bytes(expected))),
                   .last_logits = std::vector<float>(static_cast<size_t>(vocab))};
    comm.recv(from, std::span<std::byte>(got.blocks));
    comm.recv(from, std::span<float>(got.last_logits));
    got.bytes = static_cast<std::int64_t>(sizeof head + got.blocks.size() + got.last_logits.size() * sizeof(float));
    return got;
}

/// \brief The whole trip from a reference pool: positions 0 .. positions-1 of `table`, and the
/// last position's logits row, to rank `to`. Returns the bytes sent.
inline std::int64_t ship_kv(Communicator& comm, int to, const serve::PagedKVPool& pool, std::span<const int> table,
                            int positions, std::span<const float> last_logits) {
    const std::vector<std::byte> blocks = pack_kv_blocks(pool, table, positions);
    return send_kv_shipment(comm, to, kv_shipment_header(pool, positions), blocks, last_logits);
}

/// \brief ... into a reference pool: the rows `table` names for positions 0 .. positions-1, and
/// the logits into `last_logits` [vocab]. Refused (on both sides, naming the value) when the
/// type, shape, positions or vocabulary differ or the table cannot hold the rows.
inline void receive_kv(Communicator& comm, int from, serve::PagedKVPool& pool, std::span<const int> table,
                       int positions, std::span<float> last_logits) {
    const auto room = [&] { return serve::kv_table_problem(pool.num_blocks(), pool.block_size(), table, 0, positions, "KV shipment"); };
    const KvShipment got = receive_kv_shipment(comm, from, kv_shipment_header(pool, positions),
                                               static_cast<int>(last_logits.size()), room);
    unpack_kv_blocks(pool, table, positions, got.blocks);
    std::ranges::copy(got.last_logits, last_logits.begin());
}

}  // namespace glass::dist
