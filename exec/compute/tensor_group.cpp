#include "exec/compute/tensor_group.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "exec/compute/thread_clock.h"
#include "exec/compute/yield_first.h"

namespace pipescope::exec {

namespace {

thread_local CollectiveTally* current_tally = nullptr;

std::string shape(Index rows, Index cols) {
  return "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
}

// A matrix as the bytes a link carries: its rows and columns (two int64), then
// its values. The header keeps the values aligned as the allocation is.
constexpr std::size_t kHeader = 2 * sizeof(std::int64_t);

template <typename T>
GroupLink::Bytes pack(const Mat<T>& m) {
  GroupLink::Bytes out(kHeader + static_cast<std::size_t>(m.size()) * sizeof(T));
  const std::int64_t dims[2] = {m.rows(), m.cols()};
  std::memcpy(out.data(), dims, kHeader);
  if (m.size() > 0) std::memcpy(out.data() + kHeader, m.data(), out.size() - kHeader);
  return out;
}

// The shape pack wrote, checked against the bytes that came with it.
std::pair<Index, Index> packed_shape(const GroupLink::Bytes& b, std::size_t value_size) {
  std::int64_t dims[2] = {-1, -1};
  if (b.size() >= kHeader) std::memcpy(dims, b.data(), kHeader);
  if (dims[0] < 0 || dims[1] < 0 ||
      (dims[1] > 0 && static_cast<std::size_t>(dims[0]) >
                          (b.size() - kHeader) / value_size / static_cast<std::size_t>(dims[1])) ||
      kHeader + static_cast<std::size_t>(dims[0] * dims[1]) * value_size != b.size()) {
    throw std::runtime_error("a collective received " + std::to_string(b.size()) +
                             " bytes, not a matrix");
  }
  return {dims[0], dims[1]};
}

template <typename T>
Mat<T> unpack(const GroupLink::Bytes& b) {
  const auto [rows, cols] = packed_shape(b, sizeof(T));
  Mat<T> m(rows, cols);
  if (m.size() > 0) std::memcpy(m.data(), b.data() + kHeader, b.size() - kHeader);
  return m;
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

TensorGroup::TensorGroup(std::shared_ptr<GroupLink> link)
    : link_(std::move(link)), ranks_(link_ ? link_->ranks() : 0) {
  if (!link_) throw std::invalid_argument("a linked group needs a link");
}

void TensorGroup::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= ranks_) {
    throw std::invalid_argument(std::string(what) + " " + std::to_string(rank) + " outside [0, " +
                                std::to_string(ranks_) + ")");
  }
  if (link_ && rank != link_->rank()) {
    throw std::invalid_argument(std::string(what) + " " + std::to_string(rank) +
                                " is another process's: this one is rank " +
                                std::to_string(link_->rank()) + " of its group");
  }
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
  yield_first(lock, [&] { return b.generation != generation; });
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

void TensorGroup::check_shapes(const std::vector<Slot>& slots, int rank) {
  const Slot& mine = slots[static_cast<std::size_t>(rank)];
  for (const Slot& s : slots) {
    if (s.rows != mine.rows || s.cols != mine.cols) {
      throw std::runtime_error("an all-reduce of a " + shape(mine.rows, mine.cols) +
                               " matrix met one of " + shape(s.rows, s.cols));
    }
  }
}

template <typename T>
Mat<T> TensorGroup::reduced(const std::vector<Slot>& slots, Index rows, Index cols, Reduce op) {
  using Map = Eigen::Map<const Mat<T>>;
  const auto at = [&](std::size_t r) {
    return Map(static_cast<const T*>(slots[r].data), rows, cols);
  };
  Mat<T> out = at(0);
  for (std::size_t r = 1; r < slots.size(); ++r) {
    if (op == Reduce::kSum) {
      out += at(r);
    } else {
      out = out.cwiseMax(at(r));
    }
  }
  return out;
}

// Every rank's matrix in rank order, each rank checking every shape and
// reducing them alike.
template <typename T>
void TensorGroup::linked_all_reduce(Mat<T>& m, Reduce op, const CollectiveTally* tally) {
  const std::vector<GroupLink::Bytes> all = link_->all_gather(pack(m), tally, "an all-reduce");
  std::vector<Slot> slots(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto [rows, cols] = packed_shape(all[r], sizeof(T));
    slots[r] = {const_cast<std::byte*>(all[r].data()) + kHeader, rows, cols};
  }
  check_shapes(slots, link_->rank());
  m = reduced<T>(slots, m.rows(), m.cols(), op);
}

template <typename T>
void TensorGroup::all_reduce(int rank, Mat<T>& m, Reduce op) {
  check_rank(rank, "tensor rank");
  CollectiveTally* tally = current_tally;
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  if (link_ && ranks_ > 1) {
    linked_all_reduce(m, op, tally);
  } else if (ranks_ > 1) {
    {
      std::lock_guard lock(mu_);
      slots_[static_cast<std::size_t>(rank)] = {m.data(), m.rows(), m.cols()};
    }
    arrive_and_wait(posted_, /*abortable=*/true, tally, "an all-reduce");
    // Every rank checks every shape, so all throw alike before the second barrier.
    check_shapes(slots_, rank);
    Mat<T> out = reduced<T>(slots_, m.rows(), m.cols(), op);
    arrive_and_wait(read_, /*abortable=*/false, tally, "an all-reduce");
    m = std::move(out);
  }
  if (tally != nullptr && ranks_ > 1) {
    tally->add(start, cpu_start, static_cast<Bytes>(m.size()) * static_cast<Bytes>(sizeof(T)));
  }
}

// What each rank sent this one, its widths checked against this rank's
// parts; returns the values received from the others (not their bytes).
template <typename T>
Bytes TensorGroup::linked_all_to_all(std::vector<Mat<T>>& parts, const CollectiveTally* tally) {
  std::vector<GroupLink::Bytes> out;
  out.reserve(parts.size());
  for (const Mat<T>& part : parts) out.push_back(pack(part));
  const std::vector<GroupLink::Bytes> in = link_->all_to_all(out, tally, "an all-to-all");
  const Index width = parts[0].cols();
  Bytes received = 0;
  for (std::size_t s = 0; s < in.size(); ++s) {
    parts[s] = unpack<T>(in[s]);
    if (parts[s].cols() != width) {
      throw std::runtime_error("an all-to-all of parts " + std::to_string(width) +
                               " wide met one " + std::to_string(parts[s].cols()) + " wide");
    }
    if (s != static_cast<std::size_t>(link_->rank()))
      received += static_cast<Bytes>(parts[s].size());
  }
  return received;
}

template <typename T>
void TensorGroup::all_to_all(int rank, std::vector<Mat<T>>& parts) {
  check_rank(rank, "rank");
  CollectiveTally* tally = current_tally;
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  Bytes received = 0;
  if (ranks_ > 1 && parts.size() != static_cast<std::size_t>(ranks_)) {
    throw std::invalid_argument("an all-to-all of " + std::to_string(ranks_) + " ranks got " +
                                std::to_string(parts.size()) + " parts");
  }
  if (link_ && ranks_ > 1) {
    received = linked_all_to_all(parts, tally);
  } else if (ranks_ > 1) {
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
  if (tally != nullptr && ranks_ > 1) {
    tally->add(start, cpu_start, received * static_cast<Bytes>(sizeof(T)));
  }
}

template void TensorGroup::all_reduce<float>(int, Mat<float>&, Reduce);
template void TensorGroup::all_reduce<double>(int, Mat<double>&, Reduce);
template void TensorGroup::all_to_all<float>(int, std::vector<Mat<float>>&);
template void TensorGroup::all_to_all<double>(int, std::vector<Mat<double>>&);

}  // namespace pipescope::exec
