#include "exec/backends.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace pipescope::exec {

namespace {

struct BackendLibrary {
  const char* file;     // "libpipescope_exec_cuda.so"
  const char* factory;  // "pipescope_cuda_backend"
  const char* needs;    // what it needs, for the error
};

// Opens `library` and returns what its factory gives. The library stays
// loaded for the life of the process. RTLD_GLOBAL: MPI's own components
// (opened by libmpi) look for libmpi's symbols there.
template <typename Backend>
const Backend& open_backend(const BackendLibrary& library) {
  void* handle = ::dlopen(library.file, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw std::runtime_error("cannot load " + std::string(library.file) + " (" + library.needs +
                             "): " + (why ? why : "unknown reason"));
  }
  using Factory = const Backend* (*)();
  auto* factory = reinterpret_cast<Factory>(::dlsym(handle, library.factory));
  if (factory == nullptr) {
    throw std::runtime_error(std::string(library.file) + " has no " + library.factory +
                             ": it does not belong to this pipescope");
  }
  return *factory();
}

// Unused when every backend was built.
[[maybe_unused, noreturn]] void throw_not_built(const std::string& what, const std::string& how) {
  throw std::runtime_error("this pipescope was built without " + what + " (" + how + ")");
}

}  // namespace

const CudaBackend& cuda_backend() {
#ifdef PIPESCOPE_BUILT_CUDA_BACKEND
  static const CudaBackend& backend = open_backend<CudaBackend>(
      {"libpipescope_exec_cuda.so", "pipescope_cuda_backend",
       "it needs the CUDA runtime, cuBLAS and cuBLASLt it was built with"});
  return backend;
#else
  throw_not_built("CUDA", "configure with the CUDA toolkit and -DPIPESCOPE_WITH_CUDA=ON");
#endif
}

const MpiBackend& mpi_backend() {
#ifdef PIPESCOPE_BUILT_MPI_BACKEND
  static const MpiBackend& backend = open_backend<MpiBackend>(
      {"libpipescope_exec_mpi.so", "pipescope_mpi_backend", "it needs OpenMPI's libmpi"});
  return backend;
#else
  throw_not_built("MPI",
                  "install OpenMPI, e.g. scripts/install-deps.sh, and configure with "
                  "-DPIPESCOPE_WITH_MPI=ON");
#endif
}

const NcclBackend& nccl_backend() {
#ifdef PIPESCOPE_BUILT_NCCL_BACKEND
  static const NcclBackend& backend =
      open_backend<NcclBackend>({"libpipescope_exec_nccl.so", "pipescope_nccl_backend",
                                 "it needs OpenMPI's libmpi, the CUDA runtime, cuBLAS and NCCL"});
  return backend;
#else
  throw_not_built("NCCL", "it needs MPI, the CUDA toolkit and its NCCL");
#endif
}

}  // namespace pipescope::exec
