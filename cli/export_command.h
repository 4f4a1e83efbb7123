#pragma once
// `pipescope export`: a plan in the form another pipeline-parallel tool takes
// (torchgpipe balance, DeepSpeed parts, Megatron-LM flags, PyTorch pipelining CSV).

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/scenario_options.h"

namespace pipescope::cli {

struct ExportOptions {
  std::string plan;
  std::string to;                     // torchgpipe | deepspeed | megatron | torch-pipelining
  std::optional<std::string> output;  // -o FILE; stdout when absent
  // --scenario FILE (with --set, --cost-model): the plan's scenario, to simulate
  // the plan under the schedule the framework runs; file empty when absent.
  ScenarioOptions scenario;
};

// Registers the subcommand, binding its options to `options`.
CLI::App* add_export_command(CLI::App& app, ExportOptions& options);

int run_export(const ExportOptions& options);

}  // namespace pipescope::cli
