#include "costmodels/cluster.h"

#include <gtest/gtest.h>

#include <vector>

#include "costmodels/check.h"

namespace pipescope {
namespace {

Cluster four_devices(TopologyKind topology) {
  Cluster c;
  c.name = "test";
  c.devices = 4;
  c.interconnect = {topology, 10e9, 2e-6};
  return c;
}

std::vector<std::int64_t> links_of(const std::vector<Hop>& hops) {
  std::vector<std::int64_t> links;
  for (const Hop& h : hops) links.push_back(h.link);
  return links;
}

using Links = std::vector<std::int64_t>;

TEST(Cluster, AllToAllIsOneDirectHop) {
  const Cluster c = four_devices(TopologyKind::kAllToAll);
  EXPECT_EQ(c.link_count(), 16);
  const std::vector<Hop> hops = c.route(1, 3);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_EQ(hops[0].link, 7);
  EXPECT_EQ(hops[0].bandwidth, 10e9);
  EXPECT_EQ(hops[0].latency_s, 2e-6);
  EXPECT_EQ(links_of(c.route(3, 1)), Links{13});
  EXPECT_EQ(links_of(c.route(0, 1)), Links{1});
  EXPECT_TRUE(c.route(2, 2).empty());
  EXPECT_EQ(c.link_name(7), "1->3");
  EXPECT_EQ(c.link_name(13), "3->1");
}

TEST(Cluster, PcieGoesThroughTheHost) {
  const Cluster c = four_devices(TopologyKind::kPcieHost);
  EXPECT_EQ(c.link_count(), 8);
  const std::vector<Hop> hops = c.route(1, 3);
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(links_of(hops), (Links{2, 7}));
  for (const Hop& h : hops) {
    EXPECT_EQ(h.bandwidth, 10e9);
    EXPECT_EQ(h.latency_s, 2e-6);
  }
  EXPECT_EQ(links_of(c.route(3, 0)), (Links{6, 1}));
  EXPECT_TRUE(c.route(0, 0).empty());
  EXPECT_EQ(c.link_name(2), "1->host");
  EXPECT_EQ(c.link_name(7), "host->3");
  EXPECT_EQ(c.link_name(0), "0->host");
}

TEST(Cluster, RingTakesTheShorterWayClockwiseOnATie) {
  const Cluster c = four_devices(TopologyKind::kRing);
  EXPECT_EQ(c.link_count(), 8);
  EXPECT_EQ(links_of(c.route(0, 1)), Links{0});
  EXPECT_EQ(links_of(c.route(0, 3)), Links{1});
  EXPECT_EQ(links_of(c.route(2, 1)), Links{5});
  EXPECT_EQ(links_of(c.route(0, 2)), (Links{0, 2}));
  EXPECT_EQ(links_of(c.route(1, 3)), (Links{2, 4}));
  EXPECT_EQ(links_of(c.route(3, 1)), (Links{6, 0}));
  EXPECT_EQ(links_of(c.route(3, 0)), Links{6});
  for (const Hop& h : c.route(3, 1)) {
    EXPECT_EQ(h.bandwidth, 10e9);
    EXPECT_EQ(h.latency_s, 2e-6);
  }
  EXPECT_EQ(c.link_name(0), "0->1");
  EXPECT_EQ(c.link_name(1), "0->3");
  EXPECT_EQ(c.link_name(6), "3->0");
  EXPECT_EQ(c.link_name(5), "2->1");
}

TEST(Cluster, RingOfFiveWalksCounterClockwiseWhenShorter) {
  Cluster c = four_devices(TopologyKind::kRing);
  c.devices = 5;
  EXPECT_EQ(links_of(c.route(0, 3)), (Links{1, 9}));  // 0 -> 4 -> 3
  EXPECT_EQ(links_of(c.route(0, 2)), (Links{0, 2}));  // 0 -> 1 -> 2
}

TEST(Cluster, OutOfRangeIsABug) {
  const Cluster c = four_devices(TopologyKind::kAllToAll);
  EXPECT_THROW(c.route(0, 4), InternalError);
  EXPECT_THROW(c.route(-1, 0), InternalError);
  EXPECT_THROW(c.link_name(16), InternalError);
}

}  // namespace
}  // namespace pipescope
