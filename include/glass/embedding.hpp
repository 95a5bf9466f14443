/// \file
/// \brief glass/embedding.hpp — journey step 2: ids -> vectors.
/// ```text
/// In:  token ids [n_tokens]; the embedding table [vocab, dim].
/// Out: activations [n_tokens, dim], row t = table row ids[t].
///
/// No arithmetic happens here: an id is just a row number. The table is learned, and with a
/// large vocabulary it is one of the biggest matrices in the model: Llama 3 8B's is
/// 128,256 x 4,096 ≈ 525 M parameters (its output classifier has the same shape), against
/// 58.7 M (14,336 x 4,096) for the largest matrix inside one of its layers.
/// ```
#pragma once

#include <span>

#include "glass/errors.hpp"
#include "glass/tensor.hpp"

namespace glass {

/// The rows of `table` for `ids`, times `scale` ([n_tokens, dim]). `scale` is 1 for Llama, Qwen,
/// Mistral; Gemma multiplies by √dim (ModelConfig::embedding_scale), because its table is tied
/// to the classifier and kept small, while its layers expect a residual stream of norm ~√dim.
inline RowMatrix embed_tokens(const ConstMatrixMap& table, std::span<const int> ids, float scale = 1.0f) {
    RowMatrix x(static_cast<Eigen::Index>(ids.size()), table.cols());  // [n_tokens, dim]
    for (size_t t = 0; t < ids.size(); ++t) {
        if (ids[t] < 0 || ids[t] >= table.rows())
            fail("token id ", ids[t], " is outside the vocabulary [0, ", table.rows(), ")");
        x.row(static_cast<Eigen::Index>(t)) = table.row(ids[t]);
    }
    if (scale != 1.0f) x *= scale;
    return x;
}

}  // namespace glass
