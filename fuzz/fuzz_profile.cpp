// Profile JSON, read as `--cost-model` and `compare --profile` read it
// (parse_json, profile_from_json). A profile that loads must survive being
// written and read again (write_profile_file's document); it is then applied to
// the scenarios the seed profiles were measured on (apply_profile) and, where it
// covers their layers, simulated.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "sim/base/json_reader.h"
#include "sim/formats/profile_io.h"
#include "sim/scenario/scenario_io.h"

using namespace pipescope;

namespace {

// scenarios/cpu-small.json, and the same with a small MLP (the seeds
// profile-cpu-small.json and profile-mlp.json measure these).
constexpr const char* kCpuSmall = R"({
  "model": { "family": "transformer", "layers": 4, "d_model": 64, "heads": 4,
             "seq_len": 32, "vocab": 64, "dtype": "fp32" },
  "cluster": { "preset": "cpu", "devices": 2 },
  "training": { "global_batch": 16, "micro_batches": 4, "optimizer": "adam", "remat": true }
})";
constexpr const char* kCpuMlp = R"({
  "model": { "family": "mlp", "layers": 3, "d_model": 16 },
  "cluster": { "preset": "cpu", "devices": 2 },
  "training": { "global_batch": 16, "micro_batches": 4, "optimizer": "adam", "remat": true }
})";

void apply_and_simulate(const std::shared_ptr<const Profile>& profile, const char* scenario_json) {
  Scenario scenario = parse_scenario_text(scenario_json, "scenario.json");
  try {
    apply_profile(scenario, profile, fuzz::kLabel);
  } catch (const ScenarioError&) {
    return;  // a layer of the scenario was not measured, or the step would be too long
  }
  fuzz::simulate_if_small(scenario);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const Profile> profile;
  const bool refused = fuzz::refuses([&] {
    profile = std::make_shared<const Profile>(
        profile_from_json(json_io::parse_json(text, fuzz::kLabel), fuzz::kLabel));
  });
  if (refused) return 0;
  const std::string written = profile_to_json(*profile).dump(2);
  try {
    (void)profile_from_json(json_io::parse_json(written, "written.json"), "written.json");
  } catch (const std::runtime_error& e) {
    fuzz::property_failed("a profile that loads, written again, loads", e.what());
  }
  apply_and_simulate(profile, kCpuSmall);
  apply_and_simulate(profile, kCpuMlp);
  return 0;
}
