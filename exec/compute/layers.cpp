#include "exec/compute/layers.h"

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/layer_math.h"
#include "exec/compute/moe_layers.h"
#include "exec/compute/tensor_layers.h"

namespace pipescope::exec {

// ---------------------------------------------------------------- embedding

EmbeddingMath::EmbeddingMath(Index vocab, Index seq_len, Index d_model, bool learned_positions)
    : vocab_(vocab), seq_len_(seq_len), d_model_(d_model), learned_(learned_positions) {
  check_positive(vocab, "vocab");
  check_positive(seq_len, "seq_len");
  check_positive(d_model, "d_model");
  if (vocab > (Index{1} << 24)) {
    throw std::invalid_argument("vocab " + str(vocab) +
                                " is past 2^24: token ids passed as floats would not be exact");
  }
  if (!learned_) {
    sinusoid_.resize(seq_len, d_model);
    for (Index t = 0; t < seq_len; ++t) {
      for (Index i = 0; i < d_model; ++i) {
        const double rate =
            std::pow(10000.0, -static_cast<double>(i - i % 2) / static_cast<double>(d_model));
        const double angle = static_cast<double>(t) * rate;
        sinusoid_(t, i) = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    }
  }
}

std::vector<ParamShape> EmbeddingMath::param_shapes() const {
  std::vector<ParamShape> shapes{{"token", vocab_, d_model_, Init::kNormal}};
  if (learned_) shapes.push_back({"position", seq_len_, d_model_, Init::kNormal});
  return shapes;
}

void EmbeddingMath::check_context(const Context& ctx) const {
  if (ctx.whole_seq() > seq_len_) {
    throw std::invalid_argument("embed: sequences of " + str(ctx.whole_seq()) +
                                " positions are longer than seq_len " + str(seq_len_));
  }
}

Index EmbeddingMath::token_id(double id) const {
  if (!(id >= 0.0 && id < static_cast<double>(vocab_) && id == std::floor(id))) {
    throw std::invalid_argument("embed: token id " + std::to_string(id) +
                                " is not an integer in [0, " + str(vocab_) + ")");
  }
  return static_cast<Index>(id);
}

template <typename T>
void EmbeddingMath::add_positions(const Values<T>& w, const Context& ctx, Mat<T>& out) const {
  for (Index r = 0; r < out.rows(); ++r) {
    const Index t = ctx.position(r % ctx.seq);
    if (learned_) {
      out.row(r) += w[1]->row(t);
    } else {
      out.row(r) += sinusoid_.row(t).cast<T>();
    }
  }
}

template <typename T>
Mat<T> EmbeddingMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                              std::vector<Mat<T>>& stash) const {
  check_input(x, ctx, 1, "embed");
  check_context(ctx);
  Mat<T> out(x.rows(), d_model_);
  for (Index r = 0; r < x.rows(); ++r) {
    out.row(r) = w[0]->row(token_id(static_cast<double>(x(r, 0))));
  }
  add_positions(w, ctx, out);
  stash = {x};
  return out;
}

template <typename T>
Mat<T> EmbeddingMath::backward(const Values<T>& /*w*/, const Grads<T>& dw, const Mat<T>& dy,
                               const Context& ctx, const std::vector<Mat<T>>& stash) const {
  // All of it is weight gradient: the input is token ids.
  const Mat<T>& ids = stash.at(0);
  Mat<T>* positions = learned_ ? dw[1] : nullptr;
  dw.add(dy, [&ids, table = dw[0], positions, ctx](const Mat<T>& d) {
    for (Index r = 0; r < d.rows(); ++r) {
      table->row(static_cast<Index>(ids(r, 0))) += d.row(r);
      if (positions != nullptr) positions->row(ctx.position(r % ctx.seq)) += d.row(r);
    }
  });
  return Mat<T>();
}

// ---------------------------------------------------------------- transformer block

TransformerBlockMath::TransformerBlockMath(Index d_model, Index heads, Index kv_heads, Index d_ff)
    : d_model_(d_model), heads_(heads), kv_heads_(kv_heads == 0 ? heads : kv_heads), d_ff_(d_ff) {
  check_positive(d_model, "d_model");
  check_positive(heads, "heads");
  check_positive(d_ff, "d_ff");
  if (d_model % heads != 0) {
    throw std::invalid_argument(str(heads) + " heads do not divide d_model " + str(d_model));
  }
  if (kv_heads_ < 1 || kv_heads_ > heads || heads % kv_heads_ != 0) {
    throw std::invalid_argument(str(kv_heads_) + " key/value heads do not divide heads " +
                                str(heads));
  }
}

AttentionShape TransformerBlockMath::attention(const Context& ctx) const {
  return {ctx.batch, ctx.seq, heads_, kv_heads_, d_model_ / heads_};
}

std::vector<ParamShape> TransformerBlockMath::param_shapes() const {
  const Index h = d_model_, qkv = h + 2 * (h / heads_ * kv_heads_), f = d_ff_;
  return {
      {"ln1.gain", 1, h, Init::kOne},        {"ln1.bias", 1, h, Init::kZero},
      {"qkv.weight", h, qkv, Init::kNormal}, {"qkv.bias", 1, qkv, Init::kZero},
      {"proj.weight", h, h, Init::kNormal},  {"proj.bias", 1, h, Init::kZero},
      {"ln2.gain", 1, h, Init::kOne},        {"ln2.bias", 1, h, Init::kZero},
      {"fc1.weight", h, f, Init::kNormal},   {"fc1.bias", 1, f, Init::kZero},
      {"fc2.weight", f, h, Init::kNormal},   {"fc2.bias", 1, h, Init::kZero},
  };
}

template <typename T>
Mat<T> TransformerBlockMath::forward_attention(const Values<T>& w, const Mat<T>& x,
                                               const Context& ctx, std::vector<Mat<T>>& st) const {
  check_input(x, ctx, d_model_, "transformer block");
  if (ctx.shares != 1) {
    throw std::invalid_argument(
        "transformer block: a share of each sequence (context parallelism) needs the blocks of "
        "a context-parallel ring (exec/tensor_shard.h, build_context_ranks)");
  }
  st[kX] = x;
  st[kLn1Out] = layernorm_forward(x, *w[kLn1Gain], *w[kLn1Bias], st[kLn1Stats]);
  st[kQkv] = linear_forward(st[kLn1Out], *w[kQkvWeight], *w[kQkvBias]);
  st[kAttn] = attention_forward(st[kQkv], attention(ctx), st[kProbs]);
  st[kX2] = x + linear_forward(st[kAttn], *w[kProjWeight], *w[kProjBias]);
  return st[kX2];
}

template <typename T>
Mat<T> TransformerBlockMath::backward_attention(const Values<T>& w, const Grads<T>& dw,
                                                const Mat<T>& dx2, const Context& ctx,
                                                const std::vector<Mat<T>>& st) const {
  linear_params(dw, dx2, st[kAttn], kProjWeight, kProjBias);
  const Mat<T> dattn = linear_backward_input(dx2, *w[kProjWeight]);
  const Mat<T> dqkv = attention_backward(dattn, st[kQkv], st[kProbs], attention(ctx));
  linear_params(dw, dqkv, st[kLn1Out], kQkvWeight, kQkvBias);
  const Mat<T> dln1 = linear_backward_input(dqkv, *w[kQkvWeight]);
  layernorm_params(dw, dln1, st[kX], st[kLn1Stats], kLn1Gain, kLn1Bias);
  return dx2 + layernorm_backward_input(dln1, st[kX], st[kLn1Stats], *w[kLn1Gain]);
}

template <typename T>
Mat<T> TransformerBlockMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                                     std::vector<Mat<T>>& st) const {
  st.assign(kBlockStashSize, Mat<T>());
  forward_attention(w, x, ctx, st);
  st[kLn2Out] = layernorm_forward(st[kX2], *w[kLn2Gain], *w[kLn2Bias], st[kLn2Stats]);
  st[kFc1Out] = linear_forward(st[kLn2Out], *w[kFc1Weight], *w[kFc1Bias]);
  st[kGeluOut] = gelu_forward(st[kFc1Out]);
  return st[kX2] + linear_forward(st[kGeluOut], *w[kFc2Weight], *w[kFc2Bias]);
}

template <typename T>
Mat<T> TransformerBlockMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                                      const Context& ctx, const std::vector<Mat<T>>& st) const {
  // The residuals pass dy straight through to x2 and dx2 to x.
  Mat<T> dx2 = dy;
  linear_params(dw, dy, st[kGeluOut], kFc2Weight, kFc2Bias);
  const Mat<T> dgelu = linear_backward_input(dy, *w[kFc2Weight]);
  const Mat<T> dfc1 = gelu_backward(dgelu, st[kFc1Out]);
  linear_params(dw, dfc1, st[kLn2Out], kFc1Weight, kFc1Bias);
  const Mat<T> dln2 = linear_backward_input(dfc1, *w[kFc1Weight]);
  layernorm_params(dw, dln2, st[kX2], st[kLn2Stats], kLn2Gain, kLn2Bias);
  dx2 += layernorm_backward_input(dln2, st[kX2], st[kLn2Stats], *w[kLn2Gain]);
  return backward_attention(w, dw, dx2, ctx, st);
}

// ---------------------------------------------------------------- LM head

LmHeadMath::LmHeadMath(Index d_model, Index vocab) : d_model_(d_model), vocab_(vocab) {
  check_positive(d_model, "d_model");
  check_positive(vocab, "vocab");
}

std::vector<ParamShape> LmHeadMath::param_shapes() const {
  return {{"ln.gain", 1, d_model_, Init::kOne},
          {"ln.bias", 1, d_model_, Init::kZero},
          {"proj.weight", d_model_, vocab_, Init::kNormal}};
}

// Stash: input, LayerNorm stats, LayerNorm output, softmax.
template <typename T>
Mat<T> LmHeadMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                           std::vector<Mat<T>>& st) const {
  check_input(x, ctx, d_model_, "head");
  check_targets(ctx.targets, x.rows(), vocab_);
  st.assign(4, Mat<T>());
  st[0] = x;
  st[2] = layernorm_forward(x, *w[0], *w[1], st[1]);
  const Mat<T> logits = st[2] * *w[2];
  const double loss = crossentropy_forward(logits, *ctx.targets, st[3]) * ctx.loss_scale;
  return Mat<T>::Constant(1, 1, static_cast<T>(loss));
}

template <typename T>
Mat<T> LmHeadMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                            const Context& ctx, const std::vector<Mat<T>>& st) const {
  const auto scale = static_cast<T>(ctx.loss_scale * static_cast<double>(dy(0, 0)));
  const Mat<T> dlogits = crossentropy_backward(st[3], *ctx.targets, scale);
  linear_params(dw, dlogits, st[2], 2, std::nullopt);
  const Mat<T> dln = linear_backward_input(dlogits, *w[2]);
  layernorm_params(dw, dln, st[0], st[1], 0, 1);
  return layernorm_backward_input(dln, st[0], st[1], *w[0]);
}

// ---------------------------------------------------------------- mlp block

MlpBlockMath::MlpBlockMath(Index d_model, Index d_hidden) : d_model_(d_model), d_hidden_(d_hidden) {
  check_positive(d_model, "d_model");
  check_positive(d_hidden, "d_hidden");
}

std::vector<ParamShape> MlpBlockMath::param_shapes() const {
  const Index d = d_model_, f = d_hidden_;
  return {{"ln.gain", 1, d, Init::kOne},       {"ln.bias", 1, d, Init::kZero},
          {"fc1.weight", d, f, Init::kNormal}, {"fc1.bias", 1, f, Init::kZero},
          {"fc2.weight", f, d, Init::kNormal}, {"fc2.bias", 1, d, Init::kZero}};
}

// Stash: input, LayerNorm stats, LayerNorm output, fc1 output, relu output.
template <typename T>
Mat<T> MlpBlockMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                             std::vector<Mat<T>>& st) const {
  check_input(x, ctx, d_model_, "mlp block");
  st.assign(5, Mat<T>());
  st[0] = x;
  st[2] = layernorm_forward(x, *w[0], *w[1], st[1]);
  st[3] = linear_forward(st[2], *w[2], *w[3]);
  st[4] = relu_forward(st[3]);
  return x + linear_forward(st[4], *w[4], *w[5]);
}

template <typename T>
Mat<T> MlpBlockMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                              const Context& /*ctx*/, const std::vector<Mat<T>>& st) const {
  linear_params(dw, dy, st[4], 4, 5);
  const Mat<T> drelu = linear_backward_input(dy, *w[4]);
  const Mat<T> dfc1 = relu_backward(drelu, st[3]);
  linear_params(dw, dfc1, st[2], 2, 3);
  const Mat<T> dln = linear_backward_input(dfc1, *w[2]);
  layernorm_params(dw, dln, st[0], st[1], 0, 1);
  return dy + layernorm_backward_input(dln, st[0], st[1], *w[0]);
}

// ---------------------------------------------------------------- classifier head

ClassifierHeadMath::ClassifierHeadMath(Index d_model, Index classes)
    : d_model_(d_model), classes_(classes) {
  check_positive(d_model, "d_model");
  check_positive(classes, "classes");
}

std::vector<ParamShape> ClassifierHeadMath::param_shapes() const {
  return {{"weight", d_model_, classes_, Init::kNormal}, {"bias", 1, classes_, Init::kZero}};
}

// Stash: input, softmax.
template <typename T>
Mat<T> ClassifierHeadMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                                   std::vector<Mat<T>>& st) const {
  check_input(x, ctx, d_model_, "head");
  check_targets(ctx.targets, x.rows(), classes_);
  st.assign(2, Mat<T>());
  st[0] = x;
  const Mat<T> logits = linear_forward(x, *w[0], *w[1]);
  const double loss = crossentropy_forward(logits, *ctx.targets, st[1]) * ctx.loss_scale;
  return Mat<T>::Constant(1, 1, static_cast<T>(loss));
}

template <typename T>
Mat<T> ClassifierHeadMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                                    const Context& ctx, const std::vector<Mat<T>>& st) const {
  const auto scale = static_cast<T>(ctx.loss_scale * static_cast<double>(dy(0, 0)));
  const Mat<T> dlogits = crossentropy_backward(st[1], *ctx.targets, scale);
  linear_params(dw, dlogits, st[0], 0, 1);
  return linear_backward_input(dlogits, *w[0]);
}

// ---------------------------------------------------------------- MathLayer

template <class Math>
MathLayer<Math>::MathLayer(std::string name, Math math, std::mt19937_64& rng)
    : name_(std::move(name)), math_(std::move(math)) {
  std::normal_distribution<double> normal(0.0, kInitStddev);
  for (const ParamShape& shape : math_.param_shapes()) {
    Param p;
    p.name = name_ + "." + shape.name;
    p.expert = shape.expert;
    p.value.resize(shape.rows, shape.cols);
    switch (shape.init) {
      case Init::kNormal:
        for (Index k = 0; k < p.value.size(); ++k)
          p.value.data()[k] = static_cast<float>(normal(rng));
        break;
      case Init::kZero:
        p.value.setZero();
        break;
      case Init::kOne:
        p.value.setOnes();
        break;
    }
    p.grad.setZero(shape.rows, shape.cols);
    params_.push_back(std::move(p));
  }
}

template <class Math>
MathLayer<Math>::MathLayer(std::string name, Math math, std::vector<Matrix> values)
    : name_(std::move(name)), math_(std::move(math)) {
  const std::vector<ParamShape> shapes = math_.param_shapes();
  if (values.size() != shapes.size()) {
    throw std::invalid_argument(name_ + ": " + std::to_string(values.size()) +
                                " parameter values for " + std::to_string(shapes.size()) +
                                " parameters");
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const ParamShape& shape = shapes[i];
    if (values[i].rows() != shape.rows || values[i].cols() != shape.cols) {
      throw std::invalid_argument(name_ + "." + shape.name + ": a (" + str(values[i].rows()) +
                                  ", " + str(values[i].cols()) + ") value for a (" +
                                  str(shape.rows) + ", " + str(shape.cols) + ") parameter");
    }
    Param p;
    p.name = name_ + "." + shape.name;
    p.expert = shape.expert;
    p.value = std::move(values[i]);
    p.grad.setZero(shape.rows, shape.cols);
    params_.push_back(std::move(p));
  }
}

template <class Math>
Tensor MathLayer<Math>::forward(const Tensor& x, const Context& ctx, Stash& stash) const {
  Values<float> w;
  for (const Param& p : params_) w.push_back(&p.value);
  stash.clear();
  return math_.template forward<float>(w, x.host(), ctx, stash.tensors);
}

template <class Math>
Tensor MathLayer<Math>::backward(const Tensor& dy, const Context& ctx, const Stash& stash) {
  return run_backward(dy.host(), ctx, stash, nullptr);
}

template <class Math>
Tensor MathLayer<Math>::backward_input(const Tensor& dy, const Context& ctx, const Stash& stash,
                                       WeightGradQueue& deferred) {
  return run_backward(dy.host(), ctx, stash, &deferred);
}

template <class Math>
Matrix MathLayer<Math>::run_backward(const Matrix& dy, const Context& ctx, const Stash& stash,
                                     WeightGradQueue* deferred) {
  Values<float> w;
  Grads<float> dw;
  dw.deferred = deferred;
  for (Param& p : params_) {
    w.push_back(&p.value);
    dw.dw.push_back(&p.grad);
  }
  return math_.template backward<float>(w, dw, dy, ctx, stash.tensors);
}

template <class Math>
std::vector<Param*> MathLayer<Math>::params() {
  std::vector<Param*> out;
  for (Param& p : params_) out.push_back(&p);
  return out;
}

// The float instantiations serve the layers, the double ones the gradient checks.
#define PIPESCOPE_INSTANTIATE_MATH(Math, T)                                           \
  template Mat<T> Math::forward<T>(const Values<T>&, const Mat<T>&, const Context&,   \
                                   std::vector<Mat<T>>&) const;                       \
  template Mat<T> Math::backward<T>(const Values<T>&, const Grads<T>&, const Mat<T>&, \
                                    const Context&, const std::vector<Mat<T>>&) const;
#define PIPESCOPE_INSTANTIATE_LAYER(Math)  \
  PIPESCOPE_INSTANTIATE_MATH(Math, float)  \
  PIPESCOPE_INSTANTIATE_MATH(Math, double) \
  template class MathLayer<Math>;

template void EmbeddingMath::add_positions<float>(const Values<float>&, const Context&,
                                                  Mat<float>&) const;
template void EmbeddingMath::add_positions<double>(const Values<double>&, const Context&,
                                                   Mat<double>&) const;
PIPESCOPE_INSTANTIATE_LAYER(EmbeddingMath)
PIPESCOPE_INSTANTIATE_LAYER(TransformerBlockMath)
#define PIPESCOPE_INSTANTIATE_ATTENTION(T)                                                       \
  template Mat<T> TransformerBlockMath::forward_attention<T>(                                    \
      const Values<T>&, const Mat<T>&, const Context&, std::vector<Mat<T>>&) const;              \
  template Mat<T> TransformerBlockMath::backward_attention<T>(const Values<T>&, const Grads<T>&, \
                                                              const Mat<T>&, const Context&,     \
                                                              const std::vector<Mat<T>>&) const;
PIPESCOPE_INSTANTIATE_ATTENTION(float)
PIPESCOPE_INSTANTIATE_ATTENTION(double)
PIPESCOPE_INSTANTIATE_LAYER(LmHeadMath)
PIPESCOPE_INSTANTIATE_LAYER(MlpBlockMath)
PIPESCOPE_INSTANTIATE_LAYER(ClassifierHeadMath)
// The tensor-parallel shards run in float only (their math: tensor_layers.cpp).
template class MathLayer<VocabEmbeddingMath>;
template class MathLayer<TensorBlockMath>;
template class MathLayer<VocabHeadMath>;
template class MathLayer<MoeBlockMath>;  // its math: moe_layers.cpp

}  // namespace pipescope::exec
