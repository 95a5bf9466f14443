/// \file
/// \brief cuda/collectives.cpp — the all-reduce of collectives.hpp: the rank-order sum, the host
/// stand-in, and NCCL opened with dlopen (libglass_cuda only; the emulator has the stand-in).
#include "collectives.hpp"

#include <functional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "glass/errors.hpp"
#include "glass_cuda.hpp"

#ifndef GLASS_CUDA_EMULATED
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace glass::cuda {

void DeviceCollectives::all_reduce_sum(float* d_values, std::int64_t n) {
    if (size() == 1 || n == 0) return;  // nothing to add, nothing moves (as Communicator::all_reduce_sum)
    const std::size_t bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(size()) * sizeof(float);
    if (bytes > gathered_.bytes()) gathered_ = DeviceBuffer(bytes);
    all_gather(d_values, gathered_.f32(), n);         // [size, n]
    sum_rank_slices(gathered_.f32(), size(), n, d_values);  // in rank order
    ++calls_;
}

const char* to_string(CollectivesKind k) {
    switch (k) {
    case CollectivesKind::automatic: return "automatic";
    case CollectivesKind::nccl: return "nccl";
    case CollectivesKind::host: return "host";
    }
    return "?";
}

// ---- The stand-in: through the host, over the group's Communicator --------------------------------

class HostCollectives : public DeviceCollectives {
public:
    using DeviceCollectives::DeviceCollectives;
    const char* transport() const override { return "host"; }
    void all_gather(const float* d_mine, float* d_all, std::int64_t n) override {
        const std::size_t count = static_cast<std::size_t>(n);
        mine_.resize(count);
        all_.resize(count * static_cast<std::size_t>(size()));
        download(mine_.data(), d_mine, count * sizeof(float));  // waits for the work that made them
        group_.all_gather(std::span<const float>(mine_), std::span<float>(all_));
        upload(d_all, all_.data(), all_.size() * sizeof(float));
    }

private:
    std::vector<float> mine_, all_;
};

// ---- NCCL ------------------------------------------------------------------------------------------

#ifndef GLASS_CUDA_EMULATED

namespace {

struct NcclApi {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
};

template <typename F>
void load_nccl_symbol(void* library, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(library, name));
    if (!f) fail("the NCCL library has no symbol ", name);
}

const NcclApi& nccl() {
    static const NcclApi api = [] {
        const std::string name = "libnccl.so." + std::to_string(NCCL_MAJOR);
        // The toolkit's copy first (the header this file was compiled with), then the loader's.
        void* library = dlopen((std::string(GLASS_NCCL_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library) library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library)
            fail("cannot load NCCL (", name, " from ", GLASS_NCCL_DIR, " or the loader's path): ", dlerror(),
                 "; CollectivesKind::host all-reduces through the host instead");
        NcclApi a;
        load_nccl_symbol(library, "ncclGetUniqueId", a.get_unique_id);
        load_nccl_symbol(library, "ncclCommInitRank", a.comm_init_rank);
        load_nccl_symbol(library, "ncclCommDestroy", a.comm_destroy);
        load_nccl_symbol(library, "ncclAllGather", a.all_gather);
        load_nccl_symbol(library, "ncclGetErrorString", a.error_string);
        return a;
    }();
    return api;
}

void nccl_check(ncclResult_t result, const char* what) {
    if (result != ncclSuccess) fail("NCCL: ", what, " failed: ", nccl().error_string(result));
}

class NcclCollectives : public DeviceCollectives {
public:
    explicit NcclCollectives(dist::Communicator& group) : DeviceCollectives(group) {
        ncclUniqueId id{};
        if (group.rank() == 0) nccl_check(nccl().get_unique_id(&id), "ncclGetUniqueId");
        group.broadcast(std::span<char>(id.internal, sizeof id.internal), 0);  // over MPI or threads
        nccl_check(nccl().comm_init_rank(&comm_, group.size(), id, group.rank()), "ncclCommInitRank");
    }
    ~NcclCollectives() override {
        if (comm_) nccl().comm_destroy(comm_);
    }
    const char* transport() const override { return "nccl"; }
    void all_gather(const float* d_mine, float* d_all, std::int64_t n) override {
        // Queued on the stream all of glass's work goes to (--default-stream per-thread).
        nccl_check(nccl().all_gather(d_mine, d_all, static_cast<std::size_t>(n), ncclFloat, comm_, cudaStreamPerThread),
                   "ncclAllGather");
    }

private:
    ncclComm_t comm_ = nullptr;
};

}  // namespace

#endif

namespace {

// Whether two ranks of `group` run on the same GPU (the same device of the same host), which NCCL
// refuses. Every rank calls it at the same point (an all-gather of {host, device}).
bool ranks_share_a_device(dist::Communicator& group) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::int64_t mine[2] = {static_cast<std::int64_t>(std::hash<std::string>{}(host)), current_device()};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(group.size()));
    group.all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    for (std::size_t r = 0; r < all.size(); r += 2)
        if (!seen.insert({all[r], all[r + 1]}).second) return true;
    return false;
}

}  // namespace

std::unique_ptr<DeviceCollectives> make_collectives(dist::Communicator& group, CollectivesKind kind) {
    if (kind == CollectivesKind::automatic)
        kind = runs_on_emulator() || ranks_share_a_device(group) ? CollectivesKind::host : CollectivesKind::nccl;
    if (kind == CollectivesKind::host) return std::make_unique<HostCollectives>(group);
#ifdef GLASS_CUDA_EMULATED
    fail("NCCL runs on GPUs only: the emulator's collectives are the host stand-in (CollectivesKind::host)");
#else
    return std::make_unique<NcclCollectives>(group);
#endif
}

}  // namespace glass::cuda
