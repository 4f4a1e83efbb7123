#pragma once
// A model as a sequence of layers with per-sample costs. Families (transformer,
// mlp) expand a few parameters into such a list; "layers" gives it explicitly.

#include <cstdint>
#include <string>
#include <vector>

#include "costmodels/dtype.h"
#include "costmodels/units.h"

namespace pipescope {

// Costs of one layer for one sample; a micro-batch of b samples costs b times as
// much (parameters excepted).
struct LayerSpec {
  std::string name;
  Flops fwd_flops = 0.0;    // forward FLOPs per sample
  Flops bwd_flops = 0.0;    // backward FLOPs per sample (input + weight gradient)
  std::int64_t params = 0;  // parameter count
  Bytes out_bytes = 0;      // output activation per sample: what crosses a cut after it
  Bytes stash_bytes = 0;  // activations kept for its own backward, per sample (its input included)
};

struct ModelSpec {
  std::string name;
  std::string family;  // "transformer", "mlp" or "layers"
  DType dtype = DType::kFp32;
  std::vector<LayerSpec> layers;
  Bytes input_bytes = 0;               // the first layer's input per sample (token ids, features)
  std::int64_t tokens_per_sample = 1;  // seq_len for language models, 1 otherwise

  std::int64_t total_params() const;
  Flops fwd_flops_per_sample() const;
  Flops bwd_flops_per_sample() const;
  // Bytes that cross a cut placed before layer `first` (the input of layer first),
  // per sample.
  Bytes input_bytes_of(int first) const;
};

}  // namespace pipescope
