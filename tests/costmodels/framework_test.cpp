// The frameworks' profiles (costmodels/framework.h): names, the table
// docs/models.md gives, and the fields a scenario may override.

#include "costmodels/framework.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace pipescope {
namespace {

TEST(Framework, ProfilesHaveUniqueNamesAndDescriptions) {
  std::set<std::string> names;
  for (const Framework& f : framework_profiles()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_FALSE(framework_description(f.name).empty()) << f.name;
    EXPECT_EQ(find_framework(f.name), f);
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_TRUE(names.count(kDefaultGpuFramework));
  EXPECT_TRUE(names.count(kIdealFramework));
  EXPECT_FALSE(find_framework("megatron").has_value());
  EXPECT_EQ(framework_names(),
            "megatron-core, nemo, megatron-lm-2022, megatron-lm-2021, deepspeed, torchtitan, "
            "torchgpipe, ideal");
}

// ideal pays nothing: what the simulator did before frameworks.
TEST(Framework, IdealPaysNothing) {
  const Framework f = *find_framework(kIdealFramework);
  EXPECT_EQ(f, Framework{.name = kIdealFramework});
  EXPECT_EQ(f.host_launch_s, 0.0);
  EXPECT_FALSE(f.sync_after_p2p || f.fp32_grads || f.fp32_grad_reduce || f.tp_backward_overlap);
  EXPECT_EQ(f.p2p, P2pMode::kOverlapped);
  EXPECT_EQ(f.rank_order, RankOrder::kTpPpDp);
}

// The table of docs/models.md, "What each framework pays".
TEST(Framework, ProfilesAreWhatTheDocsSay) {
  const Framework mc = *find_framework("megatron-core");
  EXPECT_DOUBLE_EQ(mc.host_launch_s, 8e-6);
  EXPECT_TRUE(mc.sync_after_p2p);
  EXPECT_FALSE(mc.sync_after_p2p_interleaved);
  EXPECT_EQ(mc.p2p, P2pMode::kBlocking);
  EXPECT_EQ(mc.p2p_interleaved, P2pMode::kOverlappedSteady);
  EXPECT_EQ(mc.rank_order, RankOrder::kTpDpPp);
  EXPECT_TRUE(mc.fp32_grads && mc.fp32_grad_reduce && mc.tp_backward_overlap);
  EXPECT_FALSE(mc.overlap_grad_reduce || mc.overlap_param_gather || mc.tp_forward_overlap);
  EXPECT_DOUBLE_EQ(mc.step_grad_pass_bytes, 20.0);

  const Framework nemo = *find_framework("nemo");
  EXPECT_EQ(nemo.cross_entropy, CrossEntropy::kFp32Fused);
  EXPECT_TRUE(nemo.overlap_grad_reduce && nemo.overlap_param_gather && nemo.tp_forward_overlap);
  EXPECT_FALSE(nemo.fp32_grads || nemo.fp32_grad_reduce);

  const Framework old = *find_framework("megatron-lm-2022");
  EXPECT_FALSE(old.fused_attention);
  EXPECT_TRUE(old.sync_after_p2p_interleaved && old.p2p_split);
  EXPECT_EQ(old.p2p_interleaved, P2pMode::kBlocking);
  EXPECT_DOUBLE_EQ(old.step_grad_pass_bytes, 16.0);

  EXPECT_TRUE(old.tp_backward_overlap);
  EXPECT_FALSE(old.grad_accumulation_pass);

  // Megatron-LM v2.x: as 2022 but the backward's all-reduce after the weight
  // gradient and the local DDP's add into main_grad.
  Framework v2 = *find_framework("megatron-lm-2021");
  EXPECT_FALSE(v2.tp_backward_overlap);
  EXPECT_TRUE(v2.grad_accumulation_pass);
  EXPECT_DOUBLE_EQ(v2.grad_accumulation_bytes, 10.0);
  v2.name = old.name;
  v2.tp_backward_overlap = true;
  v2.grad_accumulation_pass = false;
  EXPECT_EQ(v2, old);

  const Framework ds = *find_framework("deepspeed");
  EXPECT_TRUE(ds.fp32_grads && ds.grad_accumulation_pass);
  EXPECT_FALSE(ds.fp32_grad_reduce || ds.sync_after_p2p || ds.tp_backward_overlap);
  EXPECT_DOUBLE_EQ(ds.grad_accumulation_bytes, 18.0);
  // Its ZeRO-1 all-reduces the gradients; every other profile's
  // reduce-scatters them.
  for (const Framework& f : framework_profiles()) {
    EXPECT_EQ(f.zero1_allreduce, f.name == "deepspeed") << f.name;
  }

  const Framework titan = *find_framework("torchtitan");
  EXPECT_FALSE(titan.fused_norm);
  EXPECT_TRUE(titan.flash_attention_2 && titan.fp32_grad_reduce && titan.overlap_grad_reduce);
  EXPECT_EQ(titan.p2p, P2pMode::kOverlapped);
  EXPECT_FALSE(titan.grad_accumulation_pass);  // FSDP2's deferred reduction: not represented
  EXPECT_TRUE(find_framework("torchgpipe")->grad_accumulation_pass);
  EXPECT_FALSE(mc.grad_accumulation_pass || nemo.grad_accumulation_pass);
}

// Every overridable field is a flag or a number, named once.
TEST(Framework, FieldsAreFlagsOrBoundedNumbers) {
  std::set<std::string> keys;
  for (const FrameworkField& f : framework_fields()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_NE(f.flag == nullptr, f.number == nullptr) << f.key;
    if (f.number != nullptr) {
      EXPECT_GT(f.max, 0.0) << f.key;
    }
  }
  EXPECT_EQ(keys.size(), 25u);
  EXPECT_TRUE(keys.count("host_launch_s") && keys.count("overlap_grad_reduce") &&
              keys.count("launch_blocking"));
}

// Blocking launches keep a profile's host and kernels and drop every overlap.
TEST(Framework, DroppingOverlapsLeavesTheRest) {
  Framework f = *find_framework("nemo");
  drop_overlaps(f);
  int overlaps = 0;
  for (const FrameworkField& field : framework_fields()) {
    if (!field.overlap) continue;
    ++overlaps;
    ASSERT_NE(field.flag, nullptr) << field.key;
    EXPECT_FALSE(f.*field.flag) << field.key;
  }
  // The five overlap fields, and only they, are marked.
  EXPECT_EQ(overlaps, 5);
  for (const FrameworkField& field : framework_fields()) {
    const std::string key = field.key;
    const bool named_overlap = key.find("overlap") != std::string::npos;
    EXPECT_EQ(field.overlap, named_overlap) << key;
  }
  EXPECT_EQ(f.p2p, P2pMode::kBlocking);
  EXPECT_EQ(f.p2p_interleaved, P2pMode::kBlocking);
  const Framework nemo = *find_framework("nemo");
  EXPECT_EQ(f.host_launch_s, nemo.host_launch_s);
  EXPECT_EQ(f.fp32_grads, nemo.fp32_grads);
  EXPECT_TRUE(nemo.tp_forward_overlap && nemo.overlap_grad_reduce);  // there was something to drop
}

}  // namespace
}  // namespace pipescope
