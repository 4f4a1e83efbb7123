#pragma once
// Fitting the kernel-level cost model's efficiency parameters to step times a
// user measured (`pipescope calibrate`).
//
// The measured steps come as CSV with a header naming its columns, in any
// order: K, M, schedule, remat and step_time_s are required; D (data-parallel
// replicas, default 1), chunks (interleaved-1f1b's v, default the scenario's)
// and micro_batch (samples per micro-batch, default: the scenario's global
// batch / (M x D)) are optional, and an empty cell takes the default. Each row
// is simulated exactly as `pipescope simulate SCENARIO -K K -M M -D D
// --schedule S --remat R --chunks V` would, with
// --set training.global_batch=micro_batch x M x D when micro_batch is given.
//
// The objective, over the fitted parameters x_j (the ones `--fit` names, each
// kept within calibration_parameters()'s range):
//
//   F(x) = sum_i log(sim_i(x) / measured_i)^2
//        + lambda * sum_j log(x_j / table_j)^2,      lambda = kPriorWeight
//
// The first term is the squared relative error of each row, symmetric in
// over- and under-prediction; the second is a weak prior pulling each
// parameter toward its value in the device's table, so that a parameter the
// measurements cannot see (attention efficiency when every row has the same
// sequence length, say) stays where it was instead of wandering along a flat
// valley. F is minimised over u_j = log x_j by Nelder-Mead (Nelder and Mead
// 1965, "A simplex method for function minimization") with restarts; every
// evaluation simulates every row.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/kernel_table.h"
#include "sim/engine/partition.h"
#include "sim/formats/cost_model_file.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

// One measured step: a CSV row.
struct MeasuredStep {
  int line = 0;  // in the CSV, 1 = the header
  int stages = 1;
  int micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  Remat remat = Remat::kAlways;
  double step_time_s = 0.0;
  int data_parallel = 1;
  std::optional<int> chunks;
  std::optional<std::int64_t> micro_batch;  // samples per micro-batch

  // "K=4 M=8 gpipe remat always" (with D, v and b when given).
  std::string label() const;
};

// Throws ScenarioError "FILE: line L, column C: what is wrong (valid range)"
// for a missing header, an unknown, repeated or missing column, a row with the
// wrong number of cells and a value out of range; at least one row.
std::vector<MeasuredStep> parse_measured_csv(const std::string& text, const std::string& file);
std::vector<MeasuredStep> read_measured_csv(const std::filesystem::path& path);

// The parameters `--fit` names ("gemm_efficiency,memory_efficiency"); throws
// std::invalid_argument naming an unknown or repeated one and the valid names.
std::vector<const CalibrationParameter*> parse_fit_names(const std::string& names);
// gemm_efficiency, memory_efficiency, kernel_overhead_s: see kDefaultFit in
// calibration_inputs.cpp for why.
std::vector<const CalibrationParameter*> default_fit();

// The step time `scenario` gives for `row` (seconds), its stages cut by
// `partition`. Throws ConfigError when the row cannot run on the scenario (K x D
// above its devices, M not dividing the batch, ...).
double simulate_row(const Scenario& scenario, const MeasuredStep& row,
                    PartitionMethod partition = PartitionMethod::kOptimal);

// --- The optimiser, on its own for tests ---

// A function of u in the box [lo, hi] (one bound per coordinate, lo <= hi).
struct BoxFunction {
  std::function<double(const std::vector<double>&)> f;
  std::vector<double> lo;
  std::vector<double> hi;
};

struct Minimum {
  std::vector<double> u;
  double value = 0.0;
  std::size_t evaluations = 0;
};

struct NelderMeadOptions {
  double initial_step = 0.2;  // simplex edge, in u's units
  double tolerance = 1e-10;   // stop when the simplex's values differ by less
  double min_size = 1e-7;     // ... or it is smaller than this in every coordinate
  std::size_t max_evaluations = 2000;
  int restarts = 3;  // rebuild the simplex around the best point, while it helps
  std::function<void(std::size_t done, std::size_t total)> progress;
};

// Nelder-Mead from u0, every point clamped into the box.
Minimum nelder_mead(const BoxFunction& fn, std::vector<double> u0, const NelderMeadOptions& o);
// Brute force: the best of a grid of `points` values per coordinate, ends
// included (points >= 2).
Minimum grid_search(const BoxFunction& fn, int points);

// --- The fit ---

// The prior's weight lambda: a parameter a factor e from its table value costs
// as much as one row 1 % off.
inline constexpr double kPriorWeight = 1e-4;

struct ParameterChange {
  const CalibrationParameter* parameter = nullptr;
  double before = 0.0;
  double after = 0.0;
};

struct CalibrationResult {
  std::vector<double> simulated_before;  // per row, seconds
  std::vector<double> simulated_after;
  std::vector<ParameterChange> changes;  // the fitted parameters, in --fit order
  KernelTable fitted;                    // the device's table with the fitted values
  double objective_before = 0.0;
  double objective_after = 0.0;
  std::size_t evaluations = 0;
  double rms_relative_error = 0.0;  // after the fit
  double max_relative_error = 0.0;
  PartitionMethod partition = PartitionMethod::kOptimal;  // how every row was cut
};

// Fits `fit` to `rows` on `scenario` (whose device must have a kernel table; it
// is costed with the kernels model whatever its cluster.cost_model says), each
// row cut into stages by `partition` as `simulate --partition` cuts.
// Throws ScenarioError naming `csv` and the row's line when a row cannot run,
// std::invalid_argument when the device has no kernel table.
CalibrationResult calibrate(const Scenario& scenario, const std::vector<MeasuredStep>& rows,
                            const std::vector<const CalibrationParameter*>& fit,
                            const std::string& csv,
                            PartitionMethod partition = PartitionMethod::kOptimal,
                            const std::function<void(std::size_t, std::size_t)>& progress = {});

// The cost-model file of a result (every calibration parameter of `fitted`).
CostModelFile cost_model_file_of(const Scenario& scenario, const CalibrationResult& result,
                                 const std::string& csv, std::size_t rows);

}  // namespace pipescope
