#pragma once
// What happened when, on which device and lane. The same type describes a
// simulated and (later) a measured run, so traces, the GUI and comparisons treat
// both alike.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/schedule.h"
#include "sim/engine/sim_listener.h"

namespace pipescope {

// kTensor: the collectives of a tensor-parallel group (training.tensor_parallel)
// that an op runs among its group's devices, after its compute. kExpert: the
// all-to-alls of expert parallelism (training.expert_parallel) that an op's
// mixture-of-experts layers run among its expert group, after those.
// kContext: what the exchanges of context parallelism
// (training.context_parallel) add to an op: the ring's beyond the attention
// they overlap, the all-gather form's whole; after those.
enum class Lane : std::uint8_t {
  kCompute = 0,
  kSend = 1,
  kRecv = 2,
  kTensor = 3,
  kExpert = 4,
  kContext = 5
};
inline constexpr Lane kAllLanes[] = {Lane::kCompute, Lane::kSend,   Lane::kRecv,
                                     Lane::kTensor,  Lane::kExpert, Lane::kContext};
std::string_view to_string(Lane l);

enum class EventKind : std::uint8_t {
  kForward,
  kRecompute,
  kBackward,
  kWeight,
  kOptimizer,  // compute lane
  kActivation,
  kGradient,  // send and recv lanes
  // send lane: a stage's collective across data-parallel replicas (its
  // gradient all-reduce, or ZeRO's reduce-scatters and all-gathers)
  kAllReduce,
  // tensor lane: the tensor-parallel all-reduces of one op (F, R or B) of a
  // micro-batch, summed and drawn after the op's compute
  kTensorAllReduce,
  // expert lane: the expert-parallel dispatch and combine all-to-alls of one
  // op of a micro-batch, summed and drawn after its tensor-parallel ones
  kExpertAllToAll,
  // context lane: the exposed part of the context-parallel exchanges of one
  // op of a micro-batch, drawn after its expert-parallel ones
  kContextExchange,
};
inline constexpr EventKind kAllEventKinds[] = {
    EventKind::kForward,        EventKind::kRecompute,      EventKind::kBackward,
    EventKind::kWeight,         EventKind::kOptimizer,      EventKind::kActivation,
    EventKind::kGradient,       EventKind::kAllReduce,      EventKind::kTensorAllReduce,
    EventKind::kExpertAllToAll, EventKind::kContextExchange};
std::string_view to_string(EventKind k);
// Whether events of the kind belong to one micro-batch (not the optimizer step
// or the all-reduce, which cover all of them).
constexpr bool has_micro_batch(EventKind k) {
  return k != EventKind::kOptimizer && k != EventKind::kAllReduce;
}
// Whether events of the kind carry the bytes of their collective (the
// transfers carry theirs too, with their flow).
constexpr bool is_collective(EventKind k) {
  return k == EventKind::kAllReduce || k == EventKind::kTensorAllReduce ||
         k == EventKind::kExpertAllToAll || k == EventKind::kContextExchange;
}
EventKind event_kind(OpKind k);
EventKind event_kind(TransferKind k);

struct TimelineEvent {
  int device = 0;
  Lane lane = Lane::kCompute;
  EventKind kind = EventKind::kForward;
  int stage = 0;                      // the op's stage; for transfers the sending stage
  int micro_batch = 0;                // unused (0) for the optimizer step
  SimTime start = 0;                  // ns
  SimTime end = 0;                    // ns
  Bytes bytes = 0;                    // transfers only
  std::optional<int> peer_stage;      // transfers: the receiving stage
  std::optional<std::uint64_t> flow;  // transfers: shared by its send and recv events
  std::optional<int> route;           // transfers: index into Timeline::route_names
  // Measured compute ops: the worker thread's CPU time during the op, ns. Less
  // than end - start by what the OS or a hypervisor took away (steal).
  std::optional<SimTime> cpu_time;
  // kAllReduce events: which collective over the replicas.
  ReplicaCollective collective = ReplicaCollective::kAllReduce;
};

// The short name traces and the timeline view give an event: "F3", "R3", "B3",
// "W3", "optimizer", "act 3", "grad 3", "all-reduce" (or "reduce-scatter",
// "all-gather"), "tp 3".
std::string event_name(const TimelineEvent& e);

// Bytes in use on one device from `time` until the next point.
struct MemoryPoint {
  SimTime time = 0;
  Bytes bytes = 0;
};

struct Timeline {
  std::vector<std::string> device_names;
  std::vector<TimelineEvent> events;             // in the order they started
  std::vector<std::vector<MemoryPoint>> memory;  // per device; may be empty
  std::vector<std::string> route_names;          // index = route_id(), e.g. "0->host, host->1"
};

// Takes a run's timeline piece by piece as it happens, instead of holding it
// whole: the names first, then every event in the order the run reports it
// (each lane's in order of start for a simulated run), then the memory curves.
class TimelineSink {
 public:
  virtual ~TimelineSink() = default;
  virtual void begin(const std::vector<std::string>& device_names,
                     const std::vector<std::string>& route_names) = 0;
  virtual void event(const TimelineEvent& e) = 0;
  virtual void memory_point(int device, const MemoryPoint& point) = 0;
  virtual void end() = 0;
};

// The sink that keeps everything: fills a Timeline.
class TimelineCollector final : public TimelineSink {
 public:
  explicit TimelineCollector(Timeline& out) : out_(out) {}
  void begin(const std::vector<std::string>& device_names,
             const std::vector<std::string>& route_names) override;
  void event(const TimelineEvent& e) override { out_.events.push_back(e); }
  void memory_point(int device, const MemoryPoint& point) override;
  void end() override {}

 private:
  Timeline& out_;
};

// Records compute ops on the compute lane, and each transfer twice with its flow
// id: on the sender's send lane while its bytes leave (start to start +
// serialize) and on the receiver's recv lane while they land (end - serialize to
// end). Each event goes to `sink` as the engine reports it.
class TimelineRecorder final : public SimListener {
 public:
  explicit TimelineRecorder(TimelineSink& sink) : sink_(sink) {}
  void on_compute(int device, const Op& op, SimTime start, SimTime end) override;
  void on_transfer(const TransferRecord& transfer) override;
  void on_replica_collective(int device, int stage, ReplicaCollective what, Bytes bytes,
                             SimTime start, SimTime end) override;
  void on_tensor_collective(int device, const Op& op, Bytes bytes, SimTime start,
                            SimTime end) override;
  void on_expert_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                          SimTime end) override;
  void on_context_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                           SimTime end) override;

 private:
  TimelineSink& sink_;
};

// Fans one engine out to several listeners.
class ListenerList final : public SimListener {
 public:
  void add(SimListener* l) { listeners_.push_back(l); }
  void on_compute(int device, const Op& op, SimTime start, SimTime end) override {
    for (SimListener* l : listeners_) l->on_compute(device, op, start, end);
  }
  void on_transfer(const TransferRecord& transfer) override {
    for (SimListener* l : listeners_) l->on_transfer(transfer);
  }
  void on_replica_collective(int device, int stage, ReplicaCollective what, Bytes bytes,
                             SimTime start, SimTime end) override {
    for (SimListener* l : listeners_)
      l->on_replica_collective(device, stage, what, bytes, start, end);
  }
  void on_tensor_collective(int device, const Op& op, Bytes bytes, SimTime start,
                            SimTime end) override {
    for (SimListener* l : listeners_) l->on_tensor_collective(device, op, bytes, start, end);
  }
  void on_expert_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                          SimTime end) override {
    for (SimListener* l : listeners_) l->on_expert_exchange(device, op, bytes, start, end);
  }
  void on_context_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                           SimTime end) override {
    for (SimListener* l : listeners_) l->on_context_exchange(device, op, bytes, start, end);
  }

 private:
  std::vector<SimListener*> listeners_;
};

}  // namespace pipescope
