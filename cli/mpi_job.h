#pragma once
// What every `--backend mpi` command shares: the MPI session, and how errors
// end a job of several processes. Each rank's input phase (reading its files,
// the checks before any work) ends in one agreement (agree): when any rank
// failed, every rank throws the first failing rank's message (naming that
// rank when others did not fail), rank 0 prints it and every rank exits
// normally with status 1, so no rank waits in a collective that another
// skipped. An error of one rank during the work (a stage
// that throws, the watchdog) is printed with the rank and ends the whole job
// (MPI_Abort), so no other rank waits for it forever.

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <memory>

#include "exec/backends.h"
#include "sim/plan/plan.h"

namespace pipescope::cli {

// The ranks of each device that a plan runs as processes of their own under
// MPI: its C shares or its E expert ranks (tensor ranks run as threads only,
// and the executor does not split one plan both ways).
struct ProcessGroup {
  int ranks = 1;
  char letter = 0;             // none for a group of one
  const char* name = "ranks";  // "shares", "expert ranks", "expert ranks' shares"
  const char* what = "";       // what they exchange
};
ProcessGroup process_group(const Plan& plan);

class MpiJob {
 public:
  // Opens the MPI backend (exec/backends.h) and starts MPI; throws
  // std::runtime_error "--backend mpi: ..." when the backend cannot be had.
  MpiJob();

  int rank() const { return mpi_.rank(); }
  int size() const { return mpi_.size(); }
  const exec::MpiBackend& backend() const { return mpi_; }
  // Prints `e` on rank 0; returns the exit status.
  int input_error(const std::exception& e) const;
  // Prints `e` with this rank and ends the job.
  [[noreturn]] void rank_error(const std::exception& e) const;
  // Throws std::invalid_argument naming `plan_file` unless the job has one
  // process per device of `plan` and per share or expert rank
  // (process_group).
  void require_devices(const Plan& plan, const std::string& plan_file) const;
  // The ranks on this rank's node (they share its memory), this one included.
  std::vector<int> node_ranks() const;
  // Runs check() on every rank; when it threw on any, throws the message of the
  // lowest such rank as std::invalid_argument on every rank, prefixed "rank R
  // of N: " unless every rank threw, so that a check only some ranks fail
  // (one node short of memory, a file missing on one) is still met by all
  // alike. Every rank must call it; check() must make no collective call.
  void agree(const std::function<void()>& check) const;
  // Before anything is allocated, on every rank (agree): the devices of this
  // node's ranks fit in its memory (rank r runs device r mod K), or with `on_gpu`
  // this rank's stages fit in its GPU's. A memory that cannot be read is not
  // checked.
  void check_memory(const Plan& plan, const std::string& plan_file, bool on_gpu) const;

 private:
  const exec::MpiBackend& mpi_;
  std::shared_ptr<void> session_;
};

}  // namespace pipescope::cli
