#include "cli/command_line.h"

#include <csignal>
#include <exception>
#include <new>

#include "costmodels/check.h"
#include "sim/base/cancel.h"
#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/base/signals.h"

namespace pipescope::cli {

CommandLine::CommandLine()
    : app_{"PipeScope: plan, simulate and check pipeline-parallel training (GPipe and after)",
           "pipescope"} {
  app_.require_subcommand(1);
  app_.set_version_flag("--version", "pipescope 0.1.0");
  simulate_cmd_ = add_simulate_command(app_, simulate_);
  plan_cmd_ = add_plan_command(app_, plan_);
  sweep_cmd_ = add_sweep_command(app_, sweep_);
  capacity_cmd_ = add_capacity_command(app_, capacity_);
  export_cmd_ = add_export_command(app_, export_);
  run_cmd_ = add_run_command(app_, run_);
  profile_cmd_ = add_profile_command(app_, profile_);
  compare_cmd_ = add_compare_command(app_, compare_);
  validate_cmd_ = add_validate_command(app_, validate_);
  selftest_cmd_ = add_selftest_command(app_, selftest_);
  calibrate_cmd_ = add_calibrate_command(app_, calibrate_);
}

const CLI::App* CommandLine::chosen() const {
  const auto subs = app_.get_subcommands();
  return subs.empty() ? nullptr : subs.front();
}

bool CommandLine::runs_the_executor() const {
  return run_cmd_->parsed() || profile_cmd_->parsed() || compare_cmd_->parsed();
}

bool CommandLine::writes_data_to_stdout() const {
  for (const CLI::App* sub : app_.get_subcommands()) {
    for (const char* name : {"--output", "--trace", "--csv"}) {
      const CLI::Option* option = sub->get_option_no_throw(name);
      if (option == nullptr || option->count() == 0) continue;
      for (const std::string& value : option->results()) {
        if (is_standard_output(value)) return true;
      }
    }
  }
  return false;
}

void CommandLine::read_scenario_from(const nlohmann::json& document, const std::string& name) {
  for (ScenarioOptions* o :
       {&simulate_.scenario, &plan_.scenario, &sweep_.scenario, &capacity_.scenario,
        &export_.scenario, &profile_.scenario, &calibrate_.scenario}) {
    o->document = document;
    o->file = name;
  }
}

int CommandLine::dispatch() {
  if (simulate_cmd_->parsed()) return run_simulate(simulate_);
  if (plan_cmd_->parsed()) return run_plan(plan_);
  if (sweep_cmd_->parsed()) return run_sweep_command(sweep_);
  if (capacity_cmd_->parsed()) return run_capacity(capacity_);
  if (export_cmd_->parsed()) return run_export(export_);
  if (run_cmd_->parsed()) return run_run(run_);
  if (profile_cmd_->parsed()) return run_profile(profile_);
  if (compare_cmd_->parsed()) return run_compare(compare_);
  if (validate_cmd_->parsed()) return run_validate(validate_);
  if (selftest_cmd_->parsed()) return run_selftest(selftest_);
  if (calibrate_cmd_->parsed()) return run_calibrate(calibrate_);
  return kExitUsage;
}

int CommandLine::run(const std::function<void(const std::string&)>& report) {
  try {
    return dispatch();
  } catch (const Cancelled&) {
    report("pipescope: interrupted");
    const int sig = stop_signal();
    return 128 + (sig != 0 ? sig : SIGINT);
  } catch (const InternalError& e) {
    report("pipescope: internal error (please report): " + escape_for_terminal(e.what()));
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    report("pipescope: error: out of memory; try a smaller K, M or model");
    return kExitBadInput;
  } catch (const std::exception& e) {
    // ScenarioError, ConfigError and I/O errors already read as one sentence.
    report("pipescope: error: " + escape_for_terminal(e.what()));
    return kExitBadInput;
  }
}

}  // namespace pipescope::cli
