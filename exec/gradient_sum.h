#pragma once
// The gradients a stage's ranks hold for the same parameters (the context
// shares of a sequence, the expert ranks' shared layers), summed before the
// optimizer step as the runtime sums them, and what that costs, measured.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "exec/compute/host_memory.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_group.h"
#include "exec/transport_profile.h"

namespace pipescope::exec {

// Sums the gradients of `params` over `group`, this thread its rank `rank`:
// laid end to end in one matrix (as DistributedDataParallel buckets them: an
// all-reduce costs its ranks two meetings whatever its size), all-reduced,
// and laid back. Laying them out and back is the reduction's work too, so
// the calling thread's tally (CollectiveScope) counts it with the all-reduce.
void sum_gradients(TensorGroup& group, int rank, const std::vector<Param*>& params);

// sum_gradients by `ranks` threads at once, back to back, over gradients of
// 1 KiB to 1 MiB a rank and of `largest` floats where that is more (a
// model's: its sum lays out and allocates as many bytes; four parameters
// each): rank 0's median time of one sum, fitted by fit_transport as
// latency + bytes / bandwidth. Throws std::invalid_argument unless
// ranks >= 2 and repeats >= 1.
TransportFigures profile_gradient_sum(int ranks, int repeats, Eigen::Index largest = 0);
// Whether `ranks` threads (or processes of one machine) can sum `params`
// gradients each with `host` available: each holds the gradients, the
// matrix they are laid out in and the reduced one, 3 floats a parameter.
// True when the memory is not known.
bool gradient_sum_fits(int ranks, std::int64_t params, const std::optional<HostMemory>& host);

// The same for a group whose ranks are processes (exec/compute/group_link.h):
// every process of `link` calls it at once and gets its own rank's fit (the
// first rank's is the one to keep). Throws std::invalid_argument for a link
// of fewer than 2 ranks or repeats < 1.
TransportFigures profile_linked_gradient_sum(const std::shared_ptr<GroupLink>& link, int repeats,
                                             Eigen::Index largest = 0);

}  // namespace pipescope::exec
