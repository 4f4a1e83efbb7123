// cluster.device.preset: an explicit device that starts from a preset's and
// replaces only the figures it gives.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scenario_docs.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using nlohmann::json;
using testing::docs::error_of;
using testing::docs::good_doc;

// good_doc() on an explicit device derived from `preset`.
json derived_doc(const json& device) {
  json doc = good_doc();
  doc["cluster"] = {
      {"devices", 2},
      {"device", device},
      {"interconnect", {{"topology", "all-to-all"}, {"bandwidth", 450e9}, {"latency_s", 2e-6}}}};
  return doc;
}

TEST(DevicePreset, KeepsThePresetsTableAndTakesTheGivenFigures) {
  const Device h100 = find_device_preset("h100-sxm")->device;
  const json doc = derived_doc({{"preset", "h100-sxm"},
                                {"name", "h100-96gb"},
                                {"memory_bytes", 96LL << 30},
                                {"mem_bandwidth", 2.4e12}});
  const Device d = parse_scenario(doc, "d.json").cluster.device;
  EXPECT_EQ(d.name, "h100-96gb");
  EXPECT_EQ(d.memory_bytes, 96LL << 30);
  EXPECT_EQ(d.mem_bandwidth, 2.4e12);
  // Everything else is the preset's: peaks, overheads, the whole kernel table.
  EXPECT_EQ(d.peak_flops_fp32, h100.peak_flops_fp32);
  EXPECT_EQ(d.peak_flops_16bit, h100.peak_flops_16bit);
  EXPECT_EQ(d.op_overhead_s, h100.op_overhead_s);
  EXPECT_EQ(d.efficiency.max_efficiency, h100.efficiency.max_efficiency);
  EXPECT_TRUE(d.kernels.present);
  EXPECT_EQ(d.kernels.fa2_attention_fwd_efficiency, h100.kernels.fa2_attention_fwd_efficiency);
  EXPECT_EQ(d.kernels.fp8_gemm_efficiency, h100.kernels.fp8_gemm_efficiency);
  EXPECT_GT(d.kernels.fa2_attention_fwd_efficiency, 0.0);
  // Without a name it keeps the preset's.
  EXPECT_EQ(parse_scenario(derived_doc({{"preset", "h100-sxm"}}), "d.json").cluster.device.name,
            "h100-sxm");
}

TEST(DevicePreset, EveryFigureGivenReplacesThePresets) {
  const json doc = derived_doc({{"preset", "h100-sxm"},
                                {"peak_flops", 50e12},
                                {"peak_flops_16bit", 835e12},
                                {"op_overhead_s", 7e-6},
                                {"efficiency", 0.5}});
  const Device d = parse_scenario(doc, "d.json").cluster.device;
  EXPECT_EQ(d.peak_flops_fp32, 50e12);
  EXPECT_EQ(d.peak_flops_16bit, 835e12);
  EXPECT_EQ(d.op_overhead_s, 7e-6);
  EXPECT_EQ(d.efficiency.max_efficiency, 0.5);
  EXPECT_EQ(d.efficiency.half_flops, 0.0);
  // The FP8 peak is the kernel table's, kept with it.
  EXPECT_EQ(d.kernels.peak_flops_fp8,
            find_device_preset("h100-sxm")->device.kernels.peak_flops_fp8);
}

TEST(DevicePreset, AGivenKernelTableReplacesTheWholeOfThePresets) {
  json whole = derived_doc({{"preset", "h100-sxm"}});
  whole["cluster"]["device"]["kernels"] = {{"multiprocessors", 100},
                                           {"tile_m", 128},
                                           {"tile_n", 128},
                                           {"gemm_efficiency", 0.7},
                                           {"gemm_k_overhead", 64},
                                           {"attention_fwd_efficiency", 0.5},
                                           {"attention_bwd_efficiency", 0.4},
                                           {"memory_efficiency", 0.8},
                                           {"kernel_overhead_s", 4e-6},
                                           {"link_efficiency", 0.8}};
  const KernelTable t = parse_scenario(whole, "d.json").cluster.device.kernels;
  EXPECT_EQ(t.multiprocessors, 100);
  EXPECT_EQ(t.gemm_efficiency, 0.7);
  // Nothing of the preset's table is left: no FlashAttention-2 or FP8 figures.
  EXPECT_EQ(t.fa2_attention_fwd_efficiency, 0.0);
  EXPECT_EQ(t.peak_flops_fp8, 0.0);

  json doc = derived_doc({{"preset", "h100-sxm"}});
  doc["cluster"]["device"]["kernels"] = {{"multiprocessors", 100}};  // a part of one
  EXPECT_NE(std::string(error_of(doc).what()).find("cluster.device.kernels.tile_m: missing"),
            std::string::npos)
      << error_of(doc).what();
}

TEST(DevicePreset, BadPresetsAndMissingFiguresAreNamed) {
  json doc = derived_doc({{"preset", "h999"}});
  EXPECT_NE(std::string(error_of(doc).what())
                .find("bad.json: cluster.device.preset: unknown preset 'h999' (expected one of: "),
            std::string::npos)
      << error_of(doc).what();
  // Without a preset every figure is required, as before.
  doc = derived_doc({{"name", "x"}, {"memory_bytes", 1 << 30}, {"mem_bandwidth", 1e12}});
  EXPECT_STREQ(error_of(doc).what(), "bad.json: cluster.device.peak_flops: missing required key");
}

}  // namespace
}  // namespace pipescope
