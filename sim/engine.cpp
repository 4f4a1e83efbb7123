#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "costmodels/check.h"
#include "sim/event_queue.h"

namespace pipescope {
namespace {

enum EventKind : std::uint32_t { kComputeDone = 0, kHopDone = 1 };

// One hop of a precomputed route with its durations for the boundary's payload.
struct RouteHop {
  int link = 0;
  SimTime serialize = 0;  // ns the link is occupied: bytes / bandwidth
  SimTime latency = 0;    // ns until the first byte arrives
  double bandwidth = 0.0;
};

struct InFlight {
  std::uint64_t id = 0;
  TransferKind kind = TransferKind::kActivation;
  int boundary = 0;  // between stage boundary and boundary + 1
  int micro_batch = 0;
  int hop = 0;
};

struct DeviceState {
  std::size_t next = 0;  // index of the next op in the device's list
  bool busy = false;
  SimTime op_start = 0;
};

class Engine {
 public:
  Engine(const Schedule& schedule, const std::vector<StageCost>& stages, const Cluster& cluster,
         SimListener* listener)
      : sched_(schedule),
        stages_(stages),
        cluster_(cluster),
        listener_(listener),
        K_(schedule.stages),
        M_(schedule.micro_batches) {
    PS_CHECK(static_cast<int>(stages.size()) == K_, "one StageCost per stage");
    PS_CHECK(schedule.devices() <= cluster.devices,
             "schedule uses more devices than the cluster has");
    devices_.resize(sched_.device_ops.size());
    link_free_.assign(static_cast<std::size_t>(cluster.link_count()), 0);
    const std::size_t cells = static_cast<std::size_t>(K_) * static_cast<std::size_t>(M_);
    act_ready_.assign(cells, 0);
    grad_ready_.assign(cells, 0);
    for (int s = 0; s + 1 < K_; ++s) {
      const Bytes bytes = stages_[static_cast<std::size_t>(s)].output_bytes;
      fwd_routes_.push_back(make_route(device_of(s), device_of(s + 1), bytes));
      bwd_routes_.push_back(make_route(device_of(s + 1), device_of(s), bytes));
    }
    result_.device_busy.assign(devices_.size(), 0);
    result_.device_end.assign(devices_.size(), 0);
  }

  EngineResult run() {
    for (std::size_t d = 0; d < devices_.size(); ++d) try_start(static_cast<int>(d));
    while (!queue_.empty()) {
      const Event e = queue_.pop();
      now_ = e.time;
      if (e.kind == kComputeDone) {
        compute_done(static_cast<int>(e.id));
      } else {
        hop_done(e.id);
      }
    }
    for (std::size_t d = 0; d < devices_.size(); ++d) {
      const auto& ops = sched_.device_ops[d];
      if (devices_[d].next < ops.size()) {
        const Op& op = ops[devices_[d].next];
        PS_CHECK(false, "schedule deadlocks: device " + std::to_string(d) + " waits forever at " +
                            op_letter(op.kind) + "(" + std::to_string(op.stage) + "," +
                            std::to_string(op.micro_batch) + ")");
      }
    }
    result_.step_time = *std::max_element(result_.device_end.begin(), result_.device_end.end());
    return result_;
  }

 private:
  int device_of(int stage) const { return sched_.stage_device[static_cast<std::size_t>(stage)]; }
  std::size_t cell(int stage, int m) const {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(M_) +
           static_cast<std::size_t>(m);
  }

  std::vector<RouteHop> make_route(int src, int dst, Bytes bytes) const {
    std::vector<RouteHop> route;
    for (const Hop& h : cluster_.route(src, dst)) {
      PS_CHECK(h.bandwidth > 0.0, "link bandwidth must be positive");
      route.push_back(RouteHop{h.link, seconds_to_simtime(static_cast<double>(bytes) / h.bandwidth),
                               seconds_to_simtime(h.latency_s), h.bandwidth});
    }
    return route;
  }

  SimTime duration(const Op& op) const {
    const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
    switch (op.kind) {
      case OpKind::kForward:
        return c.forward;
      case OpKind::kRecompute:
        return c.recompute;
      case OpKind::kBackward:
        return c.backward;
      case OpKind::kOptimizer:
        return c.optimizer;
    }
    return 0;
  }

  bool ready(const Op& op) const {
    switch (op.kind) {
      case OpKind::kForward:
        return op.stage == 0 || act_ready_[cell(op.stage, op.micro_batch)] != 0;
      case OpKind::kBackward:
        return op.stage == K_ - 1 || grad_ready_[cell(op.stage, op.micro_batch)] != 0;
      case OpKind::kRecompute:
      case OpKind::kOptimizer:
        return true;
    }
    return true;
  }

  void try_start(int d) {
    DeviceState& dev = devices_[static_cast<std::size_t>(d)];
    const auto& ops = sched_.device_ops[static_cast<std::size_t>(d)];
    if (dev.busy || dev.next >= ops.size()) return;
    const Op& op = ops[dev.next];
    if (!ready(op)) return;
    const SimTime end = now_ + duration(op);
    dev.busy = true;
    dev.op_start = now_;
    queue_.push(end, kComputeDone, static_cast<std::uint32_t>(d));
    if (listener_ != nullptr) listener_->on_compute(d, op, now_, end);
  }

  void compute_done(int d) {
    DeviceState& dev = devices_[static_cast<std::size_t>(d)];
    const Op op = sched_.device_ops[static_cast<std::size_t>(d)][dev.next];
    const SimTime spent = now_ - dev.op_start;
    result_.device_busy[static_cast<std::size_t>(d)] += spent;
    if (op.kind == OpKind::kRecompute) result_.recompute_time += spent;
    result_.device_end[static_cast<std::size_t>(d)] = now_;
    ++result_.compute_ops;
    dev.busy = false;
    ++dev.next;
    if (op.kind == OpKind::kForward && op.stage + 1 < K_) {
      send(TransferKind::kActivation, op.stage, op.micro_batch);
    } else if (op.kind == OpKind::kBackward && op.stage > 0) {
      send(TransferKind::kGradient, op.stage - 1, op.micro_batch);
    }
    try_start(d);
  }

  const std::vector<RouteHop>& route_of(const InFlight& t) const {
    const auto b = static_cast<std::size_t>(t.boundary);
    return t.kind == TransferKind::kActivation ? fwd_routes_[b] : bwd_routes_[b];
  }

  void send(TransferKind kind, int boundary, int m) {
    ++result_.transfers;
    InFlight t{next_transfer_id_++, kind, boundary, m, 0};
    if (route_of(t).empty()) {
      arrive(t);
      return;
    }
    std::uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      in_flight_[slot] = t;
    } else {
      slot = static_cast<std::uint32_t>(in_flight_.size());
      in_flight_.push_back(t);
    }
    book_hop(slot);
  }

  // Links are FIFO per direction: a hop takes the link when it is free, holds it
  // for bytes / bandwidth, and its data lands one latency after that.
  void book_hop(std::uint32_t slot) {
    const InFlight& t = in_flight_[slot];
    const std::vector<RouteHop>& route = route_of(t);
    const RouteHop& h = route[static_cast<std::size_t>(t.hop)];
    SimTime& free_at = link_free_[static_cast<std::size_t>(h.link)];
    const SimTime start = std::max(now_, free_at);
    free_at = start + h.serialize;
    const SimTime end = start + h.latency + h.serialize;
    result_.comm_time += h.serialize;
    queue_.push(end, kHopDone, slot);
    if (listener_ != nullptr) {
      const bool act = t.kind == TransferKind::kActivation;
      TransferHop rec;
      rec.transfer = t.id;
      rec.kind = t.kind;
      rec.src_stage = act ? t.boundary : t.boundary + 1;
      rec.dst_stage = act ? t.boundary + 1 : t.boundary;
      rec.micro_batch = t.micro_batch;
      rec.src_device = device_of(rec.src_stage);
      rec.dst_device = device_of(rec.dst_stage);
      rec.hop = t.hop;
      rec.hop_count = static_cast<int>(route.size());
      rec.link = h.link;
      rec.bytes = stages_[static_cast<std::size_t>(t.boundary)].output_bytes;
      rec.start = start;
      rec.end = end;
      listener_->on_transfer(rec);
    }
  }

  void hop_done(std::uint32_t slot) {
    InFlight& t = in_flight_[slot];
    ++t.hop;
    if (static_cast<std::size_t>(t.hop) < route_of(t).size()) {
      book_hop(slot);
      return;
    }
    const InFlight done = t;
    free_slots_.push_back(slot);
    arrive(done);
  }

  void arrive(const InFlight& t) {
    if (t.kind == TransferKind::kActivation) {
      act_ready_[cell(t.boundary + 1, t.micro_batch)] = 1;
      try_start(device_of(t.boundary + 1));
    } else {
      grad_ready_[cell(t.boundary, t.micro_batch)] = 1;
      try_start(device_of(t.boundary));
    }
  }

  const Schedule& sched_;
  const std::vector<StageCost>& stages_;
  const Cluster& cluster_;
  SimListener* listener_;
  int K_;
  int M_;
  SimTime now_ = 0;
  EventQueue queue_;
  std::vector<DeviceState> devices_;
  std::vector<SimTime> link_free_;
  std::vector<std::uint8_t> act_ready_;   // input of stage s for micro-batch m has arrived
  std::vector<std::uint8_t> grad_ready_;  // output gradient of stage s for m has arrived
  std::vector<std::vector<RouteHop>> fwd_routes_;
  std::vector<std::vector<RouteHop>> bwd_routes_;
  std::vector<InFlight> in_flight_;
  std::vector<std::uint32_t> free_slots_;
  std::uint64_t next_transfer_id_ = 0;
  EngineResult result_;
};

}  // namespace

EngineResult run_engine(const Schedule& schedule, const std::vector<StageCost>& stages,
                        const Cluster& cluster, SimListener* listener) {
  return Engine(schedule, stages, cluster, listener).run();
}

}  // namespace pipescope
