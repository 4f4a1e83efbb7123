#pragma once
// Options every scenario-reading subcommand shares: the file and --set.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/scenario.h"

namespace pipescope::cli {

struct ScenarioOptions {
  std::string file;
  std::vector<std::string> overrides;
};

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o);
Scenario load(const ScenarioOptions& o);

}  // namespace pipescope::cli
