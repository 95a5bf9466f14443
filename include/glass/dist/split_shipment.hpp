/// \file
/// \brief glass/dist/split_shipment.hpp — a KV shipment of the whole model, cut into what each
/// rank of a split model holds, and put back together.
/// ```text
/// A prompt's shipment (serve/kv_shipment.hpp) lists, for each layer, K then V, one row per
/// position:
///
///   fp32 row: n_kv_heads × head_dim floats           int8 row: n_kv_heads scales, then the codes
///             [ head 0 | head 1 | ... ]                         [ s0 s1 ... | head 0 | head 1 | ... ]
///
/// A rank of a tp × pp grid holds its stage's layers (PipelineStage) and, of each row, its KV
/// heads (TensorSplit::kv_head_begin, kv_heads). Its share is a shipment in the same layout over
/// its own shard: what serve::pack_kv_rows of its own pool gives, and what unpack_kv_rows takes.
///
///   share (its layer l, part, position p), its head j  <->  whole (first_layer + l, part, p), head kv_head_begin + j
///
/// The grid's rank 0 puts the shares together (put_share, export) or cuts the whole into them
/// (take_share, import).
/// When tp > n_kv_heads, a KV head is held by tp / n_kv_heads ranks with the same bits (each
/// computes it from the same rows of Wk, Wv): export copies each, import gives it to each.
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "glass/config.hpp"
#include "glass/dist/pipeline_parallel.hpp"
#include "glass/dist/shard.hpp"

namespace glass::dist {

/// \brief Bytes of one rank's share of `positions` positions: its layers × K/V × positions rows
/// of its KV heads.
inline std::int64_t share_bytes(const ModelConfig& whole, KvType type, const PipelineStage& stage,
                                const TensorSplit& split, int positions) {
    const std::int64_t head = std::int64_t{whole.head_dim} * (type == KvType::int8 ? 1 : 4);
    const std::int64_t scale = type == KvType::int8 ? 4 : 0;  // an int8 row's scale per KV head
    return std::int64_t{stage.layers} * 2 * positions * split.kv_heads * (scale + head);
}

/// \brief fn(whole_at, share_at, bytes) for every piece a rank's share has in common with the
/// whole shipment (byte offsets into each): per row, each of its KV heads' scale (int8) and
/// values or codes. Both hold `positions` positions.
template <typename Fn>
void for_each_share_piece(const ModelConfig& c, KvType type, const PipelineStage& stage, const TensorSplit& split,
                          int positions, Fn&& fn) {
    const bool int8 = type == KvType::int8;
    const std::size_t scale = int8 ? sizeof(float) : 0;  // per KV head, at the row's start
    const std::size_t head = static_cast<std::size_t>(c.head_dim) * (int8 ? 1 : sizeof(float));
    const std::size_t heads = static_cast<std::size_t>(c.n_kv_heads), mine = static_cast<std::size_t>(split.kv_heads);
    const std::size_t whole_row = heads * (scale + head), share_row = mine * (scale + head);
    const auto n = static_cast<std::size_t>(positions);
    for (std::size_t l = 0; l < static_cast<std::size_t>(stage.layers); ++l)
        for (std::size_t part = 0; part < 2; ++part)  // K, then V
            for (std::size_t p = 0; p < n; ++p) {
                const std::size_t layer = static_cast<std::size_t>(stage.first_layer) + l;
                const std::size_t w = ((layer * 2 + part) * n + p) * whole_row;  // its [n_kv_heads] row
                const std::size_t s = ((l * 2 + part) * n + p) * share_row;      // its [kv_heads] row
                for (std::size_t j = 0; j < mine; ++j) {
                    const std::size_t h = static_cast<std::size_t>(split.kv_head_begin) + j;  // the whole row's head
                    if (int8) fn(w + h * scale, s + j * scale, scale);                 // its scale
                    fn(w + heads * scale + h * head, s + mine * scale + j * head, head);  // its values or codes
                }
            }
}

/// \brief Export: a rank's share into its places in the whole shipment.
inline void put_share(const ModelConfig& c, KvType type, const PipelineStage& stage, const TensorSplit& split,
                      int positions, const std::byte* share, std::byte* whole) {
    for_each_share_piece(c, type, stage, split, positions,
                         [&](std::size_t w, std::size_t s, std::size_t n) { std::memcpy(whole + w, share + s, n); });
}

/// \brief Import: a rank's share cut out of the whole shipment.
inline void take_share(const ModelConfig& c, KvType type, const PipelineStage& stage, const TensorSplit& split,
                       int positions, const std::byte* whole, std::byte* share) {
    for_each_share_piece(c, type, stage, split, positions,
                         [&](std::size_t w, std::size_t s, std::size_t n) { std::memcpy(share + s, whole + w, n); });
}

}  // namespace glass::dist
