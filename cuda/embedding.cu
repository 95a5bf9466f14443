/// \file
/// \brief cuda/embedding.cu — journey step 2 on the GPU: ids → rows of the embedding table.
/// ```text
/// In:  ids [n_tokens] (device), table [vocab, dim] (fp32, fp16 or bf16).
/// Out: out [n_tokens, dim] fp32, row t = table row ids[t].
///
/// One thread per output element. A gather, no arithmetic: with f16/bf16 storage the row is
/// widened to fp32 exactly (every f16/bf16 value is an fp32 value). embedding_slice: the same
/// over one rank's rows of a table split by vocabulary, zeros for the ids other ranks hold.
/// ```
#include "common.cuh"

namespace glass::cuda {

// Row t = table row ids[t] − first_id. `outside`: what an id outside the table becomes: NaN for a
// whole table (the host has already refused bad ids; should one slip through, the logits show it
// and nothing is read past the table), zero for one rank's vocabulary slice.
template <typename W>
__global__ void embedding_kernel(const W* table, int first_id, int vocab, int dim, const int* ids, int n_tokens,
                                 float outside, float* out) {
    const std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;  // into out
    if (i >= std::int64_t{n_tokens} * dim) return;
    const std::int64_t t = i / dim, column = i % dim;
    const int row = ids[t] - first_id;
    out[i] = (row >= 0 && row < vocab) ? load_weight(table, std::int64_t{row} * dim + column) : outside;
}

static void launch_embedding(const DeviceMatrix& table, int first_id, const int* d_ids, int n_tokens, float outside,
                             float* d_out) {
    if (n_tokens < 1) fail("embedding: need at least one token, got ", n_tokens);
    if (has_integer_weights(table.type))  // DeviceWeights keeps the table fp32 beside a quantized model
        fail("embedding: the table must be fp32, fp16 or bf16, got ", to_string(table.type));
    const std::int64_t n = std::int64_t{n_tokens} * table.cols;
    const unsigned blocks = grid_for(n, 256);
    switch (table.type) {
        case WeightType::f32:
            embedding_kernel<<<blocks, 256>>>(static_cast<const float*>(table.data), first_id, table.rows,
                                              table.cols, d_ids, n_tokens, outside, d_out);
            break;
        case WeightType::f16:
            embedding_kernel<<<blocks, 256>>>(static_cast<const __half*>(table.data), first_id, table.rows,
                                              table.cols, d_ids, n_tokens, outside, d_out);
            break;
        case WeightType::bf16:
            embedding_kernel<<<blocks, 256>>>(static_cast<const __nv_bfloat16*>(table.data), first_id,
                                              table.rows, table.cols, d_ids, n_tokens, outside, d_out);
            break;
        case WeightType::q8_0:
        case WeightType::q4_0:
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: break;  // refused above
    }
    CHECK_LAUNCH("embedding_kernel");
}

void embedding(const DeviceMatrix& table, const int* d_ids, int n_tokens, float* d_out) {
    launch_embedding(table, 0, d_ids, n_tokens, NAN, d_out);
}

void embedding_slice(const DeviceMatrix& table, int first_id, const int* d_ids, int n_tokens, float* d_out) {
    launch_embedding(table, first_id, d_ids, n_tokens, 0.0f, d_out);
}

}  // namespace glass::cuda
