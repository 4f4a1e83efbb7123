#include "exec/compute/device_checks.h"

#include <stdexcept>

namespace pipescope::exec {

void DeviceChecks::require(bool ok, const char* op, const std::string& what) const {
  if (!ok) throw std::invalid_argument(std::string(device_) + "::" + op + ": " + what);
}

void DeviceChecks::allocation(std::int64_t bytes) const {
  require(bytes > 0, "allocate", "bytes " + std::to_string(bytes));
}

void DeviceChecks::size(std::int64_t n, const char* op) const {
  require(n >= 0, op, "a negative size " + std::to_string(n));
}

void DeviceChecks::rows(int rows, int c, const char* op) const {
  require(rows >= 0 && c > 0, op,
          "bad shape (" + std::to_string(rows) + ", " + std::to_string(c) + ")");
}

void DeviceChecks::gemm(int m, int n, int k, int batch) const {
  require(m >= 0 && n >= 0 && k >= 0 && batch >= 0, "gemm", "negative sizes");
}

void DeviceChecks::attention(const AttentionShape& sh, const char* op) const {
  require(sh.batch > 0 && sh.seq > 0 && sh.heads > 0 && sh.kv_heads > 0 && sh.head_dim > 0 &&
              sh.heads % sh.kv_heads == 0,
          op, "bad attention shape");
}

void DeviceChecks::square_blocks(int rows, int s, const char* op) const {
  require(rows >= 0 && s > 0 && rows % s == 0, op, "rows must be whole s x s blocks");
}

void DeviceChecks::embedding(int rows, int seq, int d, const char* op) const {
  require(rows >= 0 && seq > 0 && d > 0, op, "bad shape");
}

}  // namespace pipescope::exec
