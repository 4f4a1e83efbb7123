#include "cli/validate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bundled_scenarios.h"
#include "cli/json_output.h"
#include "cli/progress.h"
#include "cli/scenario_options.h"
#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/scenario_io.h"
#include "sim/validation/calibration.h"
#include "sim/validation/gpipe_validation.h"
#include "sim/validation/gpu_validation.h"
#include "sim/validation/layout_split.h"
#include "sim/validation/leave_one_out.h"

namespace pipescope::cli {

CLI::App* add_validate_command(CLI::App& app, ValidateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "validate",
      "Reproduce the GPipe paper's tables (largest Transformer per TPU core count, normalized "
      "throughput) and published GPU pipeline measurements, and print the published figures "
      "beside the simulated ones");
  cmd->add_option("--scenarios", o.scenarios,
                  "Folder with transformer-tpuv3.json and amoebanet-tpuv2.json (default: the "
                  "copies of scenarios/gpipe/ built into the program)");
  cmd->add_option("--gpu-scenarios", o.gpu_scenarios,
                  "Folder of GPU validation cases, every *.json in it (default: the copies of "
                  "scenarios/validation/ built into the program)");
  cmd->add_flag("--json", o.json, "Print the figures as JSON");
  cmd->add_flag("--leave-one-out", o.leave_one_out,
                "Also fit the kernel tables' efficiencies and per-kernel cost on every source "
                "of the GPU suite but one and predict that one, for each source (about twenty "
                "simulations of the suite a source)");
  cmd->add_option("--set", o.overrides,
                  "Change a field of every GPU case before it is simulated, e.g. --set "
                  "training.framework.tp_forward_overlap=false (repeatable): a what-if; the "
                  "published figures, their tolerances and gaps stay as recorded, and a case "
                  "without the field refuses it")
      ->allow_extra_args(false);
  add_framework_option(*cmd, o.framework);
  return cmd;
}

namespace {

struct Source {
  nlohmann::json doc;
  std::string label;
};

Source read_source(const std::optional<std::string>& folder, const char* name,
                   std::string_view bundled) {
  if (folder) {
    const std::string file = (std::filesystem::path(*folder) / name).string();
    return {load_scenario_json(file), file};
  }
  const std::string label = std::string("scenarios/gpipe/") + name + " (built in)";
  nlohmann::json doc = nlohmann::json::parse(bundled, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw ScenarioError(label, "", "not valid JSON");
  return {std::move(doc), label};
}

// Whether --set or --framework makes this run a what-if.
bool is_what_if(const ValidateOptions& o) {
  return !o.overrides.empty() || o.framework;
}

// The what-if's --set and --framework applied to one case's document, as
// simulate applies them to a scenario. The validation section is the published
// record, which they may not change.
nlohmann::json with_what_if(const ValidateOptions& o, nlohmann::json doc,
                            const std::string& label) {
  if (!is_what_if(o)) return doc;
  for (const std::string& assignment : o.overrides) {
    if (assignment.rfind("validation", 0) == 0) {
      throw std::invalid_argument("--set " + assignment +
                                  ": the validation section is the published record; --set "
                                  "changes only what is simulated");
    }
  }
  ScenarioOptions what_if;
  what_if.file = label;
  what_if.document = std::move(doc);
  what_if.overrides = o.overrides;
  what_if.framework = o.framework;
  return load_document(what_if);
}

// The GPU suite's cases: every *.json of `folder` in name order, or the bundled
// copies, each with the what-if applied.
std::vector<GpuCase> read_gpu_cases(const ValidateOptions& o, std::vector<std::string>& labels) {
  const std::optional<std::string>& folder = o.gpu_scenarios;
  std::vector<GpuCase> cases;
  if (folder) {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    std::filesystem::directory_iterator it(*folder, ec);
    if (ec) throw ScenarioError(*folder, "", "cannot read the folder: " + ec.message());
    for (const auto& entry : it) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw ScenarioError(*folder, "", "no validation cases (*.json) in the folder");
    }
    for (const auto& file : files) {
      labels.push_back(file.string());
      cases.push_back(
          read_gpu_case(with_what_if(o, load_scenario_json(file), file.string()), file.string()));
    }
    check_studies(cases);
    return cases;
  }
  for (std::size_t i = 0; i < kBundledGpuValidationCount; ++i) {
    const BundledScenario& b = kBundledGpuValidation[i];
    const std::string label = "scenarios/validation/" + std::string(b.name) + " (built in)";
    labels.push_back(label);
    cases.push_back(read_gpu_case(
        with_what_if(o, json_io::parse_json(std::string(b.text), label), label), label));
  }
  check_studies(cases);
  return cases;
}

std::string value_text(const PaperFigure& f, double v) {
  if (f.name.find("parameters") != std::string::npos) return format_count(v);
  if (f.table == "memory") return format_fixed(v, v == std::floor(v) ? 0 : 2);
  return format_fixed(v, 2);
}

void print_figures(const ValidationReport& report, const std::string& table,
                   const std::string& title, int name_width) {
  std::printf("%s\n%-*s %10s %10s %10s %9s %6s\n", title.c_str(), name_width, "", "paper",
              "simulated", "(finer)", "error", "tol.");
  for (const PaperFigure& f : report.figures) {
    if (f.table != table) continue;
    const std::string finer = f.finer ? "(" + value_text(f, *f.finer) + ")" : "";
    const std::string tol =
        f.tolerance ? format_fixed(*f.tolerance * 100, 0) + " %" : std::string("-");
    const char* verdict = !f.checked()           ? ""
                          : f.within_tolerance() ? "  ok"
                          : f.gap.empty()        ? "  OUTSIDE"
                                                 : "  gap*";
    std::printf("%-*s %10s %10s %10s %9s %6s%s\n", name_width, f.name.c_str(),
                value_text(f, f.paper).c_str(), value_text(f, f.simulated).c_str(), finer.c_str(),
                format_signed_percent(f.relative_error()).c_str(), tol.c_str(), verdict);
    if (f.fits && !*f.fits)
      std::printf("%-*s   (a configuration behind it does not fit: !)\n", name_width, "");
  }
  std::printf("\n");
}

void print_throughput(const ValidationReport& report, const std::string& table,
                      const std::string& title) {
  std::map<std::pair<int, int>, const PaperFigure*> cells;
  for (const PaperFigure& f : report.figures) {
    if (f.table != table) continue;
    int K = 0, M = 0;
    if (std::sscanf(f.name.c_str(), "K=%d M=%d", &K, &M) == 2) cells[{M, K}] = &f;
  }
  std::printf("%s\nnormalized to K=2, M=1; paper / simulated\n%6s", title.c_str(), "M \\ K");
  for (int K : {2, 4, 8}) std::printf(" %13d", K);
  std::printf("\n");
  for (int M : {1, 4, 32}) {
    std::printf("%6d", M);
    for (int K : {2, 4, 8}) {
      const auto it = cells.find({M, K});
      if (it == cells.end()) {
        std::printf(" %13s", "-");
        continue;
      }
      // '!' marks a cell whose configuration does not fit in the simulated memory.
      std::printf("  %4.2f / %4.2f%s", it->second->paper, it->second->simulated,
                  it->second->fits.value_or(true) ? " " : "!");
    }
    std::printf("\n");
  }
  std::printf("\n");
}

// Decimals that keep a figure of any size readable: 8715, 132.4, 26.73, 1.234.
std::string figure_text(double v) {
  const double a = std::fabs(v);
  return format_fixed(v, a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : 3);
}

int publication_width(const std::vector<std::string>& publications) {
  int width = 6;
  for (const std::string& p : publications) width = std::max(width, static_cast<int>(p.size()));
  return width;
}

// Each publication's figures of `table`: how many, their median |error|, how
// much faster the simulation is on average, the worst; then the headline,
// the median of the publications' medians.
void print_source_medians(const ValidationReport& report, const std::string& table) {
  const std::vector<SourceMedian> sources = median_abs_error_by_source(report, table);
  if (sources.empty()) return;
  std::vector<std::string> names;
  for (const SourceMedian& m : sources) names.push_back(m.publication);
  const int width = publication_width(names);
  const bool memory = table == "gpu-memory";
  std::printf("\n%-*s %5s %15s %13s   %s\n", width, "source", "cases", "median |error|",
              memory ? "mean error" : "mean faster", "worst");
  for (const SourceMedian& m : sources) {
    std::printf("%-*s %5zu %13.1f %% %11s   %s %s\n", width, m.publication.c_str(), m.figures,
                m.median_abs_error * 100, format_signed_percent(m.mean_faster).c_str(),
                m.worst.c_str(), format_signed_percent(m.worst_error).c_str());
  }
  std::printf("median of the %zu sources' medians: %.1f %%\n", sources.size(),
              median_of_source_medians(sources) * 100);
}

// Each layout study's Spearman rank correlation, simulated against published.
void print_study_ranks(const ValidationReport& report, const std::string& table) {
  const std::vector<StudyRank> studies = study_ranks(report, table);
  if (studies.empty()) return;
  std::vector<std::string> names, publications;
  for (const StudyRank& r : studies) {
    names.push_back(r.study);
    publications.push_back(r.publication);
  }
  const int width = publication_width(names);
  const int source_width = publication_width(publications);
  std::printf(
      "\nLayout studies: how the simulation orders each study's cases against the measured "
      "order (Spearman's rho, 1: the same order)\n");
  std::printf("%-*s %-*s %5s %9s\n", width, "study", source_width, "source", "cases", "Spearman");
  for (const StudyRank& r : studies) {
    std::printf("%-*s %-*s %5zu %9s\n", width, r.study.c_str(), source_width, r.publication.c_str(),
                r.figures, format_fixed(r.spearman, 2).c_str());
  }
}

std::string split_cell(const SplitSide& s) {
  return s.runs == 0 ? "-" : format_signed_percent(s.median_faster);
}

// Each source's runs split by one dimension of their layout: the median of
// how much faster the simulation is on each side, so that what a pipeline
// stage or a tensor-parallel split costs is judged apart from what every run
// pays.
void print_layout_split(const ValidationReport& report, const std::string& table,
                        LayoutDimension dimension) {
  const std::vector<LayoutSplit> rows = layout_split(report, table, dimension);
  if (rows.empty()) return;
  std::vector<std::string> names;
  for (const LayoutSplit& r : rows) names.push_back(r.publication);
  const int width = publication_width(names);
  const auto [title, sides, symbol] =
      dimension == LayoutDimension::kStages
          ? std::tuple{"One stage and pipelined", "runs with K = 1 beside runs with K > 1", "K"}
      : dimension == LayoutDimension::kTensorParallel
          ? std::tuple{"Whole layers and tensor-parallel", "runs with T = 1 beside runs with T > 1",
                       "T"}
          : std::tuple{"One chunk and interleaved",
                       "pipelined runs (K > 1) with v = 1 beside those with v > 1", "v"};
  std::printf(
      "\n%s: each source's median of how much faster the simulation is (positive: faster than "
      "measured), %s\n",
      title, sides);
  const std::string one = std::string(symbol) + " = 1", more = std::string(symbol) + " > 1";
  std::printf("%-*s %6s %9s %6s %9s\n", width, "source", one.c_str(), "faster", more.c_str(),
              "faster");
  for (const LayoutSplit& r : rows) {
    std::printf("%-*s %6zu %9s %6zu %9s\n", width, r.publication.c_str(), r.one.runs,
                split_cell(r.one).c_str(), r.more.runs, split_cell(r.more).c_str());
  }
}

nlohmann::json layout_split_json(const ValidationReport& report, const std::string& table,
                                 LayoutDimension dimension) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayoutSplit& r : layout_split(report, table, dimension)) {
    out.push_back({{"publication", r.publication},
                   {"one_runs", r.one.runs},
                   {"one_median_faster", r.one.median_faster},
                   {"more_runs", r.more.runs},
                   {"more_median_faster", r.more.median_faster}});
  }
  return out;
}

nlohmann::json studies_json(const ValidationReport& report, const std::string& table) {
  nlohmann::json out = nlohmann::json::array();
  for (const StudyRank& r : study_ranks(report, table)) {
    out.push_back({{"study", r.study},
                   {"publication", r.publication},
                   {"cases", r.figures},
                   {"spearman", r.spearman}});
  }
  return out;
}

void print_leave_one_out(const LeaveOneOutReport& loo) {
  std::string names;
  for (const CalibrationParameter* p : loo.parameters)
    names += (names.empty() ? "" : ", ") + p->name;
  std::vector<std::string> publications;
  for (const LeftOut& s : loo.sources) publications.push_back(s.publication);
  const int width = publication_width(publications);
  std::printf(
      "Leave one source out: %s fitted on every other source (one factor each on every "
      "device's table), then the source's cases simulated with them (docs/validation.md: "
      "\"Leave one source out\")\n",
      names.c_str());
  std::printf("%-*s %5s %10s %10s %12s   factors\n", width, "source", "cases", "suite", "left out",
              "mean faster");
  for (const LeftOut& s : loo.sources) {
    std::string factors;
    for (const double f : s.factors) factors += (factors.empty() ? "" : " ") + format_fixed(f, 3);
    std::printf("%-*s %5zu %8.1f %% %8.1f %% %12s   %s\n", width, s.publication.c_str(), s.cases,
                s.suite_median_abs_error * 100, s.median_abs_error * 100,
                format_signed_percent(s.mean_faster).c_str(), factors.c_str());
  }
  std::printf("median of the left-out medians: %.1f %%\n\n", loo.median * 100);
}

nlohmann::json sources_json(const ValidationReport& report, const std::string& table) {
  nlohmann::json out = nlohmann::json::array();
  for (const SourceMedian& m : median_abs_error_by_source(report, table)) {
    out.push_back({{"publication", m.publication},
                   {"cases", m.figures},
                   {"median_abs_error", m.median_abs_error},
                   {"mean_faster_error", m.mean_faster},
                   {"worst_case", m.worst},
                   {"worst_error", m.worst_error}});
  }
  return out;
}

nlohmann::json leave_one_out_json(const LeaveOneOutReport& loo) {
  nlohmann::json sources = nlohmann::json::array();
  for (const LeftOut& s : loo.sources) {
    nlohmann::json factors = nlohmann::json::object();
    for (std::size_t j = 0; j < loo.parameters.size(); ++j) {
      factors[loo.parameters[j]->name] = s.factors[j];
    }
    sources.push_back({{"publication", s.publication},
                       {"cases", s.cases},
                       {"suite_median_abs_error", s.suite_median_abs_error},
                       {"median_abs_error", s.median_abs_error},
                       {"mean_faster_error", s.mean_faster},
                       {"factors", factors}});
  }
  return {{"sources", sources}, {"median", loo.median}};
}

void print_gpu_table(const ValidationReport& report, const std::string& table, const char* title) {
  int source_width = 6;
  for (const PaperFigure& f : report.figures) {
    if (f.table == table) source_width = std::max(source_width, static_cast<int>(f.source.size()));
  }
  std::printf("%s (docs/validation.md: \"The GPU suite\")\n", title);
  std::printf("%-6s %-*s %-13s %10s %10s %9s %6s\n", "case", source_width, "source", "metric",
              "published", "simulated", "error", "tol.");
  int gaps = 0, outside = 0, cases = 0;
  for (const PaperFigure& f : report.figures) {
    if (f.table != table) continue;
    ++cases;
    const std::optional<GpuMetric> metric = parse_gpu_metric(f.metric);
    const std::string unit = metric                  ? std::string(metric_unit(*metric))
                             : table == "gpu-memory" ? "GiB"
                                                     : f.metric;
    const char* verdict = f.within_tolerance() ? "  ok" : f.gap.empty() ? "  OUTSIDE" : "  gap*";
    gaps += !f.within_tolerance() && !f.gap.empty() ? 1 : 0;
    outside += !f.within_tolerance() && f.gap.empty() ? 1 : 0;
    std::printf("%-6s %-*s %-13s %10s %10s %9s %4s %%%s%s\n", f.name.c_str(), source_width,
                f.source.c_str(), unit.c_str(), figure_text(f.paper).c_str(),
                figure_text(f.simulated).c_str(), format_signed_percent(f.relative_error()).c_str(),
                format_fixed(f.tolerance.value_or(0) * 100, 0).c_str(), verdict,
                f.fits.value_or(true) ? "" : " !");
  }
  std::printf(
      "%d cases: %d within tolerance, %d outside with the cause stated (gap*), %d outside "
      "without; median |error| over every case %.1f %%\n",
      cases, cases - gaps - outside, gaps, outside, median_abs_error(report, table) * 100);
  print_source_medians(report, table);
}

void print_gpu_suite(const ValidationReport& report, const std::optional<LeaveOneOutReport>& loo) {
  print_gpu_table(report, "gpu", "Published GPU measurements");
  // Each stated cause once, after the cases it explains.
  std::vector<std::pair<std::string, std::string>> causes;  // (cases, gap)
  for (const PaperFigure& f : report.figures) {
    if (f.table != "gpu" || f.gap.empty()) continue;
    const auto same = std::find_if(causes.begin(), causes.end(),
                                   [&](const auto& c) { return c.second == f.gap; });
    if (same == causes.end()) {
      causes.emplace_back(f.name, f.gap);
    } else {
      same->first += ", " + f.name;
    }
  }
  for (const auto& [names, gap] : causes) std::printf("* %s: %s\n", names.c_str(), gap.c_str());
  const bool any_over =
      std::any_of(report.figures.begin(), report.figures.end(),
                  [](const auto& f) { return f.table == "gpu" && !f.fits.value_or(true); });
  if (any_over) {
    std::printf(
        "! the case does not fit in the simulated memory, which shards no optimizer state and "
        "recomputes nothing the source does not state (docs/validation.md: \"The GPU "
        "suite\"); its simulated time does not depend on that\n");
  }
  print_layout_split(report, "gpu", LayoutDimension::kStages);
  print_layout_split(report, "gpu", LayoutDimension::kTensorParallel);
  print_layout_split(report, "gpu", LayoutDimension::kChunks);
  print_study_ranks(report, "gpu");
  std::printf("\n");
  if (loo) {
    print_leave_one_out(*loo);
  } else {
    std::printf(
        "(--leave-one-out: each source predicted by the kernel tables fitted on the others)\n\n");
  }
  const bool any_memory = std::any_of(report.figures.begin(), report.figures.end(),
                                      [](const auto& f) { return f.table == "gpu-memory"; });
  if (any_memory) {
    print_gpu_table(report, "gpu-memory",
                    "Published GPU memory: the fullest GPU's peak beside the simulated one");
    std::printf("\n");
  }
}

}  // namespace

int run_validate(const ValidateOptions& o) {
  const Source transformer =
      read_source(o.scenarios, "transformer-tpuv3.json", kBundledGpipeTransformer);
  const Source amoebanet = read_source(o.scenarios, "amoebanet-tpuv2.json", kBundledGpipeAmoebanet);
  std::vector<std::string> gpu_labels;
  const std::vector<GpuCase> gpu_cases = read_gpu_cases(o, gpu_labels);
  ValidationReport report;
  {
    ProgressBar bar("validate");
    ValidationInputs in;
    in.transformer = &transformer.doc;
    in.transformer_file = transformer.label;
    in.amoebanet = &amoebanet.doc;
    in.amoebanet_file = amoebanet.label;
    in.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    report = validate_gpipe(in);
    std::vector<PaperFigure> gpu = validate_gpu(gpu_cases, in.progress);
    report.figures.insert(report.figures.end(), gpu.begin(), gpu.end());
  }
  std::optional<LeaveOneOutReport> loo;
  if (o.leave_one_out) {
    ProgressBar bar("leave one source out");
    loo = leave_one_source_out(gpu_cases, default_fit(), [&](std::size_t done, std::size_t total) {
      bar.update(done, total);
    });
  }

  if (o.json) {
    nlohmann::json j = validation_json(report);
    j["scenarios"] = {transformer.label, amoebanet.label};
    j["gpu_scenarios"] = gpu_labels;
    if (is_what_if(o)) {
      j["what_if"] = {{"set", o.overrides}};
      if (o.framework) j["what_if"]["framework"] = *o.framework;
    }
    j["gpu_median_abs_error"] = median_abs_error(report, "gpu");
    j["gpu_sources"] = sources_json(report, "gpu");
    j["gpu_source_median"] = median_of_source_medians(median_abs_error_by_source(report, "gpu"));
    j["gpu_studies"] = studies_json(report, "gpu");
    j["gpu_stage_split"] = layout_split_json(report, "gpu", LayoutDimension::kStages);
    j["gpu_tensor_split"] = layout_split_json(report, "gpu", LayoutDimension::kTensorParallel);
    j["gpu_chunk_split"] = layout_split_json(report, "gpu", LayoutDimension::kChunks);
    if (loo) j["leave_one_source_out"] = leave_one_out_json(*loo);
    j["gpu_memory_median_abs_error"] = median_abs_error(report, "gpu-memory");
    j["gpu_memory_sources"] = sources_json(report, "gpu-memory");
    print_json(j);
  } else {
    std::printf("The GPipe paper (Huang et al. 2019) beside the simulation\nscenarios: %s, %s\n",
                transformer.label.c_str(), amoebanet.label.c_str());
    std::printf("GPU cases: %zu from %s\n\n", gpu_cases.size(),
                o.gpu_scenarios ? o.gpu_scenarios->c_str() : "scenarios/validation/ (built in)");
    if (is_what_if(o)) {
      std::string what;
      for (const std::string& a : o.overrides) what += " --set " + a;
      if (o.framework) what += " --framework " + *o.framework;
      std::printf(
          "What-if: every GPU case with%s (the published figures, tolerances and gaps "
          "as recorded)\n\n",
          what.c_str());
    }
    print_figures(report, "memory",
                  "Largest Transformer on TPU v3 cores of 16 GiB (table 1); in whole layers, as "
                  "the paper counts; (finer): the share of the next layer that would still fit",
                  24);
    print_figures(report, "ratios", "Ratios the paper states", 36);
    print_throughput(report, "transformer-throughput", "Transformer-48 throughput (table 2)");
    print_throughput(report, "amoebanet-throughput", "AmoebaNet-D (18, 256) throughput (table 2)");
    std::printf("What the memory table's assumptions do (whole layers; paper in brackets)\n");
    std::string last;
    for (const Sensitivity& s : report.sensitivities) {
      if (s.assumption != last) {
        std::printf("%s%s:", last.empty() ? "" : "\n", s.assumption.c_str());
        last = s.assumption;
      }
      std::printf("  %s %.0f (%.0f)", s.figure.c_str(), s.simulated, s.paper);
    }
    std::printf("\n\n");
    print_gpu_suite(report, loo);
    for (const PaperFigure& f : report.figures) {
      if (!f.gap.empty() && f.table != "gpu" && f.table != "gpu-memory") {
        std::printf("* gap: %s (docs/validation.md: \"How close is the simulator?\")\n",
                    f.gap.c_str());
        break;
      }
    }
    std::printf(
        "! the configuration does not fit in the simulated memory (the paper shrank its "
        "batch where memory required); its simulated time does not depend on that\n");
    std::printf(
        "%d of %d checked figures within tolerance, %d outside with the cause stated; the "
        "GPipe throughput tables are reported, not checked (their batches are not given).\n",
        report.checked() - report.failed() - report.gaps(), report.checked(), report.gaps());
  }
  // After the figures: the command's error line and status say the rest.
  if (report.failed() > 0) {
    throw std::runtime_error(std::to_string(report.failed()) + " of " +
                             std::to_string(report.checked()) +
                             " checked figures are outside their tolerance");
  }
  return 0;
}

}  // namespace pipescope::cli
