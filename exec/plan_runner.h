#pragma once
// Running a plan for real on the CPU: the plan's model rebuilt from its family
// parameters, cut as the plan says, run with the plan's schedule and remat on
// synthetic data, one thread per stage. `pipescope run` and `compare` share it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/model.h"
#include "exec/runtime.h"
#include "sim/plan/plan.h"

namespace pipescope::exec {

class Device;  // device.h

// Weights, gradients and two optimizer slots in fp32 (16 bytes a parameter) up
// to this size; beyond it a run would swap or be killed rather than teach
// anything.
inline constexpr double kMaxExecutorBytes = 4.0 * 1024 * 1024 * 1024;

// Throws std::invalid_argument, starting with `where`, when the model's weights,
// gradients and optimizer state exceed kMaxExecutorBytes.
void check_executor_size(const ModelSpec& model, const std::string& where);

// Throws std::invalid_argument, starting with `where`, when profiling a layer
// of `model` at micro-batch `batch` needs more than this machine has
// available: its fp32 weights, gradients and optimizer state and the stash it
// keeps at that batch, a floor of what the measurement allocates. Nothing is
// checked where the available memory cannot be read.
void check_profile_fits_host(const ModelSpec& model, std::int64_t batch, const std::string& where);

// The plan's model: under tensor parallelism (T > 1) one tensor rank's share
// of it, as the plan's layers are. Throws std::invalid_argument naming
// `plan_file` and the field when the plan carries no family parameters (an
// explicit layer list), the model exceeds kMaxExecutorBytes, T > 1 on a model
// that is not a transformer, sequence parallelism or selective remat;
// ScenarioError when the spec is malformed.
ModelSpec plan_model(const Plan& plan, const std::string& plan_file);

// Throws std::invalid_argument naming `plan_file` and the split when
// `backend` does not run the plan's splits: tensor ranks (T > 1) on the cpu
// backend alone (a thread per rank), shares of each sequence (C > 1) and
// expert ranks (E > 1), or both, on the cpu and mpi backends.
void check_tensor_parallel_backend(const Plan& plan, const std::string& plan_file,
                                   const std::string& backend);
// `run -T N` and `compare -T N`: the plan carries its T (made with `plan -T`);
// throws std::invalid_argument naming both when `requested` is given and
// differs.
void check_requested_tensor_parallel(const Plan& plan, const std::string& plan_file,
                                     std::optional<int> requested);

// What one pipeline replica of the plan holds at its peak in the executor's
// fp32, by PipeScope's own memory model (the simulated memory curve of each
// device).
struct HostMemoryNeed {
  Bytes state = 0;        // weights, gradients and optimizer state
  Bytes activations = 0;  // what the schedule keeps at once, beyond the state
  Bytes total() const { return state + activations; }
};
// One entry per device of the replica.
std::vector<HostMemoryNeed> plan_device_memory(const Plan& plan);
// Summed over the replica's devices, which on the CPU backend all live in one
// process.
HostMemoryNeed plan_host_memory(const Plan& plan);

// A memory some of the plan's devices share: this machine's (every device on
// the CPU backend), a node's (its ranks under MPI), a GPU's (the devices placed
// on it).
struct MemoryPool {
  std::string name;     // "this machine", "this node", "GPU 1"
  Bytes available = 0;  // what it can still take
  std::string source;   // where that figure comes from
  std::vector<int> devices;
};

// Throws std::invalid_argument naming plan_file and scenario, the pool and both
// figures, for the first pool that cannot hold what its devices need
// (plan_device_memory), before anything is allocated.
void check_plan_fits(const Plan& plan, const std::string& plan_file,
                     const std::vector<MemoryPool>& pools);
// The pools of a run on `gpus` GPUs with device d on GPU d mod gpus, each with
// what `free_bytes(gpu)` says is free; a GPU it cannot tell about is left out.
std::vector<MemoryPool> gpu_memory_pools(
    int devices, int gpus, const std::function<std::optional<Bytes>(int)>& free_bytes);
// The CPU backend's check: every device in this machine's memory
// (host_memory_available); nothing is checked when that cannot be read.
void check_plan_fits_host(const Plan& plan, const std::string& plan_file);

struct PlanRunOptions {
  int steps = 20;
  double learning_rate = 1e-2;
  std::uint64_t seed = 1;
  std::chrono::milliseconds watchdog{30000};
  // Called after each step with (steps done, steps) and that step's result.
  std::function<void(int, int, const StepResult&)> on_step;
  // RuntimeOptions::before_op and ::transport (null: threads and in-process
  // channels).
  std::function<void(int device, const Op& op)> before_op;
  std::shared_ptr<Transport> transport;
  // The device each model stage computes on, given the stage and its pipeline
  // device (a GPU backend); null: host layers, the CPU backend.
  std::function<std::shared_ptr<Device>(int stage, int device)> stage_device;
};

// One pipeline replica of the plan (its global batch / D samples a step), every
// step's result in order; under tensor parallelism with its T ranks a stage
// (`model` is then plan_model's: one rank's share). Throws
// std::invalid_argument for models the executor cannot build, for T > 1 with
// a device or a transport (the cpu backend alone runs it), and StageError when
// a stage fails.
std::vector<StepResult> run_plan(const Plan& plan, const ModelSpec& model,
                                 const PlanRunOptions& options);

// 1 - compute time / (devices x step time).
double measured_bubble(const StepResult& step, int devices);

// The step whose time is the median of steps [warmup, n) (all of them when
// warmup >= n). Requires n >= 1.
std::size_t median_step(const std::vector<StepResult>& steps, int warmup);

// What median_step(steps, warmup) of `steps` steps measured, for reports:
// "median of steps 2-20", "step 2", or, when the warm-up would leave no step,
// "step 1, warm-up included (a median needs --steps 3 or more)".
std::string measured_steps_label(int steps, int warmup);

}  // namespace pipescope::exec
