#pragma once
// Scenario files built into the program (cli/CMakeLists.txt copies them from
// scenarios/ at configure time), so `validate` needs no source tree.

#include <string_view>

namespace pipescope::cli {

extern const std::string_view kBundledGpipeTransformer;  // scenarios/gpipe/transformer-tpuv3.json
extern const std::string_view kBundledGpipeAmoebanet;    // scenarios/gpipe/amoebanet-tpuv2.json

}  // namespace pipescope::cli
