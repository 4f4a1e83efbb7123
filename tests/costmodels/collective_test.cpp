// NCCL's collectives as its tuning model prices them (costmodels/collective.h),
// by hand.

#include "costmodels/collective.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace pipescope {
namespace {

constexpr double kUs = 1e-6;

TEST(Collective, OneRankOrNoBytesCostNothing) {
  EXPECT_EQ(nccl_seconds(Collective::kAllReduce, 1e6, {1, 1, LinkClass::kNvlink, 1e11}), 0.0);
  EXPECT_EQ(nccl_seconds(Collective::kAllReduce, 0.0, {8, 1, LinkClass::kNvlink, 1e11}), 0.0);
}

// Eight GPUs of a node over NVLink at 240 GB/s: a tiny all-reduce takes LL's
// latency, 6.6 + 14 steps x 0.6 us; a large one Simple's bandwidth,
// 2 x 7 / 8 of the buffer through each rank after 8.4 + 14 x 3.4 us.
TEST(Collective, SmallMessagesPayLatencyLargeOnesBandwidth) {
  const CollectiveGroup node{8, 1, LinkClass::kNvlink, 240e9};
  const double tiny = nccl_seconds(Collective::kAllReduce, 8.0, node);
  EXPECT_NEAR(tiny, (6.6 + 14 * 0.6) * kUs + 8.0 * 14 / 8 / (240e9 * 0.5), 1e-12);
  const double big = nccl_seconds(Collective::kAllReduce, 1e9, node);
  EXPECT_NEAR(big, (8.4 + 14 * 3.4) * kUs + 1e9 * 14 / 8 / 240e9, 1e-12);
  // 21 MB: LL128's 0.92 of the bandwidth after 14 + 14 x 1.9 us beats
  // Simple's full bandwidth after 56 us, and both beat the bare ring.
  const double mid = nccl_seconds(Collective::kAllReduce, 21e6, node);
  const double ll128 = (14.0 + 14 * 1.9) * kUs + 21e6 * 14 / 8 / (240e9 * 0.92);
  const double simple = (8.4 + 14 * 3.4) * kUs + 21e6 * 14 / 8 / 240e9;
  EXPECT_NEAR(mid, std::min(ll128, simple), 1e-12);
  EXPECT_GT(mid, 21e6 * 14 / 8 / 240e9);
}

// A reduce-scatter (and an all-gather) runs half the steps and moves half
// the bytes of an all-reduce.
TEST(Collective, AReduceScatterIsHalfARing) {
  const CollectiveGroup node{4, 1, LinkClass::kNvlink, 100e9};
  EXPECT_NEAR(nccl_seconds(Collective::kReduceScatter, 1e9, node),
              (8.4 + 3 * 3.4) * kUs + 1e9 * 3 / 4 / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(nccl_seconds(Collective::kAllGather, 1e9, node),
                   nccl_seconds(Collective::kReduceScatter, 1e9, node));
}

// Across 64 nodes, one rank each: the ring's 126 network steps cost
// latency that the tree's 2 log2(64) = 12 do not, for a small buffer; a
// large one takes the ring's full bandwidth over the tree's 0.92.
TEST(Collective, AcrossNodesTheTreeWinsSmallBuffersTheRingLargeOnes) {
  const CollectiveGroup nodes{64, 64, LinkClass::kNvlink, 24e9};
  const double small = nccl_seconds(Collective::kAllReduce, 4096.0, nodes);
  const double tree_ll = (6.8 + 2 * 6 * 5.0) * kUs + 2 * 4096.0 / (24e9 / 3.8);
  EXPECT_NEAR(small, tree_ll, 1e-12);
  const double large = nccl_seconds(Collective::kAllReduce, 4e9, nodes);
  const double ring_simple = (8.4 + 126 * 28.0) * kUs + 4e9 * 126 / 64 / 24e9;
  EXPECT_NEAR(large, ring_simple, 1e-12);
}

// Over PCIe the ring's steps cost PCIe's latencies.
TEST(Collective, PcieStepsCostMore) {
  const double nvlink = nccl_seconds(Collective::kAllReduce, 8.0, {8, 1, LinkClass::kNvlink, 1e10});
  const double pcie = nccl_seconds(Collective::kAllReduce, 8.0, {8, 1, LinkClass::kPcie, 1e10});
  EXPECT_NEAR(pcie - nvlink, 14 * (1.0 - 0.6) * kUs, 1e-12);
}

// An all-to-all sends 1 / n of each rank's buffer to each other rank at
// once. Eight GPUs of a node over NVLink at 240 GB/s: 7 / 8 of 64 MB leave
// each GPU over its NVLink after Simple's 8.4 + 3.4 us.
TEST(Collective, AnAllToAllInsideANode) {
  const AllToAllGroup node{8, 8, LinkClass::kNvlink, 240e9, 0.0};
  EXPECT_NEAR(nccl_alltoall_seconds(64e6, node), (8.4 + 3.4) * kUs + 64e6 * 7 / 8 / 240e9, 1e-12);
  EXPECT_EQ(nccl_alltoall_seconds(64e6, {1, 1, LinkClass::kNvlink, 240e9, 0.0}), 0.0);
  EXPECT_EQ(nccl_alltoall_seconds(0.0, node), 0.0);
}

// 32 ranks over 4 nodes, 8 a node: 7 / 32 of the buffer over NVLink at 240
// GB/s and, at the same time, 24 / 32 over the GPU's 50 GB/s NIC, which
// sets the time, after 8.4 us and a network step of 28 us.
TEST(Collective, AnAllToAllAcrossNodesWaitsForTheNetwork) {
  const AllToAllGroup nodes{32, 8, LinkClass::kNvlink, 240e9, 50e9};
  EXPECT_NEAR(nccl_alltoall_seconds(64e6, nodes), (8.4 + 28.0) * kUs + 64e6 * 24 / 32 / 50e9,
              1e-12);
  // One rank a node: everything crosses the network.
  const AllToAllGroup spread{4, 1, LinkClass::kNvlink, 0.0, 50e9};
  EXPECT_NEAR(nccl_alltoall_seconds(64e6, spread), (8.4 + 28.0) * kUs + 64e6 * 3 / 4 / 50e9, 1e-12);
}

// DeepEP sends a token once to each other node that holds any of its
// experts and once to each other GPU: 4 experts over 4 ranks, 2 a node, a
// token's 2 of them one of 6 pairs. The other node is missed only by the
// pair of the sender's own node's two (1 / 6): 5 / 6 of a copy over the
// network. A GPU is hit by the 3 pairs that hold its expert (1 / 2), and
// each token lands on one GPU a node: (4 ranks - 2 landings) x 1 / 2 = 1
// copy over NVLink.
TEST(Collective, DeepEpSendsATokenOnceToEachNodeAndGpu) {
  const AllToAllGroup two_nodes{4, 2, LinkClass::kNvlink, 240e9, 50e9};
  const DeepEpCopies c = deepep_copies(4, 2, two_nodes);
  EXPECT_NEAR(c.network, 5.0 / 6.0, 1e-12);
  EXPECT_NEAR(c.nvlink, 1.0, 1e-12);
  // 64 MB of tokens: the network's 5 / 6 copy at 50 GB/s sets the time,
  // after NCCL's latency across nodes (8.4 + 28 us); NCCL's all-to-all of
  // the 2 copies sends 2 / 4 of 128 MB over the network.
  EXPECT_NEAR(deepep_alltoall_seconds(64e6, 4, 2, two_nodes),
              (8.4 + 28.0) * kUs + 64e6 * 5.0 / 6.0 / 50e9, 1e-12);
  EXPECT_NEAR(nccl_alltoall_seconds(128e6, two_nodes), (8.4 + 28.0) * kUs + 128e6 * 2 / 4 / 50e9,
              1e-12);
  // One node of 8, 2 of 16 experts a GPU: a GPU is missed by C(14, 2) /
  // C(16, 2) = 91 / 120 of the pairs, so 7 x 29 / 120 copies over NVLink.
  const AllToAllGroup node{8, 8, LinkClass::kNvlink, 240e9, 0.0};
  EXPECT_EQ(deepep_copies(16, 2, node).network, 0.0);
  EXPECT_NEAR(deepep_alltoall_seconds(64e6, 16, 2, node),
              (8.4 + 3.4) * kUs + 64e6 * 7.0 * 29.0 / 120.0 / 240e9, 1e-12);
  EXPECT_EQ(deepep_alltoall_seconds(64e6, 16, 2, {1, 1, LinkClass::kNvlink, 240e9, 0.0}), 0.0);
  // A top-8 token of 128 experts over 32 GPUs in 4 nodes (4 experts a GPU,
  // 32 a node): it misses a node with C(96, 8) / C(128, 8) = 0.0927 and a
  // GPU with C(124, 8) / C(128, 8) = 0.7700, so 3 x 0.9073 = 2.72 copies
  // cross the network (NCCL's all-to-all: 8 x 24 / 32 = 6) and 28 x 0.2300
  // = 6.44 NVLink (NCCL's: 8 x 7 / 32 = 1.75).
  const DeepEpCopies wide = deepep_copies(128, 8, {32, 8, LinkClass::kNvlink, 240e9, 50e9});
  EXPECT_NEAR(wide.network, 2.72, 0.005);
  EXPECT_NEAR(wide.nvlink, 6.44, 0.005);
}

}  // namespace
}  // namespace pipescope
