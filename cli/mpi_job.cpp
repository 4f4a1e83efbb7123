#include "cli/mpi_job.h"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace pipescope::cli {

void throw_no_mpi() {
  throw std::invalid_argument(
      "--backend mpi: this pipescope was built without MPI (install OpenMPI, e.g. "
      "scripts/install-deps.sh, and configure with -DPIPESCOPE_WITH_MPI=ON)");
}

#ifdef PIPESCOPE_HAVE_MPI
int MpiJob::input_error(const std::exception& e) const {
  if (rank() == 0) std::cerr << "pipescope: error: " << e.what() << "\n";
  return 1;
}

void MpiJob::rank_error(const std::exception& e) const {
  std::cerr << "pipescope: error: rank " << rank() << " of " << size() << ": " << e.what()
            << std::endl;
  MPI_Abort(MPI_COMM_WORLD, 1);  // ends every rank; does not return
  std::_Exit(1);
}

void MpiJob::require_devices(int devices, const std::string& plan_file) const {
  if (devices == size()) return;
  throw std::invalid_argument(plan_file + ": the plan runs on " + std::to_string(devices) +
                              " devices but this MPI job has " + std::to_string(size()) +
                              " processes; start it with mpirun -np " + std::to_string(devices));
}
#endif

}  // namespace pipescope::cli
