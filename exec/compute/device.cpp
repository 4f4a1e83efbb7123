#include "exec/compute/device.h"

#include <stdexcept>
#include <string>

namespace pipescope::exec {

template <typename T>
DeviceArray<T> Device::array(std::int64_t n) {
  if (n < 0) throw std::invalid_argument("a device array of " + std::to_string(n) + " elements");
  DeviceArray<T> out;
  if (n == 0) return out;
  std::shared_ptr<Device> self = shared_from_this();
  void* p = allocate(n * static_cast<std::int64_t>(sizeof(T)));
  // The array keeps its device alive and gives the memory back to it.
  out.owner_ = std::shared_ptr<void>(p, [self](void* q) { self->release(q); });
  out.data_ = static_cast<T*>(p);
  out.size_ = n;
  out.device_ = this;
  return out;
}

DeviceMatrix Device::matrix(Index rows, Index cols) {
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("a device matrix of (" + std::to_string(rows) + ", " +
                                std::to_string(cols) + ")");
  }
  DeviceMatrix m;
  m.array = array<float>(rows * cols);
  m.rows = rows;
  m.cols = cols;
  return m;
}

DeviceArray<std::int32_t> Device::ints(std::int64_t n) {
  return array<std::int32_t>(n);
}

Matrix download(const DeviceMatrix& m) {
  Matrix out(m.rows, m.cols);
  if (m.size() > 0) m.device()->download(m.data(), m.size(), out.data());
  return out;
}

DeviceMatrix upload(Device& device, const Matrix& m) {
  DeviceMatrix out = device.matrix(m.rows(), m.cols());
  if (m.size() > 0) device.upload(m.data(), m.size(), out.data());
  return out;
}

bool all_finite(const Tensor& t) {
  if (!t.on_device()) return t.host().allFinite();
  const DeviceMatrix& d = t.device();
  return d.empty() || d.device()->all_finite(d.data(), d.size());
}

Matrix to_host(const Tensor& t) {
  return t.on_device() ? download(t.device()) : t.host();
}

}  // namespace pipescope::exec
