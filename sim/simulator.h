#pragma once
// One simulated training step of a scenario: cost model -> partition -> schedule
// -> engine -> metrics, memory curves and timeline.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodels/cost_model.h"
#include "sim/metrics.h"
#include "sim/partition.h"
#include "sim/scenario.h"
#include "sim/schedule.h"
#include "sim/stage_costs.h"
#include "sim/timeline.h"

namespace pipescope {

enum class PartitionMethod { kUniform };
std::string_view to_string(PartitionMethod p);
std::optional<PartitionMethod> parse_partition_method(std::string_view name);  // "uniform"

// A choice that the scenario allows but that cannot run, e.g. more stages than
// devices. The message names the setting ("K", "M") and says why; when the bad
// value came from the scenario itself, scenario_field names its JSON path.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message, std::string scenario_field = "")
      : std::runtime_error(message), scenario_field_(std::move(scenario_field)) {}
  const std::string& scenario_field() const { return scenario_field_; }

 private:
  std::string scenario_field_;
};

// Stage x micro-batch pairs one simulation holds (its op lists and arrival
// tables grow with K x M): 2^27, far above what pipelines use.
inline constexpr std::int64_t kMaxStageMicroBatches = std::int64_t{1} << 27;

// What to simulate; unset fields come from the scenario (K defaults to the
// cluster's device count).
struct SimConfig {
  std::optional<int> stages;
  std::optional<int> micro_batches;
  std::optional<ScheduleKind> schedule;
  std::optional<bool> remat;
  PartitionMethod partition = PartitionMethod::kUniform;
  bool record_timeline = true;  // events and memory curves; off for sweeps
};

struct SimResult {
  int stages = 1;
  int micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  bool remat = false;
  std::int64_t micro_batch_size = 1;
  std::string cost_model;
  std::vector<StageCost> stage_costs;
  Metrics metrics;
  Timeline timeline;  // empty unless record_timeline
  std::int64_t compute_ops = 0;
  std::int64_t transfers = 0;
};

// Uses the analytic cost model of the scenario's device.
SimResult simulate(const Scenario& scenario, const SimConfig& config);
SimResult simulate(const Scenario& scenario, const SimConfig& config, const CostModel& cost);

}  // namespace pipescope
