#pragma once
// How long a collective takes as NCCL runs it on GPUs: NCCL picks, for each
// call, the algorithm and protocol of least predicted time from its own
// latency and bandwidth model (src/graph/tuning.cc), and its measured times
// follow that model (nccl-tests). The model here is that choice:
//
//   time = base(protocol) + steps x hop(protocol, link) + bytes moved / (busbw x factor(protocol))
//
// over the ring's protocols LL, LL128 and Simple (and, across nodes, the tree
// for an all-reduce), the least of them. A ring all-reduce over n ranks
// takes 2 (n - 1) steps and moves 2 (n - 1) / n of the buffer through every
// rank; a reduce-scatter or an all-gather half of that; the steps that cross
// between nodes pay the network's hop latency, the others the node's. The
// bus bandwidth `busbw` is what a large message reaches on the slowest link
// of the ring (the link's peak times its achievable fraction: about 0.78 of
// NVLink, 0.96 of an InfiniBand NIC, as nccl-tests measure). So small
// messages pay ten to tens of microseconds and reach their bandwidth only
// from megabytes on, as nccl-tests show (docs/models.md, "Collectives").

#include <cstdint>

namespace pipescope {

enum class Collective : std::uint8_t { kAllReduce, kReduceScatter, kAllGather };
// What the ring's hops inside a node run over.
enum class LinkClass : std::uint8_t { kNvlink, kPcie };

struct CollectiveGroup {
  int ranks = 1;
  int nodes =
      1;  // the nodes the ranks span; the ring crosses between them nodes - 1 times each way
  LinkClass intra = LinkClass::kNvlink;
  double busbw = 0.0;  // bytes/s
};

// Seconds for one collective of `bytes` (the whole buffer) over `group`;
// 0 for one rank or no bytes.
double nccl_seconds(Collective c, double bytes, const CollectiveGroup& group);

// An all-to-all among `ranks` devices, `per_node` of them on each of the nodes
// it spans, each device reaching the others of its node at `intra_bw` and
// those of other nodes at `inter_bw` (bytes/s; its network link). NCCL runs
// it as one send and one receive to every other rank, all at once
// (ncclGroupStart/End around ncclSend/ncclRecv): a device sends 1 / ranks of
// its buffer to each, the shares for its own node over the node's links and
// the rest over its network link at the same time, so the slower of the two
// sets the time; one call's latency, the Simple protocol's base and a step
// over the slowest link the exchange crosses.
struct AllToAllGroup {
  int ranks = 1;
  int per_node = 1;
  LinkClass intra = LinkClass::kNvlink;
  double intra_bw = 0.0;
  double inter_bw = 0.0;
};
// Seconds on the wire of one all-to-all in which every rank sends `bytes` (its
// whole buffer, its own share included): 1/ranks of it to each peer, the
// node's share over the intra-node link and the rest over the network at once,
// each at `efficiency` of its bandwidth; the slower sets the time. 0 for one
// rank or no bytes.
double alltoall_wire_seconds(double bytes, const AllToAllGroup& group, double efficiency);
// The same all-to-all as NCCL runs it: the Simple protocol's call latency and
// one step, then the wire time at its efficiency; 0 for one rank or no bytes.
double nccl_alltoall_seconds(double bytes, const AllToAllGroup& group);

// How many copies of a token DeepEP's normal kernels move (DeepSeek-AI 2025,
// github.com/deepseek-ai/DeepEP; the DeepSeek-V3 report, section 3.2.2): a
// token goes once over the network to each other node that holds any of its
// top_k experts, landing on the GPU of its sender's index there, and from
// there, as from its sender on its own node, once over NVLink to each other
// GPU that holds any of them. With `experts` spread evenly over the group's
// ranks and a token's top_k drawn at random without repeats (a balanced
// router), a rank is hit with p_r = 1 - C(experts - x, k) / C(experts, k)
// for its x experts, a node with p_n likewise for its per_node x: the
// network carries (nodes - 1) p_n copies, the node's links (ranks - nodes)
// p_r. The combine sends the same back, reduced within a node first.
struct DeepEpCopies {
  double network = 0.0;
  double nvlink = 0.0;
};
DeepEpCopies deepep_copies(int experts, int top_k, const AllToAllGroup& group);
// One DeepEP dispatch (or combine) in which each device routes tokens of
// `token_bytes` in all (one copy each): the copies above over the two
// links at once, at NCCL's Simple protocol's efficiency and latency (DeepEP
// publishes no model of its own; its kernels move the data as NCCL's do,
// over the same links), the slower setting the time; 0 for one rank.
double deepep_alltoall_seconds(double token_bytes, int experts, int top_k,
                               const AllToAllGroup& group);

}  // namespace pipescope
