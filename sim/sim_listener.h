#pragma once
// Observers of a simulation run. The engine only advances time; traces, memory
// curves and the GUI listen to what it reports.

#include <cstdint>

#include "costmodels/units.h"
#include "sim/schedule.h"

namespace pipescope {

enum class TransferKind : std::uint8_t { kActivation, kGradient };

// One hop of a transfer over one directed link.
struct TransferHop {
  std::uint64_t transfer = 0;  // id shared by all hops of one transfer
  TransferKind kind = TransferKind::kActivation;
  int src_stage = 0;
  int dst_stage = 0;
  int micro_batch = 0;
  int src_device = 0;  // ends of the whole transfer, not of this hop
  int dst_device = 0;
  int hop = 0;  // 0-based index along the route
  int hop_count = 1;
  int link = 0;  // Cluster link id
  Bytes bytes = 0;
  SimTime start = 0;  // the hop takes the link (after any queueing)
  SimTime end = 0;    // the data has arrived at the hop's far end
};

class SimListener {
 public:
  virtual ~SimListener() = default;
  // Called when an op starts; its end is known then.
  virtual void on_compute(int device, const Op& op, SimTime start, SimTime end) = 0;
  // Called when a hop is booked on its link.
  virtual void on_transfer(const TransferHop& hop) = 0;
};

}  // namespace pipescope
