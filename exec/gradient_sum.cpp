#include "exec/gradient_sum.h"

#include <chrono>
#include <memory>
#include <vector>

#include "exec/compute/thread_clock.h"
#include "exec/timing.h"

namespace pipescope::exec {

namespace {

// Runs `copy` and adds its time to `tally` (null: not counted) as part of a
// collective.
template <typename Copy>
void counted(CollectiveTally* tally, const Copy& copy) {
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  copy();
  if (tally != nullptr) tally->add(start, cpu_start, 0, 0);
}

constexpr int kParams = 4;

// Rank `rank`'s median time of one sum_gradients over `group` of `floats`
// values, over kParams parameters, the ranks summing back to back `repeats`
// times after one untimed call.
double median_sum_s(TensorGroup& group, int rank, Eigen::Index floats, int repeats) {
  std::vector<Param> owned(kParams);
  std::vector<Param*> params;
  for (Param& p : owned) {
    p.grad = Matrix::Zero(1, floats / kParams);
    params.push_back(&p);
  }
  return median_call_s(repeats, [&] { sum_gradients(group, rank, params); });
}

}  // namespace

void sum_gradients(TensorGroup& group, int rank, const std::vector<Param*>& params) {
  CollectiveTally* tally = current_collective_tally();
  Index total = 0;
  for (const Param* p : params) total += p->grad.size();
  Matrix all;
  counted(tally, [&] {
    all.resize(1, total);
    Index at = 0;
    for (const Param* p : params) {
      all.middleCols(at, p->grad.size()) = p->grad.reshaped<Eigen::RowMajor>().transpose();
      at += p->grad.size();
    }
  });
  group.all_reduce(rank, all);
  counted(tally, [&] {
    Index at = 0;
    for (Param* p : params) {
      p->grad.reshaped<Eigen::RowMajor>() = all.middleCols(at, p->grad.size()).transpose();
      at += p->grad.size();
    }
  });
}

bool gradient_sum_fits(int ranks, std::int64_t params, const std::optional<HostMemory>& host) {
  constexpr double kBytesPerParam = 3.0 * sizeof(float);
  return !host || static_cast<double>(ranks) * static_cast<double>(params) * kBytesPerParam <=
                      static_cast<double>(host->bytes);
}

TransportFigures profile_gradient_sum(int ranks, int repeats, Eigen::Index largest) {
  const auto one_s = [](int n, Eigen::Index floats, int times) {
    TensorGroup group(n);
    double first = 0.0;
    run_threads(n, [&](int rank) {
      const double s = median_sum_s(group, rank, floats, times);
      if (rank == 0) first = s;
    });
    return first;
  };
  return group_figures(ranks, repeats, "a gradient sum", one_s, largest);
}

TransportFigures profile_linked_gradient_sum(const std::shared_ptr<GroupLink>& link, int repeats,
                                             Eigen::Index largest) {
  const int ranks = link ? link->ranks() : 0;
  const auto one_s = [&link](int, Eigen::Index floats, int times) {
    TensorGroup group(link);
    return median_sum_s(group, link->rank(), floats, times);
  };
  return group_figures(ranks, repeats, "a gradient sum", one_s, largest);
}

}  // namespace pipescope::exec
