#pragma once
// The human-readable report of one simulated step.

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/partition.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario.h"

namespace pipescope::cli {

// The device nearest its capacity, and what its peak holds ("weights 672
// MiB, gradients 672 MiB, optimizer 3.94 GiB, activations 1.99 GiB"), as the
// summary's Memory line and plan's give them; empty without devices.
struct FullestDevice {
  std::size_t device = 0;
  DeviceMetrics metrics;
  std::string parts;
};
std::optional<FullestDevice> fullest_device(const SimResult& result);

// Where the cut the scenario states came from: "--balance" when the flag
// gave it, else its field ("training.balance", ...); "" without one.
std::string cut_source(const Scenario& scenario, bool from_balance_flag);

// The layers of each of a run's stages: its cut, as --balance takes it.
std::vector<int> stage_balance(const SimResult& result);

// A given cut's step beside the one `method` cuts ("Given cut" and
// "PipeScope cut" lines, the difference relative to the given cut's step).
void print_cut_comparison(std::ostream& out, const SimResult& given, const SimResult& partitioned,
                          PartitionMethod method);

void print_summary(std::ostream& out, const Scenario& scenario, const SimResult& result,
                   std::string_view partition, int replicas = 1);

}  // namespace pipescope::cli
