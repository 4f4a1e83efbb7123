#include "exec/compute/tensor_group.h"

#include <algorithm>
#include <string>

#include "exec/compute/thread_clock.h"

namespace pipescope::exec {

namespace {

thread_local CollectiveTally* current_tally = nullptr;

std::string shape(Index rows, Index cols) {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

}  // namespace

void CollectiveTally::add(std::chrono::steady_clock::time_point start, SimTime cpu_start,
                          Bytes moved, int collectives) {
  count += collectives;
  bytes += moved;
  wall +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  const SimTime cpu_end = thread_cpu_ns();
  if (cpu_start >= 0 && cpu_end >= cpu_start)
    cpu = std::max<SimTime>(cpu, 0) + (cpu_end - cpu_start);
}

CollectiveTally* current_collective_tally() {
  return current_tally;
}

CollectiveScope::CollectiveScope(CollectiveTally& tally) : previous_(current_tally) {
  current_tally = &tally;
}

CollectiveScope::~CollectiveScope() {
  current_tally = previous_;
}

TensorGroup::TensorGroup(int ranks) : ranks_(ranks) {
  if (ranks < 1) {
    throw std::invalid_argument("a tensor-parallel group needs at least 1 rank, got " +
                                std::to_string(ranks));
  }
  slots_.resize(static_cast<std::size_t>(ranks));
}

void TensorGroup::arrive_and_wait(Barrier& b, bool abortable, const CollectiveTally* tally,
                                  const char* what) {
  std::unique_lock lock(mu_);
  const std::uint64_t generation = b.generation;
  if (++b.arrived == ranks_) {
    b.arrived = 0;
    ++b.generation;
    cv_.notify_all();
    return;
  }
  const auto limit = tally != nullptr ? tally->limit : CollectiveTally::kDefaultLimit;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (b.generation == generation) {
    if (abortable) {
      const bool aborted = tally != nullptr && tally->abort != nullptr && tally->abort->load();
      const bool late = std::chrono::steady_clock::now() >= deadline;
      if (aborted || late) {
        --b.arrived;  // withdraw: the barrier has not opened, so nobody read our slot
        if (aborted) throw CollectiveAborted();
        throw std::runtime_error(std::string(what) + " waited " + std::to_string(limit.count()) +
                                 " ms for the other ranks of its group");
      }
    }
    cv_.wait_for(lock, CollectiveTally::kAbortPoll);
  }
}

void TensorGroup::check_shapes(int rank) const {
  const Slot& mine = slots_[static_cast<std::size_t>(rank)];
  for (const Slot& s : slots_) {
    if (s.rows != mine.rows || s.cols != mine.cols) {
      throw std::runtime_error("an all-reduce of a " + shape(mine.rows, mine.cols) +
                               " matrix met one of " + shape(s.rows, s.cols));
    }
  }
}

template <typename T>
Mat<T> TensorGroup::reduced(Index rows, Index cols, Reduce op) const {
  using Map = Eigen::Map<const Mat<T>>;
  const auto at = [&](std::size_t r) {
    return Map(static_cast<const T*>(slots_[r].data), rows, cols);
  };
  Mat<T> out = at(0);
  for (std::size_t r = 1; r < slots_.size(); ++r) {
    if (op == Reduce::kSum) {
      out += at(r);
    } else {
      out = out.cwiseMax(at(r));
    }
  }
  return out;
}

template <typename T>
void TensorGroup::all_reduce(int rank, Mat<T>& m, Reduce op) {
  if (rank < 0 || rank >= ranks_) {
    throw std::invalid_argument("tensor rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(ranks_) + ")");
  }
  CollectiveTally* tally = current_tally;
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  if (ranks_ > 1) {
    {
      std::lock_guard lock(mu_);
      slots_[static_cast<std::size_t>(rank)] = {m.data(), m.rows(), m.cols()};
    }
    arrive_and_wait(posted_, /*abortable=*/true, tally, "an all-reduce");
    // Every rank checks every shape, so all throw alike before the second barrier.
    check_shapes(rank);
    Mat<T> out = reduced<T>(m.rows(), m.cols(), op);
    arrive_and_wait(read_, /*abortable=*/false, tally, "an all-reduce");
    m = std::move(out);
  }
  if (tally != nullptr) {
    tally->add(start, cpu_start, static_cast<Bytes>(m.size()) * static_cast<Bytes>(sizeof(T)));
  }
}

template <typename T>
void TensorGroup::all_to_all(int rank, std::vector<Mat<T>>& parts) {
  if (rank < 0 || rank >= ranks_) {
    throw std::invalid_argument("rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(ranks_) + ")");
  }
  CollectiveTally* tally = current_tally;
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  Bytes received = 0;
  if (ranks_ > 1) {
    if (parts.size() != slots_.size()) {
      throw std::invalid_argument("an all-to-all of " + std::to_string(ranks_) + " ranks got " +
                                  std::to_string(parts.size()) + " parts");
    }
    {
      std::lock_guard lock(mu_);
      slots_[static_cast<std::size_t>(rank)] = {&parts, 0, 0};
    }
    arrive_and_wait(posted_, /*abortable=*/true, tally, "an all-to-all");
    // Every rank checks every part's width, so all throw alike before the
    // second barrier.
    for (const Slot& s : slots_) {
      for (const Mat<T>& part : *static_cast<const std::vector<Mat<T>>*>(s.data)) {
        if (part.cols() != parts[0].cols()) {
          throw std::runtime_error("an all-to-all of parts " + std::to_string(parts[0].cols()) +
                                   " wide met one " + std::to_string(part.cols()) + " wide");
        }
      }
    }
    std::vector<Mat<T>> in(parts.size());
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      in[s] = (*static_cast<const std::vector<Mat<T>>*>(
          slots_[s].data))[static_cast<std::size_t>(rank)];
      if (s != static_cast<std::size_t>(rank)) received += static_cast<Bytes>(in[s].size());
    }
    arrive_and_wait(read_, /*abortable=*/false, tally, "an all-to-all");
    parts = std::move(in);
  }
  if (tally != nullptr) tally->add(start, cpu_start, received * static_cast<Bytes>(sizeof(T)));
}

template void TensorGroup::all_reduce<float>(int, Mat<float>&, Reduce);
template void TensorGroup::all_reduce<double>(int, Mat<double>&, Reduce);
template void TensorGroup::all_to_all<float>(int, std::vector<Mat<float>>&);
template void TensorGroup::all_to_all<double>(int, std::vector<Mat<double>>&);

}  // namespace pipescope::exec
