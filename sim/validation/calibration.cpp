#include "sim/validation/calibration.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "sim/base/input_file.h"
#include "sim/base/parallel.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"

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

// ---- Rows as `pipescope simulate` runs them ----

namespace {

struct PreparedRow {
  Scenario scenario;  // one replica's, with the row's batch
  SimConfig config;
  // With replicas: the whole cluster, whose ring between them the fit re-prices
  // under each trial table (its link efficiency moves the all-reduce too).
  std::optional<Cluster> replicas_cluster;
  int stages = 1;
  int replicas = 1;
};

PreparedRow prepare_row(const Scenario& base, const MeasuredStep& row, PartitionMethod partition) {
  PreparedRow p;
  p.scenario = base;
  const int K = row.stages;
  const int D = row.data_parallel;
  const int N = base.cluster.devices;
  if (row.micro_batch) {
    const double batch = static_cast<double>(*row.micro_batch) * row.micro_batches * D;
    if (batch > static_cast<double>(std::int64_t{1} << 40)) {
      throw ConfigError("micro_batch x M x D = " + std::to_string(batch) +
                        " samples, above the 2^40 a global batch may hold");
    }
    p.scenario.training.global_batch = *row.micro_batch * row.micro_batches * D;
  }
  if (std::int64_t{K} * D > N) {
    throw ConfigError("K x D = " + std::to_string(std::int64_t{K} * D) +
                      " devices; the scenario's cluster has " + std::to_string(N));
  }
  SimConfig& c = p.config;
  c.stages = K;
  c.micro_batches = row.micro_batches;
  c.schedule = row.schedule;
  c.remat = row.remat;
  if (row.chunks) c.chunks = row.chunks;
  c.partition = partition;
  c.record_timeline = false;
  if (D > 1) {
    if (p.scenario.training.global_batch % D != 0) {
      throw ConfigError("D=" + std::to_string(D) + " does not divide the global batch of " +
                        std::to_string(p.scenario.training.global_batch));
    }
    c.data_parallel = data_parallel_ring(base.cluster, K, D);
    p.replicas_cluster = base.cluster;
    p.stages = K;
    p.replicas = D;
    p.scenario = replica_scenario(p.scenario, K, D);
  }
  return p;
}

}  // namespace

double simulate_row(const Scenario& scenario, const MeasuredStep& row, PartitionMethod partition) {
  const PreparedRow p = prepare_row(scenario, row, partition);
  return simulate(p.scenario, p.config).metrics.step_time_s();
}

// ---- The optimiser ----

namespace {

void clamp_into(std::vector<double>& u, const BoxFunction& fn) {
  for (std::size_t j = 0; j < u.size(); ++j) u[j] = std::clamp(u[j], fn.lo[j], fn.hi[j]);
}

// fn at a point it first clamps into the box, counted and reported; NaN counts
// as infinity.
class Evaluator {
 public:
  Evaluator(const BoxFunction& fn, const NelderMeadOptions& o) : fn_(fn), o_(o) {}

  double operator()(std::vector<double>& u) {
    clamp_into(u, fn_);
    ++evaluations_;
    const double v = fn_.f(u);
    if (o_.progress) o_.progress(std::min(evaluations_, o_.max_evaluations), o_.max_evaluations);
    return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
  }
  std::size_t evaluations() const { return evaluations_; }
  bool exhausted() const { return evaluations_ >= o_.max_evaluations; }

 private:
  const BoxFunction& fn_;
  const NelderMeadOptions& o_;
  std::size_t evaluations_ = 0;
};

// a + s (b - c)
std::vector<double> along(const std::vector<double>& a, double s, const std::vector<double>& b,
                          const std::vector<double>& c) {
  std::vector<double> r(a.size());
  for (std::size_t j = 0; j < a.size(); ++j) r[j] = a[j] + s * (b[j] - c[j]);
  return r;
}

struct Simplex {
  std::vector<std::vector<double>> pts;
  std::vector<double> vals;

  void replace(std::size_t i, std::vector<double> p, double v) {
    pts[i] = std::move(p);
    vals[i] = v;
  }
};

// A simplex around the best point so far, each edge along one coordinate,
// pointing into the box.
Simplex simplex_around(const Minimum& best, const BoxFunction& fn, double step, Evaluator& eval) {
  Simplex s{{best.u}, {best.value}};
  for (std::size_t j = 0; j < best.u.size(); ++j) {
    std::vector<double> p = best.u;
    p[j] += (p[j] + step <= fn.hi[j]) ? step : -step;
    s.vals.push_back(eval(p));
    s.pts.push_back(std::move(p));
  }
  return s;
}

// The simplex's best, worst and second-worst points.
struct Ranks {
  std::size_t best = 0;
  std::size_t worst = 0;
  std::size_t second_worst = 0;
};

Ranks ranks_of(const Simplex& s) {
  std::vector<std::size_t> idx(s.vals.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](std::size_t a, std::size_t b) { return s.vals[a] < s.vals[b]; });
  return {idx.front(), idx.back(), idx[idx.size() - 2]};
}

bool converged(const Simplex& s, const Ranks& r, const NelderMeadOptions& o) {
  const std::vector<double>& best = s.pts[r.best];
  double size = 0.0;
  for (const auto& p : s.pts) {
    for (std::size_t j = 0; j < p.size(); ++j) size = std::max(size, std::abs(p[j] - best[j]));
  }
  const double spread = s.vals[r.worst] - s.vals[r.best];
  return size <= o.min_size || (std::isfinite(spread) && spread <= o.tolerance);
}

// The centroid of every point but `except`.
std::vector<double> centroid(const Simplex& s, std::size_t except) {
  const std::size_t n = s.pts.size() - 1;
  std::vector<double> c(n, 0.0);
  for (std::size_t i = 0; i <= n; ++i) {
    if (i == except) continue;
    for (std::size_t j = 0; j < n; ++j) c[j] += s.pts[i][j] / static_cast<double>(n);
  }
  return c;
}

void shrink_toward(Simplex& s, std::size_t best, Evaluator& eval) {
  for (std::size_t i = 0; i < s.pts.size(); ++i) {
    if (i == best) continue;
    s.pts[i] = along(s.pts[best], 0.5, s.pts[i], s.pts[best]);
    s.vals[i] = eval(s.pts[i]);
  }
}

// One move: the worst point reflected through the others' centroid, expanded
// when that beats the best, contracted when it beats nothing, or else the whole
// simplex shrunk toward the best.
void move_worst(Simplex& s, const Ranks& r, Evaluator& eval) {
  const std::size_t w = r.worst;
  const std::vector<double> c = centroid(s, w);
  std::vector<double> xr = along(c, 1.0, c, s.pts[w]);
  const double fr = eval(xr);
  if (fr < s.vals[r.best]) {
    std::vector<double> xe = along(c, 2.0, c, s.pts[w]);
    const double fe = eval(xe);
    if (fe < fr) {
      s.replace(w, std::move(xe), fe);
    } else {
      s.replace(w, std::move(xr), fr);
    }
    return;
  }
  if (fr < s.vals[r.second_worst]) {
    s.replace(w, std::move(xr), fr);
    return;
  }
  // Contract: outside when the reflection beat the worst, inside otherwise.
  const bool outside = fr < s.vals[w];
  std::vector<double> xc = outside ? along(c, 0.5, xr, c) : along(c, 0.5, s.pts[w], c);
  const double fc = eval(xc);
  if (fc < (outside ? fr : s.vals[w])) {
    s.replace(w, std::move(xc), fc);
    return;
  }
  shrink_toward(s, r.best, eval);
}

// The simplex's best point into `best` when it is better; how much better.
double keep_best(const Simplex& s, Minimum& best) {
  const auto it = std::min_element(s.vals.begin(), s.vals.end());
  const double improvement = best.value - *it;
  if (*it < best.value) {
    best.value = *it;
    best.u = s.pts[static_cast<std::size_t>(it - s.vals.begin())];
  }
  return improvement;
}

}  // namespace

Minimum nelder_mead(const BoxFunction& fn, std::vector<double> u0, const NelderMeadOptions& o) {
  if (fn.lo.size() != u0.size() || fn.hi.size() != u0.size()) {
    throw std::invalid_argument("nelder_mead: one bound per coordinate");
  }
  Evaluator eval(fn, o);
  Minimum best;
  best.u = std::move(u0);
  best.value = eval(best.u);
  if (best.u.empty()) {
    best.evaluations = eval.evaluations();
    return best;
  }
  for (int round = 0; round <= o.restarts && !eval.exhausted(); ++round) {
    Simplex s = simplex_around(best, fn, o.initial_step, eval);
    while (!eval.exhausted()) {
      const Ranks r = ranks_of(s);
      if (converged(s, r, o)) break;
      move_worst(s, r, eval);
    }
    const double improvement = keep_best(s, best);
    // A restart that found nothing better: the simplex had converged for real.
    if (round > 0 && !(improvement > o.tolerance)) break;
  }
  best.evaluations = eval.evaluations();
  return best;
}

Minimum grid_search(const BoxFunction& fn, int points) {
  if (points < 2) throw std::invalid_argument("grid_search: at least 2 points per coordinate");
  const std::size_t n = fn.lo.size();
  std::vector<int> at(n, 0);
  Minimum best;
  best.value = std::numeric_limits<double>::infinity();
  std::vector<double> u(n);
  for (;;) {
    for (std::size_t j = 0; j < n; ++j) {
      u[j] = fn.lo[j] + (fn.hi[j] - fn.lo[j]) * at[j] / (points - 1);
    }
    const double v = fn.f(u);
    ++best.evaluations;
    if (v < best.value) {
      best.value = v;
      best.u = u;
    }
    std::size_t j = 0;
    while (j < n && ++at[j] == points) at[j++] = 0;
    if (j == n) break;
  }
  return best;
}

// ---- The fit ----

namespace {

// A parameter's range in u = log x: the registry's, with a lower bound of 0
// (kernel_overhead_s) raised to 1e-4 of the upper one, which is 0 for every
// purpose a fit has (0.1 us for the kernel overhead).
std::pair<double, double> log_range(const CalibrationParameter& p) {
  const double lo = std::max(p.min, p.max * 1e-4);
  return {std::log(lo), std::log(p.max)};
}

double relative_error(double simulated, double measured) {
  return (simulated - measured) / measured;
}

void check_can_calibrate(const Device& device, const std::vector<MeasuredStep>& rows,
                         const std::vector<const CalibrationParameter*>& fit,
                         const std::string& csv) {
  if (!device.kernels.present) {
    throw std::invalid_argument(
        "device '" + device.name +
        "' has no kernel table: calibrate fits the kernel-level model's figures, which need one "
        "(give \"kernels\" in the scenario's device)");
  }
  if (rows.empty()) throw std::invalid_argument(csv + ": no measured steps");
  if (fit.empty()) throw std::invalid_argument("--fit: name at least one parameter");
}

using Cuts = std::vector<std::vector<StageRange>>;  // per row, its stages' layers

// The measured rows, ready to run under trial kernel tables.
class RowRunner {
 public:
  RowRunner(const Scenario& scenario, const std::vector<MeasuredStep>& rows, const std::string& csv,
            PartitionMethod partition);

  // Every row under `table`, each with the cut its config holds (free: the
  // optimal partitioner's, as `pipescope simulate` cuts; fixed: the cut of a
  // round, see fit_in_rounds), the cuts it ran with into `cuts` when given. A
  // row that cannot run is an error naming its line.
  std::vector<double> simulate_all(const KernelTable& table, Cuts* cuts = nullptr);
  void fix_cuts(const Cuts& cuts) {
    for (std::size_t i = 0; i < prepared_.size(); ++i) prepared_[i].config.stage_ranges = cuts[i];
  }
  void free_cuts() {
    for (PreparedRow& p : prepared_) p.config.stage_ranges.reset();
  }

 private:
  ScenarioError row_error(const MeasuredStep& row, const std::exception& e) const {
    return ScenarioError(csv_, "line " + std::to_string(row.line), row.label() + ": " + e.what());
  }
  void run_row(std::size_t i, const KernelTable& table, std::vector<double>& times, Cuts* cuts);

  const std::vector<MeasuredStep>& rows_;
  const std::string& csv_;
  std::vector<PreparedRow> prepared_;
  unsigned threads_ = 1;
};

RowRunner::RowRunner(const Scenario& scenario, const std::vector<MeasuredStep>& rows,
                     const std::string& csv, PartitionMethod partition)
    : rows_(rows), csv_(csv) {
  // The rows run under the kernel-level model, whatever the scenario chose, and
  // so do the rings between their replicas.
  Scenario kernels = scenario;
  kernels.cluster.cost_model = CostModelKind::kKernels;
  kernels.cluster.profile = nullptr;
  prepared_.reserve(rows.size());
  for (const MeasuredStep& row : rows) {
    try {
      prepared_.push_back(prepare_row(kernels, row, partition));
    } catch (const std::exception& e) {
      throw row_error(row, e);
    }
  }
  threads_ = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                             static_cast<unsigned>(rows.size())));
}

void RowRunner::run_row(std::size_t i, const KernelTable& table, std::vector<double>& times,
                        Cuts* cuts) {
  PreparedRow& p = prepared_[i];
  p.scenario.cluster.device.kernels = table;
  try {
    if (p.replicas_cluster) {
      p.replicas_cluster->device.kernels = table;
      p.config.data_parallel = data_parallel_ring(*p.replicas_cluster, p.stages, p.replicas);
    }
    const SimResult r = simulate(p.scenario, p.config);
    times[i] = r.metrics.step_time_s();
    if (cuts != nullptr) {
      for (const StageCost& c : r.stage_costs) (*cuts)[i].push_back(c.layers);
    }
  } catch (const std::exception& e) {
    throw row_error(rows_[i], e);
  }
}

std::vector<double> RowRunner::simulate_all(const KernelTable& table, Cuts* cuts) {
  std::vector<double> times(rows_.size());
  if (cuts != nullptr) cuts->assign(rows_.size(), {});
  parallel_for(rows_.size(), threads_, [&](std::size_t i) { run_row(i, table, times, cuts); });
  return times;
}

// The fitted parameters as coordinates u_j = log x_j in their ranges, around
// the device's table.
struct FitSpace {
  const KernelTable& table;
  const std::vector<const CalibrationParameter*>& fit;
  BoxFunction box;         // lo and hi; f set by the fit
  std::vector<double> u0;  // the table's values

  KernelTable table_at(const std::vector<double>& u) const {
    KernelTable t = table;
    for (std::size_t j = 0; j < fit.size(); ++j) {
      t.*fit[j]->field = std::clamp(std::exp(u[j]), fit[j]->min, fit[j]->max);
    }
    return t;
  }
};

FitSpace fit_space(const KernelTable& table, const std::vector<const CalibrationParameter*>& fit) {
  FitSpace space{table, fit, {}, {}};
  for (const CalibrationParameter* p : fit) {
    const auto [lo, hi] = log_range(*p);
    space.box.lo.push_back(lo);
    space.box.hi.push_back(hi);
    space.u0.push_back(std::clamp(std::log(std::max(table.*p->field, 1e-300)), lo, hi));
  }
  return space;
}

// F(x) of calibration.h, at the rows' simulated `times` and the point `u`.
double objective(const std::vector<double>& times, const std::vector<MeasuredStep>& rows,
                 const std::vector<double>& u, const std::vector<double>& u0) {
  double f = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!(times[i] > 0.0)) return std::numeric_limits<double>::infinity();
    const double r = std::log(times[i] / rows[i].step_time_s);
    f += r * r;
  }
  for (std::size_t j = 0; j < u.size(); ++j) f += kPriorWeight * (u[j] - u0[j]) * (u[j] - u0[j]);
  return f;
}

struct FittedPoint {
  std::vector<double> u;
  std::size_t evaluations = 0;
};

// The partitioner cuts each row where its stages balance under the figures
// being fitted, so a row's step time jumps where a small change of them moves
// a cut, and the objective has walls that trap a simplex far from the
// minimum. The fit therefore runs in rounds: each row keeps the cut the
// partitioner chose at the start of the round, which makes the objective
// continuous within it; after the round the rows are cut anew under the
// fitted figures, and the rounds end when the cuts stay. The step times
// reported and written are those of free cuts, as `simulate` gives them.
// `cuts` are the free cuts under the table's own figures.
FittedPoint fit_in_rounds(RowRunner& runner, const FitSpace& space, Cuts cuts,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  constexpr int kMaxRounds = 6;
  NelderMeadOptions options;
  options.max_evaluations = 300 * space.fit.size();
  const std::size_t total = options.max_evaluations * kMaxRounds;
  std::size_t done = 0;
  options.progress = [&](std::size_t evaluations, std::size_t) {
    if (progress) progress(std::min(done + evaluations, total), total);
  };
  FittedPoint out{space.u0, 0};
  for (int round = 0; round < kMaxRounds; ++round) {
    runner.fix_cuts(cuts);
    const Minimum m = nelder_mead(space.box, out.u, options);
    done += m.evaluations;
    out.evaluations += m.evaluations;
    out.u = m.u;
    runner.free_cuts();
    Cuts next;
    runner.simulate_all(space.table_at(out.u), &next);
    ++out.evaluations;
    if (next == cuts) break;
    cuts = std::move(next);
  }
  if (progress) progress(total, total);
  return out;
}

void measure_errors(const std::vector<MeasuredStep>& rows, CalibrationResult& result) {
  double sum = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double e = relative_error(result.simulated_after[i], rows[i].step_time_s);
    sum += e * e;
    result.max_relative_error = std::max(result.max_relative_error, std::abs(e));
  }
  result.rms_relative_error = std::sqrt(sum / static_cast<double>(rows.size()));
}

}  // namespace

CalibrationResult calibrate(const Scenario& scenario, const std::vector<MeasuredStep>& rows,
                            const std::vector<const CalibrationParameter*>& fit,
                            const std::string& csv, PartitionMethod partition,
                            const std::function<void(std::size_t, std::size_t)>& progress) {
  check_can_calibrate(scenario.cluster.device, rows, fit, csv);
  RowRunner runner(scenario, rows, csv, partition);
  FitSpace space = fit_space(scenario.cluster.device.kernels, fit);
  const auto objective_at = [&](const std::vector<double>& times, const std::vector<double>& u) {
    return objective(times, rows, u, space.u0);
  };

  CalibrationResult result;
  result.partition = partition;
  Cuts cuts;
  result.simulated_before = runner.simulate_all(space.table, &cuts);
  result.objective_before = objective_at(result.simulated_before, space.u0);
  space.box.f = [&](const std::vector<double>& u) {
    return objective_at(runner.simulate_all(space.table_at(u)), u);
  };
  const FittedPoint fitted = fit_in_rounds(runner, space, std::move(cuts), progress);
  result.evaluations = fitted.evaluations;
  result.fitted = space.table_at(fitted.u);
  result.simulated_after = runner.simulate_all(result.fitted);
  result.objective_after = objective_at(result.simulated_after, fitted.u);
  for (const CalibrationParameter* p : fit) {
    result.changes.push_back({p, space.table.*p->field, result.fitted.*p->field});
  }
  measure_errors(rows, result);
  return result;
}

CostModelFile cost_model_file_of(const Scenario& scenario, const CalibrationResult& result,
                                 const std::string& csv, std::size_t rows) {
  CostModelFile f = cost_model_of(result.fitted, scenario.cluster.device.name);
  CostModelFit fit;
  fit.measured = std::filesystem::path(csv).filename().string();
  fit.rows = static_cast<std::int64_t>(rows);
  fit.rms_relative_error = result.rms_relative_error;
  fit.max_relative_error = result.max_relative_error;
  fit.partition = result.partition;
  f.fit = std::move(fit);
  return f;
}

}  // namespace pipescope
