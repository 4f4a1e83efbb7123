// Calibration: the measured-steps CSV and its errors, cost-model files (round
// trip, errors, applying one), what --cost-model takes, the optimiser against
// brute force, and recovery of a known efficiency from step times the simulator
// itself produced.

#include "sim/validation/calibration.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/model_families.h"
#include "sim/engine/simulator.h"
#include "sim/formats/cost_model_file.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A small GPT-style model on 4 A100s: fast to simulate, GEMM-dominated.
Scenario small_a100() {
  const json doc = json::parse(R"({
    "name": "small",
    "model": {"family": "transformer", "layers": 8, "d_model": 1024, "d_ff": 4096,
              "heads": 16, "seq_len": 512, "vocab": 32000, "dtype": "bf16"},
    "cluster": {"preset": "a100-80g", "devices": 4},
    "training": {"global_batch": 16, "micro_batches": 4, "optimizer": "adam",
                 "schedule": "gpipe", "remat": true}
  })");
  return parse_scenario(doc, "small.json");
}

// ---- CSV ----

TEST(MeasuredCsv, ReadsRequiredAndOptionalColumnsInAnyOrder) {
  const std::vector<MeasuredStep> rows = parse_measured_csv(
      "step_time_s, K ,M,schedule,remat,D,chunks,micro_batch\r\n"
      "0.5,4,8,gpipe,on,,,\n"
      "\n"
      "1.25e-1,2,16,interleaved-1f1b,except-last,2,3,4\n",
      "m.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].line, 2);
  EXPECT_EQ(rows[0].stages, 4);
  EXPECT_EQ(rows[0].micro_batches, 8);
  EXPECT_EQ(rows[0].schedule, ScheduleKind::kGpipe);
  EXPECT_EQ(rows[0].remat, Remat::kAlways);
  EXPECT_DOUBLE_EQ(rows[0].step_time_s, 0.5);
  EXPECT_EQ(rows[0].data_parallel, 1);
  EXPECT_FALSE(rows[0].chunks.has_value());
  EXPECT_FALSE(rows[0].micro_batch.has_value());
  EXPECT_EQ(rows[1].line, 4);
  EXPECT_EQ(rows[1].schedule, ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(rows[1].remat, Remat::kExceptLast);
  EXPECT_DOUBLE_EQ(rows[1].step_time_s, 0.125);
  EXPECT_EQ(rows[1].data_parallel, 2);
  EXPECT_EQ(rows[1].chunks, 3);
  EXPECT_EQ(rows[1].micro_batch, 4);
  EXPECT_EQ(rows[1].label(), "K=2 D=2 M=16 b=4 interleaved-1f1b v=3 remat except-last");
}

TEST(MeasuredCsv, ErrorsNameFileLineColumnAndRange) {
  const auto err = [](const std::string& text) {
    return error_of([&] { parse_measured_csv(text, "m.csv"); });
  };
  const std::string head = "K,M,schedule,remat,step_time_s\n";
  EXPECT_TRUE(contains(err(""), "m.csv: no header")) << err("");
  EXPECT_TRUE(contains(err(head), "m.csv: no measured steps")) << err(head);
  std::string e = err("K,M,schedule,remat,step_time_s,gpu\n1,1,gpipe,on,1\n");
  EXPECT_TRUE(contains(e, "m.csv: line 1, column 6: unknown column 'gpu'")) << e;
  e = err("K,M,schedule,step_time_s\n1,1,gpipe,1\n");
  EXPECT_TRUE(contains(e, "m.csv: line 1: missing column 'remat'")) << e;
  e = err("K,M,K,schedule,remat,step_time_s\n");
  EXPECT_TRUE(contains(e, "line 1, column 3: column 'K' given twice")) << e;
  e = err(head + "0,1,gpipe,on,1\n");
  EXPECT_TRUE(
      contains(e, "m.csv: line 2, column K: expected a whole number from 1 to 1048576, got '0'"))
      << e;
  e = err(head + "2,x,gpipe,on,1\n");
  EXPECT_TRUE(contains(e, "line 2, column M: expected a whole number from 1 to")) << e;
  e = err(head + "2,4,gpipe,on,0\n");
  EXPECT_TRUE(contains(e, "line 2, column step_time_s: expected a step time in seconds above 0"))
      << e;
  e = err(head + "2,4,gpipe,on,1e9\n");
  EXPECT_TRUE(contains(e, "column step_time_s")) << e;
  e = err(head + "2,4,pipedream,on,1\n");
  EXPECT_TRUE(contains(
      e,
      "line 2, column schedule: unknown schedule 'pipedream' (expected one of: "
      "gpipe, 1f1b, zb-h1, interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v)"))
      << e;
  e = err(head + "2,4,custom,on,1\n");
  EXPECT_TRUE(contains(e, "column schedule: unknown schedule 'custom'")) << e;
  e = err(head + "2,4,gpipe,sometimes,1\n");
  EXPECT_TRUE(contains(e, "line 2, column remat: unknown remat mode 'sometimes'")) << e;
  e = err(head + "1,1,gpipe,on,1\n2,4,gpipe,on\n");
  EXPECT_TRUE(contains(e, "m.csv: line 3: has 4 cells but the header has 5 columns")) << e;
  e = err("K,M,schedule,remat,step_time_s,D\n2,4,gpipe,on,1,-2\n");
  EXPECT_TRUE(contains(e, "line 2, column D: expected a whole number from 1")) << e;
}

TEST(MeasuredCsv, FitNames) {
  const auto fit = parse_fit_names("memory_efficiency, gemm_efficiency");
  ASSERT_EQ(fit.size(), 2u);
  EXPECT_EQ(fit[0]->name, "memory_efficiency");
  EXPECT_EQ(fit[1]->name, "gemm_efficiency");
  std::string e = error_of([] { parse_fit_names("gemm_efficiency,speed"); });
  EXPECT_TRUE(contains(e,
                       "--fit: unknown parameter 'speed' (expected a comma-separated list of: "
                       "gemm_efficiency, attention_fwd_efficiency"))
      << e;
  e = error_of([] { parse_fit_names("gemm_efficiency,gemm_efficiency"); });
  EXPECT_TRUE(contains(e, "'gemm_efficiency' named twice")) << e;
  const auto d = default_fit();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0]->name, "gemm_efficiency");
  EXPECT_EQ(d[1]->name, "memory_efficiency");
  EXPECT_EQ(d[2]->name, "kernel_overhead_s");
}

// ---- Cost-model files ----

CostModelFile sample_file() {
  KernelTable t;
  t.gemm_efficiency = 0.71;
  t.memory_efficiency = 0.66;
  t.kernel_overhead_s = 5e-6;
  CostModelFile f = cost_model_of(t, "a100-80g");
  f.fit = CostModelFit{"steps.csv", 6, 0.012, 0.021, PartitionMethod::kUniform};
  return f;
}

TEST(CostModelFile, RoundTripsThroughJsonAndAFile) {
  const CostModelFile f = sample_file();
  const json doc = cost_model_to_json(f);
  EXPECT_EQ(doc["format"], "pipescope-cost-model");
  EXPECT_EQ(doc["model"], "kernels");
  EXPECT_EQ(doc["parameters"].size(), calibration_parameters().size());
  EXPECT_TRUE(is_cost_model_document(doc));
  const CostModelFile back = cost_model_from_json(doc, "c.json");
  EXPECT_EQ(back.device, "a100-80g");
  EXPECT_EQ(back.parameters, f.parameters);
  ASSERT_TRUE(back.fit.has_value());
  EXPECT_EQ(back.fit->measured, "steps.csv");
  EXPECT_EQ(back.fit->rows, 6);
  EXPECT_DOUBLE_EQ(back.fit->rms_relative_error, 0.012);
  EXPECT_DOUBLE_EQ(back.fit->max_relative_error, 0.021);
  EXPECT_EQ(doc["fit"]["partition"], "uniform");
  EXPECT_EQ(back.fit->partition, PartitionMethod::kUniform);
  EXPECT_DOUBLE_EQ(*back.find("gemm_efficiency"), 0.71);
  // Files written before calibrate took --partition were fitted on optimal cuts.
  json unstated = doc;
  unstated["fit"].erase("partition");
  EXPECT_EQ(cost_model_from_json(unstated, "c.json").fit->partition, PartitionMethod::kOptimal);

  const fs::path path =
      fs::temp_directory_path() / ("cost_model_" + std::to_string(::getpid()) + ".json");
  write_cost_model_file(path, f);
  const CostModelFile read = read_cost_model_file(path);
  EXPECT_EQ(read.parameters, f.parameters);
  EXPECT_EQ(read.device, f.device);
  fs::remove(path);
  // "fit" may be left out of a file written by hand.
  json no_fit = doc;
  no_fit.erase("fit");
  EXPECT_FALSE(cost_model_from_json(no_fit, "c.json").fit.has_value());
}

TEST(CostModelFile, RefusesBadFilesNamingFieldAndRange) {
  const json good = cost_model_to_json(sample_file());
  const auto err = [](const json& doc) {
    return error_of([&] { cost_model_from_json(doc, "c.json"); });
  };
  json d = good;
  d["parameters"]["gemm_efficiency"] = 1.5;
  std::string e = err(d);
  EXPECT_TRUE(contains(e, "c.json: parameters.gemm_efficiency: expected a number from 0.05 to 1"))
      << e;
  EXPECT_TRUE(contains(e, "got 1.5")) << e;
  d = good;
  d["parameters"]["kernel_overhead_s"] = "4us";
  e = err(d);
  EXPECT_TRUE(contains(e, "parameters.kernel_overhead_s: expected a number from 0 to 0.001")) << e;
  EXPECT_TRUE(contains(e, "got string")) << e;
  d = good;
  d["parameters"]["tile_m"] = 128;
  e = err(d);
  EXPECT_TRUE(contains(e, "parameters.tile_m: unknown key 'tile_m'")) << e;
  d = good;
  d["parameters"].erase("link_efficiency");
  e = err(d);
  EXPECT_TRUE(contains(e, "parameters.link_efficiency: missing required key")) << e;
  d = good;
  d["extra"] = 1;
  EXPECT_TRUE(contains(err(d), "c.json: extra: unknown key")) << err(d);
  d = good;
  d["format"] = "pipescope-profile";
  EXPECT_TRUE(contains(err(d), "c.json: format: not a PipeScope cost-model file")) << err(d);
  d = good;
  d["version"] = 2;
  EXPECT_TRUE(contains(err(d), "c.json: version: cost-model version 2 is not supported")) << err(d);
  d = good;
  d["model"] = "analytic";
  EXPECT_TRUE(contains(err(d), "c.json: model: unknown model 'analytic'")) << err(d);
  d = good;
  d["device"] = 3;
  EXPECT_TRUE(contains(err(d), "c.json: device: expected a string")) << err(d);
  d = good;
  d["fit"]["rows"] = 0;
  EXPECT_TRUE(contains(err(d), "c.json: fit.rows:")) << err(d);
  d = good;
  d["fit"]["rms_relative_error"] = -1;
  EXPECT_TRUE(contains(err(d), "c.json: fit.rms_relative_error:")) << err(d);
  d = good;
  d["fit"]["partition"] = "even";
  EXPECT_TRUE(contains(err(d),
                       "c.json: fit.partition: unknown partition method 'even' (expected "
                       "one of: optimal, uniform, params, gpipe)"))
      << err(d);
}

TEST(CostModelFile, AppliesToItsDeviceOnly) {
  Scenario sc = small_a100();
  ASSERT_TRUE(sc.cluster.device.kernels.present);
  sc.cluster.cost_model = CostModelKind::kAnalytic;
  apply_cost_model(sc, sample_file(), "c.json");
  EXPECT_EQ(sc.cluster.cost_model, CostModelKind::kKernels);
  EXPECT_DOUBLE_EQ(sc.cluster.device.kernels.gemm_efficiency, 0.71);
  EXPECT_DOUBLE_EQ(sc.cluster.device.kernels.memory_efficiency, 0.66);
  EXPECT_DOUBLE_EQ(sc.cluster.device.kernels.kernel_overhead_s, 5e-6);

  CostModelFile other = sample_file();
  other.device = "h100-sxm";
  std::string e = error_of([&] { apply_cost_model(sc, other, "c.json"); });
  EXPECT_TRUE(contains(e,
                       "c.json: device: the figures are for device 'h100-sxm' but the "
                       "scenario's device is 'a100-80g'"))
      << e;
  Scenario no_table = small_a100();
  no_table.cluster.device.kernels.present = false;
  e = error_of([&] { apply_cost_model(no_table, sample_file(), "c.json"); });
  EXPECT_TRUE(contains(e, "c.json: model: device 'a100-80g' has no kernel table")) << e;
}

TEST(CostModelArgument, AnalyticCannotCostFp8Gemms) {
  Scenario sc = small_a100();
  TransformerParams p = *sc.model.transformer;
  p.fp8 = true;
  sc.model = make_transformer(p);
  try {
    apply_cost_model_argument(sc, "analytic");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FP8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sc.cluster.cost_model, CostModelKind::kKernels);
}

TEST(CostModelArgument, TakesModelNamesCostModelFilesAndProfiles) {
  Scenario sc = small_a100();
  apply_cost_model_argument(sc, "analytic");
  EXPECT_EQ(sc.cluster.cost_model, CostModelKind::kAnalytic);
  apply_cost_model_argument(sc, "kernels");
  EXPECT_EQ(sc.cluster.cost_model, CostModelKind::kKernels);
  Scenario no_table = small_a100();
  no_table.cluster.device.kernels.present = false;
  std::string e = error_of([&] { apply_cost_model_argument(no_table, "kernels"); });
  EXPECT_TRUE(contains(e,
                       "--cost-model kernels needs the device's kernel table: device "
                       "'a100-80g' has none"))
      << e;

  const fs::path dir = fs::temp_directory_path() / ("cost_arg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "model.json").string();
  write_cost_model_file(model, sample_file());
  Scenario fitted = small_a100();
  fitted.cluster.cost_model = CostModelKind::kAnalytic;
  apply_cost_model_argument(fitted, model);
  EXPECT_EQ(fitted.cluster.cost_model, CostModelKind::kKernels);
  EXPECT_DOUBLE_EQ(fitted.cluster.device.kernels.gemm_efficiency, 0.71);

  // Anything else is read as a profile, with the profile's errors.
  const std::string profile = (dir / "profile.json").string();
  std::ofstream(profile) << R"({"format": "pipescope-profile", "version": 1})";
  e = error_of([&] { apply_cost_model_argument(sc, profile); });
  EXPECT_TRUE(contains(e, profile + ": backend: missing required key")) << e;
  std::ofstream(profile) << R"({"format": "pipescope-plan", "version": 1})";
  e = error_of([&] { apply_cost_model_argument(sc, profile); });
  EXPECT_TRUE(contains(e, profile + ": format: not a PipeScope profile or cost-model file")) << e;
  e = error_of([&] { apply_cost_model_argument(sc, (dir / "missing.json").string()); });
  EXPECT_TRUE(contains(e, "missing.json: cannot open")) << e;
  fs::remove_all(dir);
}

// ---- The optimiser against brute force ----

TEST(NelderMead, FindsWhatAGridSearchFinds) {
  // A curved valley (Rosenbrock's) with its minimum at (0.6, 0.36) inside the box.
  BoxFunction valley{[](const std::vector<double>& u) {
                       const double a = 0.6 - u[0];
                       const double b = u[1] - u[0] * u[0];
                       return a * a + 10.0 * b * b;
                     },
                     {-1.0, -1.0},
                     {1.0, 1.0}};
  const Minimum grid = grid_search(valley, 201);  // spacing 0.01
  const Minimum nm = nelder_mead(valley, {-0.5, 0.5}, NelderMeadOptions{});
  EXPECT_LE(nm.value, grid.value + 1e-9);
  EXPECT_NEAR(nm.u[0], grid.u[0], 0.01);
  EXPECT_NEAR(nm.u[1], grid.u[1], 0.01);
  EXPECT_NEAR(nm.u[0], 0.6, 1e-3);
  EXPECT_NEAR(nm.u[1], 0.36, 1e-3);
  EXPECT_LT(nm.evaluations, grid.evaluations);

  // The unconstrained minimum (2, -3) lies outside: both stop at the corner.
  BoxFunction corner{[](const std::vector<double>& u) {
                       return (u[0] - 2.0) * (u[0] - 2.0) + (u[1] + 3.0) * (u[1] + 3.0) +
                              0.5 * u[0] * u[1];
                     },
                     {-1.0, -1.0},
                     {1.0, 1.0}};
  const Minimum g2 = grid_search(corner, 101);
  const Minimum n2 = nelder_mead(corner, {0.0, 0.0}, NelderMeadOptions{});
  EXPECT_LE(n2.value, g2.value + 1e-9);
  EXPECT_NEAR(n2.u[0], g2.u[0], 0.02);
  EXPECT_NEAR(n2.u[1], g2.u[1], 0.02);
  EXPECT_DOUBLE_EQ(n2.u[0], 1.0);
  EXPECT_DOUBLE_EQ(n2.u[1], -1.0);

  // Three coordinates, a least-squares fit like calibrate's.
  BoxFunction fit3{[](const std::vector<double>& u) {
                     double f = 0.0;
                     for (int i = 1; i <= 6; ++i) {
                       const double x = i;
                       const double model =
                           std::exp(u[0]) * x + std::exp(u[1]) / x + std::exp(u[2]);
                       const double truth = 0.5 * x + 0.8 / x + 0.3;
                       f += std::pow(std::log(model / truth), 2);
                     }
                     return f;
                   },
                   {std::log(0.05), std::log(0.05), std::log(0.05)},
                   {0.0, 0.0, 0.0}};
  const Minimum g3 = grid_search(fit3, 41);
  const Minimum n3 =
      nelder_mead(fit3, {std::log(0.9), std::log(0.9), std::log(0.9)}, NelderMeadOptions{});
  EXPECT_LE(n3.value, g3.value + 1e-12);
  EXPECT_NEAR(std::exp(n3.u[0]), 0.5, 1e-3);
  EXPECT_NEAR(std::exp(n3.u[1]), 0.8, 1e-3);
  EXPECT_NEAR(std::exp(n3.u[2]), 0.3, 1e-3);
}

// ---- Recovery of a known efficiency ----

MeasuredStep row(int K, int M, ScheduleKind s, Remat r, std::optional<int> chunks = {}) {
  MeasuredStep m;
  m.stages = K;
  m.micro_batches = M;
  m.schedule = s;
  m.remat = r;
  m.chunks = chunks;
  return m;
}

TEST(Calibration, RecoversAKnownGemmEfficiencyAndPredictsAnUnseenConfiguration) {
  const Scenario table = small_a100();
  ASSERT_EQ(table.cluster.cost_model, CostModelKind::kKernels);
  constexpr double kTrue = 0.55;
  ASSERT_GT(std::abs(table.cluster.device.kernels.gemm_efficiency - kTrue), 0.1);
  Scenario truth = table;
  truth.cluster.device.kernels.gemm_efficiency = kTrue;

  std::vector<MeasuredStep> rows = {
      row(4, 4, ScheduleKind::kGpipe, Remat::kAlways),
      row(4, 8, ScheduleKind::k1F1B, Remat::kNever),
      row(2, 4, ScheduleKind::kGpipe, Remat::kAlways),
      row(4, 16, ScheduleKind::k1F1B, Remat::kAlways),
      row(2, 8, ScheduleKind::kZbH1, Remat::kNever),
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].line = static_cast<int>(i) + 2;
    rows[i].step_time_s = simulate_row(truth, rows[i]);
  }
  // The kernels model must see the efficiency at all.
  ASSERT_GT(rows[0].step_time_s, 1.1 * simulate_row(table, rows[0]));

  std::size_t last_done = 0;
  const CalibrationResult r =
      calibrate(table, rows, default_fit(), "m.csv", PartitionMethod::kOptimal,
                [&](std::size_t done, std::size_t total) {
                  EXPECT_LE(done, total);
                  last_done = done;
                });
  EXPECT_GT(last_done, 0u);
  const double gemm = r.fitted.gemm_efficiency;
  EXPECT_NEAR(gemm, kTrue, 0.03 * kTrue) << "fitted gemm_efficiency " << gemm;
  EXPECT_LT(r.max_relative_error, 0.01);
  EXPECT_LT(r.objective_after, r.objective_before);
  ASSERT_EQ(r.changes.size(), 3u);
  EXPECT_EQ(r.changes[0].parameter->name, "gemm_efficiency");
  EXPECT_DOUBLE_EQ(r.changes[0].before, table.cluster.device.kernels.gemm_efficiency);
  EXPECT_DOUBLE_EQ(r.changes[0].after, gemm);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_GT(std::abs(r.simulated_before[i] / rows[i].step_time_s - 1.0), 0.05) << i;
  }

  // The written file, applied to the scenario, predicts a configuration the
  // fit never saw.
  const CostModelFile file = cost_model_file_of(table, r, "dir/m.csv", rows.size());
  EXPECT_EQ(file.fit->measured, "m.csv");
  EXPECT_EQ(file.fit->rows, 5);
  Scenario fitted = table;
  apply_cost_model(fitted, cost_model_from_json(cost_model_to_json(file), "fit.json"), "fit.json");
  const MeasuredStep unseen = row(4, 8, ScheduleKind::kInterleaved1F1B, Remat::kNever, 2);
  const double measured = simulate_row(truth, unseen);
  const double predicted = simulate_row(fitted, unseen);
  std::printf(
      "recovered gemm_efficiency %.4f (true %.2f); unseen step %.6f s predicted, %.6f s true\n",
      gemm, kTrue, predicted, measured);
  EXPECT_NEAR(predicted, measured, 0.03 * measured);
}

TEST(Calibration, RowsThatCannotRunNameTheirLine) {
  const Scenario sc = small_a100();
  std::vector<MeasuredStep> rows = {row(8, 4, ScheduleKind::kGpipe, Remat::kAlways)};
  rows[0].line = 7;
  rows[0].step_time_s = 1.0;
  std::string e = error_of([&] { calibrate(sc, rows, default_fit(), "m.csv"); });
  EXPECT_TRUE(contains(e,
                       "m.csv: line 7: K=8 M=4 gpipe remat on: K x D = 8 devices; the "
                       "scenario's cluster has 4"))
      << e;
  rows[0] = row(2, 3, ScheduleKind::kGpipe, Remat::kAlways);  // 3 does not divide 16
  rows[0].line = 3;
  rows[0].step_time_s = 1.0;
  e = error_of([&] { calibrate(sc, rows, default_fit(), "m.csv"); });
  EXPECT_TRUE(contains(e, "m.csv: line 3: K=2 M=3")) << e;
  Scenario no_table = sc;
  no_table.cluster.device.kernels.present = false;
  rows[0] = row(2, 4, ScheduleKind::kGpipe, Remat::kAlways);
  rows[0].step_time_s = 1.0;
  e = error_of([&] { calibrate(no_table, rows, default_fit(), "m.csv"); });
  EXPECT_TRUE(contains(e, "device 'a100-80g' has no kernel table")) << e;
}

TEST(Calibration, MicroBatchAndDataParallelRowsRunAsSimulateWould) {
  const Scenario sc = small_a100();
  MeasuredStep r = row(2, 4, ScheduleKind::k1F1B, Remat::kNever);
  r.data_parallel = 2;
  r.micro_batch = 2;  // global batch 2 x 4 x 2 = 16, the scenario's
  MeasuredStep same = row(2, 4, ScheduleKind::k1F1B, Remat::kNever);
  same.data_parallel = 2;
  EXPECT_DOUBLE_EQ(simulate_row(sc, r), simulate_row(sc, same));
  r.micro_batch = 4;  // twice the samples: a longer step
  EXPECT_GT(simulate_row(sc, r), 1.2 * simulate_row(sc, same));
}

}  // namespace
}  // namespace pipescope
