// `pipescope calibrate` on published measurements: the zero-bubble paper's
// three 1F1B runs of its 1.5B model (cases ZB-1Fa..c, scenarios/validation/)
// fitted with the paper's cut, and the fitted table predicting the other 33
// runs of its Table 4 (other schedules, other models, up to 32 GPUs), which
// the fit never saw. docs/validation.md quotes what this test prints.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/calibration.h"
#include "sim/gpu_validation.h"
#include "sim/scenario_io.h"

namespace pipescope {
namespace {

const std::filesystem::path kDir =
    std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "scenarios" / "validation";

std::vector<GpuCase> zero_bubble_cases() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("zb-") && name.ends_with(".json")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<GpuCase> cases;
  for (const auto& f : files) {
    cases.push_back(read_gpu_case(load_scenario_json(f), f.filename().string()));
  }
  return cases;
}

// The measured step of a case: its global batch over its samples/s.
MeasuredStep measured_step(const GpuCase& c) {
  const Scenario& s = c.parsed;
  MeasuredStep row;
  row.stages = c.stages;
  row.micro_batches = s.training.micro_batches;
  row.schedule = s.training.schedule;
  row.remat = s.training.remat;
  row.micro_batch = s.training.global_batch / s.training.micro_batches;
  row.step_time_s = static_cast<double>(s.training.global_batch) /
                    (c.measured * static_cast<double>(s.cluster.physical_devices()));
  return row;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

TEST(PublishedCalibration, ThreeOneFOneBRunsPredictTheZeroBubbleTable) {
  const std::vector<GpuCase> cases = zero_bubble_cases();
  ASSERT_EQ(cases.size(), 36u);
  std::vector<MeasuredStep> rows;
  const GpuCase* base = nullptr;
  for (const GpuCase& c : cases) {
    if (c.id == "ZB-1Fa" || c.id == "ZB-1Fb" || c.id == "ZB-1Fc") {
      rows.push_back(measured_step(c));
      rows.back().line = static_cast<int>(rows.size()) + 1;
      if (base == nullptr) base = &c;  // ZB-1Fa: the rows differ only in M
      EXPECT_EQ(c.metric, GpuMetric::kSamplesPerSPerGpu);
      // The paper's cut is the uniform one, which calibrate --partition takes.
      EXPECT_EQ(c.balance, std::vector<int>(8, 3));
    }
  }
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(base->id, "ZB-1Fa");
  // calibrate's uniform cut is the case's balance: the same step time.
  for (const GpuCase& c : cases) {
    if (c.id == "ZB-1Fb") {
      EXPECT_DOUBLE_EQ(simulate_row(base->parsed, rows[1], PartitionMethod::kUniform),
                       simulate_gpu_case(c).step_time_s);
    }
  }
  const CalibrationResult fit =
      calibrate(base->parsed, rows, default_fit(), "zb-1.5b-1f1b.csv", PartitionMethod::kUniform);
  EXPECT_LT(fit.max_relative_error, 0.01);

  std::vector<double> before, after;
  for (const GpuCase& c : cases) {
    const double was = gpu_metric_value(c, simulate_gpu_case(c).step_time_s);
    GpuCase fitted = c;
    fitted.parsed.cluster.device.kernels = fit.fitted;
    const double now = gpu_metric_value(fitted, simulate_gpu_case(fitted).step_time_s);
    const bool seen = c.id.starts_with("ZB-1F");  // the three fitted runs
    if (!seen) {
      before.push_back(std::abs(was / c.measured - 1.0));
      after.push_back(std::abs(now / c.measured - 1.0));
    }
    std::printf("%-7s published %6.3f  table %6.3f (%+5.1f %%)  calibrated %6.3f (%+5.1f %%)\n",
                c.id.c_str(), c.measured, was, 100 * (was / c.measured - 1), now,
                100 * (now / c.measured - 1));
  }
  ASSERT_EQ(after.size(), 33u);
  std::printf(
      "the 33 runs not fitted: median |error| %.1f %% with the device table, %.1f %% "
      "calibrated; max %.1f %%, %.1f %%\n",
      100 * median(before), 100 * median(after),
      100 * *std::max_element(before.begin(), before.end()),
      100 * *std::max_element(after.begin(), after.end()));
  for (const ParameterChange& p : fit.changes) {
    std::printf("%s %.4g -> %.4g\n", p.parameter->name.c_str(), p.before, p.after);
  }
  // The figures docs/validation.md quotes, loosely.
  ASSERT_EQ(fit.changes.size(), 3u);
  EXPECT_NEAR(fit.fitted.memory_efficiency, 0.61, 0.03);
  EXPECT_NEAR(fit.fitted.gemm_efficiency, 0.79, 0.02);
  EXPECT_NEAR(median(before), 0.114, 0.005);
  EXPECT_LT(median(after), 0.05);
  EXPECT_LT(median(after), median(before) / 2);
  EXPECT_LT(*std::max_element(after.begin(), after.end()), 0.10);
}

}  // namespace
}  // namespace pipescope
