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
/// Each side allocated its own blocks, so the two block tables differ; positions name the rows.
/// An int8 row travels as the codes and scales an int8 cache holds (a quarter of fp32's bytes,
/// plus a float per KV head), and the receiver stores s·q: the very bits the sender's pool holds.
/// So decoding after the transfer equals decoding where the prompt was computed, bit for bit.
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/errors.hpp"
#include "glass/serve/paged_transformer.hpp"

namespace glass::dist {

/// \brief What the receiver checks before it takes a single byte of blocks.
struct KvShipmentHeader {
    int kv_type = 0;  ///< KvType as an int
    int n_layers = 0, n_kv_heads = 0, head_dim = 0;
    int positions = 0;
};

/// \brief The header of `positions` positions of `pool`.
inline KvShipmentHeader kv_shipment_header(const serve::PagedKVPool& pool, int positions) {
    return {.kv_type = static_cast<int>(pool.type()),
            .n_layers = pool.n_layers(),
            .n_kv_heads = pool.n_kv_heads(),
            .head_dim = pool.n_kv_heads() > 0 ? pool.kv_dim() / pool.n_kv_heads() : 0,
            .positions = positions};
}

/// \brief Bytes of the blocks for `positions` positions: kv_bytes_per_token × positions.
inline std::int64_t kv_shipment_bytes(const KvShipmentHeader& h) {
    ModelConfig c;  // only what the size depends on
    c.n_layers = h.n_layers;
    c.n_kv_heads = h.n_kv_heads;
    c.head_dim = h.head_dim;
    return kv_bytes_per_token(c, static_cast<KvType>(h.kv_type)) * h.positions;
}

/// \brief Refuses positions the table cannot hold or blocks outside the pool, naming them.
inline void check_kv_table(const serve::PagedKVPool& pool, std::span<const int> table, int positions, const char* side) {
    if (positions < 1) fail(side, ": a KV shipment needs at least one position, got ", positions);
    if (static_cast<std::int64_t>(table.size()) * pool.block_size() < positions)
        fail(side, ": ", table.size(), " blocks of ", pool.block_size(), " positions cannot hold ", positions, " positions");
    for (const int b : table)
        if (b < 0 || b >= pool.num_blocks()) fail(side, ": block ", b, " is outside the pool of ", pool.num_blocks());
}

/// \brief Positions 0 .. positions-1 of the sequence whose blocks `table` lists, in the wire
/// layout above.
inline std::vector<std::byte> pack_kv_blocks(const serve::PagedKVPool& pool, std::span<const int> table, int positions) {
    check_kv_table(pool, table, positions, "KV shipment");
    const KvShipmentHeader h = kv_shipment_header(pool, positions);
    std::vector<std::byte> out(static_cast<size_t>(kv_shipment_bytes(h)));
    std::byte* at = out.data();
    const bool int8 = pool.type() == KvType::int8;
    for (int layer = 0; layer < pool.n_layers(); ++layer)
        for (const serve::KvPart part : {serve::KvPart::key, serve::KvPart::value})
            for (int pos = 0; pos < positions; ++pos) {
                const std::span<const float> row = pool.row(part, layer, table, pos);  // [kv_dim]
                if (!int8) {
                    std::memcpy(at, row.data(), row.size_bytes());
                    at += row.size_bytes();
                    continue;
                }
                const std::span<const float> scales = pool.row_scales(part, layer, table, pos);  // [n_kv_heads]
                std::memcpy(at, scales.data(), scales.size_bytes());
                at += scales.size_bytes();
                const int head_dim = h.head_dim;
                for (size_t i = 0; i < row.size(); ++i)  // s·q back to q (exact: |s·q/s - q| ≪ 1/2)
                    *at++ = static_cast<std::byte>(to_int8(row[i], scales[i / static_cast<size_t>(head_dim)]));
            }
    return out;
}

/// \brief The receiving side: every row of `bytes` into the pool rows `table` names for
/// positions 0 .. positions-1 (int8: s·q from the codes and scales, and the scales kept).
inline void unpack_kv_blocks(serve::PagedKVPool& pool, std::span<const int> table, int positions,
                             std::span<const std::byte> bytes) {
    check_kv_table(pool, table, positions, "KV shipment");
    const KvShipmentHeader h = kv_shipment_header(pool, positions);
    if (static_cast<std::int64_t>(bytes.size()) != kv_shipment_bytes(h))
        fail("KV shipment: ", bytes.size(), " bytes for ", positions, " positions, expected ", kv_shipment_bytes(h));
    const bool int8 = pool.type() == KvType::int8;
    const auto kv_dim = static_cast<size_t>(pool.kv_dim());
    std::vector<float> row(kv_dim), scales(static_cast<size_t>(pool.n_kv_heads()));
    std::vector<std::int8_t> codes(int8 ? kv_dim : 0);
    const std::byte* at = bytes.data();
    for (int layer = 0; layer < pool.n_layers(); ++layer)
        for (const serve::KvPart part : {serve::KvPart::key, serve::KvPart::value})
            for (int pos = 0; pos < positions; ++pos) {
                if (!int8) {
                    std::memcpy(row.data(), at, kv_dim * sizeof(float));
                    at += kv_dim * sizeof(float);
                } else {
                    std::memcpy(scales.data(), at, scales.size() * sizeof(float));
                    at += scales.size() * sizeof(float);
                    std::memcpy(codes.data(), at, kv_dim);
                    at += kv_dim;
                    dequantize_kv_row(codes.data(), scales.data(), pool.n_kv_heads(), h.head_dim, row.data());
                }
                pool.put_row(part, layer, table, pos, row, scales);
            }
}

/// The header as it travels: KvShipmentHeader's fields, then the logits row's length.
constexpr int kShipmentHeaderInts = 6;
constexpr const char* kShipmentFieldNames[kShipmentHeaderInts] = {"KV type", "layers",    "KV heads",
                                                                  "head_dim", "positions", "vocabulary"};

/// \brief The prefill side: the header; the receiver's verdict (it checks the header against its
/// own pool before anything large moves); then the blocks of positions 0 .. positions-1 and the
/// last position's logits row, to rank `to`. Returns the bytes sent.
inline std::int64_t ship_kv(Communicator& comm, int to, const serve::PagedKVPool& pool, std::span<const int> table,
                            int positions, std::span<const float> last_logits) {
    const std::vector<std::byte> blocks = pack_kv_blocks(pool, table, positions);
    const KvShipmentHeader h = kv_shipment_header(pool, positions);
    const int head[kShipmentHeaderInts] = {h.kv_type,  h.n_layers,  h.n_kv_heads,
                                           h.head_dim, h.positions, static_cast<int>(last_logits.size())};
    comm.send(to, std::span<const int>(head));
    int verdict = 0;  // -1: accepted; else the index of the first field the receiver cannot take
    comm.recv(to, std::span<int>(&verdict, 1));
    if (verdict == kShipmentHeaderInts)
        fail("KV shipment to rank ", to, " refused: its blocks cannot hold ", positions, " positions");
    if (verdict >= 0 && verdict < kShipmentHeaderInts)
        fail("KV shipment to rank ", to, " refused: its ", kShipmentFieldNames[verdict], " differs from this side's ",
             head[verdict]);
    comm.send(to, std::span<const std::byte>(blocks));
    comm.send(to, last_logits);
    return static_cast<std::int64_t>(sizeof head + blocks.size() + last_logits.size_bytes());
}

/// \brief The decode side: checks the header against its own pool (type, shape), the positions it
/// expects and its logits row's length [vocab], answers the sender, then stores the blocks in the
/// rows `table` names and the logits in `last_logits`. A mismatch is an Error naming both values
/// (on both sides), and nothing is stored.
inline void receive_kv(Communicator& comm, int from, serve::PagedKVPool& pool, std::span<const int> table,
                       int positions, std::span<float> last_logits) {
    int head[kShipmentHeaderInts] = {};
    comm.recv(from, std::span<int>(head));
    const KvShipmentHeader mine = kv_shipment_header(pool, positions);
    const int want[kShipmentHeaderInts] = {mine.kv_type,  mine.n_layers, mine.n_kv_heads,
                                           mine.head_dim, positions,     static_cast<int>(last_logits.size())};
    int verdict = -1;
    for (int i = kShipmentHeaderInts - 1; i >= 0; --i)
        if (head[i] != want[i]) verdict = i;
    std::string table_error;
    if (verdict < 0) try {
            check_kv_table(pool, table, positions, "KV shipment");
        } catch (const Error& e) {
            table_error = e.what();
            verdict = kShipmentHeaderInts;
        }
    comm.send(from, std::span<const int>(&verdict, 1));
    if (verdict == kShipmentHeaderInts) fail(table_error);
    if (verdict >= 0)
        fail("KV shipment from rank ", from, ": its ", kShipmentFieldNames[verdict], " is ", head[verdict],
             ", this side's is ", want[verdict]);
    std::vector<std::byte> blocks(static_cast<size_t>(kv_shipment_bytes(mine)));
    comm.recv(from, std::span<std::byte>(blocks));
    comm.recv(from, last_logits);
    unpack_kv_blocks(pool, table, positions, blocks);
}

}  // namespace glass::dist
