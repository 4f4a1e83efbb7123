#include "exec/mpi/mpi_group_link.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/tensor_group.h"
#include "exec/mpi/mpi_poll.h"

namespace pipescope::exec {

namespace {

// Displacements of `counts` laid end to end; throws when they pass what an
// MPI count holds.
std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> at(counts.size(), 0);
  long long total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    at[r] = static_cast<int>(total);
    total += counts[r];
    if (total > INT_MAX) {
      throw std::runtime_error("a collective of " + std::to_string(total) +
                               " bytes or more is too large for MPI's counts");
    }
  }
  return at;
}

int count_of(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    throw std::runtime_error("a collective's part of " + std::to_string(bytes) +
                             " bytes is too large for MPI's counts");
  }
  return static_cast<int>(bytes);
}

// `flat` cut at `at` into parts of `counts` bytes.
std::vector<GroupLink::Bytes> cut(const GroupLink::Bytes& flat, const std::vector<int>& counts,
                                  const std::vector<int>& at) {
  std::vector<GroupLink::Bytes> out(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r) {
    out[r].assign(flat.begin() + at[r], flat.begin() + at[r] + counts[r]);
  }
  return out;
}

// When a collective that starts now gives up: its tally's limit, for the
// whole of it.
std::chrono::steady_clock::time_point deadline_of(const CollectiveTally* tally) {
  return std::chrono::steady_clock::now() +
         (tally != nullptr ? tally->limit : CollectiveTally::kDefaultLimit);
}

// Polls `ready` (mpi_poll) until it says yes, `tally`'s abort flag (if any)
// is set, or `deadline` passes.
template <class Ready>
Transport::Wait poll(const Ready& ready, std::chrono::steady_clock::time_point deadline,
                     const CollectiveTally* tally) {
  static const std::atomic<bool> never{false};
  const std::atomic<bool>& aborted =
      tally != nullptr && tally->abort != nullptr ? *tally->abort : never;
  return mpi_poll(ready, deadline, aborted, {});
}

// Throws for a wait that did not end ready: CollectiveAborted when the step
// stopped it, else the error of one given up at `tally`'s limit, naming what
// it waited for.
[[noreturn]] void give_up(Transport::Wait w, const CollectiveTally* tally, const char* what,
                          const std::string& whom) {
  if (w == Transport::Wait::kAborted) throw CollectiveAborted();
  const auto limit = tally != nullptr ? tally->limit : CollectiveTally::kDefaultLimit;
  throw std::runtime_error(std::string(what) + " waited " + std::to_string(limit.count()) +
                           " ms for " + whom);
}

}  // namespace

void MpiGroupLink::Exchange::make_room() {
  recv_at = displacements(recv_counts);
  in.resize(static_cast<std::size_t>(recv_at.back() + recv_counts.back()));
}

MpiGroupLink::MpiGroupLink(MPI_Comm comm) : comm_(comm) {
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &ranks_), "MPI_Comm_size");
}

std::shared_ptr<GroupLink> MpiGroupLink::split(int color, int key) {
  check_usable("a split");
  MPI_Comm part = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  return std::make_shared<MpiGroupLink>(part);
}

MpiGroupLink::~MpiGroupLink() {
  // A collective given up may still write into its buffers, and a send that
  // nobody received still read from its own: they are left to MPI (the
  // process ends soon after such a step), and so is the communicator, which
  // MPI frees once its operations complete.
  for (std::unique_ptr<Exchange>& x : abandoned_) (void)x.release();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;  // nothing left to ask MPI
  // After a good step every send has been received; MPI may want a few
  // polls to say so.
  try {
    (void)poll(
        [&] {
          reap_sends();
          return sends_.empty();
        },
        std::chrono::steady_clock::now() + std::chrono::milliseconds(100), nullptr);
  } catch (const std::exception&) {
    // An MPI error here leaves the sends to MPI too.
  }
  for (Send& s : sends_) {
    if (s.request == MPI_REQUEST_NULL) continue;
    MPI_Request_free(&s.request);
    (void)new Bytes(std::move(s.bytes));  // MPI may still read them
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiGroupLink::check_usable(const char* what) const {
  if (abandoned_.empty()) return;
  throw std::runtime_error(std::string(what) +
                           " on a group whose earlier collective was given up (the processes "
                           "would pair it with this one)");
}

void MpiGroupLink::check_peer(int peer, int channel, const char* what) const {
  if (peer < 0 || peer >= ranks_ || channel < 0 || channel >= kChannels) {
    throw std::invalid_argument(std::string(what) + ": rank " + std::to_string(peer) +
                                " on channel " + std::to_string(channel) + " of a group of " +
                                std::to_string(ranks_) + " ranks and " + std::to_string(kChannels) +
                                " channels");
  }
}

void MpiGroupLink::reap_sends() {
  while (!sends_.empty()) {
    int done = 0;
    mpi_check(MPI_Test(&sends_.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done == 0) return;
    sends_.pop_front();
  }
}

void MpiGroupLink::wait(std::unique_ptr<Exchange>& x,
                        std::chrono::steady_clock::time_point deadline,
                        const CollectiveTally* tally, const char* what) {
  const Transport::Wait w = poll(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(&x->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return done != 0;
      },
      deadline, tally);
  if (w == Transport::Wait::kReady) return;
  abandoned_.push_back(std::move(x));
  give_up(w, tally, what, "the other ranks of its group");
}

std::vector<GroupLink::Bytes> MpiGroupLink::all_gather(const Bytes& mine,
                                                       const CollectiveTally* tally,
                                                       const char* what) {
  check_usable(what);
  const auto deadline = deadline_of(tally);
  auto x = std::make_unique<Exchange>();
  x->out = mine;
  x->send_counts = {count_of(mine.size())};
  x->recv_counts.resize(static_cast<std::size_t>(ranks_));
  mpi_check(MPI_Iallgather(x->send_counts.data(), 1, MPI_INT, x->recv_counts.data(), 1, MPI_INT,
                           comm_, &x->request),
            "MPI_Iallgather");
  wait(x, deadline, tally, what);
  x->make_room();
  mpi_check(MPI_Iallgatherv(x->out.data(), x->send_counts[0], MPI_BYTE, x->in.data(),
                            x->recv_counts.data(), x->recv_at.data(), MPI_BYTE, comm_, &x->request),
            "MPI_Iallgatherv");
  wait(x, deadline, tally, what);
  return cut(x->in, x->recv_counts, x->recv_at);
}

std::vector<GroupLink::Bytes> MpiGroupLink::all_to_all(const std::vector<Bytes>& parts,
                                                       const CollectiveTally* tally,
                                                       const char* what) {
  if (parts.size() != static_cast<std::size_t>(ranks_)) {
    throw std::invalid_argument(std::string(what) + " of " + std::to_string(ranks_) +
                                " ranks got " + std::to_string(parts.size()) + " parts");
  }
  check_usable(what);
  const auto deadline = deadline_of(tally);
  auto x = std::make_unique<Exchange>();
  for (const Bytes& part : parts) {
    x->send_counts.push_back(count_of(part.size()));
    x->out.insert(x->out.end(), part.begin(), part.end());
  }
  x->send_at = displacements(x->send_counts);
  x->recv_counts.resize(parts.size());
  mpi_check(MPI_Ialltoall(x->send_counts.data(), 1, MPI_INT, x->recv_counts.data(), 1, MPI_INT,
                          comm_, &x->request),
            "MPI_Ialltoall");
  wait(x, deadline, tally, what);
  x->make_room();
  mpi_check(MPI_Ialltoallv(x->out.data(), x->send_counts.data(), x->send_at.data(), MPI_BYTE,
                           x->in.data(), x->recv_counts.data(), x->recv_at.data(), MPI_BYTE, comm_,
                           &x->request),
            "MPI_Ialltoallv");
  wait(x, deadline, tally, what);
  return cut(x->in, x->recv_counts, x->recv_at);
}

void MpiGroupLink::send(int to, int channel, Bytes bytes, const char* what) {
  check_peer(to, channel, what);
  check_usable(what);
  reap_sends();
  const int count = count_of(bytes.size());
  Send& s = sends_.emplace_back();
  s.bytes = std::move(bytes);
  const int rc = MPI_Isend(s.bytes.data(), count, MPI_BYTE, to, channel, comm_, &s.request);
  if (rc != MPI_SUCCESS) sends_.pop_back();  // nothing of it is MPI's
  mpi_check(rc, "MPI_Isend");
}

GroupLink::Bytes MpiGroupLink::receive(int from, int channel, const CollectiveTally* tally,
                                       const char* what) {
  check_peer(from, channel, what);
  check_usable(what);
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  const Transport::Wait w = poll(
      [&] {
        reap_sends();
        int found = 0;
        mpi_check(MPI_Improbe(from, channel, comm_, &found, &message, &status), "MPI_Improbe");
        return found != 0;
      },
      deadline_of(tally), tally);
  // Nothing of a receive given up stays with MPI: the message, if it comes,
  // waits for a later probe.
  if (w != Transport::Wait::kReady) {
    give_up(w, tally, what, "rank " + std::to_string(from) + " of its group");
  }
  int count = 0;
  mpi_check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  Bytes out(static_cast<std::size_t>(count));
  mpi_check(MPI_Mrecv(out.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return out;
}

}  // namespace pipescope::exec
