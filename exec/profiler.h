#pragma once
// The executor's profiler: times every kind of layer of a model (forward,
// recompute, backward, and the weight-gradient half W of a split backward) at the
// micro-batch sizes a plan may use, the optimizer step (overhead + cost per
// parameter) and the transport between stages, and returns them as a Profile
// (costmodels/profile.h) that the simulator takes as its cost model.
//
// The whole model runs as one stage would, on synthetic data: a forward pass, a
// second forward that keeps the stashes (a recompute), the backward pass, then
// the backward again split as zero-bubble schedules run it, every layer's op
// timed on its own with the finiteness check the runtime makes. After one
// warm-up pass, `repeats` passes are timed (the optimizer max(3, repeats)
// times); each figure is, for the layers of one signature (a Transformer's
// blocks), the mean over those layers of each one's median timing.
//
// On the CPU (the default) the layers run on the calling thread, the transport
// is the in-process channel between two threads, and the cores' concurrency
// slowdown is measured too. With ProfileOptions::device (a GPU) the layers run
// on that device and the transport is a copy to ProfileOptions::peer; the MPI
// backend measures its own transport (measure_threads off).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/optimizer.h"
#include "costmodels/profile.h"
#include "exec/runtime.h"

namespace pipescope::exec {

class Device;  // device.h

struct ProfileOptions {
  std::vector<std::int64_t> batch_sizes{1};  // micro-batch sizes, ascending
  int repeats = 5;
  std::uint64_t seed = 1;
  Optimizer optimizer = Optimizer::kAdam;
  // Called after each measurement with (done, total).
  std::function<void(std::size_t, std::size_t)> progress;
  // Whether finish() measures the in-process channel and the threads'
  // concurrency slowdown; off for callers that measure their own (the MPI
  // backend: measure_mpi_machine).
  bool measure_threads = true;
  // With measure_threads and 2 or more (at most the cores): finish() also
  // measures a tensor group of this many ranks (Profile::tensor_group): its
  // all-reduce (profile_tensor_allreduce) and the optimizer step with the
  // ranks stepping at once (measure_optimizer_slowdown).
  int tensor_ranks = 0;
  // A device backend (a GPU): the layers measured on `device`, the transport as
  // copies from it to `peer` (another stream of its GPU, or a second GPU), and
  // `devices` of them for the stages to share (the profile's cores). The
  // profile's backend is `backend`. Null: the CPU.
  std::shared_ptr<Device> device = nullptr;
  std::shared_ptr<Device> peer = nullptr;
  int devices = 1;
  std::string backend = "cuda";
};

// Throws std::invalid_argument for models the executor cannot build
// (build_layers) and for bad options.
Profile profile_model(const ModelSpec& spec, const ProfileOptions& options);

// profile_model in parts, for callers that interleave the timed passes with
// other work (`compare` puts one between training steps, so a machine whose
// speed drifts affects prediction and measurement alike).
class ModelProfiler {
 public:
  // Builds the model and runs one untimed warm-up pass per batch size; throws as
  // profile_model does. options.repeats and progress are not used here.
  ModelProfiler(const ModelSpec& spec, const ProfileOptions& options);
  ~ModelProfiler();
  ModelProfiler(const ModelProfiler&) = delete;
  ModelProfiler& operator=(const ModelProfiler&) = delete;

  // One timed pass over the model at every batch size. Passes measure warm
  // caches when they follow each other (or the constructor's warm-up): a
  // stage keeps its layers in its core's caches from one micro-batch to the
  // next, so a pass after other work would measure them cold.
  void measure_pass();
  // The medians of every pass so far, then the optimizer and the transport.
  // Throws std::logic_error before the first measure_pass.
  Profile finish();

 private:
  struct State;
  void run_passes(std::size_t size_index, int passes, bool keep);
  std::unique_ptr<State> state_;
};

// How much slower a pass over the model (at `batch`) runs while n threads each
// run their own copy at once, n = 1 .. min(cores, 8, the copies that fit the
// executor's 4 GiB): cores share caches and
// memory bandwidth. [0] is 1; each factor is the median of three "together"
// timings over the median of three "alone" ones, taken in turn, and at least 1
// (a faster "together" is noise). Each thread's timed pass follows an untimed
// one, so that warm caches are compared with warm caches.
std::vector<double> measure_concurrency_slowdown(const ModelSpec& spec, std::int64_t batch,
                                                 int cores, std::uint64_t seed);

// The wall time, in seconds, of one pass over `model` on `mb` as the profiler
// times it (forward, recompute, backward, split backward).
double model_pass_s(LayerList& model, const MicroBatch& mb, std::uint64_t seed);

// The CPU's model name from /proc/cpuinfo, or "unknown CPU".
std::string cpu_model_name();

// The micro-batch sizes a plan of `global_batch` samples may use: every divisor
// of it (global_batch / M for each M that divides it), at most `limit` of them,
// the largest kept.
std::vector<std::int64_t> plan_batch_sizes(std::int64_t global_batch, std::size_t limit);

}  // namespace pipescope::exec
