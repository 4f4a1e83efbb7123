// Each source's runs split by a dimension of their layout
// (sim/validation/layout_split.h), against hand-computed medians.

#include "sim/validation/layout_split.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace pipescope {
namespace {

PaperFigure split_figure(const std::string& source, const std::string& metric, double paper,
                         double simulated, std::optional<int> stages,
                         std::optional<int> tensor = 1) {
  PaperFigure f;
  f.table = "gpu";
  f.name = source + " run";
  f.source = source;
  f.metric = metric;
  f.paper = paper;
  f.simulated = simulated;
  f.stages = stages;
  f.tensor_parallel = tensor;
  return f;
}

// Source A: one stage 10 s measured, 8 s simulated (+25 % faster) and 10 s
// against 12.5 s (-20 %); pipelined 100 against 110 samples/s (+10 %).
// Source B: pipelined only, 9 s against 10 s (-10 %) and 12 s against 10 s
// (+20 %), median +5 %. A figure without its stages and one of another table
// stay out. All: one stage {+25, -20} -> +2.5 %; pipelined {+10, -10, +20} ->
// +10 %.
ValidationReport split_report() {
  ValidationReport report;
  report.figures = {split_figure("A 2020, Table 1", "step_time_s", 10, 8, 1, 4),
                    split_figure("B 2021", "step_time_s", 9, 10, 4),
                    split_figure("A 2020, Table 2", "step_time_s", 10, 12.5, 1),
                    split_figure("A 2020, Table 3", "samples_per_s", 100, 110, 2, 8),
                    split_figure("B 2021", "step_time_s", 12, 10, 8),
                    split_figure("C 2022", "step_time_s", 12, 10, std::nullopt, std::nullopt)};
  PaperFigure other = split_figure("A 2020", "step_time_s", 10, 1, 2, 2);
  other.table = "gpu-memory";
  report.figures.push_back(other);
  return report;
}

TEST(LayoutSplit, MediansOfEachSourcesRunsOnOneStageAndPipelined) {
  const std::vector<LayoutSplit> rows =
      layout_split(split_report(), "gpu", LayoutDimension::kStages);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].publication, "A 2020");
  EXPECT_EQ(rows[0].one.runs, 2u);
  EXPECT_NEAR(rows[0].one.median_faster, 0.025, 1e-12);
  EXPECT_EQ(rows[0].more.runs, 1u);
  EXPECT_NEAR(rows[0].more.median_faster, 0.10, 1e-12);
  EXPECT_EQ(rows[1].publication, "B 2021");
  EXPECT_EQ(rows[1].one.runs, 0u);
  EXPECT_EQ(rows[1].one.median_faster, 0.0);
  EXPECT_EQ(rows[1].more.runs, 2u);
  EXPECT_NEAR(rows[1].more.median_faster, 0.05, 1e-12);
  EXPECT_EQ(rows[2].publication, "all");
  EXPECT_EQ(rows[2].one.runs, 2u);
  EXPECT_NEAR(rows[2].one.median_faster, 0.025, 1e-12);
  EXPECT_EQ(rows[2].more.runs, 3u);
  EXPECT_NEAR(rows[2].more.median_faster, 0.10, 1e-12);
}

// The same runs by T: A's T = 4 (+25 %) and T = 8 (+10 %) runs beside its
// T = 1 one (-20 %); B's both T = 1 ({-10, +20}: +5 %). All: T = 1
// {-10, -20, +20} -> -10 %; T > 1 {+25, +10} -> +17.5 %.
TEST(LayoutSplit, MediansOfEachSourcesRunsWithAndWithoutTensorParallelism) {
  const std::vector<LayoutSplit> rows =
      layout_split(split_report(), "gpu", LayoutDimension::kTensorParallel);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].publication, "A 2020");
  EXPECT_EQ(rows[0].one.runs, 1u);
  EXPECT_NEAR(rows[0].one.median_faster, -0.20, 1e-12);
  EXPECT_EQ(rows[0].more.runs, 2u);
  EXPECT_NEAR(rows[0].more.median_faster, 0.175, 1e-12);
  EXPECT_EQ(rows[1].one.runs, 2u);
  EXPECT_NEAR(rows[1].one.median_faster, 0.05, 1e-12);
  EXPECT_EQ(rows[1].more.runs, 0u);
  EXPECT_EQ(rows[2].one.runs, 3u);
  EXPECT_NEAR(rows[2].one.median_faster, -0.10, 1e-12);
  EXPECT_EQ(rows[2].more.runs, 2u);
  EXPECT_NEAR(rows[2].more.median_faster, 0.175, 1e-12);
}

// The pipelined runs by v: A's K = 2 run with v = 3 (+10 %); B's K = 4 run
// with v = 1 (-10 %) beside its K = 8 one with v = 2 (+20 %); A's K = 1 runs
// carry no v and stay out. All: v = 1 {-10} -> -10 %; v > 1 {+10, +20} ->
// +15 %.
TEST(LayoutSplit, MediansOfEachSourcesPipelinedRunsOfOneChunkAndInterleaved) {
  ValidationReport report = split_report();
  for (PaperFigure& f : report.figures) {
    if (f.source == "A 2020, Table 3") f.chunks = 3;
    if (f.source == "B 2021") f.chunks = f.stages == 4 ? 1 : 2;
  }
  const std::vector<LayoutSplit> rows = layout_split(report, "gpu", LayoutDimension::kChunks);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].publication, "A 2020");
  EXPECT_EQ(rows[0].one.runs, 0u);
  EXPECT_EQ(rows[0].more.runs, 1u);
  EXPECT_NEAR(rows[0].more.median_faster, 0.10, 1e-12);
  EXPECT_EQ(rows[1].one.runs, 1u);
  EXPECT_NEAR(rows[1].one.median_faster, -0.10, 1e-12);
  EXPECT_EQ(rows[1].more.runs, 1u);
  EXPECT_NEAR(rows[1].more.median_faster, 0.20, 1e-12);
  EXPECT_EQ(rows[2].publication, "all");
  EXPECT_EQ(rows[2].one.runs, 1u);
  EXPECT_EQ(rows[2].more.runs, 2u);
  EXPECT_NEAR(rows[2].more.median_faster, 0.15, 1e-12);
}

TEST(LayoutSplit, NothingWithoutTheDimension) {
  ValidationReport report;
  report.figures = {split_figure("C 2022", "step_time_s", 12, 10, std::nullopt, std::nullopt)};
  EXPECT_TRUE(layout_split(report, "gpu", LayoutDimension::kStages).empty());
  EXPECT_TRUE(layout_split(report, "gpu", LayoutDimension::kTensorParallel).empty());
  report.figures = {split_figure("C 2022", "step_time_s", 12, 10, 2, 2)};
  EXPECT_TRUE(layout_split(report, "memory", LayoutDimension::kStages).empty());
  // A pipelined run without its chunks stated splits by K and T, not by v.
  EXPECT_EQ(layout_split(report, "gpu", LayoutDimension::kStages).size(), 2u);
  EXPECT_TRUE(layout_split(report, "gpu", LayoutDimension::kChunks).empty());
}

}  // namespace
}  // namespace pipescope
