#include "sim/scenario/scenario.h"

namespace pipescope {

std::string_view to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kZbH1:
      return "zb-h1";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::kLoopedBfs:
      return "looped-bfs";
    case ScheduleKind::kZbV:
      return "zb-v";
    case ScheduleKind::kInterleavedZb:
      return "interleaved-zb";
    case ScheduleKind::kDualPipeV:
      return "dualpipe-v";
    case ScheduleKind::kCustom:
      return "custom";
  }
  return "unknown";
}

std::optional<ScheduleKind> parse_schedule(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGpipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "zb-h1") return ScheduleKind::kZbH1;
  if (name == "interleaved-1f1b") return ScheduleKind::kInterleaved1F1B;
  if (name == "looped-bfs") return ScheduleKind::kLoopedBfs;
  if (name == "zb-v") return ScheduleKind::kZbV;
  if (name == "interleaved-zb") return ScheduleKind::kInterleavedZb;
  if (name == "dualpipe-v") return ScheduleKind::kDualPipeV;
  if (name == "custom") return ScheduleKind::kCustom;
  return std::nullopt;
}

std::string chunked_schedule_names() {
  std::string out;
  for (const ScheduleKind k : kAllSchedules) {
    if (takes_chunks(k)) out += (out.empty() ? "" : ", ") + std::string(to_string(k));
  }
  return out;
}

std::string_view to_string(Remat r) {
  switch (r) {
    case Remat::kNever:
      return "never";
    case Remat::kAlways:
      return "always";
    case Remat::kExceptLast:
      return "except-last";
    case Remat::kSelective:
      return "selective";
  }
  return "unknown";
}

std::string_view remat_label(Remat r) {
  switch (r) {
    case Remat::kNever:
      return "off";
    case Remat::kAlways:
      return "on";
    case Remat::kExceptLast:
      return "except-last";
    case Remat::kSelective:
      return "selective";
  }
  return "unknown";
}

std::optional<Remat> parse_remat(std::string_view name) {
  if (name == "always" || name == "on") return Remat::kAlways;
  if (name == "never" || name == "off") return Remat::kNever;
  if (name == "except-last") return Remat::kExceptLast;
  if (name == "selective") return Remat::kSelective;
  return std::nullopt;
}

std::string_view to_string(Checkpoint c) {
  return c == Checkpoint::kLayer ? "layer" : "stage";
}

std::string_view checkpoint_label(Remat r, Checkpoint c) {
  return rebuilds_layer_by_layer(r, c) ? " (layer by layer)" : "";
}

std::string_view to_string(ContextExchange c) {
  switch (c) {
    case ContextExchange::kAllGather:
      return "all_gather";
    case ContextExchange::kAllToAll:
      return "a2a";
    case ContextExchange::kP2p:
      break;
  }
  return "p2p";
}

std::optional<ContextExchange> parse_context_exchange(std::string_view name) {
  if (name == "p2p") return ContextExchange::kP2p;
  if (name == "all_gather") return ContextExchange::kAllGather;
  if (name == "a2a") return ContextExchange::kAllToAll;
  return std::nullopt;
}

std::string_view to_string(MoeDispatcher d) {
  return d == MoeDispatcher::kDeepEp ? "deepep" : "alltoall";
}

std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view name) {
  if (name == "alltoall") return MoeDispatcher::kAllToAll;
  if (name == "deepep") return MoeDispatcher::kDeepEp;
  return std::nullopt;
}

std::optional<Checkpoint> parse_checkpoint(std::string_view name) {
  if (name == "stage") return Checkpoint::kStage;
  if (name == "layer") return Checkpoint::kLayer;
  return std::nullopt;
}

}  // namespace pipescope
