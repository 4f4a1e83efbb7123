#include "cli/capacity_command.h"

#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "sim/base/format.h"
#include "sim/formats/cost_model_file.h"
#include "sim/plan/capacity.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::cli {

CLI::App* add_capacity_command(CLI::App& app, CapacityOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "capacity",
      "The largest value of an integer model parameter (default model.layers) that still fits "
      "in memory with K stages, and the model's parameter count then");
  add_scenario_options(*cmd, o.scenario);
  cmd->add_option("--cost-model", o.scenario.cost_model,
                  "How layers are timed, as for simulate: analytic, kernels, a cost-model file "
                  "(`pipescope calibrate`) or a profile (`pipescope profile`). Memory alone "
                  "decides what fits, so every model gives the same answer; it is applied to "
                  "every value tried all the same: kernels needs the device's kernel table, and "
                  "a value whose layers the profile did not measure is an error, not \"does not "
                  "fit\"");
  cmd->add_option("-K,--stages", o.stages, "Pipeline stages")->required()->check(positive_count());
  cmd->add_option("-M,--micro-batches", o.micro_batches,
                  "Micro-batches (default: training.micro_batches)")
      ->check(positive_count());
  add_remat_option(*cmd, o.remat, "default: training.remat");
  add_checkpoint_option(*cmd, o.checkpoint);
  add_tensor_parallel_option(*cmd, o.tensor_parallel);
  add_context_parallel_option(*cmd, o.context_parallel);
  cmd->add_option("--param", o.param,
                  "The integer field to grow, by its JSON path (default: model.layers, or "
                  "model.cells for amoebanet)");
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  return cmd;
}

int run_capacity(const CapacityOptions& o) {
  // Validate the scenario as given first, for its own clear errors, with -M and
  // --remat as its fields.
  TrainingFlags flags;
  flags.micro_batches = o.micro_batches;
  flags.remat = o.remat;
  flags.checkpoint = o.checkpoint;
  flags.tensor_parallel = o.tensor_parallel;
  flags.context_parallel = o.context_parallel;
  // Whether some cut fits is the question: a cut the file states stands aside.
  ScenarioOptions as_given = without_stated_cut(with_training_flags(o.scenario, flags));
  const nlohmann::json doc = load_document(as_given);
  // --cost-model is read once (it may be a pipe) and applied to every scenario
  // the search derives from the document, as to this one.
  as_given.cost_model.reset();
  Scenario sc = load(as_given, doc);
  CapacityRequest req;
  if (o.scenario.cost_model) {
    auto cost_model =
        std::make_shared<const CostModelArgument>(read_cost_model_argument(*o.scenario.cost_model));
    apply_cost_model_argument(sc, *cost_model);
    req.adjust = [cost_model](Scenario& s) { apply_cost_model_argument(s, *cost_model); };
  }
  req.stages = o.stages;
  req.micro_batches = o.micro_batches;
  req.remat = remat_of(o.remat);
  req.param = o.param;
  const CapacityResult r = find_capacity(doc, o.scenario.file, req);
  if (o.json) {
    print_json(nlohmann::json{{"param", r.param},
                              {"max_value", r.max_value},
                              {"params", r.params},
                              {"fits", r.fits},
                              {"limited", r.limited},
                              {"fractional_value", r.fractional_value},
                              {"peak_memory_bytes", r.peak_memory_bytes},
                              {"memory_bytes", r.memory_bytes}});
    return 0;
  }
  const std::string setting =
      "K=" + std::to_string(o.stages) +
      ", M=" + std::to_string(o.micro_batches.value_or(sc.training.micro_batches)) + ", remat " +
      std::string(remat_label(req.remat.value_or(sc.training.remat)));
  const std::string device = sc.cluster.device.name + " (" +
                             format_bytes(static_cast<double>(sc.cluster.device.memory_bytes)) +
                             " per device)";
  if (!r.fits) {
    std::cout << "With " << setting << ", no value of " << r.param << " fits on " << device
              << ".\n";
    return 0;
  }
  std::cout << "With " << setting << " on " << device << ": " << r.param << " up to " << r.max_value
            << " fits, " << format_count(static_cast<double>(r.params)) << " parameters"
            << (sc.cluster.tensor_parallel > 1 ? " a tensor-parallel device" : "") << " ("
            << r.probes << " values tried).\n";
  if (r.next_peak_memory_bytes > 0) {
    std::cout << "Peak memory " << format_bytes(static_cast<double>(r.peak_memory_bytes)) << " at "
              << r.max_value << ", " << format_bytes(static_cast<double>(r.next_peak_memory_bytes))
              << " at " << r.max_value + 1 << ": in finer steps the capacity is "
              << format_fixed(r.fractional_value, 2) << ".\n";
  }
  if (r.limited) {
    std::cout << "The search stops at models of " << kCapacityLayerLimit
              << " layers: larger values may fit too.\n";
  }
  return 0;
}

}  // namespace pipescope::cli
