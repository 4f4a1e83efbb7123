// `pipescope plan`, `sweep`, `capacity` and `simulate --plan` as a user runs
// them: the plan a search writes reproduces its prediction when simulated again.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "sim/scenario/scenario.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

TEST(PlanCli, RanksPlansAsJson) {
  const CliResult r = run("plan " + kDemo + " --top 5 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["devices"], 4);
  ASSERT_EQ(j["plans"].size(), 5u);
  for (std::size_t i = 1; i < j["plans"].size(); ++i) {
    EXPECT_GE(j["plans"][i - 1]["throughput_samples_per_s"].get<double>(),
              j["plans"][i]["throughput_samples_per_s"].get<double>());
  }
  for (const auto& p : j["plans"]) EXPECT_EQ(4 % p["K"].get<int>(), 0);
}

// A mixture of 8 experts on the demo's 4 devices: the planner searches E
// beside K and D (E = 8 has no D of 8 here, so neither the search nor the
// header has it), says so in its header, gives
// each plan's E in a column of its own and in --json; -E keeps one.
TEST(PlanCli, SearchesTheExpertParallelism) {
  const std::string moe = "plan " + kDemo +
                          " --set model.layers=4 --set model.experts=8"
                          " --set model.experts_per_token=2 --schedule 1f1b ";
  const CliResult text = run(moe + "--top 40");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("; the experts over E of 1, 2, 4 of the D replicas)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("    K     D    E"), std::string::npos) << text.out;
  const CliResult json = run(moe + "--top 40 --json");
  ASSERT_EQ(json.status, 0) << json.err;
  std::set<int> es;
  const nlohmann::json ranked = nlohmann::json::parse(json.out);
  for (const auto& p : ranked["plans"]) {
    es.insert(p["E"].get<int>());
    EXPECT_EQ(p["D"].get<int>() % p["E"].get<int>(), 0) << p.dump();
  }
  EXPECT_EQ(es, (std::set<int>{1, 2, 4}));
  const CliResult fixed = run(moe + "-E 2 --top 40 --json");
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  const nlohmann::json kept = nlohmann::json::parse(fixed.out);
  ASSERT_FALSE(kept["plans"].empty());
  for (const auto& p : kept["plans"]) EXPECT_EQ(p["E"], 2);
}

TEST(PlanCli, WrittenPlanReproducesItsPrediction) {
  const fs::path plan = temp("plan.json");
  const CliResult r = run("plan " + kDemo + " -K 4 -o " + plan.string() + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json best = nlohmann::json::parse(r.out)["plans"][0];
  const nlohmann::json file = nlohmann::json::parse(slurp(plan));
  EXPECT_EQ(file["format"], "pipescope-plan");
  EXPECT_EQ(file["K"], 4);
  const CliResult again = run("simulate " + kDemo + " --plan " + plan.string() + " --json");
  ASSERT_EQ(again.status, 0) << again.err;
  const nlohmann::json sim = nlohmann::json::parse(again.out);
  EXPECT_EQ(sim["K"], best["K"]);
  EXPECT_EQ(sim["M"], best["M"]);
  EXPECT_EQ(sim["step_time_s"].get<double>(), best["step_time_s"].get<double>());
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(sim["stages"][s]["first_layer"], best["stages"][s]["first_layer"]);
  }
  fs::remove(plan);
}

// Each ranked plan gives its devices' peaks split into weights, gradients,
// optimizer state and activations; the best one's are those of its simulation
// (`simulate --plan --json`, which gives memory_splits) and of its plan file.
TEST(PlanCli, JsonGivesEachDevicesMemorySplit) {
  const fs::path plan = temp("plan_split.json");
  const CliResult r = run("plan " + kDemo + " -K 4 --top 3 --json -o " + plan.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json plans = nlohmann::json::parse(r.out)["plans"];
  ASSERT_EQ(plans.size(), 3u);
  const char* parts[] = {"weights_bytes", "gradients_bytes", "optimizer_bytes",
                         "activations_bytes"};
  for (const nlohmann::json& p : plans) {
    ASSERT_EQ(p["devices"].size(), 4u) << p.dump();  // K devices of one replica
    std::int64_t fullest = 0;
    for (const nlohmann::json& d : p["devices"]) {
      std::int64_t sum = 0;
      for (const char* part : parts) sum += d[part].get<std::int64_t>();
      EXPECT_EQ(sum, d["peak_memory_bytes"].get<std::int64_t>()) << d.dump();
      EXPECT_GT(d["weights_bytes"].get<std::int64_t>(), 0) << d.dump();
      EXPECT_GT(d["activations_bytes"].get<std::int64_t>(), 0) << d.dump();
      fullest = std::max(fullest, d["peak_memory_bytes"].get<std::int64_t>());
    }
    EXPECT_EQ(fullest, p["peak_memory_bytes"].get<std::int64_t>());
  }
  const CliResult sim = run("simulate " + kDemo + " --plan " + plan.string() + " --json");
  ASSERT_EQ(sim.status, 0) << sim.err;
  const nlohmann::json simulated = nlohmann::json::parse(sim.out)["devices"];
  const nlohmann::json file = nlohmann::json::parse(slurp(plan))["stages"];
  ASSERT_EQ(simulated.size(), 4u);
  for (std::size_t d = 0; d < 4; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    const nlohmann::json& best = plans[0]["devices"][d];
    EXPECT_EQ(best["peak_memory_bytes"], simulated[d]["peak_memory_bytes"]);
    for (const char* part : parts) EXPECT_EQ(best[part], simulated[d][part]) << part;
  }
  // K x chunks stages in the file, each with its device's peak and split.
  ASSERT_EQ(file.size(), 4 * plans[0]["chunks"].get<std::size_t>());
  for (std::size_t s = 0; s < file.size(); ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const nlohmann::json& best = plans[0]["devices"][file[s]["device"].get<std::size_t>()];
    EXPECT_EQ(best["peak_memory_bytes"], file[s]["peak_memory_bytes"]);
    for (const char* part : parts) EXPECT_EQ(best[part], file[s][part]) << part;
  }
  fs::remove(plan);
}

// The table is followed by the best plan's memory line, as `simulate` words it
// for that plan.
TEST(PlanCli, TextGivesTheBestPlansMemorySplit) {
  const fs::path plan = temp("plan_split_text.json");
  const CliResult r = run("plan " + kDemo + " -K 2 --top 3 -o " + plan.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const CliResult sim = run("simulate " + kDemo + " --plan " + plan.string());
  ASSERT_EQ(sim.status, 0) << sim.err;
  // "Memory         fits: largest peak X of Y (device d: weights ..., activations ...)"
  const std::size_t at = sim.out.find("fits: largest peak ");
  ASSERT_NE(at, std::string::npos) << sim.out;
  const std::size_t from = at + std::string("fits: ").size();
  const std::string memory = sim.out.substr(from, sim.out.find('\n', from) - from);
  EXPECT_NE(memory.find(", gradients "), std::string::npos) << memory;
  EXPECT_NE(r.out.find("\nMemory of plan 1: " + memory + "\n"), std::string::npos)
      << r.out << "\nwanted: " << memory;
  fs::remove(plan);
}

TEST(PlanCli, PlanForAnotherModelIsRefused) {
  const fs::path plan = temp("plan_other.json");
  ASSERT_EQ(run("plan " + kDemo + " -K 2 -o " + plan.string()).status, 0);
  const CliResult r = run("simulate " + kDemo + " --set model.layers=30 --plan " + plan.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(plan.string() + ": model.hash: this plan was made for model"),
            std::string::npos)
      << r.err;
  fs::remove(plan);
}

TEST(PlanCli, ImpossibleRequestsFailClearly) {
  const CliResult k = run("plan " + kDemo + " -K 3");
  EXPECT_EQ(k.status, 1);
  EXPECT_EQ(k.err, "pipescope: error: K=3 does not divide the 4 devices\n");
  const CliResult tiny = run("plan " + kDemo +
                             " --set cluster.preset=tpu-v2 --set model.d_model=8192 "
                             "--set model.heads=64");
  EXPECT_EQ(tiny.status, 1);
  EXPECT_NE(tiny.err.find("pipescope: error: no plan fits tpu-v2 (8.00 GiB per device); the least "
                          "any configuration needs is "),
            std::string::npos)
      << tiny.err;
  const CliResult corrupt = run("simulate " + kDemo + " --plan " + kDemo);
  EXPECT_EQ(corrupt.status, 1);
  EXPECT_NE(corrupt.err.find("format"), std::string::npos) << corrupt.err;
}

TEST(ExportCli, TorchGpipeBalanceMatchesThePlan) {
  const fs::path plan = temp("plan_export.json");
  ASSERT_EQ(run("plan " + kDemo + " -K 4 --schedule gpipe -o " + plan.string()).status, 0);
  const nlohmann::json p = nlohmann::json::parse(slurp(plan));
  std::string balance = "balance = [";
  for (std::size_t s = 0; s < p["stages"].size(); ++s) {
    const int n =
        p["stages"][s]["last_layer"].get<int>() - p["stages"][s]["first_layer"].get<int>() + 1;
    balance += (s ? ", " : "") + std::to_string(n);
  }
  const CliResult r = run("export " + plan.string() + " --to torchgpipe");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(balance + "]"), std::string::npos) << r.out;
  EXPECT_EQ(run("export " + plan.string() + " --to keras").status, 2);
  EXPECT_EQ(run("export " + kDemo + " --to torchgpipe").status, 1);
  fs::remove(plan);
}

// A 1F1B plan exported to torchgpipe, which runs GPipe: with the plan's scenario
// the export simulates it there; without, it says how to.
TEST(ExportCli, GivesThePlanUnderTheFrameworksSchedule) {
  const fs::path plan = temp("plan_1f1b.json");
  ASSERT_EQ(run("plan " + kDemo + " -K 4 -M 8 --schedule 1f1b -o " + plan.string()).status, 0);
  const CliResult with = run("export " + plan.string() + " --to torchgpipe --scenario " + kDemo);
  ASSERT_EQ(with.status, 0) << with.err;
  EXPECT_NE(with.out.find("# torchgpipe runs GPipe, not 1F1B: this plan there takes "),
            std::string::npos)
      << with.out;
  EXPECT_NE(with.out.find("# and peaks at "), std::string::npos) << with.out;
  const CliResult without = run("export " + plan.string() + " --to torchgpipe");
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_NE(without.out.find("(--scenario FILE) to see them simulated."), std::string::npos)
      << without.out;
  const CliResult same = run("export " + plan.string() + " --to megatron --scenario " + kDemo);
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_NE(same.out.find("# Megatron-LM runs 1F1B, the plan's schedule"), std::string::npos)
      << same.out;
  // The scenario must be the plan's; overrides need one.
  const CliResult other = run("export " + plan.string() + " --to torchgpipe --scenario " + kDemo +
                              " --set model.layers=3");
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.err.find("model"), std::string::npos) << other.err;
  const CliResult orphan = run("export " + plan.string() + " --to torchgpipe --set model.layers=3");
  EXPECT_EQ(orphan.status, 1);
  EXPECT_NE(orphan.err.find("give --scenario FILE"), std::string::npos) << orphan.err;
  fs::remove(plan);
}

// An interleaved plan runs K x v stages on K devices: torchgpipe and DeepSpeed
// cannot say that, Megatron-LM and PyTorch pipelining can.
TEST(ExportCli, InterleavedPlansGoWhereVirtualStagesExist) {
  const fs::path plan = temp("plan_interleaved.json");
  ASSERT_EQ(
      run("plan " + kDemo + " -K 4 -M 8 --schedule interleaved-1f1b --chunks 2 -o " + plan.string())
          .status,
      0);
  const nlohmann::json p = nlohmann::json::parse(slurp(plan));
  EXPECT_EQ(p["chunks"], 2);
  ASSERT_EQ(p["stages"].size(), 8u);
  for (std::size_t s = 0; s < 8; ++s) EXPECT_EQ(p["stages"][s]["device"], s % 4);
  const CliResult gpipe = run("export " + plan.string() + " --to torchgpipe");
  EXPECT_EQ(gpipe.status, 1);
  EXPECT_NE(gpipe.err.find("cannot export an interleaved-1f1b plan to torchgpipe"),
            std::string::npos)
      << gpipe.err;
  const CliResult megatron = run("export " + plan.string() + " --to megatron");
  ASSERT_EQ(megatron.status, 0) << megatron.err;
  // The cut is uneven (3 / 4 / 3 / ... / 2 layers): the layout's 8 stages fix the
  // virtual stages, and the flag that would repeat them is left out.
  EXPECT_NE(megatron.out.find("--pipeline-model-parallel-layout 'Et*3|t*4|"), std::string::npos)
      << megatron.out;
  EXPECT_EQ(megatron.out.find("--num-virtual-stages-per-pipeline-rank"), std::string::npos);
  // PyTorch pipelining: rank 3 runs stages 3 and 7.
  const CliResult torch = run("export " + plan.string() + " --to torch-pipelining");
  ASSERT_EQ(torch.status, 0) << torch.err;
  const std::string last_row = torch.out.substr(torch.out.rfind('\n', torch.out.size() - 2) + 1);
  EXPECT_NE(last_row.find("3F0"), std::string::npos) << last_row;
  EXPECT_NE(last_row.find("7B7"), std::string::npos) << last_row;
  EXPECT_EQ(last_row.find("2F0"), std::string::npos) << last_row;
  // The plan simulates and runs as itself.
  EXPECT_EQ(run("simulate " + kDemo + " --plan " + plan.string()).status, 0);
  fs::remove(plan);
}

TEST(HfConfigCli, ModelComesFromTheConfig) {
  const std::string gpt2 = std::string(PIPESCOPE_TEST_DATA_DIR) + "/hf/gpt2/config.json";
  const CliResult r = run("simulate " + kDemo + " --hf-config " + gpt2 + " -K 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("transformer 'gpt2', 14 layers, 124 M params, fp32"), std::string::npos)
      << r.out;
  // --set applies after the config: the config's 12 blocks become 6.
  const CliResult six =
      run("simulate " + kDemo + " --hf-config " + gpt2 + " --set model.layers=6 -K 2");
  EXPECT_NE(six.out.find("'gpt2', 8 layers"), std::string::npos) << six.out;
  const CliResult missing = run("simulate " + kDemo + " --hf-config /no/config.json");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.err, "pipescope: error: /no/config.json: cannot open file\n");
  EXPECT_EQ(run("simulate " + kDemo + " --seq-len 512").status, 1);
}

// What only the whole scenario can check of a model the config built is blamed
// on the config, where its sizes were written, not on scenario fields the user
// never wrote; with capacity too, which reads the scenario once for two uses.
TEST(HfConfigCli, ScenarioChecksOfTheModelNameTheConfig) {
  nlohmann::json hf =
      nlohmann::json::parse(slurp(std::string(PIPESCOPE_TEST_DATA_DIR) + "/hf/gpt2/config.json"));
  hf["n_layer"] = 16384;
  hf["n_embd"] = 262144;
  hf["n_head"] = 64;
  hf["vocab_size"] = 16000000;
  const fs::path config = temp("huge_config.json");
  // On cpu-small's CPU, a step of this model outlasts the simulator's clock.
  const std::string small = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
  std::ofstream(config) << hf.dump();
  for (const std::string command : {"simulate", "capacity -K 2"}) {
    const CliResult r = run(command + " " + small + " --hf-config " + config.string());
    EXPECT_EQ(r.status, 1) << command;
    EXPECT_EQ(r.err.rfind("pipescope: error: " + config.string() +
                              ": with the training and "
                              "cluster of " +
                              small + ": ",
                          0),
              0u)
        << r.err;
  }
  // A --set of the model's field is blamed on the scenario, where --set applies.
  const CliResult set =
      run("simulate " + small + " --hf-config " + config.string() + " --set model.layers=16384");
  EXPECT_EQ(set.err.rfind("pipescope: error: " + small + ": model", 0), 0u) << set.err;
  fs::remove(config);
}

TEST(ScenarioFiles, GpipePaperSetupsSimulateAndFit) {
  // GPT-3 on its DGX nodes at the T and K of the README tour's -T 8 plan, so that the
  // sanitizer builds do not search every T.
  for (const std::string name : {"gpipe/transformer-tpuv3.json", "gpipe/amoebanet-tpuv2.json",
                                 "gpt3-175b-1024.json -T 8 -K 8"}) {
    const std::string file = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/" + name;
    const CliResult r = run("plan " + file + " --top 1 --json");
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["plans"].size(), 1u) << name;
  }
}

TEST(RunCli, TrainsAPlanAndMeasuresIt) {
  const std::string small = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
  const fs::path plan = temp("run_plan.json");
  const fs::path trace = temp("run_trace.json");
  ASSERT_EQ(run("plan " + small + " -K 2 -M 4 -o " + plan.string()).status, 0);
  const CliResult r = run("run " + plan.string() + " --steps 3 --json --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["losses"].size(), 3u);
  for (const auto& loss : j["losses"]) {
    EXPECT_GT(loss.get<double>(), 0.0);
    EXPECT_LT(loss.get<double>(), 2 * std::log(64.0));
  }
  EXPECT_GT(j["measured_step_time_s"].get<double>(), 0.0);
  EXPECT_GT(j["throughput_samples_per_s"].get<double>(), 0.0);
  EXPECT_GE(j["bubble_fraction"].get<double>(), 0.0);
  EXPECT_LT(j["bubble_fraction"].get<double>(), 1.0);
  // The measured trace has every op of both stages: per micro-batch F, B (and R
  // with remat, W with a split backward), and the optimizer step.
  const nlohmann::json plan_doc = nlohmann::json::parse(slurp(plan));
  const int recomputed = pipescope::recomputed_count(
      *pipescope::parse_remat(plan_doc["remat_mode"].get<std::string>()), 4);
  const bool split = pipescope::splits_backward(
      pipescope::parse_schedule(plan_doc["schedule"].get<std::string>()).value());
  const int chunks = plan_doc["chunks"].get<int>();  // stages per device
  const nlohmann::json doc = nlohmann::json::parse(slurp(trace));
  int compute = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["tid"].get<int>() % 3 == 0) ++compute;
  }
  EXPECT_EQ(compute, 2 * chunks * ((2 + (split ? 1 : 0)) * 4 + recomputed + 1));
  fs::remove(plan);
  fs::remove(trace);
}

// A custom schedule from a CSV: planned, written with its actions, simulated
// from the plan, exported back to the same CSV, and trained by the executor.
TEST(RunCli, CustomScheduleFromACsvRunsEndToEnd) {
  const std::string small = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
  const fs::path csv = temp("custom.csv");
  const fs::path plan = temp("custom_plan.json");
  // The export writes its device mesh beside the CSV: FILE.csv and FILE.mesh.py.
  const std::string stem = "custom_back_" + std::to_string(::getpid());
  const fs::path back = fs::temp_directory_path() / (stem + ".csv");
  const fs::path mesh = fs::temp_directory_path() / (stem + ".mesh.py");
  {
    std::ofstream out(csv);
    out << "0F0,0F1,0F2,0F3,,,0B0,0B1,0B2,0B3\n,1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\n";
  }
  const CliResult p = run("plan " + small + " --schedule-file " + csv.string() +
                          " --remat except-last -o " + plan.string());
  ASSERT_EQ(p.status, 0) << p.err;
  const nlohmann::json doc = nlohmann::json::parse(slurp(plan));
  EXPECT_EQ(doc["schedule"], "custom");
  EXPECT_EQ(doc["remat_mode"], "except-last");
  EXPECT_EQ(doc["actions"][1][4], "1B0");
  const CliResult sim = run("simulate " + small + " --plan " + plan.string() + " --json");
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_EQ(nlohmann::json::parse(sim.out)["schedule"], "custom");
  ASSERT_EQ(run("export " + plan.string() + " --to torch-pipelining -o " + back.string()).status,
            0);
  EXPECT_EQ(slurp(back), "0F0,0F1,0F2,0F3,,,0B0,0B1,0B2,0B3\n,1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\n");
  EXPECT_NE(slurp(mesh).find("MESH_SHAPE = ("), std::string::npos) << mesh;
  const CliResult r = run("run " + plan.string() + " --steps 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["losses"].size(), 2u);
  for (const fs::path& f : {csv, plan, back, mesh}) fs::remove(f);
}

TEST(SimulateCli, BadScheduleFileNamesTheCell) {
  const fs::path csv = temp("bad_custom.csv");
  {
    std::ofstream out(csv);
    out << "0F0,0F1,0B1,0B0\n1F0,1F1,1B0,1X1\n";
  }
  const CliResult r = run("simulate " + kDemo + " --schedule-file " + csv.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(csv.string() + ": row 2, column 4: '1X1': unknown action kind 'X'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  const CliResult k = run("simulate " + kDemo + " -K 4 --schedule-file " + csv.string());
  EXPECT_EQ(k.status, 1);
  const CliResult none = run("simulate " + kDemo + " --schedule custom");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("schedule custom needs its action file (--schedule-file)"),
            std::string::npos)
      << none.err;
  fs::remove(csv);
}

TEST(RunCli, RefusesModelsTooBigForTheCpu) {
  const fs::path plan = temp("run_big.json");
  ASSERT_EQ(run("plan " + kDemo + " -K 2 -o " + plan.string()).status, 0);
  const CliResult r = run("run " + plan.string() + " --steps 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("model.spec: 1.34 B parameters need 20.0 GiB"), std::string::npos) << r.err;
  fs::remove(plan);
}

TEST(SweepCli, WritesCsvAndJson) {
  const fs::path csv = temp("sweep.csv");
  const CliResult r = run("sweep " + kDemo + " -K 1,2,4 -M 2,8 --csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Throughput (samples/s)"), std::string::npos);
  const std::string text = slurp(csv);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 3 * 2);
  fs::remove(csv);
  const CliResult j = run("sweep " + kDemo + " -K 2 -M 4,3 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  const nlohmann::json points = nlohmann::json::parse(j.out);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_GT(points[0]["throughput_samples_per_s"].get<double>(), 0.0);
  EXPECT_EQ(points[1]["error"], "M=3 does not divide the global batch of 32");
}

// The schedule and its chunks reach every pair: interleaving 4 devices needs M
// a multiple of 4, and v = 2 halves 1F1B's bubble at K = 4, M = 8 or close to it.
// A sweep with D replicas gives at each point what simulate -D gives.
TEST(SweepCli, DataParallelPointsMatchSimulate) {
  const CliResult r = run("sweep " + kDemo + " -D 2 -K 1,2,4 -M 8 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json points = nlohmann::json::parse(r.out);
  ASSERT_EQ(points.size(), 3u);
  const CliResult s = run("simulate " + kDemo + " -K 2 -D 2 -M 8 --json");
  ASSERT_EQ(s.status, 0) << s.err;
  const nlohmann::json sim = nlohmann::json::parse(s.out);
  EXPECT_EQ(points[1]["step_time_s"], sim["step_time_s"]);
  EXPECT_DOUBLE_EQ(points[1]["throughput_samples_per_s"].get<double>(),
                   sim["throughput_samples_per_s"].get<double>());
  // K=4 x D=2 needs 8 of the demo's 4 devices.
  EXPECT_EQ(points[2]["error"], "2 replicas of K=4 need 8 devices; the cluster has 4");
  EXPECT_EQ(run("sweep " + kDemo + " -D 3").status, 1);  // 3 does not divide the batch of 32
}

TEST(SweepCli, ScheduleAndChunksReachEveryPair) {
  const auto sweep = [](const std::string& args) {
    const CliResult r = run("sweep " + kDemo + " -K 4 -M 2,8 --remat off --json " + args);
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json inter = sweep("--schedule interleaved-1f1b --chunks 2");
  const nlohmann::json one = sweep("--schedule 1f1b");
  ASSERT_EQ(inter.size(), 2u);
  EXPECT_EQ(inter[0]["error"],
            "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) (what both "
            "PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=2, K=4, rounds 1");
  // Two chunks a device cut the bubble by a fifth or more (less than half:
  // the chunk with the head and its fp32 loss is the heaviest).
  EXPECT_LT(inter[1]["bubble_fraction"].get<double>(),
            0.8 * one[1]["bubble_fraction"].get<double>());
  // A sweep whose only pair cannot run has nothing to show: it fails with why.
  const CliResult bad = run("sweep " + kDemo + " -K 4 -M 2 --schedule interleaved-1f1b --json");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.out, "");
  EXPECT_EQ(bad.err,
            "pipescope: error: sweep of demo: 1 of the 1 configurations cannot run (K=4 M=2: "
            "interleaved-1f1b needs M >= K and a multiple of its rounds, max(1, M / K) (what both "
            "PyTorch's ScheduleInterleaved1F1B and Megatron-LM run): M=2, K=4, rounds 1)\n");
  // Chunks without a schedule that takes them are the scenario's error, named
  // by the flag, before any configuration is tried.
  const CliResult chunks = run("sweep " + kDemo + " -K 4 -M 8 --chunks 2 --json");
  EXPECT_EQ(chunks.status, 1);
  EXPECT_EQ(chunks.err, "pipescope: error: " + kDemo +
                            ": --chunks 2: 2 chunks need a schedule that takes chunks: "
                            "interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v\n");
}

TEST(CapacityCli, JsonFollowsTheContract) {
  const CliResult r = run("capacity " + kDemo + " -K 4 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["param"], "model.layers");
  EXPECT_GT(j["max_value"].get<int>(), 24);
  EXPECT_GT(j["params"].get<std::int64_t>(), 1'000'000'000);
  EXPECT_EQ(j["fits"], true);
  EXPECT_EQ(run("capacity " + kDemo).status, 2);  // -K is required
}

// capacity takes --cost-model as simulate does, reads it once and applies it to
// every value it tries: memory decides what fits, so the answer is the same,
// and what the model cannot cost is an error, not "does not fit".
TEST(CapacityCli, CostModelIsReadOnceAndAppliedToEveryValueTried) {
  const std::string small = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
  const CliResult plain = run("capacity " + kDemo + " -K 4 --json");
  ASSERT_EQ(plain.status, 0) << plain.err;
  for (const std::string model : {"analytic", "kernels"}) {
    const CliResult r = run("capacity " + kDemo + " -K 4 --json --cost-model " + model);
    ASSERT_EQ(r.status, 0) << model << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse(plain.out)) << model;
  }
  // A cost-model file of the demo's device, through a process substitution (a
  // pipe read twice would be empty the second time), as the scenario is.
  const fs::path file = temp("capacity_cost_model.json");
  std::ofstream(file) << nlohmann::json{
      {"format", "pipescope-cost-model"},
      {"version", 1},
      {"model", "kernels"},
      {"device", "a100-80g"},
      {"parameters",
       {{"gemm_efficiency", 0.55},
        {"attention_fwd_efficiency", 0.6},
        {"attention_bwd_efficiency", 0.5},
        {"memory_efficiency", 0.85},
        {"kernel_overhead_s", 4e-6},
        {"link_efficiency",
         0.8}}}}.dump();
  const CliResult piped = pipescope::testing::run_under(
      "bash -c 'exec \"$1\" capacity <(cat " + kDemo + ") -K 4 --json --cost-model <(cat " +
          file.string() + ")' bash",
      "");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(nlohmann::json::parse(piped.out), nlohmann::json::parse(plain.out));
  CliResult r = run("capacity " + kDemo + " -K 4 --set cluster.preset=h100-sxm --cost-model " +
                    file.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: " + file.string() +
                       ": device: the figures are for device 'a100-80g' but the scenario's "
                       "device is 'h100-sxm'; calibrate again on a scenario of that device\n");
  fs::remove(file);
  r = run("capacity " + small + " -K 2 --cost-model kernels");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("pipescope: error: --cost-model kernels needs the device's kernel table: "
                        "device 'cpu' has none",
                        0),
            0u)
      << r.err;
  // A profile of cpu-small: one measurement stands for every block, so every
  // block count is costed, with the same answer...
  const fs::path profile = temp("capacity_profile.json");
  ASSERT_EQ(run("profile " + small + " --batch-sizes 4 --repeats 1 -o " + profile.string()).status,
            0);
  const CliResult unprofiled = run("capacity " + small + " -K 2 --json");
  ASSERT_EQ(unprofiled.status, 0) << unprofiled.err;
  r = run("capacity " + small + " -K 2 --json --cost-model " + profile.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse(unprofiled.out));
  // ... but other widths were not measured: the first one tried is an error.
  r = run("capacity " + small + " -K 2 --param model.d_model --cost-model " + profile.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("pipescope: error: " + profile.string() +
                            ": layers: has no measurement for layer 'embed'",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("(at model.d_model = 4, a value capacity probed)\n"), std::string::npos)
      << r.err;
  fs::remove(profile);
}

}  // namespace
