#pragma once
// Models that are graphs (skip connections, multi-input cells): the layers form a
// directed acyclic graph through LayerSpec::inputs. A pipeline still cuts the
// layers into contiguous stages of one order, a topological order of the graph;
// a cut then carries every tensor produced before it and consumed after it
// (docs/models.md, "The partitioner").
//
// Semantics the simulator relies on: a stage that receives several tensors at a
// cut receives them all in one transfer of ModelSpec::cut_bytes (one message per
// micro-batch, as torchgpipe sends a tuple), and sends their gradients back the
// same way. A tensor that skips several stages is forwarded through every stage
// in between (each cut it crosses counts its bytes), not sent directly to the
// stage that consumes it; torchgpipe's skip connections (`@skippable`) can do
// the latter, which this model overestimates.

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "costmodels/model.h"

namespace pipescope {

// A layer list that does not form a DAG, or that names a layer that does not
// exist. `layer` is the index in the list as given (before any reordering) and
// `input`, when one entry of that layer's `inputs` is at fault, its index there.
// what() reads "layers[3].inputs[1]: unknown layer 'x'"; reason() is the part
// after the location.
class LayerGraphError : public std::invalid_argument {
 public:
  LayerGraphError(int layer, std::optional<int> input, const std::string& reason);
  int layer() const { return layer_; }
  std::optional<int> input() const { return input_; }
  const std::string& reason() const { return reason_; }

 private:
  int layer_;
  std::optional<int> input_;
  std::string reason_;
};

// The name under which a layer refers to the model's input.
inline constexpr const char* kModelInputName = "input";

// Checks the graph given by the layers' `inputs`, reorders the layers into a
// topological order when the given one is not (stable: the order that keeps the
// given one wherever the edges allow, i.e. the smallest given index first), and
// fills model.cut_bytes. References to later layers are allowed and cause the
// reordering; after it every layer's `inputs` is written out explicitly, so that
// "empty means the previous layer" keeps its meaning. A model in which no layer
// names its inputs is a plain sequence: it is left as it is, with cut_bytes
// empty.
//
// Throws LayerGraphError for an unknown name, a layer named twice in one
// `inputs`, duplicate layer names, a layer called "input", and cycles (a layer
// that consumes its own output included); for a cycle the error names its
// first layer in the given order and lists the cycle.
void resolve_layer_graph(ModelSpec& model);

// Names of the tensors that cross a cut placed before layer `position` (0..L) of
// a model in topological order: the producing layers' names, "input" for the
// model's input, in order of their producers. For tests and tooling; O(L + E).
std::vector<std::string> tensors_crossing_cut(const ModelSpec& model, int position);

}  // namespace pipescope
