/// \file
/// \brief glass/trace.hpp — an optional window into the forward pass, for explaining it (glass explain).
/// ```text
/// transformer_forward(model, cache, ids, &trace) fills a ForwardTrace with what each layer saw for
/// the n positions it computed (start_pos .. start_pos+n-1). Passing no trace (the default) costs
/// nothing and changes nothing: the numbers below are copies taken on the way, never inputs.
///
/// Per layer:
///   attention[h]                    [n, start_pos + n]  head h's softmax weights; row i is position
///                                                        start_pos + i, and its columns past that
///                                                        position are 0 (the causal mask)
///   residual_norm_after_attention   [n]  ‖x‖₂ of each row once the attention output is added
///   residual_norm_after_mlp         [n]  ‖x‖₂ of each row once the MLP output is added
/// ```
#pragma once

#include <vector>

#include "glass/tensor.hpp"

namespace glass {

/// What one layer saw for the n positions it computed.
struct LayerTrace {
    std::vector<RowMatrix> attention;       ///< [n_heads] -> [n, start_pos + n]
    Vector residual_norm_after_attention;   ///< [n]
    Vector residual_norm_after_mlp;         ///< [n]
};

/// What one forward pass saw: filled by transformer_forward when given a pointer to one.
struct ForwardTrace {
    int start_pos = 0;               ///< the position of the first computed row
    std::vector<LayerTrace> layers;  ///< [n_layers]
};

}  // namespace glass
