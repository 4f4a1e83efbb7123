#pragma once
// Prediction against measurement: the simulator's step for a plan (with a
// profile as its cost model) beside the runtime's measured steps of the same
// plan, stage by stage, and the simulator replayed with the run's own measured
// op durations, which isolates what the runtime adds beyond its ops.

#include <memory>
#include <string>
#include <vector>

#include "costmodels/profile.h"
#include "exec/runtime.h"
#include "sim/engine/simulator.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"

namespace pipescope::exec {

// The scenario in which one pipeline replica of `plan` runs on this machine:
// the plan's model (one tensor rank's share under T > 1, plan_model's) and
// schedule, its batch / D, the `cpu` preset with one device per stage (a group
// of T under tensor parallelism: K x T cores), and the profile applied
// (apply_profile: its times, its transport, its cores shared by the devices
// when there are more stages); when the profile measured a tensor group of T
// ranks, the link is tensor_group_link's and the optimizer step takes the
// group's optimizer slowdown;
// a null profile leaves the preset's nominal figures. Under tensor parallelism
// a group computes on T cores at once: the cores shared are cores / T groups,
// and the concurrency slowdown of n groups computing is that of n T cores.
// Under expert parallelism the scenario is one of the E replicas that run on
// the machine at once, each a group's op on the cores besides.
Scenario cpu_scenario(const Plan& plan, const ModelSpec& model,
                      std::shared_ptr<const Profile> profile, const std::string& profile_file);

// How to simulate `plan` on cpu_scenario's `sc`: plan_sim_config, and under
// expert parallelism the E replicas of the run as its data-parallel group (their
// all-to-alls and gradient all-reduce at the scenario's link), under context
// parallelism the C shares as the group whose gradients reduce
// (data_parallel_ring: timed by the profile's gradient sum where it measured
// one of that many ranks at T = 1).
SimConfig cpu_sim_config(const Plan& plan, const Scenario& sc);

// The link whose ring all-reduce among T devices, 2 (T - 1) (latency + B / (T
// bandwidth)) (the simulator's), takes what the profile's tensor group
// measured: latency_s + B / bandwidth. The pipeline's transfers between stages
// take this link too.
Interconnect tensor_group_link(const TensorGroupFigures& group, int T);

// (predicted - measured) / measured; 0 when both are 0.
double relative_error(double predicted, double measured);

struct StageComparison {
  double predicted_busy_s = 0.0;  // compute time of the stage's device in a step
  double measured_busy_s = 0.0;
  double relative_error = 0.0;
};

// One kind of op of one model stage: the prediction's duration against the
// mean of the median step's ops of that kind.
struct OpComparison {
  int stage = 0;  // model stage
  // "F", "F kept" (keeps its stash), "R", "B", "B input", "W", "optimizer", and
  // under tensor parallelism "F all-reduce", "R all-reduce", "B all-reduce":
  // the all-reduces of one such op, together.
  std::string kind;
  int count = 0;  // ops of this kind in the step
  double predicted_s = 0.0;
  double measured_s = 0.0;      // mean wall time
  double measured_cpu_s = 0.0;  // mean thread CPU time (wall time without a CPU clock)
  double relative_error = 0.0;
};

// Tensor parallelism's all-reduces, op for op: the predicted timeline's tensor
// events (one for each F, R and B that all-reduces, with their bytes) against
// the median step's. matched counts the pairs of the same stage, op, micro-batch
// and bytes.
struct CollectiveMatch {
  int predicted = 0;
  int measured = 0;
  int matched = 0;
  Bytes predicted_bytes = 0;
  Bytes measured_bytes = 0;
};

struct Comparison {
  int stages = 1;
  int chunks = 1;  // v, model chunks per device
  int micro_batches = 1;
  int warmup_steps = 0;    // excluded from the median
  int measured_steps = 0;  // the steps the median is taken over
  double predicted_step_s = 0.0;
  double measured_step_s = 0.0;  // median of the measured steps
  double relative_error = 0.0;
  double predicted_throughput = 0.0;  // samples/s of one replica
  double measured_throughput = 0.0;
  double predicted_bubble = 0.0;
  double measured_bubble = 0.0;
  // Busy time per pipeline device: device d runs stage d, or with v chunks the
  // stages d, d + K, ...
  std::vector<StageComparison> per_stage;
  // The engine run on the median step's own mean F, R, B and optimizer durations
  // per stage and the profile's transport: measured / replayed - 1 is what the
  // runtime costs beyond its ops (waits, wake-ups, scheduling).
  double replayed_step_s = 0.0;
  double runtime_overhead = 0.0;
  // Per model stage and kind of op, the durations behind the busy times: where
  // the prediction's error comes from.
  std::vector<OpComparison> per_op;
  // The same replay with each op's thread CPU time instead of its wall time: the
  // step as it would have run had nothing (another process, a hypervisor's
  // steal) taken the cores away mid-op. steal_fraction = 1 - CPU / wall time
  // summed over the median step's ops.
  double cpu_replayed_step_s = 0.0;
  double cpu_relative_error = 0.0;  // predicted against cpu_replayed_step_s
  double steal_fraction = 0.0;
  // How far the speed of the cores the run used moved over the round
  // (exec/machine_speed.h: speed_spread of the checks before the profile,
  // after each of its passes and after each step). Set by the caller that
  // checked it; negative where nothing did.
  double speed_spread = -1.0;
  int cores = 0;              // the machine's, from the profile
  bool shared_cores = false;  // more stages (times T) than cores
  int tensor_parallel = 1;    // T
  int context_parallel = 1;   // C
  int expert_parallel = 1;    // E
  // E > 1: the routed load the prediction added to its mixtures
  // (Profile::routed_load, scaled to the plan's micro-batch size); ranks 0:
  // none.
  ExpertLoadFigures expert_load;
  // C > 1 trading heads, or E > 1: the group's all-to-all figures the
  // prediction priced its all-to-alls by (Profile::alltoall_group, at the
  // plan's micro-batch size); ranks 0: the links between the stages'
  // threads priced them.
  GroupAllToAllFigures alltoall_group;
  // C or E > 1: the gradient sum figures the prediction timed the ranks'
  // reduction before the step by (Profile::gradient_sum); ranks 0: the
  // transport between the stages' threads did.
  GradientSumFigures gradient_sum;
  // C or E > 1 at T = 1: how much slower the group's ranks compute together,
  // which the prediction stretched their layers by (Profile::group_slowdown,
  // where measured at the plan's micro-batch size); ranks 0: the cores'
  // concurrency slowdown did.
  GroupSlowdownFigures group_slowdown;
  CollectiveMatch collectives;  // T > 1
  // The median step's workers (StepResult::ranks): with T, C or E above 1,
  // each rank's compute and collectives, where per_op holds rank 0's.
  std::vector<RankBusy> measured_ranks;
};

// `scenario` from cpu_scenario; `steps` from run_plan on the same plan.
// Requires at least one step; uses all of them when warmup >= steps.size().
Comparison compare_run(const Scenario& scenario, const Plan& plan,
                       const std::vector<StepResult>& steps, int warmup);

}  // namespace pipescope::exec
