#include "cli/scenario_options.h"

#include "sim/scenario_io.h"

namespace pipescope::cli {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("scenario", o.file, "Scenario JSON file")->required();
  cmd.add_option("--set", o.overrides,
                 "Override a scenario field by its JSON path, e.g. --set model.layers=48 "
                 "(repeatable)")
      ->allow_extra_args(false);
}

Scenario load(const ScenarioOptions& o) {
  return load_scenario(o.file, o.overrides);
}

}  // namespace pipescope::cli
