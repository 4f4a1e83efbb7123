#pragma once
// Scenario files built into the program (cli/CMakeLists.txt copies them from
// scenarios/ at configure time), so `validate` needs no source tree.

#include <cstddef>
#include <string_view>

namespace pipescope::cli {

extern const std::string_view kBundledGpipeTransformer;  // scenarios/gpipe/transformer-tpuv3.json
extern const std::string_view kBundledGpipeAmoebanet;    // scenarios/gpipe/amoebanet-tpuv2.json

// The GPU suite, the scenarios/validation/ cases cli/CMakeLists.txt lists, in
// file-name order.
struct BundledScenario {
  std::string_view name;  // "bl-4.json"
  std::string_view text;
};
extern const BundledScenario kBundledGpuValidation[];
extern const std::size_t kBundledGpuValidationCount;

}  // namespace pipescope::cli
