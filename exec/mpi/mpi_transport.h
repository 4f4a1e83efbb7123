#pragma once
// The MPI runtime (`--backend mpi`): one process (rank) per device, started by
// `mpirun -np K`; device d runs on rank d. Under context or expert
// parallelism (G = C shares or E expert ranks of each device, linked by
// link_group) one process per device and share or expert rank, `mpirun -np K
// G`: rank g K + d runs rank g of device d, and its payloads go to and come
// from rank g of the other devices. The runtime interprets the op
// lists exactly as the threaded CPU backend does; only the transport differs: activations and
// gradients travel as non-blocking MPI point-to-point messages (a shape, then the floats straight
// from and into the matrices: MPI_Isend, MPI_Improbe / MPI_Mrecv, MPI_Irecv), tagged by route and
// micro-batch so a receiver takes the micro-batch it asks for whatever order they arrive in. At the
// end of a step every rank gets the whole step's loss and timeline (MPI_Allgatherv), so rank 0 can
// print and trace it.

#include <mpi.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "exec/profiler.h"
#include "exec/transport.h"
#include "exec/transport_profile.h"

namespace pipescope::exec {

// MPI_Init_thread for the lifetime of the object, at MPI_THREAD_SERIALIZED or
// better (a device's worker thread makes the MPI calls), and MPI_Finalize.
class MpiSession {
 public:
  // Throws std::runtime_error when MPI cannot give the thread level.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  static int rank();
  static int size();
  // A barrier of `comm`'s ranks that sleeps between polls, for ranks that
  // wait while another measures (MPI_Barrier spins and would take a core
  // from it).
  static void wait_for_all(MPI_Comm comm = MPI_COMM_WORLD);
};

// A payload being sent: its shape and floats stay here until MPI is done
// with them.
struct OutgoingPayload {
  std::int64_t shape[2] = {0, 0};
  Matrix payload;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

class MpiTransport final : public Transport {
 public:
  // On MPI_COMM_WORLD (duplicated, so its messages meet no one else's). Needs
  // an MpiSession.
  MpiTransport();
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // This rank's device; throws std::invalid_argument unless the job has
  // exactly one rank per device (and share or expert rank, once linked).
  std::vector<int> local_devices(int devices) const override;
  // The processes of this one's device: a communicator of their own
  // (mpi_group_link.h). Collective over the job.
  std::shared_ptr<GroupLink> link_group(int devices, int group_ranks) override;
  std::vector<int> local_group_ranks(int group_ranks) const override;
  // All ranks meet, then each starts its clock; on one host the ranks' clocks
  // are the same (CLOCK_MONOTONIC), so end_step aligns them exactly.
  Clock::time_point begin_step(const Schedule& schedule) override;
  void send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) override;
  Wait take(TransferKind kind, int to_stage, int micro_batch, Clock::time_point deadline,
            const std::atomic<bool>& aborted, Tensor& out) override;
  void wake_all() override {}  // take() polls the abort flag
  void end_step(double& loss, Timeline& timeline) override;
  Span merge_span(Span local) override;
  std::string device_name(int device) const override;
  std::string route_name() const override { return "MPI point-to-point"; }

 private:
  int tag(TransferKind kind, int to_stage, int micro_batch) const;
  int rank_of_stage(int stage) const;
  void test_sends();  // frees the buffers of completed sends

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::vector<std::string> hosts_;  // per rank
  bool one_host_ = true;
  std::vector<int> stage_device_;
  int devices_ = 1;
  int micro_batches_ = 1;  // the keys a route carries: micro-batches x group ranks
  int group_ranks_ = 1;    // processes per device (shares or expert ranks)
  int group_rank_ = 0;     // this process's among them
  std::shared_ptr<GroupLink> link_;
  Clock::time_point t0_;
  std::int64_t shift_ = 0;              // end_step's alignment of this rank's times
  std::list<OutgoingPayload> pending_;  // stable addresses while MPI owns them
};

// Latency and bandwidth of the MPI transport between ranks 0 and 1 as the
// runtime uses it (the same two messages per payload and the same polling): half
// the median round trip of payloads from 4 B to 4 MiB, fitted as latency +
// bytes / bandwidth (fit_transport). Every rank calls it; ranks past 1 only
// receive the result. Throws std::invalid_argument with one process.
TransportFigures profile_mpi_transport(int round_trips);

// How much slower a pass over the model (at `batch`) runs while n ranks each
// run their own copy at once, n = 1 .. min(ranks, 8): [0] is 1, each factor the
// median of three "together" timings on rank 0 over the median of three
// "alone" ones, taken in turn, and at least 1. mpirun binds each rank to a core,
// so the profiler's threads (exec/profiler.h) would share one; this measures
// what the runtime's ranks do. Every rank calls it and gets the result.
std::vector<double> measure_mpi_concurrency_slowdown(const ModelSpec& spec, std::int64_t batch,
                                                     std::uint64_t seed);

// What a profile of the MPI backend measures beyond the layers: after the
// other ranks have waited (sleeping) for rank 0, the MPI transport, the
// ranks' concurrency slowdown at `batch` and, for a context share's, an
// expert rank's or an expert rank's share's model, the group's figures
// (measure_mpi_context, measure_mpi_experts, measure_mpi_expert_shares,
// through `plan`'s op lists where one is given),
// written into `profile` with backend "mpi". Every rank calls it; rank 0's
// profile is the one to keep.
void measure_mpi_machine(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan = nullptr);

}  // namespace pipescope::exec
