#pragma once
// The in-process all-reduce of a tensor-parallel group (Megatron-LM's, Shoeybi
// et al. 2019): the T ranks of a stage are T threads, each holding its shard of
// a layer, and every rank's call of all_reduce with its partial matrix returns
// with the sum (or the maximum) of all T in it. The ranks post their matrices in
// shared slots and meet at a barrier; each then reduces all T slots in rank
// order into its own copy (so every rank gets the same bits: the replicated
// computations that follow stay identical on all ranks), and a second barrier
// keeps a rank's matrix alive until every rank has read it. A rank waiting at
// a barrier yields its core a while before it sleeps (exec/compute/
// yield_first.h).
//
// A layer's T shards share one group (exec/compute/tensor_layers.h); the k-th call of
// rank r pairs with the k-th call of every other rank, as the ranks run the same
// op list. A group of one rank returns at once and counts nothing in the
// thread's tally: the profiler times one rank's compute that way (the
// simulator adds the all-reduces from the transport).
// Under context parallelism the C copies of a stage's parameters sum their
// gradients with it too (the ring itself is exec/compute/ring_exchange.h).
//
// A group made with a GroupLink (exec/compute/group_link.h) is instead this
// process's one rank of a group whose other ranks are processes: its calls
// exchange the matrices through the link and reduce them in rank order as the
// threads' do, so every process gets the same bits.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "costmodels/units.h"
#include "exec/compute/group_link.h"
#include "exec/compute/kernels.h"

namespace pipescope::exec {

// Thrown from an all-reduce whose step was stopped (another rank or stage
// failed, a stop request): not an error of the rank that waited.
class CollectiveAborted : public std::runtime_error {
 public:
  CollectiveAborted() : std::runtime_error("the step stopped during an all-reduce") {}
};

// What a thread's all-reduces wait for and what they took. A worker installs
// one on its thread for the step (CollectiveScope); the all-reduces of that
// thread add their time and bytes to it, which the worker reads after each op.
// Without one an all-reduce waits at most kDefaultLimit and is not counted.
struct CollectiveTally {
  static constexpr std::chrono::milliseconds kDefaultLimit{60000};
  // How often a waiting rank looks at the abort flag: the watchdog wakes the
  // transport's receivers, not the groups and rings, which are the layers'.
  static constexpr std::chrono::milliseconds kAbortPoll{5};
  const std::atomic<bool>* abort = nullptr;  // set when the step stops
  std::chrono::milliseconds limit = kDefaultLimit;
  int count = 0;     // all-reduces since the last reset
  SimTime wall = 0;  // ns in them: waiting for the other ranks and reducing
  SimTime cpu = -1;  // the thread's CPU time in them (-1 without a CPU clock)
  Bytes bytes = 0;   // of the matrices reduced
  // Counts `collectives` (one, or none for a part of one) of `moved` bytes
  // that began at `start`, when the thread's CPU clock read `cpu_start` (-1:
  // none).
  void add(std::chrono::steady_clock::time_point start, SimTime cpu_start, Bytes moved,
           int collectives = 1);
  void reset() {
    count = 0;
    wall = 0;
    cpu = -1;
    bytes = 0;
  }
};

// The calling thread's tally (CollectiveScope), null without one; the ring's
// exchanges (exec/compute/ring_exchange.h) report to it too.
CollectiveTally* current_collective_tally();

// Installs `tally` as the calling thread's for its lifetime (RAII); the
// thread's all-reduces report to it.
class CollectiveScope {
 public:
  explicit CollectiveScope(CollectiveTally& tally);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  CollectiveTally* previous_;
};

class TensorGroup {
 public:
  enum class Reduce { kSum, kMax };

  // Throws std::invalid_argument unless ranks >= 1.
  explicit TensorGroup(int ranks);
  // This process's rank of the link's group (the only rank it may call as).
  // Throws std::invalid_argument for a null link.
  explicit TensorGroup(std::shared_ptr<GroupLink> link);
  int ranks() const { return ranks_; }

  // Rank `rank`'s part: every rank passes a matrix of the same shape and gets
  // back the element-wise sum (kSum) or maximum (kMax) over the ranks, reduced
  // in rank order. Blocks until all ranks have called. Throws
  // CollectiveAborted when the thread's tally's abort flag is set while it
  // waits for the others, std::runtime_error when they take longer than its
  // limit or pass another shape.
  template <typename T>
  void all_reduce(int rank, Mat<T>& m, Reduce op = Reduce::kSum);

  // Rank `rank`'s part of an all-to-all (expert parallelism's dispatch and
  // combination, exec/compute/moe_layers.h): parts[d] is what it sends rank d
  // (its own part included), all of the same width; on return parts[s] is
  // what rank s sent it. Blocks, gives up and counts as all_reduce does (its
  // bytes: what the rank receives from the others). A group of one returns
  // parts as they are, whatever their number: one rank's compute as if every
  // part came back to it (the profiler's). Throws std::invalid_argument
  // unless a group of several gets one part for each rank.
  template <typename T>
  void all_to_all(int rank, std::vector<Mat<T>>& parts);

 private:
  struct Slot {
    void* data = nullptr;  // the matrix, or the all-to-all's parts
    Index rows = 0;
    Index cols = 0;
  };
  // A barrier of the T ranks; generation counts the times it opened.
  struct Barrier {
    int arrived = 0;
    std::uint64_t generation = 0;
  };

  // `slots` reduced in rank order (the threads' between the two barriers).
  template <typename T>
  static Mat<T> reduced(const std::vector<Slot>& slots, Index rows, Index cols, Reduce op);
  // Throws std::runtime_error unless every slot has `rank`'s shape.
  static void check_shapes(const std::vector<Slot>& slots, int rank);
  void check_rank(int rank, const char* what) const;
  // The link's forms of the two collectives.
  template <typename T>
  void linked_all_reduce(Mat<T>& m, Reduce op, const CollectiveTally* tally);
  template <typename T>
  Bytes linked_all_to_all(std::vector<Mat<T>>& parts, const CollectiveTally* tally);
  // Waits at `b` until every rank has arrived. With `abortable` the wait gives
  // up (and withdraws) when the step stops or the limit passes; without, it
  // waits on: the others are then only reading, and cannot be held up.
  // `what` names the collective in the error ("an all-reduce").
  void arrive_and_wait(Barrier& b, bool abortable, const CollectiveTally* tally, const char* what);

  const std::shared_ptr<GroupLink> link_;  // null: the ranks are threads
  const int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;  // per rank, valid between the two barriers
  Barrier posted_;           // every rank has posted its slot
  Barrier read_;             // every rank has read every slot
};

extern template void TensorGroup::all_reduce<float>(int, Mat<float>&, Reduce);
extern template void TensorGroup::all_reduce<double>(int, Mat<double>&, Reduce);
extern template void TensorGroup::all_to_all<float>(int, std::vector<Mat<float>>&);
extern template void TensorGroup::all_to_all<double>(int, std::vector<Mat<double>>&);

}  // namespace pipescope::exec
