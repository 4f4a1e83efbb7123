#pragma once
// The GPU validation cases as `pipescope validate` reads them: every
// scenarios/FOLDER/*.json of the source tree (the suite's `validation` by
// default, or the runs held out, `heldout`) whose file name starts with
// `prefix` (all of them by default), in file-name order.

#include <algorithm>
#include <filesystem>
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

}  // namespace pipescope::testing
