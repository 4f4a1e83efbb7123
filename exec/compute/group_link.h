#pragma once
// The other ranks of a group when they are other processes. A TensorGroup
// (exec/compute/tensor_group.h) made with a link is this process's one rank of
// the group and meets the other ranks through the link (under MPI, one
// process per device and expert rank: exec/mpi/mpi_group_link.h) instead of in
// shared memory. The k-th call of every rank pairs with the k-th call of every
// other, as with threads: the ranks run the same op list, one thread a process,
// so every group of the process may share one link.

#include <cstddef>
#include <vector>

namespace pipescope::exec {

struct CollectiveTally;

class GroupLink {
 public:
  using Bytes = std::vector<std::byte>;

  virtual ~GroupLink() = default;
  // This process's rank in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // Every rank's `mine`, in rank order (the ranks may pass different sizes).
  // `tally` (may be null) gives the wait's limit and abort flag: throws
  // CollectiveAborted when the flag is set while it waits, std::runtime_error
  // naming `what` ("an all-reduce") when the others take longer than the
  // limit.
  virtual std::vector<Bytes> all_gather(const Bytes& mine, const CollectiveTally* tally,
                                        const char* what) = 0;
  // parts[d] goes to rank d (one part for each rank, its own included); on
  // return [s] holds what rank s sent this one. Waits and throws as all_gather.
  virtual std::vector<Bytes> all_to_all(const std::vector<Bytes>& parts,
                                        const CollectiveTally* tally, const char* what) = 0;
};

}  // namespace pipescope::exec
