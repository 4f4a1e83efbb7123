#pragma once
// Options every scenario-reading subcommand shares: the file and --set.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sim/engine/custom_schedule.h"
#include "sim/engine/simulator.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::cli {

// A command-line flag that stands for a field of the scenario's training
// section (-M 2 for training.micro_batches). load_document writes it into the
// document after the --set overrides, or removes the field when the flag takes
// several values (a sweep's list), so that the scenario is checked once, as it
// will run; an error in that field names the flag.
struct FieldFlag {
  std::string flag;                     // as typed: "-M 2"
  std::string key;                      // in "training": "micro_batches"
  std::optional<nlohmann::json> value;  // none: the field is removed
};

struct ScenarioOptions {
  std::string file;
  // The scenario itself, when it comes from memory rather than from `file`
  // (the Python module's dicts); `file` then names it in messages.
  std::optional<nlohmann::json> document;
  std::vector<std::string> overrides;
  std::vector<FieldFlag> field_flags;  // set by the command, not an option
  std::optional<std::string> hf_config;
  std::optional<std::int64_t> seq_len;
  // analytic, kernels, a cost-model file or a profile; only where add_cost_model_option
  std::optional<std::string> cost_model;
  std::optional<std::string> framework;  // --framework: training.framework
};

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o);
// --set, --hf-config, --seq-len and --framework alone, for a command whose
// scenario is optional.
void add_scenario_overrides(CLI::App& cmd, ScenarioOptions& o);
// --framework NAME alone: a training.framework profile by name.
void add_framework_option(CLI::App& cmd, std::optional<std::string>& framework);
// --cost-model analytic|kernels|FILE (a cost-model file or a profile), for the
// commands that time steps (simulate, plan, sweep); see apply_cost_model_argument
// (sim/formats/cost_model_file.h).
void add_cost_model_option(CLI::App& cmd, ScenarioOptions& o);
// --remat MODE: on or always, except-last, off or never. `what` says what an
// absent option means.
void add_remat_option(CLI::App& cmd, std::optional<std::string>& remat, const std::string& what);
// The mode add_remat_option took, if given.
std::optional<Remat> remat_of(const std::optional<std::string>& remat);
// --checkpoint UNIT: stage or layer, training.checkpoint.
void add_checkpoint_option(CLI::App& cmd, std::optional<std::string>& checkpoint);
// --partition optimal|uniform|params|gpipe: how a run cuts its layers into
// stages (parse_partition_method, sim/engine/partition.h).
CLI::Option* add_partition_option(CLI::App& cmd, std::string& partition);
// -T/--tensor-parallel N: training.tensor_parallel.
void add_tensor_parallel_option(CLI::App& cmd, std::optional<int>& tensor_parallel);
// -E/--expert-parallel N: training.expert_parallel; --expert-tensor-parallel
// N: training.expert_tensor_parallel.
void add_expert_parallel_option(CLI::App& cmd, std::optional<int>& expert_parallel,
                                std::optional<int>& expert_tensor_parallel);
// -C/--context-parallel N: training.context_parallel.
void add_context_parallel_option(CLI::App& cmd, std::optional<int>& context_parallel);
// The names --schedule takes: the built-in schedules (kAllSchedules), and
// "custom" (the --schedule-file's) when `with_custom`.
std::vector<std::string> schedule_choices(bool with_custom);
// The help of --chunks, `what` saying what an absent option means.
std::string chunks_help(const std::string& what);
// --schedule-file CSV: a custom schedule, PyTorch pipelining's per-rank action
// CSV (as `export --to torch-pipelining` writes it).
void add_schedule_file_option(CLI::App& cmd, std::optional<std::string>& file);
// The schedule read from that file, validated; null without the option.
std::shared_ptr<const CustomSchedule> custom_of(const std::optional<std::string>& file);
// A number above 0, for counts and rates. CLI::PositiveNumber names its range by
// the smallest and largest doubles, a 309-digit number; this says "expected a
// number above 0, got 0".
CLI::Validator positive_number();
// A whole number from 1 to 2^31 - 1, for counts held in an int: CLI11 says
// "Could not convert" of 1.5 and of 99999999999 without the range.
CLI::Validator positive_count();
// "3,2,2" as {"3", "2", "2"}; empty entries ("3,,2", "3,") are kept.
std::vector<std::string> comma_entries(const std::string& text);
// A comma-separated list taken as typed, each entry checked by `each`: an
// empty entry ("1,,2", "4,") is refused. (CLI11's own splitting reads an empty
// entry as the end of a group and keeps only one group: -K 1,,2 was K = 1.)
CLI::Validator comma_list(const CLI::Validator& each);
// An option of whole numbers, comma-separated or given as several values
// (-K 1,2 4), each checked by `each`; `out` stays empty without it.
template <typename T>
CLI::Option* add_number_list_option(CLI::App& cmd, const std::string& name, std::vector<T>& out,
                                    const std::string& description, const CLI::Validator& each) {
  const auto take = [&out](const std::vector<std::string>& values) {
    out.clear();
    for (const std::string& value : values) {
      for (const std::string& entry : comma_entries(value)) {
        out.push_back(static_cast<T>(std::stoll(entry)));
      }
    }
  };
  return cmd.add_option_function<std::vector<std::string>>(name, take, description)
      ->type_name("INT")
      ->check(comma_list(each));
}
// --seed: a whole number from 0 to 2^64 - 1, refused outside it (CLI11 would
// wrap "-1" round to 2^64 - 1 and clamp larger values without a word).
void add_seed_option(CLI::App& cmd, std::uint64_t& seed, const std::string& description);
// --backend cpu|cuda|mpi: where the executor runs (profile, run, compare);
// `description` says what each means to the command.
void add_backend_option(CLI::App& cmd, std::string& backend, const std::string& description);
// Runs fn(); a ConfigError that names a scenario field becomes a ScenarioError
// naming `file` and that field, as scenario errors are reported.
template <typename Fn>
decltype(auto) naming_scenario_file(const std::string& file, Fn&& fn) {
  try {
    return fn();
  } catch (const ConfigError& e) {
    if (e.scenario_field().empty()) throw;
    throw ScenarioError(file, e.scenario_field(), e.what());
  }
}
// --balance L1,L2,...: the layers of each model stage, the cut to simulate
// (training.balance); whole numbers of at least 1, checked as typed.
void add_balance_option(CLI::App& cmd, std::optional<std::string>& balance);
// `o` with --balance as training.balance, which replaces the file's cut
// (training.balance or training.megatron); an error in it names the flag.
ScenarioOptions with_balance(ScenarioOptions o, const std::optional<std::string>& balance);
// `o` without the cut its scenario states (training.balance,
// training.megatron), for a command that cuts models the file does not have.
ScenarioOptions without_stated_cut(ScenarioOptions o);
// The ConfigError `e`, which names a scenario field, as the ScenarioError of
// `o`'s file: named by the flag that wrote the field, if one did.
ScenarioError scenario_field_error(const ScenarioOptions& o, const ConfigError& e);
// naming_scenario_file for the scenario of `o`, whose flags name their fields.
template <typename Fn>
decltype(auto) naming_scenario_fields(const ScenarioOptions& o, Fn&& fn) {
  try {
    return fn();
  } catch (const ConfigError& e) {
    if (e.scenario_field().empty()) throw;
    throw scenario_field_error(o, e);
  }
}
// The flags of the training section, as a command took them.
struct TrainingFlags {
  std::optional<int> micro_batches;           // -M
  std::optional<std::string> schedule;        // --schedule
  std::optional<int> chunks;                  // --chunks
  std::optional<std::string> remat;           // --remat
  std::optional<std::string> checkpoint;      // --checkpoint
  std::optional<int> tensor_parallel;         // -T
  std::optional<int> expert_parallel;         // -E
  std::optional<int> expert_tensor_parallel;  // --expert-tensor-parallel
  std::optional<int> context_parallel;        // -C
  bool micro_batches_vary = false;            // -M took a list (sweep)
};
// `o` with those flags as its field_flags. A schedule that runs one chunk per
// device, given without --chunks, also removes the file's chunk count, which
// belonged to the schedule it replaces; --schedule custom (a schedule file) stands
// for no field.
ScenarioOptions with_training_flags(ScenarioOptions o, const TrainingFlags& f);
// Whether a --set names a training field that a plan fixes (K, D, T, E, C, M,
// ZeRO, the schedule, its chunks, remat, the cut).
bool sets_a_plan_field(const ScenarioOptions& o);
// `o` with the plan's split of the layers (its T and sequence parallelism),
// its E and its ZeRO stage as training fields, which a plan fixes as it fixes K; an
// error in them names the plan file. Refuses a --set of a field the plan
// fixes to another value than the plan's.
ScenarioOptions with_plan_split(ScenarioOptions o, const Plan& plan, const std::string& plan_file);
// The scenario document: the file, its model replaced by --hf-config when given,
// then the --set overrides, then the field flags.
nlohmann::json load_document(const ScenarioOptions& o);
// The scenario of load_document, with --cost-model applied. An error
// in a model that --hf-config built names the config, not the scenario file.
Scenario load(const ScenarioOptions& o);
// The same, from a document load_document already read: an input that can be
// read once only (a pipe, a process substitution) is not read twice.
Scenario load(const ScenarioOptions& o, const nlohmann::json& doc);

}  // namespace pipescope::cli
