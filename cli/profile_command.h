#pragma once
// `pipescope profile SCENARIO --backend cpu -o PROFILE`: measure the scenario's
// layers, optimizer and transport on this machine for `--cost-model`.

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct ProfileOptions {
  ScenarioOptions scenario;
  std::string backend = "cpu";
  std::string output = "profile.json";
  std::vector<std::int64_t> batch_sizes;  // default: every micro-batch size a plan may use
  int repeats = 5;
  std::uint64_t seed = 1;
  bool json = false;
};

CLI::App* add_profile_command(CLI::App& app, ProfileOptions& options);
int run_profile(const ProfileOptions& options);

}  // namespace pipescope::cli
