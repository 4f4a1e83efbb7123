#include "exec/cuda/cuda_device.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/device_checks.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/gpu.h"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

constexpr DeviceChecks check("CudaDevice");

// The shape checked as HostDevice checks it, and small enough for the kernels'
// ints.
HeadShape head_shape(const AttentionShape& sh, const char* op) {
  check.attention(sh, op);
  const auto fits = [](Index x) { return x <= std::numeric_limits<int>::max(); };
  check.require(
      fits(sh.batch) && fits(sh.seq) && fits(sh.heads) && fits(sh.kv_heads) && fits(sh.head_dim),
      op, "bad attention shape");
  return {static_cast<int>(sh.batch), static_cast<int>(sh.seq), static_cast<int>(sh.heads),
          static_cast<int>(sh.kv_heads), static_cast<int>(sh.head_dim)};
}

std::size_t bytes_of(std::int64_t n, std::size_t size) {
  return static_cast<std::size_t>(n) * size;
}

// A CUDA event that is destroyed with its owner. Destroying an event still
// pending is allowed: its resources go once it completes, and the stream waits
// already made on it hold.
class Event {
 public:
  explicit Event(unsigned flags) { PS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A timed event recorded on a compute stream.
class CudaFence final : public Fence {
 public:
  CudaFence(int gpu, cudaStream_t stream) : gpu_(gpu), event_(cudaEventDefault) {
    PS_CUDA_CHECK(cudaEventRecord(event_.get(), stream));
  }
  void synchronize() const override { PS_CUDA_CHECK(cudaEventSynchronize(event_.get())); }
  int gpu() const { return gpu_; }
  cudaEvent_t event() const { return event_.get(); }

 private:
  int gpu_;
  Event event_;
};

const CudaFence& cuda_fence(const Fence& f, const char* op) {
  const auto* c = dynamic_cast<const CudaFence*>(&f);
  check.require(c != nullptr, op, "a fence of another kind of device");
  return *c;
}

// Makes a GPU current for a call from a thread that may be working for another
// device (an array released from anywhere), and puts the thread's own back.
class CurrentGpu {
 public:
  explicit CurrentGpu(int gpu) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != gpu) cudaSetDevice(gpu);
  }
  ~CurrentGpu() {
    if (previous_ >= 0) cudaSetDevice(previous_);
    (void)cudaGetLastError();  // failures here (a process exiting) are not the caller's
  }
  CurrentGpu(const CurrentGpu&) = delete;
  CurrentGpu& operator=(const CurrentGpu&) = delete;

 private:
  int previous_ = -1;
};

// Whether host memory is page-locked: a copy from it is truly asynchronous.
bool pinned(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown pointer is ordinary host memory
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

// ---------------------------------------------------------------- lifetime

CudaDevice::CudaDevice(int gpu, std::string label) : gpu_(gpu) {
  if (gpu < 0) throw std::invalid_argument("CudaDevice: no GPU " + std::to_string(gpu));
  const GpuAvailability visible = visible_gpus();
  if (visible.devices == 0) {
    throw CudaError("CudaDevice: cannot use GPU " + std::to_string(gpu) + ": " + visible.reason);
  }
  if (gpu >= visible.devices) {
    throw std::invalid_argument("CudaDevice: no GPU " + std::to_string(gpu) + ", " +
                                std::to_string(visible.devices) + " visible");
  }
  try {
    open();
  } catch (...) {
    close();
    throw;
  }
  if (!label.empty()) name_ += ", " + label;
}

CudaDevice::~CudaDevice() {
  close();
}

void CudaDevice::open() {
  make_current();
  cudaDeviceProp properties{};
  PS_CUDA_CHECK(cudaGetDeviceProperties(&properties, gpu_));
  name_ = "cuda:" + std::to_string(gpu_) + " (" + properties.name + ")";
  // Non-blocking: no implicit ordering with the legacy default stream, which
  // other code in the process may use.
  PS_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  PS_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  PS_CUBLAS_CHECK(cublasCreate(&blas_));
  PS_CUBLAS_CHECK(cublasSetStream(blas_, compute_));
  // Plain fp32 products: TF32 tensor cores would be about 1e-3 off the
  // reference, beyond the selftest's tolerance.
  PS_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  PS_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&nonfinite_), sizeof(int)));

  // The pool keeps what is freed for the next step's allocations instead of
  // giving it back to the driver at every synchronization.
  cudaMemPool_t pool = nullptr;
  PS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, gpu_));
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  PS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  // Direct copies between GPUs where the hardware allows them. Pool memory
  // does not follow cudaDeviceEnablePeerAccess: each pool grants its peers
  // access itself. Where neither works, cudaMemcpyPeerAsync stages the copy
  // through the host, so a failure here costs speed, not correctness.
  int count = 0;
  PS_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int peer = 0; peer < count; ++peer) {
    if (peer == gpu_) continue;
    int peer_reads_us = 0;
    int we_read_peer = 0;
    if (cudaDeviceCanAccessPeer(&peer_reads_us, peer, gpu_) == cudaSuccess && peer_reads_us) {
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = peer;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      (void)cudaMemPoolSetAccess(pool, &access, 1);
    }
    if (cudaDeviceCanAccessPeer(&we_read_peer, gpu_, peer) == cudaSuccess && we_read_peer) {
      // cudaErrorPeerAccessAlreadyEnabled when another CudaDevice on this GPU
      // did it first.
      (void)cudaDeviceEnablePeerAccess(peer, 0);
    }
    (void)cudaGetLastError();  // the launchers' checks must not see these
  }
}

void CudaDevice::close() noexcept {
  const CurrentGpu current(gpu_);
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (nonfinite_ != nullptr) cudaFree(nonfinite_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
  blas_ = nullptr;
  nonfinite_ = nullptr;
  copy_ = nullptr;
  compute_ = nullptr;
}

void CudaDevice::make_current() const {
  PS_CUDA_CHECK(cudaSetDevice(gpu_));
}

// ---------------------------------------------------------------- memory

void* CudaDevice::allocate(std::int64_t bytes) {
  check.allocation(bytes);
  make_current();
  void* p = nullptr;
  PS_CUDA_CHECK(cudaMallocAsync(&p, static_cast<std::size_t>(bytes), compute_));
  return p;
}

void CudaDevice::release(void* p) noexcept {
  if (p == nullptr) return;
  const CurrentGpu current(gpu_);
  // Nothing can be reported from here: a failed free leaves the memory in use.
  if (cudaFreeAsync(p, compute_) != cudaSuccess) (void)cudaGetLastError();
}

void CudaDevice::upload_bytes(void* dst, const void* src, std::size_t bytes) {
  make_current();
  PS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute_));
  // From pageable memory the runtime has staged the data before returning;
  // from page-locked memory the copy is still running, and the caller may
  // reuse src as soon as this returns.
  if (pinned(src)) PS_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDevice::upload(const float* src, std::int64_t n, float* dst) {
  check.size(n, "upload");
  if (n > 0) upload_bytes(dst, src, bytes_of(n, sizeof(float)));
}

void CudaDevice::upload(const std::int32_t* src, std::int64_t n, std::int32_t* dst) {
  check.size(n, "upload");
  if (n > 0) upload_bytes(dst, src, bytes_of(n, sizeof(std::int32_t)));
}

void CudaDevice::download(const float* src, std::int64_t n, float* dst) {
  check.size(n, "download");
  if (n == 0) return;
  make_current();
  PS_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes_of(n, sizeof(float)), cudaMemcpyDeviceToHost, compute_));
  PS_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

// The copy runs on this device's copy stream, after the work enqueued so far
// on the compute stream (which made dst, and which the caller made wait for
// src's producer). The compute streams of both devices then wait for it: this
// one reads dst next, and the source's frees src on its stream later.
void CudaDevice::copy_from(const DeviceMatrix& src, DeviceMatrix& dst) {
  check.require(src.rows == dst.rows && src.cols == dst.cols, "copy_from",
                "shapes differ: (" + std::to_string(src.rows) + ", " + std::to_string(src.cols) +
                    ") into (" + std::to_string(dst.rows) + ", " + std::to_string(dst.cols) + ")");
  if (src.empty()) return;
  check.require(dst.device() == this, "copy_from", "the destination is not on this device");
  auto* from = dynamic_cast<CudaDevice*>(src.device());
  check.require(from != nullptr, "copy_from",
                "the source is on " + src.device()->name() + ", not a GPU");
  make_current();
  const std::size_t bytes = bytes_of(src.size(), sizeof(float));
  // Per call: copy_from may run on another thread than the compute calls.
  const Event dst_ready(cudaEventDisableTiming);
  const Event copied(cudaEventDisableTiming);
  PS_CUDA_CHECK(cudaEventRecord(dst_ready.get(), compute_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(copy_, dst_ready.get(), 0));
  if (from->gpu_ == gpu_) {
    PS_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, copy_));
  } else {
    PS_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data(), gpu_, src.data(), from->gpu_, bytes, copy_));
  }
  PS_CUDA_CHECK(cudaEventRecord(copied.get(), copy_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied.get(), 0));
  if (from != this) PS_CUDA_CHECK(cudaStreamWaitEvent(from->compute_, copied.get(), 0));
}

// ---------------------------------------------------------------- order and time

std::shared_ptr<Fence> CudaDevice::fence() {
  make_current();
  return std::make_shared<CudaFence>(gpu_, compute_);
}

void CudaDevice::wait(const Fence& fence) {
  const CudaFence& f = cuda_fence(fence, "wait");
  make_current();
  PS_CUDA_CHECK(cudaStreamWaitEvent(compute_, f.event(), 0));
}

void CudaDevice::synchronize() {
  make_current();
  PS_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

SimTime CudaDevice::elapsed_ns(const Fence& from, const Fence& to) const {
  const CudaFence& a = cuda_fence(from, "elapsed_ns");
  const CudaFence& b = cuda_fence(to, "elapsed_ns");
  check.require(a.gpu() == gpu_ && b.gpu() == gpu_, "elapsed_ns", "a fence of another GPU");
  make_current();
  float ms = 0.0f;  // resolution about 0.5 us
  PS_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event(), b.event()));
  return static_cast<SimTime>(std::llround(static_cast<double>(ms) * 1e6));
}

// ---------------------------------------------------------------- elementwise

void CudaDevice::fill(float* x, std::int64_t n, float value) {
  check.size(n, "fill");
  make_current();
  cuda::fill(x, n, value, compute_);
}

void CudaDevice::add(float* out, const float* a, const float* b, std::int64_t n) {
  check.size(n, "add");
  make_current();
  cuda::add(out, a, b, n, compute_);
}

void CudaDevice::axpy(float* y, float alpha, const float* x, std::int64_t n) {
  check.size(n, "axpy");
  make_current();
  cuda::axpy(y, alpha, x, n, compute_);
}

void CudaDevice::gelu_forward(float* out, const float* u, std::int64_t n) {
  check.size(n, "gelu_forward");
  make_current();
  cuda::gelu_forward(out, u, n, compute_);
}

void CudaDevice::gelu_backward(float* du, const float* dout, const float* u, std::int64_t n) {
  check.size(n, "gelu_backward");
  make_current();
  cuda::gelu_backward(du, dout, u, n, compute_);
}

void CudaDevice::relu_forward(float* out, const float* u, std::int64_t n) {
  check.size(n, "relu_forward");
  make_current();
  cuda::relu_forward(out, u, n, compute_);
}

void CudaDevice::relu_backward(float* du, const float* dout, const float* u, std::int64_t n) {
  check.size(n, "relu_backward");
  make_current();
  cuda::relu_backward(du, dout, u, n, compute_);
}

// ---------------------------------------------------------------- products

void CudaDevice::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  gemm_strided_batched(trans_a, trans_b, m, n, k, alpha, a, 0, b, 0, beta, c, 0, 1);
}

void CudaDevice::gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                      const float* a, std::int64_t stride_a, const float* b,
                                      std::int64_t stride_b, float beta, float* c,
                                      std::int64_t stride_c, int batch) {
  check.gemm(m, n, k, batch);
  if (m == 0 || n == 0 || batch == 0) return;
  make_current();
  if (k > 0) {
    if (batch == 1) {
      cuda::gemm(blas_, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
    } else {
      cuda::gemm_strided_batched(blas_, trans_a, trans_b, m, n, k, alpha, a, stride_a, b, stride_b,
                                 beta, c, stride_c, batch);
    }
    return;
  }
  // An empty sum: C = beta C, and beta = 0 does not read C (as in BLAS).
  const std::int64_t size = std::int64_t{m} * n;
  for (int i = 0; i < batch; ++i) {
    float* ci = c + i * stride_c;
    if (beta == 0.0f) {
      cuda::fill(ci, size, 0.0f, compute_);
    } else if (beta != 1.0f) {
      PS_CUBLAS_CHECK(cublasSscal_64(blas_, size, &beta, ci, 1));
    }
  }
}

void CudaDevice::add_bias(float* out, const float* bias, int rows, int c) {
  check.rows(rows, c, "add_bias");
  if (rows == 0) return;
  make_current();
  cuda::add_bias(out, bias, rows, c, compute_);
}

void CudaDevice::column_sums_add(float* db, const float* dout, int rows, int c) {
  check.rows(rows, c, "column_sums_add");
  if (rows == 0) return;
  make_current();
  cuda::column_sums_add(db, dout, rows, c, compute_);
}

// ---------------------------------------------------------------- LayerNorm

void CudaDevice::layernorm_forward(float* out, float* stats, const float* x, const float* gain,
                                   const float* bias, int rows, int c) {
  check.rows(rows, c, "layernorm_forward");
  if (rows == 0) return;
  make_current();
  cuda::layernorm_forward(out, stats, x, gain, bias, rows, c, compute_);
}

void CudaDevice::layernorm_backward_input(float* dx, const float* dout, const float* x,
                                          const float* stats, const float* gain, int rows, int c) {
  check.rows(rows, c, "layernorm_backward_input");
  if (rows == 0) return;
  make_current();
  cuda::layernorm_backward_input(dx, dout, x, stats, gain, rows, c, compute_);
}

void CudaDevice::layernorm_backward_params(float* dgain, float* dbias, const float* dout,
                                           const float* x, const float* stats, int rows, int c) {
  check.rows(rows, c, "layernorm_backward_params");
  if (rows == 0) return;
  make_current();
  cuda::layernorm_backward_params(dgain, dbias, dout, x, stats, rows, c, compute_);
}

// ---------------------------------------------------------------- attention

void CudaDevice::split_qkv(float* q, float* k, float* v, const float* qkv,
                           const AttentionShape& shape) {
  const HeadShape sh = head_shape(shape, "split_qkv");
  make_current();
  cuda::split_qkv(q, k, v, qkv, sh, compute_);
}

void CudaDevice::merge_qkv_grad(float* dqkv, const float* dq, const float* dk, const float* dv,
                                const AttentionShape& shape) {
  const HeadShape sh = head_shape(shape, "merge_qkv_grad");
  make_current();
  cuda::merge_qkv_grad(dqkv, dq, dk, dv, sh, compute_);
}

void CudaDevice::merge_heads(float* out, const float* o, const AttentionShape& shape) {
  const HeadShape sh = head_shape(shape, "merge_heads");
  make_current();
  cuda::merge_heads(out, o, sh, compute_);
}

void CudaDevice::split_heads(float* o, const float* out, const AttentionShape& shape) {
  const HeadShape sh = head_shape(shape, "split_heads");
  make_current();
  cuda::split_heads(o, out, sh, compute_);
}

void CudaDevice::causal_softmax_forward(float* probs, const float* scores, float scale, int rows,
                                        int s) {
  check.square_blocks(rows, s, "causal_softmax_forward");
  if (rows == 0) return;
  make_current();
  cuda::causal_softmax_forward(probs, scores, scale, rows, s, compute_);
}

void CudaDevice::causal_softmax_backward(float* dscores, const float* probs, const float* dprobs,
                                         float scale, int rows, int s) {
  check.square_blocks(rows, s, "causal_softmax_backward");
  if (rows == 0) return;
  make_current();
  cuda::causal_softmax_backward(dscores, probs, dprobs, scale, rows, s, compute_);
}

// ---------------------------------------------------------------- loss

void CudaDevice::crossentropy_forward(float* probs, float* losses, const float* logits,
                                      const std::int32_t* targets, int rows, int v) {
  check.rows(rows, v, "crossentropy_forward");
  if (rows == 0) return;
  make_current();
  cuda::crossentropy_forward(probs, losses, logits, targets, rows, v, compute_);
}

void CudaDevice::crossentropy_backward(float* dlogits, const float* probs,
                                       const std::int32_t* targets, float scale, int rows, int v) {
  check.rows(rows, v, "crossentropy_backward");
  if (rows == 0) return;
  make_current();
  cuda::crossentropy_backward(dlogits, probs, targets, scale, rows, v, compute_);
}

// ---------------------------------------------------------------- embedding

void CudaDevice::embedding_forward(float* out, const std::int32_t* ids, const float* table,
                                   const float* positions, int rows, int seq, int d) {
  check.embedding(rows, seq, d, "embedding_forward");
  if (rows == 0) return;
  make_current();
  cuda::embedding_forward(out, ids, table, positions, rows, seq, d, compute_);
}

void CudaDevice::embedding_backward(float* dtable, float* dpositions, const std::int32_t* ids,
                                    const float* dout, int rows, int seq, int d) {
  check.embedding(rows, seq, d, "embedding_backward");
  if (rows == 0) return;
  make_current();
  cuda::embedding_backward(dtable, dpositions, ids, dout, rows, seq, d, compute_);
}

// ---------------------------------------------------------------- optimizers

void CudaDevice::sgd_update(float* w, const float* g, std::int64_t n, float lr) {
  check.size(n, "sgd_update");
  make_current();
  cuda::sgd_update(w, g, n, lr, compute_);
}

void CudaDevice::momentum_update(float* w, float* m, const float* g, std::int64_t n, float lr,
                                 float mu) {
  check.size(n, "momentum_update");
  make_current();
  cuda::momentum_update(w, m, g, n, lr, mu, compute_);
}

void CudaDevice::rmsprop_update(float* w, float* v, const float* g, std::int64_t n, float lr,
                                float beta2, float epsilon) {
  check.size(n, "rmsprop_update");
  make_current();
  cuda::rmsprop_update(w, v, g, n, lr, beta2, epsilon, compute_);
}

void CudaDevice::adam_update(float* w, float* m, float* v, const float* g, std::int64_t n, float lr,
                             float beta1, float beta2, float epsilon, float correct1,
                             float correct2) {
  check.size(n, "adam_update");
  make_current();
  cuda::adam_update(w, m, v, g, n, lr, beta1, beta2, epsilon, correct1, correct2, compute_);
}

// ---------------------------------------------------------------- checks

bool CudaDevice::all_finite(const float* x, std::int64_t n) {
  check.size(n, "all_finite");
  if (n == 0) return true;
  make_current();
  cuda::any_nonfinite(nonfinite_, x, n, compute_);
  int found = 0;
  PS_CUDA_CHECK(cudaMemcpyAsync(&found, nonfinite_, sizeof(int), cudaMemcpyDeviceToHost, compute_));
  PS_CUDA_CHECK(cudaStreamSynchronize(compute_));
  return found == 0;
}

GpuPlacement place_on_gpus() {
  const GpuAvailability available = visible_gpus();
  if (available.devices == 0) {
    throw CudaError(available.reason);
  }
  GpuPlacement p;
  p.gpus = available.devices;
  p.stage_device = [gpus = p.gpus](int stage, int device) -> std::shared_ptr<Device> {
    return std::make_shared<CudaDevice>(device % gpus, "stage " + std::to_string(stage));
  };
  return p;
}

}  // namespace pipescope::exec::cuda
