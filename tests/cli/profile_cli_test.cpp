// profile -> plan -> run -> compare as a user runs them: the profile is a cost
// model that simulate, plan and sweep answer from exactly, compare's JSON keeps
// its contract and its arithmetic, and bad profiles are refused by name.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSmall = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

// Profiles cpu-small at micro-batch sizes 2, 4 and 8 into `file`.
void measure_profile(const fs::path& file) {
  const CliResult r =
      run("profile " + kSmall + " --batch-sizes 8,2,4 --repeats 1 -o " + file.string());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Profile written to " + file.string()), std::string::npos) << r.out;
}

// A profile of cpu-small at micro-batch sizes 2, 4 and 8, in a file of the
// test's own. ctest measures it once for the run (tests/CMakeLists.txt names it
// in PIPESCOPE_TEST_PROFILE); run by hand, the test measures its own.
fs::path quick_profile(const std::string& name) {
  const fs::path file = temp(name);
  if (const char* shared = std::getenv("PIPESCOPE_TEST_PROFILE")) {
    fs::copy_file(shared, file, fs::copy_options::overwrite_existing);
  } else {
    measure_profile(file);
  }
  return file;
}

double entry(const json& layer, const char* key, std::int64_t batch) {
  const json& sizes = layer["batch_sizes"];
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i].get<std::int64_t>() == batch) return layer[key][i].get<double>();
  }
  ADD_FAILURE() << "batch " << batch << " not profiled";
  return 0.0;
}

TEST(ProfileCli, MeasuresEveryKindOfLayerAtTheGivenSizes) {
  const fs::path file = temp("profile_sizes.json");
  measure_profile(file);
  const json p = json::parse(slurp(file));
  EXPECT_EQ(p["format"], "pipescope-profile");
  EXPECT_EQ(p["backend"], "cpu");
  EXPECT_EQ(p["optimizer"]["name"], "adam");  // the scenario's
  ASSERT_EQ(p["layers"].size(), 3u);
  EXPECT_EQ(p["layers"][0]["example"], "embed");
  EXPECT_EQ(p["layers"][1]["example"], "block0");
  EXPECT_EQ(p["layers"][2]["example"], "head");
  for (const json& l : p["layers"]) EXPECT_EQ(l["batch_sizes"], json::parse("[2, 4, 8]"));
  // How it was measured: one round wanted (--repeats 1), at most three on a
  // busy machine, each op on its thread's CPU clock.
  const json& rounds = p["rounds"];
  EXPECT_GE(rounds["measured"].get<int>(), 1);
  EXPECT_LE(rounds["measured"].get<int>(), 3);
  EXPECT_GE(rounds["kept"].get<int>(), 1);
  EXPECT_LE(rounds["kept"].get<int>(), rounds["measured"].get<int>());
  EXPECT_EQ(rounds["discard_above"].get<double>(), 0.05);
  EXPECT_EQ(rounds["slowdown_of_stages"].get<bool>(), p["concurrency_slowdown"].size() >= 2);
  // Each round between two checks of the cores' speed.
  ASSERT_TRUE(rounds.contains("speed_spread"));
  EXPECT_GE(rounds["speed_spread"].get<double>(), 0.0);
  fs::remove(file);
}

// --json: the profile as written, with the machine's GEMM rate and, per layer
// and batch size, the cost model's FLOPs over the measured time and its share
// of that rate; the text names the same rate.
TEST(ProfileCli, ReportsEachLayersShareOfTheGemmRate) {
  const fs::path file = temp("profile_gemm.json");
  const CliResult r =
      run("profile " + kSmall + " --batch-sizes 2,4 --repeats 1 --json -o " + file.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const json out = json::parse(r.out);
  const json written = json::parse(slurp(file));
  EXPECT_EQ(out["output"], file.string());
  EXPECT_EQ(out["gemm"], written["gemm"]);  // the file records the rate
  const double rate = out["gemm"]["flop_s"].get<double>();
  EXPECT_GT(rate, 0.0);
  const std::int64_t side = out["gemm"]["m"].get<std::int64_t>();
  EXPECT_TRUE(side == 256 || side == 384 || side == 512) << side;
  EXPECT_EQ(out["gemm"]["n"], side);
  EXPECT_EQ(out["gemm"]["k"], side);
  // Per sample, from the cost model: embed s*h, a block 4sh(2h) + 4shf + 4s^2h,
  // the head 2shV + 5sV; backward twice the forward.
  const double per_sample[] = {32.0 * 64, 3407872.0, 2.0 * 32 * 64 * 64 + 5.0 * 32 * 64};
  ASSERT_EQ(out["layers"].size(), 3u);
  for (std::size_t l = 0; l < 3; ++l) {
    const json& e = out["layers"][l];
    for (std::size_t i = 0; i < 2; ++i) {
      const double batch = e["batch_sizes"][i].get<double>();
      EXPECT_DOUBLE_EQ(e["forward_flops"][i].get<double>(), per_sample[l] * batch);
      EXPECT_DOUBLE_EQ(e["backward_flops"][i].get<double>(), 2.0 * per_sample[l] * batch);
      for (const std::string pass : {"forward", "backward"}) {
        const double achieved = e[pass + "_flop_s"][i].get<double>();
        EXPECT_NEAR(achieved, e[pass + "_flops"][i].get<double>() / e[pass + "_s"][i].get<double>(),
                    achieved * 1e-12);
        EXPECT_NEAR(e[pass + "_gemm_fraction"][i].get<double>() * rate, achieved, achieved * 1e-12);
      }
    }
  }
  const CliResult text =
      run("profile " + kSmall + " --batch-sizes 2 --repeats 1 -o " + file.string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("GEMM       "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("the executor's fp32 product at "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("forward  of GEMM       backward  of GEMM"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("each op timed on its thread's CPU clock"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("the cores' speed moved by at most "), std::string::npos) << text.out;
  fs::remove(file);
}

// The simulator's stage times are the profile's layer times summed, at the
// plan's micro-batch size (4 when M = 4 of a batch of 16).
TEST(ProfileCli, SimulateAnswersFromTheProfile) {
  const fs::path file = quick_profile("profile_sim.json");
  const json p = json::parse(slurp(file));
  const CliResult r =
      run("simulate " + kSmall + " --cost-model " + file.string() + " -K 1 -M 4 --remat on --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json s = json::parse(r.out);
  ASSERT_EQ(s["stages"].size(), 1u);
  const json& layers = p["layers"];
  // embed + 4 blocks + head.
  const double fwd = entry(layers[0], "forward_s", 4) + 4 * entry(layers[1], "forward_s", 4) +
                     entry(layers[2], "forward_s", 4);
  const double bwd = entry(layers[0], "backward_s", 4) + 4 * entry(layers[1], "backward_s", 4) +
                     entry(layers[2], "backward_s", 4);
  const double rec = entry(layers[0], "recompute_s", 4) + 4 * entry(layers[1], "recompute_s", 4) +
                     entry(layers[2], "recompute_s", 4);
  EXPECT_NEAR(s["stages"][0]["fwd_s"].get<double>(), fwd, 6e-9);  // ns rounding per layer
  EXPECT_NEAR(s["stages"][0]["bwd_s"].get<double>(), bwd, 6e-9);
  EXPECT_NEAR(s["stages"][0]["recompute_s"].get<double>(), rec, 6e-9);

  const CliResult text = run("simulate " + kSmall + " --cost-model " + file.string());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Profile    layer times, optimizer and transport measured on"),
            std::string::npos)
      << text.out;
  fs::remove(file);
}

TEST(ProfileCli, PlanAndSweepTakeTheProfile) {
  const fs::path file = quick_profile("profile_plan.json");
  const CliResult plan = run("plan " + kSmall + " --cost-model " + file.string() + " --json");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_FALSE(json::parse(plan.out)["plans"].empty());
  const CliResult sweep =
      run("sweep " + kSmall + " --cost-model " + file.string() + " -K 1,2 -M 2,4 --json");
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  fs::remove(file);
}

TEST(ProfileCli, RefusesAProfileOfAnotherModelOrAMalformedOne) {
  const fs::path file = quick_profile("profile_other.json");
  CliResult r = run("simulate " + kDemo + " --cost-model " + file.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(file.string() + ": layers: has no measurement for layer 'embed'"),
            std::string::npos)
      << r.err;
  { std::ofstream(file) << "{\"format\": \"pipescope-profile\", \"version\": 1}"; }
  r = run("simulate " + kSmall + " --cost-model " + file.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(file.string() + ": backend: missing required key"), std::string::npos)
      << r.err;
  fs::remove(file);
  r = run("simulate " + kSmall + " --cost-model " + file.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(file.string()), std::string::npos) << r.err;
  r = run("profile " + kDemo + " -o " + file.string());  // 1.34 B parameters
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("model: 1.34 B parameters need"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file));
}

// A layer whose measurement would need more memory than the machine has is
// refused before anything is allocated: at a sequence of 2^20 tokens one
// attention's scores alone run to terabytes.
TEST(ProfileCli, RefusesALayerLargerThanTheMachineBeforeAllocating) {
  const fs::path out = temp("huge_profile.json");
  const CliResult r =
      run("profile " + kSmall + " --set model.seq_len=1048576 --batch-sizes 1 -o " + out.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("pipescope: error: " + kSmall + ": model: layer '", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("' at micro-batch 1 needs at least "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("profile smaller micro-batches (--batch-sizes) or a smaller model\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST(CompareCli, JsonKeepsTheContractAndItsArithmetic) {
  const fs::path profile = quick_profile("compare_profile.json");
  const fs::path plan = temp("compare_plan.json");
  ASSERT_EQ(
      run("plan " + kSmall + " --cost-model " + profile.string() + " -K 2 -M 4 -o " + plan.string())
          .status,
      0);
  const CliResult r = run("compare " + plan.string() + " --profile " + profile.string() +
                          " --steps 3 --warmup 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = json::parse(r.out);
  const double predicted = c["predicted_step_time_s"].get<double>();
  const double measured = c["measured_step_time_s"].get<double>();
  EXPECT_GT(predicted, 0.0);
  EXPECT_GT(measured, 0.0);
  EXPECT_NEAR(c["relative_error"].get<double>(), (predicted - measured) / measured, 1e-12);
  EXPECT_EQ(c["K"], 2);
  EXPECT_EQ(c["M"], 4);
  EXPECT_EQ(c["warmup_steps"], 1);
  EXPECT_EQ(c["measured_steps"], 2);
  ASSERT_EQ(c["stages"].size(), 2u);
  EXPECT_NEAR(c["measured_throughput_samples_per_s"].get<double>(), 16.0 / measured, 1e-9);
  EXPECT_GE(c["steal_fraction"].get<double>(), 0.0);
  EXPECT_LT(c["steal_fraction"].get<double>(), 1.0);
  // One round (a given profile's speed is not known, so no round is run
  // again), kept whatever other work took from it and however far the
  // cores' speed moved (the least disturbed half).
  EXPECT_EQ(c["round_relative_errors"].size(), 1u);
  ASSERT_EQ(c["round_steal_fractions"].size(), 1u);
  EXPECT_EQ(c["round_steal_fractions"][0], c["steal_fraction"]);
  ASSERT_EQ(c["round_speed_spreads"].size(), 1u);
  EXPECT_GE(c["round_speed_spreads"][0].get<double>(), 0.0);
  EXPECT_EQ(c["rounds_kept"], json::parse("[0]"));

  const CliResult text = run("compare " + plan.string() + " --steps 2 --warmup 1");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("a profile measured before each round's steps"), std::string::npos)
      << text.out;
  // Its own profile: three clean rounds wanted, at most nine measured.
  int measured_rounds = 0, kept_rounds = 0;
  const std::size_t at = text.out.find("Profile rounds: ");
  ASSERT_NE(at, std::string::npos) << text.out;
  ASSERT_EQ(std::sscanf(text.out.c_str() + at, "Profile rounds: %d measured, %d kept",
                        &measured_rounds, &kept_rounds),
            2)
      << text.out;
  EXPECT_GE(measured_rounds, 3);
  EXPECT_LE(measured_rounds, 9);
  EXPECT_LE(kept_rounds, measured_rounds);
  // Two rounds: the one reported is a kept one, the clean ones or else the
  // least disturbed.
  const CliResult two = run("compare " + plan.string() + " --profile " + profile.string() +
                            " --steps 2 --warmup 1 --rounds 2 --json");
  ASSERT_EQ(two.status, 0) << two.err;
  const json t = json::parse(two.out);
  const json& steal = t["round_steal_fractions"];
  const json& spread = t["round_speed_spreads"];
  ASSERT_EQ(steal.size(), 2u);
  ASSERT_EQ(spread.size(), 2u);
  // A round whose cores changed speed by more than 10 % counts as more
  // disturbed than any other work makes one.
  std::vector<double> disturbed;
  for (std::size_t i = 0; i < 2; ++i) {
    const double s = spread[i].get<double>();
    disturbed.push_back(s > 0.10 ? 1.0 + s : steal[i].get<double>());
  }
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < 2; ++i) {
    if (disturbed[i] <= 0.05) kept.push_back(i);
  }
  if (kept.empty()) kept.push_back(disturbed[0] <= disturbed[1] ? 0 : 1);
  EXPECT_EQ(t["rounds_kept"].get<std::vector<std::size_t>>(), kept);
  bool reported = false;
  for (const std::size_t i : kept) reported |= t["round_relative_errors"][i] == t["relative_error"];
  EXPECT_TRUE(reported) << t.dump();
  EXPECT_NE(text.out.find("step time"), std::string::npos);
  // Busy time per device; with one chunk per device a device is a stage.
  const bool chunked = json::parse(slurp(plan)).value("chunks", 1) > 1;
  EXPECT_NE(text.out.find(chunked ? "device 1 busy" : "stage 1 busy"), std::string::npos)
      << text.out;
  fs::remove(profile);
  fs::remove(plan);
}

// More stages than the profile's cores: the run still trains, and compare says
// how the sharing was modelled.
TEST(CompareCli, SaysWhenStagesShareCores) {
  const fs::path profile = quick_profile("compare_shared.json");
  json p = json::parse(slurp(profile));
  p["cores"] = 1;
  p["concurrency_slowdown"] = json::array({1.0});
  { std::ofstream(profile) << p.dump(); }
  const fs::path plan = temp("compare_shared_plan.json");
  ASSERT_EQ(run("plan " + kSmall + " -K 2 -M 2 -o " + plan.string()).status, 0);
  const CliResult r = run("compare " + plan.string() + " --profile " + profile.string() +
                          " --steps 2 --warmup 1 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json c = json::parse(r.out);
  EXPECT_EQ(c["shared_cores"], true);
  EXPECT_NE(c["shared_cores_note"].get<std::string>().find("2 stages share 1 core"),
            std::string::npos);
  fs::remove(profile);
  fs::remove(plan);
}

TEST(CompareCli, RefusesAProfileOfAnotherModelBeforeRunning) {
  const fs::path profile = temp("compare_wide.json");
  ASSERT_EQ(run("profile " + kSmall + " --set model.d_model=32 --batch-sizes 4 --repeats 1 -o " +
                profile.string())
                .status,
            0);
  const fs::path plan = temp("compare_wide_plan.json");
  ASSERT_EQ(run("plan " + kSmall + " -K 2 -M 4 -o " + plan.string()).status, 0);
  const CliResult r = run("compare " + plan.string() + " --profile " + profile.string() +
                          " --steps 1000 --warmup 1");  // refused before a step runs
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(profile.string() + ": layers: has no measurement for layer 'embed'"),
            std::string::npos)
      << r.err;
  fs::remove(profile);
  fs::remove(plan);
}

TEST(CompareCli, RefusesWarmUpThatLeavesNothingToMeasure) {
  const fs::path plan = temp("compare_warmup_plan.json");
  ASSERT_EQ(run("plan " + kSmall + " -K 2 -o " + plan.string()).status, 0);
  const CliResult r = run("compare " + plan.string() + " --steps 2 --warmup 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--warmup 2 leaves none of the 2 steps to measure"), std::string::npos)
      << r.err;
  fs::remove(plan);
}

}  // namespace
