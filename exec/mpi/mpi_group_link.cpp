#include "exec/mpi/mpi_group_link.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <stdexcept>
#include <string>

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

}  // namespace

MpiGroupLink::MpiGroupLink(MPI_Comm comm) : comm_(comm) {
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &ranks_), "MPI_Comm_size");
}

MpiGroupLink::~MpiGroupLink() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiGroupLink::wait(MPI_Request& request, const CollectiveTally* tally,
                        const char* what) const {
  static const std::atomic<bool> never{false};
  const auto limit = tally != nullptr ? tally->limit : CollectiveTally::kDefaultLimit;
  const std::atomic<bool>& aborted =
      tally != nullptr && tally->abort != nullptr ? *tally->abort : never;
  const Transport::Wait w = mpi_poll(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return done != 0;
      },
      Transport::Clock::now() + limit, aborted, {});
  // A collective left behind is not cancellable: the job ends with the step
  // (a failed rank aborts every process, cli/mpi_job.h).
  if (w == Transport::Wait::kAborted) throw CollectiveAborted();
  if (w == Transport::Wait::kTimedOut) {
    throw std::runtime_error(std::string(what) + " waited " + std::to_string(limit.count()) +
                             " ms for the other ranks of its group");
  }
}

std::vector<GroupLink::Bytes> MpiGroupLink::all_gather(const Bytes& mine,
                                                       const CollectiveTally* tally,
                                                       const char* what) {
  const int count = count_of(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks_));
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_, &request),
            "MPI_Iallgather");
  wait(request, tally, what);
  const std::vector<int> at = displacements(counts);
  Bytes flat(static_cast<std::size_t>(at.back() + counts.back()));
  mpi_check(MPI_Iallgatherv(mine.data(), count, MPI_BYTE, flat.data(), counts.data(), at.data(),
                            MPI_BYTE, comm_, &request),
            "MPI_Iallgatherv");
  wait(request, tally, what);
  return cut(flat, counts, at);
}

std::vector<GroupLink::Bytes> MpiGroupLink::all_to_all(const std::vector<Bytes>& parts,
                                                       const CollectiveTally* tally,
                                                       const char* what) {
  if (parts.size() != static_cast<std::size_t>(ranks_)) {
    throw std::invalid_argument(std::string(what) + " of " + std::to_string(ranks_) +
                                " ranks got " + std::to_string(parts.size()) + " parts");
  }
  std::vector<int> send_counts(parts.size());
  Bytes flat_out;
  for (std::size_t d = 0; d < parts.size(); ++d) {
    send_counts[d] = count_of(parts[d].size());
    flat_out.insert(flat_out.end(), parts[d].begin(), parts[d].end());
  }
  const std::vector<int> send_at = displacements(send_counts);
  std::vector<int> recv_counts(parts.size());
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Ialltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm_,
                          &request),
            "MPI_Ialltoall");
  wait(request, tally, what);
  const std::vector<int> recv_at = displacements(recv_counts);
  Bytes flat_in(static_cast<std::size_t>(recv_at.back() + recv_counts.back()));
  mpi_check(
      MPI_Ialltoallv(flat_out.data(), send_counts.data(), send_at.data(), MPI_BYTE, flat_in.data(),
                     recv_counts.data(), recv_at.data(), MPI_BYTE, comm_, &request),
      "MPI_Ialltoallv");
  wait(request, tally, what);
  return cut(flat_in, recv_counts, recv_at);
}

}  // namespace pipescope::exec
