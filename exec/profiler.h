#pragma once
// The executor's profiler: times every kind of layer of a model (forward,
// recompute, backward, and the split backward's B and W) at the micro-batch
// sizes a plan may use, how much slower they run while every core computes,
// the optimizer step (overhead + cost per parameter) and the transport between
// stages, and returns them as a Profile (costmodels/profile.h) that the
// simulator takes as its cost model.
//
// On the CPU (the default) it measures in rounds. A round, at every size, runs
// the ops as the stages of a plan do (profile_passes.h: a forward pass, a
// forward that keeps the stashes, the backward, the backward split as the
// zero-bubble schedules run it, each layer's op timed on its thread's CPU
// clock): one thread, on a core of its own, over the whole model, as a
// one-stage plan runs it (the layer figures); then, for n = 2 up to the cores
// (at most 8), n threads at once, each on a core of its own over a stage's
// share of the layers (1/n of them, contiguous), back to back, each after an
// untimed pass that brings its layers into its caches (the concurrency
// slowdown: every op's time summed, over the one thread's). Each figure is the
// median over the kept rounds, and for the layers of one signature (a
// Transformer's blocks) the mean over them.
//
// A busy machine: each op is timed on its thread's CPU clock, which leaves out
// what other processes (or a hypervisor) took from it while it ran, and a
// round in which they took more than 5 % of the ops' wall time is not kept:
// more rounds are measured until `repeats` are clean, or three times as many
// have been (then the least disturbed half are kept). A machine whose cores
// change speed (machine_speed.h): with ProfileOptions::check_speed each round
// lies between two checks of the cores' speed, and one whose cores moved by
// more than 10 % is not kept either, whatever other work took. The profile
// says how many rounds were measured and kept, how much the worst kept one
// lost and how far its cores' speed moved (Profile::rounds).
//
// With ProfileOptions::device (a GPU) the layers run on that device, timed on
// the wall clock on the calling thread, and the transport is a copy to
// ProfileOptions::peer; the MPI backend measures its own transport and
// slowdown (measure_threads off).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/optimizer.h"
#include "costmodels/profile.h"
#include "exec/op_list_profile.h"
#include "exec/runtime.h"

namespace pipescope::exec {

class Device;  // device.h

struct ProfileOptions {
  std::vector<std::int64_t> batch_sizes{1};  // micro-batch sizes, ascending
  int repeats = 5;  // clean rounds wanted (the optimizer is timed max(3, repeats) times)
  std::uint64_t seed = 1;
  Optimizer optimizer = Optimizer::kAdam;
  // Called after each round and at the end with (done, total); total grows when
  // rounds are discarded.
  std::function<void(std::size_t, std::size_t)> progress;
  // Whether the rounds measure the cores' concurrency slowdown and finish()
  // the in-process channel; off for callers that measure their own (the MPI
  // backend: measure_mpi_machine).
  bool measure_threads = true;
  // With measure_threads and 2 or more (at most the cores): finish() also
  // measures a tensor group of this many ranks (Profile::tensor_group): its
  // all-reduce (profile_tensor_allreduce) and the optimizer step with the
  // ranks stepping at once (measure_optimizer_slowdown).
  int tensor_ranks = 0;
  // With measure_threads, a plan's C of 2 or more (at most the cores), a
  // model of one share of C at T = 1 and memory for the C shares' layers
  // (share_exchanges_unfit): finish() also measures the shares'
  // exchanges as their layers run them (time_share_exchanges at the largest
  // batch size, the median of seven passes): the ring's takes
  // (Profile::context_ring), or, when the shares trade heads, their
  // all-to-all (Profile::alltoall_group: bare, profile_group_alltoall, with
  // the latency what one took in the layers beyond its bytes over the bare
  // bandwidth).
  int context_ranks = 0;
  // With measure_threads, a plan's E of 2 or more (at most the cores), a
  // model of one expert rank of E at T = C = 1 and memory for the E ranks'
  // layers: finish() also measures the ranks' routed load as their layers
  // run it (time_expert_load at the largest batch size, the median of seven
  // passes; Profile::expert_load) and their all-to-all (Profile::alltoall_group,
  // as for the shares, less the ranks' waits for the busiest).
  // With measure_threads and either of the two at 2 or more (at most the
  // cores) at T = 1 (tensor_ranks at most 1): finish() also measures their
  // gradient sum before the optimizer step (Profile::gradient_sum,
  // profile_gradient_sum).
  int expert_ranks = 0;
  // A device backend (a GPU): the layers measured on `device`, the transport as
  // copies from it to `peer` (another stream of its GPU, or a second GPU), and
  // `devices` of them for the stages to share (the profile's cores). The
  // profile's backend is `backend`. Null: the CPU.
  std::shared_ptr<Device> device = nullptr;
  std::shared_ptr<Device> peer = nullptr;
  int devices = 1;
  std::string backend = "cuda";
  // On the host: whether each round is timed between two checks of the
  // cores' speed (reference_times, machine_speed.h) on `speed_check_cores`
  // cores (0: as many as the rounds run threads on), so that a round whose
  // cores changed speed is known (ProfileRound::speed_spread) and not kept
  // while steadier ones are (speed_checked_disturbance).
  bool check_speed = false;
  int speed_check_cores = 0;
  // A plan to profile as its devices run it (op_list_profile.h; on the host,
  // at one batch size, the plan's micro-batch's): each round also runs its
  // devices' op lists, each alone and, when each device has a core of its
  // own, all at once. Every kind of op the plan runs takes its figure from
  // them (its stashes kept between ops as a step keeps them), and the
  // concurrency slowdown of its devices is theirs. Null: the model alone.
  std::shared_ptr<const PlanStages> stages = nullptr;
};

// Throws std::invalid_argument for options the profiler does not take: its
// micro-batch sizes, repeats, a plan off the host or at several sizes, or a
// micro-batch of more tokens than the executor takes.
void check_profile_options(const ModelSpec& spec, const ProfileOptions& o);

// Throws std::invalid_argument unless the plan's stages cut the model's
// `layers` into contiguous ranges in order and its op lists name them.
void check_plan_stages(const PlanStages& plan, std::size_t layers);

// Throws std::invalid_argument for models the executor cannot build
// (build_layers) and for bad options.
Profile profile_model(const ModelSpec& spec, const ProfileOptions& options);

// profile_model in parts, for callers that measure the rounds themselves
// (`compare` profiles before each round's steps, so that a machine whose speed
// drifts affects prediction and measurement alike).
class ModelProfiler {
 public:
  // Builds the model and runs one untimed warm-up pass per batch size; throws as
  // profile_model does. options.repeats and progress are not used here. On
  // the host it measures the cost of the thread CPU clock first.
  ModelProfiler(const ModelSpec& spec, const ProfileOptions& options);
  ~ModelProfiler();
  ModelProfiler(const ModelProfiler&) = delete;
  ModelProfiler& operator=(const ModelProfiler&) = delete;

  // One round at every batch size (above). Returns the share of the round's
  // wall time that other work took from its ops, in [0, 1].
  double measure_pass();
  // Rounds measured so far, and those in which other work took at most 5 % of
  // the ops' wall time.
  int rounds() const;
  int clean_rounds() const;
  // Whether to measure another round for `wanted` clean ones: fewer are clean
  // and fewer than kMaxRoundsPerWanted x wanted have been measured.
  bool wants_round(int wanted) const;
  // With ProfileOptions::check_speed on the host, the checks of the cores'
  // speed so far (each a reference_times()): one before the first round, then
  // one after each round. Empty otherwise.
  const std::vector<std::vector<double>>& speed_checks() const;
  // The medians of the kept rounds (the clean ones; without any, the least
  // disturbed half), then the optimizer and the transport. Throws
  // std::logic_error before the first measure_pass.
  Profile finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A round in which other work (other processes, a hypervisor's steal) took
// more than this share of the ops' wall time is not kept while clean ones
// exist. The ops' CPU times leave out the time taken from them, but not what
// the other work did meanwhile to the caches and the memory bus they share.
constexpr double kDiscardOtherWorkAbove = 0.05;

// Rounds a profile measures at most, for each one wanted, on a busy machine.
constexpr int kMaxRoundsPerWanted = 3;

// How disturbed a round was, for kept_rounds: the share of its wall time other
// work took, or 1 (wholly) when a slowdown it measured is implausible
// (plausible_slowdown). Cores that share their execution units (SMT siblings,
// a hypervisor's vCPUs) slow one thread alone by what runs beside it, but not
// several that take them all: a round measured so can read 0.3.
double round_disturbance(double other_work, const std::vector<double>& slowdowns);

// The rounds kept, given each round's share of wall time taken by other work:
// those at most kDiscardOtherWorkAbove, or when none is, the least disturbed
// half (rounded up; the earlier of equals). Indices, ascending.
std::vector<std::size_t> kept_rounds(const std::vector<double>& other_work);

// Measures rounds while profiler.wants_round(wanted), calling after_each after
// each.
void measure_rounds(ModelProfiler& profiler, int wanted, const std::function<void()>& after_each);

// The wall time, in seconds, of one pass over `model` on `mb` as the profiler
// runs it (forward, recompute, backward, split backward), on the calling
// thread. Under context parallelism `mb` is the last of `shares` (last_share).
double model_pass_s(LayerList& model, const MicroBatch& mb, int shares, std::uint64_t seed);

// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model_name();

// The micro-batch sizes a plan of `global_batch` samples may use: every divisor
// of it (global_batch / M for each M that divides it), at most `limit` of them,
// the largest kept.
std::vector<std::int64_t> plan_batch_sizes(std::int64_t global_batch, std::size_t limit);

}  // namespace pipescope::exec
