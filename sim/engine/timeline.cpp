#include "sim/engine/timeline.h"

namespace pipescope {

std::string_view to_string(Lane l) {
  switch (l) {
    case Lane::kCompute:
      return "compute";
    case Lane::kSend:
      return "send";
    case Lane::kRecv:
      return "recv";
    case Lane::kTensor:
      return "tensor";
    case Lane::kExpert:
      return "expert";
    case Lane::kContext:
      return "context";
  }
  return "?";
}

std::string_view to_string(ReplicaCollective c) {
  switch (c) {
    case ReplicaCollective::kAllReduce:
      return "all-reduce";
    case ReplicaCollective::kReduceScatter:
      return "reduce-scatter";
    case ReplicaCollective::kAllGather:
      return "all-gather";
  }
  return "?";
}

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::kForward:
      return "forward";
    case EventKind::kRecompute:
      return "recompute";
    case EventKind::kBackward:
      return "backward";
    case EventKind::kWeight:
      return "weight";
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kActivation:
      return "activation";
    case EventKind::kGradient:
      return "gradient";
    case EventKind::kAllReduce:
      return "allreduce";
    case EventKind::kTensorAllReduce:
      return "tensor-allreduce";
    case EventKind::kExpertAllToAll:
      return "expert-alltoall";
    case EventKind::kContextExchange:
      return "context-exchange";
  }
  return "?";
}

EventKind event_kind(OpKind k) {
  switch (k) {
    case OpKind::kForward:
      return EventKind::kForward;
    case OpKind::kRecompute:
      return EventKind::kRecompute;
    case OpKind::kBackward:
      return EventKind::kBackward;
    case OpKind::kWeight:
      return EventKind::kWeight;
    case OpKind::kOptimizer:
      return EventKind::kOptimizer;
  }
  return EventKind::kForward;
}

EventKind event_kind(TransferKind k) {
  return k == TransferKind::kActivation ? EventKind::kActivation : EventKind::kGradient;
}

void TimelineCollector::begin(const std::vector<std::string>& device_names,
                              const std::vector<std::string>& route_names) {
  out_.device_names = device_names;
  out_.route_names = route_names;
}

void TimelineCollector::memory_point(int device, const MemoryPoint& point) {
  const auto d = static_cast<std::size_t>(device);
  if (out_.memory.size() <= d) out_.memory.resize(d + 1);
  out_.memory[d].push_back(point);
}

void TimelineRecorder::on_compute(int device, const Op& op, SimTime start, SimTime end) {
  TimelineEvent e;
  e.device = device;
  e.lane = Lane::kCompute;
  e.kind = event_kind(op.kind);
  e.stage = op.stage;
  e.micro_batch = op.micro_batch;
  e.start = start;
  e.end = end;
  sink_.event(e);
}

void TimelineRecorder::on_transfer(const TransferRecord& t) {
  TimelineEvent e;
  e.kind = event_kind(t.kind);
  e.stage = t.src_stage;
  e.micro_batch = t.micro_batch;
  e.bytes = t.bytes;
  e.peer_stage = t.dst_stage;
  e.flow = t.id;
  e.route = t.route;
  e.device = t.src_device;
  e.lane = Lane::kSend;
  e.start = t.start;
  e.end = t.start + t.serialize;
  sink_.event(e);
  e.device = t.dst_device;
  e.lane = Lane::kRecv;
  e.start = t.end - t.serialize;
  e.end = t.end;
  sink_.event(e);
}

void TimelineRecorder::on_replica_collective(int device, int stage, ReplicaCollective what,
                                             Bytes bytes, SimTime start, SimTime end) {
  TimelineEvent e;
  e.device = device;
  e.lane = Lane::kSend;
  e.kind = EventKind::kAllReduce;
  e.collective = what;
  e.stage = stage;
  e.bytes = bytes;
  e.start = start;
  e.end = end;
  sink_.event(e);
}

namespace {

// The collectives of one op, on their lane after its compute.
TimelineEvent op_exchange(int device, const Op& op, Lane lane, EventKind kind, Bytes bytes,
                          SimTime start, SimTime end) {
  TimelineEvent e;
  e.device = device;
  e.lane = lane;
  e.kind = kind;
  e.stage = op.stage;
  e.micro_batch = op.micro_batch;
  e.bytes = bytes;
  e.start = start;
  e.end = end;
  return e;
}

}  // namespace

void TimelineRecorder::on_tensor_collective(int device, const Op& op, Bytes bytes, SimTime start,
                                            SimTime end) {
  sink_.event(
      op_exchange(device, op, Lane::kTensor, EventKind::kTensorAllReduce, bytes, start, end));
}

void TimelineRecorder::on_expert_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                                          SimTime end) {
  sink_.event(
      op_exchange(device, op, Lane::kExpert, EventKind::kExpertAllToAll, bytes, start, end));
}

void TimelineRecorder::on_context_exchange(int device, const Op& op, Bytes bytes, SimTime start,
                                           SimTime end) {
  sink_.event(
      op_exchange(device, op, Lane::kContext, EventKind::kContextExchange, bytes, start, end));
}

std::string event_name(const TimelineEvent& e) {
  const std::string mb = std::to_string(e.micro_batch);
  switch (e.kind) {
    case EventKind::kForward:
      return "F" + mb;
    case EventKind::kRecompute:
      return "R" + mb;
    case EventKind::kBackward:
      return "B" + mb;
    case EventKind::kWeight:
      return "W" + mb;
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kActivation:
      return "act " + mb;
    case EventKind::kGradient:
      return "grad " + mb;
    case EventKind::kAllReduce:
      return std::string(to_string(e.collective));
    case EventKind::kTensorAllReduce:
      return "tp " + mb;
    case EventKind::kExpertAllToAll:
      return "ep " + mb;
    case EventKind::kContextExchange:
      return "cp " + mb;
  }
  return "?";
}

}  // namespace pipescope
