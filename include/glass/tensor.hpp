/// \file
/// \brief glass/tensor.hpp — the few matrix types the CPU reference is written with.
/// ```text
/// Everything is fp32 and row-major, like the checkpoint on disk: a weight W stored as [out, in]
/// computes y = W x, and a block of activations is [n_tokens, width], one row per position.
/// Eigen (3.4) supplies the products; Map types let us view mmap'd weights without copying.
/// ```
#pragma once

#include <Eigen/Core>

namespace glass {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;                               // a column of floats
using ConstMatrixMap = Eigen::Map<const RowMatrix>;           // a read-only view of weights
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

}  // namespace glass
