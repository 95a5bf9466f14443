/// \file
/// \brief cuda/collectives.hpp — a tensor-parallel group's all-reduce on device memory: NCCL
/// between GPUs, or a stand-in over glass::dist::Communicator (the emulator, or a GPU without
/// NCCL). Plain C++, like glass_cuda.hpp.
/// ```text
/// Tensor parallelism adds every rank's partial sums across its group: the embedding rows once,
/// then Wo's and W2's products in every layer (glass/dist/shard.hpp draws where). On GPUs the
/// numbers stay in device memory:
///
///   all_reduce_sum(d_values [n]), on every rank of the group:
///     1. all_gather: d_values → d_all [ranks, n], rank r's values in row r
///          NcclCollectives: ncclAllGather on the calling thread's stream (queued, no wait)
///          HostCollectives: download, Communicator::all_gather, upload (waits)
///     2. sum_rank_slices(d_all) → d_values: ((v0 + v1) + v2) + ... (mlp.cu)
///
/// Why an all-gather and a sum of our own rather than ncclAllReduce: NCCL picks its reduction
/// order (ring, tree, how the message is chunked) by size and rank count, so two ranks, or one
/// row in batches of two sizes, could end with different last bits. Added in rank order, every
/// rank holds the same bits, the very bits glass::dist::Communicator::all_reduce_sum forms from the
/// same partials on the CPU, whichever transport carried them. The price: each rank receives
/// (ranks − 1) × n numbers instead of a ring all-reduce's 2 (ranks − 1) / ranks × n: the same at
/// tp 2, twice as many at tp 4.
///
/// NCCL is opened with dlopen on first use (like cuBLAS, matmul.cu): only a split model pays for
/// loading it. Its communicator is made from a unique id that rank 0 of the group draws and
/// broadcasts over the group's own Communicator (MPI between processes, or threads), which also
/// carries everything else a split model sends (batches, pipeline streams, logits). Each rank must
/// run on its own GPU: NCCL refuses two ranks on one device, so one lent GPU runs nranks = 1.
/// ```
#pragma once

#include <cstdint>
#include <memory>

#include "device.hpp"
#include "glass/dist/communicator.hpp"

namespace glass::cuda {

class DeviceCollectives {
public:
    explicit DeviceCollectives(dist::Communicator& group) : group_(group) {}
    virtual ~DeviceCollectives() = default;
    DeviceCollectives(const DeviceCollectives&) = delete;
    DeviceCollectives& operator=(const DeviceCollectives&) = delete;

    int rank() const { return group_.rank(); }
    int size() const { return group_.size(); }
    virtual const char* transport() const = 0;  // "nccl", "host"
    // d_all [size(), n] ← every rank's d_mine [n], in rank order.
    virtual void all_gather(const float* d_mine, float* d_all, std::int64_t n) = 0;
    // d_values [n] ← Σ over ranks, added in rank order: the same bits on every rank.
    void all_reduce_sum(float* d_values, std::int64_t n);
    std::int64_t calls() const { return calls_; }  // all-reduces that moved numbers

protected:
    dist::Communicator& group_;

private:
    DeviceBuffer gathered_;  // [size(), n], grown to the largest n seen
    std::int64_t calls_ = 0;
};

enum class CollectivesKind {
    automatic,  // NCCL when every rank has a GPU of its own; the host stand-in under the emulator
                // or when two ranks share a device (thread ranks on one GPU: NCCL refuses them)
    nccl,
    host,
};
const char* to_string(CollectivesKind k);

// The collectives of `group` (every rank calls it at the same point: NCCL's set-up is itself a
// collective). NCCL that cannot be loaded or set up is an Error naming why (CollectivesKind::host
// runs without it); under the emulator, asking for NCCL is an Error too.
std::unique_ptr<DeviceCollectives> make_collectives(dist::Communicator& group,
                                                    CollectivesKind kind = CollectivesKind::automatic);

}  // namespace glass::cuda
