#pragma once
// Published measurements of pipeline-parallel training on GPUs beside the
// simulator's figures (`pipescope validate`, the GPU suite). Each case is a
// scenario file (scenarios/validation/) with a top-level "validation" object:
// where the figure was published, the setup as published, the measured figure,
// what the source leaves unstated and how it was chosen, and the pipeline the
// run used (K stages, D replicas, the layers per stage when the source gives
// them). The rest of the file is an ordinary scenario whose training.global_batch
// and training.micro_batches are the run's global batch and micro-batches per
// pipeline (m = GBS / (d · mbs)).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/scenario/scenario.h"
#include "sim/validation/gpipe_validation.h"

namespace pipescope {

// The figure a case was measured in.
enum class GpuMetric {
  kSamplesPerS,        // "samples_per_s": global batch / step time
  kStepTimeS,          // "step_time_s": seconds per optimizer step
  kTokensPerSPerGpu,   // "tokens_per_s_per_gpu": global batch x sequence / step / GPUs
  kTflopsPerGpu,       // "tflops_per_gpu": megatron_flops_per_step / step / GPUs, in 1e12
  kSamplesPerSPerGpu,  // "samples_per_s_per_gpu": global batch / step / GPUs
};
std::string_view to_string(GpuMetric m);
std::optional<GpuMetric> parse_gpu_metric(std::string_view name);
inline constexpr const char* kGpuMetricNames =
    "samples_per_s, step_time_s, tokens_per_s_per_gpu, tflops_per_gpu, samples_per_s_per_gpu";
// "samples/s", "s/step", "tokens/s/GPU", "TFLOP/s/GPU", "samples/s/GPU".
std::string_view metric_unit(GpuMetric m);

// The tolerance of a throughput figure when the case gives none.
inline constexpr double kGpuDefaultTolerance = 0.20;

struct GpuCase {
  std::string file;  // labels errors
  std::string id;    // "BL-4"
  std::string source;
  GpuMetric metric = GpuMetric::kSamplesPerS;
  double measured = 0.0;
  std::string setup;
  std::string unstated;
  double tolerance = kGpuDefaultTolerance;
  // Why the case is known to fall outside its tolerance: what the model does
  // not represent. Empty: no known gap.
  std::string gap;
  // With a gap: how much faster than measured the simulation was when the
  // gap was written (faster_error, above 0: every gap explains a simulation
  // faster than the measurement); the suite's test holds the case within 3
  // points of it, so that a gap is stated again when the model moves.
  double gap_faster = 0.0;
  int stages = 1;         // K = p
  int data_parallel = 1;  // D = d; K x D = cluster.devices
  // Layers per model stage (K x chunks entries, summing to the model's layers),
  // as the source partitioned them; empty: the simulator's optimal cut.
  std::vector<int> balance;
  // The layout study the case belongs to: cases of one source that measured
  // several layouts (or sizes, or schedules) of one model on one kind of
  // machine, which `validate` ranks against each other (study_ranks); empty:
  // none.
  std::string study;
  // The peak memory the source measured on its fullest GPU, in bytes
  // ("measured_memory": a value, its unit, "GiB" or "GB", and a tolerance of
  // its own, kGpuDefaultTolerance when not given); unset: none.
  std::optional<double> measured_memory_bytes;
  double memory_tolerance = kGpuDefaultTolerance;
  nlohmann::json scenario;  // the document without "validation"
  Scenario parsed;          // the whole run: cluster.devices = K x D, the global batch
};

// Reads a case document: the "validation" object (ObjectReader, so that errors
// name the file and the field, e.g. "validation.measured.metric") and the rest
// through parse_scenario. Throws ScenarioError.
GpuCase read_gpu_case(const nlohmann::json& doc, const std::string& file);

// The figures a step's time gives, as the sources compute them.
// Samples per second of the whole run: global_batch / step.
double samples_per_s(std::int64_t global_batch, double step_time_s);
// Tokens per second per GPU (NVIDIA NeMo's "tokens/sec/GPU"): global_batch x
// seq_len / step / GPUs.
double tokens_per_s_per_gpu(std::int64_t global_batch, std::int64_t seq_len, double step_time_s,
                            int gpus);
// FLOPs of one step by the formula of Narayanan et al. 2021 ("Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
// equation 3), which Megatron-DeepSpeed's logs and the BigScience study report
// as hardware TFLOP/s: 24 c B s l h^2 (1 + s / 6h + V / 16lh), c = 4 with
// activation checkpointing (the forward counted twice), 3 without; B the global
// batch, s the sequence, l the layers, h the width, V the vocabulary.
double megatron_flops_per_step(std::int64_t global_batch, std::int64_t seq_len, std::int64_t layers,
                               std::int64_t d_model, std::int64_t vocab,
                               bool activation_checkpointing);
// The case's metric from a simulated step of the whole run (`step_time_s`).
// Throws ScenarioError when the metric needs a model the case does not have
// (tokens and TFLOP/s need a transformer).
double gpu_metric_value(const GpuCase& c, double step_time_s);

// What the simulation of one case gives: one of its D replicas, K stages, its
// micro-batches, the balance as the cut, the gradient all-reduce over the
// replicas' ring.
struct GpuCaseRun {
  double step_time_s = 0.0;
  bool fits = true;
  double peak_memory_bytes = 0.0;  // of the fullest device
  int chunks = 1;                  // model chunks per device, as the simulation ran them
};
GpuCaseRun simulate_gpu_case(const GpuCase& c);

// Every case as a PaperFigure of table "gpu": name the case id, source, metric,
// tolerance; gap set when outside the tolerance with a reason stated. A case
// with a measured memory adds a figure of table "gpu-memory" (in GiB, the
// fullest device's simulated peak beside it, the case's tolerance). Calls
// progress(done, total) after each case.
std::vector<PaperFigure> validate_gpu(
    const std::vector<GpuCase>& cases,
    const std::function<void(std::size_t, std::size_t)>& progress = {});

// The median of `values`; 0 when there are none.
double median_of(std::vector<double> values);
// Median |relative error| of the figures of `table`; 0 when there are none.
double median_abs_error(const ValidationReport& report, const std::string& table);

// The publication a source names: what precedes its first comma ("Narayanan
// et al. 2021" of "Narayanan et al. 2021, Table 1").
std::string publication_of(const std::string& source);

// How much faster the simulated run is than the measured one: the
// simulated throughput over the published, less 1, or for a step time the
// published over the simulated, less 1. Positive: the simulation is fast.
double faster_error(const PaperFigure& f);

// `table`'s figures of each publication (publication_of), in the order the
// publications first appear; the figures point into the report.
struct PublicationFigures {
  std::string publication;
  std::vector<const PaperFigure*> figures;
};
std::vector<PublicationFigures> figures_by_publication(const ValidationReport& report,
                                                       const std::string& table);

struct SourceMedian {
  std::string publication;
  double median_abs_error = 0.0;
  std::size_t figures = 0;
  double mean_faster = 0.0;  // mean faster_error
  std::string worst;         // the case of largest |error|
  double worst_error = 0.0;  // its relative_error
};
// median_abs_error of each publication's figures of `table`, in the order the
// publications first appear.
std::vector<SourceMedian> median_abs_error_by_source(const ValidationReport& report,
                                                     const std::string& table);
// The median over the sources of their medians: each publication counts
// once, however many of its runs the suite holds (the headline of
// `validate`); 0 without figures.
double median_of_source_medians(const std::vector<SourceMedian>& sources);

// How well the simulation orders the cases of one layout study as they were
// measured: Spearman's rho (sim/validation/rank_correlation.h) of the
// simulated figures against the published ones.
struct StudyRank {
  std::string study;
  std::string publication;  // of its first case
  std::size_t figures = 0;
  double spearman = 0.0;
};
// The studies of `table`'s figures (PaperFigure::study) with at least
// kStudyMinimumCases cases, in the order they first appear (their cases
// one publication's in one metric: check_studies).
inline constexpr std::size_t kStudyMinimumCases = 3;
// Throws ScenarioError naming the case file and validation.study where a
// study holds runs of two publications, or figures in two metrics.
void check_studies(const std::vector<GpuCase>& cases);
std::vector<StudyRank> study_ranks(const ValidationReport& report, const std::string& table);

}  // namespace pipescope
