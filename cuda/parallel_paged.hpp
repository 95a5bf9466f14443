/// \file
/// \brief cuda/parallel_paged.hpp — the serving engine over a grid of GPUs: the CPU's
/// glass::dist::ParallelPagedBackend with every rank's part on its device.
/// ```text
/// dist::ParallelPagedBackend (glass/dist/parallel_paged_backend.hpp) runs a tp × pp grid the same
/// way whatever the ranks compute with: rank 0 decides each step and broadcasts it, every stage
/// runs its part, passes the stream on to the next stage, and the last stage's vocabulary slices
/// of the logits are gathered at rank 0. cuda_rank_parts() makes each rank's part on its GPU:
///
///   CudaRankPart = a CudaPagedBackend over the rank's shard (dist::shard_model: its layers, its
///                  heads and KV heads, its MLP units, its vocabulary rows), whose DeviceForward
///                  completes the three partial sums (embedding rows, Wo's, W2's products) with
///                  DeviceCollectives::all_reduce_sum (collectives.hpp: NCCL, or the host stand-in)
///     run(part, input, last)   CudaPagedBackend::forward_part: the stream from the stage before
///                              uploaded, this stage's layers, the stream or the logits slice down
///     pack_rows / unpack_rows  the shard pool's export_kv / import_kv (disaggregated serving)
///
/// The tensor-parallel all-reduces stay on the devices; the steps, the pipeline's stream and the
/// logits travel on the host over the grid's Communicator (MPI between processes, or threads).
/// Against the CPU's split backend on the same grid: the same partial sums added in the same
/// order, each computed by the GPU's kernels, so logits agree within the CUDA harness's 1e-5;
/// against one GPU holding the whole model, pipeline stages run the same kernels on the same rows
/// (bit for bit), tensor ranks sum Wo's and W2's products in tp pieces (a few fp32 roundings).
/// ```
#pragma once

#include "collectives.hpp"
#include "glass/dist/rank_part.hpp"
#include "paged.hpp"

namespace glass::cuda {

// Every rank's part on its GPU, for ParallelPagedBackend's `make` argument. `paged`: the kernels,
// weight type and KV storage of each rank's CudaPagedBackend (its share, dist/rank_share.hpp, is
// set here); `collectives`: how a stage's tensor ranks all-reduce.
dist::MakeRankPart cuda_rank_parts(CudaPagedOptions paged = {}, CollectivesKind collectives = CollectivesKind::automatic);

}  // namespace glass::cuda
