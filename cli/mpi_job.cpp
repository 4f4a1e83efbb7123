#include "cli/mpi_job.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/error_line.h"
#include "exec/compute/host_memory.h"
#include "exec/plan_runner.h"
#include "exec/transport.h"

namespace pipescope::cli {

namespace {

const exec::MpiBackend& open_mpi() {
  try {
    return exec::mpi_backend();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--backend mpi: ") + e.what());
  }
}

}  // namespace

MpiJob::MpiJob() : mpi_(open_mpi()), session_(mpi_.start_session()) {}

int MpiJob::input_error(const std::exception& e) const {
  if (rank() == 0) print_error(e.what());
  return 1;
}

void MpiJob::rank_error(const std::exception& e) const {
  print_error("rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ": " + e.what());
  mpi_.abort_job();
  std::_Exit(1);  // not reached: abort_job ends the process
}

ProcessGroup process_group(const Plan& plan) {
  if (plan.expert_parallel > 1 && plan.context_parallel > 1) {
    return {plan.expert_parallel * plan.context_parallel, 'E', "expert ranks' shares",
            "their tokens and their keys and values"};
  }
  if (plan.expert_parallel > 1) {
    return {plan.expert_parallel, 'E', "expert ranks", "their tokens"};
  }
  if (plan.context_parallel > 1) {
    return {plan.context_parallel, 'C', "shares", "their keys and values"};
  }
  return {};
}

void MpiJob::require_devices(const Plan& plan, const std::string& plan_file) const {
  const ProcessGroup group = process_group(plan);
  const std::string problem =
      exec::rank_count_problem(plan.schedule_ops().devices(), size(), group.ranks, group.name);
  if (!problem.empty()) throw std::invalid_argument(plan_file + ": " + problem);
}

std::vector<int> MpiJob::node_ranks() const {
  return mpi_.node_ranks();
}

void MpiJob::agree(const std::function<void()>& check) const {
  std::string message;
  try {
    check();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "a check failed";
  } catch (...) {
    message = "a check failed";
  }
  const int first = mpi_.min_over_ranks(message.empty() ? size() : rank());
  if (first == size()) return;
  // Said without a rank when every rank met it (the same file on each),
  // with the rank's when only some did (plan1.json missing on rank 1).
  const bool everyone = mpi_.min_over_ranks(message.empty() ? 0 : 1) == 1;
  const std::string said = mpi_.broadcast(message, first);
  throw std::invalid_argument(everyone ? said
                                       : "rank " + std::to_string(first) + " of " +
                                             std::to_string(size()) + ": " + said);
}

namespace {

// The memory this rank's devices share with the others of its pool, if known.
// Every rank makes the same collective calls whatever its node has (a GPU, a
// readable memory figure), so that none waits for a call another skipped.
std::optional<exec::MemoryPool> rank_pool(const MpiJob& job, const exec::MpiBackend& mpi,
                                          bool on_gpu) {
  const std::vector<int> node = job.node_ranks();
  if (on_gpu) {
    // local_gpu() splits the world by node: only if every rank has a GPU and
    // the NCCL backend (the run itself says why not).
    const exec::CudaBackend* cuda = nullptr;
    try {
      exec::nccl_backend();
      cuda = &exec::cuda_backend();
    } catch (const std::runtime_error&) {
    }
    const int has_gpu = cuda != nullptr && cuda->visible_gpus().devices > 0 ? 1 : 0;
    if (mpi.min_over_ranks(has_gpu) == 0) return {};
    const int gpu = exec::nccl_backend().local_gpu();
    const std::optional<Bytes> free = cuda->free_gpu_memory(gpu);
    if (!free) return {};
    return exec::MemoryPool{
        "on GPU " + std::to_string(gpu) + " of rank " + std::to_string(job.rank()),
        *free,
        "cudaMemGetInfo",
        {job.rank()}};
  }
  const std::optional<exec::HostMemory> host = exec::host_memory_available();
  if (!host) return {};
  return exec::MemoryPool{"on the node of rank " + std::to_string(job.rank()), host->bytes,
                          host->source, node};
}

}  // namespace

void MpiJob::check_memory(const Plan& plan, const std::string& plan_file, bool on_gpu) const {
  std::optional<exec::MemoryPool> pool = rank_pool(*this, mpi_, on_gpu);
  // Rank r runs device r mod K (as its share or expert rank r / K, whose part
  // of a device's memory is what plan_device_memory counts; the process also
  // builds the other ranks' layers of the small models the executor runs).
  const int devices = plan.schedule_ops().devices();
  if (pool) {
    for (int& d : pool->devices) d %= devices;
  }
  agree([&] {
    if (pool) exec::check_plan_fits(plan, plan_file, {*pool});
  });
}

}  // namespace pipescope::cli
