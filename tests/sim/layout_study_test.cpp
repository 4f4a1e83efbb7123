// Layout studies (sim/validation/gpu_validation.h, check_studies and
// study_ranks): the cases of one source's sweep, ranked against each other.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/base/scenario_error.h"
#include "sim/validation/gpu_validation.h"

namespace pipescope {
namespace {

// A study ranks one source's runs in one metric: another source's run, or a
// figure in another metric, is refused naming the case's file and field.
TEST(GpuValidationCases, AStudyHoldsOneSourcesRunsInOneMetric) {
  std::vector<GpuCase> cases(3);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].file = "case" + std::to_string(i) + ".json";
    cases[i].source = "S 2024, Table 1";
    cases[i].study = "S-1";
    cases[i].metric = GpuMetric::kSamplesPerS;
  }
  EXPECT_NO_THROW(check_studies(cases));
  cases[2].source = "T 2023, Table 4";
  try {
    check_studies(cases);
    ADD_FAILURE() << "two sources in one study";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("case2.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("validation.study"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs of S 2024 (case0.json) and of T 2023"),
              std::string::npos)
        << e.what();
  }
  cases[2].source = cases[0].source;
  cases[1].metric = GpuMetric::kStepTimeS;
  EXPECT_THROW(check_studies(cases), ScenarioError);
  cases[1].study = "S-2";  // a study of its own
  EXPECT_NO_THROW(check_studies(cases));
}

// A layout study's cases ranked against each other, each study apart, in the
// order they first appear; the other table's figures, the cases of no study
// and a study of fewer than three cases are not ranked.
TEST(GpuValidationMetrics, EachStudyIsRankedOnItsOwn) {
  ValidationReport r;
  const auto add = [&](const std::string& study, double paper, double simulated,
                       const std::string& table = "gpu") {
    PaperFigure f;
    f.table = table;
    f.source = "S 2024, Table " + study;
    f.study = study;
    f.paper = paper;
    f.simulated = simulated;
    r.figures.push_back(f);
  };
  add("B", 3, 30);
  add("A", 1, 1);
  add("A", 2, 2);
  add("B", 2, 10);
  add("A", 3, 4);
  add("A", 4, 3);
  add("B", 1, 20);
  add("", 5, 0);
  add("A", 5, 5);
  add("C", 1, 1);
  add("C", 2, 2);
  add("A", 6, 0, "gpu-memory");
  const std::vector<StudyRank> studies = study_ranks(r, "gpu");
  ASSERT_EQ(studies.size(), 2u);
  EXPECT_EQ(studies[0].study, "B");
  EXPECT_EQ(studies[0].publication, "S 2024");
  EXPECT_EQ(studies[0].figures, 3u);
  // Simulated ranks 3, 1, 2 against 3, 2, 1: d = 0, -1, 1, rho = 1 - 6 * 2 / 24.
  EXPECT_NEAR(studies[0].spearman, 0.5, 1e-12);
  EXPECT_EQ(studies[1].study, "A");
  EXPECT_EQ(studies[1].figures, 5u);
  EXPECT_NEAR(studies[1].spearman, 0.9, 1e-12);  // two neighbours swapped
}

}  // namespace
}  // namespace pipescope
