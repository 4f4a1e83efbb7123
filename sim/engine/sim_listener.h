#pragma once
// Observers of a simulation run. The engine only advances time; traces, memory
// curves and the GUI listen to what it reports.

#include <cstdint>
#include <string_view>

#include "costmodels/units.h"
#include "sim/engine/schedule.h"

namespace pipescope {

enum class TransferKind : std::uint8_t { kActivation, kGradient };

// Transfers between stage `boundary` and `boundary + 1` take one of two routes, so
// a route is named by its boundary and direction.
inline int route_id(TransferKind kind, int boundary) {
  return 2 * boundary + (kind == TransferKind::kGradient ? 1 : 0);
}

// One transfer of an activation (stage s -> s+1) or a gradient (s+1 -> s). It
// occupies every link of its route from `start` for `serialize` ns and arrives
// at `end` = start + summed latency + serialize.
struct TransferRecord {
  std::uint64_t id = 0;
  TransferKind kind = TransferKind::kActivation;
  int src_stage = 0;
  int dst_stage = 0;
  int micro_batch = 0;
  int src_device = 0;
  int dst_device = 0;
  int route = 0;  // route_id()
  Bytes bytes = 0;
  SimTime start = 0;      // the links are free and the first byte leaves
  SimTime serialize = 0;  // bytes / the route's bottleneck bandwidth
  SimTime end = 0;        // the last byte has arrived
};

// The ring collectives a stage runs over its data-parallel replicas.
enum class ReplicaCollective : std::uint8_t { kAllReduce, kReduceScatter, kAllGather };
// "all-reduce", "reduce-scatter", "all-gather".
std::string_view to_string(ReplicaCollective c);

class SimListener {
 public:
  virtual ~SimListener() = default;
  // Called when an op starts; its end is known then.
  virtual void on_compute(int device, const Op& op, SimTime start, SimTime end) = 0;
  // Called when a transfer is booked on its route.
  virtual void on_transfer(const TransferRecord& transfer) = 0;
  // Called when a stage's collective across data-parallel replicas is booked
  // on its device's replica link, over `bytes` of gradients or weights: the
  // gradient all-reduce, or under ZeRO each reduce-scatter and all-gather of
  // the stage (sim/engine/engine.h).
  virtual void on_replica_collective(int /*device*/, int /*stage*/, ReplicaCollective /*what*/,
                                     Bytes /*bytes*/, SimTime /*start*/, SimTime /*end*/) {}
  // Called when an op of a tensor-parallel stage starts: its group's
  // collectives (`bytes` all-reduced in all) run from `start`, when the op's
  // compute ends, to `end`, when the op ends.
  virtual void on_tensor_collective(int /*device*/, const Op& /*op*/, Bytes /*bytes*/,
                                    SimTime /*start*/, SimTime /*end*/) {}
  // Called likewise for the op's expert-parallel all-to-alls (`bytes` sent and
  // received in all), which run after its tensor-parallel collectives: to
  // `end`, when the op ends, or, for the first half of a DualPipe pair whose
  // framework overlaps them (Framework::pair_alltoall_overlap), whole, on
  // into its partner's compute; the second half reports only what outlasts
  // its partner's compute, if anything.
  virtual void on_expert_exchange(int /*device*/, const Op& /*op*/, Bytes /*bytes*/,
                                  SimTime /*start*/, SimTime /*end*/) {}
  // Called likewise for what the op's context-parallel exchanges add (the
  // ring's beyond the attention they overlap, the all-gather form's whole;
  // `bytes` sent in all), after its expert-parallel all-to-alls.
  virtual void on_context_exchange(int /*device*/, const Op& /*op*/, Bytes /*bytes*/,
                                   SimTime /*start*/, SimTime /*end*/) {}
};

}  // namespace pipescope
