#include "costmodels/device.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pipescope {
namespace {

TEST(Device, PresetsAreSortedByName) {
  std::vector<std::string> names;
  for (const DevicePreset& p : device_presets()) names.push_back(p.device.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a100-40g", "a100-80g", "cpu", "dgx-a100", "dgx-h100",
                                             "h100-pcie", "h100-sxm", "h200", "p100-pcie",
                                             "p40-pcie", "pcie-host", "tpu-torus", "tpu-v2",
                                             "tpu-v3", "v100-nvlink"}));
}

TEST(Device, FindPresetByExactName) {
  EXPECT_TRUE(find_device_preset("h200").has_value());
  EXPECT_FALSE(find_device_preset("tpu").has_value());
  EXPECT_FALSE(find_device_preset("TPU-V3").has_value());
  EXPECT_FALSE(find_device_preset("").has_value());
}

TEST(Device, TpuPresetsArePerCoreOnARing) {
  const DevicePreset v3 = find_device_preset("tpu-v3").value();
  EXPECT_EQ(v3.device.memory_bytes, 17'179'869'184);  // 16 GiB
  EXPECT_EQ(v3.device.peak_flops(DType::kBf16), 61.5e12);
  EXPECT_EQ(v3.device.mem_bandwidth, 450e9);
  EXPECT_EQ(v3.interconnect.topology, TopologyKind::kRing);
  EXPECT_EQ(v3.interconnect.bandwidth, 82e9);

  const DevicePreset v2 = find_device_preset("tpu-v2").value();
  EXPECT_EQ(v2.device.memory_bytes, 8'589'934'592);  // 8 GiB
  EXPECT_EQ(v2.device.peak_flops(DType::kBf16), 22.5e12);
  EXPECT_EQ(v2.device.peak_flops(DType::kFp32), 22.5e12);  // XLA default: one bf16 pass
  EXPECT_EQ(v2.interconnect.topology, TopologyKind::kRing);
}

TEST(Device, GpuPresetFigures) {
  const DevicePreset p100 = find_device_preset("p100-pcie").value();
  EXPECT_EQ(p100.device.memory_bytes, 16 * kGiB);
  EXPECT_EQ(p100.device.peak_flops(DType::kFp32), 9.3e12);
  EXPECT_EQ(p100.device.peak_flops(DType::kFp16), 18.7e12);
  EXPECT_EQ(p100.device.mem_bandwidth, 732e9);
  EXPECT_EQ(p100.interconnect.topology, TopologyKind::kPcieHost);
  EXPECT_EQ(p100.interconnect.bandwidth, 15.75e9);  // the peak; kernels apply 0.8

  // The P40: fp32 at the datasheet's 12 TFLOP/s, 16-bit at 1/64 of it, its
  // efficiency curve on the fp32 peak, and the two efficiencies measured on it.
  const DevicePreset p40 = find_device_preset("p40-pcie").value();
  EXPECT_EQ(p40.device.memory_bytes, 24 * kGiB);
  EXPECT_EQ(p40.device.peak_flops(DType::kFp32), 12e12);
  EXPECT_EQ(p40.device.peak_flops(DType::kFp16), 12e12 / 64);
  EXPECT_EQ(p40.device.efficiency.half_flops, 12e12 * 10e-6);
  EXPECT_EQ(p40.device.mem_bandwidth, 346e9);
  EXPECT_EQ(p40.interconnect.topology, TopologyKind::kPcieHost);
  EXPECT_EQ(p40.interconnect.bandwidth, 15.75e9);
  EXPECT_EQ(p40.interconnect.devices_per_switch, 2);
  EXPECT_EQ(p40.device.kernels.multiprocessors, 30);
  EXPECT_EQ(p40.device.kernels.memory_efficiency, 0.73);
  EXPECT_EQ(p40.device.kernels.link_efficiency, 0.79);

  const DevicePreset v100 = find_device_preset("v100-nvlink").value();
  EXPECT_EQ(v100.device.peak_flops(DType::kFp32), 15.7e12);
  EXPECT_EQ(v100.device.peak_flops(DType::kFp16), 125e12);
  EXPECT_EQ(v100.device.mem_bandwidth, 900e9);
  EXPECT_EQ(v100.interconnect.topology, TopologyKind::kAllToAll);

  const DevicePreset h200 = find_device_preset("h200").value();
  EXPECT_EQ(h200.device.memory_bytes, 141 * kGiB);
  EXPECT_EQ(h200.device.mem_bandwidth, 4.8e12);
  EXPECT_EQ(h200.device.peak_flops(DType::kBf16), 989e12);
}

TEST(Device, CpuPresetIsACoreWithNominalFigures) {
  const DevicePreset cpu = find_device_preset("cpu").value();
  EXPECT_EQ(cpu.device.memory_bytes, 4 * kGiB);
  EXPECT_EQ(cpu.device.peak_flops(DType::kFp32), 32e9);
  EXPECT_EQ(cpu.interconnect.topology, TopologyKind::kAllToAll);
  EXPECT_EQ(cpu.interconnect.latency_s, 5e-6);
  EXPECT_NE(cpu.description.find("pipescope profile"), std::string::npos);
}

TEST(Device, EveryPresetIsPlausible) {
  for (const DevicePreset& p : device_presets()) {
    SCOPED_TRACE(p.device.name);
    const Device& d = p.device;
    EXPECT_GT(d.peak_flops_fp32, 0.0);
    // Only Pascal's GP102 has no fast 16-bit path.
    if (d.name != "p40-pcie") {
      EXPECT_GE(d.peak_flops_16bit, d.peak_flops_fp32);
    }
    EXPECT_GT(d.memory_bytes, 0);
    EXPECT_GT(d.mem_bandwidth, 0.0);
    EXPECT_GT(d.op_overhead_s, 0.0);
    EXPECT_GE(d.efficiency.max_efficiency, 0.6);
    EXPECT_LE(d.efficiency.max_efficiency, 0.8);
    // An op of 10 us of work at the faster peak runs at half of the best
    // efficiency.
    EXPECT_DOUBLE_EQ(d.efficiency.half_flops,
                     std::max(d.peak_flops_16bit, d.peak_flops_fp32) * 10e-6);
    EXPECT_GT(p.interconnect.bandwidth, 0.0);
    EXPECT_GT(p.interconnect.latency_s, 0.0);
    EXPECT_FALSE(p.description.empty());
  }
}

TEST(Device, EfficiencyCurve) {
  const EfficiencyCurve c{0.8, 100.0};
  EXPECT_DOUBLE_EQ(c.at(100.0), 0.4);
  EXPECT_DOUBLE_EQ(c.at(300.0), 0.6);
  EXPECT_DOUBLE_EQ(c.at(900.0), 0.72);
  EXPECT_DOUBLE_EQ(c.at(0.0), 0.8);
  EXPECT_DOUBLE_EQ(c.at(-5.0), 0.8);
  const EfficiencyCurve flat{0.5, 0.0};
  EXPECT_DOUBLE_EQ(flat.at(1.0), 0.5);
  EXPECT_DOUBLE_EQ(flat.at(1e15), 0.5);
}

TEST(Device, TopologyNamesRoundTrip) {
  EXPECT_EQ(to_string(TopologyKind::kAllToAll), "all-to-all");
  EXPECT_EQ(to_string(TopologyKind::kPcieHost), "pcie-host");
  EXPECT_EQ(to_string(TopologyKind::kRing), "ring");
  for (TopologyKind k : {TopologyKind::kAllToAll, TopologyKind::kPcieHost, TopologyKind::kRing,
                         TopologyKind::kNodes, TopologyKind::kTorus}) {
    EXPECT_EQ(parse_topology(to_string(k)), k);
  }
  EXPECT_FALSE(parse_topology("mesh").has_value());
}

TEST(Device, DTypeNamesRoundTrip) {
  EXPECT_EQ(to_string(DType::kFp32), "fp32");
  EXPECT_EQ(to_string(DType::kBf16), "bf16");
  EXPECT_EQ(to_string(DType::kFp16), "fp16");
  for (DType t : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    EXPECT_EQ(parse_dtype(to_string(t)), t);
  }
  EXPECT_FALSE(parse_dtype("fp8").has_value());
  EXPECT_EQ(dtype_bytes(DType::kBf16), 2);
}

}  // namespace
}  // namespace pipescope
