#include "sim/engine/engine.h"
#include <optional>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <string>
#include <unordered_map>

#include "costmodels/check.h"
#include "sim/base/cancel.h"
#include "sim/engine/event_queue.h"
#include "sim/engine/op_dependencies.h"
#include "sim/engine/pair_hold.h"

namespace pipescope {
namespace {

enum EngineEvent : std::uint32_t {
  kComputeDone = 0,
  kTransferDone = 1,
  kAllReduceDone = 2,
  kReduceScatterDone = 3,  // a ZeRO-2/3 reduce-scatter of a stage's gradients
  kGatherDone = 4,         // a ZeRO-3 all-gather of the next op's weights, by device
};

// A precomputed route with the durations of the boundary's payload. Transfers cut
// through (docs/models.md, "Interconnects and placement"): the payload streams over every link of
// the route at once, at the bottleneck's bandwidth, and arrives after the summed
// latency plus bytes / bottleneck bandwidth.
struct Route {
  std::vector<std::uint32_t> links;  // engine-local link indices
  SimTime serialize = 0;             // ns each link is occupied
  SimTime latency = 0;               // ns, summed over the hops
};

struct InFlight {
  TransferKind kind = TransferKind::kActivation;
  int boundary = 0;  // between stage boundary and boundary + 1
  int micro_batch = 0;
  bool blocks = false;  // its device's next compute waits for it (Engine::send_blocks)

  int from_stage() const { return kind == TransferKind::kActivation ? boundary : boundary + 1; }
  int to_stage() const { return kind == TransferKind::kActivation ? boundary + 1 : boundary; }
};

// What an op kind waits for from another stage or the replicas, and what it
// sends when it finishes: read once from the dependency rules.
struct KindRules {
  Via waits = Via::kSameStage;
  int waits_offset = 0;  // the stage it waits for, relative to its own
  Sends sends;
  bool feeds_all_reduce = false;
};

struct DeviceState {
  std::size_t next = 0;  // index of the next op in the device's list
  bool busy = false;
  bool waits_for_core = false;  // ready, queued for a shared core
  bool gathering = false;       // ZeRO-3: the next op's weights are being gathered
  bool gathered = false;        // ZeRO-3: the next op's weights are here
  SimTime op_start = 0;
  int sends_in_flight = 0;  // blocking sends: the device waits for them
  PairHold<bool> pair;      // the outputs of an overlapped pair still running (do they block)
};

// Where a device's steady state begins and ends in its op list: from the
// last forward before its first backward to its last forward. Before it
// lies the warm-up, after it the cool-down (P2pMode::kOverlappedSteady).
struct SteadyState {
  std::size_t first = 0;
  std::size_t last = 0;
};

SteadyState steady_state(const std::vector<Op>& ops) {
  SteadyState s{ops.size(), ops.size()};
  bool backward_seen = false;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kBackward) backward_seen = true;
    if (ops[i].kind != OpKind::kForward) continue;
    if (!backward_seen) s.first = i;
    s.last = i;
  }
  return s;
}

class Engine {
 public:
  Engine(const Schedule& schedule, const std::vector<StageCost>& stages, const Cluster& cluster,
         SimListener* listener)
      : sched_(schedule),
        stages_(stages),
        cluster_(cluster),
        listener_(listener),
        K_(schedule.stages),
        M_(schedule.micro_batches),
        split_(schedule.split),
        p2p_(cluster.p2p_mode(schedule.chunks > 1)) {
    PS_CHECK(static_cast<int>(stages.size()) == K_, "one StageCost per stage");
    PS_CHECK(schedule.devices() <= cluster.devices,
             "schedule uses more devices than the cluster has");
    devices_.resize(sched_.device_ops.size());
    for (const auto& ops : sched_.device_ops) steady_.push_back(steady_state(ops));
    const std::size_t cells = static_cast<std::size_t>(K_) * static_cast<std::size_t>(M_);
    act_ready_.assign(cells, 0);
    grad_ready_.assign(cells, 0);
    for (int s = 0; s + 1 < K_; ++s) {
      const Bytes bytes = stages_[static_cast<std::size_t>(s)].output_bytes;
      fwd_routes_.push_back(make_route(device_of(s), device_of(s + 1), bytes));
      bwd_routes_.push_back(make_route(device_of(s + 1), device_of(s), bytes));
    }
    link_free_.assign(local_links_.size(), 0);
    read_rules();
    reduced_.assign(static_cast<std::size_t>(K_), 0);
    for (int s = 0; s < K_; ++s) {
      const StageCost& c = stages_[static_cast<std::size_t>(s)];
      if ((c.allreduce == 0 || c.allreduce_in_step) && c.zero_reduce_scatter == 0) {
        reduced_[static_cast<std::size_t>(s)] = 1;
      }
      // ZeRO-2/3: the optimizer step waits for a reduce-scatter per backward.
      scatters_left_.push_back(c.zero_reduce_scatter > 0 ? grads_left_[static_cast<std::size_t>(s)]
                                                         : 0);
      if (c.zero_reduce_scatter > 0 && scatters_left_.back() == 0) {
        reduced_[static_cast<std::size_t>(s)] = 1;
      }
    }
    replica_link_free_.assign(sched_.device_ops.size(), 0);
    result_.device_busy.assign(devices_.size(), 0);
    result_.device_end.assign(devices_.size(), 0);
    if (cluster.shared_cores > 0 && cluster.shared_cores < schedule.devices()) {
      core_limit_ = cluster.shared_cores;
    }
  }

  EngineResult run() {
    for (std::size_t d = 0; d < devices_.size(); ++d) try_start(static_cast<int>(d));
    std::uint32_t events = 0;
    while (!queue_.empty()) {
      // A million-op schedule runs for seconds: look for Ctrl-C now and then.
      if ((++events & 0xFFFFu) == 0) throw_if_cancelled();
      const Event e = queue_.pop();
      now_ = e.time;
      if (e.kind == kComputeDone) {
        compute_done(static_cast<int>(e.id));
      } else if (e.kind == kAllReduceDone) {
        reduced_[e.id] = 1;
        try_start(device_of(static_cast<int>(e.id)));
      } else if (e.kind == kReduceScatterDone) {
        if (--scatters_left_[e.id] == 0) {
          reduced_[e.id] = 1;
          try_start(device_of(static_cast<int>(e.id)));
        }
      } else if (e.kind == kGatherDone) {
        DeviceState& dev = devices_[e.id];
        dev.gathering = false;
        dev.gathered = true;
        try_start(static_cast<int>(e.id));
      } else {
        transfer_done(e.id);
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
  // The engine's view of the dependency rules. Same-stage dependencies hold by
  // the device's order (check_schedule), so only the other kinds are waited on.
  void read_rules() {
    for (const OpKind k : kOpKinds) {
      KindRules& r = rules_[static_cast<std::size_t>(k)];
      for (const Dependency& d : op_dependencies(k)) {
        if (d.via != Via::kSameStage) r.waits = d.via, r.waits_offset = d.stage_offset;
      }
      r.sends = sends_after(k);
      r.feeds_all_reduce = feeds_all_reduce(k);
    }
    // Each stage's all-reduce waits for every micro-batch of each op kind it depends on.
    for (int s = 0; s < K_; ++s) {
      int due = 0;
      for (const Dependency& d : op_dependencies(OpKind::kOptimizer)) {
        if (d.via == Via::kAllReduce && applies(d, s, K_, split_, false)) due += M_;
      }
      grads_left_.push_back(due);
    }
  }
  const KindRules& rules(OpKind k) const { return rules_[static_cast<std::size_t>(k)]; }

  int device_of(int stage) const { return sched_.stage_device[static_cast<std::size_t>(stage)]; }
  std::size_t cell(int stage, int m) const {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(M_) +
           static_cast<std::size_t>(m);
  }

  // Only the links that pipeline neighbours use get engine state, however large
  // the cluster.
  Route make_route(int src, int dst, Bytes bytes) {
    Route route;
    double bottleneck = 0.0;
    double latency_s = 0.0;
    for (const Hop& h : cluster_.route(src, dst)) {
      PS_CHECK(h.bandwidth > 0.0, "link bandwidth must be positive");
      const auto [it, added] =
          local_links_.emplace(h.link, static_cast<std::uint32_t>(local_links_.size()));
      route.links.push_back(it->second);
      bottleneck = route.links.size() == 1 ? h.bandwidth : std::min(bottleneck, h.bandwidth);
      latency_s += h.latency_s;
    }
    if (!route.links.empty()) {
      route.serialize = seconds_to_simtime(static_cast<double>(bytes) / bottleneck);
      route.latency = seconds_to_simtime(latency_s);
    }
    return route;
  }

  SimTime duration(const Op& op) const {
    const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
    switch (op.kind) {
      case OpKind::kForward:
        return sched_.recomputes(op.micro_batch) ? c.forward : c.forward_kept.value_or(c.forward);
      case OpKind::kRecompute:
        return c.recompute;
      case OpKind::kBackward:
        return split_ ? c.input : c.backward;
      case OpKind::kWeight:
        return c.weight;
      case OpKind::kOptimizer:
        return c.optimizer;
    }
    return 0;
  }

  // ZeRO-3: whether the op computes with the stage's weights, which it
  // gathers first: a forward, a recompute and a backward (B when split; W
  // needs the activations and output gradients only).
  bool gathers(const Op& op) const {
    if (stages_[static_cast<std::size_t>(op.stage)].zero_op_gather == 0) return false;
    return op.kind == OpKind::kForward || op.kind == OpKind::kRecompute ||
           op.kind == OpKind::kBackward;
  }

  // ZeRO-3: how the op's layers wait for their weights.
  GatherFlow gather_flow(const Op& op) const {
    const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
    if (op.kind == OpKind::kForward) {
      return sched_.recomputes(op.micro_batch) ? c.zero_forward_flow : c.zero_forward_kept_flow;
    }
    return op.kind == OpKind::kRecompute ? c.zero_recompute_flow : c.zero_backward_flow;
  }

  // Books `length` of ZeRO or data-parallel traffic of `stage` on device d's
  // link to the replicas after what it already carries; returns its end.
  // `moving`: the part of it the link moves bytes, where not all of it (a
  // ZeRO-3 op's gathers, which wait for its layers).
  SimTime book_replica_link(int d, int stage, SimTime length, ReplicaCollective what,
                            std::optional<SimTime> moving = std::nullopt) {
    SimTime& free = replica_link_free_[static_cast<std::size_t>(d)];
    const SimTime start = std::max(now_, free);
    free = start + length;
    result_.allreduce_time += moving.value_or(length);
    if (listener_ != nullptr) {
      listener_->on_replica_collective(
          d, stage, what, stages_[static_cast<std::size_t>(stage)].grad_bytes, start, free);
    }
    return free;
  }

  bool ready(const Op& op) const {
    const KindRules& r = rules(op.kind);
    const int from = op.stage + r.waits_offset;
    if (from < 0 || from >= K_) return true;  // no neighbour there to wait for
    switch (r.waits) {
      case Via::kActivation:
        return act_ready_[cell(op.stage, op.micro_batch)] != 0;
      case Via::kGradient:
        return grad_ready_[cell(op.stage, op.micro_batch)] != 0;
      case Via::kAllReduce:
        return reduced_[static_cast<std::size_t>(op.stage)] != 0;
      case Via::kSameStage:
        return true;
    }
    return true;
  }

  // What of `expert`, the all-to-alls of device d's next op, the op waits
  // for. In a DualPipe pair (pair_partner) whose framework overlaps them
  // (StageCost::ep_pair_overlap) the forward's all-to-alls run beside the
  // backward's compute and the backward's beside the forward's, as
  // DeepSeek-V3's DualPipe does (DeepSeek-AI 2024, section 3.2.1): only what
  // outlasts the partner's compute. Otherwise all of them.
  SimTime exposed_expert(int d, const Op& op, SimTime expert) const {
    if (expert == 0 || !stages_[static_cast<std::size_t>(op.stage)].ep_pair_overlap) return expert;
    const Op* partner = pair_partner(sched_.device_ops[static_cast<std::size_t>(d)],
                                     devices_[static_cast<std::size_t>(d)].next);
    return partner != nullptr ? std::max<SimTime>(0, expert - duration(*partner)) : expert;
  }

  // Whether device d's next op's pair partner (pair_partner) comes after it.
  bool partner_follows(int d) const {
    const auto& ops = sched_.device_ops[static_cast<std::size_t>(d)];
    const std::size_t i = devices_[static_cast<std::size_t>(d)].next;
    const Op* partner = pair_partner(ops, i);
    return partner != nullptr && partner > &ops[i];
  }

  void try_start(int d) {
    DeviceState& dev = devices_[static_cast<std::size_t>(d)];
    const auto& ops = sched_.device_ops[static_cast<std::size_t>(d)];
    if (dev.busy || dev.gathering || dev.next >= ops.size()) return;
    const Op& op = ops[dev.next];
    // ZeRO-3: the gather starts once the device reaches the op, without
    // waiting for the op's input; the op computes once both are here.
    if (!dev.gathered && gathers(op)) {
      // The op's layers gather one after another on the link; the op
      // computes once the first is here, and stalls while the rest arrive
      // (gather_flow).
      dev.gathering = true;
      const GatherFlow flow = gather_flow(op);
      const SimTime end = book_replica_link(
          d, op.stage, std::max(flow.link, flow.lead), ReplicaCollective::kAllGather,
          stages_[static_cast<std::size_t>(op.stage)].zero_op_gather);
      queue_.push(end - std::max(flow.link, flow.lead) + flow.lead, kGatherDone,
                  static_cast<std::uint32_t>(d));
      return;
    }
    // Blocking sends (send_blocks) hold the next compute, not the gather
    // above, which runs on the link to the replicas.
    if (dev.sends_in_flight > 0) return;
    if (!ready(op)) return;
    if (core_limit_ > 0) {
      if (cores_in_use_ == core_limit_) {
        if (!dev.waits_for_core) {
          dev.waits_for_core = true;
          core_waiters_.push_back(d);
        }
        return;
      }
      ++cores_in_use_;
    }
    const SimTime computed = now_ + duration(op) + (gathers(op) ? gather_flow(op).stall : 0);
    const OpCollectives exchanges =
        op_collectives(stages_[static_cast<std::size_t>(op.stage)], op.kind);
    const SimTime exposed = exposed_expert(d, op, exchanges.expert);
    const SimTime exchanged = computed + exchanges.tensor;
    const SimTime expert_end = exchanged + exposed;
    const SimTime end = expert_end + exchanges.context;
    result_.tensor_time += exchanges.tensor + exposed + exchanges.context;
    dev.busy = true;
    dev.op_start = now_;
    queue_.push(end, kComputeDone, static_cast<std::uint32_t>(d));
    // A framework that reduces gradients bucket by bucket as the last
    // backward produces them starts the stage's reduction with it.
    const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
    if (c.allreduce_with_backward && rules(op.kind).feeds_all_reduce &&
        grads_left_[static_cast<std::size_t>(op.stage)] == 1) {
      all_reduce(op.stage);
    }
    if (listener_ != nullptr) {
      listener_->on_compute(d, op, now_, computed);
      if (exchanges.tensor > 0) {
        listener_->on_tensor_collective(d, op, exchanges.tensor_bytes, computed, exchanged);
      }
      // A pair's first half draws its all-to-alls whole, running on into its
      // partner's compute; the second half, whose partner ran before it,
      // only what it waits for.
      const bool drawn_whole = exposed < exchanges.expert && partner_follows(d);
      if (exchanges.expert > 0 && (drawn_whole || exposed > 0)) {
        listener_->on_expert_exchange(d, op, exchanges.expert_bytes, exchanged,
                                      drawn_whole ? exchanged + exchanges.expert : expert_end);
      }
      if (exchanges.context > 0) {
        listener_->on_context_exchange(d, op, exchanges.context_bytes, expert_end, end);
      }
    }
  }

  void compute_done(int d) {
    DeviceState& dev = devices_[static_cast<std::size_t>(d)];
    const Op op = sched_.device_ops[static_cast<std::size_t>(d)][dev.next];
    // A ZeRO-3 op's stall while its later layers' weights arrive is not compute.
    const SimTime spent = now_ - dev.op_start - (gathers(op) ? gather_flow(op).stall : 0);
    result_.device_busy[static_cast<std::size_t>(d)] += spent;
    if (op.kind == OpKind::kRecompute) result_.recompute_time += spent;
    SimTime& device_end = result_.device_end[static_cast<std::size_t>(d)];
    device_end = std::max(device_end, now_);
    ++result_.compute_ops;
    dev.busy = false;
    dev.gathered = false;
    const bool blocks = send_blocks(d, dev.next, op.kind);
    ++dev.next;
    if (core_limit_ > 0) release_core();
    // The op's gradients are counted (and reduced) before its outputs leave:
    // a send to a stage on the same device arrives at once and may start the
    // device's next op, which must see this one's count (the overlapped
    // reduction starts with the op that takes the count to one).
    const KindRules& r = rules(op.kind);
    const StageCost& c = stages_[static_cast<std::size_t>(op.stage)];
    if (r.feeds_all_reduce && c.zero_reduce_scatter > 0) {
      // ZeRO-2/3: this backward's gradients are reduce-scattered now, on the
      // link, while the device computes on.
      queue_.push(
          book_replica_link(d, op.stage, c.zero_reduce_scatter, ReplicaCollective::kReduceScatter),
          kReduceScatterDone, static_cast<std::uint32_t>(op.stage));
    }
    if (r.feeds_all_reduce && --grads_left_[static_cast<std::size_t>(op.stage)] == 0 &&
        !c.allreduce_with_backward) {
      all_reduce(op.stage);
    }
    if (op.kind == OpKind::kOptimizer && c.zero_step_gather > 0) {
      // ZeRO-1/2: the updated weights' all-gather; the step ends when it does.
      device_end = std::max(device_end, book_replica_link(d, op.stage, c.zero_step_gather,
                                                          ReplicaCollective::kAllGather));
    }
    dev.pair.finished(op, blocks, [this](const Op& done, bool b) { send_output(done, b); });
    try_start(d);
  }

  // Whether the output of device d's op at `index` in its list, of `kind`,
  // holds the device's next compute until it has left (Cluster::p2p_mode):
  // always, never, or in the warm-up and the cool-down only.
  bool send_blocks(int d, std::size_t index, OpKind kind) const {
    switch (p2p_) {
      case P2pMode::kOverlapped:
        return false;
      case P2pMode::kBlocking:
        return true;
      case P2pMode::kOverlappedSteady: {
        const SteadyState& s = steady_[static_cast<std::size_t>(d)];
        return (kind == OpKind::kForward && index < s.first) ||
               (kind == OpKind::kBackward && index > s.last);
      }
    }
    return true;
  }

  // What a finished op sends to its neighbour stage, if anything.
  void send_output(const Op& op, bool blocks) {
    const KindRules& r = rules(op.kind);
    const int to = op.stage + r.sends.direction;
    if (r.sends.via != Via::kSameStage && to >= 0 && to < K_) {
      const TransferKind kind =
          r.sends.via == Via::kActivation ? TransferKind::kActivation : TransferKind::kGradient;
      send(InFlight{kind, std::min(op.stage, to), op.micro_batch, blocks});
    }
  }

  // The stage's gradients are complete: sum them across the replicas.
  void all_reduce(int stage) {
    const StageCost& c = stages_[static_cast<std::size_t>(stage)];
    if (c.allreduce == 0 || c.allreduce_in_step) return;  // the step sums them (op_collectives)
    // Under ZeRO-1 the slot holds the reduce-scatter that the step's
    // all-gather (zero_step_gather) completes, or the framework's all-reduce.
    const ReplicaCollective what = c.zero_step_gather > 0 && !c.zero1_allreduce
                                       ? ReplicaCollective::kReduceScatter
                                       : ReplicaCollective::kAllReduce;
    queue_.push(book_replica_link(device_of(stage), stage, c.allreduce, what), kAllReduceDone,
                static_cast<std::uint32_t>(stage));
  }

  // The freed core goes to the device that has waited longest for one.
  void release_core() {
    --cores_in_use_;
    while (!core_waiters_.empty() && cores_in_use_ < core_limit_) {
      const int w = core_waiters_.front();
      core_waiters_.pop_front();
      devices_[static_cast<std::size_t>(w)].waits_for_core = false;
      try_start(w);
    }
  }

  const Route& route_of(const InFlight& t) const {
    const auto b = static_cast<std::size_t>(t.boundary);
    return t.kind == TransferKind::kActivation ? fwd_routes_[b] : bwd_routes_[b];
  }

  // Each directed link carries one payload at a time, first come first served:
  // a transfer starts when every link of its route is free.
  void send(const InFlight& t) {
    ++result_.transfers;
    const Route& route = route_of(t);
    if (route.links.empty()) {
      arrive(t);
      return;
    }
    SimTime start = now_;
    for (std::uint32_t l : route.links) start = std::max(start, link_free_[l]);
    for (std::uint32_t l : route.links) link_free_[l] = start + route.serialize;
    const SimTime end = start + route.latency + route.serialize;
    if (t.blocks) ++devices_[static_cast<std::size_t>(device_of(t.from_stage()))].sends_in_flight;
    result_.comm_time += route.serialize * static_cast<SimTime>(route.links.size());
    std::uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      in_flight_[slot] = t;
    } else {
      slot = static_cast<std::uint32_t>(in_flight_.size());
      in_flight_.push_back(t);
    }
    queue_.push(end, kTransferDone, slot);
    if (listener_ != nullptr) {
      TransferRecord rec;
      rec.id = next_transfer_id_;
      rec.kind = t.kind;
      rec.src_stage = t.from_stage();
      rec.dst_stage = t.to_stage();
      rec.micro_batch = t.micro_batch;
      rec.src_device = device_of(rec.src_stage);
      rec.dst_device = device_of(rec.dst_stage);
      rec.route = route_id(t.kind, t.boundary);
      rec.bytes = stages_[static_cast<std::size_t>(t.boundary)].output_bytes;
      rec.start = start;
      rec.serialize = route.serialize;
      rec.end = end;
      listener_->on_transfer(rec);
    }
    ++next_transfer_id_;
  }

  void transfer_done(std::uint32_t slot) {
    const InFlight t = in_flight_[slot];
    free_slots_.push_back(slot);
    arrive(t);
    if (t.blocks) {
      const int from = device_of(t.from_stage());
      --devices_[static_cast<std::size_t>(from)].sends_in_flight;
      try_start(from);
    }
  }

  void arrive(const InFlight& t) {
    if (t.kind == TransferKind::kActivation) {
      act_ready_[cell(t.boundary + 1, t.micro_batch)] = 1;
    } else {
      grad_ready_[cell(t.boundary, t.micro_batch)] = 1;
    }
    try_start(device_of(t.to_stage()));
  }

  const Schedule& sched_;
  const std::vector<StageCost>& stages_;
  const Cluster& cluster_;
  SimListener* listener_;
  int K_;
  int M_;
  bool split_;                        // B is the input gradient, W the weight gradient
  P2pMode p2p_;                       // which sends each device waits for (send_blocks)
  std::vector<SteadyState> steady_;   // per device
  std::array<KindRules, 5> rules_{};  // per OpKind
  SimTime now_ = 0;
  EventQueue queue_;
  std::vector<DeviceState> devices_;
  std::vector<SimTime> link_free_;
  std::vector<std::uint8_t> act_ready_;     // input of stage s for micro-batch m has arrived
  std::vector<std::uint8_t> grad_ready_;    // output gradient of stage s for m has arrived
  std::vector<int> grads_left_;             // per stage: micro-batches whose gradient is due
  std::vector<std::uint8_t> reduced_;       // per stage: all-reduced, or no replicas
  std::vector<int> scatters_left_;          // per stage: ZeRO-2/3 reduce-scatters still due
  std::vector<SimTime> replica_link_free_;  // per device: when its link to the replicas is
  std::unordered_map<std::int64_t, std::uint32_t> local_links_;  // Cluster link -> index
  std::vector<Route> fwd_routes_;
  std::vector<Route> bwd_routes_;
  std::vector<InFlight> in_flight_;
  std::vector<std::uint32_t> free_slots_;
  std::uint64_t next_transfer_id_ = 0;
  int core_limit_ = 0;  // > 0: devices share this many cores
  int cores_in_use_ = 0;
  std::deque<int> core_waiters_;
  EngineResult result_;
};

}  // namespace

EngineResult run_engine(const Schedule& schedule, const std::vector<StageCost>& stages,
                        const Cluster& cluster, SimListener* listener) {
  return Engine(schedule, stages, cluster, listener).run();
}

}  // namespace pipescope
