/// \file
/// \brief glass/dist/rank_part.hpp — what one rank of a split serving backend computes with: its
/// shard of the weights, its share of the KV pool, and the code that runs its layers.
/// ```text
/// In:  one micro-batch of the step's batch (serve/paged_backend.hpp) and, past the first
///      pipeline stage, the residual stream [N, dim] from the stage before.
/// Out: the stream [N, dim] for the next stage or, at the last stage, this rank's vocabulary
///      slice of the logits rows the batch wants [r, my vocab].
///
///   RankPart                the interface split_paged_forward (split_paged_forward.hpp) drives
///   ├─ ReferenceRankPart    below: the CPU reference, transformer_block row by row
///   └─ BackendRankPart<B>   below: a paged backend's forward_part, export_kv and import_kv
///      ├─ FastRankPart      dist/fast_rank_part.hpp: a FastPagedBackend over the shard
///      └─ CudaRankPart      cuda/parallel_paged.cpp: a CudaPagedBackend over the shard, on its GPU
/// ```
/// Every part does its stage's layers on its own heads and MLP units, the tensor-parallel
/// all-reduces inside them included (over its stage's group, given when the part is made).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "glass/checkpoint.hpp"
#include "glass/dist/communicator.hpp"
#include "glass/dist/parallel_session.hpp"
#include "glass/dist/shard.hpp"
#include "glass/dist/tensor_parallel.hpp"
#include "glass/serve/kv_shipment.hpp"
#include "glass/serve/paged_backend.hpp"
#include "glass/serve/paged_transformer.hpp"

namespace glass::dist {

/// \brief What one rank of the grid computes with, and where its share of the KV pool lives: the
/// CPU reference (ReferenceRankPart, below), the fast path (fast_rank_part.hpp) or a GPU
/// (cuda/parallel_paged.hpp). The part does its stage's layers on its heads and MLP units, the tensor-parallel all-reduces included (over
/// its stage's group, given when it is made); moving the stream between stages and gathering
/// the logits is split_paged_forward's, the same for every kind of part.
class RankPart {
public:
    virtual ~RankPart() = default;
    virtual KvType kv_type() const = 0;
    /// Bytes make_pool(num_blocks, block_size) would hold (checked against --rank-memory first).
    virtual std::int64_t pool_bytes_for(int num_blocks, int block_size) const = 0;
    /// This rank's pool: num_blocks × block_size positions of its layers and KV heads.
    virtual void make_pool(int num_blocks, int block_size) = 0;
    virtual std::int64_t pool_bytes() const = 0;
    /// \brief One micro-batch through this rank's layers. `input`: the stream `[N, dim]` from the
    /// stage before; empty at stage 0, which embeds the tokens. Returns the stream `[N, dim]` for
    /// the next stage or, when `last`, this rank's vocabulary slice of the logits of the rows
    /// append_logit_rows names, `[r, my vocab]`.
    virtual std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) = 0;
    /// This rank's rows of positions first .. end-1 in its shard's shipment layout (pack_kv_rows), and back.
    virtual std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const = 0;
    virtual void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) = 0;
    virtual std::int64_t weight_bytes() const = 0;       ///< what one position reads of its weights
    virtual std::int64_t held_weight_bytes() const = 0;  ///< with its embedding rows (held_weight_bytes)
};

/// \brief A part that is a paged backend run one stage at a time (fast::FastPagedBackend,
/// cuda::CudaPagedBackend): `run` is its forward_part, pack_rows / unpack_rows its export_kv /
/// import_kv, the pool its own. The derived part owns the backend and whatever must outlive it
/// (the shard it reads, a GPU's collectives), attaches it once made, and says what it holds.
/// `enter` runs before each call that reaches the backend: a GPU rank makes its device the
/// calling thread's there (the engine may drive rank 0 from another thread than the one that
/// made it).
template <typename Backend>
class BackendRankPart : public RankPart {
public:
    KvType kv_type() const override { return attached_->kv_type(); }
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const override {
        return attached_->pool_bytes_for(num_blocks, block_size);
    }
    void make_pool(int num_blocks, int block_size) override {
        enter();
        attached_->allocate_pool(num_blocks, block_size);
    }
    std::int64_t pool_bytes() const override { return attached_->pool_bytes(); }
    std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) override {
        enter();
        const std::span<const float> out = attached_->forward_part(part, input, last);
        return {out.begin(), out.end()};
    }
    std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const override {
        enter();
        return attached_->export_kv(table, first, end);
    }
    void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        enter();
        attached_->import_kv(table, first, end, bytes);
    }
    std::int64_t weight_bytes() const override { return attached_->weight_bytes(); }

protected:
    void attach(Backend& backend) { attached_ = &backend; }
    virtual void enter() const {}

private:
    Backend* attached_ = nullptr;  // owned by the derived part
};

/// The CPU reference's part: the rank's copy of its weights (shard_model), its PagedKVPool, and
/// transformer_block row by row (so no logit depends on the batch or its micro-batches).
class ReferenceRankPart : public RankPart {
public:
    ReferenceRankPart(const Model& whole, const RankPlace& at, Communicator& group, KvType kv)
        : at_(at), group_(group), kv_(kv), shard_(shard_model(whole, at.split, at.stage.first_layer, at.stage.layers)) {}

    KvType kv_type() const override { return kv_; }
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const override {
        return serve::PagedKVPool::bytes_for(shard_.config, num_blocks, block_size, kv_);
    }
    void make_pool(int num_blocks, int block_size) override {
        pool_ = serve::PagedKVPool(shard_.config, num_blocks, block_size, kv_);
    }
    std::int64_t pool_bytes() const override { return pool_.bytes(); }
    std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) override {
        const ModelConfig& c = shard_.config;
        std::vector<int> ids;  // the part's new tokens, stacked
        std::vector<SequenceRows> seqs;
        for (const serve::BatchEntry& e : part) {
            seqs.push_back({.first = static_cast<int>(ids.size()), .count = static_cast<int>(e.tokens.size()), .start = e.start});
            ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
        }
        const Eigen::Index n = static_cast<Eigen::Index>(ids.size());
        RowMatrix x = input.empty() ? embed_split(shard_, at_.split, ids, c.embedding_scale, group_)  // [N, dim]
                                    : RowMatrix(Eigen::Map<const RowMatrix>(input.data(), n, c.dim));
        serve::PagedKv kv{.pool = pool_, .batch = part, .first_layer = at_.stage.first_layer};
        stage_layers(shard_, at_, x, seqs, kv, RowOrder::row_by_row, group_);
        if (!last) return std::vector<float>(x.data(), x.data() + x.size());
        std::vector<int> wanted;
        for (size_t e = 0; e < part.size(); ++e) serve::append_logit_rows(part[e], seqs[e].first, wanted);
        RowMatrix rows(static_cast<Eigen::Index>(wanted.size()), c.dim);  // [r, dim]
        for (size_t i = 0; i < wanted.size(); ++i) rows.row(static_cast<Eigen::Index>(i)) = x.row(wanted[i]);
        return classify(shard_, rows, RowOrder::row_by_row);  // [r, my vocab]
    }
    std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const override {
        return serve::pack_kv_rows(pool_, table, first, end);
    }
    void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        serve::unpack_kv_rows(pool_, table, first, end, bytes);
    }
    std::int64_t weight_bytes() const override { return shard_.weight_bytes; }
    std::int64_t held_weight_bytes() const override { return dist::held_weight_bytes(shard_); }
    const Model& shard() const { return shard_; }

private:
    RankPlace at_;
    Communicator& group_;
    KvType kv_;
    Model shard_;
    serve::PagedKVPool pool_;
};

/// Makes rank `at`'s part of `whole`, its tensor-parallel all-reduces over `group` (its stage).
using MakeRankPart = std::function<std::unique_ptr<RankPart>(const Model& whole, const RankPlace& at, Communicator& group)>;

}  // namespace glass::dist
