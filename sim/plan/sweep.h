#pragma once
// A K x M sweep: one simulation per pair, each cut optimally, for the table of
// throughput, bubble and peak memory that shows the trade-off.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/partition.h"
#include "sim/scenario/scenario.h"

namespace pipescope {

struct SweepPoint {
  int stages = 1;
  int micro_batches = 1;
  std::string error;  // why this pair cannot run (e.g. M does not divide the batch)
  double step_time_s = 0.0;
  double samples_per_s = 0.0;
  double bubble_fraction = 0.0;
  double mfu = 0.0;
  Bytes peak_memory = 0;  // of the fullest device
  bool fits = false;
};

struct SweepRequest {
  std::vector<int> stages;               // K values
  std::vector<int> micro_batches;        // M values
  std::optional<Remat> remat;            // default: the scenario's
  std::optional<ScheduleKind> schedule;  // default: the scenario's
  std::optional<int> chunks;             // default: the scenario's (interleaved-1f1b)
  PartitionMethod partition = PartitionMethod::kOptimal;
  // D replicas of each K-device pipeline on the scenario's cluster: each point
  // simulates one replica on batch / D with its gradient all-reduce, and its
  // throughput counts all D.
  int data_parallel = 1;
  unsigned threads = 0;  // 0: one per core
  std::function<void(std::size_t done, std::size_t total)> progress;
};

// Row-major: for each K, each M, in the order given.
std::vector<SweepPoint> run_sweep(const Scenario& scenario, const SweepRequest& request);

// Why the sweep has nothing to show, or an empty string when some point fits in
// `capacity` bytes per device: every point refused (the first reason), or none
// fitting (the least peak memory any point needs, against the capacity).
std::string sweep_nothing_fits(const std::vector<SweepPoint>& points, Bytes capacity);

// CSV with a header row: K,M,step_time_s,samples_per_s,bubble_fraction,mfu,
// peak_memory_bytes,fits,error.
std::string sweep_csv(const std::vector<SweepPoint>& points);

}  // namespace pipescope
