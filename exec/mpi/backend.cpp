// The MPI backend as the command opens it (exec/backends.h).

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exec/backends.h"
#include "exec/mpi/mpi_transport.h"

namespace pipescope::exec {
namespace {

class Backend final : public MpiBackend {
 public:
  std::shared_ptr<void> start_session() const override {
    return std::make_shared<MpiSession>(nullptr, nullptr);
  }
  int rank() const override { return MpiSession::rank(); }
  int size() const override { return MpiSession::size(); }
  [[noreturn]] void abort_job() const override {
    MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; does not return
    std::_Exit(1);
  }
  std::vector<int> node_ranks() const override;
  int min_over_ranks(int value) const override {
    int least = value;
    MPI_Allreduce(&value, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return least;
  }
  std::string broadcast(const std::string& message, int root) const override;
  std::shared_ptr<Transport> transport() const override { return std::make_shared<MpiTransport>(); }
  void measure_machine(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                       std::uint64_t seed, const PlanStages* plan) const override {
    measure_mpi_machine(profile, spec, batch, seed, plan);
  }
};

std::vector<int> Backend::node_ranks() const {
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

std::string Backend::broadcast(const std::string& message, int root) const {
  std::string out = message;
  int length = static_cast<int>(out.size());
  MPI_Bcast(&length, 1, MPI_INT, root, MPI_COMM_WORLD);
  out.resize(static_cast<std::size_t>(length));
  MPI_Bcast(out.data(), length, MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

}  // namespace
}  // namespace pipescope::exec

extern "C" __attribute__((visibility("default"))) const pipescope::exec::MpiBackend*
pipescope_mpi_backend() {
  static const pipescope::exec::Backend backend;
  return &backend;
}
