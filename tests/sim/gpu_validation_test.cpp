// The simulator against published GPU measurements (scenarios/validation/):
// every case file carries its source, setup and unstated choices; a bad
// "validation" object is named by file and field; the metrics follow the
// sources' formulas; and each case stays within its tolerance or its stated gap.

#include "sim/validation/gpu_validation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/scenario/scenario_io.h"
#include "validation_cases.h"

namespace pipescope {
namespace {

// Each source's median |error| over the suite and their median, as
// docs/validation.md ("The GPU suite") and the README state them (filled in
// from `pipescope validate`; update both with the docs when the model moves).
const std::map<std::string, double> kStatedSourceMedians = {
    {"BigScience 2022", 0.1469},   {"Korthikanti et al. 2022", 0.0494},
    {"Smith et al. 2022", 0.2159}, {"Narayanan et al. 2021", 0.0395},
    {"NVIDIA 2024", 0.2266},       {"Kim et al. 2020", 0.1710},
    {"Qi et al. 2024", 0.0820}};
constexpr double kStatedHeadline = 0.1469;
// Each layout study's Spearman rank correlation, as docs/validation.md
// states them.
const std::map<std::string, double> kStatedStudyRanks = {
    {"BL-3", 1.0},    {"BL-5", 0.7714}, {"MT", 1.0},      {"NA-1..3", 1.0},
    {"NA-4..6", 1.0}, {"NA-T", 0.8842}, {"TG-A", 0.9833}, {"TG-R", 1.0},
    {"ZB-1", 0.8954}, {"ZB-2", 0.9333}, {"ZB-3", 0.8333}, {"ZB-4", 0.9791}};

std::vector<GpuCase> bundled_cases() {
  return testing::validation_cases();
}

TEST(GpuValidationCases, EveryCaseLoadsWithItsSourceSetupAndUnstatedChoices) {
  const std::vector<GpuCase> cases = bundled_cases();
  ASSERT_GE(cases.size(), 10u);
  std::set<std::string> ids, publications;
  for (const GpuCase& c : cases) {
    SCOPED_TRACE(c.file);
    EXPECT_TRUE(ids.insert(c.id).second) << "repeated case " << c.id;
    // The file is named after its case: "bl-4.json" holds BL-4.
    std::string lower = c.id;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    EXPECT_EQ(c.file, lower + ".json");
    EXPECT_GT(c.source.size(), 10u);
    EXPECT_GT(c.setup.size(), 40u);
    EXPECT_GT(c.unstated.size(), 40u);
    EXPECT_GT(c.measured, 0.0);
    EXPECT_GT(c.tolerance, 0.0);
    // "Authors year, where": the publication is what precedes the first comma.
    publications.insert(c.source.substr(0, c.source.find(',')));
    EXPECT_EQ(c.stages * c.data_parallel, c.parsed.cluster.devices);
    EXPECT_FALSE(c.scenario.contains("validation"));
    EXPECT_FALSE(c.balance.empty()) << "every case gives the cut its source used";
  }
  EXPECT_EQ(publications,
            (std::set<std::string>{"BigScience 2022", "Kim et al. 2020", "Korthikanti et al. 2022",
                                   "NVIDIA 2024", "Narayanan et al. 2021", "Qi et al. 2024",
                                   "Smith et al. 2022"}));
}

// The case's K, D and M are the published p, d and m.
TEST(GpuValidationCases, PipelinesAreThePublishedOnes) {
  std::map<std::string, GpuCase> by_id;
  for (GpuCase& c : bundled_cases()) by_id.emplace(c.id, std::move(c));
  ASSERT_EQ(by_id.count("BL-4"), 1u);
  const GpuCase& bl = by_id.at("BL-4");
  EXPECT_EQ(bl.stages, 48);
  EXPECT_EQ(bl.data_parallel, 8);
  EXPECT_EQ(bl.parsed.training.micro_batches, 256);
  EXPECT_EQ(bl.parsed.training.global_batch, 2048);
  EXPECT_EQ(bl.balance.front(), 3);  // embedding and two blocks
  EXPECT_EQ(bl.balance.back(), 3);   // two blocks and the LM head
  ASSERT_EQ(by_id.count("NE-3"), 1u);
  const GpuCase& ne3 = by_id.at("NE-3");
  EXPECT_EQ(ne3.stages, 4);
  EXPECT_EQ(ne3.data_parallel, 4);
  EXPECT_EQ(ne3.parsed.training.micro_batches, 32);
  EXPECT_EQ(ne3.parsed.training.chunks, 10);
  EXPECT_EQ(ne3.balance.size(), 40u);
  // Megatron-LM's weak-scaling table: d = GPUs / (t p), m = GBS / (d mbs)
  // with the authors' micro-batch sizes, and their virtual stages as chunks.
  ASSERT_EQ(by_id.count("NA-T06"), 1u);
  const GpuCase& na6 = by_id.at("NA-T06");
  EXPECT_EQ(na6.stages, 4);
  EXPECT_EQ(na6.data_parallel, 32);
  EXPECT_EQ(na6.parsed.training.tensor_parallel, 8);
  EXPECT_EQ(na6.parsed.training.global_batch, 1792);
  EXPECT_EQ(na6.parsed.training.micro_batches, 28);  // micro-batches of 2
  EXPECT_EQ(na6.parsed.training.chunks, 3);          // 5 blocks a virtual stage
  EXPECT_EQ(na6.balance.size(), 12u);
  ASSERT_EQ(by_id.count("NA-T10"), 1u);
  const GpuCase& na10 = by_id.at("NA-T10");
  EXPECT_EQ(na10.stages, 64);
  EXPECT_EQ(na10.data_parallel, 6);
  EXPECT_EQ(na10.parsed.training.micro_batches, 512);
  EXPECT_EQ(na10.parsed.cluster.physical_devices(), 3072);
  ASSERT_EQ(by_id.count("TG-A9"), 1u);
  const GpuCase& tg = by_id.at("TG-A9");
  EXPECT_EQ(tg.stages, 8);
  EXPECT_EQ(tg.data_parallel, 1);
  EXPECT_EQ(tg.parsed.training.micro_batches, 32);
  EXPECT_EQ(tg.balance, (std::vector<int>{2, 2, 2, 3, 3, 4, 4, 4}));
  // torchgpipe's ResNet-101 balances count its 370 children, as the model does.
  ASSERT_EQ(by_id.count("TG-R5"), 1u);
  const GpuCase& r5 = by_id.at("TG-R5");
  EXPECT_EQ(r5.parsed.model.family, "resnet");
  EXPECT_EQ(r5.parsed.model.layers.size(), 370u);
  EXPECT_EQ(r5.parsed.training.micro_batches, 150);
  EXPECT_EQ(r5.balance, (std::vector<int>{26, 22, 33, 44, 44, 66, 66, 69}));
  ASSERT_EQ(by_id.count("TG-R1"), 1u);
  EXPECT_EQ(by_id.at("TG-R1").balance, std::vector<int>{370});  // the plain model on one GPU
  EXPECT_EQ(by_id.at("TG-R1").parsed.training.remat, Remat::kNever);
  // The zero-bubble paper's 1.5B on 8 GPUs: micro-batches of 6, the end
  // stages one block short (their embedding and output layer in its place);
  // interleaved, one layer a virtual stage; its memory in GiB.
  ASSERT_EQ(by_id.count("ZB-1Fa"), 1u);
  const GpuCase& zb = by_id.at("ZB-1Fa");
  EXPECT_EQ(zb.stages, 8);
  EXPECT_EQ(zb.parsed.training.micro_batches, 24);
  EXPECT_EQ(zb.parsed.training.global_batch, 144);
  EXPECT_EQ(zb.balance, std::vector<int>(8, 3));
  ASSERT_TRUE(zb.measured_memory_bytes);
  EXPECT_DOUBLE_EQ(*zb.measured_memory_bytes, 30.0 * 1024 * 1024 * 1024);
  ASSERT_EQ(by_id.count("ZB-4Ic"), 1u);
  const GpuCase& zbi = by_id.at("ZB-4Ic");
  EXPECT_EQ(zbi.stages, 32);
  EXPECT_EQ(zbi.parsed.training.chunks, 2);
  EXPECT_EQ(zbi.parsed.training.micro_batches, 256);
  EXPECT_EQ(zbi.balance, std::vector<int>(64, 1));
  EXPECT_EQ(by_id.at("ZB-2Zb").parsed.training.schedule, ScheduleKind::kZbH1);
}

// A minimal good case to break one field at a time.
nlohmann::json good_case() {
  return nlohmann::json::parse(R"({
    "model": { "family": "transformer", "layers": 4, "d_model": 64, "heads": 4,
               "seq_len": 32, "vocab": 64, "dtype": "fp32" },
    "cluster": { "preset": "a100-80g", "devices": 4 },
    "training": { "global_batch": 16, "micro_batches": 4, "schedule": "1f1b" },
    "validation": {
      "case": "X-1", "source": "Someone 2020, Table 9",
      "measured": { "metric": "samples_per_s", "value": 10 },
      "setup": "as published", "unstated": "what was chosen",
      "stages": 2, "data_parallel": 2, "balance": [3, 3]
    }
  })");
}

void expect_error(const nlohmann::json& doc, const std::string& path, const std::string& words) {
  try {
    read_gpu_case(doc, "case.json");
    ADD_FAILURE() << "expected an error at " << path;
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.file(), "case.json");
    EXPECT_EQ(e.json_path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(GpuValidationCases, BadValidationObjectsNameTheField) {
  EXPECT_NO_THROW(read_gpu_case(good_case(), "case.json"));
  nlohmann::json d = good_case();
  d.erase("validation");
  expect_error(d, "validation", "missing required key");
  d = good_case();
  d["validation"] = "BL-4";
  expect_error(d, "validation", "expected an object");
  d = good_case();
  d["validation"].erase("source");
  expect_error(d, "validation.source", "missing required key");
  d = good_case();
  d["validation"]["setup"] = " ";
  expect_error(d, "validation.setup", "must not be empty");
  d = good_case();
  d["validation"]["study"] = "";
  expect_error(d, "validation.study", "must not be empty");
  d = good_case();
  d["validation"]["study"] = 5;
  expect_error(d, "validation.study", "expected a string");
  d = good_case();
  d["validation"].erase("unstated");
  expect_error(d, "validation.unstated", "missing required key");
  d = good_case();
  d["validation"]["measured"].erase("metric");
  expect_error(d, "validation.measured.metric", "missing required key");
  d = good_case();
  d["validation"]["measured"]["metric"] = "mfu";
  expect_error(d, "validation.measured.metric", "unknown metric 'mfu'");
  d = good_case();
  d["validation"]["measured_memory"] = {{"value", 30}, {"unit", "MB"}};
  expect_error(d, "validation.measured_memory.unit", "expected GiB or GB, got 'MB'");
  d["validation"]["measured_memory"] = {{"value", 0}, {"unit", "GB"}};
  expect_error(d, "validation.measured_memory.value", "expected a positive number");
  d["validation"]["measured_memory"] = {{"value", 30}, {"unit", "GB"}, {"peak", true}};
  expect_error(d, "validation.measured_memory.peak", "unknown key");
  d["validation"]["measured_memory"] = {{"value", 30}};
  expect_error(d, "validation.measured_memory.unit", "missing required key");
  d["validation"]["measured_memory"] = 30;
  expect_error(d, "validation.measured_memory", "expected an object");
  d["validation"]["measured_memory"] = {{"value", 30}, {"unit", "GB"}, {"tolerance", 2}};
  expect_error(d, "validation.measured_memory.tolerance",
               "expected an efficiency from 1e-6 to 1, got 2");
  d["validation"]["measured_memory"] = {{"value", 30}, {"unit", "GB"}};
  EXPECT_DOUBLE_EQ(*read_gpu_case(d, "case.json").measured_memory_bytes, 30e9);
  EXPECT_EQ(read_gpu_case(d, "case.json").memory_tolerance, kGpuDefaultTolerance);
  d["validation"]["measured_memory"]["tolerance"] = 0.05;
  EXPECT_EQ(read_gpu_case(d, "case.json").memory_tolerance, 0.05);
  d = good_case();
  d["validation"]["measured"]["value"] = -3;
  expect_error(d, "validation.measured.value", "expected a positive number, got -3");
  d = good_case();
  d["validation"]["tolerance"] = 1.5;
  expect_error(d, "validation.tolerance", "from 1e-6 to 1");
  d = good_case();
  d["validation"]["year"] = 2020;
  expect_error(d, "validation.year", "unknown key 'year'");
  d = good_case();
  d["validation"]["stages"] = 0;
  expect_error(d, "validation.stages", "got 0");
  d = good_case();
  d["validation"]["data_parallel"] = 1;
  expect_error(d, "validation.data_parallel", "= 2 devices, but cluster.devices is 4");
  d = good_case();
  d["training"]["global_batch"] = 12;  // 2 replicas of 6: not 4 micro-batches
  d["training"]["micro_batches"] = 4;
  expect_error(d, "validation.data_parallel", "not 2 replicas x 4 micro-batches");
  d = good_case();
  d["validation"]["balance"] = nlohmann::json::array({6});
  expect_error(d, "validation.balance", "expected 2 entries");
  d = good_case();
  d["validation"]["balance"] = nlohmann::json::array({3, 2});
  expect_error(d, "validation.balance", "add up to 5 layers; the model has 6");
  d = good_case();
  d["validation"]["balance"] = nlohmann::json::array({3, 0});
  expect_error(d, "validation.balance[1]", "got 0");
  d = good_case();
  d["model"] = {{"family", "mlp"}, {"layers", 4}, {"d_model", 16}};  // 4 blocks and a head
  d["validation"]["balance"] = nlohmann::json::array({3, 2});
  d["validation"]["measured"]["metric"] = "tokens_per_s_per_gpu";
  expect_error(d, "validation.measured.metric", "needs a transformer");
  // The scenario around it is read as any scenario.
  d = good_case();
  d["training"]["optimiser"] = "adam";
  expect_error(d, "training.optimiser", "unknown key");
}

TEST(GpuValidationMetrics, FormulasAgainstHandComputedValues) {
  EXPECT_DOUBLE_EQ(samples_per_s(1280, 10.0), 128.0);
  // 128 sequences of 4096 tokens in 2 s on 16 GPUs.
  EXPECT_DOUBLE_EQ(tokens_per_s_per_gpu(128, 4096, 2.0, 16), 16384.0);
  // 24 c B s l h^2 (1 + s/6h + V/16lh) with every size 1: 24 c (1 + 1/6 + 1/16).
  EXPECT_DOUBLE_EQ(megatron_flops_per_step(1, 1, 1, 1, 1, true), 96.0 * (1 + 1.0 / 6 + 1.0 / 16));
  EXPECT_DOUBLE_EQ(megatron_flops_per_step(1, 1, 1, 1, 1, false), 72.0 * (1 + 1.0 / 6 + 1.0 / 16));
  // The formula reproduces the BLOOM study's own figure for BL-4: 142.17 s per
  // iteration printed as 111.30 TFLOP/s per GPU on 384 GPUs.
  EXPECT_NEAR(megatron_flops_per_step(2048, 2048, 96, 12288, 250880, true) / 142.17 / 384 / 1e12,
              111.30, 0.01);
  // And the NeMo case's tokens/s from a step time.
  std::map<std::string, GpuCase> by_id;
  for (GpuCase& c : bundled_cases()) by_id.emplace(c.id, std::move(c));
  EXPECT_NEAR(gpu_metric_value(by_id.at("BL-4"), 142.17), 111.30, 0.01);
  EXPECT_DOUBLE_EQ(gpu_metric_value(by_id.at("NE-3"), 1.0), 128.0 * 4096 / 16);
  EXPECT_DOUBLE_EQ(gpu_metric_value(by_id.at("NE-7"), 2.0), 32.0 * 4096 / 2.0 / 8);
  EXPECT_DOUBLE_EQ(gpu_metric_value(by_id.at("TG-A9"), 10.0), 128.0);
  // 24 micro-batches of 6 on 8 GPUs in 1.5 s: 144 / 1.5 / 8 = 12 samples/s/GPU.
  EXPECT_DOUBLE_EQ(gpu_metric_value(by_id.at("ZB-1Fa"), 1.5), 12.0);
  GpuCase timed = by_id.at("TG-A9");
  timed.metric = GpuMetric::kStepTimeS;
  EXPECT_DOUBLE_EQ(gpu_metric_value(timed, 10.0), 10.0);
  // Tokens need a sequence: an image model has none.
  timed.metric = GpuMetric::kTokensPerSPerGpu;
  EXPECT_THROW(gpu_metric_value(timed, 10.0), ScenarioError);
  // Megatron-LM's dense FLOPs do not count a mixture, heads of their own
  // width or a window: TFLOP/s of such a model is refused, tokens/s taken.
  nlohmann::json moe = good_case();
  moe["model"]["experts"] = 4;
  moe["model"]["experts_per_token"] = 2;
  moe["validation"]["measured"] = {{"metric", "tflops_per_gpu"}, {"value", 100}};
  const GpuCase mixture = read_gpu_case(moe, "case.json");
  try {
    gpu_metric_value(mixture, 1.0);
    FAIL() << "TFLOP/s of a mixture of experts was computed";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(e.json_path(), "validation.measured.metric");
    EXPECT_NE(std::string(e.what()).find("give tokens_per_s_per_gpu"), std::string::npos);
  }
  GpuCase tokens = mixture;
  tokens.metric = GpuMetric::kTokensPerSPerGpu;
  EXPECT_DOUBLE_EQ(gpu_metric_value(tokens, 1.0), 16.0 * 32 / 4);
}

TEST(GpuValidationMetrics, NamesAndUnits) {
  for (const GpuMetric m :
       {GpuMetric::kSamplesPerS, GpuMetric::kStepTimeS, GpuMetric::kTokensPerSPerGpu,
        GpuMetric::kTflopsPerGpu, GpuMetric::kSamplesPerSPerGpu}) {
    EXPECT_EQ(parse_gpu_metric(to_string(m)), m);
  }
  EXPECT_EQ(parse_gpu_metric("mfu"), std::nullopt);
  EXPECT_EQ(metric_unit(GpuMetric::kTokensPerSPerGpu), "tokens/s/GPU");
  EXPECT_EQ(metric_unit(GpuMetric::kTflopsPerGpu), "TFLOP/s/GPU");
  EXPECT_EQ(metric_unit(GpuMetric::kSamplesPerSPerGpu), "samples/s/GPU");
}

TEST(GpuValidationMetrics, MedianOfTheSuite) {
  ValidationReport r;
  for (const double sim : {1.1, 0.7, 1.05, 2.0}) {
    PaperFigure f;
    f.table = "gpu";
    f.paper = 1.0;
    f.simulated = sim;
    r.figures.push_back(f);
  }
  PaperFigure other;
  other.table = "memory";
  other.paper = 1.0;
  other.simulated = 100.0;
  r.figures.push_back(other);
  // |errors| 0.05, 0.1, 0.3, 1.0: the median is the mean of the middle two.
  EXPECT_NEAR(median_abs_error(r, "gpu"), 0.2, 1e-12);
  r.figures.erase(r.figures.begin());  // 0.05, 0.3, 1.0
  EXPECT_NEAR(median_abs_error(r, "gpu"), 0.3, 1e-12);
  EXPECT_EQ(median_abs_error(r, "none"), 0.0);
}

// Each publication's median apart, a publication being what precedes the
// source's first comma: "X 2021b" is not "X 2021".
TEST(GpuValidationMetrics, MedianOfEachPublication) {
  ValidationReport r;
  const auto add = [&](const std::string& source, double simulated) {
    PaperFigure f;
    f.table = "gpu";
    f.source = source;
    f.paper = 1.0;
    f.simulated = simulated;
    r.figures.push_back(f);
  };
  add("X 2021, Table 1", 1.1);
  add("X 2021b, Table 2", 1.5);
  add("X 2021, Table 3", 0.7);
  add("Y 2020", 1.02);
  PaperFigure other;
  other.table = "gpu-memory";
  other.source = "X 2021, Table 1";
  r.figures.push_back(other);
  EXPECT_EQ(publication_of("X 2021, Table 1"), "X 2021");
  EXPECT_EQ(publication_of("Y 2020"), "Y 2020");
  const std::vector<SourceMedian> m = median_abs_error_by_source(r, "gpu");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].publication, "X 2021");
  EXPECT_EQ(m[0].figures, 2u);
  EXPECT_NEAR(m[0].median_abs_error, 0.2, 1e-12);  // of 0.1 and 0.3
  EXPECT_EQ(m[1].publication, "X 2021b");
  EXPECT_NEAR(m[1].median_abs_error, 0.5, 1e-12);
  EXPECT_EQ(m[2].publication, "Y 2020");
  EXPECT_EQ(m[2].figures, 1u);
  EXPECT_TRUE(median_abs_error_by_source(r, "none").empty());
}

// The fast side whatever the metric: a throughput above the published, or a
// step time below it.
TEST(GpuValidationMetrics, FasterErrorIsPositiveWhenTheSimulationIsFast) {
  PaperFigure f;
  f.metric = "samples_per_s";
  f.paper = 100.0;
  f.simulated = 125.0;
  EXPECT_NEAR(faster_error(f), 0.25, 1e-12);
  f.metric = "step_time_s";
  f.paper = 10.0;
  f.simulated = 8.0;  // 25 % more steps a second
  EXPECT_NEAR(faster_error(f), 0.25, 1e-12);
  EXPECT_NEAR(f.relative_error(), -0.2, 1e-12);
  f.simulated = 12.5;
  EXPECT_NEAR(faster_error(f), -0.2, 1e-12);
}

// The headline counts each publication once: the median of their medians,
// and each publication's mean fast error and worst case.
TEST(GpuValidationMetrics, HeadlineIsTheMedianOfTheSourcesMedians) {
  ValidationReport r;
  const auto add = [&](const std::string& name, const std::string& source, double simulated) {
    PaperFigure f;
    f.table = "gpu";
    f.name = name;
    f.source = source;
    f.metric = "samples_per_s";
    f.paper = 1.0;
    f.simulated = simulated;
    r.figures.push_back(f);
  };
  for (int i = 0; i < 9; ++i) add("A-" + std::to_string(i), "A 2020, Table 1", 1.01);
  add("B-1", "B 2021", 1.3);
  add("B-2", "B 2021", 0.7);
  add("C-1", "C 2022", 1.2);
  const std::vector<SourceMedian> m = median_abs_error_by_source(r, "gpu");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_NEAR(m[1].median_abs_error, 0.3, 1e-12);
  EXPECT_NEAR(m[1].mean_faster, 0.0, 1e-12);  // +30 % and -30 %
  EXPECT_EQ(m[1].worst, "B-2");
  EXPECT_NEAR(m[1].worst_error, -0.3, 1e-12);
  EXPECT_NEAR(m[2].mean_faster, 0.2, 1e-12);
  // 1 %, 30 %, 20 %: 20 %, where the median of the twelve cases is 1 %.
  EXPECT_NEAR(median_of_source_medians(m), 0.2, 1e-12);
  EXPECT_NEAR(median_abs_error(r, "gpu"), 0.01, 1e-12);
  EXPECT_EQ(median_of_source_medians({}), 0.0);
}

// A gap comes with the fast error it was written for, above 0.
TEST(GpuValidationCases, AGapNeedsTheErrorItWasWrittenFor) {
  nlohmann::json d = good_case();
  d["validation"]["gap"] = "why";
  expect_error(d, "validation.gap", "a gap and gap_faster go together");
  d["validation"]["gap_faster"] = -0.1;
  expect_error(d, "validation.gap_faster", "-0.1");
  d["validation"]["gap_faster"] = 0.25;
  EXPECT_DOUBLE_EQ(read_gpu_case(d, "case.json").gap_faster, 0.25);
  d["validation"].erase("gap");
  expect_error(d, "validation.gap_faster", "a gap and gap_faster go together");
}

// A measured memory is its own figure: held to its own tolerance, and never
// excused by the case's gap, which is about its throughput.
TEST(GpuValidationSuite, MemoryFigureHasItsOwnToleranceAndNoGap) {
  nlohmann::json d = good_case();
  d["validation"]["gap"] = "why the throughput is off";
  d["validation"]["gap_faster"] = 0.5;
  d["validation"]["measured"]["value"] = 1e9;  // samples/s: far beyond any simulation
  d["validation"]["measured_memory"] = {{"value", 1000}, {"unit", "GiB"}, {"tolerance", 0.1}};
  const GpuCase c = read_gpu_case(d, "case.json");
  const std::vector<PaperFigure> figures = validate_gpu({c});
  ASSERT_EQ(figures.size(), 2u);
  EXPECT_EQ(figures[0].table, "gpu");
  EXPECT_FALSE(figures[0].within_tolerance());
  EXPECT_EQ(figures[0].gap, "why the throughput is off");
  const PaperFigure& m = figures[1];
  EXPECT_EQ(m.table, "gpu-memory");
  EXPECT_EQ(m.metric, "peak_memory_gib");
  EXPECT_DOUBLE_EQ(m.paper, 1000.0);
  ASSERT_TRUE(m.tolerance);
  EXPECT_DOUBLE_EQ(*m.tolerance, 0.1);
  EXPECT_FALSE(m.within_tolerance());  // a tiny model needs far less than 1000 GiB
  EXPECT_EQ(m.gap, "");
  ValidationReport report;
  report.figures = figures;
  EXPECT_EQ(report.failed(), 1);  // the memory, not the throughput with its gap
}

// Each case's simulated figure within its tolerance, or outside it with the
// reason stated in the case file: a regression of the model fails here.
TEST(GpuValidationSuite, EveryCaseWithinToleranceOrItsStatedGap) {
  const std::vector<GpuCase> cases = bundled_cases();
  std::size_t calls = 0;
  const std::vector<PaperFigure> figures =
      validate_gpu(cases, [&](std::size_t done, std::size_t total) {
        EXPECT_EQ(done, ++calls);
        EXPECT_EQ(total, cases.size());
      });
  EXPECT_EQ(calls, cases.size());
  ValidationReport report;
  std::size_t next = 0;  // the next figure
  for (const GpuCase& c : cases) {
    SCOPED_TRACE(c.id);
    ASSERT_LT(next, figures.size());
    const PaperFigure& f = figures[next++];
    // A measured memory follows its case's throughput, in GiB, never with a gap.
    if (c.measured_memory_bytes) {
      ASSERT_LT(next, figures.size());
      const PaperFigure& m = figures[next++];
      EXPECT_EQ(m.table, "gpu-memory");
      EXPECT_EQ(m.name, c.id);
      EXPECT_DOUBLE_EQ(m.paper, *c.measured_memory_bytes / (1024.0 * 1024 * 1024));
      EXPECT_GT(m.simulated, 0.0);
      EXPECT_TRUE(m.within_tolerance())
          << "memory: paper " << m.paper << " GiB, simulated " << m.simulated;
      // docs/validation.md and the README say within 10 %.
      EXPECT_LT(std::abs(m.relative_error()), 0.10) << m.paper << " GiB, " << m.simulated;
      EXPECT_EQ(m.gap, "");
      report.figures.push_back(m);
    }
    EXPECT_EQ(f.table, "gpu");
    EXPECT_EQ(f.name, c.id);
    EXPECT_EQ(f.source, c.source);
    EXPECT_EQ(f.metric, std::string(to_string(c.metric)));
    EXPECT_EQ(f.paper, c.measured);
    EXPECT_GT(f.simulated, 0.0);
    ASSERT_TRUE(f.tolerance);
    // A stated gap holds while the case errs as it did when the gap was
    // written, within 3 points, and on the fast side whatever the metric (a
    // step time longer than measured is no "faster").
    if (!c.gap.empty()) {
      EXPECT_NEAR(faster_error(f), c.gap_faster, 0.03)
          << "the gap was written for a simulation " << c.gap_faster * 100
          << " % faster; state it again";
    }
    if (!f.within_tolerance()) {
      EXPECT_FALSE(c.gap.empty()) << "outside " << *f.tolerance << " without a stated gap: paper "
                                  << f.paper << ", simulated " << f.simulated;
      EXPECT_EQ(f.gap, c.gap);
      EXPECT_GT(faster_error(f), *f.tolerance);
    } else {
      EXPECT_EQ(f.gap, "");
    }
    report.figures.push_back(f);
  }
  EXPECT_EQ(next, figures.size());
  EXPECT_EQ(report.failed(), 0);
  // The figures docs/validation.md and the README state: each source's
  // median |error| and their median, the headline.
  testing::expect_source_medians(report, kStatedSourceMedians, kStatedHeadline);
  testing::expect_study_ranks(report, kStatedStudyRanks, 0.0005);
}

}  // namespace
}  // namespace pipescope
