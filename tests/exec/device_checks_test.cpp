// The Device argument checks (exec/compute/device_checks.h) that HostDevice and
// CudaDevice share: what each refuses and what it says, through HostDevice
// (CudaDevice needs a GPU to be made; its launchers' own checks are in
// tests/cuda/kernels_test.cpp).

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "exec/compute/device_checks.h"
#include "exec/compute/host_device.h"

namespace pipescope::exec {
namespace {

// The message of the std::invalid_argument that f throws, or "" when it
// throws none.
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChecks, NameTheDeviceAndTheOperation) {
  const DeviceChecks check("CudaDevice");
  EXPECT_EQ(refusal([&] { check.size(-3, "fill"); }), "CudaDevice::fill: a negative size -3");
  EXPECT_EQ(refusal([&] { check.rows(2, 0, "add_bias"); }),
            "CudaDevice::add_bias: bad shape (2, 0)");
  EXPECT_EQ(refusal([&] { check.allocation(0); }), "CudaDevice::allocate: bytes 0");
  EXPECT_EQ(refusal([&] { check.require(false, "wait", "a fence of another kind of device"); }),
            "CudaDevice::wait: a fence of another kind of device");
  EXPECT_EQ(refusal([&] { check.require(true, "wait", "never"); }), "");
}

TEST(DeviceChecks, AcceptEmptyWorkAndRefuseImpossibleShapes) {
  const DeviceChecks check("HostDevice");
  EXPECT_EQ(refusal([&] { check.size(0, "fill"); }), "");
  EXPECT_EQ(refusal([&] { check.rows(0, 4, "add_bias"); }), "");
  EXPECT_EQ(refusal([&] { check.gemm(0, 3, 0, 1); }), "");
  EXPECT_EQ(refusal([&] { check.gemm(2, 3, -1, 1); }), "HostDevice::gemm: negative sizes");
  EXPECT_EQ(refusal([&] { check.square_blocks(0, 4, "causal_softmax_forward"); }), "");
  EXPECT_EQ(refusal([&] { check.square_blocks(10, 4, "causal_softmax_forward"); }),
            "HostDevice::causal_softmax_forward: rows must be whole s x s blocks");
  EXPECT_EQ(refusal([&] { check.embedding(0, 1, 1, "embedding_forward"); }), "");
  EXPECT_EQ(refusal([&] { check.embedding(4, 2, 0, "embedding_forward"); }),
            "HostDevice::embedding_forward: bad shape");
  AttentionShape gqa{2, 8, 4, 2, 16};
  EXPECT_EQ(refusal([&] { check.attention(gqa, "split_qkv"); }), "");
  gqa.kv_heads = 3;  // four query heads do not share three key/value heads
  EXPECT_EQ(refusal([&] { check.attention(gqa, "split_qkv"); }),
            "HostDevice::split_qkv: bad attention shape");
  gqa.kv_heads = 0;
  EXPECT_EQ(refusal([&] { check.attention(gqa, "split_qkv"); }),
            "HostDevice::split_qkv: bad attention shape");
}

TEST(DeviceChecks, HostDeviceChecksBeforeItWorks) {
  const auto host = std::make_shared<HostDevice>();
  EXPECT_EQ(refusal([&] { host->fill(nullptr, -1, 0.0f); }),
            "HostDevice::fill: a negative size -1");
  EXPECT_EQ(
      refusal([&] { host->layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 3, 0); }),
      "HostDevice::layernorm_forward: bad shape (3, 0)");
  EXPECT_EQ(refusal([&] { host->causal_softmax_backward(nullptr, nullptr, nullptr, 1.0f, 6, 4); }),
            "HostDevice::causal_softmax_backward: rows must be whole s x s blocks");
  EXPECT_EQ(refusal([&] {
              host->merge_heads(nullptr, nullptr, AttentionShape{1, 1, 2, 1, 0});
            }),
            "HostDevice::merge_heads: bad attention shape");
  EXPECT_EQ(refusal([&] { host->embedding_backward(nullptr, nullptr, nullptr, nullptr, 2, 0, 4); }),
            "HostDevice::embedding_backward: bad shape");
  EXPECT_EQ(
      refusal([&] { host->gemm(false, false, -1, 2, 2, 1.0f, nullptr, nullptr, 0.0f, nullptr); }),
      "HostDevice::gemm: negative sizes");
}

}  // namespace
}  // namespace pipescope::exec
