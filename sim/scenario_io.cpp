// Scenario JSON -> Scenario. Validation walks the document with ObjectReader, which
// remembers every key it was asked for: whatever else an object holds is a typo or a
// field of another form, and is reported with the keys that would have been read.

#include "sim/scenario_io.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/device.h"
#include "costmodels/model_families.h"
#include "sim/scenario_limits.h"

namespace pipescope {

using nlohmann::json;

namespace {

std::string compose(const std::string& file, const std::string& path, const std::string& message) {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// A value's place: the file and its dotted JSON path ("model.layers[2].name").
struct Where {
  const std::string& file;
  std::string path;

  [[noreturn]] void fail(const std::string& message) const {
    throw ScenarioError(file, path, message);
  }
  Where key(std::string_view k) const {
    return {file, path.empty() ? std::string(k) : path + "." + std::string(k)};
  }
  Where index(std::size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
};

// A value of the wrong type is named by its type ("got string"), a number out of range
// by its value ("got -3").
std::string type_of(const json& v) {
  return v.type_name();
}
std::string describe(const json& v) {
  return v.is_number() ? v.dump() : type_of(v);
}

struct IntRange {
  std::int64_t min = 0;  // 0 or 1
  std::int64_t max = 0;
};
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr IntRange kPositiveInt{1, kInt64Max};
constexpr IntRange kNonNegativeInt{0, kInt64Max};
// Counts held in `int`, and model dimensions, which the families multiply together.
constexpr IntRange kPositiveSmallInt{1, std::numeric_limits<int>::max()};

// Layers and devices each become entries in per-layer and per-device tables.
constexpr IntRange kLayerCount{1, 1 << 20};
constexpr IntRange kDeviceCount{1, 1 << 20};

enum class NumberRange { kPositive, kNonNegative, kFraction };

std::int64_t as_int(const json& v, const Where& w, IntRange r) {
  const std::string expected = r.min > 0 ? "a positive integer" : "a non-negative integer";
  const std::string wrong = "expected " + expected + ", got " + describe(v);
  const std::string too_large =
      "expected " + expected + " no larger than " + std::to_string(r.max) + ", got " + describe(v);
  std::int64_t value = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(r.max)) w.fail(too_large);
    value = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    // Sizes are often written as 16e9, which JSON parsers read as floats; accept
    // those that are exact integers.
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d || d < static_cast<double>(r.min)) w.fail(wrong);
    if (d >= 0x1p63) w.fail(too_large);
    value = static_cast<std::int64_t>(d);
  } else {
    w.fail(wrong);
  }
  if (value < r.min) w.fail(wrong);
  if (value > r.max) w.fail(too_large);
  return value;
}

double as_number(const json& v, const Where& w, NumberRange r) {
  const char* expected = r == NumberRange::kPositive      ? "a positive number"
                         : r == NumberRange::kNonNegative ? "a non-negative number"
                                                          : "a number in (0, 1]";
  if (!v.is_number()) w.fail(std::string("expected ") + expected + ", got " + type_of(v));
  const double d = v.get<double>();
  const bool ok = std::isfinite(d) && (r == NumberRange::kPositive      ? d > 0.0
                                       : r == NumberRange::kNonNegative ? d >= 0.0
                                                                        : d > 0.0 && d <= 1.0);
  if (!ok) w.fail(std::string("expected ") + expected + ", got " + describe(v));
  return d;
}

std::string as_string(const json& v, const Where& w) {
  if (!v.is_string()) w.fail("expected a string, got " + type_of(v));
  return v.get<std::string>();
}

bool as_bool(const json& v, const Where& w) {
  if (!v.is_boolean()) w.fail("expected true or false, got " + type_of(v));
  return v.get<bool>();
}

// "A JSON object at a path": typed accessors that report the path of a bad value,
// and finish(), which reports any key nobody asked for.
class ObjectReader {
 public:
  ObjectReader(const json& value, Where where) : value_(value), where_(std::move(where)) {
    if (!value_.is_object()) where_.fail("expected an object, got " + type_of(value_));
  }

  Where where(std::string_view key) const { return where_.key(key); }
  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    where(key).fail(message);
  }
  [[noreturn]] void fail_here(const std::string& message) const { where_.fail(message); }

  const json* find(std::string_view key) {
    if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.emplace_back(key);
    const auto it = value_.find(std::string(key));
    return it == value_.end() ? nullptr : &*it;
  }
  const json& at(std::string_view key) {
    const json* v = find(key);
    if (v == nullptr) fail(key, "missing required key");
    return *v;
  }

  std::string string(std::string_view key) { return as_string(at(key), where(key)); }
  std::optional<std::string> opt_string(std::string_view key) {
    const json* v = find(key);
    return v ? std::optional(as_string(*v, where(key))) : std::nullopt;
  }
  std::int64_t integer(std::string_view key, IntRange r) { return as_int(at(key), where(key), r); }
  std::optional<std::int64_t> opt_integer(std::string_view key, IntRange r) {
    const json* v = find(key);
    return v ? std::optional(as_int(*v, where(key), r)) : std::nullopt;
  }
  double number(std::string_view key, NumberRange r) { return as_number(at(key), where(key), r); }
  std::optional<double> opt_number(std::string_view key, NumberRange r) {
    const json* v = find(key);
    return v ? std::optional(as_number(*v, where(key), r)) : std::nullopt;
  }
  std::optional<bool> opt_bool(std::string_view key) {
    const json* v = find(key);
    return v ? std::optional(as_bool(*v, where(key))) : std::nullopt;
  }
  ObjectReader object(std::string_view key) { return ObjectReader(at(key), where(key)); }
  std::optional<ObjectReader> opt_object(std::string_view key) {
    const json* v = find(key);
    return v ? std::optional(ObjectReader(*v, where(key))) : std::nullopt;
  }

  void finish() const {
    for (const auto& item : value_.items()) {
      if (std::find(asked_.begin(), asked_.end(), item.key()) == asked_.end()) {
        fail(item.key(),
             "unknown key '" + item.key() + "' (expected one of: " + join(asked_) + ")");
      }
    }
  }

 private:
  const json& value_;
  Where where_;
  std::vector<std::string> asked_;
};

// An optional name from a fixed set (dtype, optimizer, ...), parsed by `parse`.
template <class Parse>
auto opt_choice(ObjectReader& r, std::string_view key, const std::string& what, Parse parse,
                const std::string& known) -> decltype(parse(std::string_view{})) {
  const std::optional<std::string> name = r.opt_string(key);
  if (!name) return std::nullopt;
  const auto value = parse(*name);
  if (!value) r.fail(key, "unknown " + what + " '" + *name + "' (expected one of: " + known + ")");
  return value;
}

DType read_dtype(ObjectReader& m) {
  return opt_choice(m, "dtype", "dtype", parse_dtype, "fp32, bf16, fp16").value_or(DType::kFp32);
}

ModelSpec read_transformer(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("transformer");
  TransformerParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kPositiveSmallInt);
  p.d_ff = m.opt_integer("d_ff", kPositiveSmallInt).value_or(4 * p.d_model);
  p.heads = m.integer("heads", kPositiveSmallInt);
  p.seq_len = m.integer("seq_len", kPositiveSmallInt);
  p.vocab = m.integer("vocab", kPositiveSmallInt);
  p.dtype = read_dtype(m);
  const auto parse_positions = [](std::string_view v) -> std::optional<bool> {
    if (v == "sinusoidal") return false;
    if (v == "learned") return true;
    return std::nullopt;
  };
  p.learned_positions =
      opt_choice(m, "positions", "positions", parse_positions, "sinusoidal, learned")
          .value_or(false);
  if (p.d_model % p.heads != 0) {
    m.fail("heads",
           std::to_string(p.heads) + " heads do not divide d_model " + std::to_string(p.d_model));
  }
  return make_transformer(p, name);
}

ModelSpec read_mlp(ObjectReader& m) {
  const std::string name = m.opt_string("name").value_or("mlp");
  MlpParams p;
  p.layers = static_cast<int>(m.integer("layers", kLayerCount));
  p.d_model = m.integer("d_model", kPositiveSmallInt);
  p.d_hidden = m.opt_integer("d_hidden", kPositiveSmallInt).value_or(4 * p.d_model);
  p.classes = m.opt_integer("classes", kPositiveSmallInt).value_or(p.d_model);
  p.dtype = read_dtype(m);
  return make_mlp(p, name);
}

LayerSpec read_layer(ObjectReader l) {
  LayerSpec layer;
  layer.name = l.string("name");
  layer.fwd_flops = l.number("fwd_flops", NumberRange::kNonNegative);
  layer.bwd_flops =
      l.opt_number("bwd_flops", NumberRange::kNonNegative).value_or(2.0 * layer.fwd_flops);
  layer.params = l.integer("params", kNonNegativeInt);
  layer.out_bytes = l.integer("out_bytes", kNonNegativeInt);
  layer.stash_bytes = l.integer("stash_bytes", kNonNegativeInt);
  l.finish();
  return layer;
}

ModelSpec read_layer_list(ObjectReader& m) {
  ModelSpec spec;
  spec.name = m.opt_string("name").value_or("layers");
  const Where list_at = m.where("layers");
  const json& list = m.at("layers");
  if (!list.is_array()) list_at.fail("expected an array of layers, got " + type_of(list));
  if (list.empty()) list_at.fail("expected at least one layer, got an empty array");
  std::map<std::string, std::size_t> index_of_name;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Where at = list_at.index(i);
    LayerSpec layer = read_layer(ObjectReader(list[i], at));
    const auto [it, inserted] = index_of_name.emplace(layer.name, i);
    if (!inserted) {
      at.key("name").fail("duplicate layer name '" + layer.name + "' (also used by " +
                          list_at.index(it->second).path + ")");
    }
    spec.layers.push_back(std::move(layer));
  }
  spec.dtype = read_dtype(m);
  spec.input_bytes = m.opt_integer("input_bytes", kNonNegativeInt).value_or(0);
  spec.tokens_per_sample = m.opt_integer("tokens_per_sample", kPositiveInt).value_or(1);
  return spec;
}

ModelSpec read_model(ObjectReader m) {
  const std::string family = m.string("family");
  ModelSpec spec;
  if (family == "transformer" || family == "mlp") {
    try {
      spec = family == "transformer" ? read_transformer(m) : read_mlp(m);
    } catch (const std::overflow_error& e) {
      m.fail_here(e.what());
    }
  } else if (family == "layers") {
    spec = read_layer_list(m);
  } else {
    m.fail("family", "unknown family '" + family + "' (expected one of: transformer, mlp, layers)");
  }
  spec.family = family;
  m.finish();
  return spec;
}

EfficiencyCurve read_efficiency(const json& v, const Where& w) {
  EfficiencyCurve curve;
  if (v.is_number()) {
    curve.max_efficiency = as_number(v, w, NumberRange::kFraction);
    return curve;
  }
  if (!v.is_object()) {
    w.fail("expected a number in (0, 1] or an object {max, half_flops}, got " + type_of(v));
  }
  ObjectReader e(v, w);
  curve.max_efficiency = e.number("max", NumberRange::kFraction);
  curve.half_flops = e.number("half_flops", NumberRange::kNonNegative);
  e.finish();
  return curve;
}

Device read_device(ObjectReader d) {
  Device dev;
  dev.name = d.opt_string("name").value_or("custom");
  dev.peak_flops_fp32 = d.number("peak_flops", NumberRange::kPositive);
  dev.peak_flops_16bit =
      d.opt_number("peak_flops_16bit", NumberRange::kPositive).value_or(dev.peak_flops_fp32);
  dev.memory_bytes = d.integer("memory_bytes", kPositiveInt);
  dev.mem_bandwidth = d.number("mem_bandwidth", NumberRange::kPositive);
  dev.op_overhead_s = d.opt_number("op_overhead_s", NumberRange::kNonNegative).value_or(0.0);
  if (const json* e = d.find("efficiency"))
    dev.efficiency = read_efficiency(*e, d.where("efficiency"));
  d.finish();
  return dev;
}

Interconnect read_interconnect(ObjectReader ic) {
  Interconnect out;
  ic.at("topology");  // reports a missing key
  out.topology =
      *opt_choice(ic, "topology", "topology", parse_topology, "all-to-all, pcie-host, ring");
  out.bandwidth = ic.number("bandwidth", NumberRange::kPositive);
  out.latency_s = ic.number("latency_s", NumberRange::kNonNegative);
  ic.finish();
  return out;
}

std::string preset_names() {
  std::vector<std::string> names;
  for (const DevicePreset& p : device_presets()) names.push_back(p.device.name);
  return join(names);
}

Cluster read_cluster(ObjectReader c) {
  Cluster cluster;
  cluster.devices = static_cast<int>(c.integer("devices", kDeviceCount));
  const std::optional<std::string> preset_name = c.opt_string("preset");
  const bool has_device = c.find("device") != nullptr;
  if (preset_name) {
    if (has_device) c.fail("device", "'device' cannot be given together with 'preset'");
    const std::optional<DevicePreset> preset = find_device_preset(*preset_name);
    if (!preset) {
      c.fail("preset",
             "unknown preset '" + *preset_name + "' (expected one of: " + preset_names() + ")");
    }
    cluster.name = *preset_name;
    cluster.device = preset->device;
    cluster.interconnect = preset->interconnect;
    if (auto ic = c.opt_object("interconnect")) cluster.interconnect = read_interconnect(*ic);
  } else {
    if (!has_device) c.fail_here("expected a 'preset', or a 'device' and an 'interconnect'");
    cluster.device = read_device(c.object("device"));
    cluster.name = cluster.device.name;
    cluster.interconnect = read_interconnect(c.object("interconnect"));
  }
  c.finish();
  return cluster;
}

TrainingConfig read_training(ObjectReader t, DType dtype) {
  TrainingConfig cfg;
  cfg.global_batch = t.integer("global_batch", kPositiveInt);
  cfg.micro_batches =
      static_cast<int>(t.opt_integer("micro_batches", kPositiveSmallInt).value_or(1));
  if (cfg.global_batch % cfg.micro_batches != 0) {
    t.fail("micro_batches", std::to_string(cfg.micro_batches) + " does not divide global_batch " +
                                std::to_string(cfg.global_batch));
  }
  const std::optional<Optimizer> optimizer =
      opt_choice(t, "optimizer", "optimizer", parse_optimizer, "sgd, momentum, rmsprop, adam");
  const std::optional<double> given_bytes = t.opt_number("bytes_per_param", NumberRange::kPositive);
  if (optimizer && given_bytes) {
    t.fail("bytes_per_param", "'bytes_per_param' cannot be given together with 'optimizer'");
  }
  if (given_bytes) {
    cfg.bytes_per_param = *given_bytes;
  } else {
    cfg.optimizer = optimizer.value_or(Optimizer::kAdam);
    cfg.bytes_per_param = bytes_per_param(*cfg.optimizer, dtype);
  }
  cfg.schedule =
      opt_choice(t, "schedule", "schedule", parse_schedule, "gpipe").value_or(ScheduleKind::kGpipe);
  cfg.remat = t.opt_bool("remat").value_or(true);
  t.finish();
  return cfg;
}

std::string default_name(const std::string& file) {
  const std::string stem = std::filesystem::path(file).stem().string();
  return stem.empty() ? "scenario" : stem;
}

// Reports where a parse failed. nlohmann's own message has a line and column only for
// syntax errors, not for a number that overflows a double (1e400), so a second pass
// collects the position of either through the SAX interface.
class ErrorLocator : public nlohmann::json_sax<json> {
 public:
  std::size_t position = 0;
  std::string reason;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string&, const json::exception& ex) override {
    position = pos;
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: "
    // since the position is reported separately.
    std::string_view text = ex.what();
    if (const auto p = text.find("] "); p != std::string_view::npos) text.remove_prefix(p + 2);
    if (text.starts_with("parse error")) {
      if (const auto p = text.find(": "); p != std::string_view::npos) text.remove_prefix(p + 2);
    }
    reason = text;
    return false;
  }
};

json parse_json(const std::string& text, const std::string& file) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded()) return doc;
  ErrorLocator locator;
  json::sax_parse(text, &locator);
  // `position` counts the characters the lexer read, so the offending one is at index
  // position - 1 (the end of the text for an unexpected end of input).
  const std::size_t index = std::min(locator.position > 0 ? locator.position - 1 : 0, text.size());
  const std::string_view before = std::string_view(text).substr(0, index);
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const std::size_t line_start = before.rfind('\n');
  const std::size_t column = line_start == std::string_view::npos ? index + 1 : index - line_start;
  throw ScenarioError(file, "",
                      "malformed JSON at line " + std::to_string(line) + ", column " +
                          std::to_string(column) + ": " + locator.reason);
}

std::optional<std::size_t> parse_index(const std::string& segment) {
  std::size_t value = 0;
  const char* end = segment.data() + segment.size();
  const auto [ptr, ec] = std::from_chars(segment.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// "model.layers.2.fwd_flops", or the form errors print, "model.layers[2].fwd_flops".
std::vector<std::string> split_path(const std::string& bracketed) {
  std::string path;
  for (const char c : bracketed) {
    if (c == '[') {
      path += '.';
    } else if (c != ']') {
      path += c;
    }
  }
  std::vector<std::string> segments;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = path.find('.', start);
    segments.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) return segments;
    start = dot + 1;
  }
}

}  // namespace

ScenarioError::ScenarioError(std::string file, std::string json_path, const std::string& message)
    : std::runtime_error(compose(file, json_path, message)),
      file_(std::move(file)),
      json_path_(std::move(json_path)) {}

ScenarioError::ScenarioError(Verbatim, const std::string& what, std::string file,
                             std::string json_path)
    : std::runtime_error(what), file_(std::move(file)), json_path_(std::move(json_path)) {}

ScenarioError ScenarioError::in_override(std::string file, std::string json_path,
                                         const std::string& assignment,
                                         const std::string& message) {
  const std::string what = compose(file, "--set " + assignment, message);
  return ScenarioError(Verbatim{}, what, std::move(file), std::move(json_path));
}

void apply_override(json& doc, const std::string& assignment, const std::string& file) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    throw ScenarioError::in_override(file, "", assignment, "expected PATH=VALUE");
  }
  const std::string path = assignment.substr(0, eq);
  const auto fail = [&](const std::string& message) {
    return ScenarioError::in_override(file, path, assignment, message);
  };
  if (path.empty()) throw fail("the path before '=' is empty");
  // Not JSON (a bare word such as gpipe) means a string, so quotes are rarely needed.
  json value = json::parse(assignment.substr(eq + 1), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = assignment.substr(eq + 1);

  const std::vector<std::string> segments = split_path(path);
  json* node = &doc;
  std::string walked;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::string& segment = segments[i];
    if (segment.empty()) throw fail("the path has an empty segment");
    std::string here = walked;
    here.append(walked.empty() ? "" : ".").append(segment);
    const bool last = i + 1 == segments.size();
    if (node->is_object()) {
      if (last) {
        (*node)[segment] = std::move(value);
        return;
      }
      const auto it = node->find(segment);
      if (it == node->end()) throw fail("'" + here + "' does not exist");
      node = &*it;
    } else if (node->is_array()) {
      const std::optional<std::size_t> index = parse_index(segment);
      if (!index || *index >= node->size()) throw fail("'" + here + "' does not exist");
      node = &(*node)[*index];
      if (last) {
        *node = std::move(value);
        return;
      }
    } else {
      throw fail("'" + walked + "' is not an object or an array");
    }
    walked = here;
  }
}

Scenario parse_scenario(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  Scenario s;
  s.name = top.opt_string("name").value_or(default_name(file));
  s.notes = top.opt_string("notes").value_or("");
  ObjectReader model = top.object("model");
  ObjectReader cluster = top.object("cluster");
  ObjectReader training = top.object("training");
  top.finish();

  s.model = read_model(std::move(model));
  s.cluster = read_cluster(std::move(cluster));
  s.training = read_training(std::move(training), s.model.dtype);
  check_magnitudes(s, file);
  return s;
}

Scenario parse_scenario_text(const std::string& text, const std::string& file,
                             const std::vector<std::string>& overrides) {
  json doc = parse_json(text, file);
  for (const std::string& assignment : overrides) apply_override(doc, assignment, file);
  return parse_scenario(doc, file);
}

Scenario load_scenario(const std::filesystem::path& file,
                       const std::vector<std::string>& overrides) {
  const std::string label = file.string();
  std::error_code ec;
  std::ifstream in(file, std::ios::binary);
  if (!in || std::filesystem::is_directory(file, ec)) {
    throw ScenarioError(label, "", "cannot open file");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ScenarioError(label, "", "cannot read file");
  return parse_scenario_text(text.str(), label, overrides);
}

}  // namespace pipescope
