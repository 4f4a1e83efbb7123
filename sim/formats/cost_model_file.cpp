#include "sim/formats/cost_model_file.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "costmodels/check.h"
#include "costmodels/model_families.h"
#include "sim/base/file_io.h"
#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"
#include "sim/formats/profile_io.h"
#include "sim/scenario/expert_groups.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A fitted parameter: a number within the registry's range.
double read_parameter(const json& v, const Where& w, const CalibrationParameter& p) {
  const std::string range =
      "a number from " + number_text(p.min) + " to " + number_text(p.max) + " (" + p.meaning + ")";
  if (!v.is_number()) w.fail("expected " + range + ", got " + type_of(v));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < p.min || d > p.max)
    w.fail("expected " + range + ", got " + describe(v));
  return d;
}

// A relative error of the fit: from 0 to 1e6 (a fit a million times off is a
// broken file, not a report).
double read_error(ObjectReader& r, std::string_view key) {
  const double e = r.number(key, NumberRange::kNonNegative);
  if (e > 1e6) r.fail(key, "expected a relative error from 0 to 1e+06, got " + describe(r.at(key)));
  return e;
}

}  // namespace

std::optional<double> CostModelFile::find(std::string_view name) const {
  for (const auto& [n, v] : parameters) {
    if (n == name) return v;
  }
  return std::nullopt;
}

CostModelFile cost_model_of(const KernelTable& table, const std::string& device) {
  CostModelFile f;
  f.device = device;
  for (const CalibrationParameter& p : calibration_parameters()) {
    f.parameters.emplace_back(p.name, table.*p.field);
  }
  return f;
}

json cost_model_to_json(const CostModelFile& file) {
  json params = json::object();
  for (const auto& [name, value] : file.parameters) params[name] = value;
  json doc = json::object();
  doc["format"] = kCostModelFormat;
  doc["version"] = kCostModelVersion;
  doc["model"] = "kernels";
  doc["device"] = file.device;
  doc["parameters"] = std::move(params);
  if (file.fit) {
    doc["fit"] = {{"measured", file.fit->measured},
                  {"rows", file.fit->rows},
                  {"rms_relative_error", file.fit->rms_relative_error},
                  {"max_relative_error", file.fit->max_relative_error},
                  {"partition", std::string(to_string(file.fit->partition))}};
  }
  return doc;
}

bool is_cost_model_document(const json& doc) {
  if (!doc.is_object()) return false;
  const auto it = doc.find("format");
  return it != doc.end() && it->is_string() && it->get<std::string>() == kCostModelFormat;
}

CostModelFile cost_model_from_json(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  const json* format = top.find("format");
  if (format == nullptr || !format->is_string() || format->get<std::string>() != kCostModelFormat) {
    top.fail("format", std::string("not a PipeScope cost-model file (expected \"") +
                           kCostModelFormat + "\")");
  }
  const std::int64_t version = top.integer("version", kPositiveInt);
  if (version != kCostModelVersion) {
    top.fail("version", "cost-model version " + std::to_string(version) +
                            " is not supported (this PipeScope reads version " +
                            std::to_string(kCostModelVersion) + ")");
  }
  const std::string model = top.string("model");
  if (model != "kernels") {
    top.fail("model", "unknown model '" + model +
                          "' (expected kernels: only the kernel-level model has fitted figures)");
  }
  CostModelFile f;
  f.device = top.string("device");
  if (f.device.empty()) top.fail("device", "expected a device name, got an empty string");
  ObjectReader params = top.object("parameters");
  for (const CalibrationParameter& p : calibration_parameters()) {
    f.parameters.emplace_back(p.name, read_parameter(params.at(p.name), params.where(p.name), p));
  }
  params.finish();
  if (auto fit = top.opt_object("fit")) {
    CostModelFit r;
    r.measured = fit->string("measured");
    r.rows = fit->integer("rows", kPositiveInt);
    r.rms_relative_error = read_error(*fit, "rms_relative_error");
    r.max_relative_error = read_error(*fit, "max_relative_error");
    // Files written before calibrate took --partition were all fitted so.
    r.partition = json_io::opt_choice(*fit, "partition", "partition method", parse_partition_method,
                                      kPartitionMethodNames)
                      .value_or(PartitionMethod::kOptimal);
    fit->finish();
    f.fit = std::move(r);
  }
  top.finish();
  return f;
}

void write_cost_model_file(const std::filesystem::path& path, const CostModelFile& file) {
  write_file_atomically(path, cost_model_to_json(file).dump(2) + "\n");
}

CostModelFile read_cost_model_file(const std::filesystem::path& path) {
  const std::string label = path.string();
  return cost_model_from_json(
      parse_json(read_input_file(path, label, kMaxDocumentBytes, "a cost-model file"), label),
      label);
}

void apply_cost_model(Scenario& scenario, const CostModelFile& file, const std::string& label) {
  Device& device = scenario.cluster.device;
  if (device.name != file.device) {
    throw ScenarioError(label, "device",
                        "the figures are for device '" + file.device +
                            "' but the scenario's device is '" + device.name +
                            "'; calibrate again on a scenario of that device");
  }
  if (!device.kernels.present) {
    throw ScenarioError(label, "model",
                        "device '" + device.name +
                            "' has no kernel table, so the kernels model cannot cost it (give "
                            "\"kernels\" in the scenario's device)");
  }
  for (const CalibrationParameter& p : calibration_parameters()) {
    if (const std::optional<double> v = file.find(p.name)) device.kernels.*p.field = *v;
  }
  scenario.cluster.cost_model = CostModelKind::kKernels;
}

CostModelArgument read_cost_model_argument(const std::string& arg) {
  CostModelArgument out;
  out.arg = arg;
  if ((out.kind = parse_cost_model_kind(arg))) return out;
  // Read once: the argument may be a pipe or a process substitution.
  const json doc = parse_json(
      read_input_file(arg, arg, kMaxDocumentBytes, "a profile or a cost-model file"), arg);
  if (is_cost_model_document(doc)) {
    out.file = cost_model_from_json(doc, arg);
    return out;
  }
  const auto format = doc.is_object() ? doc.find("format") : doc.end();
  if (doc.is_object() &&
      (format == doc.end() || !format->is_string() || *format != "pipescope-profile")) {
    throw ScenarioError(arg, "format",
                        std::string("not a PipeScope profile or cost-model file (expected "
                                    "\"pipescope-profile\" or \"") +
                            kCostModelFormat + "\")");
  }
  out.profile = std::make_shared<const Profile>(profile_from_json(doc, arg));
  return out;
}

void apply_cost_model_argument(Scenario& scenario, const CostModelArgument& arg) {
  if (arg.kind) {
    if (*arg.kind == CostModelKind::kKernels && !scenario.cluster.device.kernels.present) {
      throw std::invalid_argument(
          "--cost-model kernels needs the device's kernel table: device '" +
          scenario.cluster.device.name +
          "' has none (give \"kernels\" in the scenario's device, or use --cost-model analytic)");
    }
    if (*arg.kind == CostModelKind::kAnalytic && scenario.model.transformer &&
        scenario.model.transformer->fp8) {
      throw std::invalid_argument(
          "--cost-model analytic cannot cost the model's FP8 GEMMs (\"fp8\": true needs the "
          "kernels model)");
    }
    scenario.cluster.cost_model = *arg.kind;
    return;
  }
  if (arg.file) {
    apply_cost_model(scenario, *arg.file, arg.arg);
    return;
  }
  PS_CHECK(arg.profile != nullptr,
           "a cost-model argument is a name, a cost-model file or a profile");
  apply_profile(scenario, arg.profile, arg.arg);
}

void apply_cost_model_argument(Scenario& scenario, const std::string& arg) {
  apply_cost_model_argument(scenario, read_cost_model_argument(arg));
  // DeepEP's dispatch is priced on GPUs timed kernel by kernel: a cost model
  // that times them otherwise would drop it.
  if (const std::string problem = moe_dispatcher_problem(scenario); !problem.empty()) {
    throw std::invalid_argument("--cost-model " + arg + ": training.moe_dispatcher: " + problem);
  }
}

}  // namespace pipescope
