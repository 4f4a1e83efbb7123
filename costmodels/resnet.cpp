// ResNet-50/101/152 (He et al. 2016, "Deep Residual Learning for Image
// Recognition", table 1) as torchvision builds it (bottleneck blocks with the
// stride on the 3x3 convolution, "ResNet v1.5") and as torchgpipe flattens it for
// a pipeline (kakaobrain/torchgpipe, benchmarks/models/resnet): one layer per
// module, so that a balance of child counts means what it means there. The stem
// is conv1, bn1, relu, maxpool; each bottleneck is eleven layers: identity (hands
// the block's input to the residual), conv1 (1x1), bn1, relu1, conv2 (3x3, the
// stride), bn2, relu2, conv3 (1x1 to four times the width), bn3, residual (adds
// the identity, through a strided 1x1 convolution and BatchNorm in a stage's
// first block) and relu3; then avgpool, flat and fc. ResNet-101 has 370 layers.
//
// Approximations, all per sample:
// - FLOPs count convolutions and the classifier (2 per multiply-add), pooling
//   (k^2 per output element), the residual additions and softmax cross-entropy
//   (5 per class, in fc); ReLU and BatchNorm are neglected, as in the other
//   families. Backward is 2x forward.
// - Parameters: convolution weights (no biases), BatchNorm scale and shift, the
//   classifier's weights and bias; they match torchvision's counts (25,557,032,
//   44,549,160 and 60,192,808; tests/costmodels/model_families_test.cpp).
// - Stash, as PyTorch's autograd keeps each tensor once: a BatchNorm keeps its
//   input (the convolution's output); a ReLU its output, which is also the next
//   convolution's input, so convolutions after a ReLU keep nothing; the stem's
//   convolution keeps the image, and the first block's conv1 the max pool's
//   output; the max pool keeps its int64 argmax indices; fc keeps the pooled
//   features, the softmax output and the int32 label. Additions, the identity,
//   the average pool and the flattening keep nothing.
// - Kernels: costmodels/conv_costs.h; the flattening is a view (no kernel).

#include <array>
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

using conv::Cost;
using conv::Map;

// Bottleneck blocks in each of the four stages (He et al. 2016, table 1).
std::array<int, 4> blocks_of(int depth) {
  switch (depth) {
    case 50:
      return {3, 4, 6, 3};
    case 101:
      return {3, 4, 23, 3};
    case 152:
      return {3, 8, 36, 3};
    default:
      PS_CHECK(false, "ResNet depth must be 50, 101 or 152");
  }
  return {};
}

// Builds the layer list one module at a time.
class Builder {
 public:
  Builder(ModelSpec& m, Bytes element_bytes) : m_(m), e_(element_bytes) {}

  // Adds a layer whose output is `out` elements per sample.
  void add(std::string name, const Cost& c, double out, std::vector<std::string> inputs = {}) {
    total_params_ += c.params;
    require_fits(total_params_, "the parameters");
    m_.layers.push_back(conv::to_layer(std::move(name), c, out, std::move(inputs), e_));
  }
  // A convolution layer; `keeps_input` when no layer before it keeps its input.
  Map convolution(const std::string& name, const Map& in, std::int64_t out_channels, std::int64_t k,
                  std::int64_t stride, bool keeps_input) {
    Cost c;
    const Map out = c.convolution(in, out_channels, k, k, stride, stride);
    if (keeps_input) c.stash += in.elements();
    add(name, c, out.elements());
    return out;
  }
  void batch_norm(const std::string& name, const Map& m) {
    Cost c;
    c.batch_norm(m);
    c.stash += m.elements();
    add(name, c, m.elements());
  }
  void relu(const std::string& name, const Map& m) {
    Cost c;
    c.relu(m);
    c.stash += m.elements();
    add(name, c, m.elements());
  }
  Map max_pool(const std::string& name, const Map& in) {
    Cost c;
    const Map out = c.pool(in, 3, 2, true);
    c.stash += out.elements() * 8.0 / f64(e_);  // int64 indices
    add(name, c, out.elements());
    return out;
  }
  Map bottleneck(const std::string& name, const Map& in, std::int64_t width, std::int64_t stride,
                 bool first_in_model) {
    add(name + "_identity", Cost{}, in.elements());
    Map x = convolution(name + "_conv1", in, width, 1, 1, first_in_model);
    batch_norm(name + "_bn1", x);
    relu(name + "_relu1", x);
    x = convolution(name + "_conv2", x, width, 3, stride, false);
    batch_norm(name + "_bn2", x);
    relu(name + "_relu2", x);
    x = convolution(name + "_conv3", x, 4 * width, 1, 1, false);
    batch_norm(name + "_bn3", x);
    residual(name, in, x);
    relu(name + "_relu3", x);
    return x;
  }

 private:
  // bn3's output plus the block's input, which a strided 1x1 convolution and a
  // BatchNorm first bring to its shape where the two differ.
  void residual(const std::string& name, const Map& in, const Map& out) {
    Cost c;
    if (in.channels != out.channels || in.h != out.h) {
      c.convolution(in, out.channels, 1, 1, in.h / out.h, in.w / out.w);
      c.batch_norm(out);
      c.stash += out.elements();
    }
    c.sum(out);
    add(name + "_residual", c, out.elements(), {m_.layers.back().name, name + "_identity"});
  }

  ModelSpec& m_;
  Bytes e_;
  double total_params_ = 0.0;
};

}  // namespace

ModelSpec make_resnet(const ResNetParams& p, const std::string& name) {
  PS_CHECK(p.image_size >= 32 && p.classes > 0,
           "resnet needs an image of at least 32 pixels and a class");
  const std::array<int, 4> blocks = blocks_of(p.depth);
  const Bytes e = dtype_bytes(p.dtype);
  ModelSpec m = conv::image_model(name, "resnet", p.dtype, p.image_size);

  Builder b(m, e);
  Map x = b.convolution("conv1", Map{3, p.image_size, p.image_size}, 64, 7, 2, true);
  b.batch_norm("bn1", x);
  b.relu("relu", x);
  x = b.max_pool("maxpool", x);
  for (int stage = 0; stage < 4; ++stage) {
    const std::int64_t width = std::int64_t{64} << stage;
    for (int block = 0; block < blocks[static_cast<std::size_t>(stage)]; ++block) {
      const std::int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      x = b.bottleneck("layer" + std::to_string(stage + 1) + "_" + std::to_string(block), x, width,
                       stride, stage == 0 && block == 0);
    }
  }
  Cost pool;
  pool.global_average_pool(x);
  b.add("avgpool", pool, f64(x.channels));
  b.add("flat", Cost{}, f64(x.channels));
  Cost fc;
  fc.classifier_with_loss(x.channels, p.classes, e);
  b.add("fc", fc, 4.0 / f64(e));  // the fp32 loss
  resolve_layer_graph(m);
  return m;
}

}  // namespace pipescope
