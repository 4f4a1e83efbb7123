#pragma once
// The in-process ring of a context-parallel group (exec/compute/ring_attention.h):
// C ranks, threads of one process, each passing blocks to the next rank
// (r + 1 mod C) and taking them from the previous one, as the point-to-point
// sends of Megatron-LM's context parallelism do. Passing does not wait for
// the receiver: post copies the block into the rank's mailbox and returns,
// so a rank computes on its block while the next rank's copy is taken; it
// waits only when its previous block has not been taken yet. take waits for
// the previous rank's next block.
//
// A ring has channels, each a mailbox a rank (the attention's backward passes
// the keys and values on one and their gradients on another, so that
// neither waits for the other). Each rank's k-th post on a channel pairs
// with the next rank's k-th take on it, as the ranks run the same op list. Waits give up as the
// tensor group's do (the thread's CollectiveTally: the step's abort flag and its limit), and a
// take's wall and CPU time and bytes count in the tally, as an all-reduce's.
//
// A ring made with a GroupLink (exec/compute/group_link.h) is this process's
// one rank of a ring whose ranks are processes (under MPI, one a device and
// share): post sends the block to the next rank's process and returns, take
// receives the previous rank's, on the link's channel of the same number.
// After a failed step (reset) such a ring refuses further use: a block that
// was on its way cannot be told from the next step's.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "exec/compute/group_link.h"
#include "exec/compute/kernels.h"

namespace pipescope::exec {

class RingExchange {
 public:
  static constexpr int kChannels = 2;

  // Throws std::invalid_argument unless ranks >= 1.
  explicit RingExchange(int ranks);
  // This process's rank of the link's ring (the only rank it may post and
  // take as). Throws std::invalid_argument for a null link.
  explicit RingExchange(std::shared_ptr<GroupLink> link);
  int ranks() const { return ranks_; }

  // Copies m into rank's mailbox of `channel` for rank + 1, once its previous
  // block there has been taken. A ring of one keeps it for rank 0 itself.
  template <typename T>
  void post(int rank, int channel, const Mat<T>& m);
  // Sets m to the block rank - 1 posted next on `channel`, once it is there.
  template <typename T>
  void take(int rank, int channel, Mat<T>& m);

  // Empties every mailbox: what a failed step posted and nobody took. Only
  // once no rank uses the ring. A linked ring is unusable from then on.
  void reset();

  // One rank's end of the ring, as the attention kernels take it.
  struct Port {
    RingExchange* ring = nullptr;
    int rank = 0;
    template <typename T>
    void post(int channel, const Mat<T>& m) const {
      ring->post(rank, channel, m);
    }
    template <typename T>
    void take(int channel, Mat<T>& m) const {
      ring->take(rank, channel, m);
    }
  };
  Port port(int rank) { return {this, rank}; }

 private:
  struct Mailbox {
    std::vector<unsigned char> bytes;
    Index rows = 0;
    Index cols = 0;
    std::uint64_t posted = 0;  // blocks posted
    std::uint64_t taken = 0;   // blocks taken
  };
  // Waits on cv_ until ready() or the step stops (CollectiveAborted) or the
  // thread's limit passes (std::runtime_error naming `what`).
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready&& ready, const char* what);
  // The link's forms of post and take.
  template <typename T>
  void linked_post(int rank, int channel, const Mat<T>& m);
  template <typename T>
  void linked_take(int rank, int channel, Mat<T>& m);
  // Throws std::invalid_argument unless `rank` is the link's.
  void check_linked_rank(int rank) const;

  const int ranks_;
  const std::shared_ptr<GroupLink> link_;  // null: the ranks are threads
  bool broken_ = false;                    // a linked ring after reset
  std::mutex mu_;
  std::condition_variable cv_;
  Mailbox& box(int rank, int channel);

  std::vector<Mailbox> boxes_;  // rank r's of channel c at r kChannels + c
};

extern template void RingExchange::post<float>(int, int, const Mat<float>&);
extern template void RingExchange::post<double>(int, int, const Mat<double>&);
extern template void RingExchange::take<float>(int, int, Mat<float>&);
extern template void RingExchange::take<double>(int, int, Mat<double>&);

}  // namespace pipescope::exec
