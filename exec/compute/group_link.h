#pragma once
// The other ranks of a group when they are other processes. A TensorGroup
// (exec/compute/tensor_group.h) made with a link is this process's one rank of
// the group and meets the other ranks through the link (under MPI, one
// process per device and share or expert rank: exec/mpi/mpi_group_link.h)
// instead of in shared memory. The k-th call of every rank pairs with the k-th call of every
// other, as with threads: the ranks run the same op list, one thread a process,
// so every group of the process may share one link. Besides the collectives,
// a ring's point-to-point passes (exec/compute/ring_exchange.h: context
// parallelism's shares as processes), on channels of their own.

#include <cstddef>
#include <memory>
#include <vector>

namespace pipescope::exec {

struct CollectiveTally;

class GroupLink {
 public:
  using Bytes = std::vector<std::byte>;
  static constexpr int kChannels = 16;  // of send and receive

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
  // Hands `bytes` to rank `to` on `channel` (0 <= channel < kChannels) and returns
  // without waiting for it to be received; the k-th send from one rank to
  // another on a channel pairs with the other's k-th receive from it there.
  virtual void send(int to, int channel, Bytes bytes, const char* what) = 0;
  // What rank `from` sent this one next on `channel`, once it is here. Waits
  // and throws as all_gather.
  virtual Bytes receive(int from, int channel, const CollectiveTally* tally, const char* what) = 0;
  // A link of the ranks that pass the same `color`, ranked by `key` (then by
  // their rank here): every rank of this link calls it at once, in the same
  // order as its other splits. Under expert parallelism beside context
  // parallelism a device's E x C processes split into each expert rank's
  // shares and each share's expert ranks.
  virtual std::shared_ptr<GroupLink> split(int color, int key) = 0;
};

}  // namespace pipescope::exec
