// What Transformer Engine's forward overlap costs the GEMMs beside its
// reduce-scatters (OpTimes::tp_overlap_forward, the kernel-level model).

#include <gtest/gtest.h>

#include "costmodels/device.h"
#include "costmodels/framework.h"
#include "costmodels/kernel_cost_model.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// Transformer Engine's forward overlap (NeMo: 24 SMs beside the output
// projection, 16 beside the MLP's down projection, of the H100's 132) runs
// those GEMMs on the SMs left, and costs nothing without the overlap or where
// a block has no row-split GEMM.
TEST(KernelCostModel, OverlappedReduceScattersTakeTheirGemmsSms) {
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
  double output = 0.0, down = 0.0;
  int row_split = 0;
  for (const Kernel& k : *block.kernels) {
    const double fwd = kernel_times(k, 2, d.kernels, d.peak_flops(DType::kBf16),
                                    d.peak_flops(DType::kBf16), d.mem_bandwidth, 2, false)
                           .forward;
    if (k.row_split == Kernel::RowSplit::kAttentionOutput) output += fwd;
    if (k.row_split == Kernel::RowSplit::kMlpDown) down += fwd;
    row_split += k.row_split != Kernel::RowSplit::kNone ? 1 : 0;
  }
  ASSERT_EQ(row_split, 2);
  ASSERT_EQ(d.kernels.multiprocessors, 132);
  const KernelCostModel nemo(d, DType::kBf16, false, 16.0, *find_framework("nemo"));
  EXPECT_EQ(nemo.op_times(block, 2).tp_overlap_forward,
            seconds_to_simtime(output * (132.0 / 108 - 1) + down * (132.0 / 116 - 1)));
  EXPECT_GT(nemo.op_times(block, 2).tp_overlap_forward, 0);
  // Megatron-Core without --tp-comm-overlap, and the embedding, pay nothing.
  const KernelCostModel mc(d, DType::kBf16, false, 16.0, *find_framework("megatron-core"));
  EXPECT_EQ(mc.op_times(block, 2).tp_overlap_forward, 0);
  EXPECT_EQ(nemo.op_times(m.layers[0], 2).tp_overlap_forward, 0);
  // Transformer Engine's defaults: 16 SMs beside each.
  Framework te = *find_framework("megatron-core");
  te.tp_forward_overlap = true;
  const KernelCostModel with_te(d, DType::kBf16, false, 16.0, te);
  EXPECT_EQ(with_te.op_times(block, 2).tp_overlap_forward,
            seconds_to_simtime((output + down) * (132.0 / 116 - 1)));
}

}  // namespace
}  // namespace pipescope
