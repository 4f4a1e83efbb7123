#include "exec/compute/ring_exchange.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/tensor_group.h"
#include "exec/compute/thread_clock.h"
#include "exec/compute/yield_first.h"

namespace pipescope::exec {

namespace {

void check_rank(int rank, int ranks, int channel) {
  if (rank < 0 || rank >= ranks) {
    throw std::invalid_argument("ring rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(ranks) + ")");
  }
  if (channel < 0 || channel >= RingExchange::kChannels) {
    throw std::invalid_argument("ring channel " + std::to_string(channel) + " outside [0, " +
                                std::to_string(RingExchange::kChannels) + ")");
  }
}

}  // namespace

RingExchange::RingExchange(int ranks) : ranks_(ranks) {
  if (ranks < 1) {
    throw std::invalid_argument("a context-parallel ring needs at least 1 rank, got " +
                                std::to_string(ranks));
  }
  boxes_.resize(static_cast<std::size_t>(ranks) * kChannels);
}

RingExchange::RingExchange(std::shared_ptr<GroupLink> link)
    : ranks_(link ? link->ranks() : 0), link_(std::move(link)) {
  if (!link_) throw std::invalid_argument("a linked context-parallel ring needs a link");
}

void RingExchange::reset() {
  std::lock_guard lock(mu_);
  for (Mailbox& b : boxes_) b = Mailbox{};
  if (link_) broken_ = true;
}

void RingExchange::check_linked_rank(int rank) const {
  if (rank != link_->rank()) {
    throw std::invalid_argument("ring rank " + std::to_string(rank) + " on the process of rank " +
                                std::to_string(link_->rank()));
  }
  if (broken_) {
    throw std::runtime_error(
        "a ring exchange between processes after a failed step (a block of that step may still "
        "be on its way)");
  }
}

template <typename T>
void RingExchange::linked_post(int rank, int channel, const Mat<T>& m) {
  check_linked_rank(rank);
  const Index shape[2] = {m.rows(), m.cols()};
  const auto bytes = static_cast<std::size_t>(m.size()) * sizeof(T);
  GroupLink::Bytes out(sizeof shape + bytes);
  std::memcpy(out.data(), shape, sizeof shape);
  if (bytes > 0) std::memcpy(out.data() + sizeof shape, m.data(), bytes);
  link_->send((rank + 1) % ranks_, channel, std::move(out), "a ring exchange");
}

template <typename T>
void RingExchange::linked_take(int rank, int channel, Mat<T>& m) {
  check_linked_rank(rank);
  const GroupLink::Bytes in = link_->receive((rank + ranks_ - 1) % ranks_, channel,
                                             current_collective_tally(), "a ring exchange");
  Index shape[2] = {0, 0};
  if (in.size() >= sizeof shape) std::memcpy(shape, in.data(), sizeof shape);
  const auto bytes = static_cast<std::size_t>(shape[0] * shape[1]) * sizeof(T);
  if (in.size() < sizeof shape || shape[0] < 0 || shape[1] < 0 ||
      in.size() != sizeof shape + bytes) {
    throw std::runtime_error("a ring exchange received " + std::to_string(in.size()) +
                             " bytes, not a block");
  }
  m.resize(shape[0], shape[1]);
  if (bytes > 0) std::memcpy(m.data(), in.data() + sizeof shape, bytes);
}

RingExchange::Mailbox& RingExchange::box(int rank, int channel) {
  return boxes_[static_cast<std::size_t>(rank * kChannels + channel)];
}

template <class Ready>
void RingExchange::wait(std::unique_lock<std::mutex>& lock, Ready&& ready, const char* what) {
  const CollectiveTally* tally = current_collective_tally();
  const auto limit = tally != nullptr ? tally->limit : CollectiveTally::kDefaultLimit;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  yield_first(lock, ready);
  while (!ready()) {
    if (tally != nullptr && tally->abort != nullptr && tally->abort->load()) {
      throw CollectiveAborted();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error(std::string("a ring exchange waited ") +
                               std::to_string(limit.count()) + " ms " + what);
    }
    cv_.wait_for(lock, CollectiveTally::kAbortPoll);
  }
}

template <typename T>
void RingExchange::post(int rank, int channel, const Mat<T>& m) {
  check_rank(rank, ranks_, channel);
  if (link_) return linked_post(rank, channel, m);
  CollectiveTally* tally = current_collective_tally();
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  std::unique_lock lock(mu_);
  Mailbox& mine = box(rank, channel);
  wait(
      lock, [&] { return mine.taken == mine.posted; }, "for the next rank to take a block");
  // A wait for the next rank is the exchange's time, not the op's compute.
  if (tally != nullptr) tally->add(start, cpu_start, 0, /*collectives=*/0);  // the take counts it
  const auto bytes = static_cast<std::size_t>(m.size()) * sizeof(T);
  mine.bytes.resize(bytes);
  if (bytes > 0) std::memcpy(mine.bytes.data(), m.data(), bytes);
  mine.rows = m.rows();
  mine.cols = m.cols();
  ++mine.posted;
  cv_.notify_all();
}

template <typename T>
void RingExchange::take(int rank, int channel, Mat<T>& m) {
  check_rank(rank, ranks_, channel);
  CollectiveTally* tally = current_collective_tally();
  const auto start = std::chrono::steady_clock::now();
  const SimTime cpu_start = thread_cpu_ns();
  if (link_) {
    linked_take(rank, channel, m);
  } else {
    std::unique_lock lock(mu_);
    Mailbox& from = box((rank + ranks_ - 1) % ranks_, channel);
    wait(
        lock, [&] { return from.posted > from.taken; }, "for the previous rank's block");
    m.resize(from.rows, from.cols);
    if (!from.bytes.empty()) std::memcpy(m.data(), from.bytes.data(), from.bytes.size());
    ++from.taken;
    cv_.notify_all();
  }
  if (tally != nullptr) {
    tally->add(start, cpu_start, static_cast<Bytes>(m.size()) * static_cast<Bytes>(sizeof(T)));
  }
}

template void RingExchange::post<float>(int, int, const Mat<float>&);
template void RingExchange::post<double>(int, int, const Mat<double>&);
template void RingExchange::take<float>(int, int, Mat<float>&);
template void RingExchange::take<double>(int, int, Mat<double>&);

}  // namespace pipescope::exec
