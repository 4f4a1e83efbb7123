#include "cli/calibrate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "cli/progress.h"
#include "sim/base/format.h"
#include "sim/formats/cost_model_file.h"
#include "sim/validation/calibration.h"

namespace pipescope::cli {

namespace {

std::string parameter_list() {
  std::string out;
  for (const CalibrationParameter& p : calibration_parameters()) {
    char range[64];
    std::snprintf(range, sizeof range, " [%g, %g]", p.min, p.max);
    out += "\n    " + p.name + range + ": " + p.meaning;
  }
  return out;
}

std::string value_text(const CalibrationParameter& p, double v) {
  // Times as times, fractions as plain numbers.
  if (p.name.ends_with("_s")) return format_seconds(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

CLI::App* add_calibrate_command(CLI::App& app, CalibrateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Fit the kernel-level cost model's efficiency parameters to step times measured on real "
      "hardware and write them as a cost-model file, which simulate, plan and sweep take with "
      "--cost-model");
  cmd->footer(
      "The CSV has a header and a row per measured step; columns K, M, schedule, remat, "
      "step_time_s are required, D, chunks and micro_batch (samples per micro-batch) optional. "
      "Each row is simulated as `pipescope simulate SCENARIO -K K -M M -D D --schedule S "
      "--remat R --chunks V --partition P` would. The fit minimises the sum over rows of "
      "log(simulated / measured)^2 plus a weak prior pulling each parameter toward the device "
      "table's value (in log space), by Nelder-Mead within each parameter's range. "
      "Parameters:" +
      parameter_list());
  add_scenario_options(*cmd, o.scenario);
  cmd->add_option("--measured", o.measured,
                  "CSV of measured steps: K,M,schedule,remat,step_time_s[,D,chunks,micro_batch]")
      ->required();
  cmd->add_option("-o,--output", o.output, "Write the fitted cost model here (JSON)")->required();
  cmd->add_option("--fit", o.fit,
                  "Parameters to fit, comma-separated (default: gemm_efficiency, "
                  "memory_efficiency, kernel_overhead_s; the others stay at the device table's "
                  "values)");
  add_partition_option(*cmd, o.partition);
  return cmd;
}

int run_calibrate(const CalibrateOptions& o) {
  const Scenario scenario = load(o.scenario);
  const std::vector<const CalibrationParameter*> fit =
      o.fit ? parse_fit_names(*o.fit) : default_fit();
  const std::vector<MeasuredStep> rows = read_measured_csv(o.measured);
  CalibrationResult result;
  {
    ProgressBar bar("fitting");
    result = calibrate(scenario, rows, fit, o.measured, *parse_partition_method(o.partition),
                       [&](std::size_t done, std::size_t total) { bar.update(done, total); });
  }
  // Written before the report: if it cannot be, nothing reads as if it had been.
  write_cost_model_file(o.output, cost_model_file_of(scenario, result, o.measured, rows.size()));

  std::cout << "Calibration of " << scenario.name << " on " << scenario.cluster.device.name
            << " (kernels model) to " << rows.size() << " measured step"
            << (rows.size() == 1 ? "" : "s") << " in " << o.measured << " (--partition "
            << to_string(result.partition) << ")\n\n";
  std::size_t width = std::string("Configuration").size();
  for (const MeasuredStep& r : rows) width = std::max(width, r.label().size());
  const int w = static_cast<int>(width);
  std::printf("%6s  %-*s %12s %12s %12s %9s\n", "Line", w, "Configuration", "Measured", "Before",
              "After", "Error");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const MeasuredStep& r = rows[i];
    const double err = (result.simulated_after[i] - r.step_time_s) / r.step_time_s;
    std::printf(
        "%6d  %-*s %12s %12s %12s %9s\n", r.line, w, r.label().c_str(),
        format_seconds(r.step_time_s).c_str(), format_seconds(result.simulated_before[i]).c_str(),
        format_seconds(result.simulated_after[i]).c_str(), format_signed_percent(err).c_str());
  }
  std::printf("\n%-26s %12s %12s %9s\n", "Parameter", "Before", "After", "Change");
  bool any_moved = false;
  for (const ParameterChange& c : result.changes) {
    const double change = c.before != 0.0 ? (c.after - c.before) / c.before : 0.0;
    const bool moved = std::abs(change) >= 5e-4;
    any_moved = any_moved || moved;
    std::printf("%-26s %12s %12s %9s%s\n", c.parameter->name.c_str(),
                value_text(*c.parameter, c.before).c_str(),
                value_text(*c.parameter, c.after).c_str(),
                c.before != 0.0 ? format_signed_percent(change).c_str() : "-",
                moved ? "" : "  (unchanged)");
  }
  std::vector<std::string> held;
  for (const CalibrationParameter& p : calibration_parameters()) {
    if (std::none_of(fit.begin(), fit.end(),
                     [&](const CalibrationParameter* f) { return f == &p; })) {
      held.push_back(p.name);
    }
  }
  if (!held.empty()) {
    std::cout << "Held at the device table's values:";
    for (std::size_t i = 0; i < held.size(); ++i) std::cout << (i ? ", " : " ") << held[i];
    std::cout << "\n";
  }
  double rms_before = 0.0;
  double max_before = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double e = (result.simulated_before[i] - rows[i].step_time_s) / rows[i].step_time_s;
    rms_before += e * e;
    max_before = std::max(max_before, std::abs(e));
  }
  rms_before = std::sqrt(rms_before / static_cast<double>(rows.size()));
  std::cout << "\nRelative error of the step times: RMS "
            << format_percent(result.rms_relative_error) << " (before "
            << format_percent(rms_before) << "), max " << format_percent(result.max_relative_error)
            << " (before " << format_percent(max_before) << "); " << result.evaluations
            << " evaluations of " << rows.size() << " simulation" << (rows.size() == 1 ? "" : "s")
            << " each\n";
  if (!any_moved) {
    std::cout << "No parameter moved: the measured steps either match the table already or do "
                 "not depend on the fitted parameters on this scenario.\n";
  }
  std::cout << "Cost model written to " << o.output << "; use it with --cost-model " << o.output
            << "\n";
  return 0;
}

}  // namespace pipescope::cli
