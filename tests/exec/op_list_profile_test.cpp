// The profiler's passes and a plan's op lists timed as its devices run them:
// which ops run and are timed (exact counts per layer and kind), the ranges a
// model is cut into, the clocks, and the profile a plan's op lists give. Times
// are checked for being measured at all (positive), never for their size.

#include "exec/op_list_profile.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "../tiny_models.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/profile_passes.h"
#include "exec/profiler.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec {
namespace {

using testing::tiny_transformer;

// The tiny model's layers (embed, `blocks` blocks, head), a batch of 2 and
// every layer's input.
struct Bench {
  ModelSpec spec;
  LayerList layers;
  MicroBatch mb;
  Context ctx;
  std::vector<Tensor> inputs;

  explicit Bench(int blocks)
      : spec(tiny_transformer(blocks)),
        layers(build_layers(spec, 1)),
        mb(whole_batch(task_shape(spec), 2, 0, 1)),
        ctx{mb.batch, mb.seq, &mb.targets, 1.0 / (2.0 * mb.seq)},
        inputs(layer_inputs(layers, mb.input, ctx)) {}
};

// Stage s of `plan` holds ranges[s].
PlanStages stages_of(Schedule schedule, std::vector<LayerRange> ranges) {
  return PlanStages{std::move(schedule), std::move(ranges)};
}

TEST(ProfilerRanges, CutContiguouslyTheFirstOnesLonger) {
  EXPECT_EQ(even_ranges(5, 1), (std::vector<LayerRange>{{0, 5}}));
  EXPECT_EQ(even_ranges(5, 2), (std::vector<LayerRange>{{0, 3}, {3, 5}}));
  EXPECT_EQ(even_ranges(6, 3), (std::vector<LayerRange>{{0, 2}, {2, 4}, {4, 6}}));
  EXPECT_EQ(even_ranges(3, 3), (std::vector<LayerRange>{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_THROW(even_ranges(2, 3), std::invalid_argument);
  EXPECT_THROW(even_ranges(2, 0), std::invalid_argument);
}

TEST(ProfilerClocks, OtherWorkIsTheWallTimeTheThreadDidNotRun) {
  PassClocks c{1000, 750};
  EXPECT_DOUBLE_EQ(c.other_work(), 0.25);
  c += PassClocks{1000, 1000};
  EXPECT_EQ(c.wall, 2000);
  EXPECT_EQ(c.cpu, 1750);
  EXPECT_DOUBLE_EQ(c.other_work(), 0.125);
  EXPECT_EQ(PassClocks{}.other_work(), 0.0);
  EXPECT_EQ((PassClocks{100, 120}.other_work()), 0.0);  // never below 0
}

TEST(ProfilerClocks, TimesAnOpOnTheThreadsCpuClockNeverAboveTheWall) {
  const OpClock clock = host_op_clock();
  EXPECT_TRUE(clock.cpu);  // Linux has a thread CPU clock
  EXPECT_GE(clock.cpu_clock_cost, 0);
  PassClocks clocks;
  volatile double sink = 0.0;
  const SimTime t = time_op(clock, &clocks, [&] {
    for (int i = 0; i < 200000; ++i) sink = sink + 1.0;
  });
  EXPECT_GE(t, 1);
  EXPECT_EQ(clocks.cpu, t);
  EXPECT_LE(clocks.cpu, clocks.wall);
  // On the wall clock, the op's time is its wall time.
  PassClocks wall;
  const SimTime w = time_op(OpClock{false, 0}, &wall, [] {});
  EXPECT_EQ(wall.wall, w);
  EXPECT_EQ(wall.cpu, w);
}

// A pass over a range times exactly that range's layers, every kind of op.
TEST(ProfilerPasses, APassOverARangeTimesItsLayersOnly) {
  Bench b(2);  // 4 layers
  OpTimes times(4);
  PassClocks clocks;
  std::mt19937_64 rng(1);
  timed_pass(b.layers, {1, 3}, b.inputs[1], b.ctx, rng, host_op_clock(), &times, &clocks);
  for (std::size_t l = 0; l < 4; ++l) {
    const bool in = l == 1 || l == 2;
    for (const auto* kind :
         {&times.forward, &times.recompute, &times.backward, &times.input, &times.weight}) {
      EXPECT_EQ((*kind)[l] > 0, in) << "layer " << l;
    }
  }
  EXPECT_EQ(times.total({0, 4}), times.total({1, 3}));
  EXPECT_EQ(clocks.cpu, times.total({1, 3}));
}

// Two ranges at once, each on a thread of its own: every layer of each is
// timed once.
TEST(ProfilerPasses, ConcurrentPassesTimeEveryRange) {
  Bench b(2);
  OpTimes times(4);
  PassClocks clocks;
  concurrent_passes(b.layers, even_ranges(4, 2), b.inputs, b.ctx, {}, 1, host_op_clock(), times,
                    clocks);
  for (std::size_t l = 0; l < 4; ++l) {
    EXPECT_GT(times.forward[l], 0) << l;
    EXPECT_GT(times.weight[l], 0) << l;
  }
  EXPECT_EQ(clocks.cpu, times.total({0, 4}));
}

// Per layer and kind, exactly the ops the device's list runs on it: F (its
// stash dropped under remat, kept otherwise), R, B (whole or split) and W,
// once per micro-batch; nothing on the other device's stages.
TEST(ProfilerOpLists, TimesEveryOpOfTheDevicesListOncePerMicroBatch) {
  Bench b(2);  // embed, block0, block1, head
  const std::vector<LayerRange> two{{0, 2}, {2, 4}};
  const auto run = [&](const PlanStages& plan, int device) {
    OpListTimes t(4);
    run_op_list(b.layers, plan, device, b.inputs, b.ctx, 1, host_op_clock(), &t, nullptr);
    return t;
  };
  const PlanStages gpipe = stages_of(build_gpipe(2, 3, Remat::kNever), two);
  const OpListTimes g0 = run(gpipe, 0);
  for (std::size_t l = 0; l < 4; ++l) {
    const int n = l < 2 ? 3 : 0;
    EXPECT_EQ(g0.kept.count[l], n) << l;
    EXPECT_EQ(g0.backward.count[l], n) << l;
    EXPECT_EQ(g0.forward.count[l], 0) << l;
    EXPECT_EQ(g0.recompute.count[l], 0) << l;
    EXPECT_EQ(g0.input.count[l], 0) << l;
    EXPECT_EQ(g0.weight.count[l], 0) << l;
    if (n > 0) {
      EXPECT_GT(g0.kept.mean(l), 0) << l;
    }
  }
  const OpListTimes remat = run(stages_of(build_1f1b(2, 4, Remat::kAlways), two), 1);
  for (std::size_t l = 2; l < 4; ++l) {
    EXPECT_EQ(remat.forward.count[l], 4) << l;
    EXPECT_EQ(remat.recompute.count[l], 4) << l;
    EXPECT_EQ(remat.backward.count[l], 4) << l;
    EXPECT_EQ(remat.kept.count[l], 0) << l;
    EXPECT_EQ(remat.forward.count[l - 2], 0) << l;
  }
  const OpListTimes split = run(stages_of(build_zb_h1(2, 2, Remat::kNever), two), 0);
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(split.input.count[l], 2) << l;
    EXPECT_EQ(split.weight.count[l], 2) << l;
    EXPECT_EQ(split.backward.count[l], 0) << l;
    EXPECT_GT(split.weight.mean(l), 0) << l;
  }
  // zb-v: device 0 holds the first and the last of four stages.
  const PlanStages v = stages_of(build_zb_v(2, 2, Remat::kNever), {{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  const OpListTimes v0 = run(v, 0);
  EXPECT_EQ(v0.kept.count, (std::vector<int>{2, 0, 0, 2}));
  EXPECT_EQ(v0.input.count, (std::vector<int>{2, 0, 0, 2}));
  EXPECT_EQ(v0.weight.count, (std::vector<int>{2, 0, 0, 2}));
}

// Alone and together, every device's ops are timed once a run.
TEST(ProfilerOpLists, AloneAndTogetherTimeEveryDevice) {
  Bench b(2);
  const PlanStages plan = stages_of(build_1f1b(2, 2, Remat::kNever), {{0, 2}, {2, 4}});
  OpListTimes alone(4);
  OpListTimes together(4);
  PassClocks clocks;
  op_lists_alone(b.layers, plan, b.inputs, b.ctx, {}, 1, host_op_clock(), alone, clocks);
  op_lists_together(b.layers, plan, b.inputs, b.ctx, {}, 1, host_op_clock(), together, clocks);
  for (const OpListTimes* t : {&alone, &together}) {
    EXPECT_EQ(t->kept.count, (std::vector<int>{2, 2, 2, 2}));
    EXPECT_EQ(t->backward.count, (std::vector<int>{2, 2, 2, 2}));
    EXPECT_GT(t->total(), 0);
  }
  EXPECT_EQ(clocks.cpu, alone.total() + together.total());
}

// A plan's profile: its kinds of op from its op lists, every entry filled, the
// slowdown of its two devices measured when two cores are there.
TEST(ProfilerOpLists, AProfileOfAPlan) {
  const ModelSpec spec = tiny_transformer(2);
  ProfileOptions o;
  o.batch_sizes = {2};
  o.repeats = 2;
  o.stages =
      std::make_shared<PlanStages>(stages_of(build_zb_h1(2, 2, Remat::kNever), {{0, 2}, {2, 4}}));
  const Profile p = profile_model(spec, o);
  ASSERT_EQ(p.layers.size(), 3u);
  for (const LayerProfile& l : p.layers) {
    for (const auto* t : {&l.forward, &l.backward, &l.recompute, &l.input, &l.weight}) {
      ASSERT_EQ(t->size(), 1u) << l.example;
      EXPECT_GT((*t)[0], 0) << l.example;
    }
  }
  // Two devices at most: one factor for them, or none on one core.
  ASSERT_LE(p.concurrency_slowdown.size(), 2u);
  EXPECT_EQ(p.concurrency_slowdown[0], 1.0);
  EXPECT_EQ(p.rounds.slowdown_of_stages, p.concurrency_slowdown.size() == 2);

  // One plan, one micro-batch size, on the host; stages that cut the model.
  o.batch_sizes = {1, 2};
  EXPECT_THROW(ModelProfiler(spec, o), std::invalid_argument);
  o.batch_sizes = {2};
  o.stages =
      std::make_shared<PlanStages>(stages_of(build_zb_h1(2, 2, Remat::kNever), {{0, 2}, {3, 4}}));
  EXPECT_THROW(ModelProfiler(spec, o), std::invalid_argument);
  o.stages = std::make_shared<PlanStages>(stages_of(build_gpipe(2, 2, Remat::kNever), {{0, 4}}));
  EXPECT_THROW(ModelProfiler(spec, o), std::invalid_argument);
}

}  // namespace
}  // namespace pipescope::exec
