#include "sim/validation/gpu_validation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "costmodels/model_families.h"
#include "sim/base/json_reader.h"
#include "sim/engine/partition.h"
#include "sim/engine/simulator.h"
#include "sim/plan/planner.h"
#include "sim/scenario/scenario_io.h"
#include "sim/validation/rank_correlation.h"

namespace pipescope {

using json_io::as_int;
using json_io::IntRange;
using json_io::kPositiveSmallInt;
using json_io::NumberRange;
using json_io::ObjectReader;
using json_io::Where;

namespace {

struct MetricName {
  GpuMetric metric;
  const char* name;
  const char* unit;
};
constexpr MetricName kMetrics[] = {
    {GpuMetric::kSamplesPerS, "samples_per_s", "samples/s"},
    {GpuMetric::kStepTimeS, "step_time_s", "s/step"},
    {GpuMetric::kTokensPerSPerGpu, "tokens_per_s_per_gpu", "tokens/s/GPU"},
    {GpuMetric::kTflopsPerGpu, "tflops_per_gpu", "TFLOP/s/GPU"},
    {GpuMetric::kSamplesPerSPerGpu, "samples_per_s_per_gpu", "samples/s/GPU"},
};

bool needs_transformer(GpuMetric m) {
  return m == GpuMetric::kTokensPerSPerGpu || m == GpuMetric::kTflopsPerGpu;
}

std::string non_empty_string(ObjectReader& r, std::string_view key) {
  std::string s = r.string(key);
  if (s.find_first_not_of(" \t\n") == std::string::npos) r.fail(key, "must not be empty");
  return s;
}

}  // namespace

std::string_view to_string(GpuMetric m) {
  for (const MetricName& n : kMetrics) {
    if (n.metric == m) return n.name;
  }
  return "?";
}

std::optional<GpuMetric> parse_gpu_metric(std::string_view name) {
  for (const MetricName& n : kMetrics) {
    if (name == n.name) return n.metric;
  }
  return std::nullopt;
}

std::string_view metric_unit(GpuMetric m) {
  for (const MetricName& n : kMetrics) {
    if (n.metric == m) return n.unit;
  }
  return "?";
}

GpuCase read_gpu_case(const nlohmann::json& doc, const std::string& file) {
  GpuCase c;
  c.file = file;
  ObjectReader top(doc, Where{file, ""});
  ObjectReader v = top.object("validation");
  c.id = non_empty_string(v, "case");
  c.source = non_empty_string(v, "source");
  {
    ObjectReader m = v.object("measured");
    m.at("metric");  // reports a missing key
    c.metric = *json_io::opt_choice(m, "metric", "metric", parse_gpu_metric, kGpuMetricNames);
    c.measured = m.number("value", NumberRange::kPositive);
    m.finish();
  }
  if (v.find("measured_memory") != nullptr) {
    ObjectReader m = v.object("measured_memory");
    const double value = m.number("value", NumberRange::kPositive);
    const std::string unit = m.string("unit");
    if (unit != "GiB" && unit != "GB") m.fail("unit", "expected GiB or GB, got '" + unit + "'");
    c.measured_memory_bytes = value * (unit == "GiB" ? 1073741824.0 : 1e9);
    c.memory_tolerance =
        m.opt_number("tolerance", NumberRange::kEfficiency).value_or(kGpuDefaultTolerance);
    m.finish();
  }
  c.setup = non_empty_string(v, "setup");
  c.unstated = non_empty_string(v, "unstated");
  c.tolerance = v.opt_number("tolerance", NumberRange::kEfficiency).value_or(kGpuDefaultTolerance);
  c.gap = v.opt_string("gap").value_or("");
  const std::optional<double> gap_faster = v.opt_number("gap_faster", NumberRange::kPositive);
  if (c.gap.empty() != !gap_faster) {
    v.fail(gap_faster ? "gap_faster" : "gap",
           "a gap and gap_faster go together: why the case is outside its tolerance, and by how "
           "much faster than measured the simulation was when that was written (above 0)");
  }
  c.gap_faster = gap_faster.value_or(0.0);
  if (v.find("study") != nullptr) c.study = non_empty_string(v, "study");
  c.stages = static_cast<int>(v.integer("stages", kPositiveSmallInt));
  c.data_parallel = static_cast<int>(v.opt_integer("data_parallel", kPositiveSmallInt).value_or(1));
  if (v.find("balance") != nullptr) {
    const nlohmann::json& list = v.array("balance");
    for (std::size_t i = 0; i < list.size(); ++i) {
      c.balance.push_back(
          static_cast<int>(as_int(list[i], v.where("balance").index(i), kPositiveSmallInt)));
    }
    if (c.balance.empty()) v.fail("balance", "expected the layers of each stage, got []");
  }
  v.finish();

  // The rest is an ordinary scenario.
  c.scenario = doc;
  c.scenario.erase("validation");
  c.parsed = parse_scenario(c.scenario, file);
  const Scenario& s = c.parsed;

  const std::int64_t devices = std::int64_t{c.stages} * c.data_parallel;
  if (devices != s.cluster.devices) {
    v.fail("data_parallel", "stages " + std::to_string(c.stages) + " x data_parallel " +
                                std::to_string(c.data_parallel) + " = " + std::to_string(devices) +
                                " devices, but cluster.devices is " +
                                std::to_string(s.cluster.devices) + "; they must be equal");
  }
  const std::int64_t gbs = s.training.global_batch;
  if (gbs % c.data_parallel != 0 || (gbs / c.data_parallel) % s.training.micro_batches != 0) {
    v.fail("data_parallel", "training.global_batch " + std::to_string(gbs) + " is not " +
                                std::to_string(c.data_parallel) + " replicas x " +
                                std::to_string(s.training.micro_batches) +
                                " micro-batches (training.micro_batches) of whole samples");
  }
  if (!c.balance.empty()) {
    const int model_stages = c.stages * s.training.chunks;
    if (static_cast<int>(c.balance.size()) != model_stages) {
      v.fail("balance", "expected " + std::to_string(model_stages) +
                            " entries (stages x training.chunks), got " +
                            std::to_string(c.balance.size()));
    }
    const std::int64_t sum = std::accumulate(c.balance.begin(), c.balance.end(), std::int64_t{0});
    const auto layers = static_cast<std::int64_t>(s.model.layers.size());
    if (sum != layers) {
      v.fail("balance", "the entries add up to " + std::to_string(sum) + " layers; the model has " +
                            std::to_string(layers));
    }
  }
  if (needs_transformer(c.metric) && !s.model.transformer) {
    v.where("measured")
        .key("metric")
        .fail(std::string(to_string(c.metric)) +
              " needs a transformer model (its sequence length and "
              "width), got family " +
              s.model.family);
  }
  return c;
}

double samples_per_s(std::int64_t global_batch, double step_time_s) {
  return static_cast<double>(global_batch) / step_time_s;
}

double tokens_per_s_per_gpu(std::int64_t global_batch, std::int64_t seq_len, double step_time_s,
                            int gpus) {
  return static_cast<double>(global_batch) * static_cast<double>(seq_len) / step_time_s /
         static_cast<double>(gpus);
}

double megatron_flops_per_step(std::int64_t global_batch, std::int64_t seq_len, std::int64_t layers,
                               std::int64_t d_model, std::int64_t vocab,
                               bool activation_checkpointing) {
  const double B = static_cast<double>(global_batch), s = static_cast<double>(seq_len),
               l = static_cast<double>(layers), h = static_cast<double>(d_model),
               V = static_cast<double>(vocab);
  const double c = activation_checkpointing ? 4.0 : 3.0;
  return 24.0 * c * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double gpu_metric_value(const GpuCase& c, double step_time_s) {
  const Scenario& s = c.parsed;
  const std::int64_t gbs = s.training.global_batch;
  switch (c.metric) {
    case GpuMetric::kSamplesPerS:
      return samples_per_s(gbs, step_time_s);
    case GpuMetric::kStepTimeS:
      return step_time_s;
    case GpuMetric::kSamplesPerSPerGpu:
      return samples_per_s(gbs, step_time_s) / static_cast<double>(s.cluster.physical_devices());
    case GpuMetric::kTokensPerSPerGpu:
    case GpuMetric::kTflopsPerGpu:
      break;
  }
  if (!s.model.transformer) {
    throw ScenarioError(c.file, "validation.measured.metric",
                        std::string(to_string(c.metric)) + " needs a transformer model");
  }
  const TransformerParams& t = *s.model.transformer;
  if (c.metric == GpuMetric::kTokensPerSPerGpu) {
    return tokens_per_s_per_gpu(gbs, t.seq_len, step_time_s, s.cluster.physical_devices());
  }
  // Megatron-LM's dense formula counts d_model-wide heads over the whole
  // sequence.
  if (t.moe.enabled() || t.mla.enabled() || t.head_dim != 0 || t.sliding_window != 0) {
    throw ScenarioError(c.file, "validation.measured.metric",
                        std::string(to_string(c.metric)) +
                            " converts by Megatron-LM's FLOPs of a dense transformer with heads "
                            "d_model / heads wide attending over the whole sequence; this model "
                            "is not one: give tokens_per_s_per_gpu");
  }
  return megatron_flops_per_step(gbs, t.seq_len, t.layers, t.d_model, t.vocab,
                                 s.training.remat != Remat::kNever) /
         step_time_s / static_cast<double>(s.cluster.physical_devices()) / 1e12;
}

GpuCaseRun simulate_gpu_case(const GpuCase& c) {
  const Scenario replica = replica_scenario(c.parsed, c.stages, c.data_parallel);
  SimConfig config;
  config.stages = c.stages;
  config.record_timeline = false;
  if (c.data_parallel > 1 || c.parsed.cluster.expert_fold > 1) {
    config.data_parallel = data_parallel_ring(c.parsed.cluster, c.stages, c.data_parallel,
                                              c.parsed.training.expert_parallel);
  }
  if (!c.balance.empty()) config.stage_ranges = ranges_from_sizes(c.balance);
  try {
    const SimResult r = simulate(replica, config);
    GpuCaseRun run{r.metrics.step_time_s(), r.metrics.fits(), 0.0, r.chunks};
    for (const auto& d : r.metrics.devices) {
      run.peak_memory_bytes = std::max(run.peak_memory_bytes, static_cast<double>(d.peak_memory));
    }
    return run;
  } catch (const ConfigError& e) {
    throw ScenarioError(c.file, e.scenario_field(), e.what());
  }
}

std::vector<PaperFigure> validate_gpu(
    const std::vector<GpuCase>& cases,
    const std::function<void(std::size_t, std::size_t)>& progress) {
  std::vector<PaperFigure> out;
  std::size_t done = 0;
  for (const GpuCase& c : cases) {
    const GpuCaseRun run = simulate_gpu_case(c);
    PaperFigure f;
    f.table = "gpu";
    f.name = c.id;
    f.source = c.source;
    f.metric = std::string(to_string(c.metric));
    f.paper = c.measured;
    f.simulated = gpu_metric_value(c, run.step_time_s);
    f.fits = run.fits;
    f.tolerance = c.tolerance;
    if (!f.within_tolerance()) f.gap = c.gap;
    f.note = c.file;
    f.study = c.study;
    f.stages = c.stages;
    f.tensor_parallel = c.parsed.training.tensor_parallel;
    if (c.stages > 1) f.chunks = run.chunks;
    out.push_back(f);
    if (c.measured_memory_bytes) {
      f.table = "gpu-memory";
      f.metric = "peak_memory_gib";
      f.tolerance = c.memory_tolerance;
      f.paper = *c.measured_memory_bytes / 1073741824.0;
      f.simulated = run.peak_memory_bytes / 1073741824.0;
      f.gap.clear();  // a case's stated gap is about its throughput
      out.push_back(std::move(f));
    }
    if (progress) progress(++done, cases.size());
  }
  return out;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double median_abs_error(const ValidationReport& report, const std::string& table) {
  std::vector<double> errors;
  for (const PaperFigure& f : report.figures) {
    if (f.table == table) errors.push_back(std::fabs(f.relative_error()));
  }
  return median_of(std::move(errors));
}

std::string publication_of(const std::string& source) {
  return source.substr(0, source.find(','));
}

std::vector<PublicationFigures> figures_by_publication(const ValidationReport& report,
                                                       const std::string& table) {
  std::vector<PublicationFigures> out;
  for (const PaperFigure& f : report.figures) {
    if (f.table != table) continue;
    const std::string publication = publication_of(f.source);
    auto it = std::find_if(out.begin(), out.end(), [&](const PublicationFigures& p) {
      return p.publication == publication;
    });
    if (it == out.end()) it = out.insert(out.end(), {publication, {}});
    it->figures.push_back(&f);
  }
  return out;
}

std::vector<SourceMedian> median_abs_error_by_source(const ValidationReport& report,
                                                     const std::string& table) {
  std::vector<SourceMedian> out;
  for (const PublicationFigures& p : figures_by_publication(report, table)) {
    SourceMedian m;
    m.publication = p.publication;
    m.figures = p.figures.size();
    std::vector<double> errors;
    double sum = 0.0;
    for (const PaperFigure* f : p.figures) {
      errors.push_back(std::fabs(f->relative_error()));
      sum += faster_error(*f);
      if (std::fabs(f->relative_error()) >= std::fabs(m.worst_error)) {
        m.worst = f->name;
        m.worst_error = f->relative_error();
      }
    }
    m.median_abs_error = median_of(std::move(errors));
    m.mean_faster = sum / static_cast<double>(m.figures);
    out.push_back(std::move(m));
  }
  return out;
}

double faster_error(const PaperFigure& f) {
  if (f.metric == to_string(GpuMetric::kStepTimeS)) return f.paper / f.simulated - 1.0;
  return f.simulated / f.paper - 1.0;
}

double median_of_source_medians(const std::vector<SourceMedian>& sources) {
  std::vector<double> medians;
  for (const SourceMedian& m : sources) medians.push_back(m.median_abs_error);
  return median_of(std::move(medians));
}

void check_studies(const std::vector<GpuCase>& cases) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const GpuCase& c = cases[i];
    const auto first = std::find_if(cases.begin(), cases.begin() + static_cast<std::ptrdiff_t>(i),
                                    [&](const GpuCase& o) { return o.study == c.study; });
    if (c.study.empty() || first == cases.begin() + static_cast<std::ptrdiff_t>(i)) continue;
    const bool sources = publication_of(first->source) != publication_of(c.source);
    if (!sources && first->metric == c.metric) continue;
    throw ScenarioError(
        c.file, "validation.study",
        "study '" + c.study + "' holds " +
            (sources ? "runs of " + publication_of(first->source) + " (" + first->file +
                           ") and of " + publication_of(c.source)
                     : std::string("figures in ") + std::string(to_string(first->metric)) + " (" +
                           first->file + ") and in " + std::string(to_string(c.metric))) +
            ": a study ranks one source's runs in one metric");
  }
}

std::vector<StudyRank> study_ranks(const ValidationReport& report, const std::string& table) {
  std::vector<StudyRank> out;
  std::vector<std::vector<double>> published, simulated;  // of each study, in out's order
  for (const PaperFigure& f : report.figures) {
    if (f.table != table || f.study.empty()) continue;
    const auto it = std::find_if(out.begin(), out.end(),
                                 [&](const StudyRank& r) { return r.study == f.study; });
    const auto i = static_cast<std::size_t>(it - out.begin());
    if (it == out.end()) {
      out.push_back({f.study, publication_of(f.source), 0, 0.0});
      published.emplace_back();
      simulated.emplace_back();
    }
    published[i].push_back(f.paper);
    simulated[i].push_back(f.simulated);
  }
  std::vector<StudyRank> ranked;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (published[i].size() < kStudyMinimumCases) continue;
    out[i].figures = published[i].size();
    out[i].spearman = spearman(simulated[i], published[i]);
    ranked.push_back(out[i]);
  }
  return ranked;
}

}  // namespace pipescope
