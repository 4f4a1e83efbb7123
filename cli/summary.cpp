#include "cli/summary.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "costmodels/model_families.h"
#include "costmodels/profile.h"
#include "sim/base/format.h"
#include "sim/engine/custom_schedule.h"
#include "sim/engine/schedule.h"

namespace pipescope::cli {
namespace {

// Up to this many devices the bubble line lists each one's.
constexpr std::size_t kListedDevices = 16;

std::string pad(std::string s, std::size_t width, bool right = true) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

// The scenario's name and model.
void print_scenario_line(std::ostream& out, const Scenario& sc) {
  const ModelSpec& m = sc.model;
  out << "Scenario   " << sc.name << ": " << m.family
      << (m.name != m.family ? " '" + m.name + "'" : std::string()) << ", " << m.layers.size()
      << " layers, " << format_count(static_cast<double>(m.total_params())) << " params"
      << (m.tensor_parallel > 1 ? " per tensor-parallel device" : "")
      << (m.expert_parallel > 1 ? (m.tensor_parallel > 1 ? " (its share of the experts)"
                                                         : " per device (its share of the experts)")
                                : "")
      << ", " << to_string(m.dtype) << "\n";
}

// The cluster's devices and the links between them.
void print_cluster_line(std::ostream& out, const Cluster& c) {
  out << "Cluster    " << c.physical_devices() << " x " << c.device.name << " ("
      << format_bytes(static_cast<double>(c.device.memory_bytes))
      << " each), "
      // Nodes say where their links are after the latency ("inside nodes of 8").
      << (c.interconnect.topology == TopologyKind::kNodes
              ? std::string()
              : std::string(to_string(c.interconnect.topology)) + " ")
      << "links of " << format_rate(c.interconnect.bandwidth) << ", "
      << format_seconds(c.interconnect.latency_s) << " latency";
  if (c.interconnect.topology == TopologyKind::kNodes) {
    out << " inside nodes of " << c.interconnect.devices_per_node << "; "
        << format_rate(c.interconnect.inter_node_bandwidth) << ", "
        << format_seconds(c.interconnect.inter_node_latency_s)
        << (c.shares_nics()
                ? " per NIC between nodes, " + std::to_string(c.interconnect.nics_per_node) +
                      " NICs a node shared by its devices"
                : std::string(" per device between nodes"));
  }
  if (c.interconnect.topology == TopologyKind::kPcieHost && c.interconnect.devices_per_switch > 0) {
    out << ", " << c.interconnect.devices_per_switch
        << " devices per PCIe switch sharing its uplink";
  }
  out << "\n";
}

// The lines that say where the step's costs come from, each where it applies:
// tensor parallelism, a measured profile, a framework's overheads.
void print_cost_source_lines(std::ostream& out, const Scenario& sc) {
  const ModelSpec& m = sc.model;
  const Cluster& c = sc.cluster;
  if (c.tensor_parallel > 1) {
    out << "Tensor     T=" << c.tensor_parallel
        << " devices split every layer (Megatron-LM's columns and rows), "
        << c.devices * c.context_parallel << " groups of them"
        << (m.sequence_parallel ? "; sequence parallel (norms and dropouts split by tokens)" : "")
        << "; times, memory and MFU are one device's\n";
  }
  if (c.context_parallel > 1) {
    const std::int64_t seq = m.tokens_per_sample;
    out << "Context    C=" << c.context_parallel << " devices share each sequence of " << seq
        << " tokens, " << seq / c.context_parallel
        << " a device, passing keys and values round a ring beside the attention; the "
           "gradients reduce (and ZeRO shards) over the D x C devices that hold the same "
           "weights\n";
  }
  if (sc.training.expert_parallel > 1) {
    const MoeParams& moe = m.transformer->moe;
    const std::string over =
        c.expert_fold > 1
            ? (c.context_parallel > 1 ? " of the T x D x C devices" : " of the T x D devices")
        : c.context_parallel > 1 ? " of the D x C devices"
                                 : " replicas";
    out << "Experts    E=" << sc.training.expert_parallel << over << " share the " << moe.experts
        << " experts, " << moe.experts / sc.training.expert_parallel
        << (c.expert_fold > 1 ? " whole on each device (expert tensor parallelism 1), each "
                                "routing its own tokens"
                              : " a device")
        << (sc.training.moe_dispatcher == MoeDispatcher::kDeepEp
                ? ", exchanging tokens by DeepEP (each once to each node and GPU that holds "
                  "any of its experts)"
                : ", exchanging tokens by all-to-all")
        << (moe.imbalance > 1.0
                ? "; the busiest receives " + format_fixed(moe.imbalance, 2) + " times the mean"
                : std::string())
        << "\n";
  }
  if (c.profile) {
    out << "Profile    layer times, optimizer and transport measured on " << c.profile->machine
        << " (" << c.profile->backend << ")\n";
  }
  const Framework& fw = sc.training.framework;
  if (fw.name != kIdealFramework) {
    const std::optional<Framework> profile = find_framework(fw.name);
    out << "Framework  " << fw.name << (profile && *profile == fw ? "" : " (fields overridden)")
        << ": " << framework_description(fw.name) << "\n";
  }
}

// The lines on how the stages share the devices' time, where it differs from
// sends overlapped with compute and a core per stage.
void print_sharing_lines(std::ostream& out, const Scenario& sc, const SimResult& r) {
  const ModelSpec& m = sc.model;
  const Cluster& c = sc.cluster;
  const bool split_cuts = c.p2p_split && c.tensor_parallel > 1 && !m.sequence_parallel;
  const P2pMode p2p = c.p2p_mode(r.chunks > 1);
  if (r.stages > 1 && (p2p != P2pMode::kOverlapped || split_cuts)) {
    out << "Sends      "
        << (p2p == P2pMode::kBlocking
                ? "blocking: a stage computes nothing until its send has arrived"
            : p2p == P2pMode::kOverlappedSteady
                ? "blocking in the warm-up and cool-down, overlapped with compute in between"
                : "overlapped with compute")
        << (split_cuts ? "; each device sends 1/T of a cut, the next group all-gathers it" : "")
        << "\n";
  }
  if (c.shared_cores > 0 && c.shared_cores < r.stages) {
    out << "Cores      the " << r.stages << " stages share " << c.shared_cores
        << " cores: an op holds a core for its whole duration, in the order ops become ready\n";
  }
}

// How the data-parallel replicas keep their gradients and optimizer state in
// step, by ZeRO stage (ZeRO-1 summing by a full all-reduce under some
// frameworks: Framework::zero1_allreduce).
std::string replica_sync(int zero, bool zero1_allreduce) {
  if (zero == 1) {
    return std::string("ring ") + (zero1_allreduce ? "all-reduce" : "reduce-scatter") +
           " of each stage's gradients, all-gather of its updated weights after the step; "
           "ZeRO-1: each keeps 1/D of the optimizer state";
  }
  return zero == 2   ? "ring reduce-scatter of each stage's gradients after every backward, "
                       "all-gather of its updated weights after the step; ZeRO-2: each keeps 1/D "
                       "of the optimizer state and gradients"
         : zero == 3 ? "ring all-gather of each layer's weights before it computes in every "
                       "forward, recompute and backward, reduce-scatter of a stage's "
                       "gradients after its backward; ZeRO-3: each keeps 1/D of the "
                       "weights, gradients and optimizer state"
                     : "ring all-reduce of each stage's gradients";
}

// The schedule's line: K, its chunks, the replicas, M, the micro-batch size,
// remat, the partition and the cost model.
void print_schedule_line(std::ostream& out, const Cluster& c, const SimResult& r,
                         std::string_view partition, int replicas) {
  out << "Schedule   " << to_string(r.schedule) << ", K=" << r.stages;
  if (r.chunks > 1) {
    out << " x " << r.chunks << " chunks ("
        << (r.custom               ? "each stage on the device whose row lists it"
            : v_shaped(r.schedule) ? "stages d and 2K-1-d on device d"
                                   : "stage s on device s mod K")
        << ")";
  }
  if (replicas > 1) {
    out << " x D=" << replicas << " replicas ("
        << replica_sync(r.zero, !r.stage_costs.empty() && r.stage_costs.front().zero1_allreduce)
        << "), ranks " << to_string(c.rank_order);
  } else if (r.stages < c.devices) {
    // Without data parallelism the devices beyond K stay idle and are not counted.
    out << " (on " << r.stages << " of the " << c.devices
        << (c.group_size() > 1 ? " groups)" : " devices)");
  }
  out << ", M=" << r.micro_batches << ", micro-batch " << r.micro_batch_size << ", remat "
      << remat_label(r.remat) << checkpoint_label(r.remat, r.checkpoint) << ", partition "
      << partition << ", cost model " << r.cost_model << "\n";
}

void print_header(std::ostream& out, const Scenario& sc, const SimResult& r,
                  std::string_view partition, int replicas) {
  print_scenario_line(out, sc);
  print_cluster_line(out, sc.cluster);
  print_cost_source_lines(out, sc);
  print_sharing_lines(out, sc, r);
  print_schedule_line(out, sc.cluster, r, partition, replicas);
  const std::string actions = r.custom ? side_action_note(*r.custom) : "";
  if (!actions.empty()) out << "Actions    " << actions << "\n";
  out << "\n";
}

namespace {

std::string layer_range(const StageCost& c) {
  return std::to_string(c.layers.first_layer) + "-" + std::to_string(c.layers.last_layer) + " (" +
         std::to_string(c.layers.layer_count()) + ")";
}

}  // namespace

void print_stage_table(std::ostream& out, const SimResult& r) {
  // With chunks, device d runs stages d, d + K, ...: the memory is the device's.
  const bool chunked = r.chunks > 1;
  // Columns as wide as their widest cell and a space, at least as their title.
  std::size_t layers_width = 14;
  for (const StageCost& c : r.stage_costs) {
    layers_width = std::max(layers_width, layer_range(c).size() + 1);
  }
  const std::size_t stage_width =
      std::max<std::size_t>(5, std::to_string(r.stage_costs.size()).size());
  out << pad("stage", stage_width) << (chunked ? pad("device", 7) : "")
      << pad("layers", layers_width) << pad("params", 10) << pad("forward", 11)
      << pad("backward", 11) << pad("recompute", 11) << pad("peak memory / capacity", 28) << "\n";
  for (std::size_t s = 0; s < r.stage_costs.size(); ++s) {
    const StageCost& c = r.stage_costs[s];
    const auto device = static_cast<std::size_t>(
        placed_device(r.schedule, r.custom.get(), static_cast<int>(s), r.stages));
    const DeviceMetrics& d = r.metrics.devices.at(device);
    const std::string mem = format_bytes(static_cast<double>(d.peak_memory)) + " / " +
                            format_bytes(static_cast<double>(d.memory_capacity));
    out << pad(std::to_string(s), stage_width) << (chunked ? pad(std::to_string(device), 7) : "")
        << pad(layer_range(c), layers_width) << pad(format_count(static_cast<double>(c.params)), 10)
        << pad(format_seconds(simtime_to_seconds(c.forward)), 11)
        << pad(format_seconds(simtime_to_seconds(c.backward_time(r.split_backward()))), 11)
        << pad(r.remat != Remat::kNever ? format_seconds(simtime_to_seconds(c.recompute)) : "-", 11)
        << pad(mem, 28) << (d.fits() ? "" : "  OVER") << "\n";
  }
  out << "(times per micro-batch of " << r.micro_batch_size << ")\n\n";
}

// What the ops' exchanges among a group's devices were: the tensor-parallel
// all-reduces alone, as before there were others, else each kind there is.
std::string exchanges_named(const SimResult& r) {
  std::vector<std::string> kinds;
  if (r.tensor_parallel > 1) kinds.emplace_back("tensor-parallel");
  if (r.expert_parallel > 1) kinds.emplace_back("expert-parallel");
  if (r.context_parallel > 1) kinds.emplace_back("context-parallel");
  if (kinds.size() <= 1) {
    if (r.expert_parallel > 1) return "expert-parallel all-to-alls";
    if (r.context_parallel > 1) return "context-parallel ring exchanges beyond the attention";
    return "tensor-parallel all-reduces";
  }
  std::string out;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == kinds.size() ? " and " : ", ") + kinds[i];
  }
  return out + " exchanges";
}

void print_totals(std::ostream& out, const SimResult& r) {
  const Metrics& m = r.metrics;
  out << "Step time      " << format_seconds(m.step_time_s()) << "\n";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.4g samples/s", m.samples_per_s);
  out << "Throughput     " << buf;
  if (m.tokens_per_s != m.samples_per_s) out << ", " << format_count(m.tokens_per_s) << " tokens/s";
  out << "\n";
  out << "Bubble         " << format_percent(m.bubble_fraction) << " (per device:";
  if (m.devices.size() <= kListedDevices) {
    for (const DeviceMetrics& d : m.devices) out << " " << format_percent(d.bubble_fraction);
  } else {
    // Hundreds of figures say less than their range.
    std::vector<double> b;
    b.reserve(m.devices.size());
    for (const DeviceMetrics& d : m.devices) b.push_back(d.bubble_fraction);
    std::sort(b.begin(), b.end());
    out << " " << format_percent(b.front()) << " to " << format_percent(b.back()) << ", median "
        << format_percent(b[b.size() / 2]);
  }
  out << ")\n";
  out << "MFU            " << format_percent(m.mfu) << "\n";
  out << "Communication  " << format_seconds(simtime_to_seconds(m.comm_time)) << " of link time";
  if (m.allreduce_time > 0) {
    out << (r.zero >= 2 ? ", ZeRO reduce-scatters and all-gathers " : ", gradient all-reduce ")
        << format_seconds(simtime_to_seconds(m.allreduce_time));
  }
  if (m.tensor_time > 0) {
    out << ", " << exchanges_named(r) << " " << format_seconds(simtime_to_seconds(m.tensor_time));
  }
  out << ", recompute " << format_seconds(simtime_to_seconds(m.recompute_time)) << " in total\n";
  const std::optional<FullestDevice> fullest = fullest_device(r);
  if (!fullest) return;
  const DeviceMetrics* worst = &fullest->metrics;
  const std::size_t dev = fullest->device;
  const std::string& parts = fullest->parts;
  out << "Memory         ";
  if (m.fits()) {
    out << "fits: largest peak " << format_bytes(static_cast<double>(worst->peak_memory)) << " of "
        << format_bytes(static_cast<double>(worst->memory_capacity)) << " (device " << dev << ": "
        << parts << ")\n";
  } else {
    out << "DOES NOT FIT: device " << dev << " needs "
        << format_bytes(static_cast<double>(worst->peak_memory)) << " of "
        << format_bytes(static_cast<double>(worst->memory_capacity)) << " ("
        << format_bytes(static_cast<double>(worst->peak_memory - worst->memory_capacity))
        << " over; " << parts << ")\n";
  }
}

}  // namespace

std::optional<FullestDevice> fullest_device(const SimResult& r) {
  const std::vector<DeviceMetrics>& devices = r.metrics.devices;
  const auto worst =
      std::max_element(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
        return a.peak_memory - a.memory_capacity < b.peak_memory - b.memory_capacity;
      });
  if (worst == devices.end()) return std::nullopt;
  const auto dev = static_cast<std::size_t>(worst - devices.begin());
  const MemorySplit split = memory_split(r, static_cast<int>(dev));
  const auto bytes = [](Bytes b) { return format_bytes(static_cast<double>(b)); };
  return FullestDevice{dev, *worst,
                       "weights " + bytes(split.weights) + ", gradients " + bytes(split.gradients) +
                           ", optimizer " + bytes(split.optimizer) + ", activations " +
                           bytes(split.activations)};
}

std::string cut_source(const Scenario& sc, bool from_balance_flag) {
  if (!sc.training.cut) return "";
  return from_balance_flag ? "--balance" : sc.training.cut->field;
}

std::vector<int> stage_balance(const SimResult& r) {
  std::vector<int> out;
  out.reserve(r.stage_costs.size());
  for (const StageCost& c : r.stage_costs) out.push_back(c.layers.layer_count());
  return out;
}

namespace {

// Up to this many stages the cut lines list each one's layers.
constexpr std::size_t kListedStages = 32;

std::string cut_text(const SimResult& r) {
  const std::vector<int> b = stage_balance(r);
  return b.size() <= kListedStages ? balance_text(b)
                                   : std::to_string(b.size()) + " stages (--json lists them)";
}

std::string fit_note(const SimResult& r) {
  return r.metrics.fits() ? "" : ", does not fit";
}

}  // namespace

void print_cut_comparison(std::ostream& out, const SimResult& given, const SimResult& partitioned,
                          PartitionMethod method) {
  const double g = given.metrics.step_time_s();
  const double p = partitioned.metrics.step_time_s();
  out << "Given cut      " << cut_text(given) << ": " << format_seconds(g) << " a step"
      << fit_note(given) << "\n";
  out << "PipeScope cut  ";
  if (stage_balance(given) == stage_balance(partitioned)) {
    out << "the same (" << to_string(method) << ")\n";
    return;
  }
  const std::string change = format_signed_percent(g > 0 ? (p - g) / g : 0.0);
  out << cut_text(partitioned) << " (" << to_string(method) << "): " << format_seconds(p)
      << " a step, " << change << fit_note(partitioned) << "\n";
}

void print_summary(std::ostream& out, const Scenario& scenario, const SimResult& result,
                   std::string_view partition, int replicas) {
  print_header(out, scenario, result, partition, replicas);
  print_stage_table(out, result);
  print_totals(out, result);
}

}  // namespace pipescope::cli
