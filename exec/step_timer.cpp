#include "exec/step_timer.h"

#include <algorithm>

#include "exec/compute/thread_clock.h"

namespace pipescope::exec {

StepTimer::StepTimer(int devices, int micro_batches, int ranks)
    : micro_batches_(micro_batches),
      ranks_(ranks),
      events_(static_cast<std::size_t>(devices * ranks)),
      timings_(static_cast<std::size_t>(devices * ranks)) {}

void StepTimer::start(const std::vector<Device*>& devices, Clock::time_point zero) {
  t0_ = zero;
  for (Device* dev : devices) {
    if (dev != nullptr && step_fences_.count(dev) == 0) {
      step_fences_[dev] = {dev->fence(), since_start(Clock::now())};
    }
  }
}

SimTime StepTimer::since_start(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0_).count();
}

OpStart StepTimer::op_start(Device* device) {
  OpStart s;
  if (device != nullptr) s.fence = device->fence();
  s.cpu = thread_cpu_ns();
  s.wall = Clock::now();
  return s;
}

void StepTimer::compute(int d, int rank, const Op& op, const OpStart& start, Device* device,
                        const CollectiveTally* collectives) {
  std::vector<TimelineEvent>& events = events_[slot(d, rank)];
  if (start.fence) {
    timings_[slot(d, rank)].push_back({events.size(), device, start.fence, device->fence()});
  }
  const SimTime cpu_end = thread_cpu_ns();
  const auto end = Clock::now();
  const bool reduced = collectives != nullptr && collectives->count > 0;
  TimelineEvent e;
  e.device = d;
  e.lane = Lane::kCompute;
  e.kind = event_kind(op.kind);
  e.stage = op.stage;
  e.micro_batch = op.kind == OpKind::kOptimizer ? 0 : op.micro_batch;
  e.start = since_start(start.wall);
  e.end = since_start(end) - (reduced ? collectives->wall : 0);
  // A device op's host thread only enqueues: its CPU time says nothing.
  if (!start.fence && start.cpu >= 0 && cpu_end >= start.cpu) {
    e.cpu_time = cpu_end - start.cpu - (reduced ? std::max<SimTime>(collectives->cpu, 0) : 0);
  }
  events.push_back(e);
  if (!reduced) return;
  TimelineEvent t = e;
  t.lane = Lane::kTensor;
  t.kind = EventKind::kTensorAllReduce;
  t.start = e.end;
  t.end = since_start(end);
  t.bytes = collectives->bytes;
  t.cpu_time.reset();
  events.push_back(t);
}

// Transfer flow ids are unique within a step: one per (direction, boundary,
// micro-batch).
std::uint64_t StepTimer::flow_id(TransferKind kind, int boundary, int m) const {
  return static_cast<std::uint64_t>(route_id(kind, boundary)) *
             static_cast<std::uint64_t>(micro_batches_) +
         static_cast<std::uint64_t>(m);
}

TimelineEvent StepTimer::transfer_event(int device, Lane lane, TransferKind kind, int from, int to,
                                        int m, Bytes bytes) const {
  const int boundary = std::min(from, to);
  TimelineEvent e;
  e.device = device;
  e.lane = lane;
  e.kind = event_kind(kind);
  e.stage = from;
  e.micro_batch = m;
  e.bytes = bytes;
  e.peer_stage = to;
  e.flow = flow_id(kind, boundary, m);
  e.route = route_id(kind, boundary);
  return e;
}

void StepTimer::record(TimelineEvent e, Clock::time_point start, int rank) {
  e.start = since_start(start);
  e.end = since_start(Clock::now());
  events_[slot(e.device, rank)].push_back(e);
}

// Device ops' times from their fences: ns since the step's start, through each
// device's fence at that start.
void StepTimer::time_device_ops() {
  for (const auto& [dev, start] : step_fences_) dev->synchronize();
  for (std::size_t d = 0; d < timings_.size(); ++d) {
    for (const DeviceTiming& t : timings_[d]) {
      const StepFence& s = step_fences_.at(t.device);
      TimelineEvent& e = events_[d][t.event];
      e.start = s.at + t.device->elapsed_ns(*s.fence, *t.begin);
      e.end = s.at + t.device->elapsed_ns(*s.fence, *t.end);
    }
  }
}

std::vector<TimelineEvent> StepTimer::finish() {
  time_device_ops();
  std::vector<TimelineEvent> all;
  for (std::size_t i = 0; i < events_.size(); i += static_cast<std::size_t>(ranks_)) {
    all.insert(all.end(), events_[i].begin(), events_[i].end());
  }
  return all;
}

std::vector<RankBusy> StepTimer::rank_busy() const {
  std::vector<RankBusy> out;
  for (std::size_t i = 0; i < events_.size(); ++i) {
    RankBusy b;
    b.device = static_cast<int>(i) / ranks_;
    b.rank = static_cast<int>(i) % ranks_;
    bool ran = false;
    for (const TimelineEvent& e : events_[i]) {
      if (e.lane == Lane::kCompute) b.compute += e.end - e.start;
      // compute() draws every collective of an op on the tensor lane.
      if (e.lane == Lane::kTensor) b.collectives += e.end - e.start;
      ran = ran || e.lane == Lane::kCompute;
    }
    if (ran) out.push_back(b);
  }
  return out;
}

std::optional<std::pair<SimTime, SimTime>> StepTimer::compute_span() const {
  std::optional<std::pair<SimTime, SimTime>> span;
  for (const auto& evs : events_) {
    for (const TimelineEvent& e : evs) {
      if (e.lane != Lane::kCompute && e.lane != Lane::kTensor) continue;
      span = span ? std::pair{std::min(span->first, e.start), std::max(span->second, e.end)}
                  : std::pair{e.start, e.end};
    }
  }
  return span;
}

}  // namespace pipescope::exec
