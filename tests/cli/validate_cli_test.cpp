// `pipescope validate` as a user runs it: the built-in copies of the GPipe
// scenarios are the shipped files, and a figure outside its tolerance fails
// the command.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;

const std::string kGpipe = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/gpipe";

nlohmann::json without_labels(nlohmann::json j) {
  j.erase("scenarios");
  return j;
}

TEST(ValidateCli, BuiltInScenariosAreTheShippedFiles) {
  const CliResult built_in = run("validate --json");
  ASSERT_EQ(built_in.status, 0) << built_in.err;
  const nlohmann::json a = nlohmann::json::parse(built_in.out);
  // 14 GPipe figures, the 100 cases of the GPU suite and the 36 of them that
  // carry a measured memory.
  EXPECT_EQ(a["checked"], 150);
  EXPECT_EQ(a["failed"], 0);
  EXPECT_EQ(a["gaps"], 19);
  EXPECT_EQ(a["gpu_sources"].size(), 7u);
  EXPECT_NEAR(a["gpu_source_median"].get<double>(), 0.147, 0.0005);
  // The layout studies, each ranked (BigScience's six layouts of one model
  // second, at 0.77).
  ASSERT_EQ(a["gpu_studies"].size(), 12u);
  EXPECT_EQ(a["gpu_studies"][1]["study"], "BL-5");
  EXPECT_EQ(a["gpu_studies"][1]["cases"], 6);
  EXPECT_NEAR(a["gpu_studies"][1]["spearman"].get<double>(), 0.771, 0.0005);
  // Each source's runs on one stage beside its pipelined ones, then all of
  // them: Kim et al.'s two one-stage runs come out slow, its twelve
  // pipelined ones fast; and by tensor parallelism: NVIDIA's six runs with
  // T > 1 come out faster than its two with T = 1.
  const nlohmann::json& stages = a["gpu_stage_split"];
  ASSERT_EQ(stages.size(), 8u);
  EXPECT_EQ(stages[5]["publication"], "Kim et al. 2020");
  EXPECT_EQ(stages[5]["one_runs"], 2);
  EXPECT_NEAR(stages[5]["one_median_faster"].get<double>(), -0.069, 0.0005);
  EXPECT_EQ(stages[5]["more_runs"], 12);
  EXPECT_NEAR(stages[5]["more_median_faster"].get<double>(), 0.186, 0.0005);
  EXPECT_EQ(stages[7]["publication"], "all");
  EXPECT_EQ(stages[7]["one_runs"], 8);
  EXPECT_EQ(stages[7]["more_runs"], 92);
  const nlohmann::json& tensor = a["gpu_tensor_split"];
  ASSERT_EQ(tensor.size(), 8u);
  EXPECT_EQ(tensor[4]["publication"], "NVIDIA 2024");
  EXPECT_EQ(tensor[4]["one_runs"], 2);
  EXPECT_NEAR(tensor[4]["one_median_faster"].get<double>(), 0.081, 0.0005);
  EXPECT_EQ(tensor[4]["more_runs"], 6);
  EXPECT_NEAR(tensor[4]["more_median_faster"].get<double>(), 0.230, 0.0005);
  EXPECT_EQ(tensor[7]["one_runs"], 54);
  EXPECT_EQ(tensor[7]["more_runs"], 46);
  // The pipelined runs by v: NeMo's interleaved runs far faster than its
  // plain ones, the 66 + 26 pipelined runs of the suite and no K = 1 run.
  const nlohmann::json& chunks = a["gpu_chunk_split"];
  ASSERT_EQ(chunks.size(), 8u);
  EXPECT_EQ(chunks[4]["publication"], "NVIDIA 2024");
  EXPECT_EQ(chunks[4]["one_runs"], 2);
  EXPECT_NEAR(chunks[4]["one_median_faster"].get<double>(), 0.005, 0.0005);
  EXPECT_EQ(chunks[4]["more_runs"], 6);
  EXPECT_NEAR(chunks[4]["more_median_faster"].get<double>(), 0.245, 0.0005);
  EXPECT_EQ(chunks[7]["one_runs"], 66);
  EXPECT_EQ(chunks[7]["more_runs"], 26);
  EXPECT_FALSE(a.contains("leave_one_source_out"));  // only when asked
  EXPECT_EQ(a["scenarios"][0], "scenarios/gpipe/transformer-tpuv3.json (built in)");
  const CliResult files = run("validate --json --scenarios " + kGpipe);
  ASSERT_EQ(files.status, 0) << files.err;
  const nlohmann::json b = nlohmann::json::parse(files.out);
  EXPECT_EQ(b["scenarios"][1], kGpipe + "/amoebanet-tpuv2.json");
  // A stale copy (the files edited, the program not rebuilt) would differ.
  EXPECT_EQ(without_labels(a), without_labels(b));
}

TEST(ValidateCli, PrintsTheTables) {
  const CliResult r = run("validate");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* text :
       {"Largest Transformer on TPU v3 cores of 16 GiB (table 1)",
        "Pipeline-128 layers",
        "rematerialization, one core (2.7x)",
        "Transformer-48 throughput (table 2)",
        "AmoebaNet-D (18, 256) throughput (table 2)",
        "M=16 instead of 8:",
        "131 of 150 checked figures within tolerance, 19 outside with the cause stated",
        "Published GPU measurements",
        "100 cases: 85 within tolerance, 15 outside with the cause stated (gap*), 0 outside "
        "without; median |error| over every case 9.1 %",
        "Korthikanti et al. 2022     8           4.9 %      +6.4 %   KO-5 -11.0 %",
        "median of the 7 sources' medians: 14.7 %",
        "Layout studies: how the simulation orders each study's cases against the measured "
        "order (Spearman's rho, 1: the same order)",
        "BL-5    BigScience 2022           6      0.77",
        "One stage and pipelined: each source's median of how much faster the simulation is "
        "(positive: faster than measured), runs with K = 1 beside runs with K > 1",
        "Kim et al. 2020              2    -6.9 %     12   +18.6 %",
        "BigScience 2022              0         -     15   +14.7 %",
        "Whole layers and tensor-parallel: each source's median of how much faster the "
        "simulation is (positive: faster than measured), runs with T = 1 beside runs with T > 1",
        "NVIDIA 2024                  2    +8.1 %      6   +23.0 %",
        "One chunk and interleaved: each source's median of how much faster the simulation is "
        "(positive: faster than measured), pipelined runs (K > 1) with v = 1 beside those with "
        "v > 1",
        "NVIDIA 2024                  2    +0.5 %      6   +24.5 %",
        "(--leave-one-out: each source predicted by the kernel tables fitted on the others)",
        "Published GPU memory: the fullest GPU's peak beside the simulated one",
        "36 cases: 36 within tolerance, 0 outside with the cause stated (gap*), 0 outside "
        "without; median |error| over every case 1.8 %",
        "* gap: Naive-1 holds 2 layers: 3 need 17.4 GiB of 16.0 GiB (8.5 % over)"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  EXPECT_EQ(r.err, "");
}

TEST(ValidateCli, FigureOutsideToleranceFails) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_validate_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kGpipe + "/amoebanet-tpuv2.json", dir / "amoebanet-tpuv2.json");
  nlohmann::json t = nlohmann::json::parse(slurp(kGpipe + "/transformer-tpuv3.json"));
  t["model"]["dtype"] = "fp32";  // fp32 activations: a third fewer layers fit
  std::ofstream(dir / "transformer-tpuv3.json") << t.dump();
  const CliResult r = run("validate --json --scenarios " + dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(r.status, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);  // the figures are still printed
  EXPECT_GT(j["failed"].get<int>(), 0);
  EXPECT_EQ(r.err, "pipescope: error: " + std::to_string(j["failed"].get<int>()) +
                       " of 150 checked figures are outside their tolerance\n");
}

// --leave-one-out fits the kernel tables on every source but one and predicts
// it, for each source of the folder given.
TEST(ValidateCli, LeavesEachSourceOut) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_validate_loo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cases = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/validation/";
  for (const char* c : {"zb-1fa.json", "zb-1fc.json", "ko-1.json", "ko-5.json"}) {
    fs::copy_file(cases + c, dir / c);
  }
  const CliResult r = run("validate --json --leave-one-out --gpu-scenarios " + dir.string());
  const CliResult text = run("validate --leave-one-out --gpu-scenarios " + dir.string());
  fs::remove_all(dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& loo = j["leave_one_source_out"];
  ASSERT_EQ(loo["sources"].size(), 2u);
  EXPECT_EQ(loo["sources"][0]["publication"], "Korthikanti et al. 2022");
  EXPECT_EQ(loo["sources"][1]["publication"], "Qi et al. 2024");
  for (const nlohmann::json& s : loo["sources"]) {
    EXPECT_EQ(s["cases"], 2);
    EXPECT_EQ(s["factors"].size(), 3u);
    EXPECT_TRUE(s["factors"].contains("gemm_efficiency"));
    EXPECT_GE(s["median_abs_error"].get<double>(), 0.0);
  }
  const double m0 = loo["sources"][0]["median_abs_error"],
               m1 = loo["sources"][1]["median_abs_error"];
  EXPECT_NEAR(loo["median"].get<double>(), (m0 + m1) / 2, 1e-12);
  // The suite's own error of each source is the one of its figures.
  EXPECT_NEAR(loo["sources"][1]["suite_median_abs_error"].get<double>(),
              j["gpu_sources"][1]["median_abs_error"].get<double>(), 1e-9);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Leave one source out: gemm_efficiency, memory_efficiency, "
                          "kernel_overhead_s fitted on every other source"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("median of the left-out medians: "), std::string::npos);
}

// --set and --framework change every GPU case before it is simulated (a
// what-if), as simulate applies them to one scenario; the published record
// stays out of their reach.
TEST(ValidateCli, WhatIfChangesEveryCase) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_validate_what_if_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cases = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/validation/";
  // Both name megatron-lm-2022; KO-1 runs T = 8, ZB-1Fa T = 1.
  for (const char* c : {"ko-1.json", "zb-1fa.json"}) fs::copy_file(cases + c, dir / c);
  const std::string folder = " --gpu-scenarios " + dir.string();
  const CliResult base = run("validate --json" + folder);
  const CliResult same = run("validate --json --framework megatron-lm-2022" + folder);
  const std::string set = " --set training.framework.tp_backward_overlap=false";
  const CliResult what_if = run("validate --json" + set + folder);
  const CliResult text = run("validate" + set + folder);
  const CliResult record = run("validate --set validation.measured.value=1" + folder);
  const CliResult unknown = run("validate --set training.nonsense=1" + folder);
  fs::remove_all(dir);
  ASSERT_EQ(base.status, 0) << base.err;
  ASSERT_EQ(same.status, 0) << same.err;
  ASSERT_EQ(what_if.status, 0) << what_if.err;
  const auto simulated = [](const CliResult& r) {
    std::map<std::string, double> out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const nlohmann::json& f : j["figures"]) {
      if (f["table"] == "gpu") out[f["name"]] = f["simulated"];
    }
    return out;
  };
  const std::map<std::string, double> b = simulated(base), w = simulated(what_if);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(simulated(same), b);  // the profile the cases already name
  // The input gradient's all-reduce no longer hides behind the weight
  // gradient: only the tensor-parallel case slows (a step time grows).
  EXPECT_GT(w.at("KO-1"), b.at("KO-1") * 1.01);
  EXPECT_EQ(w.at("ZB-1Fa"), b.at("ZB-1Fa"));
  EXPECT_EQ(nlohmann::json::parse(what_if.out)["what_if"]["set"][0],
            "training.framework.tp_backward_overlap=false");
  EXPECT_FALSE(nlohmann::json::parse(base.out).contains("what_if"));
  EXPECT_NE(text.out.find("What-if: every GPU case with --set "
                          "training.framework.tp_backward_overlap=false"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(record.status, 1);
  EXPECT_EQ(record.err,
            "pipescope: error: --set validation.measured.value=1: the validation section is the "
            "published record; --set changes only what is simulated\n");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_NE(unknown.err.find((dir / "ko-1.json").string() + ": training.nonsense: unknown key"),
            std::string::npos)
      << unknown.err;
  EXPECT_EQ(record.out + unknown.out, "");
}

TEST(ValidateCli, WrongModelOrBrokenFileIsNamed) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipescope_validate_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // The transformer scenario saved under AmoebaNet's name.
  fs::copy_file(kGpipe + "/transformer-tpuv3.json", dir / "transformer-tpuv3.json");
  fs::copy_file(kGpipe + "/transformer-tpuv3.json", dir / "amoebanet-tpuv2.json");
  const CliResult swapped = run("validate --scenarios " + dir.string());
  EXPECT_EQ(swapped.status, 1);
  EXPECT_EQ(swapped.err, "pipescope: error: " + (dir / "amoebanet-tpuv2.json").string() +
                             ": model.family: expected amoebanet (the paper's model), got "
                             "transformer\n");
  EXPECT_EQ(swapped.out, "");
  std::ofstream(dir / "transformer-tpuv3.json") << "{\"model\": ";
  const CliResult broken = run("validate --scenarios " + dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(broken.status, 1);
  EXPECT_NE(broken.err.find((dir / "transformer-tpuv3.json").string()), std::string::npos)
      << broken.err;
  EXPECT_EQ(broken.out, "");
}

TEST(ValidateCli, MissingFolderIsNamed) {
  const CliResult r = run("validate --scenarios /no/such/dir");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: /no/such/dir/transformer-tpuv3.json: cannot open file\n");
  EXPECT_EQ(r.out, "");
}

}  // namespace
