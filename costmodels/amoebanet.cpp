// AmoebaNet-D (L, D) as a layer graph: one layer per cell (layers are the unit a
// pipeline cuts; docs/design.md), each consuming the two cells before it.
//
// Architecture: the TensorFlow TPU reference AmoebaNet-D (tensorflow/tpu,
// models/official/amoeba_net), which GPipe used, as torchgpipe reimplements it
// (kakaobrain/torchgpipe, benchmarks/models/amoebanet). Its cells differ from the
// AmoebaNet paper's figure (Real et al. 2019, "Regularized Evolution for Image
// Classifier Architecture Search"): the normal cell concatenates states 0, 3, 4, 6
// instead of 4, 5, 6. With the reference's cells the parameter counts match
// GPipe's Table 1 (see tests/costmodels/layer_graph_test.cpp).
//
// Approximations, all per sample:
// - FLOPs count convolutions (2 per multiply-add), pooling (k^2 per output element
//   of a k x k window) and the five additions of a cell; ReLU and BatchNorm
//   are elementwise work and neglected, like LayerNorm in the transformer family.
//   Backward is 2x forward, as in the other families.
// - Parameters: convolution weights (no biases) and BatchNorm scale and shift;
//   BatchNorm's running statistics are buffers, not parameters.
// - Stash: each ReLU-conv-BN unit keeps its ReLU output (the convolution's input)
//   and its convolution output (BatchNorm's input); a max pool keeps its input
//   (frameworks that keep argmax indices instead are not modelled); average pools,
//   identities, additions and the concatenation keep nothing. Units that read the
//   same state each keep their own ReLU output, as with non-inplace ReLUs.
// - Feature maps shrink by ceil(side / stride), as with TensorFlow's SAME padding.
// - Images are 3 x image_size^2 elements of the model's dtype.
// - Kernels (for the kernel-level cost model): costmodels/conv_costs.h.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "costmodels/check.h"
#include "costmodels/conv_costs.h"
#include "costmodels/layer_graph.h"
#include "costmodels/model_families.h"
#include "costmodels/size_checks.h"

namespace pipescope {

namespace {

using conv::Map;
using conv::shrink;

// AmoebaNet's operations on top of the shared ones; what each stashes is
// AmoebaNet's choice (the file comment).
struct Cost : conv::Cost {
  // ReLU -> kh x kw convolution with strides (sh, sw), no bias -> BatchNorm.
  Map relu_conv_bn(const Map& in, std::int64_t out_channels, std::int64_t kh, std::int64_t kw,
                   std::int64_t sh, std::int64_t sw) {
    relu(in);
    const Map out = convolution(in, out_channels, kh, kw, sh, sw);
    stash += in.elements() + out.elements();
    batch_norm(out);
    return out;
  }
  Map conv1x1(const Map& in, std::int64_t out_channels, std::int64_t stride = 1) {
    return relu_conv_bn(in, out_channels, 1, 1, stride, stride);
  }
  // ReLU, two 1x1 stride-2 convolutions to half the channels each (one on the map
  // shifted by a pixel), concatenated -> BatchNorm: halves a map whose neighbour
  // came through a reduction cell.
  Map factorized_reduce(const Map& in, std::int64_t out_channels) {
    const std::int64_t half = out_channels / 2;
    const Map out{2 * half, shrink(in.h, 2), shrink(in.w, 2)};
    stash += in.elements() + out.elements();
    relu(in);
    convolution(in, half, 1, 1, 2, 2);
    convolution(in, half, 1, 1, 2, 2);
    pass(2.0 * out.elements(), 0.0);  // the concatenation
    batch_norm(out);
    return out;
  }
  Map max_or_avg_pool(const Map& in, std::int64_t k, std::int64_t stride, bool max) {
    if (max) stash += in.elements();
    return pool(in, k, stride, max);
  }
};

enum class Op {
  kIdentity,
  kConv1x1,
  kConv3x3,
  kConv1x7x7x1,
  kMaxPool2x2,
  kMaxPool3x3,
  kAvgPool3x3
};

// Applies one operation of a cell with c channels: the convolutions are the
// reference's bottlenecks (1x1 to c/4, the spatial kernels, 1x1 back to c).
Map apply(Cost& cost, Op op, const Map& in, std::int64_t c, std::int64_t stride) {
  const std::int64_t q = c / 4;
  switch (op) {
    case Op::kIdentity:
      return stride == 1 ? in : cost.factorized_reduce(in, c);
    case Op::kConv1x1:
      return cost.conv1x1(in, c, stride);
    case Op::kConv3x3: {
      const Map a = cost.conv1x1(in, q);
      return cost.conv1x1(cost.relu_conv_bn(a, q, 3, 3, stride, stride), c);
    }
    case Op::kConv1x7x7x1: {
      const Map a = cost.relu_conv_bn(cost.conv1x1(in, q), q, 1, 7, 1, stride);
      return cost.conv1x1(cost.relu_conv_bn(a, q, 7, 1, stride, 1), c);
    }
    case Op::kMaxPool2x2:
      return cost.max_or_avg_pool(in, 2, stride, true);
    case Op::kMaxPool3x3:
      return cost.max_or_avg_pool(in, 3, stride, true);
    case Op::kAvgPool3x3:
      return cost.max_or_avg_pool(in, 3, stride, false);
  }
  return in;
}

// A cell combines pairs of states: state 0 is h[i-1] (through a 1x1 convolution),
// state 1 is h[i-2] (made to match), and pair k adds two operations on earlier
// states to make state k + 2.
struct Branch {
  int state;
  Op op;
};
struct Genotype {
  std::array<Branch, 10> branches;  // pairs: (0, 1), (2, 3), ...
  std::vector<int> concat;          // the states concatenated into the output
};

// AmoebaNet-D, as in the TensorFlow reference (torchgpipe's genotype).
const Genotype& normal_cell() {
  static const Genotype g{{{{1, Op::kConv1x1},
                            {1, Op::kMaxPool3x3},
                            {1, Op::kIdentity},
                            {0, Op::kConv1x7x7x1},
                            {0, Op::kConv1x1},
                            {0, Op::kConv1x7x7x1},
                            {2, Op::kMaxPool3x3},
                            {2, Op::kIdentity},
                            {1, Op::kAvgPool3x3},
                            {5, Op::kConv1x1}}},
                          {0, 3, 4, 6}};
  return g;
}
const Genotype& reduction_cell() {
  static const Genotype g{{{{0, Op::kMaxPool2x2},
                            {0, Op::kMaxPool3x3},
                            {2, Op::kIdentity},
                            {1, Op::kConv3x3},
                            {2, Op::kConv1x7x7x1},
                            {2, Op::kMaxPool3x3},
                            {3, Op::kIdentity},
                            {1, Op::kMaxPool2x2},
                            {2, Op::kAvgPool3x3},
                            {3, Op::kConv1x1}}},
                          {4, 5, 6}};
  return g;
}

// A cell with c channels per state on inputs prev (h[i-1]) and prev_prev (h[i-2]);
// in a reduction cell the operations on states 0 and 1 have stride 2. When h[i-1]
// came from a reduction cell, h[i-2] has twice its resolution and is halved.
Map cell(Cost& cost, const Map& prev, const Map& prev_prev, std::int64_t c, bool reduction,
         bool reduction_prev) {
  std::vector<Map> states;
  states.push_back(cost.conv1x1(prev, c));
  if (reduction_prev) {
    states.push_back(cost.factorized_reduce(prev_prev, c));
  } else if (prev_prev.channels != c) {
    states.push_back(cost.conv1x1(prev_prev, c));
  } else {
    states.push_back(prev_prev);
  }
  const Genotype& g = reduction ? reduction_cell() : normal_cell();
  for (std::size_t k = 0; k < g.branches.size(); k += 2) {
    Map out;
    for (std::size_t j = k; j < k + 2; ++j) {
      const Branch& b = g.branches[j];
      const std::int64_t stride = reduction && b.state < 2 ? 2 : 1;
      out = apply(cost, b.op, states[static_cast<std::size_t>(b.state)], c, stride);
    }
    cost.sum(out);  // the pair's sum
    states.push_back(out);
  }
  const Map& last = states.back();
  const Map result{c * static_cast<std::int64_t>(g.concat.size()), last.h, last.w};
  cost.pass(2.0 * result.elements(), 0.0);  // the concatenation
  return result;
}

}  // namespace

ModelSpec make_amoebanet(const AmoebaNetParams& p, const std::string& name) {
  PS_CHECK(p.cells >= 0 && p.filters >= 8 && p.image_size > 0 && p.classes > 0,
           "amoebanet parameters must be positive, with at least 8 filters");
  const Bytes e = dtype_bytes(p.dtype);
  ModelSpec m = conv::image_model(name, "amoebanet", p.dtype, p.image_size);

  double total_params = 0.0;
  // Adds a layer from its cost, after checking that its sizes fit.
  // Adds a layer from its cost and its output per sample, in elements.
  const auto add = [&](std::string layer_name, const Cost& c, double out_elements,
                       std::vector<std::string> inputs) {
    total_params += c.params;
    require_fits(total_params, "the parameters");
    m.layers.push_back(
        conv::to_layer(std::move(layer_name), c, out_elements, std::move(inputs), e));
  };

  // Stem: 3x3 stride-2 convolution to D/4 channels, then two reduction cells (D/2,
  // D channels per state); the first sees the stem's output as both h[i-1] and
  // h[i-2].
  std::int64_t channels = p.filters / 4;
  Cost stem;
  Map prev = stem.relu_conv_bn(Map{3, p.image_size, p.image_size}, channels, 3, 3, 2, 2);
  add("stem1", stem, prev.elements(), {});
  Map prev_prev = prev;
  std::string prev_name = "stem1", prev_prev_name = "stem1";
  bool reduction_prev = false;

  const auto add_cell = [&](const std::string& cell_name, bool reduction) {
    if (reduction) channels *= 2;
    Cost c;
    const Map out = cell(c, prev, prev_prev, channels, reduction, reduction_prev);
    std::vector<std::string> inputs{prev_name};
    if (prev_prev_name != prev_name) inputs.push_back(prev_prev_name);
    add(cell_name, c, out.elements(), std::move(inputs));
    prev_prev = prev;
    prev_prev_name = prev_name;
    prev = out;
    prev_name = cell_name;
    reduction_prev = reduction;
  };
  add_cell("stem2", true);
  add_cell("stem3", true);
  // Three groups of normal cells (torchgpipe's names), split by reduction cells.
  for (int group = 0; group < 3; ++group) {
    if (group > 0) add_cell("cell" + std::to_string(2 * group) + "_reduction", true);
    const int count = p.cells / 3 + (group < p.cells % 3 ? 1 : 0);
    for (int i = 0; i < count; ++i) {
      add_cell("cell" + std::to_string(2 * group + 1) + "_normal" + std::to_string(i + 1), false);
    }
  }

  // Head on h[L-1] alone: global average pooling, a linear classifier and
  // softmax cross-entropy; its output is the fp32 loss.
  Cost head;
  head.global_average_pool(prev);
  head.classifier_with_loss(prev.channels, p.classes, e);
  add("classify", head, 4.0 / f64(e), {});  // the fp32 loss
  resolve_layer_graph(m);
  return m;
}

}  // namespace pipescope
