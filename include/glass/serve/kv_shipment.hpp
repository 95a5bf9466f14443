/// \file
/// \brief glass/serve/kv_shipment.hpp — a sequence's K/V rows as bytes that another pool can take:
/// the layout disaggregated prefill/decode ships (dist/kv_transfer.hpp) and every backend writes.
/// ```text
/// Disaggregated serving computes a prompt on one worker and decodes it on another. What moves
/// between them is what the prompt left in the prefill worker's pool, positions first .. end-1:
///
///   for each layer, K then V, for each position first .. end-1 in order
///   (the sender's block table says which pool row holds each position):
///     fp32 pool: the row                               kv_dim floats
///     int8 pool: the row's scales, then its codes      n_kv_heads floats, kv_dim int8
///
///   bytes = kv_bytes_per_token(config, type) × (end − first)              (config.hpp)
///
/// Each side allocated its own blocks, so the two block tables differ; positions name the rows.
/// An int8 row travels as the codes and scales an int8 cache holds (a quarter of fp32's bytes,
/// plus a float per KV head), and the receiver stores what its own int8 pool would have stored:
/// decoding after the transfer equals decoding where the prompt was computed, bit for bit.
///
/// Backends export and import through PagedBackend::export_kv / import_kv; the reference's
/// PagedKVPool does it with pack_kv_rows / unpack_kv_rows below, the fast path with its own
/// buffers, in the same order (for_each_shipped_row).
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "glass/config.hpp"
#include "glass/errors.hpp"
#include "glass/kv_cache.hpp"
#include "glass/serve/paged_kv_pool.hpp"

namespace glass::serve {

/// \brief What the receiver checks before it takes a single byte of rows.
struct KvShipmentHeader {
    int kv_type = 0;  ///< KvType as an int
    int n_layers = 0, n_kv_heads = 0, head_dim = 0;
    int positions = 0;  ///< rows per layer and part: end − first
};

/// \brief The header of `positions` positions of a pool for config `c` holding `type` rows.
inline KvShipmentHeader kv_shipment_header(const ModelConfig& c, KvType type, int positions) {
    return {.kv_type = static_cast<int>(type), .n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads,
            .head_dim = c.head_dim, .positions = positions};
}
inline KvShipmentHeader kv_shipment_header(const PagedKVPool& pool, int positions) {
    return kv_shipment_header(kv_shape(pool.n_layers(), pool.n_kv_heads(), pool.head_dim()), pool.type(), positions);
}

/// \brief Bytes of the rows: kv_bytes_per_token × positions.
inline std::int64_t kv_shipment_bytes(const KvShipmentHeader& h) {
    return kv_bytes_per_token(kv_shape(h.n_layers, h.n_kv_heads, h.head_dim), static_cast<KvType>(h.kv_type)) * h.positions;
}

/// \brief Why the table cannot take rows [first, end) (a bad range, too few blocks, a block
/// outside the pool), naming the values; empty when it can.
inline std::string kv_table_problem(int num_blocks, int block_size, std::span<const int> table, int first, int end,
                                    const char* side) {
    if (first < 0 || end <= first)
        return message_of(side, ": a KV shipment needs positions first < end with first >= 0, got ", first, " .. ", end);
    if (static_cast<std::int64_t>(table.size()) * block_size < end)
        return message_of(side, ": ", table.size(), " blocks of ", block_size, " positions cannot hold ", end, " positions");
    for (const int b : table)
        if (b < 0 || b >= num_blocks) return message_of(side, ": block ", b, " is outside the pool of ", num_blocks);
    return {};
}

/// \brief The same as an Error.
inline void check_kv_table(int num_blocks, int block_size, std::span<const int> table, int first, int end,
                           const char* side) {
    if (std::string why = kv_table_problem(num_blocks, block_size, table, first, end, side); !why.empty()) fail(why);
}

/// \brief The shipment's order, written once: fn(layer, part, pos) for every row it carries.
template <typename Fn>
void for_each_shipped_row(int n_layers, int first, int end, Fn&& fn) {
    for (int layer = 0; layer < n_layers; ++layer)
        for (const KvPart part : {KvPart::key, KvPart::value})
            for (int pos = first; pos < end; ++pos) fn(layer, part, pos);
}

/// \brief Positions first .. end-1 of the sequence whose blocks `table` lists, from the
/// reference's pool, in the layout above.
inline std::vector<std::byte> pack_kv_rows(const PagedKVPool& pool, std::span<const int> table, int first, int end) {
    check_kv_table(pool.num_blocks(), pool.block_size(), table, first, end, "KV shipment");
    std::vector<std::byte> out(static_cast<size_t>(kv_shipment_bytes(kv_shipment_header(pool, end - first))));
    std::byte* at = out.data();
    const auto head_dim = static_cast<size_t>(pool.head_dim());
    for_each_shipped_row(pool.n_layers(), first, end, [&](int layer, KvPart part, int pos) {
        const std::span<const float> row = pool.row(part, layer, table, pos);  // [kv_dim]
        if (pool.type() != KvType::int8) {
            std::memcpy(at, row.data(), row.size_bytes());
            at += row.size_bytes();
            return;
        }
        const std::span<const float> scales = pool.row_scales(part, layer, table, pos);  // [n_kv_heads]
        std::memcpy(at, scales.data(), scales.size_bytes());
        at += scales.size_bytes();
        for (size_t i = 0; i < row.size(); ++i)  // s·q back to q (exact: |s·q/s - q| ≪ 1/2)
            *at++ = static_cast<std::byte>(to_int8(row[i], scales[i / head_dim]));
    });
    return out;
}

/// \brief The receiving side: every row of `bytes` into the pool rows `table` names for
/// positions first .. end-1 (int8: s·q from the codes and scales, and the scales kept).
inline void unpack_kv_rows(PagedKVPool& pool, std::span<const int> table, int first, int end,
                           std::span<const std::byte> bytes) {
    check_kv_table(pool.num_blocks(), pool.block_size(), table, first, end, "KV shipment");
    const std::int64_t expected = kv_shipment_bytes(kv_shipment_header(pool, end - first));
    if (static_cast<std::int64_t>(bytes.size()) != expected)
        fail("KV shipment: ", bytes.size(), " bytes for ", end - first, " positions, expected ", expected);
    const auto kv_dim = static_cast<size_t>(pool.kv_dim());
    std::vector<float> row(kv_dim), scales(static_cast<size_t>(pool.n_kv_heads()));
    std::vector<std::int8_t> codes(kv_dim);
    const std::byte* at = bytes.data();
    for_each_shipped_row(pool.n_layers(), first, end, [&](int layer, KvPart part, int pos) {
        if (pool.type() != KvType::int8) {
            std::memcpy(row.data(), at, kv_dim * sizeof(float));
            at += kv_dim * sizeof(float);
        } else {
            std::memcpy(scales.data(), at, scales.size() * sizeof(float));
            at += scales.size() * sizeof(float);
            std::memcpy(codes.data(), at, kv_dim);
            at += kv_dim;
            dequantize_kv_row(codes.data(), scales.data(), pool.n_kv_heads(), pool.head_dim(), row.data());
        }
        pool.put_row(part, layer, table, pos, row, scales);
    });
}

/// \brief Positions 0 .. positions-1 (a whole prompt): pack_kv_rows from 0.
inline std::vector<std::byte> pack_kv_blocks(const PagedKVPool& pool, std::span<const int> table, int positions) {
    return pack_kv_rows(pool, table, 0, positions);
}
inline void unpack_kv_blocks(PagedKVPool& pool, std::span<const int> table, int positions, std::span<const std::byte> bytes) {
    unpack_kv_rows(pool, table, 0, positions, bytes);
}

}  // namespace glass::serve
