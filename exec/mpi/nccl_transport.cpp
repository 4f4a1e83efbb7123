#include "exec/mpi/nccl_transport.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <set>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/gpu.h"
#include "exec/mpi/mpi_poll.h"

namespace pipescope::exec {

namespace {

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(rc));
}

}  // namespace

int local_gpu() {
  const cuda::GpuAvailability gpus = cuda::visible_gpus();
  if (gpus.devices == 0) throw cuda::CudaError(gpus.reason);
  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local % gpus.devices;
}

NcclTransport::NcclTransport(int gpu) : gpu_(gpu) {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &headers_), "MPI_Comm_dup");
  rank_ = mpi_.rank();
}

NcclTransport::~NcclTransport() {
  // A step that failed leaves sends nobody will receive.
  for (Outgoing& o : sending_) {
    if (o.request != MPI_REQUEST_NULL) {
      MPI_Cancel(&o.request);
      MPI_Request_free(&o.request);
    }
  }
  sending_.clear();
  arrived_.clear();
  for (auto& [pair, link] : links_) {
    if (link.comm != nullptr) ncclCommAbort(link.comm);  // never blocks, unlike Destroy
  }
  if (headers_ != MPI_COMM_NULL) MPI_Comm_free(&headers_);
}

int NcclTransport::tag(TransferKind kind, int to_stage, int micro_batch) const {
  return route_id(kind, to_stage) * micro_batches_ + micro_batch;
}

// The ordered pairs of ranks the schedule moves payloads between, every rank
// walking them in one order: each pair's two ranks meet there (ncclCommInitRank
// waits for both), and no rank waits on a pair before the ones both its
// members meet first.
void NcclTransport::connect(const Schedule& schedule) {
  std::set<std::pair<int, int>> wanted;
  for (int s = 0; s + 1 < schedule.stages; ++s) {
    const int a = schedule.stage_device[static_cast<std::size_t>(s)];
    const int b = schedule.stage_device[static_cast<std::size_t>(s + 1)];
    if (a != b) {
      wanted.insert({a, b});  // activations
      wanted.insert({b, a});  // gradients
    }
  }
  std::vector<std::pair<int, int>> order(wanted.begin(), wanted.end());
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
    const auto key = [](const auto& p) {
      return std::tuple(std::min(p.first, p.second), std::max(p.first, p.second), p.first);
    };
    return key(x) < key(y);
  });
  constexpr int kSetupTag = 0;
  for (const auto& [from, to] : order) {
    if ((from != rank_ && to != rank_) || links_.count({from, to}) != 0) continue;
    PS_CUDA_CHECK(cudaSetDevice(gpu_));
    ncclUniqueId id{};
    Link link;
    if (from == rank_) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      mpi_check(MPI_Send(&id, sizeof id, MPI_BYTE, to, kSetupTag, headers_), "MPI_Send");
      nccl_check(ncclCommInitRank(&link.comm, 2, id, 0), "ncclCommInitRank");
      link.peer = 1;
    } else {
      mpi_check(MPI_Recv(&id, sizeof id, MPI_BYTE, from, kSetupTag, headers_, MPI_STATUS_IGNORE),
                "MPI_Recv");
      nccl_check(ncclCommInitRank(&link.comm, 2, id, 1), "ncclCommInitRank");
      link.peer = 0;
    }
    link.stream = std::make_shared<cuda::CudaDevice>(
        gpu_, "NCCL " + std::to_string(from) + " -> " + std::to_string(to));
    links_.emplace(std::pair{from, to}, std::move(link));
  }
}

Transport::Clock::time_point NcclTransport::begin_step(const Schedule& schedule) {
  local_devices(schedule.devices());
  stage_device_ = schedule.stage_device;
  micro_batches_ = schedule.micro_batches;
  connect(schedule);
  arrived_.clear();
  return mpi_.begin_step(schedule);
}

void NcclTransport::send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) {
  if (!payload.on_device()) {
    throw std::logic_error("the NCCL transport carries device tensors; this one is on the host");
  }
  const int to = stage_device_.at(static_cast<std::size_t>(to_stage));
  const Link& link = links_.at({rank_, to});
  Outgoing& o = sending_.emplace_back();
  o.payload = payload.device();
  if (o.payload.size() > INT_MAX) {
    sending_.pop_back();
    throw std::runtime_error("a payload of " + std::to_string(o.payload.size()) +
                             " floats is too large for one NCCL message");
  }
  o.header[0] = o.payload.rows;
  o.header[1] = o.payload.cols;
  mpi_check(MPI_Isend(o.header, 2, MPI_INT64_T, to, tag(kind, to_stage, micro_batch), headers_,
                      &o.request),
            "MPI_Isend");
  // After the work that made the payload, on the pair's send stream.
  if (o.payload.ready) link.stream->wait(*o.payload.ready);
  PS_CUDA_CHECK(cudaSetDevice(gpu_));
  nccl_check(ncclSend(o.payload.data(), static_cast<std::size_t>(o.payload.size()), ncclFloat,
                      link.peer, link.comm, link.stream->stream()),
             "ncclSend");
  o.sent = link.stream->fence();
}

void NcclTransport::post_arrived_receives() {
  for (;;) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    mpi_check(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, headers_, &flag, &message, &status),
              "MPI_Improbe");
    if (flag == 0) return;
    std::int64_t shape[2] = {0, 0};
    mpi_check(MPI_Mrecv(shape, 2, MPI_INT64_T, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    if (shape[0] < 0 || shape[1] < 0 || (shape[1] > 0 && shape[0] > INT_MAX / shape[1])) {
      throw std::runtime_error("a NCCL payload of impossible shape (" + std::to_string(shape[0]) +
                               ", " + std::to_string(shape[1]) + ")");
    }
    const Link& link = links_.at({status.MPI_SOURCE, rank_});
    DeviceMatrix buffer = link.stream->matrix(shape[0], shape[1]);
    PS_CUDA_CHECK(cudaSetDevice(gpu_));
    nccl_check(ncclRecv(buffer.data(), static_cast<std::size_t>(buffer.size()), ncclFloat,
                        link.peer, link.comm, link.stream->stream()),
               "ncclRecv");
    buffer.ready = link.stream->fence();
    arrived_[status.MPI_TAG] = std::move(buffer);
  }
}

Transport::Wait NcclTransport::take(TransferKind kind, int to_stage, int micro_batch,
                                    Clock::time_point deadline, const std::atomic<bool>& aborted,
                                    Tensor& out) {
  const int key = tag(kind, to_stage, micro_batch);
  const Wait w = mpi_poll(
      [&] {
        post_arrived_receives();
        return arrived_.count(key) != 0;
      },
      deadline, aborted, nullptr);
  if (w != Wait::kReady) return w;
  out = std::move(arrived_.at(key));
  arrived_.erase(key);
  return w;
}

void NcclTransport::end_step(double& loss, Timeline& timeline) {
  for (Outgoing& o : sending_) {
    mpi_check(MPI_Wait(&o.request, MPI_STATUS_IGNORE), "MPI_Wait");
    if (o.sent) o.sent->synchronize();
  }
  sending_.clear();
  mpi_.end_step(loss, timeline);
}

std::string NcclTransport::device_name(int device) const {
  return mpi_.device_name(device) + " on a GPU";
}

}  // namespace pipescope::exec
