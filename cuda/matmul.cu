/// \file
/// \brief cuda/matmul.cu — the products that hold almost all of a transformer's arithmetic.
/// ```text
/// In:  x [n, in] fp32 (one row per position); W [out, in] (fp32, fp16 or bf16, as stored in the
///      checkpoint: y = W x).
/// Out: y [n, out] = x · Wᵀ, fp32, accumulated in fp32.
///
/// Four ways, one answer (the harness checks each against Eigen's x * W.transpose()):
///   naive         one thread per y[t][o]: a plain dot product over `in`. Neighbouring threads
///                 read neighbouring *rows* of W, so loads are not coalesced: slow, but obviously
///                 right.
///   tiled         a block computes a 16×16 tile of y. It walks `in` in steps of 16, staging a 16×16
///                 tile of x and one of W in shared memory, so each number fetched from global
///                 memory is used 16 times. Prefill's matrix–matrix products.
///   warp_per_row  one warp (32 threads) per output row o: lanes read consecutive 16-byte chunks of
///                 W's row (coalesced), multiply by x, and a shuffle reduction sums the lanes. Decode
///                 is a matrix–vector product that reads every weight once: this reads them at
///                 full width. Loops over the n rows of x (meant for n <= 4).
///   cublas        NVIDIA's cublasSgemm in plain fp32 (no TF32), fp32 weights only: the production
///                 path for fp32.
/// ```
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "common.cuh"

namespace glass::cuda {

const char* to_string(MatmulKernel k) {
    switch (k) {
        case MatmulKernel::automatic: return "auto";
        case MatmulKernel::naive: return "naive";
        case MatmulKernel::tiled: return "tiled";
        case MatmulKernel::warp_per_row: return "warp_per_row";
        case MatmulKernel::cublas: return "cublas";
    }
    return "?";
}

MatmulKernel matmul_kernel_from_string(const std::string& name) {
    for (MatmulKernel k : {MatmulKernel::automatic, MatmulKernel::naive, MatmulKernel::tiled,
                           MatmulKernel::warp_per_row, MatmulKernel::cublas})
        if (name == to_string(k)) return k;
    fail("unknown matmul kernel '", name, "' (auto, naive, tiled, warp_per_row, cublas)");
}

// ---- naive -------------------------------------------------------------------------------------

template <typename W>
__global__ void matmul_naive_kernel(const float* x, int n, int in, const W* w, int out, float* y) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into y
    if (i >= std::int64_t{n} * out) return;
    const std::int64_t t = i / out, o = i % out;
    float sum = 0.0f;
    for (int k = 0; k < in; ++k) sum += x[t * in + k] * load_weight(w, o * in + k);
    y[i] = sum;
}

// ---- tiled -------------------------------------------------------------------------------------

constexpr int kTile = 16;

template <typename W>
__global__ void matmul_tiled_kernel(const float* x, int n, int in, const W* w, int out, float* y) {
    // +1 column of padding: threads reading down a column hit different shared-memory banks.
    __shared__ float x_tile[kTile][kTile + 1];  // [token][k]
    __shared__ float w_tile[kTile][kTile + 1];  // [output][k]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int t0 = blockIdx.y * kTile, o0 = blockIdx.x * kTile;
    const int t = t0 + ty, o = o0 + tx;  // the y element this thread owns
    float sum = 0.0f;
    for (int k0 = 0; k0 < in; k0 += kTile) {
        // Each thread stages one number of each tile; outside the matrices it stages 0.
        const int k = k0 + tx;
        x_tile[ty][tx] = (t0 + ty < n && k < in) ? x[std::int64_t{t0 + ty} * in + k] : 0.0f;
        w_tile[ty][tx] = (o0 + ty < out && k < in) ? load_weight(w, std::int64_t{o0 + ty} * in + k) : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < kTile; ++kk) sum += x_tile[ty][kk] * w_tile[tx][kk];
        __syncthreads();  // before the next step overwrites the tiles
    }
    if (t < n && o < out) y[std::int64_t{t} * out + o] = sum;
}

// ---- warp per row ------------------------------------------------------------------------------

// Dot product of one 16-byte chunk of W with the matching floats of x (4 fp32 or 8 fp16/bf16).
__device__ __forceinline__ float dot_chunk(const float* w, const float* x) {
    const float4 a = *reinterpret_cast<const float4*>(w);
    const float4 b = *reinterpret_cast<const float4*>(x);
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ float dot_chunk(const __half* w, const float* x) {
    const uint4 raw = *reinterpret_cast<const uint4*>(w);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
    const float4 b0 = *reinterpret_cast<const float4*>(x);
    const float4 b1 = *reinterpret_cast<const float4*>(x + 4);
    const float2 w0 = __half22float2(h[0]), w1 = __half22float2(h[1]);
    const float2 w2 = __half22float2(h[2]), w3 = __half22float2(h[3]);
    return w0.x * b0.x + w0.y * b0.y + w1.x * b0.z + w1.y * b0.w +
           w2.x * b1.x + w2.y * b1.y + w3.x * b1.z + w3.y * b1.w;
}
__device__ __forceinline__ float dot_chunk(const __nv_bfloat16* w, const float* x) {
    const uint4 raw = *reinterpret_cast<const uint4*>(w);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float4 b0 = *reinterpret_cast<const float4*>(x);
    const float4 b1 = *reinterpret_cast<const float4*>(x + 4);
    const float2 w0 = __bfloat1622float2(h[0]), w1 = __bfloat1622float2(h[1]);
    const float2 w2 = __bfloat1622float2(h[2]), w3 = __bfloat1622float2(h[3]);
    return w0.x * b0.x + w0.y * b0.y + w1.x * b0.z + w1.y * b0.w +
           w2.x * b1.x + w2.y * b1.y + w3.x * b1.z + w3.y * b1.w;
}

constexpr int kWarpsPerBlock = 8;

// `chunked`: rows of W and x start on 16-byte boundaries and `in` is a whole number of chunks
// (checked on the host); otherwise every lane takes single numbers.
template <typename W>
__global__ void matmul_warp_per_row_kernel(const float* x, int n, int in, const W* w, int out,
                                           float* y, bool chunked) {
    const int lane = threadIdx.x % 32;
    const int o = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // this warp's output row
    if (o >= out) return;  // a whole warp leaves together, so the shuffles below stay full
    const W* w_row = w + std::int64_t{o} * in;
    constexpr int per_chunk = 16 / sizeof(W);
    for (int t = 0; t < n; ++t) {
        const float* x_row = x + std::int64_t{t} * in;
        float sum = 0.0f;
        if (chunked) {
            for (int c = lane; c < in / per_chunk; c += 32)
                sum += dot_chunk(w_row + c * per_chunk, x_row + c * per_chunk);
        } else {
            for (int k = lane; k < in; k += 32) sum += load_weight(w_row, k) * x_row[k];
        }
        sum = warp_sum(sum);
        if (lane == 0) y[std::int64_t{t} * out + o] = sum;
    }
}

// ---- cuBLAS ------------------------------------------------------------------------------------
//
// cuBLAS is opened with dlopen on first use, not linked: loading libcublas(Lt) costs ~0.5 s and
// ~200 MB per process, which every `glass` run would pay, GPU or not.

struct CublasApi {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasSetMathMode) set_math_mode = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
    decltype(&cublasSgemm_v2) sgemm = nullptr;
    decltype(&cublasGetStatusName) status_name = nullptr;
    decltype(&cublasGetStatusString) status_string = nullptr;
    cublasHandle_t handle = nullptr;
    void* workspace = nullptr;  // device memory the handle works in; lives as long as the handle
};

#define CUBLAS_CHECK(api, call)                                                             \
    do {                                                                                    \
        const cublasStatus_t glass_status_ = (call);                                        \
        if (glass_status_ != CUBLAS_STATUS_SUCCESS)                                         \
            ::glass::fail("cuBLAS call ", #call, " failed at ", __FILE__, ":", __LINE__, ": ", \
                          (api).status_name(glass_status_), " (", (api).status_string(glass_status_), ")"); \
    } while (0)

template <typename F>
static void load_symbol(void* library, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(library, name));
    if (!f) fail("cuBLAS library has no symbol ", name);
}

static const CublasApi& cublas() {
    static const CublasApi api = [] {
        const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
        // The toolkit's own copy first (the headers this file was compiled with), then the loader's.
        void* library = dlopen((std::string(GLASS_CUBLAS_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library) library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!library)
            fail("cannot load cuBLAS (", name, " from ", GLASS_CUBLAS_DIR, " or the loader's path): ", dlerror(),
                 "; the other matmul kernels (naive, tiled, warp_per_row) do not need it");
        CublasApi a;
        load_symbol(library, "cublasCreate_v2", a.create);
        load_symbol(library, "cublasSetMathMode", a.set_math_mode);
        load_symbol(library, "cublasSetStream_v2", a.set_stream);
        load_symbol(library, "cublasSetWorkspace_v2", a.set_workspace);
        load_symbol(library, "cublasSgemm_v2", a.sgemm);
        load_symbol(library, "cublasGetStatusName", a.status_name);
        load_symbol(library, "cublasGetStatusString", a.status_string);
        CUBLAS_CHECK(a, a.create(&a.handle));
        // Plain fp32 arithmetic: TF32 tensor cores keep only 10 mantissa bits (~1e-3 relative
        // error), far outside the 1e-5 the CPU comparison allows.
        CUBLAS_CHECK(a, a.set_math_mode(a.handle, CUBLAS_DEFAULT_MATH));
        // The stream all of glass's work goes to (cuBLAS, built without --default-stream per-thread,
        // would otherwise use the legacy stream, which a graph capture cannot include).
        CUBLAS_CHECK(a, a.set_stream(a.handle, cudaStreamPerThread));
        // A workspace of our own (32 MiB, NVIDIA's suggestion for Hopper), set after the stream
        // (which resets it): cuBLAS then never allocates, also not while a graph is being captured.
        constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
        CUDA_CHECK(cudaMalloc(&a.workspace, kWorkspaceBytes));
        CUBLAS_CHECK(a, a.set_workspace(a.handle, a.workspace, kWorkspaceBytes));
        return a;  // the library stays open and the handle alive until the process ends
    }();
    return api;
}

static void matmul_cublas(const float* d_x, int n, const DeviceMatrix& w, float* d_y) {
    // cuBLAS is column-major. Row-major W [out, in] is column-major Wᶜ [in, out]; row-major x
    // [n, in] is xᶜ [in, n]; row-major y [n, out] is yᶜ [out, n] = (Wᶜ)ᵀ xᶜ.
    const float one = 1.0f, zero = 0.0f;
    const CublasApi& api = cublas();
    CUBLAS_CHECK(api, api.sgemm(api.handle, CUBLAS_OP_T, CUBLAS_OP_N, /*m=*/w.rows, /*n=*/n,
                                /*k=*/w.cols, &one, static_cast<const float*>(w.data), /*lda=*/w.cols,
                                d_x, /*ldb=*/w.cols, &zero, d_y, /*ldc=*/w.rows));
}

// ---- dispatch ----------------------------------------------------------------------------------

template <typename W>
static void launch(MatmulKernel kernel, const float* d_x, int n, const DeviceMatrix& w, float* d_y) {
    const W* weights = static_cast<const W*>(w.data);
    const int in = w.cols, out = w.rows;
    switch (kernel) {
        case MatmulKernel::naive:
            matmul_naive_kernel<<<grid_for(std::int64_t{n} * out, 256), 256>>>(d_x, n, in, weights, out, d_y);
            CHECK_LAUNCH("matmul_naive_kernel");
            return;
        case MatmulKernel::tiled: {
            if ((n + kTile - 1) / kTile > 65535) fail("matmul tiled: ", n, " rows exceed the grid's y limit");
            const dim3 grid(grid_for(out, kTile), grid_for(n, kTile)), block(kTile, kTile);
            matmul_tiled_kernel<<<grid, block>>>(d_x, n, in, weights, out, d_y);
            CHECK_LAUNCH("matmul_tiled_kernel");
            return;
        }
        case MatmulKernel::warp_per_row: {
            constexpr int per_chunk = 16 / sizeof(W);
            const bool chunked = in % per_chunk == 0 && reinterpret_cast<std::uintptr_t>(weights) % 16 == 0 &&
                                 reinterpret_cast<std::uintptr_t>(d_x) % 16 == 0;
            matmul_warp_per_row_kernel<<<grid_for(out, kWarpsPerBlock), kWarpsPerBlock * 32>>>(
                d_x, n, in, weights, out, d_y, chunked);
            CHECK_LAUNCH("matmul_warp_per_row_kernel");
            return;
        }
        case MatmulKernel::cublas:
        case MatmulKernel::automatic:
            break;
    }
    fail("internal: matmul kernel ", to_string(kernel), " reached the launcher");
}

void matmul(MatmulKernel kernel, const float* d_x, int n, const DeviceMatrix& w, float* d_y) {
    if (n < 1 || w.rows < 1 || w.cols < 1)
        fail("matmul: empty shape: x [", n, ", ", w.cols, "], W [", w.rows, ", ", w.cols, "]");
    if (has_integer_weights(w.type)) {  // widened inside quantize.cu's (q8/q4) or kquants.cu's kernels
        if (kernel == MatmulKernel::cublas)
            fail("matmul: the cublas kernel takes fp32 weights only, got ", to_string(w.type),
                 " (use naive, warp_per_row or auto)");
        const bool naive = kernel == MatmulKernel::naive;  // tiled and auto: warp per row
        if (is_k_quant(w.type)) (naive ? kquant_matmul_naive : kquant_matmul)(d_x, n, kquant_view(w), d_y);
        else (naive ? quantized_matmul_naive : quantized_matmul)(d_x, n, quantized_view(w), d_y);
        return;
    }
    if (kernel == MatmulKernel::automatic)
        kernel = w.type == WeightType::f32 ? MatmulKernel::cublas
                 : n <= 4                  ? MatmulKernel::warp_per_row
                                           : MatmulKernel::tiled;
    if (kernel == MatmulKernel::cublas) {
        if (w.type != WeightType::f32)
            fail("matmul: the cublas kernel takes fp32 weights only, got ", to_string(w.type),
                 " (use naive, tiled, warp_per_row or auto)");
        matmul_cublas(d_x, n, w, d_y);
        return;
    }
    switch (w.type) {
        case WeightType::f32: launch<float>(kernel, d_x, n, w, d_y); return;
        case WeightType::f16: launch<__half>(kernel, d_x, n, w, d_y); return;
        case WeightType::bf16: launch<__nv_bfloat16>(kernel, d_x, n, w, d_y); return;
        case WeightType::q8_0:
        case WeightType::q4_0:
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: break;  // handled above
    }
}

}  // namespace glass::cuda
