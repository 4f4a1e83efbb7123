#pragma once
// What the operations of convolutional networks (AmoebaNet-D, ResNet) cost per
// sample, shared by their families (internal to costmodels): feature maps, and
// what each operation adds to a layer's FLOPs, parameters, stash and kernels.
// Sizes are in elements until to_layer() scales them to bytes.
//
// Kernels, as PyTorch runs a network op by op: a convolution is an implicit GEMM
// (rows: output pixels, columns: output channels, depth: kernel taps x input
// channels); ReLU, BatchNorm, pooling, sums and concatenations are memory-bound
// passes over their maps. Element passes, forward / backward: ReLU 2 / 3 (read,
// write; read the gradient and the input, write), BatchNorm in training 3 / 5 (a
// statistics pass, then normalise; backward two passes over the gradient and the
// input), pooling input + output / input + output (+ input again for max
// pooling's argmax), a sum of two maps 3 / 3, concatenation 2 / 0 (its backward
// is views).

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/size_checks.h"

namespace pipescope::conv {

// A feature map: channels x height x width.
struct Map {
  std::int64_t channels = 0;
  std::int64_t h = 0;
  std::int64_t w = 0;
  double elements() const { return f64(channels) * f64(h) * f64(w); }
};

// A side after a stride: ceil(side / stride), as TensorFlow's SAME padding, and
// PyTorch's padding of k / 2 for odd kernels k, give.
inline std::int64_t shrink(std::int64_t side, std::int64_t stride) {
  return (side + stride - 1) / stride;
}

// Per-sample costs of one layer, in elements (and FLOPs) until to_layer().
struct Cost {
  double flops = 0.0;
  double params = 0.0;
  double stash = 0.0;
  std::vector<Kernel> kernels;

  // A memory-bound kernel moving these elements forward and backward.
  void pass(double fwd_elements, double bwd_elements) {
    Kernel k;
    k.kind = Kernel::Kind::kMemory;
    k.bytes = std::llround(fwd_elements);
    k.bwd_bytes = std::llround(bwd_elements);
    kernels.push_back(k);
  }
  // The implicit GEMM of a convolution producing `out` from `taps` inputs per
  // output element.
  void gemm(const Map& out, std::int64_t taps) {
    Kernel k;
    k.kind = Kernel::Kind::kGemm;
    k.rows = out.h * out.w;
    k.n = out.channels;
    k.k = taps;
    kernels.push_back(k);
  }
  // Marks the last GEMM as a 3 x 3 stride-1 convolution producing `out`, which
  // Winograd's F(2 x 2, 3 x 3) computes over its 2 x 2 output tiles.
  void winograd_eligible(const Map& out) {
    kernels.back().winograd_tiles = shrink(out.h, 2) * shrink(out.w, 2);
  }
  // A kh x kw convolution without bias, strides (sh, sw): its FLOPs, weights and
  // GEMM (what it stashes depends on who else keeps its input: the caller's).
  Map convolution(const Map& in, std::int64_t out_channels, std::int64_t kh, std::int64_t kw,
                  std::int64_t sh, std::int64_t sw) {
    const Map out{out_channels, shrink(in.h, sh), shrink(in.w, sw)};
    const double taps = f64(kh) * f64(kw) * f64(in.channels);
    flops += 2.0 * taps * out.elements();
    params += taps * f64(out_channels);
    gemm(out, kh * kw * in.channels);
    if (kh == 3 && kw == 3 && sh == 1 && sw == 1) winograd_eligible(out);
    return out;
  }
  // BatchNorm in training: scale and shift per channel, two passes each way.
  void batch_norm(const Map& m) {
    params += 2.0 * f64(m.channels);
    pass(3.0 * m.elements(), 5.0 * m.elements());
  }
  void relu(const Map& m) { pass(2.0 * m.elements(), 3.0 * m.elements()); }
  // k x k pooling with a stride: k^2 FLOPs per output element.
  Map pool(const Map& in, std::int64_t k, std::int64_t stride, bool max) {
    const Map out{in.channels, shrink(in.h, stride), shrink(in.w, stride)};
    flops += f64(k) * f64(k) * out.elements();
    pass(in.elements() + out.elements(), (max ? 2.0 : 1.0) * in.elements() + out.elements());
    return out;
  }
  // The sum of two maps of this size (one FLOP per element).
  void sum(const Map& m) {
    flops += m.elements();
    pass(3.0 * m.elements(), 3.0 * m.elements());
  }
  // Global average pooling: one addition per element, read once each way.
  void global_average_pool(const Map& in) {
    flops += in.elements();
    pass(in.elements(), in.elements());
  }
  // A linear classifier with bias over `features` (2 * features * classes FLOPs)
  // and softmax cross-entropy (5 per class), as in the other families. Stash: the
  // features, the softmax output and the int32 label (in elements of
  // `element_bytes`).
  void classifier_with_loss(std::int64_t features, std::int64_t classes, Bytes element_bytes) {
    const double f = f64(features), c = f64(classes);
    flops += 2.0 * f * c + 5.0 * c;
    params += f * c + c;
    stash += f + c + 4.0 / f64(element_bytes);
    gemm(Map{classes, 1, 1}, features);
    pass(3.0 * c, 3.0 * c);
  }
};

// An image classifier's model without layers: one sample is a square 3-channel
// image of `image_size` pixels a side in `dtype`.
inline ModelSpec image_model(const std::string& name, const std::string& family, DType dtype,
                             std::int64_t image_size) {
  ModelSpec m;
  m.name = name;
  m.family = family;
  m.dtype = dtype;
  m.tokens_per_sample = 1;
  const Map image{3, image_size, image_size};
  require_fits(image.elements() * f64(dtype_bytes(dtype)), "the bytes of an image");
  m.input_bytes = 3 * image_size * image_size * dtype_bytes(dtype);
  return m;
}

// The layer of this cost, sizes scaled to `element_bytes`, after checking that
// they fit; `out_elements` is its output per sample.
inline LayerSpec to_layer(std::string name, const Cost& c, double out_elements,
                          std::vector<std::string> inputs, Bytes element_bytes) {
  const double e = f64(element_bytes);
  require_fits(c.stash * e, "the bytes " + name + " stashes per sample");
  require_fits(out_elements * e, "the bytes of " + name + "'s output per sample");
  LayerSpec l;
  l.name = std::move(name);
  l.fwd_flops = c.flops;
  l.bwd_flops = 2.0 * c.flops;
  l.params = std::llround(c.params);
  l.out_bytes = std::llround(out_elements * e);
  l.stash_bytes = std::llround(c.stash * e);
  l.inputs = std::move(inputs);
  std::vector<Kernel> kernels = c.kernels;
  for (Kernel& k : kernels) {
    k.bytes *= element_bytes;
    k.bwd_bytes *= element_bytes;
  }
  l.kernels = make_kernel_list(std::move(kernels));
  return l;
}

}  // namespace pipescope::conv
