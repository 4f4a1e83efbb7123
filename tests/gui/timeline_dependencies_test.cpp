// dependencies_of through the layout's index against a scan of every item with
// the rules of DESIGN.md ("Ops"), on simulated and on random timelines.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gui/timeline_layout.h"
#include "sim/simulator.h"
#include "tests/sim/sim_fixtures.h"

namespace pipescope::gui {
namespace {

struct Rule {
  EventKind kind;
  int stage;
  bool before;
  bool any_micro_batch = false;
};

// The rules, written out again for the scan: an op's inputs and outputs by
// kind and stage, the same micro-batch unless any_micro_batch.
std::vector<Rule> rules(const TimelineEvent& me) {
  const int s = me.stage;
  using K = EventKind;
  switch (me.kind) {
    case K::kForward:
      return {{K::kActivation, s - 1, true},
              {K::kForward, s - 1, true},
              {K::kActivation, s, false},
              {K::kForward, s + 1, false}};
    case K::kRecompute:
      return {{K::kForward, s, true}, {K::kBackward, s, false}};
    case K::kBackward:
      return {{K::kGradient, s + 1, true}, {K::kBackward, s + 1, true},
              {K::kForward, s, true},      {K::kRecompute, s, true},
              {K::kGradient, s, false},    {K::kBackward, s - 1, false},
              {K::kWeight, s, false}};
    case K::kWeight:
      return {{K::kBackward, s, true}, {K::kOptimizer, s, false, true}};
    case K::kOptimizer:
      return {{K::kBackward, s, true, true},
              {K::kWeight, s, true, true},
              {K::kAllReduce, s, true, true}};
    case K::kAllReduce:
      return {{K::kBackward, s, true, true},
              {K::kWeight, s, true, true},
              {K::kOptimizer, s, false, true}};
    case K::kActivation:
    case K::kGradient: {
      const K op = me.kind == K::kActivation ? K::kForward : K::kBackward;
      const int to = me.peer_stage.value_or(me.kind == K::kActivation ? s + 1 : s - 1);
      return {{op, s, true}, {op, to, false}};
    }
  }
  return {};
}

// Every item of the same source against the rules: the other half of a
// transfer (same flow, other lane) first, else the first rule that matches.
Dependencies scan(const TimelineLayout& layout, const std::vector<const Timeline*>& sources,
                  std::size_t item) {
  Dependencies deps;
  const auto event = [&](std::size_t i) -> const TimelineEvent& {
    return sources[static_cast<std::size_t>(layout.items[i].source)]->events[layout.items[i].event];
  };
  const TimelineEvent& me = event(item);
  const bool transfer = me.kind == EventKind::kActivation || me.kind == EventKind::kGradient;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    if (i == item || layout.items[i].source != layout.items[item].source) continue;
    const TimelineEvent& e = event(i);
    if (transfer && me.flow && e.flow == me.flow) {
      if (e.lane != me.lane) (me.lane == Lane::kSend ? deps.after : deps.before).push_back(i);
      continue;
    }
    for (const Rule& r : rules(me)) {
      if (e.kind == r.kind && e.stage == r.stage &&
          (r.any_micro_batch || e.micro_batch == me.micro_batch)) {
        (r.before ? deps.before : deps.after).push_back(i);
        break;
      }
    }
  }
  return deps;
}

void expect_same_as_scan(const TimelineLayout& layout,
                         const std::vector<const Timeline*>& sources) {
  std::size_t related = 0;
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    const Dependencies want = scan(layout, sources, i);
    const Dependencies got = dependencies_of(layout, sources, i);
    ASSERT_EQ(got.before, want.before) << "item " << i;
    ASSERT_EQ(got.after, want.after) << "item " << i;
    related += want.before.size() + want.after.size();
  }
  EXPECT_GT(related, layout.items.size());  // the timelines had dependencies to find
}

TEST(TimelineDependencies, OfEveryOpOfASimulatedRunAndItsMeasuredCopy) {
  // K=4, M=6, GPipe with remat, and its copy 100 ns late as a second source.
  Scenario sc = testing::uniform_scenario(8, 4, 1000.0, 6, 6, true);
  for (LayerSpec& l : sc.model.layers) l.out_bytes = 1000;
  SimConfig config;
  config.stages = 4;
  const SimResult r = simulate(sc, config);
  Timeline late = r.timeline;
  for (TimelineEvent& e : late.events) e.start += 100, e.end += 100;
  const std::vector<const Timeline*> sources{&r.timeline, &late};
  expect_same_as_scan(layout_timelines(sources, {"", "measured"}, true), sources);
  expect_same_as_scan(layout_timelines(sources, {"", "measured"}, false), sources);
}

// Events of every kind with small stages and micro-batches (negative ones
// too, as in a corrupt trace), transfers with flows that several share or none.
Timeline random_timeline(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> kind(0, 7), stage(-1, 4), mb(-1, 5), device(0, 3),
      start(0, 10'000), duration(0, 50), flow(-1, 40), peer(-1, 4);
  Timeline t;
  t.device_names = {"d0", "d1", "d2", "d3"};
  for (std::size_t i = 0; i < n; ++i) {
    TimelineEvent e;
    e.kind = static_cast<EventKind>(kind(rng));
    const bool transfer = e.kind == EventKind::kActivation || e.kind == EventKind::kGradient;
    // Now and then a transfer on the compute lane, as a corrupt trace may have.
    e.lane = transfer ? static_cast<Lane>(rng() % 3)
                      : (e.kind == EventKind::kAllReduce ? Lane::kSend : Lane::kCompute);
    e.device = device(rng);
    e.stage = stage(rng);
    e.micro_batch = mb(rng);
    e.start = start(rng);
    e.end = e.start + duration(rng);
    if (transfer) {
      if (const int f = flow(rng); f >= 0) e.flow = static_cast<std::uint64_t>(f);
      if (const int p = peer(rng); p >= 0) e.peer_stage = p;
    }
    t.events.push_back(e);
  }
  return t;
}

TEST(TimelineDependencies, OfEveryItemOfRandomTimelines) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const Timeline a = random_timeline(1'500, seed), b = random_timeline(500, seed + 100);
    const std::vector<const Timeline*> sources{&a, &b};
    expect_same_as_scan(layout_timelines(sources, {"", "measured"}, true), sources);
  }
}

}  // namespace
}  // namespace pipescope::gui
