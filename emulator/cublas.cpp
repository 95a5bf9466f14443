// emulator/cublas.cpp — a stand-in libcublas for the CPU build: the seven entry points glass
// uses, with cuBLAS's column-major conventions and argument checks, so that the emulated
// matmul_cublas exercises the same transposes and leading dimensions as on a GPU. Like the real
// library (which is not built with --default-stream per-thread), a handle works on the legacy
// default stream until cublasSetStream says otherwise; a product is queued on that stream, so it is
// recorded when that stream is being captured into a graph, and spoils the capture when it is not.
//
// cublasSgemm: C [m, n] = alpha · op(A) [m, k] · op(B) [k, n] + beta · C, every matrix column-major
// (element (i, j) of X at X[i + j · ldX]); op(X) = X or Xᵀ. As in BLAS, beta = 0 means C is not
// read (it may hold NaN). Sums run in fp32, in order of k.
#include <cublas_v2.h>

#include <algorithm>

struct cublasContext {
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
    cudaStream_t stream = nullptr;  // null: the legacy default stream, as in cuBLAS
};

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode < CUBLAS_DEFAULT_MATH || mode > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, std::size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && !workspace) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;  // the stand-in needs no scratch
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                              int m, int n, int k, const float* alpha, const float* A, int lda,
                              const float* B, int ldb, const float* beta, float* C, int ldc) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    // The checks cuBLAS makes: op(A) is m × k, so A has (ta ? k : m) rows; likewise B.
    if (m < 0 || n < 0 || k < 0 || !alpha || !beta || lda < std::max(1, ta ? k : m) ||
        ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    // Scalars are read now (host pointer mode); the matrices when the work runs.
    const float a_scale = *alpha, b_scale = *beta;
    const auto product = [=] {
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) {
                float sum = 0.0f;
                for (int l = 0; l < k; ++l) {
                    const float a = ta ? A[l + static_cast<long>(i) * lda] : A[i + static_cast<long>(l) * lda];
                    const float b = tb ? B[j + static_cast<long>(l) * ldb] : B[l + static_cast<long>(j) * ldb];
                    sum += a * b;
                }
                float& c = C[i + static_cast<long>(j) * ldc];
                c = b_scale == 0.0f ? a_scale * sum : a_scale * sum + b_scale * c;
            }
    };
    const cudaStream_t stream = handle->stream ? handle->stream : cudaStreamLegacy;
    if (glass_emu::enqueue(stream, "cublasSgemm", std::function<void()>(product)) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
    return status == CUBLAS_STATUS_SUCCESS ? "success" : "error (glass's emulated cuBLAS)";
}

}  // extern "C"
