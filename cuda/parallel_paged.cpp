/// \file
/// \brief cuda/parallel_paged.cpp — CudaRankPart: one rank of a split model on its GPU
/// (parallel_paged.hpp draws the grid).
#include "parallel_paged.hpp"

#include <memory>
#include <utility>

#include "glass/dist/shard.hpp"

namespace glass::cuda {

namespace {

class CudaRankPart : public dist::RankPart {
public:
    CudaRankPart(const Model& whole, const dist::RankPlace& at, dist::Communicator& group, CudaPagedOptions paged,
                 CollectivesKind kind)
        : collectives_(make_collectives(group, kind)) {
        // The shard is copied on the host, uploaded, and let go: the device holds this rank's part.
        const Model shard = dist::shard_model(whole, at.split, at.stage.first_layer, at.stage.layers);
        DeviceCollectives* c = collectives_.get();
        paged.first_layer = at.stage.first_layer;
        paged.share = {.vocab_begin = at.split.vocab_begin,
                       .add_across_ranks = [c](float* d_values, std::int64_t n) { c->all_reduce_sum(d_values, n); }};
        backend_ = std::make_unique<CudaPagedBackend>(shard, paged);
        const std::int64_t embedding_bytes =  // the table's rows, held but read one per token (held_weight_bytes)
            shard.token_embedding ? std::int64_t{shard.config.vocab_size} * shard.config.dim *
                                        (has_integer_weights(paged.weights) || paged.weights == WeightType::f32 ? 4 : 2)
                                  : 0;
        held_weight_bytes_ = backend_->weight_bytes() + embedding_bytes;
    }

    KvType kv_type() const override { return backend_->kv_type(); }
    std::int64_t pool_bytes_for(int num_blocks, int block_size) const override {
        // What allocate_pool puts on the device for the shard (paged.hpp): K and V rows of its layers
        // and KV heads, fp32, or int8 codes and one fp32 scale per KV head.
        const ModelConfig& c = backend_->config();
        const std::int64_t rows = std::int64_t{c.n_layers} * num_blocks * block_size;
        const std::int64_t row_bytes =
            kv_type() == KvType::int8 ? c.kv_dim() + 4 * std::int64_t{c.n_kv_heads} : 4 * std::int64_t{c.kv_dim()};
        return 2 * rows * row_bytes;
    }
    void make_pool(int num_blocks, int block_size) override { backend_->allocate_pool(num_blocks, block_size); }
    std::int64_t pool_bytes() const override { return backend_->pool_bytes(); }
    std::vector<float> run(std::span<const serve::BatchEntry> part, std::span<const float> input, bool last) override {
        const std::span<const float> out = backend_->forward_part(part, input, last);
        return {out.begin(), out.end()};
    }
    std::vector<std::byte> pack_rows(std::span<const int> table, int first, int end) const override {
        return backend_->export_kv(table, first, end);
    }
    void unpack_rows(std::span<const int> table, int first, int end, std::span<const std::byte> bytes) override {
        backend_->import_kv(table, first, end, bytes);
    }
    std::int64_t weight_bytes() const override { return backend_->weight_bytes(); }
    std::int64_t held_weight_bytes() const override { return held_weight_bytes_; }

private:
    std::unique_ptr<DeviceCollectives> collectives_;  // before backend_: its forward passes call it
    std::unique_ptr<CudaPagedBackend> backend_;
    std::int64_t held_weight_bytes_ = 0;
};

}  // namespace

dist::MakeRankPart cuda_rank_parts(CudaPagedOptions paged, CollectivesKind collectives) {
    return [paged, collectives](const Model& whole, const dist::RankPlace& at, dist::Communicator& group) {
        return std::unique_ptr<dist::RankPart>(std::make_unique<CudaRankPart>(whole, at, group, paged, collectives));
    };
}

}  // namespace glass::cuda
