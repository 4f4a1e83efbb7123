#pragma once
// A scenario: the model, the cluster and how it is trained. Loaded from JSON by
// scenario_io; the simulation core only sees this plain struct.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "costmodels/cluster.h"
#include "costmodels/model.h"
#include "costmodels/optimizer.h"

namespace pipescope {

// gpipe: fill-drain (Huang et al. 2019); 1f1b: PipeDream-Flush (Narayanan et al.
// 2021), one forward one backward in the steady state; zb-h1: Zero Bubble H1 (Qi
// et al. 2024), 1F1B with the backward split into B (input gradient) and W
// (weight gradient), the W deferred into what would be bubbles;
// interleaved-1f1b: Megatron-LM's 1F1B over v model chunks per device (Narayanan
// et al. 2021).
enum class ScheduleKind { kGpipe, k1F1B, kZbH1, kInterleaved1F1B };

std::string_view to_string(ScheduleKind k);
// "gpipe", "1f1b", "zb-h1", "interleaved-1f1b"
std::optional<ScheduleKind> parse_schedule(std::string_view name);
inline constexpr const char* kScheduleNames = "gpipe, 1f1b, zb-h1, interleaved-1f1b";
inline constexpr ScheduleKind kAllSchedules[] = {
    ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kInterleaved1F1B};

// Whether the schedule runs a backward as two ops, B (input gradient) and W
// (weight gradient).
constexpr bool splits_backward(ScheduleKind k) {
  return k == ScheduleKind::kZbH1;
}

// v when interleaving is asked for without saying how many chunks.
inline constexpr int kDefaultChunks = 2;

// Whether the schedule runs several model chunks per device (v = chunks > 1).
constexpr bool takes_chunks(ScheduleKind k) {
  return k == ScheduleKind::kInterleaved1F1B;
}

struct TrainingConfig {
  std::int64_t global_batch = 1;       // samples per optimizer step
  int micro_batches = 1;               // M; divides global_batch
  std::optional<Optimizer> optimizer;  // empty when bytes_per_param was given
  double bytes_per_param = 0.0;        // weights + gradients + optimizer state
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int chunks = 1;  // v, model chunks per device (interleaved-1f1b only; kDefaultChunks)
  bool remat = true;

  std::int64_t micro_batch_size() const { return global_batch / micro_batches; }
};

struct Scenario {
  std::string name;
  std::string notes;
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
};

}  // namespace pipescope
