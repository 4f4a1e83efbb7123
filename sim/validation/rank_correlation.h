#pragma once
// Spearman's rank correlation: how well one list of figures orders the same
// items as another, whatever their scale (the simulated layouts of a study
// against the measured ones).

#include <vector>

namespace pipescope {

// The ranks of `values`, 1 for the least; tied values take the mean of the
// ranks they span ({3, 1, 3} -> {2.5, 1, 2.5}). Throws
// std::invalid_argument for a value that is not finite.
std::vector<double> ranks_of(const std::vector<double>& values);

// Spearman's rho of `a` against `b`: the Pearson correlation of their ranks
// (ranks_of), from -1 (the reverse order) to 1 (the same order); 0 when
// either list is all one value (it orders nothing). Throws
// std::invalid_argument unless both hold the same number of finite values,
// at least 2.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace pipescope
