// What Transformer Engine's userbuffers cost the GEMMs beside their
// collectives (costmodels/userbuffers.h), and the GEMM times the kernel-level
// model records for them (OpTimes::te_gemms).

#include <gtest/gtest.h>

#include "costmodels/device.h"
#include "costmodels/framework.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"
#include "costmodels/userbuffers.h"

namespace pipescope {
namespace {

// The kernel-level model records the forward of the row-split projections
// (proj, fc2) and the input and weight gradients of the column-split ones
// (qkv, fc1) of an H100 T = 4 block, each as its kernel's time; nothing for
// the embedding.
TEST(KernelCostModel, RecordsTheGemmsUserbuffersRunBeside) {
  const Device d = find_device_preset("h100-sxm")->device;
  TransformerParams p;
  p.layers = 1;
  p.d_model = 4096;
  p.heads = 32;
  p.seq_len = 2048;
  p.vocab = 32000;
  p.dtype = DType::kBf16;
  const ModelSpec m = make_transformer(p, "t", TensorSplit{4, true});
  const LayerSpec& block = m.layers[1];
  double proj = 0.0, fc2 = 0.0, qkv_d = 0.0, qkv_w = 0.0, fc1_d = 0.0, fc1_w = 0.0;
  int marked = 0;
  for (const Kernel& k : *block.kernels) {
    const KernelTimes kt = kernel_times(k, 2, d.kernels, d.peak_flops(DType::kBf16),
                                        d.peak_flops(DType::kBf16), d.mem_bandwidth, 2, false);
    switch (k.te_gemm) {
      case Kernel::TeGemm::kProj:
        proj += kt.forward;
        break;
      case Kernel::TeGemm::kFc2:
        fc2 += kt.forward;
        break;
      case Kernel::TeGemm::kQkv:
        qkv_d += kt.backward - kt.weight, qkv_w += kt.weight;
        break;
      case Kernel::TeGemm::kFc1:
        fc1_d += kt.backward - kt.weight, fc1_w += kt.weight;
        break;
      case Kernel::TeGemm::kNone:
        --marked;
        break;
    }
    ++marked;
  }
  ASSERT_EQ(marked, 4);
  const KernelCostModel nemo(d, DType::kBf16, false, 16.0, *find_framework("nemo"));
  const TeGemmTimes g = nemo.op_times(block, 2).te_gemms;
  EXPECT_EQ(g.multiprocessors, 132);
  EXPECT_EQ(g.proj_fprop, seconds_to_simtime(proj));
  EXPECT_EQ(g.fc2_fprop, seconds_to_simtime(fc2));
  EXPECT_EQ(g.qkv_dgrad, seconds_to_simtime(qkv_d));
  EXPECT_EQ(g.qkv_wgrad, seconds_to_simtime(qkv_w));
  EXPECT_EQ(g.fc1_dgrad, seconds_to_simtime(fc1_d));
  EXPECT_EQ(g.fc1_wgrad, seconds_to_simtime(fc1_w));
  EXPECT_GT(g.fc1_wgrad, g.qkv_wgrad);  // f = 4h against 3h wide
  const TeGemmTimes embedding = nemo.op_times(m.layers[0], 2).te_gemms;
  EXPECT_EQ(embedding.proj_fprop + embedding.qkv_wgrad + embedding.fc1_dgrad, 0);
}

// Kept off its SMs (a margin), a GEMM runs on those left from start to end;
// sharing them, it loses them while the collective runs, never more than the
// margin would cost; at least half the SMs stay with the GEMM.
TEST(Userbuffers, SmShareCost) {
  EXPECT_EQ(sm_share_cost(1160, 16, 132, true, 0), 160);    // 1160 x 16 / 116
  EXPECT_EQ(sm_share_cost(1160, 16, 132, false, 660), 80);  // 660 x 16 / 132
  EXPECT_EQ(sm_share_cost(1160, 16, 132, false, 1'000'000), 160);
  EXPECT_EQ(sm_share_cost(1000, 80, 132, true, 0), 1000);  // on 66, not 52
  EXPECT_EQ(sm_share_cost(1000, 0, 132, true, 0), 0);
  EXPECT_EQ(sm_share_cost(1000, 16, 0, true, 0), 0);  // no SM count
}

// Each profile's configuration, by hand: NeMo's keeps the forward's GEMMs off
// 24 and 16 SMs and shares 4, 24, 2 and 4 with the backward's; Transformer
// Engine's defaults keep every GEMM off 16; Megatron-Core without
// --tp-comm-overlap pays nothing.
TEST(Userbuffers, CostOfEachProfilesConfiguration) {
  TeGemmTimes g;
  g.proj_fprop = 1080;
  g.fc2_fprop = 1160;
  g.qkv_dgrad = 1000;
  g.qkv_wgrad = 1000;
  g.fc1_dgrad = 3000;
  g.fc1_wgrad = 3000;
  g.multiprocessors = 132;
  const SimTime fwd_collective = 330, bwd_collective = 660;
  const UserbufferCost nemo =
      userbuffers_cost(g, *find_framework("nemo"), fwd_collective, bwd_collective);
  EXPECT_EQ(nemo.forward, 240 + 160);  // 1080 x 24 / 108, 1160 x 16 / 116
  // 660 x 4 / 132, 660 x 24 / 132, 660 x 2 / 132, 660 x 4 / 132
  EXPECT_EQ(nemo.backward, 20 + 120 + 10 + 20);
  Framework te = *find_framework("megatron-core");
  EXPECT_EQ(userbuffers_cost(g, te, fwd_collective, bwd_collective).forward, 0);
  EXPECT_EQ(userbuffers_cost(g, te, fwd_collective, bwd_collective).backward, 0);
  te.tp_forward_overlap = true;
  const UserbufferCost defaults = userbuffers_cost(g, te, fwd_collective, bwd_collective);
  EXPECT_EQ(defaults.forward, 149 + 160);               // 1080 x 16 / 116 = 148.97
  EXPECT_EQ(defaults.backward, 138 + 138 + 414 + 414);  // 1000 x 16 / 116 = 137.9
}

}  // namespace
}  // namespace pipescope
