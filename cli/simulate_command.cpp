#include "cli/simulate_command.h"

#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "cli/summary.h"
#include "sim/base/file_io.h"
#include "sim/engine/simulator.h"
#include "sim/formats/plan_io.h"
#include "sim/formats/result_json.h"
#include "sim/formats/trace_io.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope::cli {

CLI::App* add_simulate_command(CLI::App& app, SimulateOptions& o) {
  SimulateOptions* opts = &o;
  CLI::App* cmd =
      app.add_subcommand("simulate",
                         "Simulate one training step of a scenario: per-stage times, step time, "
                         "throughput, bubble, MFU and peak memory against capacity");
  add_scenario_options(*cmd, opts->scenario);
  add_cost_model_option(*cmd, opts->scenario);
  cmd->add_option("--plan", opts->plan,
                  "Simulate a plan written by `pipescope plan -o` (its K, M, schedule, remat and "
                  "cuts) on the scenario it was made for");
  cmd->add_option("-K,--stages", opts->stages,
                  "Pipeline stages (default: the cluster's device count; where that cannot "
                  "run or fit and nothing fixes the layout, the planner's best plan)")
      ->check(positive_count());
  cmd->add_option("-M,--micro-batches", opts->micro_batches,
                  "Micro-batches per step (default: training.micro_batches)")
      ->check(positive_count());
  cmd->add_option("--schedule", opts->schedule, "Pipeline schedule (default: training.schedule)")
      ->check(CLI::IsMember(schedule_choices(true)));
  add_schedule_file_option(*cmd, opts->schedule_file);
  cmd->add_option("-D,--data-parallel", opts->data_parallel,
                  "Data-parallel replicas of the pipeline (K x D devices): one replica is "
                  "simulated on its share of the batch, each stage all-reducing its gradients "
                  "over a ring of the replicas before its optimizer step (default: 1)")
      ->check(positive_count());
  add_tensor_parallel_option(*cmd, opts->tensor_parallel);
  add_expert_parallel_option(*cmd, opts->expert_parallel, opts->expert_tensor_parallel);
  add_context_parallel_option(*cmd, opts->context_parallel);
  cmd->add_option("--chunks", opts->chunks, chunks_help("default: training.chunks"))
      ->check(positive_count());
  add_remat_option(*cmd, opts->remat, "default: training.remat");
  add_checkpoint_option(*cmd, opts->checkpoint);
  add_partition_option(*cmd, opts->partition)->each([opts](const std::string&) {
    opts->partition_given = true;
  });
  add_balance_option(*cmd, opts->balance);
  cmd->add_option("--trace", opts->trace, "Write a Chrome trace (Perfetto, chrome://tracing)");
  cmd->add_flag("--json", opts->json, "Print the result as JSON instead of a table");
  return cmd;
}

namespace {

// The step with the cut `config.partition` makes instead of the scenario's.
SimResult partitioner_result(Scenario scenario, SimConfig config) {
  scenario.training.cut.reset();
  config.record_timeline = false;
  config.timeline_sink = nullptr;
  return simulate(scenario, config);
}

// --json's given_cut and partitioner_cut.
void add_cut_comparison(nlohmann::json& j, const SimResult& given, const SimResult& partitioned,
                        PartitionMethod method, const std::string& source) {
  j["given_cut"] = {{"source", source}, {"balance", stage_balance(given)}};
  j["partitioner_cut"] = {{"partition", to_string(method)},
                          {"balance", stage_balance(partitioned)},
                          {"step_time_s", partitioned.metrics.step_time_s()},
                          {"fits", partitioned.metrics.fits()}};
}

// Whether the command line and the scenario leave the layout to the default
// (K = the cluster's devices, D = 1, the scenario file's T, M and schedule):
// no layout flag, no --set of a field a plan fixes, no stated cut.
bool layout_left_open(const SimulateOptions& o, const Scenario& scenario) {
  return !o.plan && !o.stages && !o.micro_batches && !o.schedule && !o.chunks && !o.remat &&
         !o.schedule_file && !o.data_parallel && !o.tensor_parallel && !o.expert_parallel &&
         !o.expert_tensor_parallel && !o.context_parallel && !o.balance && !o.partition_given &&
         !scenario.training.cut && !sets_a_plan_field(o.scenario);
}

// The planner's best plan where the default layout cannot run or does not
// fit, with why; nothing where it runs and fits, or where nothing fits (the
// default's own error or figures then stand).
std::optional<std::pair<Plan, std::string>> planner_layout(const Scenario& scenario) {
  std::string why;
  try {
    const SimResult r = simulate(scenario, SimConfig{});
    if (r.metrics.fits()) return std::nullopt;
    why = "does not fit in memory";
  } catch (const std::exception& e) {
    why = "cannot run: " + std::string(e.what());
  }
  const PlanReport report = run_planner(scenario, PlanRequest{});
  if (report.ranked.empty()) return std::nullopt;
  const PlanCandidate& best = report.ranked.front();
  Plan plan = make_plan(replica_scenario(*best.scenario, best.stages, best.data_parallel),
                        best.result, best.data_parallel, "optimal");
  plan.global_batch = scenario.training.global_batch;
  plan.scenario_name = scenario.name;
  return std::pair{std::move(plan), "the planner's best, " + best.label() +
                                        ": the scenario fixes no layout, and its default (K = " +
                                        std::to_string(scenario.cluster.devices) + ", D = 1) " +
                                        why};
}

// What the command simulates: the scenario as the flags, --plan or the
// planner lay it out.
struct SimulatedScenario {
  std::optional<Plan> plan;
  ScenarioOptions options;
  Scenario scenario;
  // Why the planner's best plan runs, where it does.
  std::optional<std::string> layout;
};

// The flags that stand for training fields are checked with the scenario, as
// fields of it; with --plan they are refused (refuse_layout_flags) instead,
// and the plan's T splits the scenario's layers.
ScenarioOptions flag_scenario_options(const SimulateOptions& o, const std::optional<Plan>& plan) {
  return o.plan ? with_plan_split(o.scenario, *plan, *o.plan)
                : with_balance(with_training_flags(
                                   o.scenario, {.micro_batches = o.micro_batches,
                                                .schedule = o.schedule,
                                                .chunks = o.chunks,
                                                .remat = o.remat,
                                                .checkpoint = o.checkpoint,
                                                .tensor_parallel = o.tensor_parallel,
                                                .expert_parallel = o.expert_parallel,
                                                .expert_tensor_parallel = o.expert_tensor_parallel,
                                                .context_parallel = o.context_parallel}),
                               o.balance);
}

// Loads the scenario as the flags or --plan lay it out. A scenario that fixes
// no layout and cannot run or fit at the default runs at the planner's best
// plan, and says so.
SimulatedScenario scenario_to_simulate(const SimulateOptions& o) {
  SimulatedScenario s;
  if (o.plan) s.plan = read_plan_file(*o.plan);
  s.options = flag_scenario_options(o, s.plan);
  s.scenario = load(s.options);
  if (layout_left_open(o, s.scenario)) {
    if (auto best = naming_scenario_fields(s.options, [&] { return planner_layout(s.scenario); })) {
      s.plan = std::move(best->first);
      s.layout = std::move(best->second);
      s.options = with_plan_split(o.scenario, *s.plan, "(the planner's best)");
      s.scenario = load(s.options);
    }
  }
  return s;
}

// Throws std::invalid_argument for a layout flag beside a plan, which fixes
// them all.
void refuse_layout_flags(const SimulateOptions& o) {
  if (o.stages || o.micro_batches || o.schedule || o.chunks || o.remat || o.schedule_file ||
      o.data_parallel || o.tensor_parallel || o.expert_parallel || o.expert_tensor_parallel ||
      o.context_parallel || o.balance || o.checkpoint || o.partition_given) {
    throw std::invalid_argument(
        "--plan fixes K, D, T, E, C, M, the schedule, its chunks, remat and the cut; drop -K, "
        "--data-parallel, -T, -E, --expert-tensor-parallel, -C, -M, --schedule, "
        "--schedule-file, --chunks, --remat, --checkpoint, --partition and --balance");
  }
}

// Lays `s` out as its plan does: the scenario and config of one of the plan's
// D replicas. Returns D.
int follow_plan(const SimulateOptions& o, SimulatedScenario& s, SimConfig& config) {
  refuse_layout_flags(o);
  if (o.plan) check_plan_matches(*s.plan, s.scenario, *o.plan);
  // The plan's pipeline is one of its D replicas.
  PlanSimulation run = plan_simulation(s.scenario, *s.plan);
  s.scenario = std::move(run.scenario);
  config = std::move(run.config);
  return s.plan->data_parallel;
}

// D replicas of a K-device pipeline (--data-parallel D): `scenario` and
// `config` become one of them, on its share of the batch. Throws where the
// replicas do not fit the cluster or divide the batch. Returns D.
int replicate_pipeline(const SimulateOptions& o, const Cluster& whole_cluster, Scenario& scenario,
                       SimConfig& config) {
  const int D = o.data_parallel.value_or(1);
  const int N = whole_cluster.devices;
  // D replicas of K devices each take K x D of the cluster's N; without -K, K
  // is N / D, which D must divide.
  if (!o.stages && N % D != 0) {
    throw ScenarioError(o.scenario.file, "cluster.devices",
                        "--data-parallel " + std::to_string(D) + " without -K makes " +
                            std::to_string(D) + " pipelines of K = devices / D each, and " +
                            std::to_string(D) + " does not divide the cluster's " +
                            whole_cluster.devices_text(N) + "; choose a D that does, or give -K " +
                            "with K x D at most " + std::to_string(N));
  }
  const int K = o.stages.value_or(N / D);
  if (std::int64_t{K} * D > N) {
    throw ScenarioError(
        o.scenario.file, "cluster.devices",
        "--data-parallel " + std::to_string(D) + " replicas of K=" + std::to_string(K) +
            " devices need K x D = " + whole_cluster.devices_text(std::int64_t{K} * D) +
            "; the cluster has " + std::to_string(N));
  }
  if (scenario.training.global_batch % D != 0) {
    throw ConfigError("--data-parallel " + std::to_string(D) +
                      " does not divide the global batch of " +
                      std::to_string(scenario.training.global_batch));
  }
  scenario = replica_scenario(scenario, K, D);
  config.stages = K;
  config.data_parallel = data_parallel_ring(whole_cluster, K, D, scenario.training.expert_parallel);
  return D;
}

// The layout flags' fields of `config`, over what a plan or the replicas set.
void apply_layout_flags(const SimulateOptions& o, SimConfig& config) {
  if (o.stages) config.stages = o.stages;
  if (o.micro_batches) config.micro_batches = o.micro_batches;
  if (o.schedule) config.schedule = parse_schedule(*o.schedule);
  if (o.chunks) config.chunks = o.chunks;
  if (o.remat) config.remat = remat_of(o.remat);
  if (o.schedule_file) config.custom = custom_of(o.schedule_file);
  config.partition = *parse_partition_method(o.partition);
}

// The simulated step and, with --trace, the events its trace holds.
struct TracedStep {
  SimResult result;
  std::int64_t traced_slices = 0;
};

// Simulates the step, with --trace writing its trace while the engine runs (a
// run of millions of ops is never held whole) to a temporary file, renamed
// into place once complete: if it cannot be written, no result is printed as
// if all had gone well.
TracedStep simulate_step(const SimulateOptions& o, const SimulatedScenario& s, SimConfig& config) {
  config.record_timeline = false;
  TracedStep step;
  const auto run_simulation = [&] {
    naming_scenario_fields(s.options, [&] { step.result = simulate(s.scenario, config); });
  };
  if (o.trace) {
    write_file_atomically(*o.trace, [&](std::ostream& out) {
      ChromeTraceWriter writer(out);
      config.timeline_sink = &writer;
      run_simulation();
      step.traced_slices = writer.slices();
    });
  } else {
    run_simulation();
  }
  return step;
}

// Prints the result: as JSON with --json, else as the summary, then the given
// cut beside the one --partition makes, where there is one.
void print_result(const SimulateOptions& o, const SimulatedScenario& s, const SimResult& result,
                  const std::optional<SimResult>& partitioned, PartitionMethod method,
                  int replicas) {
  const std::string given = cut_source(s.scenario, o.balance.has_value());
  if (o.json) {
    nlohmann::json j = to_json(result);
    if (s.layout) j["layout"] = *s.layout;
    if (partitioned) add_cut_comparison(j, result, *partitioned, method, given);
    print_json(j);
  } else {
    if (s.layout) std::cout << "Layout     " << *s.layout << "\n";
    print_summary(std::cout, s.scenario, result,
                  o.plan        ? "from " + *o.plan
                  : s.layout    ? std::string("the planner's")
                  : partitioned ? "given (" + given + ")"
                                : std::string(to_string(method)),
                  replicas);
    if (partitioned) print_cut_comparison(std::cout, result, *partitioned, method);
  }
}

}  // namespace

int run_simulate(const SimulateOptions& o) {
  SimulatedScenario s = scenario_to_simulate(o);
  const Cluster whole_cluster = s.scenario.cluster;
  SimConfig config;
  int replicas = 1;
  if (s.plan) {
    replicas = follow_plan(o, s, config);
  } else if ((o.data_parallel && *o.data_parallel > 1) || whole_cluster.context_parallel > 1 ||
             whole_cluster.expert_fold > 1) {
    // D replicas of a K-device pipeline: simulate one, on its share of the
    // batch. Under context parallelism one replica too: its C shares reduce
    // their gradients, and ZeRO shards, over the C; with whole experts its T
    // devices are expert ranks.
    replicas = replicate_pipeline(o, whole_cluster, s.scenario, config);
  }
  apply_layout_flags(o, config);
  TracedStep step = simulate_step(o, s, config);
  SimResult& result = step.result;
  // A given cut (the plan's aside) beside the one --partition makes.
  std::optional<SimResult> partitioned;
  if (!s.plan && s.scenario.training.cut) {
    partitioned =
        naming_scenario_fields(s.options, [&] { return partitioner_result(s.scenario, config); });
  }
  // D replicas each run the simulated pipeline on their share of the batch; the
  // simulation holds their gradient all-reduce.
  result.metrics.samples_per_s *= replicas;
  result.metrics.tokens_per_s *= replicas;
  s.scenario.cluster.devices = whole_cluster.devices;
  s.scenario.training.global_batch *= replicas;

  print_result(o, s, result, partitioned, config.partition, replicas);
  if (o.trace) {
    (o.json ? std::cerr : std::cout)
        << "Trace written to " << *o.trace << " (" << step.traced_slices
        << " events; open it in Perfetto or chrome://tracing)\n";
  }
  return 0;
}

}  // namespace pipescope::cli
