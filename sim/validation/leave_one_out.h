#pragma once
// Leave one source out: does the model predict a publication it was not
// fitted to? For each publication of the GPU suite, the kernel table's figures
// that `pipescope calibrate` fits by default (gemm_efficiency,
// memory_efficiency, kernel_overhead_s) are fitted on the cases of every other
// publication, as one factor each on every device's table, and the left-out
// publication's cases are simulated with the fitted tables.
//
// The objective is calibrate's (sim/validation/calibration.h), summed over the cases of
// the other publications:
//
//   F(u) = sum_i log(value_i(u) / published_i)^2 + lambda * sum_j u_j^2
//
// with u_j the log of parameter j's factor and lambda = kPriorWeight. It is
// minimised by Gauss-Newton from the tables (u = 0): the cases'
// sensitivities by forward differences (a simulation of the suite per
// parameter), a 3 x 3 solve for the step, the step halved until F falls,
// the sensitivities taken again, up to five steps (a factor that would take
// a figure outside calibrate's range stops at it). Each left-out case is
// then simulated at its fold's factors. A fold costs some twenty
// simulations of the suite, so `validate` computes the table only when asked
// (--leave-one-out).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "costmodels/kernel_table.h"
#include "sim/validation/gpu_validation.h"

namespace pipescope {

struct LeftOut {
  std::string publication;
  std::size_t cases = 0;
  std::vector<double> factors;          // per fitted parameter: fitted / table
  double median_abs_error = 0.0;        // of its cases with the fitted tables
  double mean_faster = 0.0;             // mean faster_error, likewise
  double suite_median_abs_error = 0.0;  // with the tables as they are
};

struct LeaveOneOutReport {
  std::vector<const CalibrationParameter*> parameters;
  std::vector<LeftOut> sources;  // in the order the publications first appear
  double median = 0.0;           // of the left-out medians
};

// Cases whose device has no kernel table are left out of fits and folds.
// `parameters`: default_fit() (sim/validation/calibration.h). `progress(done, total)`
// after each fold.
LeaveOneOutReport leave_one_source_out(
    const std::vector<GpuCase>& cases, const std::vector<const CalibrationParameter*>& parameters,
    const std::function<void(std::size_t, std::size_t)>& progress = {});

// One fold alone: the log factors (u) fitted on every case of `cases` whose
// publication is not `left_out`, and F there.
struct FoldFit {
  std::vector<double> u;
  double objective = 0.0;
};
FoldFit fit_without_source(const std::vector<GpuCase>& cases,
                           const std::vector<const CalibrationParameter*>& parameters,
                           const std::string& left_out);
// F at log factors u over the cases of `cases` not from `left_out`.
double leave_one_out_objective(const std::vector<GpuCase>& cases,
                               const std::vector<const CalibrationParameter*>& parameters,
                               const std::string& left_out, const std::vector<double>& u);

// `c` with each of `parameters` in its device's kernel table multiplied by
// exp(u[j]), kept within the parameter's range.
GpuCase with_scaled_table(const GpuCase& c,
                          const std::vector<const CalibrationParameter*>& parameters,
                          const std::vector<double>& u);

// The solution of the n x n system a x = b (Gaussian elimination with partial
// pivoting); a must be non-singular.
std::vector<double> solve_linear(std::vector<std::vector<double>> a, std::vector<double> b);

}  // namespace pipescope
