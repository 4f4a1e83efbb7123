// Each source's pipelined runs beside its runs on one stage
// (sim/validation/pipeline_split.h), against hand-computed medians.

#include "sim/validation/pipeline_split.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace pipescope {
namespace {

PaperFigure run(const std::string& source, const std::string& metric, double paper,
                double simulated, std::optional<int> stages) {
  PaperFigure f;
  f.table = "gpu";
  f.name = source + " run";
  f.source = source;
  f.metric = metric;
  f.paper = paper;
  f.simulated = simulated;
  f.stages = stages;
  return f;
}

// Source A: one stage 10 s measured, 8 s simulated (+25 % faster) and 10 s
// against 12.5 s (-20 %); pipelined 100 against 110 samples/s (+10 %).
// Source B: pipelined only, 9 s against 10 s (-10 %) and 12 s against 10 s
// (+20 %), median +5 %. A figure without its stages and one of another table
// stay out. All: one stage {+25, -20} -> +2.5 %; pipelined {+10, -10, +20} ->
// +10 %.
TEST(PipelineSplit, MediansOfEachSourcesRunsOnOneStageAndPipelined) {
  ValidationReport report;
  report.figures = {run("A 2020, Table 1", "step_time_s", 10, 8, 1),
                    run("B 2021", "step_time_s", 9, 10, 4),
                    run("A 2020, Table 2", "step_time_s", 10, 12.5, 1),
                    run("A 2020, Table 3", "samples_per_s", 100, 110, 2),
                    run("B 2021", "step_time_s", 12, 10, 8),
                    run("C 2022", "step_time_s", 12, 10, std::nullopt)};
  PaperFigure other = run("A 2020", "step_time_s", 10, 1, 2);
  other.table = "gpu-memory";
  report.figures.push_back(other);

  const std::vector<PipelineSplit> rows = pipeline_split(report, "gpu");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].publication, "A 2020");
  EXPECT_EQ(rows[0].single.runs, 2u);
  EXPECT_NEAR(rows[0].single.median_faster, 0.025, 1e-12);
  EXPECT_EQ(rows[0].pipelined.runs, 1u);
  EXPECT_NEAR(rows[0].pipelined.median_faster, 0.10, 1e-12);
  EXPECT_EQ(rows[1].publication, "B 2021");
  EXPECT_EQ(rows[1].single.runs, 0u);
  EXPECT_EQ(rows[1].single.median_faster, 0.0);
  EXPECT_EQ(rows[1].pipelined.runs, 2u);
  EXPECT_NEAR(rows[1].pipelined.median_faster, 0.05, 1e-12);
  EXPECT_EQ(rows[2].publication, "all");
  EXPECT_EQ(rows[2].single.runs, 2u);
  EXPECT_NEAR(rows[2].single.median_faster, 0.025, 1e-12);
  EXPECT_EQ(rows[2].pipelined.runs, 3u);
  EXPECT_NEAR(rows[2].pipelined.median_faster, 0.10, 1e-12);
}

TEST(PipelineSplit, NothingWithoutStages) {
  ValidationReport report;
  report.figures = {run("C 2022", "step_time_s", 12, 10, std::nullopt)};
  EXPECT_TRUE(pipeline_split(report, "gpu").empty());
  EXPECT_TRUE(pipeline_split(report, "memory").empty());
}

}  // namespace
}  // namespace pipescope
