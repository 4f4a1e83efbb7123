#pragma once
// A group's ranks as MPI processes (exec/compute/group_link.h): the processes
// of one communicator, each its rank in it. The collectives are MPI's
// non-blocking ones (the sizes first, then the bytes), polled as the
// transport's receives are (mpi_poll.h) so that a waiting rank gives up at
// its tally's limit and stops when the step does.

#include <mpi.h>

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
  std::vector<Bytes> all_gather(const Bytes& mine, const CollectiveTally* tally,
                                const char* what) override;
  std::vector<Bytes> all_to_all(const std::vector<Bytes>& parts, const CollectiveTally* tally,
                                const char* what) override;

 private:
  // Polls `request` to its end, or throws as GroupLink says.
  void wait(MPI_Request& request, const CollectiveTally* tally, const char* what) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int ranks_ = 1;
};

}  // namespace pipescope::exec
