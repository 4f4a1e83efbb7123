#pragma once
// The GPU validation cases as `pipescope validate` reads them: every
// scenarios/FOLDER/*.json of the source tree (the suite's `validation` by
// default, or the runs held out, `heldout`) whose file name starts with
// `prefix` (all of them by default), in file-name order.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sim/scenario/scenario_io.h"
#include "sim/validation/gpu_validation.h"

namespace pipescope::testing {

inline std::vector<GpuCase> validation_cases(std::string_view prefix = "",
                                             std::string_view folder = "validation") {
  const std::filesystem::path dir =
      std::filesystem::path(PIPESCOPE_SOURCE_DIR) / "scenarios" / folder;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".json" && name.starts_with(prefix)) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<GpuCase> cases;
  for (const auto& f : files) {
    cases.push_back(read_gpu_case(load_scenario_json(f), f.filename().string()));
  }
  return cases;
}

// Each publication's median |error| over `report`'s GPU cases as `stated`
// (within 0.0005), every publication stated, and their median as
// `headline`.
inline void expect_source_medians(const ValidationReport& report,
                                  const std::map<std::string, double>& stated, double headline) {
  const std::vector<SourceMedian> sources = median_abs_error_by_source(report, "gpu");
  ASSERT_EQ(sources.size(), stated.size());
  for (const SourceMedian& m : sources) {
    ASSERT_EQ(stated.count(m.publication), 1u) << m.publication;
    EXPECT_NEAR(m.median_abs_error, stated.at(m.publication), 0.0005) << m.publication;
  }
  EXPECT_NEAR(median_of_source_medians(sources), headline, 0.0005);
}

// Each layout study's Spearman rho over `report`'s GPU cases as `stated`,
// within `tolerance`, every study stated.
inline void expect_study_ranks(const ValidationReport& report,
                               const std::map<std::string, double>& stated, double tolerance) {
  const std::vector<StudyRank> studies = study_ranks(report, "gpu");
  ASSERT_EQ(studies.size(), stated.size());
  for (const StudyRank& r : studies) {
    ASSERT_EQ(stated.count(r.study), 1u) << r.study;
    EXPECT_NEAR(r.spearman, stated.at(r.study), tolerance) << r.study;
  }
}

}  // namespace pipescope::testing
