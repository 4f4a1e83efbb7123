// parse_measured_csv, read_measured_csv, parse_fit_names and default_fit
// (sim/validation/calibration.h): the inputs of `pipescope calibrate` as the user
// gives them, the CSV of measured steps and the `--fit` list of parameters.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "sim/base/input_file.h"
#include "sim/scenario/scenario_io.h"
#include "sim/validation/calibration.h"

namespace pipescope {

namespace {

// ---- CSV ----

enum class Column { kK, kM, kSchedule, kRemat, kStepTime, kD, kChunks, kMicroBatch };

struct ColumnInfo {
  Column column;
  const char* name;
  bool required;
};

constexpr ColumnInfo kColumns[] = {
    {Column::kK, "K", true},
    {Column::kM, "M", true},
    {Column::kSchedule, "schedule", true},
    {Column::kRemat, "remat", true},
    {Column::kStepTime, "step_time_s", true},
    {Column::kD, "D", false},
    {Column::kChunks, "chunks", false},
    {Column::kMicroBatch, "micro_batch", false},
};

std::string column_names() {
  std::string out;
  for (const ColumnInfo& c : kColumns) {
    if (!out.empty()) out += ", ";
    out += c.name;
    if (!c.required) out += " (optional)";
  }
  return out;
}

// The longest step a row may measure: a day. Anything above is a unit mistake.
constexpr double kMaxStepTime_s = 86400.0;
constexpr std::size_t kMaxRows = 100000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    cells.push_back(
        trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

std::string quoted(std::string_view cell) {
  return cell.empty() ? std::string("an empty cell") : "'" + std::string(cell) + "'";
}

struct CellPlace {
  const std::string& file;
  int line;
  const char* column;

  [[noreturn]] void fail(const std::string& message) const {
    throw ScenarioError(file, "line " + std::to_string(line) + ", column " + column, message);
  }
};

std::int64_t read_int(std::string_view cell, const CellPlace& at, std::int64_t max) {
  const std::string range =
      "expected a whole number from 1 to " + std::to_string(max) + ", got " + quoted(cell);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (cell.empty() || ec != std::errc() || end != cell.data() + cell.size() || v < 1 || v > max) {
    at.fail(range);
  }
  return v;
}

double read_seconds(std::string_view cell, const CellPlace& at) {
  char buf[64];
  const std::string range = "expected a step time in seconds above 0 and at most " +
                            std::to_string(static_cast<int>(kMaxStepTime_s)) + " (a day), got " +
                            quoted(cell);
  if (cell.empty() || cell.size() >= sizeof buf) at.fail(range);
  std::copy(cell.begin(), cell.end(), buf);
  buf[cell.size()] = '\0';
  char* end = nullptr;
  const double v = std::strtod(buf, &end);
  if (end != buf + cell.size() || !std::isfinite(v) || !(v > 0.0) || v > kMaxStepTime_s) {
    at.fail(range);
  }
  return v;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

const char* column_name(Column c) {
  for (const ColumnInfo& i : kColumns) {
    if (i.column == c) return i.name;
  }
  return "?";
}

// The header: each cell a known column, none twice, every required one present.
std::vector<Column> read_header(std::string_view text, const std::string& file, int line) {
  const std::vector<std::string_view> header = split_cells(text);
  std::vector<Column> order;
  for (std::size_t c = 0; c < header.size(); ++c) {
    const auto known = std::find_if(std::begin(kColumns), std::end(kColumns),
                                    [&](const ColumnInfo& i) { return header[c] == i.name; });
    const std::string where = "line " + std::to_string(line) + ", column " + std::to_string(c + 1);
    if (known == std::end(kColumns)) {
      throw ScenarioError(file, where,
                          "unknown column " + quoted(header[c]) + " (expected: " + column_names() +
                              "; the first line must be the header)");
    }
    if (std::find(order.begin(), order.end(), known->column) != order.end()) {
      throw ScenarioError(file, where, "column '" + std::string(known->name) + "' given twice");
    }
    order.push_back(known->column);
  }
  for (const ColumnInfo& i : kColumns) {
    if (i.required && std::find(order.begin(), order.end(), i.column) == order.end()) {
      throw ScenarioError(file, "line " + std::to_string(line),
                          "missing column '" + std::string(i.name) +
                              "' (the header must name: " + column_names() + ")");
    }
  }
  return order;
}

ScheduleKind read_schedule(std::string_view cell, const CellPlace& at) {
  const auto s = parse_schedule(cell);
  if (!s || *s == ScheduleKind::kCustom) {
    at.fail("unknown schedule " + quoted(cell) + " (expected one of: " + kScheduleNames + ")");
  }
  return *s;
}

Remat read_remat(std::string_view cell, const CellPlace& at) {
  const auto r = parse_remat(cell);
  if (!r) at.fail("unknown remat mode " + quoted(cell) + " (expected one of: " + kRematNames + ")");
  return *r;
}

// One cell into its field of `row`; an empty optional cell keeps the default.
void read_cell(std::string_view cell, Column column, const CellPlace& at, MeasuredStep& row) {
  switch (column) {
    case Column::kK:
      row.stages = static_cast<int>(read_int(cell, at, 1 << 20));
      break;
    case Column::kM:
      row.micro_batches = static_cast<int>(read_int(cell, at, 1 << 24));
      break;
    case Column::kSchedule:
      row.schedule = read_schedule(cell, at);
      break;
    case Column::kRemat:
      row.remat = read_remat(cell, at);
      break;
    case Column::kStepTime:
      row.step_time_s = read_seconds(cell, at);
      break;
    case Column::kD:
      if (!cell.empty()) row.data_parallel = static_cast<int>(read_int(cell, at, 1 << 20));
      break;
    case Column::kChunks:
      if (!cell.empty()) row.chunks = static_cast<int>(read_int(cell, at, 1024));
      break;
    case Column::kMicroBatch:
      if (!cell.empty()) row.micro_batch = read_int(cell, at, std::int64_t{1} << 40);
      break;
  }
}

// The row on line `line`, `rows_before` rows after the header.
MeasuredStep read_row(std::string_view text, const std::vector<Column>& order,
                      const std::string& file, int line, std::size_t rows_before) {
  const std::vector<std::string_view> cells = split_cells(text);
  if (cells.size() != order.size()) {
    throw ScenarioError(file, "line " + std::to_string(line),
                        "has " + std::to_string(cells.size()) + " cells but the header has " +
                            std::to_string(order.size()) + " columns");
  }
  if (rows_before == kMaxRows) {
    throw ScenarioError(file, "line " + std::to_string(line),
                        "more than " + std::to_string(kMaxRows) + " measured steps");
  }
  MeasuredStep row;
  row.line = line;
  for (std::size_t c = 0; c < cells.size(); ++c) {
    read_cell(cells[c], order[c], CellPlace{file, line, column_name(order[c])}, row);
  }
  return row;
}

}  // namespace

std::string MeasuredStep::label() const {
  std::string s = "K=" + std::to_string(stages);
  if (data_parallel != 1) s += " D=" + std::to_string(data_parallel);
  s += " M=" + std::to_string(micro_batches);
  if (micro_batch) s += " b=" + std::to_string(*micro_batch);
  s += " " + std::string(to_string(schedule));
  if (chunks) s += " v=" + std::to_string(*chunks);
  s += " remat " + std::string(remat_label(remat));
  return s;
}

std::vector<MeasuredStep> parse_measured_csv(const std::string& text, const std::string& file) {
  const std::vector<std::string_view> lines = split_lines(text);
  std::size_t first = 0;
  while (first < lines.size() && trim(lines[first]).empty()) ++first;
  if (first == lines.size()) {
    throw ScenarioError(file, "",
                        "no header: the first line must name the columns: " + column_names());
  }
  const std::vector<Column> order = read_header(lines[first], file, static_cast<int>(first) + 1);
  std::vector<MeasuredStep> rows;
  for (std::size_t l = first + 1; l < lines.size(); ++l) {
    if (trim(lines[l]).empty()) continue;
    rows.push_back(read_row(lines[l], order, file, static_cast<int>(l) + 1, rows.size()));
  }
  if (rows.empty()) {
    throw ScenarioError(file, "", "no measured steps: a row per step after the header");
  }
  return rows;
}

std::vector<MeasuredStep> read_measured_csv(const std::filesystem::path& path) {
  const std::string label = path.string();
  return parse_measured_csv(
      read_input_file(path, label, kMaxDocumentBytes, "a CSV of measured steps"), label);
}

// ---- --fit ----

namespace {

// The default: the three figures that set most of a transformer step and that
// step times at several K and M tell apart. gemm_efficiency scales the GEMMs,
// most of the FLOPs; memory_efficiency the memory-bound kernels (norms,
// activations, dropout, the optimizer step), whose share differs between remat
// modes and model widths; kernel_overhead_s a fixed cost per kernel, whose share
// grows as micro-batches shrink (larger M at the same batch). The attention
// efficiencies move step times in proportion to the GEMMs as long as the
// sequence length is fixed, so step times of one model cannot separate them
// from gemm_efficiency; link_efficiency shows only where transfers are on the
// critical path. Both are fitted when named with --fit.
constexpr const char* kDefaultFit[] = {"gemm_efficiency", "memory_efficiency", "kernel_overhead_s"};

std::string parameter_names() {
  std::string out;
  for (const CalibrationParameter& p : calibration_parameters()) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

const CalibrationParameter* find_parameter(std::string_view name) {
  for (const CalibrationParameter& p : calibration_parameters()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace

std::vector<const CalibrationParameter*> parse_fit_names(const std::string& names) {
  std::vector<const CalibrationParameter*> out;
  for (const std::string_view n : split_cells(names)) {
    const CalibrationParameter* p = find_parameter(n);
    if (p == nullptr) {
      throw std::invalid_argument("--fit: unknown parameter " + quoted(n) +
                                  " (expected a comma-separated list of: " + parameter_names() +
                                  ")");
    }
    if (std::find(out.begin(), out.end(), p) != out.end()) {
      throw std::invalid_argument("--fit: parameter '" + p->name + "' named twice");
    }
    out.push_back(p);
  }
  return out;
}

std::vector<const CalibrationParameter*> default_fit() {
  std::vector<const CalibrationParameter*> out;
  for (const char* n : kDefaultFit) out.push_back(find_parameter(n));
  return out;
}

}  // namespace pipescope
