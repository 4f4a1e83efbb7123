// simulate_row, calibrate and cost_model_file_of (sim/validation/calibration.h):
// the measured rows run as `pipescope simulate` runs them, and the fit of the
// kernel table's figures to them. The inputs are read in calibration_inputs.cpp,
// the optimiser is in nelder_mead.cpp.

#include "sim/validation/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>
#include <utility>

#include "sim/base/parallel.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {

// ---- Rows as `pipescope simulate` runs them ----

namespace {

struct PreparedRow {
  Scenario scenario;  // one replica's, with the row's batch
  SimConfig config;
  // With replicas: the whole cluster, whose ring between them the fit re-prices
  // under each trial table (its link efficiency moves the all-reduce too).
  std::optional<Cluster> replicas_cluster;
  int stages = 1;
  int replicas = 1;
};

PreparedRow prepare_row(const Scenario& base, const MeasuredStep& row, PartitionMethod partition) {
  PreparedRow p;
  p.scenario = base;
  const int K = row.stages;
  const int D = row.data_parallel;
  const int N = base.cluster.devices;
  if (row.micro_batch) {
    const double batch = static_cast<double>(*row.micro_batch) * row.micro_batches * D;
    if (batch > static_cast<double>(std::int64_t{1} << 40)) {
      throw ConfigError("micro_batch x M x D = " + std::to_string(batch) +
                        " samples, above the 2^40 a global batch may hold");
    }
    p.scenario.training.global_batch = *row.micro_batch * row.micro_batches * D;
  }
  if (std::int64_t{K} * D > N) {
    throw ConfigError("K x D = " + std::to_string(std::int64_t{K} * D) +
                      " devices; the scenario's cluster has " + std::to_string(N));
  }
  SimConfig& c = p.config;
  c.stages = K;
  c.micro_batches = row.micro_batches;
  c.schedule = row.schedule;
  c.remat = row.remat;
  if (row.chunks) c.chunks = row.chunks;
  c.partition = partition;
  c.record_timeline = false;
  if (D > 1) {
    if (p.scenario.training.global_batch % D != 0) {
      throw ConfigError("D=" + std::to_string(D) + " does not divide the global batch of " +
                        std::to_string(p.scenario.training.global_batch));
    }
    c.data_parallel = data_parallel_ring(base.cluster, K, D, base.training.expert_parallel);
    p.replicas_cluster = base.cluster;
    p.stages = K;
    p.replicas = D;
    p.scenario = replica_scenario(p.scenario, K, D);
  }
  return p;
}

}  // namespace

double simulate_row(const Scenario& scenario, const MeasuredStep& row, PartitionMethod partition) {
  const PreparedRow p = prepare_row(scenario, row, partition);
  return simulate(p.scenario, p.config).metrics.step_time_s();
}

// ---- The fit ----

namespace {

// A parameter's range in u = log x: the registry's, with a lower bound of 0
// (kernel_overhead_s) raised to 1e-4 of the upper one, which is 0 for every
// purpose a fit has (0.1 us for the kernel overhead).
std::pair<double, double> log_range(const CalibrationParameter& p) {
  const double lo = std::max(p.min, p.max * 1e-4);
  return {std::log(lo), std::log(p.max)};
}

double relative_error(double simulated, double measured) {
  return (simulated - measured) / measured;
}

void check_can_calibrate(const Device& device, const std::vector<MeasuredStep>& rows,
                         const std::vector<const CalibrationParameter*>& fit,
                         const std::string& csv) {
  if (!device.kernels.present) {
    throw std::invalid_argument(
        "device '" + device.name +
        "' has no kernel table: calibrate fits the kernel-level model's figures, which need one "
        "(give \"kernels\" in the scenario's device)");
  }
  if (rows.empty()) throw std::invalid_argument(csv + ": no measured steps");
  if (fit.empty()) throw std::invalid_argument("--fit: name at least one parameter");
}

using Cuts = std::vector<std::vector<StageRange>>;  // per row, its stages' layers

// The measured rows, ready to run under trial kernel tables.
class RowRunner {
 public:
  RowRunner(const Scenario& scenario, const std::vector<MeasuredStep>& rows, const std::string& csv,
            PartitionMethod partition);

  // Every row under `table`, each with the cut its config holds (free: the
  // optimal partitioner's, as `pipescope simulate` cuts; fixed: the cut of a
  // round, see fit_in_rounds), the cuts it ran with into `cuts` when given. A
  // row that cannot run is an error naming its line.
  std::vector<double> simulate_all(const KernelTable& table, Cuts* cuts = nullptr);
  void fix_cuts(const Cuts& cuts) {
    for (std::size_t i = 0; i < prepared_.size(); ++i) prepared_[i].config.stage_ranges = cuts[i];
  }
  void free_cuts() {
    for (PreparedRow& p : prepared_) p.config.stage_ranges.reset();
  }

 private:
  ScenarioError row_error(const MeasuredStep& row, const std::exception& e) const {
    return ScenarioError(csv_, "line " + std::to_string(row.line), row.label() + ": " + e.what());
  }
  void run_row(std::size_t i, const KernelTable& table, std::vector<double>& times, Cuts* cuts);

  const std::vector<MeasuredStep>& rows_;
  const std::string& csv_;
  std::vector<PreparedRow> prepared_;
  unsigned threads_ = 1;
};

RowRunner::RowRunner(const Scenario& scenario, const std::vector<MeasuredStep>& rows,
                     const std::string& csv, PartitionMethod partition)
    : rows_(rows), csv_(csv) {
  // The rows run under the kernel-level model, whatever the scenario chose, and
  // so do the rings between their replicas.
  Scenario kernels = scenario;
  kernels.cluster.cost_model = CostModelKind::kKernels;
  kernels.cluster.profile = nullptr;
  prepared_.reserve(rows.size());
  for (const MeasuredStep& row : rows) {
    try {
      prepared_.push_back(prepare_row(kernels, row, partition));
    } catch (const std::exception& e) {
      throw row_error(row, e);
    }
  }
  threads_ = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                             static_cast<unsigned>(rows.size())));
}

void RowRunner::run_row(std::size_t i, const KernelTable& table, std::vector<double>& times,
                        Cuts* cuts) {
  PreparedRow& p = prepared_[i];
  p.scenario.cluster.device.kernels = table;
  try {
    if (p.replicas_cluster) {
      p.replicas_cluster->device.kernels = table;
      p.config.data_parallel = data_parallel_ring(*p.replicas_cluster, p.stages, p.replicas,
                                                  p.scenario.training.expert_parallel);
    }
    const SimResult r = simulate(p.scenario, p.config);
    times[i] = r.metrics.step_time_s();
    if (cuts != nullptr) {
      for (const StageCost& c : r.stage_costs) (*cuts)[i].push_back(c.layers);
    }
  } catch (const std::exception& e) {
    throw row_error(rows_[i], e);
  }
}

std::vector<double> RowRunner::simulate_all(const KernelTable& table, Cuts* cuts) {
  std::vector<double> times(rows_.size());
  if (cuts != nullptr) cuts->assign(rows_.size(), {});
  parallel_for(rows_.size(), threads_, [&](std::size_t i) { run_row(i, table, times, cuts); });
  return times;
}

// The fitted parameters as coordinates u_j = log x_j in their ranges, around
// the device's table.
struct FitSpace {
  const KernelTable& table;
  const std::vector<const CalibrationParameter*>& fit;
  BoxFunction box;         // lo and hi; f set by the fit
  std::vector<double> u0;  // the table's values

  KernelTable table_at(const std::vector<double>& u) const {
    KernelTable t = table;
    for (std::size_t j = 0; j < fit.size(); ++j) {
      t.*fit[j]->field = std::clamp(std::exp(u[j]), fit[j]->min, fit[j]->max);
    }
    return t;
  }
};

FitSpace fit_space(const KernelTable& table, const std::vector<const CalibrationParameter*>& fit) {
  FitSpace space{table, fit, {}, {}};
  for (const CalibrationParameter* p : fit) {
    const auto [lo, hi] = log_range(*p);
    space.box.lo.push_back(lo);
    space.box.hi.push_back(hi);
    space.u0.push_back(std::clamp(std::log(std::max(table.*p->field, 1e-300)), lo, hi));
  }
  return space;
}

// F(x) of calibration.h, at the rows' simulated `times` and the point `u`.
double objective(const std::vector<double>& times, const std::vector<MeasuredStep>& rows,
                 const std::vector<double>& u, const std::vector<double>& u0) {
  double f = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!(times[i] > 0.0)) return std::numeric_limits<double>::infinity();
    const double r = std::log(times[i] / rows[i].step_time_s);
    f += r * r;
  }
  for (std::size_t j = 0; j < u.size(); ++j) f += kPriorWeight * (u[j] - u0[j]) * (u[j] - u0[j]);
  return f;
}

struct FittedPoint {
  std::vector<double> u;
  std::size_t evaluations = 0;
};

// The partitioner cuts each row where its stages balance under the figures
// being fitted, so a row's step time jumps where a small change of them moves
// a cut, and the objective has walls that trap a simplex far from the
// minimum. The fit therefore runs in rounds: each row keeps the cut the
// partitioner chose at the start of the round, which makes the objective
// continuous within it; after the round the rows are cut anew under the
// fitted figures, and the rounds end when the cuts stay. The step times
// reported and written are those of free cuts, as `simulate` gives them.
// `cuts` are the free cuts under the table's own figures.
FittedPoint fit_in_rounds(RowRunner& runner, const FitSpace& space, Cuts cuts,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  constexpr int kMaxRounds = 6;
  NelderMeadOptions options;
  options.max_evaluations = 300 * space.fit.size();
  const std::size_t total = options.max_evaluations * kMaxRounds;
  std::size_t done = 0;
  options.progress = [&](std::size_t evaluations, std::size_t) {
    if (progress) progress(std::min(done + evaluations, total), total);
  };
  FittedPoint out{space.u0, 0};
  for (int round = 0; round < kMaxRounds; ++round) {
    runner.fix_cuts(cuts);
    const Minimum m = nelder_mead(space.box, out.u, options);
    done += m.evaluations;
    out.evaluations += m.evaluations;
    out.u = m.u;
    runner.free_cuts();
    Cuts next;
    runner.simulate_all(space.table_at(out.u), &next);
    ++out.evaluations;
    if (next == cuts) break;
    cuts = std::move(next);
  }
  if (progress) progress(total, total);
  return out;
}

void measure_errors(const std::vector<MeasuredStep>& rows, CalibrationResult& result) {
  double sum = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double e = relative_error(result.simulated_after[i], rows[i].step_time_s);
    sum += e * e;
    result.max_relative_error = std::max(result.max_relative_error, std::abs(e));
  }
  result.rms_relative_error = std::sqrt(sum / static_cast<double>(rows.size()));
}

}  // namespace

CalibrationResult calibrate(const Scenario& scenario, const std::vector<MeasuredStep>& rows,
                            const std::vector<const CalibrationParameter*>& fit,
                            const std::string& csv, PartitionMethod partition,
                            const std::function<void(std::size_t, std::size_t)>& progress) {
  check_can_calibrate(scenario.cluster.device, rows, fit, csv);
  RowRunner runner(scenario, rows, csv, partition);
  FitSpace space = fit_space(scenario.cluster.device.kernels, fit);
  const auto objective_at = [&](const std::vector<double>& times, const std::vector<double>& u) {
    return objective(times, rows, u, space.u0);
  };

  CalibrationResult result;
  result.partition = partition;
  Cuts cuts;
  result.simulated_before = runner.simulate_all(space.table, &cuts);
  result.objective_before = objective_at(result.simulated_before, space.u0);
  space.box.f = [&](const std::vector<double>& u) {
    return objective_at(runner.simulate_all(space.table_at(u)), u);
  };
  const FittedPoint fitted = fit_in_rounds(runner, space, std::move(cuts), progress);
  result.evaluations = fitted.evaluations;
  result.fitted = space.table_at(fitted.u);
  result.simulated_after = runner.simulate_all(result.fitted);
  result.objective_after = objective_at(result.simulated_after, fitted.u);
  for (const CalibrationParameter* p : fit) {
    result.changes.push_back({p, space.table.*p->field, result.fitted.*p->field});
  }
  measure_errors(rows, result);
  return result;
}

CostModelFile cost_model_file_of(const Scenario& scenario, const CalibrationResult& result,
                                 const std::string& csv, std::size_t rows) {
  CostModelFile f = cost_model_of(result.fitted, scenario.cluster.device.name);
  CostModelFit fit;
  fit.measured = std::filesystem::path(csv).filename().string();
  fit.rows = static_cast<std::int64_t>(rows);
  fit.rms_relative_error = result.rms_relative_error;
  fit.max_relative_error = result.max_relative_error;
  fit.partition = result.partition;
  f.fit = std::move(fit);
  return f;
}

}  // namespace pipescope
