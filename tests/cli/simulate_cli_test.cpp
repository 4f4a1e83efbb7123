// `pipescope simulate` as a user runs it: the contract's JSON keys, the trace
// file, and one-line errors with a non-zero exit status.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

// A stage's layer range as wide as "8002-16001 (8000)" still stands apart
// from its stage number: the columns grow with their widest cell.
TEST(SimulateCli, StageTableColumnsNeverRunTogether) {
  const CliResult r = run("simulate " + kDemo + " --set model.layers=16000 -K 2 --framework ideal");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::size_t header = r.out.find("stage ");
  ASSERT_NE(header, std::string::npos) << r.out;
  const std::size_t row = r.out.find('\n', header) + 1;
  const std::size_t next = r.out.find('\n', row) + 1;
  EXPECT_EQ(r.out.substr(row, r.out.find('\n', row) - row).find("    0     0-8001 (8002)"), 0u)
      << r.out;
  EXPECT_EQ(r.out.substr(next, r.out.find('\n', next) - next).find("    1 8002-16001 (8000)"), 0u)
      << r.out;
}

TEST(SimulateCli, JsonHasExactlyTheContractKeys) {
  const CliResult r = run("simulate " + kDemo + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(keys(j), (std::set<std::string>{"K",
                                            "T",
                                            "sequence_parallel",
                                            "E",
                                            "C",
                                            "zero",
                                            "M",
                                            "schedule",
                                            "chunks",
                                            "remat",
                                            "remat_mode",
                                            "checkpoint",
                                            "micro_batch_size",
                                            "step_time_s",
                                            "throughput_samples_per_s",
                                            "bubble_fraction",
                                            "mfu",
                                            "tensor_allreduce_s",
                                            "fits",
                                            "devices",
                                            "stages"}));
  ASSERT_EQ(j["devices"].size(), j["K"].get<std::size_t>());
  EXPECT_EQ(
      keys(j["devices"][0]),
      (std::set<std::string>{"peak_memory_bytes", "memory_capacity_bytes", "weights_bytes",
                             "gradients_bytes", "optimizer_bytes", "activations_bytes", "busy_s"}));
  EXPECT_EQ(keys(j["stages"][0]),
            (std::set<std::string>{"device", "first_layer", "last_layer", "fwd_s", "bwd_s",
                                   "recompute_s", "tp_fwd_s", "tp_bwd_s", "ep_fwd_s", "ep_bwd_s",
                                   "cp_fwd_s", "cp_bwd_s", "host_wait_fwd_s", "host_wait_bwd_s"}));
  EXPECT_EQ(j["T"], 1);
  EXPECT_EQ(j["E"], 1);
  EXPECT_EQ(j["C"], 1);
  EXPECT_EQ(j["tensor_allreduce_s"], 0.0);
  EXPECT_EQ(j["schedule"], "gpipe");
  EXPECT_GT(j["step_time_s"].get<double>(), 0.0);
  EXPECT_EQ(j["stages"][0]["first_layer"], 0);
}

TEST(SimulateCli, OptionsOverrideTheScenario) {
  const CliResult r = run("simulate " + kDemo + " -K 2 -M 4 --remat off --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["K"], 2);
  EXPECT_EQ(j["M"], 4);
  EXPECT_EQ(j["remat"], false);
  EXPECT_EQ(j["stages"][1]["recompute_s"], 0.0);
}

TEST(SimulateCli, RematExceptLastFromTheOptionAndFromSet) {
  const CliResult r = run("simulate " + kDemo + " -K 2 -M 4 --remat except-last --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["remat"], true);
  EXPECT_EQ(j["remat_mode"], "except-last");
  EXPECT_GT(j["stages"][1]["recompute_s"].get<double>(), 0.0);
  const CliResult set = run("simulate " + kDemo + " -K 2 -M 4 --set training.remat=except-last");
  ASSERT_EQ(set.status, 0) << set.err;
  EXPECT_NE(set.out.find("remat except-last"), std::string::npos) << set.out;
  // One recompute fewer per stage than remat on: a shorter step.
  const CliResult on = run("simulate " + kDemo + " -K 2 -M 4 --remat on --json");
  ASSERT_EQ(on.status, 0) << on.err;
  EXPECT_LT(j["step_time_s"].get<double>(),
            nlohmann::json::parse(on.out)["step_time_s"].get<double>());
}

// --checkpoint layer keeps every layer's input and rebuilds one layer at a
// time: less memory at the same step; it overrides the file's unit, and a
// unit it does not know is refused.
TEST(SimulateCli, CheckpointUnitFromTheOption) {
  const CliResult stage = run("simulate " + kDemo + " -K 2 -M 8 --remat on --json");
  const CliResult layer =
      run("simulate " + kDemo + " -K 2 -M 8 --remat on --checkpoint layer --json");
  ASSERT_EQ(stage.status, 0) << stage.err;
  ASSERT_EQ(layer.status, 0) << layer.err;
  const nlohmann::json s = nlohmann::json::parse(stage.out);
  const nlohmann::json l = nlohmann::json::parse(layer.out);
  EXPECT_EQ(s["checkpoint"], "stage");
  EXPECT_EQ(l["checkpoint"], "layer");
  EXPECT_EQ(l["step_time_s"], s["step_time_s"]);
  EXPECT_LT(l["devices"][0]["peak_memory_bytes"].get<double>(),
            s["devices"][0]["peak_memory_bytes"].get<double>());
  const CliResult back = run("simulate " + kDemo +
                             " -K 2 -M 8 --remat on --set training.checkpoint=layer "
                             "--checkpoint stage --json");
  ASSERT_EQ(back.status, 0) << back.err;
  EXPECT_EQ(nlohmann::json::parse(back.out)["checkpoint"], "stage");
  const CliResult summary = run("simulate " + kDemo + " -K 2 --remat on --checkpoint layer");
  EXPECT_NE(summary.out.find("remat on (layer by layer)"), std::string::npos) << summary.out;
  const CliResult bad = run("simulate " + kDemo + " -K 2 --checkpoint block");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--checkpoint: block not in {stage,layer}"), std::string::npos) << bad.err;
}

TEST(SimulateCli, DataParallelReplicasAllReduceTheirGradients) {
  const CliResult r = run("simulate " + kDemo + " -K 2 -D 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("K=2 x D=2 replicas (ring all-reduce of each stage's gradients)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("gradient all-reduce"), std::string::npos) << r.out;
  // The all-reduce makes a step longer than the same replica's alone.
  const CliResult d = run("simulate " + kDemo + " -K 2 -D 2 --json");
  const CliResult alone = run(
      "simulate " + kDemo + " -K 2 --set training.global_batch=16 --set cluster.devices=2 --json");
  ASSERT_EQ(d.status, 0) << d.err;
  ASSERT_EQ(alone.status, 0) << alone.err;
  EXPECT_GT(nlohmann::json::parse(d.out)["step_time_s"].get<double>(),
            nlohmann::json::parse(alone.out)["step_time_s"].get<double>());
  const CliResult big = run("simulate " + kDemo + " -K 4 -D 2");
  EXPECT_EQ(big.status, 1);
  EXPECT_NE(big.err.find("demo.json: cluster.devices: --data-parallel 2 replicas of K=4 devices "
                         "need K x D = 8 devices; the cluster has 4"),
            std::string::npos)
      << big.err;
}

// -E 4 with -D 4 on the demo made a mixture of 8 experts: each device holds
// 2, and every mixture block's ops end in all-to-alls; an E the experts or
// the replicas do not take is refused naming the flag.
TEST(SimulateCli, ExpertParallelSpreadsTheExperts) {
  const std::string moe = "simulate " + kDemo +
                          " --set model.layers=4 --set model.experts=8"
                          " --set model.experts_per_token=2 ";
  const CliResult text = run(moe + "-D 4 -E 4");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("Experts    E=4 replicas share the 8 experts, 2 a device"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(", expert-parallel all-to-alls "), std::string::npos) << text.out;
  const CliResult json = run(moe + "-D 4 -E 4 --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["E"], 4);
  EXPECT_GT(j["stages"][0]["ep_fwd_s"].get<double>(), 0.0);
  EXPECT_EQ(j["stages"][0]["ep_bwd_s"], j["stages"][0]["ep_fwd_s"]);
  const CliResult whole = run(moe + "-D 4 --json");
  ASSERT_EQ(whole.status, 0) << whole.err;
  const nlohmann::json w = nlohmann::json::parse(whole.out);
  EXPECT_EQ(w["stages"][0]["ep_fwd_s"], 0.0);
  EXPECT_LT(j["devices"][0]["weights_bytes"].get<double>(),
            w["devices"][0]["weights_bytes"].get<double>());

  const CliResult bad = run(moe + "-D 4 -E 3");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "pipescope: error: " + kDemo +
                         ": -E 3: 3 expert-parallel devices do not divide the 8 experts\n");
  const CliResult alone = run(moe + "-E 4");
  EXPECT_EQ(alone.status, 1);
  EXPECT_NE(alone.err.find("give --data-parallel a multiple of E"), std::string::npos) << alone.err;
  const CliResult odd = run(moe + "-D 2 -E 4");
  EXPECT_EQ(odd.status, 1);
  EXPECT_NE(odd.err.find("expert_parallel 4 does not divide the 2 data-parallel replicas"),
            std::string::npos)
      << odd.err;
}

// -T 2 on the demo's 4 devices: 2 stages of 2 devices each, whose ops end in
// all-reduces on a tensor lane of the trace; a -T the model cannot take names
// the flag; the executor refuses such a plan.
TEST(SimulateCli, TensorParallelGroupsTheDevices) {
  const fs::path trace = fs::temp_directory_path() / "pipescope_cli_tp_trace.json";
  fs::remove(trace);
  // No framework: the backward's all-reduces are not hidden behind its weight
  // gradients (megatron-core's, the default on GPUs, are: tp_backward_overlap).
  const CliResult r =
      run("simulate " + kDemo + " -T 2 -M 2 --framework ideal --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Tensor     T=2 devices split every layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Schedule   gpipe, K=2,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor-parallel all-reduces"), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(slurp(trace));
  int tensor = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "tensor-allreduce") ++tensor;
  }
  // F, R and B of 2 micro-batches on each of the 2 stages.
  EXPECT_EQ(tensor, 2 * 3 * 2);
  fs::remove(trace);

  const CliResult json = run("simulate " + kDemo + " -T 2 --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["T"], 2);
  EXPECT_EQ(j["K"], 2);
  EXPECT_GT(j["tensor_allreduce_s"].get<double>(), 0.0);
  EXPECT_GT(j["stages"][0]["tp_fwd_s"].get<double>(), 0.0);

  // 4 devices as 2 groups of 2: one stage, D = 2 replicas of it.
  const CliResult dp = run("simulate " + kDemo + " -T 2 -D 2 --json");
  ASSERT_EQ(dp.status, 0) << dp.err;
  const nlohmann::json d = nlohmann::json::parse(dp.out);
  EXPECT_EQ(d["K"], 1);
  EXPECT_EQ(d["T"], 2);
  const CliResult too_many = run("simulate " + kDemo + " -T 2 -D 4");
  EXPECT_EQ(too_many.status, 1);
  EXPECT_NE(too_many.err.find("does not divide the cluster's 2 groups of T=2 devices"),
            std::string::npos)
      << too_many.err;

  const CliResult bad = run("simulate " + kDemo + " -T 3");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "pipescope: error: " + kDemo +
                         ": -T 3: 3 tensor-parallel devices do not divide heads 16\n");

  const fs::path plan = fs::temp_directory_path() / "pipescope_cli_tp_plan.json";
  fs::remove(plan);
  const CliResult planned =
      run("plan " + kDemo + " -T 2 -K 2 -M 8 --schedule 1f1b -o " + plan.string());
  ASSERT_EQ(planned.status, 0) << planned.err;
  const CliResult again = run("simulate " + kDemo + " -T 2 --plan " + plan.string());
  EXPECT_EQ(again.status, 1);  // --plan fixes T
  EXPECT_NE(again.err.find("--plan fixes K, D, T, E, C, M"), std::string::npos) << again.err;
  const CliResult replay =
      run("simulate " + kDemo + " --set training.tensor_parallel=2 --plan " + plan.string());
  EXPECT_EQ(replay.status, 0) << replay.err;
  ASSERT_EQ(replay.status, 0) << replay.err;
  // The plan fixes T as it fixes K: the scenario's layers are split as the plan's.
  const CliResult same = run("simulate " + kDemo + " --plan " + plan.string());
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_NE(same.out.find("Tensor     T=2 devices split every layer"), std::string::npos)
      << same.out;
  EXPECT_EQ(same.out.substr(same.out.find("Step time")),
            replay.out.substr(replay.out.find("Step time")));
  const CliResult exported = run("export " + plan.string() + " --to megatron --scenario " + kDemo);
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_NE(exported.out.find("--tensor-model-parallel-size 2"), std::string::npos) << exported.out;
  // The cpu backend runs tensor ranks as threads (exec/compute/tensor_layers.h); a GPU
  // backend refuses the split by its field before it looks for GPUs.
  const CliResult executed = run("run " + plan.string() + " --backend cuda --steps 1");
  EXPECT_EQ(executed.status, 1);
  EXPECT_NE(executed.err.find(": T: --backend cuda runs whole layers on each device"),
            std::string::npos)
      << executed.err;
  fs::remove(plan);
}

// What --plan fixes cannot be changed beside it, by a flag or by --set to
// another value; what the plan does not record must agree with it.
TEST(SimulateCli, APlanRefusesWhatItWouldIgnore) {
  const fs::path plan = fs::temp_directory_path() / "pipescope_cli_fixed_plan.json";
  fs::remove(plan);
  ASSERT_EQ(run("plan " + kDemo + " -K 2 -M 4 --schedule 1f1b -o " + plan.string()).status, 0);
  const std::string with = "simulate " + kDemo + " --plan " + plan.string();
  for (const char* extra : {" --checkpoint layer", " --partition uniform"}) {
    const CliResult r = run(with + extra);
    EXPECT_EQ(r.status, 1) << extra;
    EXPECT_NE(r.err.find("--plan fixes K, D, T, E, C, M"), std::string::npos) << r.err;
  }
  for (const char* set :
       {"training.micro_batches=8", "training.schedule=gpipe", "training.remat=always",
        "training.balance=[13,13]", "training.expert_parallel=2"}) {
    const CliResult r = run(with + " --set " + set);
    EXPECT_EQ(r.status, 1) << set;
    EXPECT_EQ(r.err,
              "pipescope: error: --set " + std::string(set) + ": --plan " + plan.string() +
                  " fixes " + std::string(set).substr(0, std::string(set).find('=')) +
                  " (K, D, T, E, C, M, ZeRO, the schedule, its chunks, remat and the cut are "
                  "the plan's); drop it, or plan again\n");
  }
  // The plan's own values may be restated.
  EXPECT_EQ(run(with + " --set training.micro_batches=4 --set training.schedule=1f1b").status, 0);
  // A plan edited to another optimizer than its scenario's is refused, naming
  // the field (simulate and export would otherwise cost the scenario's).
  nlohmann::json doc = nlohmann::json::parse(slurp(plan));
  ASSERT_EQ(doc["optimizer"], "adam");
  doc["optimizer"] = "sgd";
  {
    std::ofstream out(plan);
    out << doc.dump(2);
  }
  const CliResult sgd = run(with);
  EXPECT_EQ(sgd.status, 1);
  EXPECT_NE(sgd.err.find(plan.string() + ": training.optimizer: this plan was made for optimizer "
                                         "sgd, the scenario's is adam (--set "
                                         "training.optimizer=sgd runs the plan's)"),
            std::string::npos)
      << sgd.err;
  const CliResult exported = run("export " + plan.string() + " --to megatron --scenario " + kDemo);
  EXPECT_EQ(exported.status, 1);
  EXPECT_NE(exported.err.find("training.optimizer"), std::string::npos) << exported.err;
  EXPECT_EQ(run(with + " --set training.optimizer=sgd").status, 0);
  fs::remove(plan);
}

TEST(SimulateCli, JsonPlacesEachStageOnItsDevice) {
  // zb-v runs stages 0-3 on devices 0 1 1 0 (a V), not stage s on s mod K.
  const CliResult r = run("simulate " + kDemo + " -K 2 --schedule zb-v --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::vector<int> devices;
  for (const nlohmann::json& s : j["stages"]) devices.push_back(s["device"].get<int>());
  EXPECT_EQ(devices, (std::vector<int>{0, 1, 1, 0}));
}

TEST(SimulateCli, SummaryNamesBlockingAndSplitSends) {
  const std::string plain = "simulate " + kDemo + " -T 2 -K 2 --framework ideal";
  const CliResult overlapped = run(plain);
  ASSERT_EQ(overlapped.status, 0) << overlapped.err;
  EXPECT_EQ(overlapped.out.find("Sends"), std::string::npos) << overlapped.out;
  const CliResult blocking =
      run(plain + " --set cluster.p2p=blocking --set cluster.p2p_split=true");
  ASSERT_EQ(blocking.status, 0) << blocking.err;
  EXPECT_NE(blocking.out.find("Sends      blocking: a stage computes nothing until its send has "
                              "arrived; each device sends 1/T of a cut, the next group "
                              "all-gathers it\n"),
            std::string::npos)
      << blocking.out;
}

TEST(SimulateCli, SetOverridesAField) {
  const CliResult r = run("simulate " + kDemo + " --set training.global_batch=64 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["micro_batch_size"], 64 / j["M"].get<int>());
}

// -M, --schedule, --chunks and --remat are fields of the scenario, written in
// after --set and checked once with it: the file's 8 micro-batches do not stand
// in the way of a batch of 4 that -M 2 divides, and what is wrong names the flag.
TEST(SimulateCli, FlagsAreCheckedAsTheScenarioFieldsTheyReplace) {
  const std::string small_batch = " --set training.global_batch=4 -K 2 -M 2";
  for (const std::string command : {"simulate", "plan"}) {
    const CliResult r = run(command + " " + kDemo + small_batch + " --json");
    ASSERT_EQ(r.status, 0) << command << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(command == "plan" ? j["plans"][0]["M"] : j["M"], 2) << command;
  }
  const CliResult sweep =
      run("sweep " + kDemo + " --set training.global_batch=2 -K 2 -M 1,2 --json");
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  EXPECT_EQ(nlohmann::json::parse(sweep.out).size(), 2u);
  const CliResult capacity = run("capacity " + kDemo + small_batch + " --json");
  ASSERT_EQ(capacity.status, 0) << capacity.err;
  EXPECT_EQ(nlohmann::json::parse(capacity.out)["fits"], true);

  for (const std::string command : {"simulate", "plan", "capacity -K 2"}) {
    const CliResult bad = run(command + " " + kDemo + " -M 3");
    EXPECT_EQ(bad.status, 1) << command;
    EXPECT_EQ(bad.err, "pipescope: error: " + kDemo + ": -M 3: 3 does not divide global_batch 32\n")
        << command;
  }
  const CliResult chunks = run("simulate " + kDemo + " --chunks 2");
  EXPECT_EQ(chunks.status, 1);
  EXPECT_EQ(chunks.err, "pipescope: error: " + kDemo +
                            ": --chunks 2: 2 chunks need a schedule that takes chunks: "
                            "interleaved-1f1b, looped-bfs, zb-v, interleaved-zb, dualpipe-v\n");
  // A one-chunk schedule replaces the file's interleaving, chunk count with it.
  const CliResult one_chunk =
      run("simulate " + kDemo +
          " --set training.schedule=interleaved-1f1b --set training.chunks=2 --schedule 1f1b -K 2 "
          "--json");
  ASSERT_EQ(one_chunk.status, 0) << one_chunk.err;
  const nlohmann::json j = nlohmann::json::parse(one_chunk.out);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["chunks"], 1);
}

TEST(SimulateCli, TableNamesEveryStageAndTheTotals) {
  const CliResult r = run("simulate " + kDemo + " -K 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Step time"), std::string::npos);
  EXPECT_NE(r.out.find("Bubble"), std::string::npos);
  EXPECT_NE(r.out.find("peak memory / capacity"), std::string::npos);
  EXPECT_NE(r.out.find("K=2"), std::string::npos);
}

// Up to 16 devices the bubble line lists each; beyond, their range and median.
TEST(SimulateCli, BubbleLineListsFewDevicesAndSummarisesMany) {
  const CliResult few = run("simulate " + kDemo + " -K 2");
  ASSERT_EQ(few.status, 0) << few.err;
  EXPECT_TRUE(std::regex_search(few.out, std::regex(R"(\(per device: [0-9.]+ % [0-9.]+ %\)\n)")))
      << few.out;
  const CliResult many = run("simulate " + std::string(PIPESCOPE_SOURCE_DIR) +
                             "/scenarios/gpt3-175b-1024.json -K 32 -M 64 --partition uniform");
  ASSERT_EQ(many.status, 0) << many.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      many.out, m,
      std::regex(
          R"(Bubble +[0-9.]+ % \(per device: ([0-9.]+) % to ([0-9.]+) %, median ([0-9.]+) %\)\n)")))
      << many.out;
  const double low = std::stod(m[1].str());
  const double high = std::stod(m[2].str());
  const double median = std::stod(m[3].str());
  EXPECT_LT(low, high);  // the first and last stages idle differently
  EXPECT_LE(low, median);
  EXPECT_LE(median, high);
}

TEST(SimulateCli, WritesATraceOfEveryOp) {
  const fs::path trace = fs::temp_directory_path() / "pipescope_cli_trace.json";
  fs::remove(trace);
  const CliResult r =
      run("simulate " + kDemo + " -K 4 -M 8 --remat on --json --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::accept(r.out)) << "stdout must stay pure JSON";
  EXPECT_NE(r.err.find("Trace written to"), std::string::npos);
  const nlohmann::json doc = nlohmann::json::parse(slurp(trace));
  int compute = 0, sends = 0, recvs = 0, processes = 0, counters = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
    if (e["ph"] == "C") ++counters;
    if (e["ph"] != "X") continue;
    const int tid = e["tid"].get<int>() % 3;
    (tid == 0 ? compute : tid == 1 ? sends : recvs) += 1;
  }
  EXPECT_EQ(processes, 4);
  EXPECT_EQ(compute, 4 * (3 * 8 + 1));  // F, R, B per micro-batch and the optimizer step
  EXPECT_EQ(sends, 2 * 3 * 8);          // activations and gradients over 3 boundaries
  EXPECT_EQ(recvs, 2 * 3 * 8);
  EXPECT_GT(counters, 4);
  fs::remove(trace);
}

TEST(SimulateCli, UnwritableTraceFailsBeforePrintingAResult) {
  const CliResult r = run("simulate " + kDemo + " --json --trace /no/such/dir/t.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  // One line, naming the output (sim/base/file_io.h words the reason).
  EXPECT_EQ(r.err.rfind("pipescope: error: /no/such/dir/t.json: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(SimulateCli, DefaultKBeyondTheLayersNamesTheScenarioField) {
  // With a layout flag given (-M) the default K stands, and its error.
  const CliResult r =
      run("simulate " + kDemo + " --set model.layers=1 --set cluster.devices=8 -M 8");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: " + kDemo +
                       ": cluster.devices: K=8 (the cluster's devices) is more stages than the "
                       "model's 3 layers; choose a smaller K with -K\n");
  EXPECT_EQ(
      run("simulate " + kDemo + " --set model.layers=1 --set cluster.devices=8 -K 3 --json").status,
      0);
}

// A scenario that fixes no layout and cannot run at the default (K = its
// devices) or does not fit there runs at the planner's best plan, and says so.
TEST(SimulateCli, WithoutALayoutTheDefaultGivesWayToThePlannersBest) {
  // The demo on 32 devices: its default, a stage per device, cannot run.
  const std::string wide = kDemo + " --set cluster.devices=32";
  const CliResult r = run("simulate " + wide);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Layout     the planner's best, K=", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(": the scenario fixes no layout, and its default (K = 32, D = 1) cannot "
                       "run: K=32 (the cluster's devices) is more stages than the model's 26 "
                       "layers"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("partition the planner's"), std::string::npos) << r.out;
  // The planner's best as `plan` ranks it first: the same step.
  const CliResult planned = run("plan " + wide + " --top 1 --json");
  ASSERT_EQ(planned.status, 0) << planned.err;
  const nlohmann::json best = nlohmann::json::parse(planned.out)["plans"][0];
  const CliResult json = run("simulate " + wide + " --json");
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["K"], best["K"]);
  EXPECT_NEAR(j["step_time_s"].get<double>(), best["step_time_s"].get<double>(),
              1e-9 * best["step_time_s"].get<double>());
  EXPECT_NE(j["layout"].get<std::string>().find("the planner's best"), std::string::npos);
  // One that does not fit at the default: the demo at micro-batches of 512.
  const CliResult small = run("simulate " + kDemo + " --set training.global_batch=4096");
  ASSERT_EQ(small.status, 0) << small.err;
  EXPECT_NE(small.out.find("its default (K = 4, D = 1) does not fit in memory"), std::string::npos)
      << small.out;
  // Where it fits, nothing changes; nor where a --set fixes part of the layout.
  EXPECT_EQ(run("simulate " + kDemo).out.find("Layout"), std::string::npos);
  const CliResult fixed =
      run("simulate " + kDemo + " --set training.global_batch=4096 --set training.remat=true");
  ASSERT_EQ(fixed.status, 0) << fixed.err;
  EXPECT_EQ(fixed.out.find("Layout"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("DOES NOT FIT"), std::string::npos) << fixed.out;
}

TEST(SimulateCli, MissingFileIsOneLineNamingIt) {
  const CliResult r = run("simulate /no/such/scenario.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: /no/such/scenario.json: cannot open file\n");
  EXPECT_EQ(r.out, "");
}

TEST(SimulateCli, ImpossibleKIsAClearError) {
  const CliResult r = run("simulate " + kDemo + " -K 64");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("K=64 is more stages than"), std::string::npos) << r.err;
}

TEST(SimulateCli, BadSetNamesThePath) {
  const CliResult r = run("simulate " + kDemo + " --set training.micro_batches=3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("training.micro_batches"), std::string::npos) << r.err;
}

TEST(SimulateCli, UsageErrorsExitTwo) {
  EXPECT_EQ(run("simulate").status, 2);
  EXPECT_EQ(run("simulate " + kDemo + " --remat maybe").status, 2);
  EXPECT_EQ(run("frobnicate").status, 2);
}

TEST(SimulateCli, HelpDescribesTheOptions) {
  const CliResult r = run("simulate --help");
  EXPECT_EQ(r.status, 0);
  for (const char* opt : {"--stages", "--micro-batches", "--remat", "--set", "--trace", "--json"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
  }
}

}  // namespace

namespace {

// A schedule CSV that PyTorch wrote with its communication, FSDP and
// gradient-reduction actions simulates to the same step as its compute-only
// form, and the summary says what the other actions meant.
TEST(SimulateCli, PyTorchCsvWithCommunicationSimulatesLikeItsComputeAndSaysSo) {
  const std::string dir = std::string(PIPESCOPE_SOURCE_DIR) + "/tests/data/pytorch-2.15/";
  const CliResult comms =
      run("simulate " + kDemo + " --schedule-file " + dir + "ScheduleInterleaved1F1B-comms.csv");
  ASSERT_EQ(comms.status, 0) << comms.err;
  EXPECT_NE(comms.out.find("\nActions    "), std::string::npos) << comms.out;
  EXPECT_NE(comms.out.find("16 UNSHARD/RESHARD actions cost nothing"), std::string::npos)
      << comms.out;
  EXPECT_NE(comms.out.find("8 REDUCE_GRAD actions follow their stage's last gradient"),
            std::string::npos)
      << comms.out;
  const CliResult compute =
      run("simulate " + kDemo + " --json --schedule-file " + dir + "ScheduleInterleaved1F1B.csv");
  const CliResult comms_json = run("simulate " + kDemo + " --json --schedule-file " + dir +
                                   "ScheduleInterleaved1F1B-comms.csv");
  ASSERT_EQ(compute.status, 0) << compute.err;
  ASSERT_EQ(comms_json.status, 0) << comms_json.err;
  const auto a = nlohmann::json::parse(compute.out), b = nlohmann::json::parse(comms_json.out);
  EXPECT_GT(a.at("step_time_s").get<double>(), 0.0);
  EXPECT_EQ(a.at("step_time_s"), b.at("step_time_s"));
  EXPECT_EQ(compute.out.find("Actions"), std::string::npos);
}

}  // namespace
