/// \file
/// \brief cuda/parallel_paged.cpp — CudaRankPart: one rank of a split model on its GPU
/// (parallel_paged.hpp draws the grid).
#include "parallel_paged.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "glass/dist/shard.hpp"

namespace glass::cuda {

namespace {

// The GPU a rank runs on, made the calling thread's: under mpirun the process's rank among those on
// its host (OMPI_COMM_WORLD_LOCAL_RANK), else (thread ranks of one process) its rank in the grid,
// either modulo the devices present. With one GPU every rank shares it (-1: nothing to choose), and
// make_collectives takes the host stand-in (NCCL refuses two ranks on one device).
int use_rank_device(const dist::RankPlace& at) {
    std::string why;
    if (!device_present(&why)) fail("no CUDA device: ", why);
    const int count = device_count();
    if (count <= 1) return -1;
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int rank = local ? std::atoi(local) : at.shape.rank_of(at.stage.rank, at.split.rank);
    const int device = rank % count;
    use_device(device);
    return device;
}

// A CudaPagedBackend over the rank's shard on the rank's GPU. Every call that reaches the backend
// first makes that device the calling thread's (enter: cudaSetDevice is per thread).
class CudaRankPart : public dist::BackendRankPart<CudaPagedBackend> {
public:
    CudaRankPart(const Model& whole, const dist::RankPlace& at, dist::Communicator& group, CudaPagedOptions paged,
                 CollectivesKind kind)
        : device_(use_rank_device(at)), collectives_(make_collectives(group, kind)) {
        // The shard is copied on the host, uploaded, and let go: the device holds this rank's part.
        const Model shard = dist::shard_model(whole, at.split, at.stage.first_layer, at.stage.layers);
        DeviceCollectives* c = collectives_.get();
        paged.share = {.first_layer = at.stage.first_layer,
                       .vocab_begin = at.split.vocab_begin,
                       .add_across_ranks = [c](float* d_values, std::int64_t n) { c->all_reduce_sum(d_values, n); }};
        backend_ = std::make_unique<CudaPagedBackend>(shard, paged);
        attach(*backend_);
        const std::int64_t embedding_bytes =  // the table's rows, held but read one per token (held_weight_bytes)
            shard.token_embedding ? std::int64_t{shard.config.vocab_size} * shard.config.dim *
                                        (has_integer_weights(paged.weights) || paged.weights == WeightType::f32 ? 4 : 2)
                                  : 0;
        held_weight_bytes_ = backend_->weight_bytes() + embedding_bytes;
    }

    std::int64_t held_weight_bytes() const override { return held_weight_bytes_; }

private:
    void enter() const override {
        if (device_ >= 0) use_device(device_);
    }

    int device_;                                       // first: chosen before anything is put on it; -1: the one GPU
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
