#pragma once
// The human-readable report of one simulated step.

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "sim/scenario.h"
#include "sim/simulator.h"

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

void print_summary(std::ostream& out, const Scenario& scenario, const SimResult& result,
                   std::string_view partition, int replicas = 1);

}  // namespace pipescope::cli
