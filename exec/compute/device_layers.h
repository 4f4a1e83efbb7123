#pragma once
// The executor's layers on a Device (device.h): the same math as layers.h —
// embedding, pre-LayerNorm transformer block with causal grouped-query
// attention, LM head with cross-entropy, residual MLP block, classifier head —
// as sequences of device operations on device buffers, for the GPU backend. On
// a HostDevice they run on the CPU, which is how the tests hold them to the
// Eigen layers.
//
// Attention runs in head-major form: Q, K, V split to (b, a, s, dh), scores and
// their product with V as strided-batched products over the b x a heads, the
// causal softmax between. Parameters live on the device (Param::d_*); a layer's
// outputs are device tensors, but for the loss heads, whose loss comes back to
// the host as a (1, 1) matrix.

#include <memory>
#include <string>
#include <vector>

#include "exec/compute/device.h"
#include "exec/compute/layer.h"

namespace pipescope::exec {

// The device form of a list of host layers (build_transformer, build_mlp), with
// the same parameter values, every layer on `device` (a stage's layers share
// one). Throws std::invalid_argument for a layer that has no device form.
LayerList to_device(LayerList host_layers, const std::shared_ptr<Device>& device);

// A stage's device: that of its first layer, null for host layers. Throws
// std::invalid_argument when its layers are not all on one device.
Device* stage_device(const LayerList& layers);

}  // namespace pipescope::exec
