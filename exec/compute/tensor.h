#pragma once
// Tensors of the executor: row-major fp32 matrices, on the host (Eigen) or in a
// device's memory (device.h). An activation of a micro-batch of b sequences of s
// positions and width h is a (b*s, h) matrix, sample-major: row i*s + t is
// position t of sequence i. Layers take and return Tensors, and the runtime
// passes them from stage to stage without looking inside.

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <variant>

#include <Eigen/Core>

namespace pipescope::exec {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;

class Device;  // device.h
class Fence;   // device.h

// An allocation in one device's memory, shared: its memory goes back to the
// device when the last handle goes (ordered after the work that uses it, on an
// asynchronous device), and it keeps its device alive until then.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  T* data() const { return data_; }
  std::int64_t size() const { return size_; }
  Device* device() const { return device_; }
  bool empty() const { return size_ == 0; }

 private:
  friend class Device;
  std::shared_ptr<void> owner_;  // releases the memory
  T* data_ = nullptr;
  std::int64_t size_ = 0;
  Device* device_ = nullptr;
};

// A (rows, cols) row-major fp32 matrix on a device.
struct DeviceMatrix {
  DeviceArray<float> array;
  Eigen::Index rows = 0;
  Eigen::Index cols = 0;
  // Set when it is handed to another stage: complete once the work that
  // produced it (and any copy onto the receiver's device) has run.
  std::shared_ptr<Fence> ready;

  float* data() const { return array.data(); }
  Eigen::Index size() const { return rows * cols; }
  Device* device() const { return array.device(); }
  bool empty() const { return size() == 0; }
};

// A matrix on the host or on a device.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Matrix m) : v_(std::move(m)) {}        // NOLINT: a host matrix is a tensor
  Tensor(DeviceMatrix m) : v_(std::move(m)) {}  // NOLINT: so is a device one
  // An Eigen expression, evaluated.
  template <typename Derived>
  Tensor(const Eigen::MatrixBase<Derived>& e) : v_(Matrix(e)) {}  // NOLINT

  bool on_device() const { return std::holds_alternative<DeviceMatrix>(v_); }
  // Throw std::logic_error when the tensor lives elsewhere: a layer of one
  // backend fed by another's.
  const Matrix& host() const {
    return get<Matrix>("a device tensor where a host one was expected");
  }
  Matrix& host() { return get<Matrix>("a device tensor where a host one was expected"); }
  const DeviceMatrix& device() const {
    return get<DeviceMatrix>("a host tensor where a device one was expected");
  }
  DeviceMatrix& device() {
    return get<DeviceMatrix>("a host tensor where a device one was expected");
  }

  Eigen::Index rows() const {
    return on_device() ? std::get<DeviceMatrix>(v_).rows : std::get<Matrix>(v_).rows();
  }
  Eigen::Index cols() const {
    return on_device() ? std::get<DeviceMatrix>(v_).cols : std::get<Matrix>(v_).cols();
  }
  Eigen::Index size() const { return rows() * cols(); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(size()) * sizeof(float); }

 private:
  template <typename T>
  const T& get(const char* otherwise) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw std::logic_error(otherwise);
  }
  template <typename T>
  T& get(const char* otherwise) {
    if (T* p = std::get_if<T>(&v_)) return *p;
    throw std::logic_error(otherwise);
  }

  std::variant<Matrix, DeviceMatrix> v_;
};

}  // namespace pipescope::exec
