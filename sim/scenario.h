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
// 2021), one forward one backward in the steady state.
enum class ScheduleKind { kGpipe, k1F1B };

std::string_view to_string(ScheduleKind k);
std::optional<ScheduleKind> parse_schedule(std::string_view name);  // "gpipe", "1f1b"
inline constexpr const char* kScheduleNames = "gpipe, 1f1b";

struct TrainingConfig {
  std::int64_t global_batch = 1;       // samples per optimizer step
  int micro_batches = 1;               // M; divides global_batch
  std::optional<Optimizer> optimizer;  // empty when bytes_per_param was given
  double bytes_per_param = 0.0;        // weights + gradients + optimizer state
  ScheduleKind schedule = ScheduleKind::kGpipe;
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
