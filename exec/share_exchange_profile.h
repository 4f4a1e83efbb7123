#pragma once
// The context shares' exchanges timed as their layers run them: the C shares
// of a plan (T = 1), each a thread with its share's layers, running a
// forward and a backward on its rows of a micro-batch as a step's F and B
// ops do, their all-to-alls of heads (exec/compute/heads_attention.h) or
// their ring's takes (exec/compute/ring_attention.h) counted by a tally. An
// exchange in a step lasts what the slowest share takes to reach it, beyond
// the copy itself: the shares' compute between two exchanges differs by the
// moment (the OS, the caches, a thread's wake-up), so one waits for the
// other. A bare all-to-all, the ranks calling it back to back
// (profile_group_alltoall), does not show that, nor does the simulator's
// ring, whose exchanges hide behind the attention when it is the longer.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "costmodels/units.h"
#include "exec/compute/host_memory.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_group.h"
#include "exec/transport_profile.h"

namespace pipescope::exec {

// What a share's exchanges took, summed.
struct ExchangeTimes {
  int count = 0;     // all-to-alls, or the ring's takes
  SimTime wall = 0;  // ns in them, waits for the other shares included
  Bytes bytes = 0;   // received from the other shares
  ExchangeTimes& operator+=(const ExchangeTimes& o) {
    count += o.count;
    wall += o.wall;
    bytes += o.bytes;
    return *this;
  }
  // Mean seconds an exchange, 0 without any.
  double mean_s() const { return count > 0 ? static_cast<double>(wall) * 1e-9 / count : 0.0; }
  // Mean bytes received in one, 0 without any.
  double mean_bytes() const {
    return count > 0 ? static_cast<double>(bytes) / static_cast<double>(count) : 0.0;
  }
};

// The last share's exchanges in its forwards and in its backwards, and the
// whole forward and backward on its thread (ns, the exchanges included).
struct ShareExchanges {
  ExchangeTimes forward;
  ExchangeTimes backward;
  SimTime forward_pass = 0;
  SimTime backward_pass = 0;
  // Each pass less its exchanges: the compute (ns).
  SimTime forward_compute() const { return forward_pass - forward.wall; }
  SimTime backward_compute() const { return backward_pass - backward.wall; }
};

// The exchanges of the last share of `model` (one share of
// model.context_parallel > 1 at T = 1, its whole transformer split as a
// plan's run splits it, by heads when model.context_by_heads) in one
// forward-and-backward pass on the share's rows of a micro-batch of `batch`
// sequences: of `passes` passes after one untimed, each on a micro-batch of
// its own, the one of the median time in exchanges (a pass during which
// other work held a core makes the shares wait for each other, and is left
// out so). Throws std::invalid_argument for another model, and for
// passes < 1.
ShareExchanges time_share_exchanges(const ModelSpec& model, std::int64_t batch, std::uint64_t seed,
                                    int passes);

// Share c's passes over `layers` (its list of build_context_ranks), as
// time_share_exchanges runs each share's: after one that warms up, `passes`
// forward-and-backward passes on its rows of a micro-batch of `batch`
// sequences, each on a micro-batch of its own, its exchanges counted by
// `tally`, the calling thread's installed tally. For shares that are
// processes, each calls it on its own share. Throws std::invalid_argument as
// time_share_exchanges does.
std::vector<ShareExchanges> share_passes(LayerList& layers, const ModelSpec& model, int c,
                                         std::int64_t batch, std::uint64_t seed, int passes,
                                         CollectiveTally& tally);

// The pass of the median time in exchanges, its forward_pass and
// backward_pass those exchanges plus the median over the passes of the
// compute (the pass less its exchanges) in that direction. Throws
// std::invalid_argument for none.
ShareExchanges median_pass(std::vector<ShareExchanges> passes);

// Passes of the shares' (or expert ranks') layers of which the median one's
// figures are kept, and back-to-back calls a bare group collective is timed
// over.
inline constexpr int kExchangePasses = 7;
inline constexpr int kGroupRepeats = 50;

// The all-to-all of a group of `ranks` as their layers ran it at micro-batch
// `batch`: the bandwidth the bare group's (`bare`: profile_group_alltoall,
// or profile_linked_alltoall for processes), the latency what one took in
// the layers (`in_step`: their all-to-alls summed, of which `other_waits_s`
// were waits for something else, the router's load) beyond its bytes (each
// rank's whole buffer, of which it received (ranks - 1) / ranks) over that
// bandwidth, or the bare latency if that is more.
// `experts`: the group is the expert ranks (GroupAllToAllFigures::experts).
GroupAllToAllFigures in_step_alltoall(const TransportFigures& bare, int ranks,
                                      const ExchangeTimes& in_step, double other_waits_s,
                                      std::int64_t batch, bool experts = false);

// One forward and one backward of `layers` on `mine` as a step runs them:
// what `tally` (the calling thread's installed one) counted in each, and
// each one's time.
struct MicroBatch;  // exec/runtime.h
ShareExchanges timed_forward_and_backward(LayerList& layers, const MicroBatch& mine,
                                          const Context& ctx, CollectiveTally& tally);

// How much slower a group of `ranks` computed (`forward_ns` and
// `backward_ns`: a forward's and a backward's time less their exchanges)
// than `profile`'s figures of the layers of `model` alone at `batch`
// (forwards that keep their stashes, and backwards); `experts` as
// GroupSlowdownFigures has it. ranks 0 when the profile lacks a layer or a
// part timed nothing.
GroupSlowdownFigures group_compute_slowdown(const Profile& profile, const ModelSpec& model,
                                            int ranks, SimTime forward_ns, SimTime backward_ns,
                                            std::int64_t batch, bool experts);

// group_compute_slowdown of the shares from the share's pass `in_step` (its
// forward and its backward, each less its exchanges).
GroupSlowdownFigures share_compute_slowdown(const Profile& profile, const ModelSpec& model,
                                            const ShareExchanges& in_step, std::int64_t batch);

// Sets profile.group_slowdown to `g` where it was measured (ranks > 1) and
// both its figures are plausible (plausible_slowdown); leaves it otherwise.
void keep_group_slowdown(Profile& profile, const GroupSlowdownFigures& g);

// Writes the shares' figures from the last share's median pass `in_step` of
// `model` at micro-batch `batch` into `profile`: the ring's takes
// (context_ring), or for shares that trade heads their all-to-all
// (alltoall_group, in_step_alltoall over the bare group's figures, which
// `bare` measures); and, where `profile` has the layers' times alone, how
// much slower the share computed among the others (group_slowdown).
void write_context_figures(Profile& profile, const ModelSpec& model, const ShareExchanges& in_step,
                           std::int64_t batch, const std::function<TransportFigures()>& bare);

// Bytes the C shares hold while their exchanges are timed at micro-batch
// `batch` (or the E expert ranks while their load is,
// exec/expert_load_profile.h): C (E) copies of every layer of `model` (one
// share, one rank), each with its parameters' state (kStateBytesPerParam,
// though the timing builds no optimizer: a margin for what building the
// ranks holds at once) and the stash its forward keeps (stash_bytes a
// sample).
double share_exchange_bytes(const ModelSpec& model, std::int64_t batch);

// Why they are not timed on a machine with `host` available: the copies need
// more than it has ("the 2 shares' layers need 3.1 GiB at micro-batch 8,
// 2.0 GiB available (MemAvailable in /proc/meminfo)"; "the 2 expert ranks'
// layers ..."). Empty when they fit or the memory is not known. With
// `processes` > 1 the ranks are that many processes of one machine, each of
// which builds every rank's layers (build_context_ranks, build_expert_ranks
// with a link): that many times the bytes.
std::string share_exchanges_unfit(const ModelSpec& model, std::int64_t batch,
                                  const std::optional<HostMemory>& host, int processes = 1);

}  // namespace pipescope::exec
