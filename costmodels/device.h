#pragma once
// An accelerator as the cost model sees it: peak FLOP/s per dtype, memory size
// and bandwidth, a fixed cost per op, and how efficiency falls for small ops.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodels/dtype.h"
#include "costmodels/kernel_table.h"
#include "costmodels/units.h"

namespace pipescope {

// Fraction of peak FLOP/s that an op of F FLOPs reaches:
//   efficiency(F) = max_efficiency * F / (F + half_flops)
// the saturating form of Hockney's "half-performance length" n_1/2 (Hockney &
// Jesshope, Parallel Computers 2, 1988): an op of half_flops FLOPs runs at half
// of the best achievable rate. Equivalently an op costs (F + half_flops) FLOPs at
// max_efficiency, so tiny micro-batches pay a fixed price per op and run slower
// per sample, as small GEMMs do on real hardware. half_flops = 0 gives a flat
// efficiency.
struct EfficiencyCurve {
  double max_efficiency = 1.0;  // (0, 1]
  Flops half_flops = 0.0;       // >= 0

  double at(Flops flops) const;
};

struct Device {
  std::string name;
  double peak_flops_fp32 = 0.0;   // FLOP/s, dense
  double peak_flops_16bit = 0.0;  // FLOP/s, dense bf16/fp16 (tensor cores, MXU)
  Bytes memory_bytes = 0;         // capacity
  double mem_bandwidth = 0.0;     // bytes/s
  double op_overhead_s = 0.0;     // fixed cost per op (kernel launch, dispatch)
  EfficiencyCurve efficiency;
  // The kernel-level model's figures for this device (present only where known).
  KernelTable kernels;

  double peak_flops(DType t) const { return is_16bit(t) ? peak_flops_16bit : peak_flops_fp32; }
};

// Interconnect kinds of a cluster preset; the topology turns them into routes.
enum class TopologyKind {
  kAllToAll,  // every pair of devices has its own direct link (NVLink switch)
  kPcieHost,  // no peer-to-peer: device -> host memory -> device (a PCIe tree, topology.h)
  kRing,      // devices on a ring (a TPU torus row): transfers hop between neighbours
  kNodes,     // nodes of devices behind a switch, a NIC per device to a spine (topology.h)
  kTorus,     // a 2-D torus: each device linked to its four grid neighbours (topology.h)
};

std::string_view to_string(TopologyKind k);
std::optional<TopologyKind> parse_topology(
    std::string_view name);  // "all-to-all", "pcie-host", "ring", "nodes", "torus"

struct Interconnect {
  TopologyKind topology = TopologyKind::kAllToAll;
  double bandwidth = 0.0;  // bytes/s per link and direction
  double latency_s = 0.0;  // per hop
  // kNodes only: devices per node (behind one switch at bandwidth, latency_s)
  // and each device's link to the spine between nodes.
  int devices_per_node = 0;
  double inter_node_bandwidth = 0.0;  // bytes/s per direction, of a device's (or a NIC's) link
  double inter_node_latency_s = 0.0;  // per hop
  // kNodes only: NICs per node, which divide devices_per_node; a node's
  // devices share them in runs of devices_per_node / nics_per_node (devices 0
  // and 1 the first NIC, ...), each NIC's link to the spine at
  // inter_node_bandwidth. 0: every device has its own.
  int nics_per_node = 0;
  // kTorus only: devices per row of the grid; 0 takes the most nearly square
  // grid (the largest divisor of the device count up to its square root).
  int torus_width = 0;
  // kPcieHost only: devices behind one PCIe switch, which share its one uplink
  // (at bandwidth) to the host; 0: every device on its own root port.
  int devices_per_switch = 0;
};

// A named preset: one kind of device and the interconnect its machines use.
struct DevicePreset {
  Device device;
  Interconnect interconnect;
  std::string description;  // one line, with the source of the figures
};

// The built-in presets, sorted by name.
const std::vector<DevicePreset>& device_presets();
std::optional<DevicePreset> find_device_preset(std::string_view name);

}  // namespace pipescope
