// The partitioners against brute force: every contiguous cut of small random
// models, with and without memory limits, remat and transfer costs.

#include "sim/engine/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "costmodels/check.h"
#include "cuts.h"

namespace pipescope {
namespace {

using testing::for_each_cut;

PartitionProblem random_problem(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> layers(1, 9);
  std::uniform_int_distribution<SimTime> time(1, 1000);
  std::uniform_int_distribution<std::int64_t> params(0, 500);
  std::uniform_int_distribution<Bytes> bytes(0, 400);
  PartitionProblem p;
  const int L = layers(rng);
  for (int l = 0; l < L; ++l) {
    const SimTime f = time(rng);
    p.layers.push_back({f, 2 * f + time(rng) % 7, f, params(rng), bytes(rng)});
  }
  for (int i = 0; i <= L; ++i) p.cut_bytes.push_back(bytes(rng));
  p.stages = std::uniform_int_distribution<int>(1, L)(rng);
  p.micro_batches = std::uniform_int_distribution<int>(1, 8)(rng);
  p.remat = kScheduleRemats[rng() % 3];
  p.checkpoint = rng() % 2 == 0 ? Checkpoint::kStage : Checkpoint::kLayer;
  if (rng() % 3 == 0) p.gathered_bytes_per_param = 2.0;  // ZeRO-3's gathered layers
  p.bytes_per_param = 4.0 * static_cast<double>(rng() % 5);
  if (rng() % 3 != 0) p.memory_capacity = std::uniform_int_distribution<Bytes>(500, 6000)(rng);
  if (rng() % 2 == 0) {
    p.link_bandwidth = 1e9;  // 1 byte per ns
    p.link_latency_s = 50e-9;
  }
  return p;
}

SimTime bottleneck(const PartitionProblem& p, const std::vector<StageRange>& cut) {
  SimTime worst = 0;
  for (const StageRange& s : cut)
    worst = std::max(worst, stage_time(p, s.first_layer, s.last_layer));
  return worst;
}

Bytes fullest(const PartitionProblem& p, const std::vector<StageRange>& cut) {
  Bytes worst = 0;
  for (const StageRange& s : cut)
    worst = std::max(worst, stage_memory(p, s.first_layer, s.last_layer));
  return worst;
}

bool contiguous(const std::vector<StageRange>& cut, int L, int K) {
  if (static_cast<int>(cut.size()) != K || cut.front().first_layer != 0 ||
      cut.back().last_layer != L - 1) {
    return false;
  }
  for (std::size_t s = 0; s < cut.size(); ++s) {
    if (cut[s].layer_count() < 1) return false;
    if (s > 0 && cut[s].first_layer != cut[s - 1].last_layer + 1) return false;
  }
  return true;
}

TEST(OptimalPartition, MatchesBruteForceOnRandomInstances) {
  std::mt19937_64 rng(20261122);
  int infeasible = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const PartitionProblem p = random_problem(rng);
    const int L = static_cast<int>(p.layers.size());
    SimTime best = std::numeric_limits<SimTime>::max();
    Bytes least_memory = std::numeric_limits<Bytes>::max();
    for_each_cut(L, p.stages, [&](const std::vector<StageRange>& cut) {
      least_memory = std::min(least_memory, fullest(p, cut));
      if (p.memory_capacity && fullest(p, cut) > *p.memory_capacity) return;
      best = std::min(best, bottleneck(p, cut));
    });
    const PartitionResult r = partition_optimal(p);
    SCOPED_TRACE("trial " + std::to_string(trial));
    if (best == std::numeric_limits<SimTime>::max()) {
      ++infeasible;
      EXPECT_TRUE(r.stages.empty());
      ASSERT_TRUE(r.memory_needed.has_value());
      EXPECT_EQ(*r.memory_needed, least_memory);
      EXPECT_FALSE(r.why.empty());
      continue;
    }
    ASSERT_TRUE(contiguous(r.stages, L, p.stages));
    EXPECT_EQ(r.bottleneck, best);
    EXPECT_EQ(bottleneck(p, r.stages), best);
    if (p.memory_capacity) {
      EXPECT_LE(fullest(p, r.stages), *p.memory_capacity);
    }
  }
  // The generator must exercise both outcomes.
  EXPECT_GT(infeasible, 100);
  EXPECT_LT(infeasible, 2000);
}

// fits_memory decides what the least-memory cut would, without the cut: at the
// least fullest stage of every cut (found by brute force) and a byte below it.
TEST(FitsMemory, AgreesWithBruteForceAtAndBelowTheLeastPeak) {
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 2000; ++trial) {
    const PartitionProblem p = random_problem(rng);
    Bytes least = std::numeric_limits<Bytes>::max();
    for_each_cut(
        static_cast<int>(p.layers.size()), p.stages,
        [&](const std::vector<StageRange>& cut) { least = std::min(least, fullest(p, cut)); });
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(min_peak_memory(p), least);
    EXPECT_TRUE(fits_memory(p, least));
    EXPECT_FALSE(fits_memory(p, least - 1));
    const Bytes cap = std::uniform_int_distribution<Bytes>(0, 2 * least)(rng);
    EXPECT_EQ(fits_memory(p, cap), least <= cap) << "cap " << cap;
  }
}

TEST(ParamsPartition, MatchesBruteForce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    const PartitionProblem p = random_problem(rng);
    const int L = static_cast<int>(p.layers.size());
    const auto largest = [&](const std::vector<StageRange>& cut) {
      std::int64_t worst = 0;
      for (const StageRange& s : cut) {
        std::int64_t sum = 0;
        for (int l = s.first_layer; l <= s.last_layer; ++l)
          sum += p.layers[static_cast<std::size_t>(l)].params;
        worst = std::max(worst, sum);
      }
      return worst;
    };
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for_each_cut(L, p.stages, [&](const auto& cut) { best = std::min(best, largest(cut)); });
    const auto cut = partition_params(p);
    ASSERT_TRUE(contiguous(cut, L, p.stages));
    EXPECT_EQ(largest(cut), best) << "trial " << trial;
  }
}

TEST(MinVariancePartition, MatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 1000; ++trial) {
    const PartitionProblem p = random_problem(rng);
    const int L = static_cast<int>(p.layers.size());
    const auto squares = [&](const std::vector<StageRange>& cut) {
      double sum = 0;
      for (const StageRange& s : cut) {
        double c = 0;
        for (int l = s.first_layer; l <= s.last_layer; ++l) {
          c += static_cast<double>(p.layers[static_cast<std::size_t>(l)].forward +
                                   p.layers[static_cast<std::size_t>(l)].backward);
        }
        sum += c * c;
      }
      return sum;
    };
    double best = std::numeric_limits<double>::max();
    for_each_cut(L, p.stages, [&](const auto& cut) { best = std::min(best, squares(cut)); });
    const auto cut = partition_min_variance(p);
    ASSERT_TRUE(contiguous(cut, L, p.stages));
    EXPECT_EQ(squares(cut), best) << "trial " << trial;
  }
}

TEST(OptimalPartition, BalancesUnevenLayersByHand) {
  // Times 1,1,1,1,4 (F only, B and R zero) into 2 stages: {0-3} and {4} give 4.
  PartitionProblem p;
  for (SimTime t : {1, 1, 1, 1, 4}) p.layers.push_back({t, 0, 0, 0, 0});
  p.cut_bytes.assign(6, 0);
  p.stages = 2;
  const PartitionResult r = partition_optimal(p);
  EXPECT_EQ(r.stages, (std::vector<StageRange>{{0, 3}, {4, 4}}));
  EXPECT_EQ(r.bottleneck, 4);
  EXPECT_EQ(partition_uniform(5, 2), (std::vector<StageRange>{{0, 2}, {3, 4}}));
}

// A stage's weight bytes, params x bytes_per_param, round half up, as
// std::llround rounds them, halves and the values just below included.
TEST(StageMemory, WeightBytesRoundToTheNearestByte) {
  PartitionProblem p;
  p.layers = {{1, 0, 0, 3, 0}, {1, 0, 0, 0, 0}};
  p.cut_bytes.assign(3, 0);
  p.remat = Remat::kNever;
  for (const double bytes_per_param : {2.5, 2.4999999999999996, 2.0, 0.1666, 1e-9, 18.0}) {
    p.bytes_per_param = bytes_per_param;
    EXPECT_EQ(stage_memory(p, 0, 1), std::llround(3 * bytes_per_param)) << bytes_per_param;
  }
  p.layers[0].params = std::int64_t{175} * 1000 * 1000 * 1000;  // GPT-3's weights at 18 B
  p.bytes_per_param = 18.0;
  EXPECT_EQ(stage_memory(p, 0, 1), std::int64_t{3150} * 1000 * 1000 * 1000);
}

// Under layer checkpoints a stage keeps every layer's input of each recomputed
// micro-batch and rebuilds one layer's stash at a time, the largest: against
// the sums and maxima taken layer by layer, on every range of random problems.
TEST(StageMemory, LayerCheckpointsSumTheInputsAndTakeTheLargestStash) {
  std::mt19937_64 rng(20261127);
  int ranges = 0;
  for (int trial = 0; trial < 300; ++trial) {
    PartitionProblem p = random_problem(rng);
    p.checkpoint = Checkpoint::kLayer;
    p.bytes_per_param = 0.0;
    p.gathered_bytes_per_param = 0.0;
    p.forwards_first = trial % 2 == 0;
    const int L = static_cast<int>(p.layers.size());
    const int n = p.micro_batches;
    for (int first = 0; first < L; ++first) {
      Bytes inputs = 0;
      Bytes largest = 0;
      Bytes whole = 0;
      for (int last = first; last < L; ++last) {
        inputs += p.cut_bytes[static_cast<std::size_t>(last)];
        largest = std::max(largest, p.layers[static_cast<std::size_t>(last)].stash_bytes);
        whole += p.layers[static_cast<std::size_t>(last)].stash_bytes;
        const Bytes expected =
            p.remat == Remat::kNever ? n * whole
            : p.remat == Remat::kAlways
                ? n * inputs + largest
                // except-last: the last micro-batch's whole stash
                // and, beside it, one rebuilt (not under GPipe)
                : (n - 1) * inputs + whole + (n > 1 && !p.forwards_first ? largest : 0);
        EXPECT_EQ(stage_memory(p, first, last), expected)
            << "trial " << trial << " layers " << first << ".." << last;
        ++ranges;
      }
    }
  }
  EXPECT_GT(ranges, 3000);
}

// A stage's memory is never less than the sum of its layers' floors
// (StagePrices::layer_memory_floor), whatever the stage's counts, nor than
// that sum at its own counts with what it holds whatever its layers
// (stage_floors), on every range of random problems; and the floors are not
// idle: with stage checkpoints and nothing gathered they leave out only the
// stage's input and under a byte a layer.
TEST(StageMemory, LayerFloorsSumToAtMostTheStagesMemory) {
  std::mt19937_64 rng(20261128);
  int ranges = 0;
  for (int trial = 0; trial < 300; ++trial) {
    PartitionProblem p = random_problem(rng);
    p.forwards_first = trial % 2 == 0;
    if (trial % 3 == 0) {  // stages that hold unlike counts
      for (int s = 0; s < p.stages; ++s) {
        p.stage_held.push_back({1 + static_cast<int>(rng() % 4), static_cast<int>(rng() % 3),
                                static_cast<int>(rng() % 2)});
      }
    }
    if (trial % 4 == 1) p.backward_split = true;
    const StagePrices prices(p);
    const std::vector<Bytes> held = prices.stage_floors();
    const int L = static_cast<int>(p.layers.size());
    for (int stage = 0; stage < p.stages; ++stage) {
      // Stage 0 starts at the model's input, the others inside the model.
      for (int first = stage == 0 ? 0 : 1; first < (stage == 0 ? 1 : L); ++first) {
        Bytes floors = 0;
        Bytes at_counts = held[static_cast<std::size_t>(stage)];
        for (int last = first; last < L; ++last) {
          floors += prices.layer_memory_floor(last);
          at_counts += prices.floor_bytes(prices.layer_floor(last), prices.counts(stage));
          const Bytes memory = prices.memory(stage, first, last);
          EXPECT_LE(floors, memory) << "trial " << trial << " layers " << first << ".." << last;
          EXPECT_LE(at_counts, memory) << "trial " << trial << " stage " << stage;
          const bool plain = p.checkpoint == Checkpoint::kStage &&
                             p.gathered_bytes_per_param == 0.0 && p.stage_held.empty();
          if (plain) {
            const Bytes input = p.cut_bytes[static_cast<std::size_t>(first)] *
                                (p.remat == Remat::kNever ? 0 : p.micro_batches);
            EXPECT_GE(floors + input + (last - first + 2), memory) << "trial " << trial;
          }
          ++ranges;
        }
      }
    }
  }
  EXPECT_GT(ranges, 5000);
}

// Under ZeRO-3 a stage holds the weights of one layer, or two adjacent ones,
// gathered beside its shard: the most of them, against a scan of every
// range of random problems.
TEST(StageMemory, ZeroThreeHoldsTheLargestAdjacentPairGathered) {
  std::mt19937_64 rng(20261128);
  int ranges = 0;
  for (int trial = 0; trial < 300; ++trial) {
    PartitionProblem p = random_problem(rng);
    p.remat = Remat::kNever;
    p.micro_batches = 1;
    p.gathered_bytes_per_param = 2.5;
    for (LayerCost& l : p.layers) l.stash_bytes = 0;
    const int L = static_cast<int>(p.layers.size());
    for (int first = 0; first < L; ++first) {
      std::int64_t params = 0;
      std::int64_t gathered = 0;
      for (int last = first; last < L; ++last) {
        const std::int64_t mine = p.layers[static_cast<std::size_t>(last)].params;
        params += mine;
        gathered = std::max(
            gathered, mine + (last > first ? p.layers[static_cast<std::size_t>(last) - 1].params
                                           : std::int64_t{0}));
        EXPECT_EQ(stage_memory(p, first, last),
                  std::llround(static_cast<double>(params) * p.bytes_per_param) +
                      std::llround(static_cast<double>(gathered) * 2.5))
            << "trial " << trial << " layers " << first << ".." << last;
        ++ranges;
      }
    }
  }
  EXPECT_GT(ranges, 3000);
}

TEST(OptimalPartition, MemoryMovesTheCut) {
  // Equal times, but layer 0 holds 1000 parameters at 4 bytes: with 3000 bytes per
  // device it must stand alone, whatever the balance.
  PartitionProblem p;
  p.layers = {{10, 0, 0, 1000, 0}, {10, 0, 0, 0, 0}, {10, 0, 0, 0, 0}, {10, 0, 0, 0, 0}};
  p.cut_bytes.assign(5, 0);
  p.stages = 2;
  p.bytes_per_param = 4.0;
  EXPECT_EQ(partition_optimal(p).stages, (std::vector<StageRange>{{0, 1}, {2, 3}}));
  p.memory_capacity = 4000;
  EXPECT_EQ(partition_optimal(p).stages, (std::vector<StageRange>{{0, 1}, {2, 3}}));
  p.layers[1].params = 1;
  EXPECT_EQ(partition_optimal(p).stages, (std::vector<StageRange>{{0, 0}, {1, 3}}));
  p.memory_capacity = 3000;
  const PartitionResult none = partition_optimal(p);
  EXPECT_TRUE(none.stages.empty());
  EXPECT_EQ(none.memory_needed, 4000);
  EXPECT_EQ(none.why,
            "no cut into 2 stages fits 2.93 KiB per device; the best needs 3.91 KiB on its fullest "
            "stage");
}

TEST(StageSizes, RangesSizesAndBoundariesConvert) {
  const std::vector<StageRange> ranges = ranges_from_sizes({3, 1, 2});
  EXPECT_EQ(ranges, (std::vector<StageRange>{{0, 2}, {3, 3}, {4, 5}}));
  EXPECT_EQ(sizes_of(ranges), (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(boundaries_of(ranges), (std::vector<int>{0, 3, 4, 6}));
  EXPECT_TRUE(ranges_from_sizes({}).empty());
  EXPECT_EQ(boundaries_of({}), (std::vector<int>{0}));
  EXPECT_THROW(ranges_from_sizes({2, 0, 1}), InternalError);
  // Every cut is the cut of its own sizes.
  for_each_cut(6, 3, [](const std::vector<StageRange>& cut) {
    EXPECT_EQ(ranges_from_sizes(sizes_of(cut)), cut);
  });
}

TEST(PartitionMethods, ParseAndName) {
  for (const char* name : {"optimal", "uniform", "params", "gpipe"}) {
    ASSERT_TRUE(parse_partition_method(name).has_value()) << name;
    EXPECT_EQ(to_string(*parse_partition_method(name)), name);
  }
  EXPECT_FALSE(parse_partition_method("greedy").has_value());
}

}  // namespace
}  // namespace pipescope
