// Leave one source out (sim/validation/leave_one_out.h): the fit against brute force on
// small cases, the folds' bookkeeping, and the linear solve.

#include "sim/validation/leave_one_out.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/validation/calibration.h"

namespace pipescope {
namespace {

// A small case of publication `source`, measured at `samples_per_s`.
GpuCase small_case(const std::string& id, const std::string& source, double samples_per_s,
                   int layers) {
  nlohmann::json d = nlohmann::json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 256, "heads": 4,
               "seq_len": 128, "vocab": 512, "dtype": "bf16" },
    "cluster": { "preset": "a100-80g", "devices": 2 },
    "training": { "framework": "ideal", "global_batch": 16, "micro_batches": 4,
                  "schedule": "1f1b" },
    "validation": {
      "case": "X", "source": "S",
      "measured": { "metric": "samples_per_s", "value": 1 },
      "setup": "as published", "unstated": "what was chosen", "stages": 2
    }
  })");
  d["model"]["layers"] = layers;
  d["validation"]["case"] = id;
  d["validation"]["source"] = source;
  d["validation"]["measured"]["value"] = samples_per_s;
  return read_gpu_case(d, id + ".json");
}

// What the cases' devices simulate at the tables, so that the measured
// figures below sit a known factor away.
double simulated(const GpuCase& c) {
  return gpu_metric_value(c, simulate_gpu_case(c).step_time_s);
}

std::vector<GpuCase> two_sources() {
  std::vector<GpuCase> cases = {
      small_case("A-1", "A 2020, Table 1", 1.0, 4), small_case("A-2", "A 2020, Table 2", 1.0, 8),
      small_case("B-1", "B 2021", 1.0, 4), small_case("B-2", "B 2021", 1.0, 6)};
  // A's runs 30 % slower than the tables say, B's 10 % faster.
  for (GpuCase& c : cases) c.measured = simulated(c) * (c.id[0] == 'A' ? 0.7 : 1.1);
  return cases;
}

TEST(LeaveOneOut, SolvesALinearSystem) {
  const std::vector<double> x =
      solve_linear({{0.0, 2.0, 1.0}, {1.0, 1.0, 0.0}, {3.0, 0.0, 1.0}}, {5.0, 3.0, 6.0});
  ASSERT_EQ(x.size(), 3u);
  // 2y + z = 5, x + y = 3, 3x + z = 6 (a zero first pivot): x = 1.4, y = 1.6, z = 1.8.
  EXPECT_NEAR(x[0], 1.4, 1e-12);
  EXPECT_NEAR(x[1], 1.6, 1e-12);
  EXPECT_NEAR(x[2], 1.8, 1e-12);
}

TEST(LeaveOneOut, ScaledTablesStayInTheParametersRanges) {
  const GpuCase c = small_case("A-1", "A 2020", 1.0, 4);
  const std::vector<const CalibrationParameter*> ps = parse_fit_names("gemm_efficiency");
  const double table = c.parsed.cluster.device.kernels.gemm_efficiency;
  EXPECT_DOUBLE_EQ(
      with_scaled_table(c, ps, {std::log(0.5)}).parsed.cluster.device.kernels.gemm_efficiency,
      0.5 * table);
  // 0.8 x e^2 is above 1: the range's end.
  EXPECT_DOUBLE_EQ(with_scaled_table(c, ps, {2.0}).parsed.cluster.device.kernels.gemm_efficiency,
                   ps[0]->max);
}

// The objective's least on a fine grid of the one parameter is no lower than
// what the fit finds (brute force over 61 factors from e^-0.6 to e^0.6).
TEST(LeaveOneOut, FitIsNoWorseThanBruteForce) {
  const std::vector<GpuCase> cases = two_sources();
  const std::vector<const CalibrationParameter*> ps = parse_fit_names("gemm_efficiency");
  for (const std::string& left_out : {std::string("A 2020"), std::string("B 2021")}) {
    SCOPED_TRACE(left_out);
    const FoldFit fit = fit_without_source(cases, ps, left_out);
    ASSERT_EQ(fit.u.size(), 1u);
    double best = leave_one_out_objective(cases, ps, left_out, {-0.6});
    for (int i = -29; i <= 30; ++i) {
      best = std::min(best, leave_one_out_objective(cases, ps, left_out, {0.02 * i}));
    }
    EXPECT_LE(fit.objective, best + 1e-4) << "u " << fit.u[0];
    EXPECT_NEAR(leave_one_out_objective(cases, ps, left_out, fit.u), fit.objective, 1e-12);
  }
  // Fitted on B alone, which runs faster than the tables: a higher GEMM rate.
  EXPECT_GT(fit_without_source(cases, ps, "A 2020").u[0], 0.0);
  EXPECT_LT(fit_without_source(cases, ps, "B 2021").u[0], 0.0);
}

// Each fold predicts its own source at the factors fitted on the other: the
// errors the report gives are those of simulating it so.
TEST(LeaveOneOut, ReportsEachSourceAtTheOthersFit) {
  const std::vector<GpuCase> cases = two_sources();
  const std::vector<const CalibrationParameter*> ps = parse_fit_names("gemm_efficiency");
  std::size_t folds = 0;
  const LeaveOneOutReport r =
      leave_one_source_out(cases, ps, [&](std::size_t done, std::size_t total) {
        EXPECT_EQ(done, ++folds);
        EXPECT_EQ(total, 2u);
      });
  ASSERT_EQ(r.sources.size(), 2u);
  EXPECT_EQ(r.sources[0].publication, "A 2020");
  EXPECT_EQ(r.sources[1].publication, "B 2021");
  for (const LeftOut& s : r.sources) {
    SCOPED_TRACE(s.publication);
    EXPECT_EQ(s.cases, 2u);
    ASSERT_EQ(s.factors.size(), 1u);
    const FoldFit fit = fit_without_source(cases, ps, s.publication);
    EXPECT_NEAR(s.factors[0], std::exp(fit.u[0]), 1e-12);
    std::vector<double> errors;
    double faster = 0.0;
    for (const GpuCase& c : cases) {
      if (publication_of(c.source) != s.publication) continue;
      const double e = simulated(with_scaled_table(c, ps, fit.u)) / c.measured - 1.0;
      errors.push_back(std::fabs(e));
      faster += e;
    }
    EXPECT_NEAR(s.median_abs_error, median_of(errors), 1e-9);
    EXPECT_NEAR(s.mean_faster, faster / 2.0, 1e-9);
  }
  // With the tables: A 1 / 0.7 - 1 fast, B 1 / 1.1 - 1 slow, every case.
  EXPECT_NEAR(r.sources[0].suite_median_abs_error, 1.0 / 0.7 - 1.0, 1e-9);
  EXPECT_NEAR(r.sources[1].suite_median_abs_error, 1.0 - 1.0 / 1.1, 1e-9);
  EXPECT_NEAR(r.median, (r.sources[0].median_abs_error + r.sources[1].median_abs_error) / 2.0,
              1e-12);
}

}  // namespace
}  // namespace pipescope
