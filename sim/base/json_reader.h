#pragma once
// Reading validated JSON documents (scenarios, plans): typed accessors that report
// the file and the JSON path of a bad value as a ScenarioError, an object reader
// that rejects keys nobody asked for, and parsing that reports the line and column
// of malformed JSON.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/base/scenario_error.h"

namespace pipescope::json_io {

// "a, b, c".
std::string join(const std::vector<std::string>& items);

// A value's place: the file and its dotted JSON path ("model.layers[2].name").
struct Where {
  const std::string& file;
  std::string path;

  [[noreturn]] void fail(const std::string& message) const;
  Where key(std::string_view k) const;
  Where index(std::size_t i) const;
};

// A value of the wrong type is named by its type ("got string"), a number out of
// range by its value ("got -3").
std::string type_of(const nlohmann::json& v);
std::string describe(const nlohmann::json& v);

struct IntRange {
  std::int64_t min = 0;  // 0 or 1
  std::int64_t max = 0;
};
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr IntRange kPositiveInt{1, kInt64Max};
inline constexpr IntRange kNonNegativeInt{0, kInt64Max};
// Counts held in `int`, and model dimensions, which the families multiply together.
inline constexpr IntRange kPositiveSmallInt{1, std::numeric_limits<int>::max()};
// Model dimensions, bounded far above any published model (the largest use widths
// near 2^15 and contexts near 2^20) so that a typo is named at its field instead
// of surfacing as an overflow of the model's products.
inline constexpr IntRange kModelWidth{1, 1 << 20};     // d_model, d_ff, heads, filters
inline constexpr IntRange kModelLength{1, 1 << 24};    // seq_len, vocab, classes
inline constexpr IntRange kExpertCount{1, 1 << 16};    // experts, experts_per_token
inline constexpr IntRange kGlobalBatch{1, 1LL << 40};  // samples in one step

// Rates (FLOP/s, bytes/s) from 1 to 1e30 per second, durations (latencies,
// per-op overheads) from 0 to an hour, efficiencies (the fraction of a device's
// peak its kernels reach) from 1e-6 to 1.
enum class NumberRange { kPositive, kNonNegative, kEfficiency, kRate, kDuration };

// Integers written as floats (16e9) are accepted when they are exact.
std::int64_t as_int(const nlohmann::json& v, const Where& w, IntRange r);
double as_number(const nlohmann::json& v, const Where& w, NumberRange r);
std::string as_string(const nlohmann::json& v, const Where& w);
bool as_bool(const nlohmann::json& v, const Where& w);

// "A JSON object at a path": typed accessors that report the path of a bad value,
// and finish(), which reports any key nobody asked for.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& value, Where where);

  Where where(std::string_view key) const { return where_.key(key); }
  const Where& here() const { return where_; }
  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    where(key).fail(message);
  }
  [[noreturn]] void fail_here(const std::string& message) const { where_.fail(message); }

  const nlohmann::json* find(std::string_view key);
  const nlohmann::json& at(std::string_view key);

  std::string string(std::string_view key) { return as_string(at(key), where(key)); }
  std::optional<std::string> opt_string(std::string_view key);
  std::int64_t integer(std::string_view key, IntRange r) { return as_int(at(key), where(key), r); }
  std::optional<std::int64_t> opt_integer(std::string_view key, IntRange r);
  double number(std::string_view key, NumberRange r) { return as_number(at(key), where(key), r); }
  std::optional<double> opt_number(std::string_view key, NumberRange r);
  bool boolean(std::string_view key) { return as_bool(at(key), where(key)); }
  std::optional<bool> opt_bool(std::string_view key);
  ObjectReader object(std::string_view key) { return ObjectReader(at(key), where(key)); }
  std::optional<ObjectReader> opt_object(std::string_view key);
  // The array at `key`, or a failure naming its type.
  const nlohmann::json& array(std::string_view key);

  void finish() const;

 private:
  const nlohmann::json& value_;
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

// The deepest nesting of objects and arrays a JSON input may have. PipeScope's
// own files nest at most five levels and Hugging Face configs rarely more than
// four; the limit is checked before a document is built, so that a file of
// brackets cannot take gigabytes of memory as a tree.
inline constexpr std::size_t kMaxJsonDepth = 64;

// What the check before parsing found: malformed JSON (its message names the line
// and column), nesting deeper than kMaxJsonDepth, or a key repeated in its object
// (nlohmann would keep the last silently). `path` is where, when known.
struct JsonProblem {
  enum class Kind { kMalformed, kTooDeep, kDuplicateKey };
  Kind kind;
  std::string path;
  std::string message;
};
std::optional<JsonProblem> find_json_problem(std::string_view text);

// Parses `text`; any JsonProblem becomes a ScenarioError "FILE: PATH: MESSAGE",
// e.g. "FILE: malformed JSON at line L, column C: REASON".
nlohmann::json parse_json(const std::string& text, const std::string& file);

// A plan file's text (sim/formats/plan_io.cpp), with the plans' size limit
// (sim/base/input_file.h); errors are ScenarioErrors naming `label`.
std::string read_text_file(const std::filesystem::path& path, const std::string& label);

}  // namespace pipescope::json_io
