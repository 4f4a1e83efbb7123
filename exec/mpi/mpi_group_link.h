#pragma once
// A group's ranks as MPI processes (exec/compute/group_link.h): the processes
// of one communicator, each its rank in it. The collectives are MPI's
// non-blocking ones (the sizes first, then the bytes), polled as the
// transport's receives are (mpi_poll.h) so that a waiting rank gives up at
// its tally's limit, for the whole collective, and stops when the step does.
// A collective given up cannot be withdrawn from MPI: its buffers stay with
// MPI, and the link refuses every later call (the command line's job ends
// with the step anyway, cli/mpi_job.h). A ring's sends are MPI_Isend on the
// channel's tag, their buffers kept until MPI has taken them; a receive
// probes for the next message (MPI_Improbe, polled the same way) and takes
// it whole.

#include <mpi.h>

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "exec/compute/group_link.h"

namespace pipescope::exec {

class MpiGroupLink final : public GroupLink {
 public:
  // Takes ownership of `comm` (freed on destruction).
  explicit MpiGroupLink(MPI_Comm comm);
  ~MpiGroupLink() override;
  MpiGroupLink(const MpiGroupLink&) = delete;
  MpiGroupLink& operator=(const MpiGroupLink&) = delete;

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  // The processes' communicator, for collectives of their own beside the
  // link's (the link keeps it).
  MPI_Comm communicator() const { return comm_; }
  std::vector<Bytes> all_gather(const Bytes& mine, const CollectiveTally* tally,
                                const char* what) override;
  std::vector<Bytes> all_to_all(const std::vector<Bytes>& parts, const CollectiveTally* tally,
                                const char* what) override;
  void send(int to, int channel, Bytes bytes, const char* what) override;
  Bytes receive(int from, int channel, const CollectiveTally* tally, const char* what) override;
  // MPI_Comm_split of the link's communicator.
  std::shared_ptr<GroupLink> split(int color, int key) override;

 private:
  // One collective's buffers, which MPI uses until its requests complete.
  struct Exchange {
    std::vector<int> send_counts, send_at, recv_counts, recv_at;
    Bytes out, in;
    MPI_Request request = MPI_REQUEST_NULL;
    // Once recv_counts have come: where each rank's bytes land in `in`.
    void make_room();
  };
  // A send's bytes, MPI's until its request completes.
  struct Send {
    Bytes bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // Throws std::runtime_error when an earlier collective was given up.
  void check_usable(const char* what) const;
  // Throws std::invalid_argument unless `peer` is a rank and `channel` a
  // channel of the link.
  void check_peer(int peer, int channel, const char* what) const;
  // Drops the sends MPI has finished with, oldest first.
  void reap_sends();
  // Polls `x.request` to its end, or (keeping x for MPI) throws as GroupLink
  // says once `deadline` passes or the step stops.
  void wait(std::unique_ptr<Exchange>& x, std::chrono::steady_clock::time_point deadline,
            const CollectiveTally* tally, const char* what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int ranks_ = 1;
  std::vector<std::unique_ptr<Exchange>> abandoned_;  // given up, still MPI's
  std::deque<Send> sends_;                            // not yet finished
};

}  // namespace pipescope::exec
