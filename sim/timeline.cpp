#include "sim/timeline.h"

namespace pipescope {

std::string_view to_string(Lane l) {
  switch (l) {
    case Lane::kCompute:
      return "compute";
    case Lane::kSend:
      return "send";
    case Lane::kRecv:
      return "recv";
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
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kActivation:
      return "activation";
    case EventKind::kGradient:
      return "gradient";
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
    case OpKind::kOptimizer:
      return EventKind::kOptimizer;
  }
  return EventKind::kForward;
}

EventKind event_kind(TransferKind k) {
  return k == TransferKind::kActivation ? EventKind::kActivation : EventKind::kGradient;
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
  out_.events.push_back(e);
}

void TimelineRecorder::on_transfer(const TransferHop& hop) {
  TimelineEvent e;
  e.kind = event_kind(hop.kind);
  e.stage = hop.src_stage;
  e.micro_batch = hop.micro_batch;
  e.start = hop.start;
  e.end = hop.end;
  e.bytes = hop.bytes;
  e.peer_stage = hop.dst_stage;
  e.flow = hop.transfer;
  e.link = hop.link;
  if (hop.hop == 0) {
    e.device = hop.src_device;
    e.lane = Lane::kSend;
    out_.events.push_back(e);
  }
  if (hop.hop == hop.hop_count - 1) {
    e.device = hop.dst_device;
    e.lane = Lane::kRecv;
    out_.events.push_back(e);
  }
}

}  // namespace pipescope
