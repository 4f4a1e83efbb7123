#pragma once
// The backends that need libraries most machines do not have: CUDA (the CUDA
// runtime, cuBLAS, cuBLASLt), MPI, and NCCL. Each is a library of its own
// (libpipescope_exec_cuda.so, libpipescope_exec_mpi.so,
// libpipescope_exec_nccl.so) that the command opens the first time it asks for
// that backend (`--backend cuda`, `--backend mpi`, `--device cuda`), so every
// other command starts without them and runs on machines where they are not
// installed. A backend library hands over its backend through one C function,
// `pipescope_<name>_backend()`, returning the object declared here; the library
// and the command are built together, so both see the same C++ interface.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pipescope {
struct ModelSpec;  // costmodels/model.h
struct Profile;    // costmodels/profile.h
}  // namespace pipescope

namespace pipescope::exec {

class Device;       // exec/compute/device.h
struct PlanStages;  // exec/op_list_profile.h
class Transport;    // exec/transport.h

struct GpuAvailability {
  int devices = 0;
  std::string reason;  // why there are none, when devices == 0
};

// Where the stages of a run go on the visible GPUs: model stage s of pipeline
// device d on GPU d mod G, each stage on its own stream. With one GPU every
// stage is on it; the stages then share it, as compare models.
struct GpuPlacement {
  int gpus = 0;  // visible
  std::function<std::shared_ptr<Device>(int stage, int device)> stage_device;
};

// One check of the GPU backend against its CPU reference.
struct KernelCheck {
  std::string kernel;    // "layernorm_forward", "gemm (A^T B)", "device split_qkv (gqa)"
  double max_error = 0;  // max |gpu - cpu| / max(1, max |cpu|)
  double tolerance = 0;  // fp32 with a different summation order
  bool ok() const { return max_error <= tolerance; }
};

class CudaBackend {
 public:
  virtual ~CudaBackend() = default;
  // Never throws: a missing driver or GPU is an answer, not an error.
  virtual GpuAvailability visible_gpus() const = 0;
  // cudaMemGetInfo of GPU `gpu`; empty when it cannot be asked.
  virtual std::optional<std::int64_t> free_gpu_memory(int gpu) const = 0;
  // Throws std::runtime_error with the reason when no GPU is visible.
  virtual GpuPlacement place_on_gpus() const = 0;
  // A stream of GPU `gpu` as a Device named `label`.
  virtual std::shared_ptr<Device> stream(int gpu, const std::string& label) const = 0;
  // Every CUDA kernel against its CPU reference, then every operation of the
  // GPU device against the host device, on random data.
  virtual std::vector<KernelCheck> check_kernels_and_ops(std::uint64_t seed) const = 0;
};

class MpiBackend {
 public:
  virtual ~MpiBackend() = default;
  // MPI initialised (MPI_Init_thread) until the handle goes (MPI_Finalize).
  // Throws std::runtime_error when MPI cannot give the thread level.
  virtual std::shared_ptr<void> start_session() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ends every rank of the job (MPI_Abort).
  [[noreturn]] virtual void abort_job() const = 0;
  // The ranks on this rank's node (they share its memory), this one included.
  virtual std::vector<int> node_ranks() const = 0;
  // The least of every rank's `value`; every rank calls it.
  virtual int min_over_ranks(int value) const = 0;
  // `root`'s message on every rank; every rank calls it.
  virtual std::string broadcast(const std::string& message, int root) const = 0;
  // Payloads as MPI point-to-point messages (exec/mpi/mpi_transport.h).
  virtual std::shared_ptr<Transport> transport() const = 0;
  // The MPI transport and the ranks' concurrency slowdown, into `profile`
  // (measure_mpi_machine; a group's through `plan`'s op lists where one is
  // given); every rank calls it.
  virtual void measure_machine(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                               std::uint64_t seed, const PlanStages* plan) const = 0;
};

class NcclBackend {
 public:
  virtual ~NcclBackend() = default;
  // This rank's GPU; throws std::runtime_error when none is visible.
  virtual int local_gpu() const = 0;
  // Payloads as device buffers over NCCL (exec/mpi/nccl_transport.h).
  virtual std::shared_ptr<Transport> transport(int gpu) const = 0;
};

// Each opens its library the first time (then returns the same object).
// Throws std::runtime_error saying that this pipescope was built without the
// backend, or naming the library that could not be loaded and why.
const CudaBackend& cuda_backend();
const MpiBackend& mpi_backend();
const NcclBackend& nccl_backend();

}  // namespace pipescope::exec
