#pragma once
// The profiler's timed passes (profiler.h): a stage's kinds of op over a run
// of a model's layers, each layer's op timed on its own, and such passes on
// every core at once, as the stages of a plan run them.
//
// On the host each op is timed on its thread's CPU clock, less what reading
// that clock costs (measured): it leaves out whatever other work took the core
// while the op ran (other processes, a hypervisor's steal), which a wall clock
// would count as the op's. The wall time beside it says how much that was.

#include <cstddef>
#include <functional>
#include <random>
#include <vector>

#include "costmodels/units.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_group.h"

namespace pipescope::exec {

// Layers [begin, end) of a model: what one stage of a plan holds.
struct LayerRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const LayerRange&) const = default;
};

// `layers` cut into n contiguous runs of as equal counts as can be (the first
// ones one longer), n at most the layers. Throws std::invalid_argument for n
// outside [1, layers].
std::vector<LayerRange> even_ranges(std::size_t layers, int n);

// Every op's time of one pass, ns, indexed by layer over the whole model (a
// pass over a range fills that range).
struct OpTimes {
  std::vector<SimTime> forward, recompute, backward, input, weight;

  explicit OpTimes(std::size_t layers = 0);
  // The sum of every kind of op over `range`.
  SimTime total(LayerRange range) const;
};

// What a pass's ops took on the wall clock and on their thread's CPU clock,
// summed.
struct PassClocks {
  SimTime wall = 0;
  SimTime cpu = 0;
  PassClocks& operator+=(const PassClocks& o);
  // The share of the wall time that other work took: 1 - cpu / wall, in [0, 1].
  double other_work() const;
};

// How ops are timed.
struct OpClock {
  // The thread's CPU time (the host), or the wall time (a device's layers,
  // whose host thread waits for them; or a system without a thread CPU clock).
  bool cpu = true;
  // What an interval on the CPU clock reads with nothing in it, ns: the
  // clock's own cost, taken off every op's time.
  SimTime cpu_clock_cost = 0;
};

// Runs `op` and returns its time on `clock` (at least 1 ns), adding its wall
// and clock time to `clocks` (null: not kept).
SimTime time_op(const OpClock& clock, PassClocks* clocks, const std::function<void()>& op);

// The host's clock: the thread CPU clock with its cost measured on the calling
// thread (the median of many empty intervals), or the wall clock where there is
// no thread CPU clock.
OpClock host_op_clock();

// One pass over `range` of `layers`, as a stage runs its ops: every layer's
// forward (its stash dropped, as under remat), then a forward that keeps the
// stashes (a recompute, or a forward without remat), the backward, then the
// backward again split as the zero-bubble schedules run it: every layer's B,
// then every layer's W, so that W finds its operands as far out in the caches
// as a stage's W op does. `input` is what enters layers[range.begin]. Each
// layer's op is timed on `clock` into `times` (null: untimed) and added to
// `clocks` (null: not kept); every output is checked for being finite, as the
// runtime does. Parameters' gradients are zeroed at the end.
void timed_pass(LayerList& layers, LayerRange range, const Tensor& input, const Context& ctx,
                std::mt19937_64& rng, const OpClock& clock, OpTimes* times, PassClocks* clocks);

// One F and one B of `layers` on `input`, as a step runs them: the forward
// keeping its stashes, then `after_forward`, then the backward from a loss
// gradient of ones, then `after_backward` (if any); the parameters'
// gradients are zeroed at the end. For passes whose exchanges or experts a
// thread-local tally counts.
void step_pass(LayerList& layers, const Tensor& input, const Context& ctx,
               const std::function<void()>& after_forward,
               const std::function<void()>& after_backward = {});

// Runs body(i) on n new threads, thread i on cpus[i] (unpinned when cpus is
// empty), and rethrows the first failure after all have ended. `body` must not
// wait for a thread that failed (barriers: arrive_and_drop on failure).
void on_cores(int n, const std::vector<int>& cpus, const std::function<void(int)>& body);

// Runs body(i, tally) on n new threads, thread i on cpus_for_groups(n,
// group)[i] (by default the group is all n: each on a core of its own, or
// unpinned where they outnumber the cores), each with a CollectiveTally
// installed (CollectiveScope) whose abort flag they share: a thread that
// fails sets it, its partners stop waiting for it at their next exchange
// and end quietly, and its failure is rethrown once all have ended. For
// ranks whose layers exchange with each other.
void on_group_threads(int n, const std::function<void(int, CollectiveTally&)>& body, int group = 0);

// The input of every layer of `layers` for a pass: [l] is what enters layer l
// (the model's input at 0), from one untimed forward.
std::vector<Tensor> layer_inputs(LayerList& layers, const Tensor& input, const Context& ctx);

// Runs pass(i, timed) on n threads at once, thread i on cpus[i] (unpinned when
// cpus is empty): each an untimed pass (timed false), then, all starting
// together, a timed one, then untimed ones until every thread has finished its
// timed one, so that every timed op runs while the other cores compute as
// well. Rethrows the first failure after all threads have ended.
void concurrent_timed(int n, const std::vector<int>& cpus,
                      const std::function<void(int, bool)>& pass);

// One pass over each of `ranges` at once, range i on thread i on cpus[i]
// (unpinned when cpus is empty): every thread first runs an untimed pass (its
// layers into its core's caches, as a stage keeps them from one micro-batch to
// the next), then all start a timed one together, and each keeps running
// untimed passes until every one has finished its timed pass, so that every
// timed op runs while the other cores compute as well. `inputs` from
// layer_inputs. Times go to `times` (each range's layers), clocks to `clocks`.
void concurrent_passes(LayerList& layers, const std::vector<LayerRange>& ranges,
                       const std::vector<Tensor>& inputs, const Context& ctx,
                       const std::vector<int>& cpus, std::uint64_t seed, const OpClock& clock,
                       OpTimes& times, PassClocks& clocks);

}  // namespace pipescope::exec
