#pragma once
// What moving a payload costs the executor, measured: between two threads of
// one process, between two devices, and as a group's all-reduce and
// all-to-all, each fitted as latency + bytes / bandwidth.

#include <functional>
#include <memory>
#include <vector>

#include "exec/compute/group_link.h"
#include "exec/compute/tensor.h"

namespace pipescope::exec {

class Device;  // device.h

// Latency and bandwidth of exec::Channel between two threads, each on a core of
// its own when the process has two (as the runtime pins stages' threads): half
// the round trip of a payload bounced between them, fitted as latency + bytes /
// bandwidth over payloads from 4 B to 4 MiB. Payloads are moved, not copied, so
// the bandwidth is high and the latency (waking a thread on another core) is
// what counts.
struct TransportFigures {
  double latency_s = 0.0;
  double bandwidth = 0.0;  // bytes/s
};
TransportFigures profile_transport(int round_trips);
// The same for a copy from one device to another as the runtime makes it
// between device stages (the receiver waits for the sender's fence, copies,
// and its work goes on after the copy), timed until the copy has landed.
TransportFigures profile_device_transport(Device& from, Device& to, int repeats);
// The in-process all-reduce of a TensorGroup of `ranks` threads, every rank
// reducing a matrix of the same size at once, back to back: rank 0's median
// time of one all-reduce (its wait for the others and its reduce) at 1 KiB to
// 1 MiB, fitted by fit_transport as latency + bytes / bandwidth.
TransportFigures profile_tensor_allreduce(int ranks, int repeats);
// The same for the group's all-to-all (TensorGroup::all_to_all): every rank
// sending each rank a part of the same size at once, back to back; rank 0's
// median time of one all-to-all of 1 KiB to 1 MiB a rank (its parts together).
TransportFigures profile_group_alltoall(int ranks, int repeats);
// The same for a group whose ranks are processes (exec/compute/group_link.h):
// every process of `link` calls it at once and gets its own rank's fit (the
// first rank's is the one to keep). Throws std::invalid_argument for a link
// of fewer than 2 ranks or repeats < 1.
TransportFigures profile_linked_alltoall(const std::shared_ptr<GroupLink>& link, int repeats);
// A group collective's figures: `one_s(ranks, floats, repeats)`, the time of
// one collective of `floats` values a rank repeated `repeats` times, at 1 KiB
// to 1 MiB and at `largest` floats where that is more (repeated fewer times,
// about as many values in all as at 1 MiB, at least 3), fitted by
// fit_transport. Throws std::invalid_argument naming `what` ("an
// all-reduce") unless ranks >= 2 and repeats >= 1.
TransportFigures group_figures(int ranks, int repeats, const char* what,
                               const std::function<double(int, Eigen::Index, int)>& one_s,
                               Eigen::Index largest = 0);
// one_way_s = latency + bytes / bandwidth, anchored at the smallest payload
// (its time, less its bytes over the bandwidth, is the latency) with the
// least-squares slope through it; a slope at or below zero (noise) gives 1 PB/s
// and the smallest payload's time as the latency. Throws std::invalid_argument
// with fewer than two points.
TransportFigures fit_transport(const std::vector<double>& bytes,
                               const std::vector<double>& one_way_s);

}  // namespace pipescope::exec
