/// \file
/// \brief cuda/embedding.cu — journey step 2 on the GPU: ids → rows of the embedding table.
/// ```text
/// In:  ids [n_tokens] (device), table [vocab, dim] (fp32, fp16 or bf16).
/// Out: out [n_tokens, dim] fp32, row t = table row ids[t].
///
/// One thread per output element. A gather, no arithmetic: with f16/bf16 storage the row is
/// widened to fp32 exactly (every f16/bf16 value is an fp32 value).
/// ```
#include "common.cuh"

namespace glass::cuda {

template <typename W>
__global__ void embedding_kernel(const W* table, int vocab, int dim, const int* ids, int n_tokens,
                                 float* out) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into out
    if (i >= std::int64_t{n_tokens} * dim) return;
    const std::int64_t t = i / dim, column = i % dim;
    const int id = ids[t];
    // The host has already refused bad ids; should one slip through, write NaN, never read past
    // the table.
    out[i] = (id >= 0 && id < vocab) ? load_weight(table, std::int64_t{id} * dim + column) : NAN;
}

void embedding(const DeviceMatrix& table, const int* d_ids, int n_tokens, float* d_out) {
    if (n_tokens < 1) fail("embedding: need at least one token, got ", n_tokens);
    if (has_integer_weights(table.type))  // DeviceWeights keeps the table fp32 beside a quantized model
        fail("embedding: the table must be fp32, fp16 or bf16, got ", to_string(table.type));
    const std::int64_t n = std::int64_t{n_tokens} * table.cols;
    const unsigned blocks = grid_for(n, 256);
    switch (table.type) {
        case WeightType::f32:
            embedding_kernel<<<blocks, 256>>>(static_cast<const float*>(table.data), table.rows,
                                              table.cols, d_ids, n_tokens, d_out);
            break;
        case WeightType::f16:
            embedding_kernel<<<blocks, 256>>>(static_cast<const __half*>(table.data), table.rows,
                                              table.cols, d_ids, n_tokens, d_out);
            break;
        case WeightType::bf16:
            embedding_kernel<<<blocks, 256>>>(static_cast<const __nv_bfloat16*>(table.data),
                                              table.rows, table.cols, d_ids, n_tokens, d_out);
            break;
        case WeightType::q8_0:
        case WeightType::q4_0:
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: break;  // refused above
    }
    CHECK_LAUNCH("embedding_kernel");
}

}  // namespace glass::cuda
