#include "sim/validation/rank_correlation.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <stdexcept>

namespace pipescope {

std::vector<double> ranks_of(const std::vector<double>& values) {
  if (!std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); })) {
    throw std::invalid_argument("ranks of a value that is not a finite number");
  }
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t i, std::size_t j) { return values[i] < values[j]; });
  std::vector<double> ranks(values.size());
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first;  // the run of values equal to order[first]'s
    while (last + 1 < order.size() && values[order[last + 1]] == values[order[first]]) ++last;
    const double mean = (static_cast<double>(first + last) / 2.0) + 1.0;
    for (std::size_t k = first; k <= last; ++k) ranks[order[k]] = mean;
    first = last + 1;
  }
  return ranks;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) {
    throw std::invalid_argument("a rank correlation needs two lists of one length, at least 2");
  }
  const std::vector<double> ra = ranks_of(a);
  const std::vector<double> rb = ranks_of(b);
  const double mean = (static_cast<double>(a.size()) + 1.0) / 2.0;  // of either's ranks
  double both = 0.0, only_a = 0.0, only_b = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    both += (ra[i] - mean) * (rb[i] - mean);
    only_a += (ra[i] - mean) * (ra[i] - mean);
    only_b += (rb[i] - mean) * (rb[i] - mean);
  }
  if (only_a == 0.0 || only_b == 0.0) return 0.0;
  return both / std::sqrt(only_a * only_b);
}

}  // namespace pipescope
