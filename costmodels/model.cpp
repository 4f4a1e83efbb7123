#include "costmodels/model.h"

#include <algorithm>

#include "costmodels/check.h"

namespace pipescope {

bool ModelSpec::has_attention_core() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerSpec& l) { return l.core_stash_bytes > 0; });
}

std::int64_t ModelSpec::total_params() const {
  std::int64_t sum = 0;
  for (const LayerSpec& l : layers) sum += l.params;
  return sum;
}

Flops ModelSpec::fwd_flops_per_sample() const {
  Flops sum = 0.0;
  for (const LayerSpec& l : layers) sum += l.fwd_flops;
  return sum;
}

Flops ModelSpec::bwd_flops_per_sample() const {
  Flops sum = 0.0;
  for (const LayerSpec& l : layers) sum += l.bwd_flops;
  return sum;
}

Flops ModelSpec::model_flops_per_device_sample() const {
  if (tensor_parallel * context_parallel > 1 && whole_flops_per_sample > 0.0) {
    return whole_flops_per_sample / (tensor_parallel * context_parallel);
  }
  return fwd_flops_per_sample() + bwd_flops_per_sample();
}

Bytes ModelSpec::input_bytes_of(int first) const {
  PS_CHECK(first >= 0 && static_cast<std::size_t>(first) <= layers.size(),
           "layer index " + std::to_string(first) + " out of range");
  if (!cut_bytes.empty()) {
    PS_CHECK(cut_bytes.size() == layers.size() + 1, "cut_bytes does not match the layer list");
    return cut_bytes[static_cast<std::size_t>(first)];
  }
  return first == 0 ? input_bytes : layers[static_cast<std::size_t>(first) - 1].out_bytes;
}

}  // namespace pipescope
