// The dependency rules as the desktop app relates events (related_kinds, read
// off sim/engine/op_dependencies.h), and dependencies_of through the layout's index
// against a scan of every item with those rules, on simulated and on random
// timelines.

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gui/timeline_layout.h"
#include "sim/engine/simulator.h"
#include "tests/sim/sim_fixtures.h"

namespace pipescope::gui {
namespace {

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
  const std::vector<RelatedKind> rules = related_kinds(me);
  for (std::size_t i = 0; i < layout.items.size(); ++i) {
    if (i == item || layout.items[i].source != layout.items[item].source) continue;
    const TimelineEvent& e = event(i);
    if (transfer && me.flow && e.flow == me.flow) {
      if (e.lane != me.lane) (me.lane == Lane::kSend ? deps.after : deps.before).push_back(i);
      continue;
    }
    for (const RelatedKind& r : rules) {
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

// (kind, stage, before, any micro-batch) of each related kind, as text.
std::vector<std::string> kinds_of(const TimelineEvent& e) {
  std::vector<std::string> out;
  for (const RelatedKind& r : related_kinds(e)) {
    out.push_back(std::string(r.before ? "<" : ">") + std::string(to_string(r.kind)) + " " +
                  std::to_string(r.stage) + (r.any_micro_batch ? " *" : ""));
  }
  return out;
}

TimelineEvent event(EventKind kind, int stage, std::optional<int> peer = std::nullopt) {
  TimelineEvent e;
  e.kind = kind;
  e.stage = stage;
  e.peer_stage = peer;
  return e;
}

TEST(TimelineDependencies, RelatedKindsFollowTheScheduleRules) {
  using K = EventKind;
  const auto name = [](K k) { return std::string(to_string(k)); };
  const std::string act = name(K::kActivation), grad = name(K::kGradient), ar = name(K::kAllReduce),
                    f = name(K::kForward), r = name(K::kRecompute), b = name(K::kBackward),
                    w = name(K::kWeight), o = name(K::kOptimizer);
  using V = std::vector<std::string>;
  // F(2): the activation from stage 1 and F(1) before; its own activation out,
  // F(3), and R(2) and B(2) of its stage after.
  EXPECT_EQ(kinds_of(event(K::kForward, 2)), (V{"<" + act + " 1", "<" + f + " 1", ">" + act + " 2",
                                                ">" + f + " 3", ">" + r + " 2", ">" + b + " 2"}));
  // B(2): the gradient from 3 and B(3), F(2), R(2) before; the gradient it sends,
  // B(1), W(2), and the all-reduce and optimizer step of stage 2 after.
  EXPECT_EQ(kinds_of(event(K::kBackward, 2)),
            (V{"<" + grad + " 3", "<" + b + " 3", "<" + f + " 2", "<" + r + " 2", ">" + grad + " 2",
               ">" + b + " 1", ">" + w + " 2", ">" + ar + " 2 *", ">" + o + " 2 *"}));
  // The optimizer step: every B and W of its stage, through the all-reduce.
  EXPECT_EQ(kinds_of(event(K::kOptimizer, 1)),
            (V{"<" + ar + " 1 *", "<" + b + " 1 *", "<" + ar + " 1 *", "<" + w + " 1 *"}));
  // A gradient sent by stage 3 goes to 2, or to the stage a trace names.
  EXPECT_EQ(kinds_of(event(K::kGradient, 3)), (V{"<" + b + " 3", ">" + b + " 2"}));
  EXPECT_EQ(kinds_of(event(K::kActivation, 3, 7)), (V{"<" + f + " 3", ">" + f + " 7"}));
  EXPECT_EQ(kinds_of(event(K::kAllReduce, 0)),
            (V{"<" + b + " 0 *", ">" + o + " 0 *", "<" + w + " 0 *", ">" + o + " 0 *"}));
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
