#include "cli/export_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <system_error>

#include "sim/file_io.h"
#include "sim/plan_export.h"
#include "sim/plan_io.h"

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
  cmd->add_option("-o,--output", opts->output, "Write to FILE instead of standard output");
  return cmd;
}

int run_export(const ExportOptions& o) {
  const std::optional<ExportFormat> format = parse_export_format(o.to);
  if (!format) throw std::invalid_argument("unknown export format '" + o.to + "'");
  const Plan plan = read_plan_file(o.plan);
  const std::string text = export_plan(plan, *format);
  if (o.output) {
    write_file_atomically(*o.output, text);
    std::cout << "Wrote the " << o.to << " export of " << o.plan << " to " << *o.output << "\n";
  } else {
    std::cout << text;
  }
  return 0;
}

}  // namespace pipescope::cli
