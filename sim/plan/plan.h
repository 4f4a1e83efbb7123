#pragma once
// A plan: the chosen K, M, schedule, remat and cuts for a model on a cluster, with
// the predicted times and memory (docs/file-formats.md, "Plans"). Plans are what
// `plan` writes, `simulate --plan` reads back, and `export` turns into the forms
// other tools take.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/model.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/partition.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

struct PlanStage {
  StageRange layers;
  int device = 0;
  double fwd_s = 0.0;  // per micro-batch
  double bwd_s = 0.0;
  double recompute_s = 0.0;  // one micro-batch's recompute; 0 without remat
  Bytes peak_memory = 0;     // its device's peak
  // What that peak holds (memory_splits): weights, gradients, optimizer state and
  // activations, adding up to peak_memory. Empty in plans written before the
  // split, where it is unknown, not zero.
  std::optional<MemorySplit> memory_split;
};

struct Plan {
  // Fields added since version 1 (T, zero, chunks, remat_mode, checkpoint, each
  // device's memory split) are optional when read, so older plans still load; a change
  // that old readers would misread, not merely refuse, needs a new version.
  static constexpr int kVersion = 1;

  std::string scenario_name;
  // The model's identity: a plan applies only to the model it was made for.
  std::string model_name;
  std::string model_hash;  // model_hash() of the layer list
  int layer_count = 0;
  std::vector<std::string> layer_names;  // for exports that name split points
  // The scenario's "model" object (family and parameters) so that the executor
  // can rebuild the model; null for explicit layer lists.
  nlohmann::json model_spec;
  std::optional<Optimizer> optimizer;  // empty when the scenario gave bytes_per_param

  std::string cluster_name;
  int devices = 1;  // N = stages x data_parallel x tensor_parallel
  Bytes memory_capacity = 0;

  int stages = 1;         // K, the pipeline's devices
  int chunks = 1;         // v: stage_plans holds K x v model stages (interleaved-1f1b)
  int data_parallel = 1;  // D, replicas of the pipeline
  // How the K x D x T x C ranks sit on the cluster (cluster.rank_order); matters
  // with D > 1.
  RankOrder rank_order = RankOrder::kTpPpDp;
  // How stages exchange tensors (cluster.p2p, cluster.p2p_split); matter with
  // K > 1.
  P2pMode p2p = P2pMode::kOverlapped;
  bool p2p_split = false;
  // T, the devices of a stage that split its layers (training.tensor_parallel);
  // the stage plans are one device's share
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  // E, the replicas a mixture's routed experts spread over
  // (training.expert_parallel); the stage plans hold a device's share of them
  int expert_parallel = 1;
  // The devices that split each expert (training.expert_tensor_parallel): 0
  // for T, 1 for whole experts (each of a tensor group's T an expert rank).
  int expert_tensor_parallel = 0;
  // How the expert ranks exchange tokens (training.moe_dispatcher).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // C, the devices each sample's sequence splits over
  // (training.context_parallel); the stage plans hold a device's share of it
  int context_parallel = 1;
  // How those C exchange keys and values (training.cp_comm_type).
  ContextExchange cp_comm_type = ContextExchange::kP2p;
  int zero = 0;           // ZeRO stage over the D (x C) replicas (sim/engine/zero.h)
  int micro_batches = 1;  // M per replica
  std::int64_t global_batch = 1;
  std::int64_t micro_batch_size = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  Remat remat = Remat::kAlways;
  // What remat keeps (training.checkpoint); matters when it reruns forwards.
  Checkpoint checkpoint = Checkpoint::kStage;
  std::shared_ptr<const CustomSchedule> custom;  // the actions of schedule custom
  std::string partition_method;                  // how the cuts were chosen, e.g. "optimal"
  std::vector<PlanStage> stage_plans;

  double step_time_s = 0.0;
  double throughput_samples_per_s = 0.0;
  double bubble_fraction = 0.0;
  bool fits = true;

  std::vector<StageRange> stage_ranges() const;
  // How the model's layers split over a device's ranks: T (with sequence
  // parallelism or not), E, C and its form, as TrainingConfig::split says
  // of a scenario.
  TensorSplit split() const;
  // The op lists the plan runs: its schedule's, or its custom actions'.
  Schedule schedule_ops() const;
  int model_stages() const { return stages * chunks; }
};

// A plan from a simulated step of one pipeline replica: stage s on its device (stage_device_of),
// every field from `result` (stage times per micro-batch, peak memory per device and its split,
// memory_splits) and the scenario (names, layer list, memory capacity). devices = K x
// data_parallel, global_batch = data_parallel x M x micro-batch size, and the throughput is
// data_parallel times the replica's.
Plan make_plan(const Scenario& scenario, const SimResult& result, int data_parallel,
               std::string partition_method);

// The simulation of the plan's pipeline as it stands: its K, M, schedule (or
// custom actions), chunks, remat and cuts, without a recorded timeline.
SimConfig plan_sim_config(const Plan& plan);

// A stable hex digest (64-bit FNV-1a) of every layer's name, FLOPs, parameters and
// sizes and of the model's dtype and input: equal layer lists give equal hashes
// on every machine.
std::string model_hash(const ModelSpec& model);

}  // namespace pipescope
