// tools/cuda_backend.cpp — --backend cuda's two factories (cuda_backend.hpp says where each build
// takes them from).
#include "cuda_backend.hpp"

#include "glass/errors.hpp"

#ifdef GLASS_HAVE_CUDA
#include "paged.hpp"
#include "parallel_paged.hpp"
#endif

namespace cli {

#ifdef GLASS_HAVE_CUDA

namespace {

// The kernels every serving test runs: tiled products and per-row paged attention, both batch
// invariant (a request's numbers do not depend on who shares its step: cuda/paged.hpp).
glass::cuda::CudaPagedOptions paged_options(const CudaBackendOptions& o) {
    return {.weights = glass::cuda::weight_type_from_string(o.precision), .kv = o.kv};
}

}  // namespace

std::unique_ptr<glass::serve::PagedBackend> make_cuda_paged_backend(const glass::Model& model, const CudaBackendOptions& o) {
    return std::make_unique<glass::cuda::CudaPagedBackend>(model, paged_options(o));
}

glass::dist::MakeRankPart cuda_rank_parts(const CudaBackendOptions& o) {
    return glass::cuda::cuda_rank_parts(paged_options(o));
}

#else

namespace {

[[noreturn]] void no_cuda() {
    glass::fail("--backend cuda: this glass was built without CUDA (configured with GLASS_CUDA=OFF, or no nvcc "
                "was found); install the CUDA toolkit and reconfigure, or use --backend fast");
}

}  // namespace

std::unique_ptr<glass::serve::PagedBackend> make_cuda_paged_backend(const glass::Model&, const CudaBackendOptions&) {
    no_cuda();
}

glass::dist::MakeRankPart cuda_rank_parts(const CudaBackendOptions&) { no_cuda(); }

#endif

}  // namespace cli
