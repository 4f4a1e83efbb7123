#pragma once
// Reading a scenario's "model" object: a family built from its parameters
// (transformer, mlp, amoebanet, resnet) or an explicit list of layers.

#include "costmodels/framework.h"
#include "costmodels/model.h"
#include "sim/base/json_reader.h"

namespace pipescope {

// Layers each become entries in per-layer tables. The optimal partitioner's
// search grows with the square of the layer count: 16,384 layers (far beyond
// any published model) still cut in seconds.
inline constexpr json_io::IntRange kLayerCount{1, 1 << 14};

// The model object `m` (its "family" and that family's fields); `fw` gives the
// fields a transformer leaves out (how attention, the layer norms and the loss
// run). Fails as a ScenarioError naming the field.
ModelSpec read_model(json_io::ObjectReader m, const Framework& fw);

}  // namespace pipescope
