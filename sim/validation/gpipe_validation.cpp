#include "sim/validation/gpipe_validation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/check.h"
#include "sim/base/format.h"
#include "sim/plan/capacity.h"
#include "sim/plan/sweep.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

// Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks using
// Pipeline Parallelism", table 1 (Transformer rows): the largest Transformer
// with d_model 2048, d_ff 8192, 32 heads, vocabulary 32k, sequence 1024, batch
// 32 that fits on Cloud TPU v3 cores of 16 GiB at 12 bytes per parameter.
struct CapacityRow {
  const char* name;
  int stages;
  bool remat;
  double layers;
  double params;
};
constexpr CapacityRow kCapacityRows[] = {
    {"Naive-1", 1, false, 3, 282.2e6},         {"Pipeline-1", 1, true, 13, 785.8e6},
    {"Pipeline-8", 8, true, 103, 5.3e9},       {"Pipeline-32", 32, true, 415, 21.0e9},
    {"Pipeline-128", 128, true, 1663, 83.9e9},
};

// Table 2: training throughput normalized to K=2, M=1, for M in {1, 4, 32}
// (rows) and K in {2, 4, 8} (columns).
constexpr int kThroughputK[] = {2, 4, 8};
constexpr int kThroughputM[] = {1, 4, 32};
constexpr double kTransformerThroughput[3][3] = {{1, 1.07, 1.3}, {1.7, 3.2, 4.8}, {1.8, 3.4, 6.3}};
constexpr double kAmoebanetThroughput[3][3] = {
    {1, 1.13, 1.38}, {1.07, 1.26, 1.72}, {1.21, 1.84, 3.48}};

// The tolerances the figures are held to (docs/validation.md): capacities and
// the parameter ratios within 15 %, the Transformer's speedups at M=32 within 10 %.
constexpr double kCapacityTolerance = 0.15;

constexpr const char* kTable1Source = "Huang et al. 2019, Table 1";
constexpr const char* kTable2Source = "Huang et al. 2019, Table 2";
constexpr double kSpeedupTolerance = 0.10;

CapacityResult capacity_of(const nlohmann::json& doc, const std::string& file, int stages,
                           bool remat, std::optional<int> micro_batches) {
  nlohmann::json d = doc;
  d["cluster"]["devices"] = stages;  // Pipeline-K: K cores
  CapacityRequest request;
  request.stages = stages;
  request.remat = remat_from_bool(remat);
  request.micro_batches = micro_batches;
  request.param = "model.layers";
  return find_capacity(d, file, request);
}

// Throughput per (K, M) and whether it fits, from one sweep over the table's grid.
struct Cell {
  double samples_per_s = 0.0;
  bool fits = false;
};
using Grid = std::map<std::pair<int, int>, Cell>;

Grid throughput_grid(const nlohmann::json& doc, const std::string& file) {
  nlohmann::json d = doc;
  d["cluster"]["devices"] = 8;  // the largest K of the table
  const Scenario scenario = parse_scenario(d, file);
  SweepRequest request;
  request.stages.assign(std::begin(kThroughputK), std::end(kThroughputK));
  request.micro_batches.assign(std::begin(kThroughputM), std::end(kThroughputM));
  request.threads = 1;
  Grid grid;
  for (const SweepPoint& p : run_sweep(scenario, request)) {
    if (!p.error.empty()) {
      throw ScenarioError(file, "training",
                          "K=" + std::to_string(p.stages) +
                              " M=" + std::to_string(p.micro_batches) + ": " + p.error);
    }
    grid[{p.stages, p.micro_batches}] = Cell{p.samples_per_s, p.fits};
  }
  return grid;
}

void add_throughput_table(ValidationReport& report, const std::string& table,
                          const double (&paper)[3][3], const Grid& grid, const std::string& note) {
  const Cell& base = grid.at({2, 1});
  for (int mi = 0; mi < 3; ++mi) {
    for (int ki = 0; ki < 3; ++ki) {
      const int K = kThroughputK[ki], M = kThroughputM[mi];
      const Cell& cell = grid.at({K, M});
      PaperFigure f;
      f.table = table;
      f.source = kTable2Source;
      f.name = "K=" + std::to_string(K) + " M=" + std::to_string(M);
      f.paper = paper[mi][ki];
      f.simulated = cell.samples_per_s / base.samples_per_s;
      f.fits = cell.fits;
      f.note = note;
      report.figures.push_back(std::move(f));
    }
  }
}

// Each file must hold the model its tables are about.
void require_family(const nlohmann::json& doc, const std::string& file, const std::string& family) {
  const Scenario sc = parse_scenario(doc, file);
  if (sc.model.family != family) {
    throw ScenarioError(file, "model.family",
                        "expected " + family + " (the paper's model), got " + sc.model.family);
  }
}

// Sensitivities: the memory table's assumptions changed one at a time.
struct Variant {
  const char* assumption;
  const char* path;
  nlohmann::json value;
};

std::vector<Variant> variants() {
  return {
      {"M=4 instead of 8", "/training/micro_batches", 4},
      {"M=16 instead of 8", "/training/micro_batches", 16},
      {"fp32 activations instead of bf16", "/model/dtype", "fp32"},
      {"dropout on (masks and dropped probabilities stashed)", "/model/dropout", true},
  };
}

// Reports (done, total) after each step of the validation.
class Steps {
 public:
  Steps(const std::function<void(std::size_t, std::size_t)>& progress, std::size_t total)
      : progress_(progress), total_(total) {}
  void step() {
    if (progress_) progress_(++done_, total_);
  }

 private:
  const std::function<void(std::size_t, std::size_t)>& progress_;
  std::size_t total_;
  std::size_t done_ = 0;
};

// A row of table 1 at the scenario `doc` describes. Naive-1 is the plain
// model without micro-batches; the pipelines use the scenario's M.
CapacityResult capacity_of_row(const nlohmann::json& doc, const std::string& file,
                               const CapacityRow& row) {
  return capacity_of(doc, file, row.stages, row.remat,
                     row.remat ? std::nullopt : std::optional<int>(1));
}

using Capacities = std::map<std::string, CapacityResult>;  // by table 1 row

// Table 1: capacities in whole layers, as the paper reports them; the
// capacity in finer steps goes alongside as information.
Capacities add_capacity_table(ValidationReport& report, const nlohmann::json& doc,
                              const std::string& file, Steps& steps) {
  Capacities capacity;
  for (const CapacityRow& row : kCapacityRows) {
    const CapacityResult r = capacity_of_row(doc, file, row);
    capacity[row.name] = r;
    PaperFigure layers;
    layers.table = "memory";
    layers.source = kTable1Source;
    layers.name = std::string(row.name) + " layers";
    layers.paper = row.layers;
    layers.simulated = static_cast<double>(r.max_value);
    layers.finer = r.fractional_value;
    layers.tolerance = kCapacityTolerance;
    layers.capacity_rows = {row.name};
    PaperFigure params = layers;
    params.name = std::string(row.name) + " parameters";
    params.paper = row.params;
    params.simulated = static_cast<double>(r.params);
    params.finer = r.fractional_params;
    report.figures.push_back(std::move(layers));
    report.figures.push_back(std::move(params));
    steps.step();
  }
  return capacity;
}

// A ratio of parameter counts the paper states in words.
void add_ratio(ValidationReport& report, const Capacities& capacity, const char* name, double paper,
               const std::string& num_row, const std::string& den_row) {
  const CapacityResult& num = capacity.at(num_row);
  const CapacityResult& den = capacity.at(den_row);
  PaperFigure f;
  f.table = "ratios";
  f.source = kTable1Source;
  f.name = name;
  f.paper = paper;
  f.capacity_rows = {num_row, den_row};
  f.simulated =
      den.params > 0 ? static_cast<double>(num.params) / static_cast<double>(den.params) : 0.0;
  f.finer = den.fractional_params > 0 ? num.fractional_params / den.fractional_params : 0;
  f.tolerance = kCapacityTolerance;
  report.figures.push_back(std::move(f));
}

// The known miss: without rematerialization the whole batch's stashes are
// live, and one more layer of them does not fit. Figures built on Naive-1
// that leave their tolerance say so, with the memory the paper's count needs.
void state_naive_gap(ValidationReport& report, const CapacityResult& naive) {
  if (naive.next_peak_memory_bytes <= 0) return;
  const std::string gap = "Naive-1 holds " + std::to_string(naive.max_value) +
                          " layers: " + std::to_string(naive.max_value + 1) + " need " +
                          format_bytes(static_cast<double>(naive.next_peak_memory_bytes)) + " of " +
                          format_bytes(static_cast<double>(naive.memory_bytes)) + " (" +
                          format_fixed(100.0 * (static_cast<double>(naive.next_peak_memory_bytes) /
                                                    static_cast<double>(naive.memory_bytes) -
                                                1.0),
                                       1) +
                          " % over)";
  for (PaperFigure& f : report.figures) {
    const bool on_naive = std::find(f.capacity_rows.begin(), f.capacity_rows.end(), "Naive-1") !=
                          f.capacity_rows.end();
    if (on_naive && f.checked() && !f.within_tolerance()) f.gap = gap;
  }
}

// A speedup within the Transformer's M=32 row of table 2, over K=2.
void add_speedup(ValidationReport& report, const Grid& grid, const std::string& name, int K,
                 double paper) {
  PaperFigure f;
  f.table = "ratios";
  f.source = kTable2Source;
  f.name = name;
  f.paper = paper;
  f.simulated = grid.at({K, 32}).samples_per_s / grid.at({2, 32}).samples_per_s;
  f.fits = grid.at({K, 32}).fits && grid.at({2, 32}).fits;
  f.tolerance = kSpeedupTolerance;
  f.note = "Transformer-48 at M=32, over K=2";
  report.figures.push_back(std::move(f));
}

// Table 2. The paper grew the batch with K where memory allowed and does not
// give the batches; the scenarios keep theirs, so only the speedups at M=32,
// where the bubble is small and the batch matters least, are held to a
// tolerance.
void add_throughput_tables(ValidationReport& report, const ValidationInputs& in, Steps& steps) {
  const Grid tgrid = throughput_grid(*in.transformer, in.transformer_file);
  steps.step();
  add_speedup(report, tgrid, "4x the accelerators (3.5x)", 8, 6.3 / 1.8);
  add_speedup(report, tgrid, "2x the accelerators", 4, 3.4 / 1.8);
  add_throughput_table(report, "transformer-throughput", kTransformerThroughput, tgrid,
                       "batch kept at the scenario's; the paper's is not given");
  const Grid agrid = throughput_grid(*in.amoebanet, in.amoebanet_file);
  steps.step();
  add_throughput_table(report, "amoebanet-throughput", kAmoebanetThroughput, agrid,
                       "batch kept at the scenario's; the paper's is not given");
}

void add_sensitivities(ValidationReport& report, const std::vector<Variant>& variants,
                       const nlohmann::json& transformer, const std::string& file, Steps& steps) {
  for (const Variant& v : variants) {
    nlohmann::json d = transformer;
    d[nlohmann::json::json_pointer(v.path)] = v.value;
    for (const CapacityRow& row : kCapacityRows) {
      if (row.stages > 8) continue;  // the larger pipelines scale like Pipeline-8
      if (!row.remat && std::string(v.path) == "/training/micro_batches") continue;
      const CapacityResult r = capacity_of_row(d, file, row);
      report.sensitivities.push_back(Sensitivity{v.assumption, std::string(row.name) + " layers",
                                                 row.layers, static_cast<double>(r.max_value)});
    }
    steps.step();
  }
}

}  // namespace

bool PaperFigure::within_tolerance() const {
  return tolerance && std::fabs(relative_error()) <= *tolerance;
}

int ValidationReport::checked() const {
  int n = 0;
  for (const PaperFigure& f : figures) n += f.checked() ? 1 : 0;
  return n;
}

int ValidationReport::failed() const {
  int n = 0;
  for (const PaperFigure& f : figures) {
    n += f.checked() && !f.within_tolerance() && f.gap.empty() ? 1 : 0;
  }
  return n;
}

int ValidationReport::gaps() const {
  int n = 0;
  for (const PaperFigure& f : figures) {
    n += f.checked() && !f.within_tolerance() && !f.gap.empty() ? 1 : 0;
  }
  return n;
}

ValidationReport validate_gpipe(const ValidationInputs& in) {
  PS_CHECK(in.transformer != nullptr && in.amoebanet != nullptr, "validation needs both scenarios");
  require_family(*in.transformer, in.transformer_file, "transformer");
  require_family(*in.amoebanet, in.amoebanet_file, "amoebanet");
  ValidationReport report;
  const std::vector<Variant> changed = variants();
  Steps steps(in.progress, std::size(kCapacityRows) + 2 + changed.size());
  const Capacities capacity =
      add_capacity_table(report, *in.transformer, in.transformer_file, steps);
  add_ratio(report, capacity, "rematerialization, one core (2.7x)", 2.7, "Pipeline-1", "Naive-1");
  add_ratio(report, capacity, "128 partitions (298x)", 298, "Pipeline-128", "Naive-1");
  state_naive_gap(report, capacity.at("Naive-1"));
  add_throughput_tables(report, in, steps);
  add_sensitivities(report, changed, *in.transformer, in.transformer_file, steps);
  return report;
}

nlohmann::json validation_json(const ValidationReport& report) {
  nlohmann::json figures = nlohmann::json::array();
  for (const PaperFigure& f : report.figures) {
    nlohmann::json j = {{"table", f.table},         {"name", f.name},
                        {"source", f.source},       {"paper", f.paper},
                        {"simulated", f.simulated}, {"relative_error", f.relative_error()},
                        {"tolerance", nullptr},     {"within_tolerance", nullptr}};
    if (!f.metric.empty()) j["metric"] = f.metric;
    if (f.finer) j["simulated_finer"] = *f.finer;
    if (f.fits) j["fits"] = *f.fits;
    if (!f.gap.empty()) j["gap"] = f.gap;
    if (f.tolerance) {
      j["tolerance"] = *f.tolerance;
      j["within_tolerance"] = f.within_tolerance();
    }
    if (!f.note.empty()) j["note"] = f.note;
    if (!f.study.empty()) j["study"] = f.study;
    figures.push_back(std::move(j));
  }
  nlohmann::json sensitivities = nlohmann::json::array();
  for (const Sensitivity& s : report.sensitivities) {
    sensitivities.push_back({{"assumption", s.assumption},
                             {"figure", s.figure},
                             {"paper", s.paper},
                             {"simulated", s.simulated}});
  }
  return {{"figures", std::move(figures)},
          {"sensitivities", std::move(sensitivities)},
          {"checked", report.checked()},
          {"failed", report.failed()},
          {"gaps", report.gaps()}};
}

}  // namespace pipescope
