// Plan JSON, read as `simulate --plan`, `run`, `compare` and `export` read it
// (parse_json, plan_from_json). A plan that loads must survive being written and
// read again (write_plan_file's document), and exports to every format when small.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "sim/base/json_reader.h"
#include "sim/export/plan_export.h"
#include "sim/formats/plan_io.h"

using namespace pipescope;

namespace {

// Exports list a line per stage and, for torch-pipelining, a cell per action.
constexpr std::int64_t kMaxExportStageMicroBatches = 4096;

void export_all(const Plan& plan) {
  if (std::int64_t{plan.model_stages()} * plan.micro_batches > kMaxExportStageMicroBatches) return;
  for (const ExportFormat format : {ExportFormat::kTorchGpipe, ExportFormat::kDeepSpeed,
                                    ExportFormat::kMegatron, ExportFormat::kTorchPipelining}) {
    try {
      (void)export_plan(plan, format);
    } catch (const std::invalid_argument&) {
      // A format that cannot express the plan says so.
    }
  }
  (void)plan.schedule_ops();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > fuzz::kMaxInput) return -1;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Plan plan;
  const bool refused = fuzz::refuses(
      [&] { plan = plan_from_json(json_io::parse_json(text, fuzz::kLabel), fuzz::kLabel); });
  if (refused) return 0;
  const std::string written = plan_to_json(plan).dump(2);
  try {
    (void)plan_from_json(json_io::parse_json(written, "written.json"), "written.json");
  } catch (const std::runtime_error& e) {
    fuzz::property_failed("a plan that loads, written again, loads", e.what());
  }
  export_all(plan);
  return 0;
}
