#include "sim/capacity.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "sim/partition.h"
#include "sim/scenario_io.h"
#include "sim/schedule.h"
#include "sim/simulator.h"

namespace pipescope {
namespace {

// Far beyond any limit the scenario accepts; ends the doubling.
constexpr std::int64_t kLargestValue = std::int64_t{1} << 40;

struct Probe {
  bool fits = false;
  std::int64_t params = 0;
  std::int64_t peak = 0;  // 0: not a valid model for K stages
};

// request.adjust on the scenario of a probed value; its errors say which value
// it was, since the scenario as given passed.
void adjust_probe(const std::function<void(Scenario&)>& adjust, Scenario& sc,
                  const std::string& param, std::int64_t value) {
  const std::string at =
      " (at " + param + " = " + std::to_string(value) + ", a value capacity probed)";
  try {
    adjust(sc);
  } catch (const ScenarioError& e) {
    throw ScenarioError(e.file(), e.json_path(), e.message() + at);
  } catch (const ConfigError& e) {
    throw ConfigError(e.what() + at, e.scenario_field());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(e.what() + at);
  }
}

}  // namespace

CapacityResult find_capacity(const nlohmann::json& doc, const std::string& file,
                             const CapacityRequest& request) {
  const Scenario base = [&] {
    Scenario sc = parse_scenario(doc, file);
    if (request.adjust) request.adjust(sc);
    return sc;
  }();
  const std::string param =
      request.param.value_or(base.model.family == "amoebanet" ? "model.cells" : "model.layers");
  // The field must exist and hold an integer: the search sets it to other values.
  const nlohmann::json::json_pointer pointer("/" + [&] {
    std::string p = param;
    for (char& c : p) c = c == '.' ? '/' : c;
    return p;
  }());
  if (!doc.contains(pointer)) {
    throw ScenarioError(file, param,
                        "capacity grows an integer field of the scenario; this one is missing");
  }
  if (!doc.at(pointer).is_number_integer()) {
    throw ScenarioError(file, param,
                        "capacity grows an integer field; this one holds a " +
                            std::string(doc.at(pointer).type_name()));
  }
  if (request.stages > base.cluster.devices) {
    throw ConfigError("K=" + std::to_string(request.stages) +
                      " is more stages than the cluster's " + std::to_string(base.cluster.devices) +
                      " devices");
  }
  const int M = request.micro_batches.value_or(base.training.micro_batches);
  const Remat remat = request.remat.value_or(base.training.remat);
  // The scenario's schedule and chunks, under the rule simulate applies to them.
  const ScheduleKind schedule = base.training.schedule;
  const int chunks = base.training.chunks;
  const std::string shape = schedule_shape_problem(schedule, request.stages, M, chunks);
  if (!shape.empty()) throw ConfigError(shape);
  const int model_stages = request.stages * chunks;

  CapacityResult result;
  result.param = param;
  std::set<std::int64_t> beyond_limit;  // values not probed: too many layers
  const auto probe = [&](std::int64_t value) {
    ++result.probes;
    nlohmann::json d = doc;
    d[pointer] = value;
    Probe out;
    Scenario sc;
    try {
      sc = parse_scenario(d, file);
    } catch (const ScenarioError&) {
      return out;
    }
    if (model_stages > static_cast<int>(sc.model.layers.size()) ||
        sc.training.global_batch % M != 0) {
      return out;
    }
    if (sc.model.layers.size() > static_cast<std::size_t>(kCapacityLayerLimit)) {
      beyond_limit.insert(value);
      return out;
    }
    if (request.adjust) adjust_probe(request.adjust, sc, param, value);
    const std::unique_ptr<CostModel> cost = make_cost_model(sc);
    const PartitionProblem p =
        partition_problem(sc, *cost, model_stages, M, remat, schedule, chunks);
    // With chunks a device holds v stages, each within its share of the memory
    // (partition_problem): v times the fullest bounds the device.
    out.peak = min_peak_memory(p) * chunks;
    out.fits = out.peak <= sc.cluster.device.memory_bytes;
    out.params = sc.model.total_params();
    result.memory_bytes = sc.cluster.device.memory_bytes;
    return out;
  };

  // Values too small for K stages are not "does not fit": start at the smallest
  // value that gives K layers (validity grows with the value, like memory).
  const auto enough_layers = [&](std::int64_t value) {
    nlohmann::json d = doc;
    d[pointer] = value;
    try {
      return model_stages <= static_cast<int>(parse_scenario(d, file).model.layers.size());
    } catch (const ScenarioError&) {
      return false;
    }
  };
  // The smallest v in (lo, hi] with pred(v), given pred(hi) and not pred(lo).
  const auto first_true = [](std::int64_t lo, std::int64_t hi, const auto& pred) {
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (pred(mid) ? hi : lo) = mid;
    }
    return hi;
  };
  std::int64_t start = 1;
  while (!enough_layers(start)) {
    if (start >= kLargestValue) return result;
    start *= 2;
  }
  if (start > 1) start = first_true(start / 2, start, enough_layers);

  Probe best = probe(start);
  if (!best.fits) return result;
  std::int64_t lo = start;  // fits
  std::int64_t hi = start;  // the first value seen not to fit
  Probe beyond;             // the probe of hi
  for (;;) {
    if (hi >= kLargestValue) break;
    hi = std::min(hi * 2, kLargestValue);
    beyond = probe(hi);
    if (!beyond.fits) break;
    lo = hi;
    best = beyond;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    const Probe p = probe(mid);
    if (p.fits) {
      lo = mid;
      best = p;
    } else {
      hi = mid;
      beyond = p;
    }
  }
  result.fits = true;
  // The first value that "did not fit" was never tried: lo is a lower bound.
  result.limited = beyond_limit.count(hi) > 0;
  result.max_value = lo;
  result.params = best.params;
  result.peak_memory_bytes = best.peak;
  result.fractional_value = static_cast<double>(lo);
  result.fractional_params = static_cast<double>(best.params);
  if (hi == lo + 1 && beyond.peak > best.peak) {
    result.next_peak_memory_bytes = beyond.peak;
    result.next_params = beyond.params;
    const double share = static_cast<double>(result.memory_bytes - best.peak) /
                         static_cast<double>(beyond.peak - best.peak);
    result.fractional_value += share;
    result.fractional_params += share * static_cast<double>(beyond.params - best.params);
  }
  return result;
}

}  // namespace pipescope
