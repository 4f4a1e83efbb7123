#include "sim/plan/capacity.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"
#include "sim/engine/simulator.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// Far beyond any limit the scenario accepts; ends the doubling.
constexpr std::int64_t kLargestValue = std::int64_t{1} << 40;

struct Probe {
  bool fits = false;
  std::int64_t params = 0;
  // The partition problem of the value's K stages; none for a value that
  // gives no valid model.
  std::shared_ptr<const PartitionProblem> problem;
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

// The field the search grows and the shape it probes, fixed from the scenario
// as given and the request.
struct Search {
  Search(const nlohmann::json& d, const std::string& f, const CapacityRequest& r)
      : doc(d), file(f), request(r) {}
  const nlohmann::json& doc;
  const std::string& file;
  const CapacityRequest& request;
  std::string param;
  nlohmann::json::json_pointer pointer{};
  int micro_batches = 1;
  Remat remat = Remat::kAlways;
  ScheduleKind schedule = ScheduleKind::kGpipe;
  int chunks = 1;
  int model_stages = 1;  // K x chunks
};

// "model.layers" -> "/model/layers".
nlohmann::json::json_pointer pointer_to(const std::string& param) {
  std::string p = param;
  for (char& c : p) c = c == '.' ? '/' : c;
  return nlohmann::json::json_pointer("/" + p);
}

// The field must exist and hold an integer: the search sets it to other values.
void require_integer_field(const Search& s) {
  if (!s.doc.contains(s.pointer)) {
    throw ScenarioError(s.file, s.param,
                        "capacity grows an integer field of the scenario; this one is missing");
  }
  if (!s.doc.at(s.pointer).is_number_integer()) {
    throw ScenarioError(s.file, s.param,
                        "capacity grows an integer field; this one holds a " +
                            std::string(s.doc.at(s.pointer).type_name()));
  }
}

Search prepare_search(const nlohmann::json& doc, const std::string& file,
                      const CapacityRequest& request) {
  Scenario base = parse_scenario(doc, file);
  if (request.adjust) request.adjust(base);
  Search s(doc, file, request);
  s.param =
      request.param.value_or(base.model.family == "amoebanet" ? "model.cells" : "model.layers");
  s.pointer = pointer_to(s.param);
  require_integer_field(s);
  if (request.stages > base.cluster.devices) {
    throw ConfigError("K=" + std::to_string(request.stages) +
                      " is more stages than the cluster's " +
                      base.cluster.devices_text(base.cluster.devices));
  }
  s.micro_batches = request.micro_batches.value_or(base.training.micro_batches);
  s.remat = request.remat.value_or(base.training.remat);
  // The scenario's schedule and chunks, under the rule simulate applies to them.
  s.schedule = base.training.schedule;
  s.chunks = base.training.chunks;
  const std::string shape =
      schedule_shape_problem(s.schedule, request.stages, s.micro_batches, s.chunks);
  if (!shape.empty()) throw ConfigError(shape);
  s.model_stages = request.stages * s.chunks;
  return s;
}

// The document with the field set to `value`.
nlohmann::json with_value(const Search& s, std::int64_t value) {
  nlohmann::json d = s.doc;
  d[s.pointer] = value;
  return d;
}

// Probes values, counting them in the result.
class Prober {
 public:
  Prober(const Search& search, CapacityResult& result) : s_(search), result_(result) {}

  // Whether `value` fits: decided without the least-memory cut (fits_memory).
  Probe operator()(std::int64_t value);
  // The least peak of a probed value's fullest device: its cut's.
  Bytes peak(const Probe& probe) const {
    return probe.problem ? min_peak_memory(*probe.problem) * s_.chunks : 0;
  }
  // Whether `value` was not probed because its model has too many layers.
  bool beyond_limit(std::int64_t value) const { return beyond_limit_.count(value) > 0; }

 private:
  const Search& s_;
  CapacityResult& result_;
  std::set<std::int64_t> beyond_limit_;  // values not probed: too many layers
};

Probe Prober::operator()(std::int64_t value) {
  ++result_.probes;
  Probe out;
  Scenario sc;
  try {
    sc = parse_scenario(with_value(s_, value), s_.file);
  } catch (const ScenarioError&) {
    return out;
  }
  if (s_.model_stages > static_cast<int>(sc.model.layers.size()) ||
      sc.training.global_batch % s_.micro_batches != 0) {
    return out;
  }
  if (sc.model.layers.size() > static_cast<std::size_t>(kCapacityLayerLimit)) {
    beyond_limit_.insert(value);
    return out;
  }
  if (s_.request.adjust) adjust_probe(s_.request.adjust, sc, s_.param, value);
  const std::unique_ptr<CostModel> cost = make_cost_model(sc);
  out.problem = std::make_shared<const PartitionProblem>(partition_problem(
      sc, *cost, s_.model_stages, s_.micro_batches, s_.remat, s_.schedule, s_.chunks));
  // With chunks a device holds v stages, each within its share of the memory
  // (partition_problem): v times the fullest bounds the device.
  out.fits = fits_memory(*out.problem, sc.cluster.device.memory_bytes / s_.chunks);
  out.params = sc.model.total_params();
  result_.memory_bytes = sc.cluster.device.memory_bytes;
  return out;
}

// Whether `value` gives a model of at least K stages' layers.
bool enough_layers(const Search& s, std::int64_t value) {
  try {
    return s.model_stages <=
           static_cast<int>(parse_scenario(with_value(s, value), s.file).model.layers.size());
  } catch (const ScenarioError&) {
    return false;
  }
}

// Values too small for K stages are not "does not fit": the search starts at
// the smallest value that gives K layers (validity grows with the value, like
// memory). Nothing when no value up to kLargestValue does.
std::optional<std::int64_t> smallest_valid_value(const Search& s) {
  std::int64_t hi = 1;
  while (!enough_layers(s, hi)) {
    if (hi >= kLargestValue) return std::nullopt;
    hi *= 2;
  }
  if (hi == 1) return hi;
  // The smallest v in (lo, hi] with enough layers, given hi has them and lo not.
  std::int64_t lo = hi / 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (enough_layers(s, mid) ? hi : lo) = mid;
  }
  return hi;
}

// Where the search ends: lo fits, hi is the first value seen not to fit.
struct Bracket {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  Probe best;    // the probe of lo
  Probe beyond;  // the probe of hi
};

// From a value that fits, doubling until one does not (or kLargestValue).
Bracket double_until_full(Prober& probe, std::int64_t start, const Probe& fits) {
  Bracket b{start, start, fits, Probe{}};
  for (;;) {
    if (b.hi >= kLargestValue) break;
    b.hi = std::min(b.hi * 2, kLargestValue);
    b.beyond = probe(b.hi);
    if (!b.beyond.fits) break;
    b.lo = b.hi;
    b.best = b.beyond;
  }
  return b;
}

void bisect(Prober& probe, Bracket& b) {
  while (b.hi - b.lo > 1) {
    const std::int64_t mid = b.lo + (b.hi - b.lo) / 2;
    const Probe p = probe(mid);
    if (p.fits) {
      b.lo = mid;
      b.best = p;
    } else {
      b.hi = mid;
      b.beyond = p;
    }
  }
}

void report_capacity(const Prober& probe, const Bracket& b, CapacityResult& result) {
  result.fits = true;
  // The first value that "did not fit" was never tried: lo is a lower bound.
  result.limited = probe.beyond_limit(b.hi);
  result.max_value = b.lo;
  result.params = b.best.params;
  result.peak_memory_bytes = probe.peak(b.best);
  result.fractional_value = static_cast<double>(b.lo);
  result.fractional_params = static_cast<double>(b.best.params);
  if (b.hi != b.lo + 1) return;
  const Bytes next_peak = probe.peak(b.beyond);
  if (next_peak <= result.peak_memory_bytes) return;
  result.next_peak_memory_bytes = next_peak;
  result.next_params = b.beyond.params;
  const double share = static_cast<double>(result.memory_bytes - result.peak_memory_bytes) /
                       static_cast<double>(next_peak - result.peak_memory_bytes);
  result.fractional_value += share;
  result.fractional_params += share * static_cast<double>(b.beyond.params - b.best.params);
}

}  // namespace

CapacityResult find_capacity(const nlohmann::json& doc, const std::string& file,
                             const CapacityRequest& request) {
  const Search search = prepare_search(doc, file, request);
  CapacityResult result;
  result.param = search.param;
  const std::optional<std::int64_t> start = smallest_valid_value(search);
  if (!start) return result;
  Prober probe(search, result);
  const Probe first = probe(*start);
  if (!first.fits) return result;
  Bracket b = double_until_full(probe, *start, first);
  bisect(probe, b);
  report_capacity(probe, b, result);
  return result;
}

}  // namespace pipescope
