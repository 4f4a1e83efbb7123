#pragma once
// The checks every Device (exec/compute/device.h) makes of its arguments before it
// enqueues anything, one set for HostDevice and CudaDevice: each throws
// std::invalid_argument "<device>::<op>: <what>".

#include <cstdint>
#include <string>

#include "exec/compute/kernels.h"

namespace pipescope::exec {

class DeviceChecks {
 public:
  // `device` begins every message: "HostDevice", "CudaDevice".
  explicit constexpr DeviceChecks(const char* device) : device_(device) {}

  // Throws "<device>::<op>: <what>" unless ok.
  void require(bool ok, const char* op, const std::string& what) const;

  // An allocation of bytes > 0.
  void allocation(std::int64_t bytes) const;
  // n >= 0 entries.
  void size(std::int64_t n, const char* op) const;
  // (rows, c) with rows >= 0 (none is no work) and c > 0 (none is a mistake).
  void rows(int rows, int c, const char* op) const;
  // A product's m, n, k and batch, each >= 0.
  void gemm(int m, int n, int k, int batch) const;
  // Every extent > 0, heads a multiple of kv_heads.
  void attention(const AttentionShape& sh, const char* op) const;
  // The causal softmax's `rows` rows of s, in whole s x s blocks.
  void square_blocks(int rows, int s, const char* op) const;
  // The embedding's rows >= 0, seq > 0 and d > 0.
  void embedding(int rows, int seq, int d, const char* op) const;

 private:
  const char* device_;
};

}  // namespace pipescope::exec
