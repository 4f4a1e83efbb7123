#pragma once
// Tensors of the reference executor: row-major fp32 matrices (Eigen). An
// activation of a micro-batch of b sequences of s positions and width h is a
// (b*s, h) matrix, sample-major: row i*s + t is position t of sequence i.

#include <Eigen/Core>

namespace pipescope::exec {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace pipescope::exec
