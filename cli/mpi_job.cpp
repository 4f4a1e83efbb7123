#include "cli/mpi_job.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/error_line.h"
#include "exec/host_memory.h"
#include "exec/plan_runner.h"
#ifdef PIPESCOPE_HAVE_NCCL
#include "exec/cuda/gpu.h"
#include "exec/mpi/nccl_transport.h"
#endif

namespace pipescope::cli {

void throw_no_mpi() {
  throw std::invalid_argument(
      "--backend mpi: this pipescope was built without MPI (install OpenMPI, e.g. "
      "scripts/install-deps.sh, and configure with -DPIPESCOPE_WITH_MPI=ON)");
}

#ifdef PIPESCOPE_HAVE_MPI
int MpiJob::input_error(const std::exception& e) const {
  if (rank() == 0) print_error(e.what());
  return 1;
}

void MpiJob::rank_error(const std::exception& e) const {
  print_error("rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ": " + e.what());
  MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; does not return
  std::_Exit(1);
}

void MpiJob::require_devices(int devices, const std::string& plan_file) const {
  if (devices == size()) return;
  throw std::invalid_argument(plan_file + ": the plan runs on " + std::to_string(devices) +
                              " devices but this MPI job has " + std::to_string(size()) +
                              " processes; start it with mpirun -np " + std::to_string(devices));
}

std::vector<int> MpiJob::node_ranks() const {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &node);
  int count = 0;
  MPI_Comm_size(node, &count);
  std::vector<int> ranks(static_cast<std::size_t>(count));
  const int me = rank();
  MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  return ranks;
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
  const int mine = message.empty() ? size() : rank();
  int first = size();
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size()) return;
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, first, MPI_COMM_WORLD);
  message.resize(static_cast<std::size_t>(length));
  MPI_Bcast(message.data(), length, MPI_CHAR, first, MPI_COMM_WORLD);
  throw std::invalid_argument(message);
}

namespace {

// The memory this rank's devices share with the others of its pool, if known.
// Every rank makes the same collective calls whatever its node has (a GPU, a
// readable memory figure), so that none waits for a call another skipped.
std::optional<exec::MemoryPool> rank_pool(const MpiJob& job, bool on_gpu) {
  const std::vector<int> node = job.node_ranks();
  if (on_gpu) {
#ifdef PIPESCOPE_HAVE_NCCL
    // local_gpu() splits the world by node: only if every rank has a GPU.
    int has_gpu = exec::cuda::visible_gpus().devices > 0 ? 1 : 0;
    int all_have = 0;
    MPI_Allreduce(&has_gpu, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_have == 0) return {};  // the run itself says why there is no GPU
    const int gpu = exec::local_gpu();
    const std::optional<Bytes> free = exec::cuda::free_gpu_memory(gpu);
    if (!free) return {};
    return exec::MemoryPool{
        "on GPU " + std::to_string(gpu) + " of rank " + std::to_string(job.rank()),
        *free,
        "cudaMemGetInfo",
        {job.rank()}};
#else
    return {};
#endif
  }
  const std::optional<exec::HostMemory> host = exec::host_memory_available();
  if (!host) return {};
  return exec::MemoryPool{"on the node of rank " + std::to_string(job.rank()), host->bytes,
                          host->source, node};
}

}  // namespace

void MpiJob::check_memory(const Plan& plan, const std::string& plan_file, bool on_gpu) const {
  const std::optional<exec::MemoryPool> pool = rank_pool(*this, on_gpu);
  agree([&] {
    if (pool) exec::check_plan_fits(plan, plan_file, {*pool});
  });
}
#endif

}  // namespace pipescope::cli
