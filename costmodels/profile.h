#pragma once
// A profile: what one machine and backend measured for one model's layers
// (forward, backward and recompute per micro-batch size), its optimizer step and
// the transport between devices (docs/file-formats.md, profiles). ProfiledCostModel
// answers the simulator from it instead of from a roofline.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "costmodels/cost_model.h"
#include "costmodels/model.h"
#include "costmodels/units.h"

namespace pipescope {

// One kind of layer, measured at several micro-batch sizes. Layers with the same
// signature (the blocks of a Transformer) share one entry.
struct LayerProfile {
  std::string signature;                  // layer_signature() of the layers it stands for
  std::string example;                    // the name of the layer that was measured
  std::vector<std::int64_t> batch_sizes;  // ascending, distinct, >= 1
  std::vector<SimTime> forward;           // ns, one entry per batch size
  std::vector<SimTime> backward;
  std::vector<SimTime> recompute;
  // A split backward's W (its weight gradients): at most the backward in
  // profiles without `input`; empty in profiles written before it was
  // measured.
  std::vector<SimTime> weight;
  // A split backward's B (the input gradients), timed as a stage runs it:
  // every layer's B before any W. It and W together may exceed backward (the
  // deferred W reads operands the caches no longer hold). Empty in profiles
  // written before it was measured: backward - weight.
  std::vector<SimTime> input;
};

// The machine's achievable fp32 GEMM rate on the executor's own GEMM path, one
// thread (exec/compute/gemm_rate.h), and the product (m x k) . (k x n) that reached it.
struct MachineGemm {
  double flop_s = 0.0;  // FLOP/s; 0: not measured
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
};

// A tensor group's in-process all-reduce (exec/compute/tensor_group.h), measured with
// `ranks` threads reducing at once: one all-reduce of B bytes takes
// latency_s + B / bandwidth. ranks 0: not measured.
struct TensorGroupFigures {
  int ranks = 0;
  double latency_s = 0.0;
  double bandwidth = 0.0;  // bytes/s
  // How much slower the optimizer step runs while `ranks` threads each step
  // their own share at once (they share the memory bus); at least 1.
  double optimizer_slowdown = 1.0;
};

// The gradient sum of a stage's `ranks` threads that hold the same
// parameters (the context shares, or the expert ranks' shared layers) before
// the optimizer step, as the runtime runs it (exec/gradient_sum.h: laid end
// to end, all-reduced, laid back), measured with `ranks` threads summing at
// once: one sum of B bytes a rank takes latency_s + B / bandwidth. A CPU
// simulation whose shares or expert ranks, one machine's group at T = 1,
// are that many times their gradient reduction by it
// (DataParallel::measured_sum). ranks 0: not measured.
struct GradientSumFigures {
  int ranks = 0;
  double latency_s = 0.0;
  double bandwidth = 0.0;  // bytes/s
};

// A group's all-to-all (TensorGroup::all_to_all), measured with `ranks`
// threads of one process, or under the MPI backend `ranks` processes,
// exchanging at once: one all-to-all of B bytes a rank (its
// parts for every rank, its own included) takes latency_s + B / bandwidth,
// waits for the others included, the latency as the shares' layers ran it
// at `micro_batch` sequences (exec/share_exchange_profile.h; the expert
// ranks' less their waits for the busiest rank, which are the router's
// imbalance, ExpertLoadFigures). The context shares' all-to-alls of heads,
// or the expert ranks', at T = 1 and that micro-batch size are timed by it
// on the CPU. ranks 0: not measured.
struct GroupAllToAllFigures {
  // Whose: the expert ranks' (true) or the context shares' (false); it
  // prices only that group's all-to-alls (unless within_ops).
  bool experts = false;
  int ranks = 0;
  double latency_s = 0.0;
  double bandwidth = 0.0;        // bytes/s
  std::int64_t micro_batch = 0;  // sequences the shares' layers ran on
  // Held by the ops' measured times (a time-sliced group's slowdown, which
  // compare's prediction takes): whichever group's all-to-alls these
  // figures then price, of whatever size, at this micro-batch. Never read
  // from or written to a profile file.
  bool within_ops = false;
};

// The context shares' ring as their layers ran it on the CPU, measured with
// `ranks` threads (or MPI processes) at `micro_batch` sequences (exec/share_exchange_profile.h):
// a take's mean time in a forward (the keys and values) and in a backward
// (those, their gradients summed so far, and the share's own coming home),
// its waits for the other shares included. A simulation at T = 1 and that
// micro-batch size takes the ring's exchanges as these takes. ranks 0: not
// measured.
struct ContextRingFigures {
  int ranks = 0;
  double forward_take_s = 0.0;
  double backward_take_s = 0.0;
  std::int64_t micro_batch = 0;  // sequences the shares' layers ran on
};

// How much slower a stage's C context shares (or E expert ranks) compute
// while all of them run their layers at once, as their passes ran them on
// the CPU (exec/share_exchange_profile.h, exec/expert_load_profile.h:
// `ranks` threads or MPI processes, each its own copy of the share's or
// rank's layers): the last share's forward less its exchanges (the expert
// ranks' mean, a rank of the mean load, less their all-to-alls), the median
// over the passes, over the profile's times of those layers' forwards alone
// (that keep their stashes), and its backward likewise, at `micro_batch`
// sequences. Each thread runs every layer of its stage, where the
// concurrency slowdown of as many cores has each thread run a part of them
// (as pipeline stages do), which leaves the caches less contended. A CPU
// simulation of that many shares (expert ranks) at T = 1 and that
// micro-batch size stretches their forwards (and recomputes) and backwards
// by them (compare's). ranks 0: not measured.
struct GroupSlowdownFigures {
  int ranks = 0;
  double forward = 1.0;
  double backward = 1.0;
  std::int64_t micro_batch = 0;
  // The group is E expert ranks (exec/expert_load_profile.h: each rank's
  // passes less their all-to-alls, the ranks' mean, over the layers of a
  // rank of the mean load alone), not C context shares.
  bool experts = false;
  // Measured from a plan's op lists, every micro-batch's stash in flight as
  // in its step (exec/group_op_lists.h, paired_slowdown), not from passes of
  // one micro-batch.
  bool op_lists = false;
  // Measured where a device's ranks outnumbered the cores: on the wall
  // clock, their exchanges in their ops' times (exec/group_op_lists.h,
  // GroupPlanRuns::crowded; threads one device's ranks at a time, MPI
  // processes every device's at once, exec/mpi/mpi_group_profile.h). The OS time-slices
  // such a group, and a rank waits in its exchanges for partners that have
  // no core: the figures hold the slicing and the exchanges both, and a
  // simulation that takes them prices the group's ring and all-to-alls at
  // nothing beside them.
  bool time_sliced = false;
  // The C shares each of the E expert ranks' samples is cut into, for a
  // group of E x C ranks (`experts` true, ranks E x C); 1 otherwise.
  int shares = 1;
};

// The expert ranks' routed load as their layers ran it on the CPU, measured
// with `ranks` threads (or MPI processes) at `micro_batch` sequences a rank
// (exec/expert_load_profile.h): the router sends more of the tokens to some
// ranks' experts than to others', and at each mixture's all-to-all every rank
// waits for the busiest. `imbalance` is the busiest rank's received rows over
// the ranks' mean, the mean over the mixtures' forwards; forward_s and
// backward_s what the busiest rank's experts took beyond a rank of the mean
// load, in a mixture's forward and in its backward (the mean over the
// mixtures). A simulation of E = ranks (T = C = 1) adds them, in proportion
// to its micro-batch size over `micro_batch`, to its mixtures' ops, whose
// profiled times are a balanced rank's (ProfiledCostModel). ranks 0: not
// measured.
struct ExpertLoadFigures {
  int ranks = 0;
  double imbalance = 1.0;
  double forward_s = 0.0;
  double backward_s = 0.0;
  std::int64_t micro_batch = 0;
  // The figures at `batch` sequences a rank: forward_s and backward_s in
  // proportion to batch over micro_batch (the busiest rank's rows beyond
  // the mean grow with the tokens routed), micro_batch then `batch`. As
  // they are without a measured micro_batch.
  ExpertLoadFigures at(std::int64_t batch) const;
};

// How a CPU profile timed its layers (exec/profiler.h): in rounds, each op on
// its thread's CPU clock, a round discarded when other work (other processes,
// a hypervisor's steal) took more than `discard_above` of its wall time. Absent
// (rounds 0) from GPU profiles and from profiles written before it was
// recorded.
struct ProfileRounds {
  int measured = 0;            // rounds timed
  int kept = 0;                // rounds the figures are the medians of
  double discard_above = 0.0;  // a round was discarded above this share of other work
  double other_work = 0.0;     // the largest share of wall time other work took in a kept round
  bool slowdown_of_stages = false;  // concurrency_slowdown measured as stages run (below)
  // The most the cores' speed moved over a kept round (the slowest of a
  // core's timings of a fixed piece of work before and after the round over
  // its fastest, minus one); -1: not checked.
  double speed_spread = -1.0;
};

// The concurrency slowdowns a profile may hold: a stage's share of the layers
// can run faster than the whole model on one core (it fits the caches), but
// not twice as fast; a figure outside these bounds measured other programs.
inline constexpr double kMinConcurrencySlowdown = 0.5;
inline constexpr double kMaxConcurrencySlowdown = 100.0;
inline bool plausible_slowdown(double f) {
  return f >= kMinConcurrencySlowdown && f <= kMaxConcurrencySlowdown;
}

struct Profile {
  static constexpr int kVersion = 1;

  std::string backend = "cpu";
  std::string machine;     // e.g. the CPU's model name
  int cores = 1;           // hardware threads the machine offers
  std::string model_name;  // the model it was measured on (a label)
  std::vector<LayerProfile> layers;
  // Optimizer step: overhead + ns_per_param * params.
  std::string optimizer;  // the optimizer it was timed with
  SimTime optimizer_overhead = 0;
  double optimizer_ns_per_param = 0.0;
  // Transport between two devices: latency + bytes / bandwidth.
  double transport_latency_s = 0.0;
  double transport_bandwidth = 0.0;  // bytes/s
  // How much slower the model's ops run while n cores run them at once, [n - 1]
  // for n = 1 .. cores ([0] is 1): shared caches and memory bandwidth. With
  // rounds.slowdown_of_stages, every kind of op's time with n threads each
  // running a stage's share (1/n) of the layers over its time with one thread
  // running them all, as a one-stage plan does; it may be below 1 when a
  // stage's share fits the caches that the whole model does not.
  std::vector<double> concurrency_slowdown{1.0};
  // Measured for the CPU backends; absent from GPU profiles and from profiles
  // written before it was measured.
  MachineGemm gemm;
  // Measured for the CPU when `compare` profiles a tensor-parallel plan;
  // absent otherwise.
  TensorGroupFigures tensor_group;
  // Measured on the cpu backend (T = 1, C or E at most the cores) or the
  // mpi backend (at most the job's processes) when `compare` profiles a plan
  // of context shares or expert ranks, or `profile` such a scenario; absent
  // otherwise.
  GradientSumFigures gradient_sum;
  // Measured on the cpu backend (T = 1, C at most the cores) when `compare`
  // profiles a plan whose context shares trade heads (training.cp_comm_type
  // a2a), or `profile` such a scenario; absent otherwise.
  GroupAllToAllFigures alltoall_group;
  // Measured on the cpu backend (T = 1, C at most the cores) when `compare`
  // profiles a plan whose context shares pass keys and values round the
  // ring, or `profile` such a scenario; absent otherwise.
  ContextRingFigures context_ring;
  // Measured with context_ring or the shares' alltoall_group; absent
  // otherwise.
  GroupSlowdownFigures group_slowdown;
  // Measured on the cpu backend (T = C = 1, E at most the cores) when
  // `compare` profiles a plan of expert ranks, or `profile` such a scenario;
  // absent otherwise.
  ExpertLoadFigures expert_load;
  // How the layers were timed; rounds 0: not recorded.
  ProfileRounds rounds;

  // The entry for `layer`, or null.
  const LayerProfile* find(const LayerSpec& layer) const;
  // Whether the simulator leaves a split backward's B and W out of the
  // concurrency stretch: every layer's B and W timed as a stage runs them
  // (input and weight both measured), so with cold caches, while the slowdown
  // was measured on whole passes of one thread per core, which did not show
  // what it does to them. False when rounds.slowdown_of_stages: the slowdown
  // was then measured on every kind of op, B and W included, as the stages
  // run them, and applies to B and W as to the rest.
  bool split_unstretched() const;
  // The FLOP/s a CPU plan's MFU is measured against (per device): the GEMM
  // rate the profile measured, or where an op of `model` is priced faster
  // than that (a rate measured while other work held the core, or FLOPs the
  // cost model counts and the executor skips) the fastest op's rate at any
  // micro-batch size the interpolation prices (the measured ones, 1, and the
  // limit beyond the last), divided by the least concurrency slowdown when it
  // is below 1. No op the profile prices then does its FLOPs faster than this
  // rate, so a step's model FLOPs (forward and backward of every layer) over
  // its devices' time at it is at most 1. Without a GEMM rate (profiles
  // written before it was measured), the fastest op's rate. 0 when the
  // profile covers none of the model's layers.
  double mfu_peak_flop_s(const ModelSpec& model) const;
  // The routed load a simulation of E expert ranks at T tensor and C context
  // ways takes from the profile (expert_load): the load's own E at T = C = 1,
  // where the profile measured it (at a micro-batch of at least 1); null
  // otherwise.
  const ExpertLoadFigures* routed_load(int E, int T, int C) const;
};

// What makes two layers cost the same: the name without its trailing index
// ("block7" -> "block") and every per-sample figure, e.g.
// "block|fwd=1.2e+06|bwd=2.4e+06|params=49920|out=8192|stash=40960".
std::string layer_signature(const LayerSpec& layer);

// A measured time at `batch`: piecewise linear between measured sizes, extended
// along the first or last segment outside them (proportional to the batch when
// only one size was measured), never below 1 ns.
SimTime interpolate_time(const std::vector<std::int64_t>& sizes, const std::vector<SimTime>& times,
                         std::int64_t batch);
// The same in double ns, for bounds that must not overflow SimTime.
double interpolate_ns(const std::vector<std::int64_t>& sizes, const std::vector<SimTime>& times,
                      double batch);

// Throws std::invalid_argument naming the first layer of `model` the profile did
// not measure.
void check_profile_covers(const Profile& profile, const ModelSpec& model);

class ProfiledCostModel final : public CostModel {
 public:
  // The profile must cover every layer the model asks about (check_profile_covers);
  // a layer it lacks is an internal error. `load`: the routed load the expert
  // ranks run under (Profile::routed_load, pointing into `profile`), or null.
  // Every rank waits for the busiest at each mixture's all-to-all, so a
  // mixture layer's ops (ep_alltoalls > 0), timed on a rank of the mean load,
  // take what the busiest rank's experts took beyond it, in proportion to
  // the micro-batch size (the busiest rank's rows beyond the mean grow with
  // the tokens routed; at small sizes the router's imbalance may be larger
  // than at the one measured): the forward (and a recompute) the extra forward, the
  // backward the extra backward, a split backward's B and W half of it each
  // (the experts' input and weight gradients are products of one size; W,
  // deferred, runs outside the all-to-all on the busiest rank alone, which
  // this may overstate for the zero-bubble schedules).
  explicit ProfiledCostModel(std::shared_ptr<const Profile> profile,
                             const ExpertLoadFigures* load = nullptr);
  std::string_view name() const override { return "profiled"; }
  std::string_view description() const override { return description_; }
  SimTime forward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime backward(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime recompute(const LayerSpec& layer, std::int64_t batch) const override;
  // The recompute's figure: the profiler times R as a forward that keeps every
  // layer's stash, which is what a forward without remat does.
  SimTime forward_keeping_stash(const LayerSpec& layer, std::int64_t batch) const override {
    return recompute(layer, batch);
  }
  // Measured when the profile has it, else CostModel's half of the backward.
  SimTime weight_grad(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime input_grad(const LayerSpec& layer, std::int64_t batch) const override;
  // The attention core's share of the measured recompute, without the
  // experts' load: the core waits for no expert.
  SimTime core_recompute(const LayerSpec& layer, std::int64_t batch) const override;
  SimTime optimizer_step(std::int64_t params) const override;
  const Profile& profile() const { return *profile_; }

 private:
  const LayerProfile& entry(const LayerSpec& layer) const;
  // The busiest rank's extra time in `layer`'s forward (backward) at
  // `batch`: 0 unless a load applies to it.
  SimTime load_forward(const LayerSpec& layer, std::int64_t batch) const;
  SimTime load_backward(const LayerSpec& layer, std::int64_t batch) const;
  std::shared_ptr<const Profile> profile_;
  const ExpertLoadFigures* load_ = nullptr;
  std::string description_;
};

}  // namespace pipescope
