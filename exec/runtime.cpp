#include "exec/runtime.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "exec/compute/device_layers.h"
#include "exec/expert_shard.h"
#include "exec/runtime_core.h"
#include "exec/step_run.h"
#include "exec/transport.h"

namespace pipescope::exec {

StageError::StageError(int stage, Op op, const std::string& what)
    : std::runtime_error(what), stage_(stage), op_(op) {}

std::string op_name(const Op& op) {
  const std::string letter(1, op_letter(op.kind));
  if (op.kind == OpKind::kOptimizer) return letter + "(" + std::to_string(op.stage) + ")";
  return letter + "(" + std::to_string(op.stage) + "," + std::to_string(op.micro_batch) + ")";
}

std::string RuntimeCore::rank_name(int r) const {
  const int T = tensor_parallel();
  std::string out;
  const auto add = [&](const char* what, int index) {
    out += (out.empty() ? " (" : ", ") + std::string(what) + " " + std::to_string(index);
  };
  if (expert_parallel > 1) add("expert rank", r / (context_parallel * T));
  if (context_parallel > 1) add("share", r / T % context_parallel);
  if (T > 1) add("tensor rank", r % T);
  return out.empty() ? out : out + ")";
}

namespace {

void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Every op of each device's list is of a stage that device runs, and of a
// micro-batch the schedule has. Only the shape of the lists is checked: a list
// that never completes (a missing F, say) is caught by the watchdog, so tests
// can exercise it.
void check_op_lists(const Schedule& sched) {
  for (int d = 0; d < sched.devices(); ++d) {
    for (const Op& op : sched.device_ops[static_cast<std::size_t>(d)]) {
      require(op.stage >= 0 && op.stage < sched.stages, "device " + std::to_string(d) + " lists " +
                                                            op_name(op) +
                                                            ", whose stage is out of range");
      require(op.kind == OpKind::kOptimizer ||
                  (op.micro_batch >= 0 && op.micro_batch < sched.micro_batches),
              "device " + std::to_string(d) + " lists " + op_name(op) +
                  ", whose micro-batch is out of range");
      require(sched.stage_device[static_cast<std::size_t>(op.stage)] == d,
              "device " + std::to_string(d) + " lists " + op_name(op) + " of stage " +
                  std::to_string(op.stage) + ", which runs on another device");
    }
  }
}

// Each stage's device (stage_device: null on the host); errors name the stage.
std::vector<Device*> stage_devices(const std::vector<LayerList>& stages) {
  std::vector<Device*> devices;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    try {
      devices.push_back(stage_device(stages[s]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("stage " + std::to_string(s) + ": " + e.what());
    }
  }
  return devices;
}

std::vector<std::vector<LayerList>> one_rank(std::vector<LayerList> stages) {
  std::vector<std::vector<LayerList>> ranks;
  ranks.push_back(std::move(stages));
  return ranks;
}

// The tensor ranks are threads of this process sharing each layer's group
// (exec/compute/tensor_group.h), or processes a transport links: host layers,
// and in-process channels or a linking transport only.
void check_tensor_parallel(const RuntimeCore& core, bool linked) {
  const std::string what =
      (core.expert_parallel > 1 ? "expert parallelism (E=" + std::to_string(core.expert_parallel)
       : core.context_parallel > 1
           ? "context parallelism (C=" + std::to_string(core.context_parallel)
           : "tensor parallelism (T=" + std::to_string(core.tensor_parallel())) +
      (linked ? ") runs its ranks as processes the transport links, on the host"
              : ") runs its ranks as threads of one process on the host");
  for (std::size_t s = 0; s < core.devices.size(); ++s) {
    require(core.devices[s] == nullptr,
            what + ", and stage " + std::to_string(s) + " computes on a device");
  }
  require(!core.options.transport || linked,
          what + ", with in-process channels, not another transport");
}

void check_micro_batches(const std::vector<MicroBatch>& micro_batches, const Schedule& schedule,
                         int context_parallel, int expert_parallel) {
  require(static_cast<int>(micro_batches.size()) == schedule.micro_batches,
          "the schedule has " + std::to_string(schedule.micro_batches) + " micro-batches but " +
              std::to_string(micro_batches.size()) + " were given");
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    const MicroBatch& mb = micro_batches[m];
    const std::int64_t tokens = std::int64_t{mb.batch} * mb.seq;
    require(mb.batch >= 1 && mb.seq >= 1 && mb.input.rows() == tokens &&
                static_cast<std::int64_t>(mb.targets.size()) == tokens,
            "micro-batch " + std::to_string(m) +
                " needs batch, seq >= 1 and batch*seq input rows and targets");
    require(mb.seq % (2 * context_parallel) == 0 || context_parallel == 1,
            "micro-batch " + std::to_string(m) + "'s sequences of " + std::to_string(mb.seq) +
                " tokens do not cut into 2C = " + std::to_string(2 * context_parallel) + " chunks");
    require(mb.batch % expert_parallel == 0,
            "micro-batch " + std::to_string(m) + "'s " + std::to_string(mb.batch) +
                " samples do not split over E = " + std::to_string(expert_parallel) +
                " expert ranks");
  }
}

}  // namespace

PipelineRuntime::PipelineRuntime(std::vector<LayerList> stages, Schedule schedule,
                                 RuntimeOptions options)
    : PipelineRuntime(one_rank(std::move(stages)), std::move(schedule), std::move(options)) {}

PipelineRuntime::PipelineRuntime(std::vector<std::vector<LayerList>> ranks, Schedule schedule,
                                 RuntimeOptions options)
    : PipelineRuntime(std::move(ranks), std::move(schedule), std::move(options), 1) {}

PipelineRuntime::PipelineRuntime(std::vector<std::vector<LayerList>> ranks, Schedule schedule,
                                 RuntimeOptions options, int context_parallel, int expert_parallel)
    : core_(std::make_shared<RuntimeCore>()) {
  require(!ranks.empty(), "the pipeline needs at least one tensor rank");
  require(context_parallel >= 1 && expert_parallel >= 1 &&
              ranks.size() % static_cast<std::size_t>(context_parallel * expert_parallel) == 0,
          "E=" + std::to_string(expert_parallel) + " x C=" + std::to_string(context_parallel) +
              " shares do not divide the " + std::to_string(ranks.size()) + " ranks");
  core_->ranks = std::move(ranks);
  core_->context_parallel = context_parallel;
  core_->expert_parallel = expert_parallel;
  core_->schedule = std::move(schedule);
  core_->options = std::move(options);
  const Schedule& sched = core_->schedule;
  const int K = sched.stages;
  const int M = sched.micro_batches;
  const int T = core_->tensor_parallel();
  const int ranks_per_device = core_->group_ranks();
  require(K >= 1 && M >= 1, "the schedule needs K >= 1 and M >= 1");
  for (const std::vector<LayerList>& layers : core_->ranks) {
    require(static_cast<int>(layers.size()) == K,
            "the schedule has " + std::to_string(K) + " stages but " +
                std::to_string(layers.size()) + " layer lists were given" +
                (ranks_per_device > 1 ? " for a rank" : ""));
  }
  require(static_cast<int>(sched.stage_device.size()) == K,
          "the schedule's stage_device has the wrong size");
  require(core_->options.watchdog.count() > 0, "the watchdog must be positive");
  for (int s = 0; s < K; ++s) {
    const int dev = sched.stage_device[static_cast<std::size_t>(s)];
    require(dev >= 0 && dev < sched.devices(),
            "stage " + std::to_string(s) + " runs on a device the schedule does not have");
    for (const std::vector<LayerList>& layers : core_->ranks) {
      require(!layers[static_cast<std::size_t>(s)].empty(),
              "stage " + std::to_string(s) + " has no layers");
    }
  }
  check_op_lists(sched);
  core_->optimizers.assign(static_cast<std::size_t>(ranks_per_device),
                           std::vector<ParamOptimizer>(static_cast<std::size_t>(K),
                                                       ParamOptimizer(core_->options.optimizer)));
  // A transport that runs each share or expert rank as a process of its own
  // links them (exec/transport.h); the gradients are summed over the link
  // then. (Tensor ranks exchange in shared memory: threads only.)
  const bool both = context_parallel > 1 && expert_parallel > 1;
  const std::shared_ptr<GroupLink> link =
      core_->options.transport && ranks_per_device > 1 && T == 1
          ? core_->options.transport->link_group(sched.devices(), ranks_per_device)
          : nullptr;
  if (core_->shares() > 1) {
    core_->gradient_groups.resize(static_cast<std::size_t>(T));
    for (auto& stages : core_->gradient_groups) {
      for (int s = 0; s < K; ++s) {
        stages.push_back(link ? std::make_shared<TensorGroup>(link)
                              : std::make_shared<TensorGroup>(core_->shares()));
      }
    }
  }
  if (both) {
    // As processes, this one's expert rank's shares (rank e C + c; the
    // entry of every expert rank: only its own runs here).
    const std::shared_ptr<GroupLink> shares =
        sub_links(link, expert_parallel, context_parallel).shares;
    core_->expert_gradient_groups.resize(static_cast<std::size_t>(expert_parallel));
    for (auto& stages : core_->expert_gradient_groups) {
      for (int s = 0; s < K; ++s) {
        stages.push_back(shares ? std::make_shared<TensorGroup>(shares)
                                : std::make_shared<TensorGroup>(context_parallel));
      }
    }
  }
  core_->devices = stage_devices(core_->ranks[0]);
  if (ranks_per_device > 1) check_tensor_parallel(*core_, link != nullptr);
}

PipelineRuntime::~PipelineRuntime() = default;

const std::vector<LayerList>& PipelineRuntime::stages(int rank) const {
  return core_->ranks.at(static_cast<std::size_t>(rank));
}

std::vector<LayerList>& PipelineRuntime::stages(int rank) {
  return core_->ranks.at(static_cast<std::size_t>(rank));
}

int PipelineRuntime::tensor_parallel() const {
  return core_->tensor_parallel();
}

int PipelineRuntime::context_parallel() const {
  return core_->context_parallel;
}

int PipelineRuntime::expert_parallel() const {
  return core_->expert_parallel;
}

StepResult PipelineRuntime::step(const std::vector<MicroBatch>& micro_batches) {
  if (!abandoned_.empty()) {
    throw std::logic_error("the pipeline cannot step again: an earlier step left " + abandoned_ +
                           " running");
  }
  check_micro_batches(micro_batches, core_->schedule, core_->context_parallel,
                      core_->expert_parallel);
  std::shared_ptr<Transport> transport = core_->options.transport;
  if (!transport) transport = std::make_shared<InProcessTransport>();
  const auto run = std::make_shared<StepRun>(core_, micro_batches, std::move(transport));
  try {
    return run->run();
  } catch (...) {
    if (run->abandoned()) {
      // A worker still runs an op on these layers: leave them to it.
      abandoned_ = run->abandoned_ops();
      throw;
    }
    // A failed step leaves partial gradient sums, and blocks in the rings
    // that nobody took; drop them so the next step starts clean. (Stages
    // whose optimizer op already ran keep their update.)
    for (std::vector<LayerList>& stages : core_->ranks) {
      for (LayerList& ls : stages) {
        for (auto& layer : ls) {
          for (Param* p : layer->params()) zero_grad(*p);
          layer->reset_exchanges();
        }
      }
    }
    throw;
  }
}

}  // namespace pipescope::exec
