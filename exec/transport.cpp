#include "exec/transport.h"

#include <numeric>
#include <string>
#include <utility>

namespace pipescope::exec {

std::string rank_count_problem(int devices, int ranks, int group_ranks, const char* rank_name) {
  const int processes = devices * group_ranks;
  if (processes == ranks) return {};
  const std::string each = group_ranks == 1
                               ? std::string()
                               : " of " + std::to_string(group_ranks) + " " + rank_name +
                                     " each (" + std::to_string(processes) + " processes)";
  return "the plan runs on " + std::to_string(devices) + " device" + (devices == 1 ? "" : "s") +
         each + " but this MPI job has " + std::to_string(ranks) + " process" +
         (ranks == 1 ? "" : "es") + "; start it with mpirun -np " + std::to_string(processes);
}

std::vector<int> Transport::local_group_ranks(int group_ranks) const {
  std::vector<int> all(static_cast<std::size_t>(group_ranks));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::vector<int> InProcessTransport::local_devices(int devices) const {
  std::vector<int> all(static_cast<std::size_t>(devices));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

Transport::Clock::time_point InProcessTransport::begin_step(const Schedule& schedule) {
  // Fresh channels each step: nothing a failed step left behind reaches the next.
  channels_ = std::vector<Channel>(static_cast<std::size_t>(2 * schedule.stages));
  return Clock::now();
}

void InProcessTransport::send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) {
  channels_[static_cast<std::size_t>(route_id(kind, to_stage))].put(micro_batch,
                                                                    std::move(payload));
}

Transport::Wait InProcessTransport::take(TransferKind kind, int to_stage, int micro_batch,
                                         Clock::time_point deadline,
                                         const std::atomic<bool>& aborted, Tensor& out) {
  return channels_[static_cast<std::size_t>(route_id(kind, to_stage))].take(micro_batch, deadline,
                                                                            aborted, out);
}

void InProcessTransport::wake_all() {
  for (Channel& c : channels_) c.wake_all();
}

std::string InProcessTransport::device_name(int device) const {
  return "device " + std::to_string(device) + " (cpu thread)";
}

}  // namespace pipescope::exec
