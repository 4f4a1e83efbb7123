#include "sim/plan/plan.h"

#include "sim/engine/custom_schedule.h"
#include "sim/scenario/model_json.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <utility>

#include "costmodels/check.h"
#include "sim/engine/simulator.h"

namespace pipescope {
namespace {

// 64-bit FNV-1a (Fowler, Noll, Vo): offset basis and prime from the reference
// description, http://www.isthe.com/chongo/tech/comp/fnv/.
class Fnv1a64 {
 public:
  void byte(unsigned char b) {
    hash_ ^= b;
    hash_ *= 0x100000001b3ULL;
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));  // little-endian
  }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
  // Length first, so that ("ab", "c") and ("a", "bc") differ.
  void str(std::string_view s) {
    u64(s.size());
    for (const char c : s) byte(static_cast<unsigned char>(c));
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

Schedule Plan::schedule_ops() const {
  if (schedule == ScheduleKind::kCustom) {
    PS_CHECK(custom != nullptr, "a custom plan carries its actions");
    return build_custom(*custom, remat);
  }
  return build_schedule(schedule, stages, micro_batches, remat, chunks);
}

SimConfig plan_sim_config(const Plan& plan) {
  SimConfig config;
  config.stages = plan.stages;
  config.micro_batches = plan.micro_batches;
  config.schedule = plan.schedule;
  config.custom = plan.custom;
  config.chunks = plan.chunks;
  config.remat = plan.remat;
  config.stage_ranges = plan.stage_ranges();
  config.record_timeline = false;
  return config;
}

TensorSplit Plan::split() const {
  return split_of(tensor_parallel, sequence_parallel, expert_parallel, expert_tensor_parallel,
                  context_parallel, cp_comm_type);
}

std::vector<StageRange> Plan::stage_ranges() const {
  std::vector<StageRange> out;
  out.reserve(stage_plans.size());
  for (const PlanStage& s : stage_plans) out.push_back(s.layers);
  return out;
}

// The canonical serialisation: dtype name, input_bytes, tokens_per_sample, the
// layer count, then per layer its name, fwd_flops and bwd_flops (IEEE-754 bits),
// params, out_bytes and stash_bytes; integers as 8 bytes little-endian, strings
// length-prefixed. The model's name and family are labels and are left out. Layer
// graphs (some layer names its inputs) append the string "inputs" and, per layer,
// the count and names of its inputs, so a plain sequence hashes as above.
std::string model_hash(const ModelSpec& model) {
  Fnv1a64 h;
  h.str(to_string(model.dtype));
  h.i64(model.input_bytes);
  h.i64(model.tokens_per_sample);
  h.u64(model.layers.size());
  for (const LayerSpec& l : model.layers) {
    h.str(l.name);
    h.f64(l.fwd_flops);
    h.f64(l.bwd_flops);
    h.i64(l.params);
    h.i64(l.out_bytes);
    h.i64(l.stash_bytes);
  }
  const bool graph = std::any_of(model.layers.begin(), model.layers.end(),
                                 [](const LayerSpec& l) { return !l.inputs.empty(); });
  if (graph) {
    h.str("inputs");
    for (const LayerSpec& l : model.layers) {
      h.u64(l.inputs.size());
      for (const std::string& input : l.inputs) h.str(input);
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h.value()));
  return buf;
}

Plan make_plan(const Scenario& scenario, const SimResult& result, int data_parallel,
               std::string partition_method) {
  PS_CHECK(data_parallel >= 1, "data_parallel must be positive");
  PS_CHECK(static_cast<int>(result.stage_costs.size()) == result.stages * result.chunks,
           "one stage cost per stage");
  Plan p;
  p.scenario_name = scenario.name;
  p.model_name = scenario.model.name;
  p.model_hash = model_hash(scenario.model);
  p.layer_count = static_cast<int>(scenario.model.layers.size());
  for (const LayerSpec& l : scenario.model.layers) p.layer_names.push_back(l.name);
  p.model_spec = model_spec_json(scenario.model);
  p.optimizer = scenario.training.optimizer;

  p.cluster_name = scenario.cluster.name;
  p.tensor_parallel = scenario.training.tensor_parallel;
  p.rank_order = scenario.cluster.rank_order;
  p.p2p = scenario.cluster.p2p_mode(result.chunks > 1);
  p.p2p_split = scenario.cluster.p2p_split;
  p.sequence_parallel = scenario.training.sequence_parallel;
  p.expert_parallel = scenario.training.expert_parallel;
  p.expert_tensor_parallel = scenario.training.split().expert_fold() > 1 ? 1 : 0;
  // The dispatcher of the plan's exchanges: none with E = 1.
  p.moe_dispatcher =
      p.expert_parallel > 1 ? scenario.training.moe_dispatcher : MoeDispatcher::kAllToAll;
  p.context_parallel = scenario.training.context_parallel;
  p.cp_comm_type = scenario.training.cp_comm_type;
  p.zero = scenario.training.zero;
  p.devices = result.stages * data_parallel * p.tensor_parallel * p.context_parallel;
  p.memory_capacity = scenario.cluster.device.memory_bytes;

  p.stages = result.stages;
  p.chunks = result.chunks;
  p.data_parallel = data_parallel;
  p.micro_batches = result.micro_batches;
  p.micro_batch_size = result.micro_batch_size;
  p.global_batch = std::int64_t{data_parallel} * result.micro_batches * result.micro_batch_size;
  p.schedule = result.schedule;
  p.remat = result.remat;
  p.checkpoint = scenario.training.checkpoint;
  p.custom = result.custom;
  p.partition_method = std::move(partition_method);

  const Metrics& m = result.metrics;
  const std::vector<MemorySplit> splits = memory_splits(result);
  for (std::size_t s = 0; s < result.stage_costs.size(); ++s) {
    const StageCost& c = result.stage_costs[s];
    PlanStage st;
    st.layers = c.layers;
    st.device =
        placed_device(result.schedule, result.custom.get(), static_cast<int>(s), result.stages);
    st.fwd_s = simtime_to_seconds(c.forward);
    st.bwd_s = simtime_to_seconds(c.backward_time(result.split_backward()));
    st.recompute_s = result.remat != Remat::kNever ? simtime_to_seconds(c.recompute) : 0.0;
    const auto d = static_cast<std::size_t>(st.device);
    if (d < m.devices.size()) {
      st.peak_memory = m.devices[d].peak_memory;
      const MemorySplit& split = splits[d];
      // A device's peak holds at least its stages' state, so the activations,
      // the rest of it, make the four add up (plan files are read back so).
      PS_CHECK(
          split.weights + split.gradients + split.optimizer + split.activations == st.peak_memory,
          "a device's memory split adds up to its peak");
      st.memory_split = split;
    }
    p.stage_plans.push_back(st);
  }

  p.step_time_s = m.step_time_s();
  p.throughput_samples_per_s = data_parallel * m.samples_per_s;
  p.bubble_fraction = m.bubble_fraction;
  p.fits = m.fits();
  return p;
}

}  // namespace pipescope
