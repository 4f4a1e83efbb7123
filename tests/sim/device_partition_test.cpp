// The device-balanced partitioner (several stages a device) against brute
// force over every cut of small random models.

#include "sim/engine/device_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "cuts.h"
#include "sim/engine/layer_count_bound.h"

namespace pipescope {
namespace {

using testing::for_each_cut;

// The partial cuts TightMemoryIsSearchedWithinASmallBudget allows the search.
constexpr long kBudget = 2000;

struct Instance {
  PartitionProblem problem;
  int devices = 1;
  std::optional<Bytes> capacity;
};

// Up to 11 layers of uneven cost (a heavy last layer now and then, as a
// language model's head), 1 to 3 devices of 2 or 3 stages each.
Instance random_instance(std::mt19937_64& rng) {
  Instance in;
  PartitionProblem& p = in.problem;
  const int v = 2 + static_cast<int>(rng() % 2);
  in.devices = 1 + static_cast<int>(rng() % 3);
  const int L = std::uniform_int_distribution<int>(in.devices * v, 11)(rng);
  std::uniform_int_distribution<SimTime> time(1, 1000);
  for (int l = 0; l < L; ++l) {
    SimTime f = time(rng);
    if (l == L - 1 && rng() % 2 == 0) f *= 3;
    p.layers.push_back(
        {f, 2 * f, f, static_cast<std::int64_t>(rng() % 400), static_cast<Bytes>(rng() % 300)});
  }
  for (int i = 0; i <= L; ++i) p.cut_bytes.push_back(static_cast<Bytes>(rng() % 200));
  p.stages = in.devices * v;
  p.micro_batches = 1 + static_cast<int>(rng() % 8);
  p.remat = kScheduleRemats[rng() % 3];
  // Either checkpoint unit, without drawing from rng (the instances stay those
  // of before).
  p.checkpoint = p.micro_batches % 2 == 1 ? Checkpoint::kLayer : Checkpoint::kStage;
  p.gathered_bytes_per_param = p.micro_batches % 3 == 0 ? 2.0 : 0.0;  // ZeRO-3
  p.forwards_first = false;
  p.bytes_per_param = 4.0;
  if (rng() % 2 == 0) {
    p.link_bandwidth = 1e9;
    p.link_latency_s = 20e-9;
  }
  if (rng() % 2 == 0) in.capacity = std::uniform_int_distribution<Bytes>(3000, 12000)(rng);
  return in;
}

SimTime busiest(const std::vector<DeviceLoad>& loads) {
  SimTime worst = 0;
  for (const DeviceLoad& d : loads) worst = std::max(worst, d.time);
  return worst;
}

bool fits(const std::vector<DeviceLoad>& loads, std::optional<Bytes> capacity) {
  return std::all_of(loads.begin(), loads.end(),
                     [&](const DeviceLoad& d) { return !capacity || d.memory <= *capacity; });
}

// The best busiest-device time over all cuts that fit; none when none does.
std::optional<SimTime> brute_force(const Instance& in) {
  std::optional<SimTime> best;
  const int L = static_cast<int>(in.problem.layers.size());
  for_each_cut(L, in.problem.stages, [&](const std::vector<StageRange>& cut) {
    const std::vector<DeviceLoad> loads = device_loads(in.problem, cut, in.devices);
    if (!fits(loads, in.capacity)) return;
    if (!best || busiest(loads) < *best) best = busiest(loads);
  });
  return best;
}

// The least device memory some cut fits in: the brute-force minimum over
// every cut of its fullest device.
Bytes least_capacity(const Instance& in) {
  Bytes least = std::numeric_limits<Bytes>::max();
  for_each_cut(static_cast<int>(in.problem.layers.size()), in.problem.stages,
               [&](const std::vector<StageRange>& cut) {
                 Bytes fullest = 0;
                 for (const DeviceLoad& d : device_loads(in.problem, cut, in.devices)) {
                   fullest = std::max(fullest, d.memory);
                 }
                 least = std::min(least, fullest);
               });
  return least;
}

SimTime largest_stage_step(const PartitionProblem& p) {
  SimTime most = 0;
  for (int l = 0; l < static_cast<int>(p.layers.size()); ++l) {
    most = std::max(most, stage_time(p, l, l));
  }
  return most;
}

// A cut the partitioner returns is contiguous, fits, and reports its busiest
// device.
void expect_valid(const Instance& in, const PartitionResult& r, int trial) {
  const std::vector<DeviceLoad> loads = device_loads(in.problem, r.stages, in.devices);
  EXPECT_TRUE(fits(loads, in.capacity)) << "trial " << trial;
  ASSERT_EQ(r.stages.size(), static_cast<std::size_t>(in.problem.stages));
  EXPECT_EQ(r.stages.front().first_layer, 0);
  EXPECT_EQ(r.stages.back().last_layer, static_cast<int>(in.problem.layers.size()) - 1);
  for (std::size_t s = 1; s < r.stages.size(); ++s) {
    EXPECT_EQ(r.stages[s].first_layer, r.stages[s - 1].last_layer + 1) << "trial " << trial;
  }
  EXPECT_EQ(r.bottleneck, busiest(loads));
}

// The partitioner finds the brute-force optimum, or nothing when no cut fits;
// returns whether some cut fits.
bool expect_optimum(const Instance& in, int trial) {
  const std::optional<SimTime> optimum = brute_force(in);
  const PartitionResult r = partition_devices(in.problem, in.devices, in.capacity);
  EXPECT_EQ(r.stages.empty(), !optimum.has_value()) << "trial " << trial;
  if (!optimum || r.stages.empty()) return false;
  expect_valid(in, r, trial);
  EXPECT_EQ(r.bottleneck, *optimum) << "trial " << trial;
  return true;
}

// Small models are solved exactly: the brute-force optimum every time.
TEST(DevicePartition, SmallModelsMatchBruteForce) {
  std::mt19937_64 rng(20261125);
  int cases = 0;
  for (int trial = 0; trial < 400; ++trial) {
    if (expect_optimum(random_instance(rng), trial)) ++cases;
  }
  EXPECT_GT(cases, 200);
}

// The local search alone (no exhaustive search, as for large models) stays
// within one layer's stage time of the optimum, and finds it in three cases
// out of five or more (205 of these 311 random models, with uneven layers).
TEST(DevicePartition, LocalSearchIsWithinOneLayerOfTheOptimum) {
  std::mt19937_64 rng(20261125);
  int cases = 0;
  int exact = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Instance in = random_instance(rng);
    const std::optional<SimTime> optimum = brute_force(in);
    const PartitionResult r = partition_devices(in.problem, in.devices, in.capacity, 0);
    if (!optimum || r.stages.empty()) continue;  // see NothingThatFitsIsMissed
    ++cases;
    expect_valid(in, r, trial);
    EXPECT_GE(r.bottleneck, *optimum);
    EXPECT_LE(r.bottleneck, *optimum + largest_stage_step(in.problem)) << "trial " << trial;
    if (r.bottleneck == *optimum) ++exact;
  }
  EXPECT_GT(cases, 200);
  EXPECT_GE(exact * 5, cases * 3) << exact << " of " << cases << " optimal";
}

// When some cut fits the devices' memory, the local search alone finds one in
// nearly every case (it starts from cuts chosen for time, not memory); when
// none does, nothing is returned as if it did.
TEST(DevicePartition, NothingThatFitsIsMissed) {
  std::mt19937_64 rng(7);
  int missed = 0;
  int fitting = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Instance in = random_instance(rng);
    const bool some_fit = brute_force(in).has_value();
    const PartitionResult r = partition_devices(in.problem, in.devices, in.capacity, 0);
    if (!some_fit) {
      EXPECT_TRUE(r.stages.empty() ||
                  !fits(device_loads(in.problem, r.stages, in.devices), in.capacity));
      continue;
    }
    ++fitting;
    if (r.stages.empty()) ++missed;
  }
  EXPECT_GT(fitting, 200);
  EXPECT_LE(missed * 20, fitting) << missed << " of " << fitting << " fitting cases missed";
}

// Gives each stage of `in` its own counts of micro-batches held, as a
// pipeline's stages have (its first holds the most).
void hold_unlike_counts(Instance& in, std::mt19937_64& rng) {
  in.problem.stage_held.clear();
  for (int s = 0; s < in.problem.stages; ++s) {
    in.problem.stage_held.push_back({1 + static_cast<int>(rng() % 4), static_cast<int>(rng() % 3),
                                     static_cast<int>(rng() % 2)});
  }
}

// At the least capacity any cut fits (the brute-force minimum of the fullest
// device's memory) a cut is found, and a byte less finds none: the quick
// refusal of problems too big for the devices refuses no problem that fits.
TEST(DevicePartition, FitsExactlyAtTheLeastCapacity) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Instance in = random_instance(rng);
    if (trial % 2 == 1) hold_unlike_counts(in, rng);
    const Bytes least = least_capacity(in);
    in.capacity = least;
    EXPECT_FALSE(partition_devices(in.problem, in.devices, in.capacity).stages.empty())
        << "trial " << trial;
    in.capacity = least - 1;
    const PartitionResult none = partition_devices(in.problem, in.devices, in.capacity);
    EXPECT_TRUE(none.stages.empty()) << "trial " << trial;
    EXPECT_GE(none.memory_needed.value_or(0), least) << "trial " << trial;
  }
}

// One device per stage: the optimal stage cut, as partition_optimal finds it.
TEST(DevicePartition, OneStageADeviceIsTheOptimalCut) {
  std::mt19937_64 rng(3);
  Instance in = random_instance(rng);
  in.devices = in.problem.stages;
  const PartitionResult r = partition_devices(in.problem, in.devices, in.capacity);
  const PartitionResult o = partition_optimal(in.problem);
  EXPECT_EQ(r.stages, o.stages);
  EXPECT_EQ(r.bottleneck, o.bottleneck);
}

// Two devices, two stages each, over 9 equal blocks and a head as heavy as
// three: the least slowest stage (3 blocks) allows the cut 3 | 3 | 2 | 1+head,
// which loads device 1 (stages 1 and 3) with 3 + 4 = 7 blocks' time against
// 3 + 2 = 5 on device 0. Balanced, each device carries 6.
TEST(DevicePartition, BalancesDevicesNotStages) {
  PartitionProblem p;
  for (int l = 0; l < 9; ++l) p.layers.push_back({100, 200, 0, 10, 10});
  p.layers.push_back({300, 600, 0, 10, 10});
  p.cut_bytes.assign(11, 0);
  p.stages = 4;
  p.micro_batches = 4;
  p.remat = Remat::kNever;
  const PartitionResult r = partition_devices(p, 2, std::nullopt);
  const std::vector<DeviceLoad> loads = device_loads(p, r.stages, 2);
  EXPECT_EQ(loads[0].time, 6 * 300);
  EXPECT_EQ(loads[1].time, 6 * 300);
  EXPECT_EQ(r.bottleneck, 6 * 300);
}

// ZB-V's V: device d runs stages d and 2K - 1 - d. Over 4 stages of one layer
// each (times 1, 2, 4, 8 blocks) device 0 carries stages 0 and 3, device 1
// stages 1 and 2; the looped placement would pair 0 with 2 and 1 with 3.
TEST(DevicePartition, LoadsFollowTheStageDeviceMap) {
  PartitionProblem p;
  for (const SimTime f : {100, 200, 400, 800}) p.layers.push_back({f, 2 * f, 0, 10, 10});
  p.cut_bytes.assign(5, 0);
  p.stages = 4;
  p.micro_batches = 4;
  p.remat = Remat::kNever;
  const std::vector<StageRange> cut = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  const std::vector<DeviceLoad> looped = device_loads(p, cut, 2);
  EXPECT_EQ(looped[0].time, (100 + 400) * 3);
  EXPECT_EQ(looped[1].time, (200 + 800) * 3);
  p.stage_device = {0, 1, 1, 0};
  const std::vector<DeviceLoad> v = device_loads(p, cut, 2);
  EXPECT_EQ(v[0].time, (100 + 800) * 3);
  EXPECT_EQ(v[1].time, (200 + 400) * 3);
}

// Shaped as a language model (an embedding, blocks, a head as heavy as three
// blocks, on 2 to 4 devices of 2 or 3 chunks): the optimum of every cut,
// including where the local search alone misses it (26 of these 100).
TEST(DevicePartition, LanguageModelShapesMatchBruteForce) {
  std::mt19937_64 rng(20261126);
  int cases = 0;
  int local_missed = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Instance in;
    PartitionProblem& p = in.problem;
    in.devices = 2 + static_cast<int>(rng() % 3);
    p.stages = in.devices * (2 + static_cast<int>(rng() % 2));
    const int blocks = std::uniform_int_distribution<int>(p.stages, 16)(rng);
    const SimTime block = 300 + static_cast<SimTime>(rng() % 50);
    p.layers.push_back({block / 10, block / 5, 0, 900, 0});  // embedding
    // Equal blocks; or blocks of one, two or three times that cost (attention,
    // MLP and mixture layers); or blocks of equal cost, some with four times
    // the weights (mixture-of-experts layers), where partial cuts can load
    // the devices alike in time but not in memory.
    for (int b = 0; b < blocks; ++b) {
      const int kind = trial % 3;
      const SimTime f = kind == 1 ? block * (1 + static_cast<SimTime>(rng() % 3)) : block;
      const std::int64_t params = kind == 2 && rng() % 2 == 0 ? 400 : 100;
      p.layers.push_back({f, 2 * f, f, params, 40});
    }
    p.layers.push_back({3 * block, 6 * block, 0, 900, 200});  // head
    p.cut_bytes.assign(p.layers.size() + 1, 50);
    p.micro_batches = 4 + static_cast<int>(rng() % 5);
    p.remat = kScheduleRemats[rng() % 3];
    p.checkpoint = p.micro_batches % 2 == 1 ? Checkpoint::kLayer : Checkpoint::kStage;
    p.forwards_first = false;
    p.bytes_per_param = 4.0;
    p.link_bandwidth = 1e9;
    // No limit, or the least memory any cut fits in: there, few cuts fit, and
    // skipping one that does shows.
    if (rng() % 2 == 0) in.capacity = least_capacity(in);
    if (!expect_optimum(in, trial)) continue;
    ++cases;
    const PartitionResult local = partition_devices(p, in.devices, in.capacity, 0);
    if (local.stages.empty() || local.bottleneck > *brute_force(in)) ++local_missed;
  }
  EXPECT_EQ(cases, 100);  // each fits: without a limit, or at the least capacity
  EXPECT_GT(local_missed, 10) << "the exhaustive search must have had something to find";
}

// At the least memory any cut fits in, most partial cuts leave too little room
// for the layers still to place; the exhaustive search drops them as soon as
// it can tell, so that a small budget of partial cuts still reaches the
// optimum (a search that found them out only when a device overflowed spends
// its budget on them and misses the optimum in 6 of these 120).
TEST(DevicePartition, TightMemoryIsSearchedWithinASmallBudget) {
  std::mt19937_64 rng(20261127);
  int missed = 0;
  for (int trial = 0; trial < 120; ++trial) {
    Instance in;
    PartitionProblem& p = in.problem;
    in.devices = 2 + static_cast<int>(rng() % 3);
    p.stages = 2 * in.devices;
    const int L = std::uniform_int_distribution<int>(p.stages + 4, 18)(rng);
    for (int l = 0; l < L; ++l) {
      const SimTime f = 100 + static_cast<SimTime>(rng() % 900);
      p.layers.push_back({f, 2 * f, f, 50 + static_cast<std::int64_t>(rng() % 400),
                          static_cast<Bytes>(rng() % 300)});
    }
    p.cut_bytes.assign(p.layers.size() + 1, 20);
    p.micro_batches = 4;
    p.remat = Remat::kNever;
    p.forwards_first = false;
    p.bytes_per_param = 4.0;
    in.capacity = least_capacity(in);
    const std::optional<SimTime> optimum = brute_force(in);
    ASSERT_TRUE(optimum.has_value()) << "trial " << trial;
    const PartitionResult r = partition_devices(p, in.devices, in.capacity, kBudget);
    if (r.stages.empty() || r.bottleneck != *optimum) {
      ++missed;
      continue;
    }
    expect_valid(in, r, trial);
  }
  EXPECT_EQ(missed, 0);
}

// Under the V placement (2 stages a device) the partitioner balances the
// devices it names, as brute force over every cut does.
TEST(DevicePartition, VPlacementMatchesBruteForce) {
  std::mt19937_64 rng(20261126);
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Instance in = random_instance(rng);
    const int K = 1 + static_cast<int>(rng() % 3);
    const int L = static_cast<int>(in.problem.layers.size());
    if (L < 2 * K) continue;
    in.devices = K;
    in.problem.stages = 2 * K;
    in.problem.stage_device.clear();
    for (int s = 0; s < 2 * K; ++s) in.problem.stage_device.push_back(s < K ? s : 2 * K - 1 - s);
    if (expect_optimum(in, trial)) ++cases;
  }
  EXPECT_GT(cases, 100);
}

// A model of `blocks` equal blocks (compute 100, 100 parameters, a stash of
// 10 bytes) and a head (compute 37) on `devices` devices of 2 stages each,
// stage s on device s mod devices, without transfers or remat.
PartitionProblem blocks_and_head(int blocks, int devices) {
  PartitionProblem p;
  for (int b = 0; b < blocks; ++b) p.layers.push_back({40, 60, 0, 100, 10});
  p.layers.push_back({10, 27, 0, 50, 5});
  p.cut_bytes.assign(p.layers.size() + 1, 8);
  p.stages = 2 * devices;
  p.micro_batches = 4;
  p.remat = Remat::kNever;
  p.forwards_first = false;
  p.bytes_per_param = 2.0;
  return p;
}

// 24 blocks and the head on 4 devices, counted by hand. In time: below 637
// (6 blocks and the head) the head's device has 636 - 37 for blocks, room
// for 5, the others 6 each: 23 < 24, no cut; below 638, 6 each: 24. In
// memory, a block holds at least 2 x 100 - 1 bytes of weights and 4 x 10 of
// stash (239), the head 2 x 50 - 1 + 4 x 5 (119): in 1,552 bytes the head's
// device has room for 5 blocks beside the head, the others 6: 23; in 1,553,
// 6 each.
TEST(LayerCountBound, CountsWholeBlocksByHand) {
  const PartitionProblem p = blocks_and_head(24, 4);
  const StagePrices prices(p);
  EXPECT_EQ(prices.layer_memory_floor(0), 2 * 100 - 1 + 4 * 10);
  EXPECT_EQ(prices.layer_memory_floor(24), 2 * 50 - 1 + 4 * 5);
  const LayerCountBound bound(p, prices, 4);
  const std::vector<DeviceLoad> none(4);
  EXPECT_TRUE(bound.cannot_place(-1, 0, none, SimTime{637}, std::nullopt));
  EXPECT_FALSE(bound.cannot_place(-1, 0, none, SimTime{638}, std::nullopt));
  EXPECT_FALSE(bound.cannot_place(-1, 0, none, std::nullopt, std::nullopt));
  EXPECT_TRUE(bound.cannot_place(-1, 0, none, std::nullopt, Bytes{1552}));
  EXPECT_FALSE(bound.cannot_place(-1, 0, none, std::nullopt, Bytes{1553}));
  EXPECT_EQ(bound.least_capacity(), 1553);
  // The partitioner refuses 1,552 at once, naming that floor and no device.
  const PartitionResult refused = partition_devices(p, 4, Bytes{1552});
  EXPECT_TRUE(refused.stages.empty());
  EXPECT_FALSE(refused.fullest_stage.has_value());
  EXPECT_EQ(refused.memory_needed, Bytes{1553});
  // Where device d's stages hold 4 - d micro-batches (a pipeline's first
  // holds the most), a block holds 199 + 10 (4 - d) bytes on device d at
  // least (239, 229, 219, 209), the head 99 + 5 on device 3: 1,434 bytes
  // hold 6 blocks on each device (1,330 / 209 beside the head), 1,433 only 5
  // on device 0. Counted at the fewest of any stage, 209 a block
  // everywhere, the floor would be 1,358.
  PartitionProblem pipeline = p;
  for (int s = 0; s < pipeline.stages; ++s) {
    const int held = 4 - s % 4;
    pipeline.stage_held.push_back({held, 0, 0});
  }
  const StagePrices pipeline_prices(pipeline);
  const LayerCountBound by_device(pipeline, pipeline_prices, 4);
  EXPECT_EQ(by_device.least_capacity(), 1434);
  // Part-way: stage 0 took 3 blocks on device 0, which has one stage to
  // come; 21 blocks are left. Below 637 device 0 has room for 3 more, the
  // head's device 5, the others 6: 20 < 21; below 638 the head's device 6.
  std::vector<DeviceLoad> loads(4);
  loads[0].time = 300;
  EXPECT_TRUE(bound.cannot_place(0, 3, loads, SimTime{637}, std::nullopt));
  EXPECT_FALSE(bound.cannot_place(0, 3, loads, SimTime{638}, std::nullopt));
}

// The bound never refuses a cut that exists: at every partial cut of every
// cut of random models that fits, it lets the rest be placed below that
// cut's busiest time plus one and within the memory limit. And it is not
// idle: below the optimum itself it proves, before any stage is placed, that
// nothing better exists on some of them.
TEST(LayerCountBound, NeverRefusesACutThatExists) {
  std::mt19937_64 rng(20261127);
  long partials = 0;
  int proven = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Instance in = random_instance(rng);
    if (trial % 2 == 0) {  // V placement
      in.problem.stage_device.clear();
      const int S = in.problem.stages;
      if (S % 2 != 0) continue;
      in.devices = S / 2;
      for (int s = 0; s < S; ++s) in.problem.stage_device.push_back(s < S / 2 ? s : S - 1 - s);
    }
    if (trial % 3 == 1) hold_unlike_counts(in, rng);
    // A split backward, and bytes a parameter that do not round evenly.
    if (trial % 4 == 2) in.problem.backward_split = true;
    if (trial % 5 == 3) {
      in.problem.bytes_per_param = 16.0 / 3.0;
      if (in.problem.gathered_bytes_per_param > 0.0) in.problem.gathered_bytes_per_param = 2.5;
    }
    const PartitionProblem& p = in.problem;
    const StagePrices prices(p);
    const auto n = static_cast<std::size_t>(in.devices);
    const LayerCountBound bound(p, prices, in.devices);
    for_each_cut(
        static_cast<int>(p.layers.size()), p.stages, [&](const std::vector<StageRange>& cut) {
          const std::vector<DeviceLoad> final = device_loads(p, cut, in.devices);
          if (!fits(final, in.capacity)) return;
          const SimTime below = busiest(final) + 1;
          std::vector<DeviceLoad> loads(n);
          ASSERT_FALSE(bound.cannot_place(-1, 0, loads, below, in.capacity)) << "trial " << trial;
          for (std::size_t s = 0; s + 1 < cut.size(); ++s) {
            DeviceLoad& d = loads[device_of_stage(p, s, in.devices)];
            d.time += prices.time(cut[s].first_layer, cut[s].last_layer);
            d.memory += prices.memory(static_cast<int>(s), cut[s].first_layer, cut[s].last_layer);
            ASSERT_FALSE(bound.cannot_place(static_cast<int>(s), cut[s].last_layer + 1, loads,
                                            below, in.capacity))
                << "trial " << trial << " stage " << s;
            ++partials;
          }
        });
    EXPECT_LE(bound.least_capacity(), least_capacity(in)) << "trial " << trial;
    const std::optional<SimTime> optimum = brute_force(in);
    if (optimum) {
      proven +=
          bound.cannot_place(-1, 0, std::vector<DeviceLoad>(n), *optimum, in.capacity) ? 1 : 0;
    }
  }
  EXPECT_GT(partials, 30000);
  EXPECT_GE(proven, 5);  // 5 of the 300
}

// 96 equal blocks and a head on 16 devices of 2 stages (about 10^24 cuts):
// the local search's cut of 6 blocks a device is proven optimal with no
// partial cut searched, as the count shows (CountsWholeBlocksByHand).
TEST(LayerCountBound, ProvesEqualBlocksOptimalWithoutSearching) {
  const PartitionProblem p = blocks_and_head(96, 16);
  const PartitionResult r = partition_devices(p, 16, std::nullopt, 0);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.bottleneck, 6 * 100 + 37);
  // Unequal layers are not settled so: the search, cut short, says so.
  PartitionProblem uneven = p;
  std::mt19937_64 rng(5);
  for (LayerCost& l : uneven.layers) l.backward += static_cast<SimTime>(rng() % 50);
  EXPECT_FALSE(partition_devices(uneven, 16, std::nullopt, 0).exact);
}

}  // namespace
}  // namespace pipescope
