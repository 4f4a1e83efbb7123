#pragma once
// A model as a sequence of layers with per-sample costs. Families (transformer,
// mlp, amoebanet) expand a few parameters into such a list; "layers" gives it
// explicitly. Layers may also form a graph (skip connections): each names the
// earlier layers it consumes, and costmodels/layer_graph.h orders them and works
// out what crosses each cut.

#include <cstdint>
#include <memory>
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
  // Names of the layers whose outputs this layer consumes ("input": the model's
  // input). Empty: the previous layer's output (for the first layer, the model's
  // input), as in a plain sequence.
  std::vector<std::string> inputs{};
};

struct TransformerParams;  // costmodels/model_families.h
struct MlpParams;

struct ModelSpec {
  std::string name;
  std::string family;  // "transformer", "mlp" or "layers"
  DType dtype = DType::kFp32;
  std::vector<LayerSpec> layers;
  Bytes input_bytes = 0;               // the first layer's input per sample (token ids, features)
  std::int64_t tokens_per_sample = 1;  // seq_len for language models, 1 otherwise
  // For layer graphs: cut_bytes[i] is what crosses a cut placed before layer i, per
  // sample: every live tensor, all sent together (L + 1 entries; [0] the model
  // input, [L] the last layer's output). Filled by resolve_layer_graph
  // (costmodels/layer_graph.h); empty for plain sequences, where a cut carries the
  // previous layer's output alone.
  std::vector<Bytes> cut_bytes;
  // The family parameters the layers were expanded from, for tools that rebuild
  // the model (the executor, plan files); null for explicit layer lists.
  std::shared_ptr<const TransformerParams> transformer;
  std::shared_ptr<const MlpParams> mlp;

  std::int64_t total_params() const;
  Flops fwd_flops_per_sample() const;
  Flops bwd_flops_per_sample() const;
  // Bytes that cross a cut placed before layer `first` (the input of layer first),
  // per sample; first == L gives the last layer's output. O(1).
  Bytes input_bytes_of(int first) const;
};

}  // namespace pipescope
