// training.framework in scenarios: the default of each device, profiles by
// name and as objects, the fields they give the model and the cluster, what
// the gradients keep, and bad input.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"
#include "sim/engine/zero.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;
using testing::docs::error_of;
using testing::docs::good_doc;

TEST(FrameworkScenario, DefaultsToMegatronCoreOnGpusAndIdealElsewhere) {
  json doc = good_doc();  // a100-80g: costed kernel by kernel
  EXPECT_EQ(parse_scenario(doc, "a.json").training.framework.name, "megatron-core");
  doc["cluster"] = {{"preset", "tpu-v3"}, {"devices", 2}};
  EXPECT_EQ(parse_scenario(doc, "t.json").training.framework.name, "ideal");
  doc = good_doc();
  doc["cluster"]["cost_model"] = "analytic";
  EXPECT_EQ(parse_scenario(doc, "a.json").training.framework.name, "ideal");
}

TEST(FrameworkScenario, AProfileGivesWhatTheModelAndClusterLeaveOut) {
  json doc = good_doc();
  doc["training"]["framework"] = "megatron-lm-2022";
  Scenario s = parse_scenario(doc, "a.json");
  EXPECT_FALSE(s.model.transformer->fused_attention);
  EXPECT_EQ(s.cluster.p2p, P2pMode::kBlocking);
  EXPECT_TRUE(s.cluster.p2p_split);
  EXPECT_EQ(s.cluster.rank_order, RankOrder::kTpDpPp);
  // What the scenario states wins.
  doc["model"]["attention"] = "fused";
  doc["model"]["norm"] = "unfused";
  doc["cluster"]["p2p_split"] = false;
  s = parse_scenario(doc, "a.json");
  EXPECT_TRUE(s.model.transformer->fused_attention);
  EXPECT_FALSE(s.model.transformer->fused_norm);
  EXPECT_FALSE(s.cluster.p2p_split);
  doc["training"]["framework"] = "torchtitan";
  doc["model"].erase("norm");
  s = parse_scenario(doc, "a.json");
  EXPECT_FALSE(s.model.transformer->fused_norm);
  EXPECT_EQ(s.model.transformer->cross_entropy, CrossEntropy::kFp32Fused);
}

// model.fp8_stash: Transformer Engine's profiles keep FP8 copies of the GEMM
// inputs, torchtitan's torchao keeps them in dtype; the model's key wins and
// a plan's model carries it; without model.fp8 the key is refused.
TEST(FrameworkScenario, Fp8StashFollowsTheProfileUnlessTheModelSays) {
  json doc = good_doc();
  doc["cluster"]["preset"] = "h100-sxm";
  doc["model"]["dtype"] = "bf16";
  doc["model"]["fp8"] = true;
  const Scenario te = parse_scenario(doc, "a.json");
  EXPECT_TRUE(te.model.transformer->fp8_stash);
  doc["training"]["framework"] = "torchtitan";
  const Scenario ao = parse_scenario(doc, "a.json");
  EXPECT_FALSE(ao.model.transformer->fp8_stash);
  EXPECT_LT(te.model.layers[1].stash_bytes, ao.model.layers[1].stash_bytes);
  doc["model"]["fp8_stash"] = "fp8";
  const Scenario given = parse_scenario(doc, "a.json");
  EXPECT_TRUE(given.model.transformer->fp8_stash);
  EXPECT_EQ(given.model.layers[1].stash_bytes, te.model.layers[1].stash_bytes);
  json again = doc;
  again["model"] = model_spec_json(ao.model);
  EXPECT_EQ(again["model"]["fp8_stash"], "dtype");
  again["training"]["framework"] = "megatron-core";
  EXPECT_FALSE(parse_scenario(again, "a.json").model.transformer->fp8_stash);
  doc["model"]["fp8_stash"] = "bf16";
  ScenarioError e = error_of(doc);
  EXPECT_EQ(e.json_path(), "model.fp8_stash");
  EXPECT_NE(std::string(e.what()).find("(expected one of: fp8, dtype)"), std::string::npos)
      << e.what();
  doc["model"]["fp8_stash"] = "fp8";
  doc["model"]["fp8"] = false;
  e = error_of(doc);
  EXPECT_EQ(e.json_path(), "model.fp8_stash");
  EXPECT_NE(std::string(e.what()).find("give model.fp8 true too"), std::string::npos) << e.what();
}

// An object names a profile and overrides its fields.
TEST(FrameworkScenario, AnObjectOverridesTheProfilesFields) {
  json doc = good_doc();
  doc["training"]["framework"] = {
      {"profile", "megatron-core"}, {"overlap_grad_reduce", true}, {"host_launch_s", 5e-6}};
  const Framework f = parse_scenario(doc, "a.json").training.framework;
  EXPECT_EQ(f.name, "megatron-core");
  EXPECT_TRUE(f.overlap_grad_reduce);
  EXPECT_DOUBLE_EQ(f.host_launch_s, 5e-6);
  EXPECT_TRUE(f.fp32_grads);                                      // the profile's
  doc["training"]["framework"] = {{"tp_forward_overlap", true}};  // the default profile
  EXPECT_TRUE(parse_scenario(doc, "a.json").training.framework.tp_forward_overlap);
  EXPECT_EQ(parse_scenario(doc, "a.json").training.framework.name, "megatron-core");
}

// launch_blocking (CUDA_LAUNCH_BLOCKING=1) leaves nothing overlapped: the
// profile's overlaps are dropped and its exchanges block; an overlap the
// object or the cluster asks for beside it is refused.
TEST(FrameworkScenario, BlockingLaunchesOverlapNothing) {
  json doc = good_doc();
  doc["training"]["framework"] = {{"profile", "nemo"}, {"launch_blocking", true}};
  Scenario s = parse_scenario(doc, "a.json");
  const Framework& f = s.training.framework;
  EXPECT_TRUE(f.launch_blocking);
  EXPECT_FALSE(f.tp_forward_overlap || f.tp_backward_overlap || f.overlap_grad_reduce ||
               f.overlap_param_gather);
  EXPECT_EQ(s.cluster.p2p, P2pMode::kBlocking);
  EXPECT_EQ(s.cluster.p2p_interleaved, P2pMode::kBlocking);
  EXPECT_TRUE(find_framework("nemo")->tp_forward_overlap);  // the profile itself keeps them
  doc["training"]["framework"]["overlap_grad_reduce"] = true;
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: training.framework.overlap_grad_reduce: nothing overlaps where every "
               "launch blocks (launch_blocking true): expected false");
  doc["training"]["framework"]["overlap_grad_reduce"] = false;
  doc["cluster"]["p2p"] = "overlapped";
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: cluster.p2p: stages' exchanges block where every launch blocks "
               "(training.framework.launch_blocking true): expected \"blocking\", got "
               "\"overlapped\"");
  doc["cluster"]["p2p"] = "blocking";
  EXPECT_EQ(parse_scenario(doc, "a.json").cluster.p2p, P2pMode::kBlocking);
}

// bf16 under fp32 gradients keeps 4-byte gradients (18 bytes with Adam),
// fp16 an fp32 copy for the optimizer (20); a given bytes_per_param stays.
TEST(FrameworkScenario, Fp32GradientsAreCountedPerParameter) {
  json doc = good_doc();
  doc["model"]["dtype"] = "bf16";
  Scenario s = parse_scenario(doc, "a.json");
  EXPECT_DOUBLE_EQ(s.training.bytes_per_param, 18.0);
  EXPECT_EQ(s.training.gradient_bytes, 4);
  EXPECT_EQ(reduced_gradient_bytes(s), 4);
  EXPECT_DOUBLE_EQ(param_bytes(18.0, DType::kBf16, 4).gradients, 4.0);
  // ZeRO-1 over 4: 2 + 4 + 12 / 4 (megatron-core's 6 + 12 / d).
  EXPECT_DOUBLE_EQ(zero_bytes_per_param(18.0, DType::kBf16, 1, 4, 4), 9.0);
  doc["model"]["dtype"] = "fp16";
  s = parse_scenario(doc, "a.json");
  EXPECT_DOUBLE_EQ(s.training.bytes_per_param, 20.0);
  EXPECT_EQ(s.training.gradient_bytes, 2);
  EXPECT_EQ(reduced_gradient_bytes(s), 2);  // fp16 runs reduce fp16 gradients
  doc["training"]["framework"] = "deepspeed";
  doc["model"]["dtype"] = "bf16";
  s = parse_scenario(doc, "a.json");
  EXPECT_EQ(s.training.gradient_bytes, 4);
  EXPECT_EQ(reduced_gradient_bytes(s), 2);  // cast to bf16 for the reduction
  doc["training"]["framework"] = "nemo";
  EXPECT_DOUBLE_EQ(parse_scenario(doc, "a.json").training.bytes_per_param, 16.0);
  doc["training"]["framework"] = "megatron-core";
  doc["training"].erase("optimizer");
  doc["training"]["bytes_per_param"] = 12.0;
  EXPECT_DOUBLE_EQ(parse_scenario(doc, "a.json").training.bytes_per_param, 12.0);
}

TEST(FrameworkScenario, BadFrameworksAreNamed) {
  json doc = good_doc();
  doc["training"]["framework"] = "megatron";
  EXPECT_STREQ(
      error_of(doc).what(),
      "bad.json: training.framework: unknown framework 'megatron' (expected one of: "
      "megatron-core, nemo, megatron-lm-2022, megatron-lm-2021, deepspeed, torchtitan, torchgpipe, "
      "ideal)");
  doc["training"]["framework"] = 3;
  EXPECT_NE(std::string(error_of(doc).what()).find("training.framework: expected a profile"),
            std::string::npos);
  doc["training"]["framework"] = {{"profile", "x"}};
  EXPECT_NE(std::string(error_of(doc).what()).find("training.framework.profile: unknown"),
            std::string::npos);
  doc["training"]["framework"] = {{"host_launch_s", 1.0}};
  EXPECT_STREQ(error_of(doc).what(),
               "bad.json: training.framework.host_launch_s: expected 0 to 0.001, got 1.0");
  doc["training"]["framework"] = {{"overlap", true}};
  EXPECT_NE(std::string(error_of(doc).what()).find("unknown key 'overlap'"), std::string::npos);
  doc["training"]["framework"] = {{"fp32_grads", "yes"}};
  EXPECT_NE(std::string(error_of(doc).what()).find("training.framework.fp32_grads"),
            std::string::npos);
  doc["training"].erase("framework");
  doc["model"]["norm"] = "fast";
  EXPECT_NE(std::string(error_of(doc).what()).find("model.norm: unknown norm 'fast'"),
            std::string::npos);
}

}  // namespace
}  // namespace pipescope
