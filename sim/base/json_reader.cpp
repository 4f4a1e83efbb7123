#include "sim/base/json_reader.h"

#include "costmodels/check.h"
#include "sim/base/input_file.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace pipescope::json_io {

using nlohmann::json;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

void Where::fail(const std::string& message) const {
  throw ScenarioError(file, path, message);
}

Where Where::key(std::string_view k) const {
  return {file, path.empty() ? std::string(k) : path + "." + std::string(k)};
}

Where Where::index(std::size_t i) const {
  return {file, path + "[" + std::to_string(i) + "]"};
}

std::string type_of(const json& v) {
  return v.type_name();
}

std::string describe(const json& v) {
  return v.is_number() ? v.dump() : type_of(v);
}

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

namespace {

// What each NumberRange accepts: (lo, hi], or [lo, hi] when lo is included.
struct Bounds {
  const char* expected;
  double lo;
  bool lo_included;
  double hi;
};

Bounds bounds_of(NumberRange r) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (r) {
    case NumberRange::kPositive:
      return {"a positive number", 0.0, false, kInf};
    case NumberRange::kNonNegative:
      return {"a non-negative number", 0.0, true, kInf};
    case NumberRange::kEfficiency:
      // Real kernels reach from a few percent of peak to nearly all of it. Far
      // smaller fractions (1e-320 is a positive double) are typos, and would
      // otherwise surface as a step too long for the clock, blamed on FLOPs.
      return {"an efficiency from 1e-6 to 1", 1e-6, true, 1.0};
    case NumberRange::kRate:
      return {"a rate from 1 to 1e30 per second", 1.0, true, 1e30};
    case NumberRange::kDuration:
      return {"a duration from 0 to 3600 seconds", 0.0, true, 3600.0};
  }
  fail_check("NumberRange", __FILE__, __LINE__, "unknown range");
}

}  // namespace

double as_number(const json& v, const Where& w, NumberRange r) {
  const Bounds b = bounds_of(r);
  if (!v.is_number()) w.fail(std::string("expected ") + b.expected + ", got " + type_of(v));
  const double d = v.get<double>();
  const bool ok = std::isfinite(d) && (b.lo_included ? d >= b.lo : d > b.lo) && d <= b.hi;
  if (!ok) w.fail(std::string("expected ") + b.expected + ", got " + describe(v));
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

ObjectReader::ObjectReader(const json& value, Where where)
    : value_(value), where_(std::move(where)) {
  if (!value_.is_object()) where_.fail("expected an object, got " + type_of(value_));
}

const json* ObjectReader::find(std::string_view key) {
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.emplace_back(key);
  const auto it = value_.find(std::string(key));
  return it == value_.end() ? nullptr : &*it;
}

const json& ObjectReader::at(std::string_view key) {
  const json* v = find(key);
  if (v == nullptr) fail(key, "missing required key");
  return *v;
}

std::optional<std::string> ObjectReader::opt_string(std::string_view key) {
  const json* v = find(key);
  return v ? std::optional(as_string(*v, where(key))) : std::nullopt;
}

std::optional<std::int64_t> ObjectReader::opt_integer(std::string_view key, IntRange r) {
  const json* v = find(key);
  return v ? std::optional(as_int(*v, where(key), r)) : std::nullopt;
}

std::optional<double> ObjectReader::opt_number(std::string_view key, NumberRange r) {
  const json* v = find(key);
  return v ? std::optional(as_number(*v, where(key), r)) : std::nullopt;
}

std::optional<bool> ObjectReader::opt_bool(std::string_view key) {
  const json* v = find(key);
  return v ? std::optional(as_bool(*v, where(key))) : std::nullopt;
}

std::optional<ObjectReader> ObjectReader::opt_object(std::string_view key) {
  const json* v = find(key);
  return v ? std::optional(ObjectReader(*v, where(key))) : std::nullopt;
}

const json& ObjectReader::array(std::string_view key) {
  const json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + type_of(v));
  return v;
}

void ObjectReader::finish() const {
  for (const auto& item : value_.items()) {
    if (std::find(asked_.begin(), asked_.end(), item.key()) == asked_.end()) {
      fail(item.key(), "unknown key '" + item.key() + "' (expected one of: " + join(asked_) + ")");
    }
  }
}

namespace {

// The pass that runs before the document is built, so that what would make
// building it wasteful or wrong is refused first:
// - nesting deeper than kMaxJsonDepth (a few MB of brackets would otherwise
//   take gigabytes as a tree);
// - a key repeated in its object: nlohmann keeps the last of two equal keys, and
//   a hand-edited file that says "layers" twice almost surely meant one of them;
// - malformed JSON, with its line and column. nlohmann's own message has those
//   only for syntax errors, not for a number that overflows a double (1e400);
//   the SAX interface reports the position of either.
class Checker : public nlohmann::json_sax<json> {
 public:
  std::optional<JsonProblem> problem;
  std::size_t error_position = 0;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (f.keys.insert(k).second) return true;
    problem = JsonProblem{JsonProblem::Kind::kDuplicateKey, path(frames_.size()),
                          "the key appears twice in its object"};
    return false;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t pos, const std::string&, const json::exception& ex) override {
    error_position = pos;
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: "
    // since the position is reported separately.
    std::string_view text = ex.what();
    if (const auto p = text.find("] "); p != std::string_view::npos) text.remove_prefix(p + 2);
    if (text.starts_with("parse error")) {
      if (const auto p = text.find(": "); p != std::string_view::npos) text.remove_prefix(p + 2);
    }
    problem = JsonProblem{JsonProblem::Kind::kMalformed, "", std::string(text)};
    return false;
  }

 private:
  struct Frame {
    bool object = true;
    std::set<std::string> keys;
    std::string key;        // object: the current key
    std::size_t index = 0;  // array: the current element
  };
  // The outermost levels of a path too deep to print whole.
  static constexpr std::size_t kPathLevels = 4;

  bool open(bool object) {
    if (frames_.size() == kMaxJsonDepth) {
      const std::size_t levels = std::min(frames_.size(), kPathLevels);
      problem = JsonProblem{JsonProblem::Kind::kTooDeep, path(levels) + "...",
                            "objects and arrays nest deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels, the limit for JSON inputs"};
      return false;
    }
    frames_.push_back({object, {}, {}, 0});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  // A value ended: the enclosing array moves to its next element.
  bool value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  // The path through the outermost `levels` frames.
  std::string path(std::size_t levels) const {
    std::string out;
    for (std::size_t i = 0; i < levels; ++i) {
      const Frame& f = frames_[i];
      if (f.object) {
        out += (out.empty() ? "" : ".") + f.key;
      } else {
        out += "[" + std::to_string(f.index) + "]";
      }
    }
    return out;
  }
  std::vector<Frame> frames_;
};

// "line L, column C" of the character the lexer stopped at: `position` counts
// the characters it read, so that one is at index position - 1 (the end of the
// text for an unexpected end of input).
std::string line_and_column(std::string_view text, std::size_t position) {
  const std::size_t index = std::min(position > 0 ? position - 1 : 0, text.size());
  const std::string_view before = text.substr(0, index);
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const std::size_t line_start = before.rfind('\n');
  const std::size_t column = line_start == std::string_view::npos ? index + 1 : index - line_start;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

std::optional<JsonProblem> find_json_problem(std::string_view text) {
  // nlohmann/json ends its input at a NUL byte, so what follows one (the rest
  // of a file a crash padded with zeros) would go unread.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return JsonProblem{JsonProblem::Kind::kMalformed, "",
                       "malformed JSON at " + line_and_column(text, nul + 1) +
                           ": a NUL byte, which JSON text never holds"};
  }
  Checker checker;
  json::sax_parse(text.begin(), text.end(), &checker);
  if (checker.problem && checker.problem->kind == JsonProblem::Kind::kMalformed) {
    checker.problem->message = "malformed JSON at " +
                               line_and_column(text, checker.error_position) + ": " +
                               checker.problem->message;
  }
  return checker.problem;
}

json parse_json(const std::string& text, const std::string& file) {
  if (const std::optional<JsonProblem> problem = find_json_problem(text)) {
    throw ScenarioError(file, problem->path, problem->message);
  }
  return json::parse(text);
}

std::string read_text_file(const std::filesystem::path& path, const std::string& label) {
  return read_input_file(path, label, kMaxPlanBytes, "a plan");
}

}  // namespace pipescope::json_io
