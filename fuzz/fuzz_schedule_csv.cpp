// PyTorch pipelining's per-rank action CSV, read as `--schedule-file` reads it
// (parse_schedule_csv). A schedule that loads must load again from its action
// names (as a plan file stores them, custom_from_actions), builds for every remat
// mode (build_custom) and, when small, is simulated on a model with one layer
// per stage.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "sim/engine/custom_schedule.h"
#include "sim/scenario/scenario_io.h"

using namespace pipescope;

namespace {

// A model with a layer per stage, a device per rank and M micro-batches of 2.
Scenario scenario_for(const CustomSchedule& c) {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": { "family": "mlp", "d_model": 16 },
    "cluster": { "preset": "cpu" },
    "training": {}
  })");
  doc["model"]["layers"] = c.stages;
  doc["cluster"]["devices"] = c.devices();
  doc["training"]["global_batch"] = 2 * c.micro_batches;
  doc["training"]["micro_batches"] = c.micro_batches;
  return parse_scenario(doc, "scenario.json");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const CustomSchedule> custom;
  const bool refused = fuzz::refuses([&] {
    custom = std::make_shared<const CustomSchedule>(parse_schedule_csv(text, "schedule.csv"));
  });
  if (refused) return 0;
  try {
    (void)custom_from_actions(action_names(*custom), "plan.json", "actions");
  } catch (const std::runtime_error& e) {
    fuzz::property_failed("a schedule that loads loads again from its action names", e.what());
  }
  const std::int64_t cells = std::int64_t{custom->stages} * custom->micro_batches;
  if (cells > fuzz::kMaxSimStageMicroBatches || custom->devices() > fuzz::kMaxSimDevices) return 0;
  for (const Remat remat : kAllRemats) (void)build_custom(*custom, remat);
  SimConfig config;
  config.custom = custom;
  fuzz::simulate_if_small(scenario_for(*custom), config);
  return 0;
}
