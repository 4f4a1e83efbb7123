// The NCCL transport as the command opens it (exec/backends.h).

#include <memory>
#include <stdexcept>

#include "exec/backends.h"
#include "exec/cuda/cuda_check.h"
#include "exec/mpi/nccl_transport.h"

namespace pipescope::exec {
namespace {

class Backend final : public NcclBackend {
 public:
  int local_gpu() const override { return exec::local_gpu(); }
  std::shared_ptr<Transport> transport(int gpu) const override {
    return std::make_shared<NcclTransport>(gpu);
  }
};

}  // namespace
}  // namespace pipescope::exec

extern "C" __attribute__((visibility("default"))) const pipescope::exec::NcclBackend*
pipescope_nccl_backend() {
  static const pipescope::exec::Backend backend;
  return &backend;
}
