#include "costmodels/cost_model.h"

#include <gtest/gtest.h>

#include "costmodels/check.h"
#include "costmodels/model_families.h"

namespace pipescope {
namespace {

// 1 TFLOP/s fp32, 4 TFLOP/s 16-bit, 1 GB/s, no overhead, flat efficiency 1: an op
// takes exactly its FLOPs over the peak or its bytes over the bandwidth.
Device ideal() {
  Device d;
  d.name = "ideal";
  d.peak_flops_fp32 = 1e12;
  d.peak_flops_16bit = 4e12;
  d.memory_bytes = kGB;
  d.mem_bandwidth = 1e9;
  d.op_overhead_s = 0.0;
  d.efficiency = {1.0, 0.0};
  return d;
}

LayerSpec compute_heavy() {
  return {"matmul", 1e6, 2e6, 0, 0, 0};
}
// 10 FLOPs; 1000 fp32 params = 4000 bytes of weights, 1000 bytes per sample.
LayerSpec memory_heavy() {
  return {"norm", 10.0, 20.0, 1000, 100, 900};
}

TEST(AnalyticCostModel, ComputeBoundIsFlopsOverPeak) {
  const AnalyticCostModel cm(ideal(), DType::kFp32, 12.0);
  EXPECT_EQ(cm.forward(compute_heavy(), 4), 4'000);  // 4e6 / 1e12 s
  EXPECT_EQ(cm.backward(compute_heavy(), 4), 8'000);
  EXPECT_EQ(cm.recompute(compute_heavy(), 4), 4'000);
  const AnalyticCostModel bf16(ideal(), DType::kBf16, 12.0);
  EXPECT_EQ(bf16.forward(compute_heavy(), 4), 1'000);  // 16-bit peak
}

TEST(AnalyticCostModel, MemoryBoundIsBytesOverBandwidth) {
  const AnalyticCostModel cm(ideal(), DType::kFp32, 12.0);
  EXPECT_EQ(cm.forward(memory_heavy(), 2), 6'000);  // (4000 + 2 * 1000) B / 1e9 B/s
  EXPECT_EQ(cm.backward(memory_heavy(), 2), 12'000);
  EXPECT_EQ(cm.recompute(memory_heavy(), 2), 6'000);
  const AnalyticCostModel bf16(ideal(), DType::kBf16, 12.0);
  EXPECT_EQ(bf16.forward(memory_heavy(), 2), 4'000);  // 2-byte weights
}

TEST(AnalyticCostModel, OverheadAndEfficiency) {
  Device d = ideal();
  d.op_overhead_s = 5e-6;
  d.efficiency = {0.5, 1e6};
  const AnalyticCostModel cm(d, DType::kFp32, 12.0);
  EXPECT_EQ(cm.op_time(0.0, 0.0), 5'000);          // only the overhead
  EXPECT_EQ(cm.op_time(1e6, 0.0), 5'000 + 4'000);  // efficiency 0.25
  EXPECT_EQ(cm.op_time(3e6, 0.0), 5'000 + 8'000);  // efficiency 0.375
  EXPECT_EQ(cm.op_time(0.0, 2e3), 5'000 + 2'000);
}

TEST(AnalyticCostModel, OptimizerStepIsMemoryBound) {
  const AnalyticCostModel cm(ideal(), DType::kFp32, 12.0);
  EXPECT_EQ(cm.optimizer_step(1000), 24'000);  // 2 * 1000 * 12 B / 1e9 B/s
  EXPECT_EQ(cm.optimizer_step(0), 0);
}

TEST(AnalyticCostModel, NameAndDescription) {
  const AnalyticCostModel cm(ideal(), DType::kFp32, 12.0);
  EXPECT_EQ(cm.name(), "analytic");
  EXPECT_NE(cm.description().find("Roofline"), std::string_view::npos);
}

TEST(AnalyticCostModel, SmallMicroBatchesCostMorePerSample) {
  const DevicePreset v100 = find_device_preset("v100-nvlink").value();
  const AnalyticCostModel cm(v100.device, DType::kFp16, 16.0);
  TransformerParams p;
  p.layers = 1;
  p.d_model = 1024;
  p.heads = 16;
  p.seq_len = 128;
  p.vocab = 1000;
  p.dtype = DType::kFp16;
  const LayerSpec block = make_transformer(p).layers[1];
  // 3.288e9 FLOPs per sample against half_flops = 1.25e9: efficiency 0.507 for one
  // sample, 0.692 for 32; both compute-bound, plus the 5 us overhead.
  const SimTime one = cm.forward(block, 1);
  const SimTime thirty_two = cm.forward(block, 32);
  EXPECT_EQ(one, 56'867);
  EXPECT_EQ(thirty_two, 1'221'877);
  EXPECT_GT(one * 32, thirty_two);
}

TEST(AnalyticCostModel, RejectsDevicesWithoutPeakOrBandwidth) {
  Device no_peak = ideal();
  no_peak.peak_flops_16bit = 0.0;
  EXPECT_NO_THROW(AnalyticCostModel(no_peak, DType::kFp32, 8.0));
  EXPECT_THROW(AnalyticCostModel(no_peak, DType::kBf16, 8.0), InternalError);
  Device no_bandwidth = ideal();
  no_bandwidth.mem_bandwidth = 0.0;
  EXPECT_THROW(AnalyticCostModel(no_bandwidth, DType::kFp32, 8.0), InternalError);
}

}  // namespace
}  // namespace pipescope
