#include "exec/step_timer.h"

#include <algorithm>

#ifdef __linux__
#include <time.h>
#endif

namespace pipescope::exec {

namespace {

// The calling thread's CPU time in ns, or -1 where the clock is missing. Unlike
// wall time it leaves out what the OS or a hypervisor (steal) took away.
SimTime thread_cpu_ns() {
#ifdef __linux__
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
  return SimTime{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
#else
  return -1;
#endif
}

}  // namespace

StepTimer::StepTimer(int devices, int micro_batches)
    : micro_batches_(micro_batches),
      events_(static_cast<std::size_t>(devices)),
      timings_(static_cast<std::size_t>(devices)) {}

void StepTimer::start(const std::vector<Device*>& devices) {
  t0_ = Clock::now();
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

void StepTimer::compute(int d, const Op& op, const OpStart& start, Device* device) {
  std::vector<TimelineEvent>& events = events_[static_cast<std::size_t>(d)];
  if (start.fence) {
    timings_[static_cast<std::size_t>(d)].push_back(
        {events.size(), device, start.fence, device->fence()});
  }
  const SimTime cpu_end = thread_cpu_ns();
  const auto end = Clock::now();
  TimelineEvent e;
  e.device = d;
  e.lane = Lane::kCompute;
  e.kind = event_kind(op.kind);
  e.stage = op.stage;
  e.micro_batch = op.kind == OpKind::kOptimizer ? 0 : op.micro_batch;
  e.start = since_start(start.wall);
  e.end = since_start(end);
  // A device op's host thread only enqueues: its CPU time says nothing.
  if (!start.fence && start.cpu >= 0 && cpu_end >= start.cpu) e.cpu_time = cpu_end - start.cpu;
  events.push_back(e);
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

void StepTimer::record(TimelineEvent e, Clock::time_point start) {
  e.start = since_start(start);
  e.end = since_start(Clock::now());
  events_[static_cast<std::size_t>(e.device)].push_back(e);
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
  for (const auto& evs : events_) all.insert(all.end(), evs.begin(), evs.end());
  return all;
}

}  // namespace pipescope::exec
