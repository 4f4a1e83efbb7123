// Inputs that PipeScope used to read and then ignore, results that meant nothing
// and messages that blamed the wrong thing, as a user meets them on the command
// line: each is now refused with the file, the field and the valid range.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;

const std::string kScenarios = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/";
const std::string kDemo = kScenarios + "demo.json";
const std::string kCpuSmall = kScenarios + "cpu-small.json";

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / ("validity_" + std::to_string(::getpid()) + "_" + name);
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A plan written by `plan -o` for `scenario` with K stages, as JSON.
nlohmann::json make_plan(const std::string& scenario, const std::string& args) {
  const fs::path file = temp("made_plan.json");
  const CliResult r = run("plan " + scenario + " " + args + " -o " + file.string());
  EXPECT_EQ(r.status, 0) << r.err;
  nlohmann::json plan = nlohmann::json::parse(slurp(file));
  fs::remove(file);
  return plan;
}

TEST(ValidityCli, PlanWithAStageMovedToAnotherDeviceIsRefusedEverywhere) {
  nlohmann::json plan = make_plan(kDemo, "-K 4 --schedule 1f1b");
  ASSERT_EQ(plan["stages"][1]["device"], 1);
  plan["stages"][1]["device"] = 3;
  plan["stages"][3]["device"] = 1;
  const fs::path file = temp("moved.json");
  write(file, plan.dump(2));
  for (const std::string& command :
       {"simulate " + kDemo + " --plan " + file.string(),
        "export " + file.string() + " --to deepspeed", "run " + file.string()}) {
    const CliResult r = run(command);
    EXPECT_EQ(r.status, 1) << command << "\n" << r.out;
    EXPECT_NE(r.err.find(file.string() + ": stages[1].device: expected 1, got 3"),
              std::string::npos)
        << command << "\n"
        << r.err;
    EXPECT_NE(r.err.find("mod K=4"), std::string::npos) << r.err;
  }
  fs::remove(file);
}

TEST(ValidityCli, SweepInWhichNothingFitsFailsWithoutWritingItsCsv) {
  const fs::path csv = temp("sweep.csv");
  write(csv, "kept\n");
  // 1000 blocks of 50 M parameters in bf16 with Adam: terabytes on 80 GiB devices.
  const CliResult r =
      run("sweep " + kDemo + " --set model.layers=1000 -K 1,2 -M 1,2 --csv " + csv.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("no configuration fits in memory: the least any needs is"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("per device (K=2 M="), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the device has 80.0 GiB"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(csv), "kept\n");
  fs::remove(csv);
}

TEST(ValidityCli, SweepWhoseEveryPointIsRefusedSaysWhy) {
  // M=5 divides no batch of 32.
  const CliResult r = run("sweep " + kDemo + " -K 1,2 -M 5");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("2 of the 2 configurations cannot run (K=1 M=5: M=5 does not divide"),
            std::string::npos)
      << r.err;
}

TEST(ValidityCli, ModelWhoseLayersCostNothingIsRefusedByEverySimulatingCommand) {
  const fs::path scenario = temp("free.json");
  write(scenario, R"({
  "name": "free-lunch",
  "model": {
    "family": "layers", "name": "nothing", "dtype": "fp32", "input_bytes": 0,
    "layers": [
      { "name": "a", "fwd_flops": 0, "bwd_flops": 0, "params": 0, "out_bytes": 0, "stash_bytes": 0 },
      { "name": "b", "fwd_flops": 0, "bwd_flops": 0, "params": 0, "out_bytes": 0, "stash_bytes": 0 }
    ]
  },
  "cluster": {
    "devices": 2,
    "device": { "peak_flops": 1e12, "memory_bytes": 1073741824, "mem_bandwidth": 1e11,
                "op_overhead_s": 0 },
    "interconnect": { "topology": "all-to-all", "bandwidth": 1e10, "latency_s": 0 }
  },
  "training": { "global_batch": 4, "micro_batches": 2, "bytes_per_param": 16 }
})");
  for (const char* command : {"simulate", "plan", "sweep"}) {
    const CliResult r = run(std::string(command) + " " + scenario.string());
    EXPECT_EQ(r.status, 1) << command << "\n" << r.out;
    EXPECT_NE(r.err.find("scenario 'free-lunch': every layer of model 'nothing' takes 0 s"),
              std::string::npos)
        << command << "\n"
        << r.err;
  }
  const CliResult sim = run("simulate " + scenario.string());
  EXPECT_NE(sim.err.find(scenario.string() + ": model.layers: "), std::string::npos) << sim.err;
  fs::remove(scenario);
}

TEST(ValidityCli, InterleavingOnOneDeviceRunsInEveryCommand) {
  // simulate, sweep and run took K=1 interleaved-1f1b; plan refused it as
  // needing K > 1.
  const std::string shape = " -K 1 --schedule interleaved-1f1b --chunks 2";
  const CliResult sim = run("simulate " + kDemo + shape + " -M 4 --json");
  EXPECT_EQ(sim.status, 0) << sim.err;
  const CliResult plan = run("plan " + kDemo + " --devices 1 -K 1 --schedule interleaved-1f1b");
  EXPECT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("interleaved-1f1b v=2"), std::string::npos) << plan.out;
}

TEST(ValidityCli, CapacityAppliesTheScheduleRuleSimulateApplies) {
  const std::string set =
      " --set training.schedule=interleaved-1f1b --set training.chunks=2 -K 4 -M 2";
  const CliResult sim = run("simulate " + kDemo + set);
  EXPECT_EQ(sim.status, 1);
  const CliResult cap = run("capacity " + kDemo + set);
  EXPECT_EQ(cap.status, 1) << cap.out;
  const std::string rule = "interleaved-1f1b needs M >= K and a multiple of its rounds";
  EXPECT_NE(sim.err.find(rule), std::string::npos) << sim.err;
  EXPECT_NE(cap.err.find(rule), std::string::npos) << cap.err;
}

TEST(ValidityCli, RunRefusesAPlanLargerThanTheMachineBeforeAllocating) {
  nlohmann::json plan = make_plan(kCpuSmall, "-K 2 -M 4");
  // 2^32 samples of a step: terabytes of activations on any machine.
  const std::int64_t batch = std::int64_t{1} << 32;
  plan["global_batch"] = batch;
  plan["micro_batch_size"] = batch / 4;
  const fs::path file = temp("huge.json");
  write(file, plan.dump(2));
  for (const char* command : {"run", "compare"}) {
    const CliResult r = run(std::string(command) + " " + file.string() + " --steps 3");
    EXPECT_EQ(r.status, 1) << command << "\n" << r.out;
    EXPECT_NE(r.err.find(file.string() + ": this plan of scenario 'cpu-small' needs "),
              std::string::npos)
        << command << "\n"
        << r.err;
    EXPECT_NE(r.err.find("of activations kept by its"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("available ("), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
  }
  fs::remove(file);
}

TEST(ValidityCli, DataParallelThatDoesNotDivideTheDevicesNamesTheRule) {
  for (const std::string d : {"3", "5"}) {
    const CliResult r = run("simulate " + kDemo + " -D " + d);
    EXPECT_EQ(r.status, 1) << d << "\n" << r.out;
    EXPECT_NE(r.err.find("demo.json: cluster.devices: --data-parallel " + d + " without -K makes " +
                         d + " pipelines of K = devices / D each, and " + d +
                         " does not divide the cluster's 4 devices"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("K=0"), std::string::npos) << r.err;
  }
  const CliResult r = run("simulate " + kDemo + " -D 3 -K 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("need K x D = 6 devices; the cluster has 4"), std::string::npos) << r.err;
}

TEST(ValidityCli, NonPositiveCountsGiveAReadableRange) {
  for (const std::string& command :
       {"simulate " + kDemo + " -K 0", "plan " + kDemo + " -M 0", "sweep " + kDemo + " -K 0",
        "capacity " + kDemo + " -K 0", std::string("run plan.json --steps 0")}) {
    const CliResult r = run(command);
    EXPECT_NE(r.status, 0) << command;
    EXPECT_NE(r.err.find("expected a number above 0, got 0"), std::string::npos) << command << "\n"
                                                                                 << r.err;
    EXPECT_LT(r.err.size(), 300u) << r.err;
  }
  // Beyond an int, or not whole: the range, not CLI11's "Could not convert".
  const std::vector<std::pair<std::string, std::string>> wrong = {
      {"simulate " + kDemo + " -K 99999999999",
       "--stages: expected a number from 1 to 2147483647, got 99999999999"},
      {"sweep " + kDemo + " -M 8,4294967296",
       "--micro-batches: expected a number from 1 to 2147483647, got 4294967296"},
      {"plan " + kDemo + " --top 1.5", "--top: expected a whole number above 0, got 1.5"}};
  for (const auto& [command, message] : wrong) {
    const CliResult r = run(command);
    EXPECT_EQ(r.status, 2) << command;
    EXPECT_EQ(r.err.rfind(message + "\n", 0), 0u) << command << "\n" << r.err;
  }
}

// An empty entry in a list is refused: CLI11's splitting would read it as the
// end of a group and keep one group (-K 1,,2 swept K = 1 alone).
TEST(ValidityCli, ListsWithAnEmptyEntryAreRefused) {
  const std::vector<std::pair<std::string, std::string>> wrong = {
      {"sweep " + kDemo + " -K 1,,2 -M 4",
       "--stages: expected numbers separated by commas, got an empty entry in '1,,2'"},
      {"sweep " + kDemo + " -M 4,",
       "--micro-batches: expected numbers separated by commas, got an empty entry in '4,'"},
      {"profile " + kCpuSmall + " --batch-sizes ,2",
       "--batch-sizes: expected numbers separated by commas, got an empty entry in ',2'"}};
  for (const auto& [command, message] : wrong) {
    const CliResult r = run(command);
    EXPECT_EQ(r.status, 2) << command;
    EXPECT_EQ(r.err.rfind(message + "\n", 0), 0u) << command << "\n" << r.err;
  }
  // Comma-separated and as several values, the same points.
  for (const std::string& ks : {std::string("-K 1,2"), std::string("-K 1 2")}) {
    const CliResult r = run("sweep " + kDemo + " " + ks + " -M 4 --json");
    ASSERT_EQ(r.status, 0) << ks << "\n" << r.err;
    const nlohmann::json points = nlohmann::json::parse(r.out);
    ASSERT_EQ(points.size(), 2u) << r.out;
    EXPECT_EQ(points[0].at("K"), 1);
    EXPECT_EQ(points[1].at("K"), 2);
  }
}

TEST(ValidityCli, SeedsOutOfRangeAreRefused) {
  for (const std::string& command : {std::string("run plan.json"), "profile " + kCpuSmall,
                                     std::string("compare plan.json"), std::string("selftest")}) {
    for (const char* seed : {"-1", "18446744073709551616", "1e3"}) {
      const CliResult r = run(command + " --seed=" + std::string(seed));
      EXPECT_NE(r.status, 0) << command << " --seed=" << seed;
      EXPECT_NE(r.err.find("--seed"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("expected a whole number from 0 to 18446744073709551615"),
                std::string::npos)
          << command << " --seed=" << seed << "\n"
          << r.err;
    }
  }
}

TEST(ValidityCli, SeedsAreDecimal) {
  // "010" is ten, not CLI11's octal eight: the same weights and data as --seed 10.
  const fs::path file = temp("seeded.json");
  write(file, make_plan(kCpuSmall, "-K 2 -M 4").dump(2));
  const auto losses = [&](const std::string& seed) {
    const CliResult r = run("run " + file.string() + " --steps 1 --json --seed " + seed);
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out)["losses"];
  };
  EXPECT_EQ(losses("010"), losses("10"));
  EXPECT_NE(losses("010"), losses("8"));
  fs::remove(file);
}

TEST(ValidityCli, OneStepRunSaysWhatItMeasured) {
  const fs::path file = temp("small.json");
  write(file, make_plan(kCpuSmall, "-K 2 -M 4").dump(2));
  const CliResult r = run("run " + file.string() + " --steps 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("steps 2-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(step 1, warm-up included (a median needs --steps 3 or more))"),
            std::string::npos)
      << r.out;
  fs::remove(file);
}

}  // namespace
