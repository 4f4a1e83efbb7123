// The simulator against the GPipe paper's tables (Huang et al. 2019), with the
// scenarios as shipped: the figures the paper's setup pins down stay within
// their stated tolerances, and the known gaps stay what the README says.

#include "sim/validation/gpipe_validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

const std::string kDir = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpipe/";

class GpipeValidation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const nlohmann::json transformer = load_scenario_json(kDir + "transformer-tpuv3.json");
    const nlohmann::json amoebanet = load_scenario_json(kDir + "amoebanet-tpuv2.json");
    ValidationInputs in;
    in.transformer = &transformer;
    in.transformer_file = "transformer-tpuv3.json";
    in.amoebanet = &amoebanet;
    in.amoebanet_file = "amoebanet-tpuv2.json";
    in.progress = [](std::size_t done, std::size_t total) {
      EXPECT_LE(done, total);
      ++progress_calls;
    };
    report = new ValidationReport(validate_gpipe(in));
    for (const PaperFigure& f : report->figures) figures[f.table + "/" + f.name] = f;
  }
  static void TearDownTestSuite() {
    delete report;
    report = nullptr;
    figures.clear();
  }
  static const PaperFigure& figure(const std::string& key) {
    const auto it = figures.find(key);
    EXPECT_NE(it, figures.end()) << key;
    static const PaperFigure none;
    return it == figures.end() ? none : it->second;
  }

  static inline ValidationReport* report = nullptr;
  static inline std::map<std::string, PaperFigure> figures;
  static inline int progress_calls = 0;
};

// Every checked figure is within its tolerance except the four built on
// Naive-1, whose miss is stated (a third layer needs 17.4 GiB of 16).
TEST_F(GpipeValidation, CheckedFiguresAreWithinToleranceOrAStatedGap) {
  EXPECT_EQ(report->checked(), 14);
  EXPECT_EQ(report->failed(), 0);
  EXPECT_EQ(report->gaps(), 4);
  for (const PaperFigure& f : report->figures) {
    if (!f.checked()) continue;
    const bool on_naive = f.name.rfind("Naive-1", 0) == 0 ||
                          f.name.find("(2.7x)") != std::string::npos ||
                          f.name.find("(298x)") != std::string::npos;
    if (on_naive) {
      EXPECT_GT(std::fabs(f.relative_error()), *f.tolerance) << f.name;
      EXPECT_EQ(f.gap, "Naive-1 holds 2 layers: 3 need 17.4 GiB of 16.0 GiB (8.5 % over)")
          << f.name;
    } else {
      EXPECT_LE(std::fabs(f.relative_error()), *f.tolerance)
          << f.name << ": paper " << f.paper << ", simulated " << f.simulated;
      EXPECT_EQ(f.gap, "") << f.name;
    }
  }
  EXPECT_EQ(progress_calls, 11);  // 5 capacities, 2 throughput grids, 4 assumptions
  // Each capacity figure names the Table 1 rows it rests on; the gap follows them.
  for (const PaperFigure& f : report->figures) {
    if (f.name == "128 partitions (298x)") {
      EXPECT_EQ(f.capacity_rows, (std::vector<std::string>{"Pipeline-128", "Naive-1"}));
    }
    if (f.name == "Pipeline-8 layers") {
      EXPECT_EQ(f.capacity_rows, std::vector<std::string>{"Pipeline-8"});
    }
    if (f.table != "memory" && f.table != "ratios") {
      EXPECT_TRUE(f.capacity_rows.empty()) << f.name;
    }
  }
}

// Layer counts and parameters in whole layers, as the paper counts them; the
// capacity in finer steps alongside.
TEST_F(GpipeValidation, CapacitiesFollowTheTable) {
  for (const char* row : {"Naive-1", "Pipeline-1", "Pipeline-8", "Pipeline-32", "Pipeline-128"}) {
    const PaperFigure& layers = figure(std::string("memory/") + row + " layers");
    EXPECT_EQ(layers.tolerance, 0.15) << row;
    ASSERT_TRUE(layers.finer) << row;
    // The whole count is the finer capacity floored.
    EXPECT_EQ(layers.simulated, std::floor(*layers.finer)) << row;
  }
  EXPECT_EQ(figure("memory/Pipeline-1 layers").simulated, 13);
  // The honest miss the README explains: a third layer without rematerialization
  // needs 17.4 GiB of the 16 GiB, so whole layers give 2 where the paper has 3.
  EXPECT_EQ(figure("memory/Naive-1 layers").simulated, 2);
  EXPECT_NEAR(*figure("memory/Naive-1 layers").finer, 2.70, 0.01);
  // Pipeline-K holds the same layers per core at every K (the paper: "scales
  // linearly"): 111, 447 and 1791 are 14K - 1 (embedding and head fill a slot).
  EXPECT_EQ(figure("memory/Pipeline-8 layers").simulated, 111);
  EXPECT_EQ(figure("memory/Pipeline-32 layers").simulated, 447);
  EXPECT_EQ(figure("memory/Pipeline-128 layers").simulated, 1791);
  // Parameters: 50.36 M per layer plus the token table and the LM projection,
  // 65.5 M each (the paper's 785.8 M).
  EXPECT_EQ(figure("memory/Pipeline-1 parameters").simulated,
            2 * 65536000 + 4096 + 13 * 50358272.0);
  EXPECT_NEAR(figure("ratios/rematerialization, one core (2.7x)").simulated, 785.7 / 231.8, 0.01);
  EXPECT_NEAR(*figure("ratios/rematerialization, one core (2.7x)").finer, 3.02, 0.01);
  EXPECT_NEAR(figure("ratios/128 partitions (298x)").relative_error(), 0.308, 0.01);
}

// The Transformer's speedups at M=32 within 10 %; the rest reported only.
TEST_F(GpipeValidation, ThroughputTables) {
  const PaperFigure& speedup = figure("ratios/4x the accelerators (3.5x)");
  EXPECT_EQ(speedup.tolerance, 0.10);
  EXPECT_NEAR(speedup.paper, 3.5, 1e-12);
  // K=8 M=32 over K=2 M=32 in the Transformer-48 table.
  EXPECT_NEAR(speedup.simulated,
              figure("transformer-throughput/K=8 M=32").simulated /
                  figure("transformer-throughput/K=2 M=32").simulated,
              1e-12);
  for (const char* table : {"transformer-throughput", "amoebanet-throughput"}) {
    EXPECT_EQ(figure(std::string(table) + "/K=2 M=1").simulated, 1.0);
    int cells = 0;
    for (const PaperFigure& f : report->figures) {
      if (f.table != table) continue;
      ++cells;
      EXPECT_FALSE(f.checked()) << f.name;
      EXPECT_GT(f.simulated, 0.9) << f.name;
    }
    EXPECT_EQ(cells, 9) << table;
    // More micro-batches shrink the bubble at every K > 1.
    for (const char* K : {"4", "8"}) {
      const std::string k = std::string(table) + "/K=" + K;
      EXPECT_LT(figure(k + " M=1").simulated, figure(k + " M=4").simulated);
      EXPECT_LT(figure(k + " M=4").simulated, figure(k + " M=32").simulated);
    }
  }
  // Which configurations fit the simulated memory: Transformer-48 on two cores
  // does not at any M (its weights, gradients and optimizer slot take 14-15 GiB of each core's 16),
  // so the speedups' K=2 base is flagged; K=8, M=32 fits.
  EXPECT_FALSE(*speedup.fits);
  EXPECT_FALSE(*figure("transformer-throughput/K=2 M=32").fits);
  EXPECT_TRUE(*figure("transformer-throughput/K=8 M=32").fits);
  EXPECT_FALSE(*figure("transformer-throughput/K=2 M=1").fits);
  // At M=32 the bubble bound K*M/(M+K-1) over K=2's caps the Transformer's
  // speedup: 3.39 for 4x the accelerators; the 7-block stages of an uneven cut
  // (48 blocks and the head over 8 stages) cost the rest.
  EXPECT_LT(speedup.simulated, (8.0 * 32 / 39) / (2.0 * 32 / 33));
}

// Every figure names where the paper published it: the capacities and the
// ratios built on them table 1, the throughputs and speedups table 2.
TEST_F(GpipeValidation, FiguresNameTheirTable) {
  for (const PaperFigure& f : report->figures) {
    const bool table2 = f.table == "transformer-throughput" || f.table == "amoebanet-throughput" ||
                        f.name.find("accelerators") != std::string::npos;
    EXPECT_EQ(f.source, table2 ? "Huang et al. 2019, Table 2" : "Huang et al. 2019, Table 1")
        << f.table << "/" << f.name;
    EXPECT_EQ(f.metric, "") << f.name;
  }
  EXPECT_EQ(validation_json(*report)["figures"][0]["source"], "Huang et al. 2019, Table 1");
}

TEST_F(GpipeValidation, AssumptionsMoveTheFigures) {
  std::map<std::string, double> s;
  for (const Sensitivity& x : report->sensitivities) s[x.assumption + "/" + x.figure] = x.simulated;
  ASSERT_EQ(report->sensitivities.size(), 10u);
  // Fewer, larger micro-batches leave room for fewer layers; more, for more.
  EXPECT_LT(s["M=4 instead of 8/Pipeline-1 layers"], 13);
  EXPECT_GT(s["M=16 instead of 8/Pipeline-1 layers"], 13);
  // fp32 activations or dropout masks take the table far out of reach.
  EXPECT_EQ(s["fp32 activations instead of bf16/Naive-1 layers"], 1);
  EXPECT_LT(s["fp32 activations instead of bf16/Pipeline-8 layers"], 0.85 * 103);
  EXPECT_LT(s["dropout on (masks and dropped probabilities stashed)/Pipeline-8 layers"],
            0.85 * 103);
}

TEST(PaperFigure, ErrorToleranceAndJson) {
  PaperFigure f;
  f.table = "ratios";
  f.name = "x";
  f.paper = 2.0;
  f.simulated = 2.3;
  EXPECT_NEAR(f.relative_error(), 0.15, 1e-12);
  EXPECT_FALSE(f.checked());
  EXPECT_FALSE(f.within_tolerance());
  f.tolerance = 0.1;
  EXPECT_FALSE(f.within_tolerance());
  f.tolerance = 0.2;
  EXPECT_TRUE(f.within_tolerance());
  ValidationReport r;
  r.figures.push_back(f);
  f.tolerance.reset();
  f.finer = 3.0;
  f.fits = false;
  r.figures.push_back(f);
  f.tolerance = 0.01;
  r.figures.push_back(f);
  f.gap = "known";
  r.figures.push_back(f);
  EXPECT_EQ(r.checked(), 3);
  EXPECT_EQ(r.failed(), 1);
  EXPECT_EQ(r.gaps(), 1);
  const nlohmann::json j = validation_json(r);
  EXPECT_EQ(j["checked"], 3);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["gaps"], 1);
  EXPECT_EQ(j["figures"][3]["gap"], "known");
  EXPECT_EQ(j["figures"][1]["fits"], false);
  EXPECT_EQ(j["figures"][0]["within_tolerance"], true);
  EXPECT_TRUE(j["figures"][1]["tolerance"].is_null());
  EXPECT_TRUE(j["figures"][1]["within_tolerance"].is_null());
  EXPECT_EQ(j["figures"][1]["simulated_finer"], 3.0);
  EXPECT_FALSE(j["figures"][0].contains("simulated_finer"));
  EXPECT_EQ(j["figures"][2]["within_tolerance"], false);
  // source always, metric only when set.
  EXPECT_EQ(j["figures"][0]["source"], "");
  EXPECT_FALSE(j["figures"][0].contains("metric"));
}

TEST(GpipeValidationErrors, ScenarioOfTheWrongFamilyIsNamed) {
  nlohmann::json transformer = load_scenario_json(kDir + "transformer-tpuv3.json");
  const nlohmann::json amoebanet = load_scenario_json(kDir + "amoebanet-tpuv2.json");
  ValidationInputs in;
  in.transformer = &amoebanet;  // swapped: amoebanet has cells, not layers
  in.transformer_file = "t.json";
  in.amoebanet = &transformer;
  in.amoebanet_file = "a.json";
  try {
    validate_gpipe(in);
    FAIL() << "expected ScenarioError";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file(), "t.json");
    EXPECT_EQ(e.json_path(), "model.family");
    EXPECT_STREQ(e.what(),
                 "t.json: model.family: expected transformer (the paper's model), got amoebanet");
  }
}

}  // namespace
}  // namespace pipescope
