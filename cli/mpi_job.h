#pragma once
// What every `--backend mpi` command shares: the MPI session, and how errors
// end a job of several processes. Input errors (a bad file, the wrong number of
// processes) are met alike by every rank: rank 0 prints them and every rank
// exits normally with status 1. An error of one rank during the work (a stage
// that throws, the watchdog) is printed with the rank and ends the whole job
// (MPI_Abort), so no other rank waits for it forever.

#include <exception>
#include <string>

#ifdef PIPESCOPE_HAVE_MPI
#include "exec/mpi/mpi_transport.h"
#endif

namespace pipescope::cli {

// Throws std::invalid_argument: this pipescope was built without MPI.
[[noreturn]] void throw_no_mpi();

#ifdef PIPESCOPE_HAVE_MPI
class MpiJob {
 public:
  MpiJob() : session_(nullptr, nullptr) {}

  int rank() const { return exec::MpiSession::rank(); }
  int size() const { return exec::MpiSession::size(); }
  // Prints `e` on rank 0; returns the exit status.
  int input_error(const std::exception& e) const;
  // Prints `e` with this rank and ends the job.
  [[noreturn]] void rank_error(const std::exception& e) const;
  // Throws std::invalid_argument naming `plan_file` unless the job has one
  // process per device.
  void require_devices(int devices, const std::string& plan_file) const;

 private:
  exec::MpiSession session_;
};
#endif

}  // namespace pipescope::cli
