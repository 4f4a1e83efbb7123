#include "cli/export_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "sim/base/file_io.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"

namespace pipescope::cli {

CLI::App* add_export_command(CLI::App& app, ExportOptions& o) {
  ExportOptions* opts = &o;
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a plan in the form another tool takes: torchgpipe (balance), deepspeed (the "
      "stage boundaries as PipelineModule parts), megatron (command-line flags), "
      "torch-pipelining (PyTorch's per-rank schedule CSV)");
  cmd->add_option("plan", opts->plan, "Plan JSON file (from `pipescope plan -o`)")->required();
  cmd->add_option("--to", opts->to, "Target tool")
      ->required()
      ->check(CLI::IsMember({"torchgpipe", "deepspeed", "megatron", "torch-pipelining"}));
  cmd->add_option("-o,--output", opts->output,
                  "Write to FILE instead of standard output; torch-pipelining also writes the "
                  "device mesh to FILE less .csv, with .mesh.py");
  cmd->add_option("--scenario", opts->scenario.file,
                  "The scenario the plan was made for: when the target runs another schedule "
                  "than the plan's, the export gives the plan's step time and peak memory under "
                  "it, simulated");
  add_scenario_overrides(*cmd, opts->scenario);
  add_cost_model_option(*cmd, opts->scenario);
  return cmd;
}

namespace {

// Whether a file can go beside `output`: a file of its own, not standard output
// or a device, pipe or socket (the mesh beside /dev/null would land in /dev).
bool has_a_folder(const std::string& output) {
  if (output == "-") return false;
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(output, ec);
  return st.type() == std::filesystem::file_type::not_found ||
         st.type() == std::filesystem::file_type::regular;
}

// The ranks of a plan beyond its pipeline, in words, or "" when it has none.
std::string beyond_the_pipeline(const Plan& p) {
  if (p.data_parallel == 1 && p.tensor_parallel == 1 && p.zero == 0) return "";
  return "D=" + std::to_string(p.data_parallel) + " x K=" + std::to_string(p.stages) +
         " x T=" + std::to_string(p.tensor_parallel) + " ranks" +
         (p.zero > 0 ? " with ZeRO stage " + std::to_string(p.zero) : "");
}

}  // namespace

int run_export(const ExportOptions& o) {
  const std::optional<ExportFormat> format = parse_export_format(o.to);
  if (!format) throw std::invalid_argument("unknown export format '" + o.to + "'");
  const Plan plan = read_plan_file(o.plan);
  std::optional<Scenario> scenario;
  if (!o.scenario.file.empty()) {
    scenario = load(with_plan_split(o.scenario, plan, o.plan));
    check_plan_matches(plan, *scenario, o.plan);
  } else if (!o.scenario.overrides.empty() || o.scenario.hf_config || o.scenario.cost_model) {
    throw std::invalid_argument(
        "--set, --hf-config and --cost-model apply to the plan's scenario; give --scenario FILE");
  }
  const std::string text = naming_scenario_file(
      o.scenario.file, [&] { return export_plan(plan, *format, scenario ? &*scenario : nullptr); });
  const bool torch = *format == ExportFormat::kTorchPipelining;
  const std::string mesh = torch ? export_torch_device_mesh(plan) : "";
  if (torch && o.output && has_a_folder(*o.output)) {
    const std::string mesh_file = torch_device_mesh_path(*o.output);
    // Both or neither: a mesh that cannot be written leaves the CSV as it was.
    write_files_atomically({{*o.output, [&](std::ostream& out) { out << text; }},
                            {mesh_file, [&](std::ostream& out) { out << mesh; }}});
    std::cout << "Wrote the " << o.to << " export of " << o.plan << " to " << *o.output
              << " and its device mesh to " << mesh_file << "\n";
    return 0;
  }
  if (o.output) {
    write_file_atomically(*o.output, text);
    std::cout << "Wrote the " << o.to << " export of " << o.plan << " to " << output_name(*o.output)
              << "\n";
  } else {
    std::cout << text;
  }
  if (torch && !beyond_the_pipeline(plan).empty()) {
    // The CSV alone is one replica's pipeline: say where the rest goes.
    std::cerr << "pipescope export: the plan runs on " << beyond_the_pipeline(plan)
              << "; its device mesh goes beside the CSV when -o names a file (FILE.csv and "
                 "FILE.mesh.py)\n";
  }
  return 0;
}

}  // namespace pipescope::cli
