// --backend cuda for `glass serve` and `glass serve-bench`: the serving engine's backend on the GPU
// (cuda/paged.hpp: CudaPagedBackend), whole, or with --tp/--pp each rank's part on its GPU
// (cuda/parallel_paged.hpp: cuda_rank_parts, the tensor-parallel all-reduces by NCCL between GPUs).
//
// Defined in cuda_backend.cpp, which is compiled twice like cmd_generate.cpp: with GLASS_HAVE_CUDA
// into the programs that link a CUDA library (glass when nvcc built libglass_cuda, glass-emulated
// always), and plain into a glass built without CUDA, where both refuse by name.
#pragma once

#include <memory>
#include <string>

#include "glass/checkpoint.hpp"
#include "glass/dist/rank_part.hpp"
#include "glass/kv_cache.hpp"
#include "glass/serve/paged_backend.hpp"

namespace cli {

// What the GPU backend takes from the flags: --precision (fp32, fp16, bf16, q8, q4 and the
// k-quants, widened on the device as generate --device cuda does) and --kv.
struct CudaBackendOptions {
    std::string precision = "fp32";
    glass::KvType kv = glass::KvType::fp32;
};

// The whole model on this process's GPU ("no CUDA device: ..." where there is none).
std::unique_ptr<glass::serve::PagedBackend> make_cuda_paged_backend(const glass::Model& model, const CudaBackendOptions& o);

// Every rank's part on its GPU, for ParallelPagedBackend (NCCL between GPUs; thread ranks sharing
// one GPU, and the emulator, all-reduce through the host: cuda/collectives.hpp).
glass::dist::MakeRankPart cuda_rank_parts(const CudaBackendOptions& o);

}  // namespace cli
