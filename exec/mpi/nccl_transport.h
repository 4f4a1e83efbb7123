#pragma once
// The MPI runtime with GPUs (`--backend mpi --device cuda`): one process per
// device under mpirun as MpiTransport runs it, each rank's stages on its GPU,
// and activations and gradients as device buffers over NCCL send/recv, whose
// communicators are bootstrapped through MPI.
//
// Every ordered pair of ranks that exchanges payloads (a -> b) has a NCCL
// communicator of its own and a stream on each side that carries only that
// pair's sends (on a) or receives (on b): NCCL matches a pair's sends and
// receives in the order they are posted, and a stream that held both directions,
// or receives from two ranks, could wait on itself. A payload's shape and tag
// go first as an MPI message; the receiver posts its receive the moment that
// message arrives (in the order the sender sent them, which MPI keeps between
// two ranks), into a new buffer whose fence the stage waits for, and hands it
// to the stage that asks for that tag, whatever order the stages ask in. The
// step's loss and timeline are gathered as MpiTransport gathers them.

#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_device.h"
#include "exec/mpi/mpi_transport.h"

namespace pipescope::exec {

class NcclTransport final : public Transport {
 public:
  // This rank's GPU is `gpu`. Needs an MpiSession.
  explicit NcclTransport(int gpu);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  std::vector<int> local_devices(int devices) const override { return mpi_.local_devices(devices); }
  // Sets up the pairs' communicators the first time a schedule needs them
  // (every rank meets every pair it is in, in one global order).
  Clock::time_point begin_step(const Schedule& schedule) override;
  void send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) override;
  Wait take(TransferKind kind, int to_stage, int micro_batch, Clock::time_point deadline,
            const std::atomic<bool>& aborted, Tensor& out) override;
  void wake_all() override {}  // take() polls the abort flag
  // Waits for this rank's sends, then gathers the loss and the timeline.
  void end_step(double& loss, Timeline& timeline) override;
  std::string device_name(int device) const override;
  std::string route_name() const override { return "NCCL send/recv"; }

 private:
  // One direction between two ranks: its communicator (2 ranks) and the stream
  // (a CudaDevice of this rank's GPU) its sends or receives run on here.
  struct Link {
    ncclComm_t comm = nullptr;
    int peer = 0;  // the other rank's rank in `comm`
    std::shared_ptr<cuda::CudaDevice> stream;
  };
  // A send in flight: the header's buffer and request, the payload kept until
  // NCCL is done with it.
  struct Outgoing {
    std::int64_t header[2] = {0, 0};
    MPI_Request request = MPI_REQUEST_NULL;
    DeviceMatrix payload;
    std::shared_ptr<Fence> sent;
  };

  int tag(TransferKind kind, int to_stage, int micro_batch) const;
  void connect(const Schedule& schedule);
  void post_arrived_receives();  // every header that has arrived, in order

  MpiTransport mpi_;  // ranks, the step's barrier, the gathered timeline
  MPI_Comm headers_ = MPI_COMM_NULL;
  int gpu_ = 0;
  int rank_ = 0;
  std::vector<int> stage_device_;
  int micro_batches_ = 1;
  std::map<std::pair<int, int>, Link> links_;  // (from rank, to rank)
  std::list<Outgoing> sending_;                // stable addresses for MPI
  std::map<int, DeviceMatrix> arrived_;        // by tag, received or on their way
};

// The GPU of this rank: its rank among the job's processes on its node, modulo
// the GPUs the node's driver shows. Throws cuda::CudaError when none is visible.
int local_gpu();

}  // namespace pipescope::exec
