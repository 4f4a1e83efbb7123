#pragma once
// The devices of one pipeline and the routes between them. Every device of a
// cluster is of the same kind in this version.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "costmodels/device.h"
#include "costmodels/topology.h"
#include "costmodels/units.h"

namespace pipescope {

// One directed link a transfer occupies. Links are full duplex: each direction is
// its own LinkId and queues its own transfers.
struct Hop {
  std::int64_t link = 0;   // index of the directed link, < Cluster::link_count()
  double bandwidth = 0.0;  // bytes/s
  double latency_s = 0.0;
  bool network = false;  // a NIC's link between nodes (the nodes topology)
};

struct Profile;  // costmodels/profile.h

// Which model costs the layers when no profile is given: the roofline of
// costmodels/cost_model.h, or the kernel-level model of
// costmodels/kernel_cost_model.h (the default where the device has a kernel
// table).
enum class CostModelKind : std::uint8_t { kAnalytic, kKernels };
std::string_view to_string(CostModelKind k);
std::optional<CostModelKind> parse_cost_model_kind(std::string_view name);  // "analytic", "kernels"

// How a job's ranks map onto the cluster's devices, fastest-varying first: T
// tensor-parallel devices of a group side by side, then either a pipeline's
// stages (tp-pp-dp: a replica's K groups consecutive, replicas outermost) or
// the D replicas of a stage (tp-dp-pp: Megatron-LM's and DeepSpeed's order,
// stages outermost).
enum class RankOrder : std::uint8_t { kTpPpDp, kTpDpPp };
std::string_view to_string(RankOrder order);
std::optional<RankOrder> parse_rank_order(std::string_view name);

// What a stage does while its output travels to the next stage: computes on
// (`overlapped`: torchgpipe's copy streams, PyTorch's pipelining), waits for
// the send to arrive before its next op (`blocking`: Megatron-LM and
// DeepSpeed wait on every send of their pipeline schedules), or waits only
// in the warm-up and the cool-down (`overlapped-steady`: megatron-core's
// interleaved schedule, whose overlap_p2p_comm covers the steady state and
// overlap_p2p_comm_warmup_flush, off by default, the rest). The warm-up is a
// device's forwards before the last one ahead of its first backward, the
// cool-down its backwards after its last forward.
enum class P2pMode : std::uint8_t { kOverlapped, kBlocking, kOverlappedSteady };
std::string_view to_string(P2pMode mode);
// "overlapped", "blocking", "overlapped-steady"
std::optional<P2pMode> parse_p2p_mode(std::string_view name);
inline constexpr const char* kP2pModeNames = "overlapped, overlapped-steady, blocking";

struct Cluster {
  std::string name;  // preset name, or the device name for an explicit cluster
  // The devices the pipeline sees. Under tensor parallelism each is a group of
  // `tensor_parallel` physical devices that split every layer: physical devices
  // g T to g T + T - 1 form group g (inside one node when T divides the node's
  // devices), and a route between groups runs between their first devices.
  // Under context parallelism a group is C such sets of T, each holding
  // 1 / C of the sequence (Megatron-LM's tp-cp order: the T ranks of one
  // share of the sequence consecutive, the C shares next): group_size().
  int devices = 1;
  int tensor_parallel = 1;
  int context_parallel = 1;
  int group_size() const { return tensor_parallel * context_parallel; }
  // How many of the expert-parallel ranks one share's T devices hold: 1
  // where the experts split over the T as the dense layers do, T where each
  // device holds whole experts ("parallel folding", TensorSplit::expert_ways
  // 1): the E then spread over E of the T x C x D devices, tensor ranks first.
  int expert_fold = 1;
  // The expert ranks exchange tokens by DeepEP's kernels (training.
  // moe_dispatcher deepep; deepep_alltoall_seconds) instead of NCCL's
  // all-to-all.
  bool deepep = false;
  RankOrder rank_order = RankOrder::kTpPpDp;
  P2pMode p2p = P2pMode::kOverlapped;
  // The same in schedules of several chunks a device (interleaved), where
  // frameworks may exchange otherwise (Megatron-Core overlaps them).
  P2pMode p2p_interleaved = P2pMode::kOverlapped;
  P2pMode p2p_mode(bool chunked) const { return chunked ? p2p_interleaved : p2p; }
  // Under tensor parallelism, where every device of a group holds a cut's
  // whole tensor (no sequence parallelism): each sends 1 / T of it and the
  // receiving group all-gathers it (Megatron-LM's scatter-gather of pipeline
  // tensors, Narayanan et al. 2021 section 4.1; DeepSpeed's partitioned
  // pipeline sends). False: each sends its whole copy (PyTorch's pipelining,
  // the executor).
  bool p2p_split = false;
  // In one replica's copy of the cluster (replica_scenario): its device g is
  // the whole cluster's group g x group_stride (D under tp-dp-pp, else 1), on
  // the whole cluster's graph. Flat topologies (all-to-all, PCIe through the
  // host) give every pair of groups alike links, and a ring is taken as the
  // replica's own, so only graph-routed ones use the stride.
  int group_stride = 1;
  // In one replica's copy: D, the replicas that run the same schedule beside
  // it, sending what it sends at the same moments (1 in the whole cluster).
  int replicas = 1;
  Device device;
  Interconnect interconnect;
  // Measured figures (`--cost-model PROFILE`): the cost model answers from the
  // profile and the interconnect is the profile's transport. Null: the device's
  // roofline.
  std::shared_ptr<const Profile> profile;
  CostModelKind cost_model = CostModelKind::kAnalytic;
  // Devices that share this many cores (a CPU run with more stages than cores):
  // a compute op holds one core for its whole duration, cores go to ops in the
  // order they become ready. 0: every device has its own.
  int shared_cores = 0;
  // Measured (`--cost-model`): how much slower an op runs while n devices compute
  // at once, [n - 1]; [0] is 1. Empty: devices do not slow each other down.
  std::vector<double> concurrency_slowdown;
  // The network as a graph, for topologies that need one (kNodes, kTorus, a
  // kPcieHost tree with switches): built by
  // build_topology() for `devices` devices; routes of a copy with fewer devices
  // (one pipeline replica) stay valid.
  std::shared_ptr<const TopologyGraph> graph;
  // Builds `graph` when the topology needs one, for every physical device:
  // clusters of one shape share a graph, and so the routes it has found.
  // Throws std::invalid_argument on an impossible topology.
  void build_topology();
  int physical_devices() const { return devices * group_size(); }
  // The whole cluster's first physical device of this copy's group g (where
  // its rank runs under the rank order).
  int first_physical_device(int group) const { return physical_device(group, 0, 0); }
  // The whole cluster's physical device of rank `rank` (< group_size(): the
  // tensor rank, plus T times the context rank) of this copy's group g in
  // replica r (< replicas), under the rank order.
  int physical_device(int group, int rank, int replica) const;
  // Whether a node's devices share fewer NICs than they are
  // (Interconnect::nics_per_node): only then do the copies of a transfer that
  // a group's devices and the replicas send at once meet on a link.
  bool shares_nics() const;
  // `n` of the pipeline's devices in words: "8 devices", or "8 groups of T=4
  // devices" under tensor parallelism.
  std::string devices_text(std::int64_t n) const;

  // Directed links of the topology: all-to-all has devices*devices slots (i -> j),
  // pcie-host two per device (up to the host, down from it) and, with switches,
  // two per switch, ring two per device (clockwise, counter-clockwise).
  std::int64_t link_count() const;
  // The hops a transfer from device (group) src to dst takes, in order. Empty
  // when src == dst. Through-host routes take two hops; ring routes take the
  // shorter way round (clockwise on a tie).
  // With shared NICs (shares_nics) each hop's bandwidth is its share while the
  // group's T devices and the `replicas` copies all send theirs at once
  // (loaded_route).
  std::vector<Hop> route(int src, int dst) const;
  // How many transfers that run at once cross each directed link.
  using LinkLoad = std::unordered_map<std::int64_t, int>;
  void add_load(LinkLoad& load, int src, int dst) const;  // physical devices
  // physical_route(src, dst) with each hop's bandwidth divided by its load
  // (at least 1: the transfer itself).
  std::vector<Hop> loaded_route(int src, int dst, const LinkLoad& load) const;
  // The same between physical devices (< physical_devices()).
  std::vector<Hop> physical_route(int src, int dst) const;
  // A short name for a directed link, for traces ("0->1", "2->host", "host->3").
  std::string link_name(std::int64_t link) const;
  // The share of a link's peak bandwidth a copy achieves: the kernel table's
  // link_efficiency (network_efficiency for a NIC's link between nodes) under
  // the kernels model, 1 otherwise (the analytic model's links run at peak; a
  // profile's transport is measured).
  double achievable_fraction(bool network = false) const;
  // Whether collectives run as NCCL runs them (costmodels/collective.h): GPUs
  // costed kernel by kernel.
  bool nccl() const;
  // Whether the topology is routed on `graph`.
  bool uses_graph() const;
};

}  // namespace pipescope
