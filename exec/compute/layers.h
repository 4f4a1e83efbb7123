#pragma once
// The real layers of the reference executor (Eigen, fp32, single-threaded),
// matching the transformer and mlp families of costmodels/model_families.h layer
// for layer and parameter for parameter.
//
// Each layer is its math (a *Math class: parameter shapes plus forward and
// backward templates over the scalar type, instantiated for float and double)
// wrapped in MathLayer, which owns the parameters and implements exec::Layer in
// float. The gradient checks run the same math in double.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "exec/compute/kernels.h"
#include "exec/compute/layer.h"

namespace pipescope::exec {

// How a parameter starts: weights N(0, 0.02) (GPT-2), biases 0, LayerNorm gains 1.
enum class Init { kNormal, kZero, kOne };
inline constexpr double kInitStddev = 0.02;

struct ParamShape {
  std::string name;  // within the layer, e.g. "ln1.gain"
  Index rows = 0;
  Index cols = 0;
  Init init = Init::kNormal;
  // Held by one expert-parallel rank alone (exec/compute/moe_layers.h): its
  // gradient is not summed over the ranks.
  bool expert = false;
};

// Parameter values in param_shapes() order.
template <typename T>
using Values = std::vector<const Mat<T>*>;

// Where a backward puts the parameters' gradients, in param_shapes() order: added
// at once, or, with `deferred` set (B of a split backward), queued for the W op.
template <typename T>
struct Grads {
  std::vector<Mat<T>*> dw;
  WeightGradQueue* deferred = nullptr;

  Mat<T>* operator[](std::size_t i) const { return dw[i]; }
  // Runs add(dout) now, or queues it with a copy of dout (the output gradient a
  // backward computes and drops). add must reach nothing else that dies with the
  // backward: only the stash, the gradients and values it captures.
  template <class Add>
  void add(const Mat<T>& dout, Add&& add) const {
    if (deferred == nullptr) {
      add(dout);
    } else {
      deferred->emplace_back([add = std::forward<Add>(add), d = dout] { add(d); });
    }
  }
};

// Token table plus positions: learned (a seq_len x h table) or the fixed
// sinusoidal table of Vaswani et al. 2017, PE(t, 2i) = sin(t / 10000^(2i/h)),
// PE(t, 2i+1) = cos(t / 10000^(2i/h)). Parameters: V*h (+ seq_len*h learned).
class EmbeddingMath {
 public:
  // Throws std::invalid_argument for sizes it cannot run (vocab past 2^24, whose
  // ids floats no longer hold exactly).
  EmbeddingMath(Index vocab, Index seq_len, Index d_model, bool learned_positions);
  std::vector<ParamShape> param_shapes() const;
  Index vocab() const { return vocab_; }
  Index seq_len() const { return seq_len_; }
  Index d_model() const { return d_model_; }
  bool learned_positions() const { return learned_; }
  // (seq_len, h) when the positions are not learned.
  const Mat<double>& sinusoid() const { return sinusoid_; }
  // Throws std::invalid_argument for sequences longer than seq_len.
  void check_context(const Context& ctx) const;
  // A token id given as a float; throws std::invalid_argument unless it is an
  // integer in [0, vocab).
  Index token_id(double id) const;
  // Adds each row's position (row r is position r mod ctx.seq) to out (b*s, h).
  template <typename T>
  void add_positions(const Values<T>& w, const Context& ctx, Mat<T>& out) const;
  // x is (b*s, 1) token ids as floats, out is (b*s, h); stash keeps the ids.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  // dy is (b*s, h); scatter-adds into the table(s); returns an empty matrix.
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  Index vocab_, seq_len_, d_model_;
  bool learned_;
  Mat<double> sinusoid_;  // (seq_len, h) when not learned
};

// The order of a transformer block's parameters (param_shapes()).
enum BlockParam : std::size_t {
  kLn1Gain,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kProjWeight,
  kProjBias,
  kLn2Gain,
  kLn2Bias,
  kFc1Weight,
  kFc1Bias,
  kFc2Weight,
  kFc2Bias,
};

// Pre-LayerNorm decoder block: x2 = x + Wo attn(LN1(x)) + bo with causal
// (grouped-query) self-attention on a fused QKV projection with bias, then
// out = x2 + W2 gelu(W1 LN2(x2) + b1) + b2. No dropout.
// Parameters: 2h^2 + 2h*d_kv + 2d_kv + 2hf + f + 7h, as make_transformer counts.
class TransformerBlockMath {
 public:
  // Throws std::invalid_argument unless heads divides d_model and kv_heads divides
  // heads (kv_heads 0 means heads).
  TransformerBlockMath(Index d_model, Index heads, Index kv_heads, Index d_ff);
  std::vector<ParamShape> param_shapes() const;
  Index d_model() const { return d_model_; }
  Index d_ff() const { return d_ff_; }
  Index heads() const { return heads_; }
  Index kv_heads() const { return kv_heads_; }
  AttentionShape attention(const Context& ctx) const;
  // x is (b*s, h), out is (b*s, h).
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  // dy is (b*s, h), returns dx (b*s, h).
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;
  // The attention half, which a mixture-of-experts block shares
  // (exec/compute/moe_layers.h): x2 = x + Wo attn(LN1(x)) + bo, kept with its
  // inputs in stash[kX .. kX2] (layer_math.h; the stash sized by the caller);
  // and its backward from dx2, the whole gradient reaching x2, returning dx.
  template <typename T>
  Mat<T> forward_attention(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                           std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward_attention(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dx2,
                            const Context& ctx, const std::vector<Mat<T>>& stash) const;

 private:
  Index d_model_, heads_, kv_heads_, d_ff_;
};

// Final LayerNorm, LM projection h -> V without bias, softmax cross-entropy on
// ctx.targets. Parameters: V*h + 2h. The loss is sum(token losses) * loss_scale.
class LmHeadMath {
 public:
  LmHeadMath(Index d_model, Index vocab);
  std::vector<ParamShape> param_shapes() const;
  Index d_model() const { return d_model_; }
  Index vocab() const { return vocab_; }
  // x is (b*s, h), out is (1, 1): the loss.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  // dy is (1, 1), returns dx (b*s, h).
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  Index d_model_, vocab_;
};

// Residual MLP block x + W2 relu(W1 LN(x) + b1) + b2 over feature vectors.
// Parameters: 2df + f + 3d, as make_mlp counts.
class MlpBlockMath {
 public:
  MlpBlockMath(Index d_model, Index d_hidden);
  std::vector<ParamShape> param_shapes() const;
  Index d_model() const { return d_model_; }
  Index d_hidden() const { return d_hidden_; }
  // x is (b, d), out is (b, d).
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  // dy is (b, d), returns dx (b, d).
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  Index d_model_, d_hidden_;
};

// Linear d -> classes with bias, softmax cross-entropy on ctx.targets (one per
// sample). Parameters: d*c + c.
class ClassifierHeadMath {
 public:
  ClassifierHeadMath(Index d_model, Index classes);
  std::vector<ParamShape> param_shapes() const;
  Index d_model() const { return d_model_; }
  Index classes() const { return classes_; }
  // x is (b, d), out is (1, 1): the loss.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  // dy is (1, 1), returns dx (b, d).
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  Index d_model_, classes_;
};

// A layer's math with its fp32 parameters, named "<layer>.<param>". The values
// are drawn from `rng` in param_shapes() order, row by row; gradients start at 0.
template <class Math>
class MathLayer final : public Layer {
 public:
  MathLayer(std::string name, Math math, std::mt19937_64& rng);
  // With the given values, in param_shapes() order and shapes (a shard of a
  // whole layer's, exec/tensor_shard.h); throws std::invalid_argument when one
  // does not fit.
  MathLayer(std::string name, Math math, std::vector<Matrix> values);
  const std::string& name() const override { return name_; }
  Tensor forward(const Tensor& x, const Context& ctx, Stash& stash) const override;
  Tensor backward(const Tensor& dy, const Context& ctx, const Stash& stash) override;
  Tensor backward_input(const Tensor& dy, const Context& ctx, const Stash& stash,
                        WeightGradQueue& deferred) override;
  std::vector<Param*> params() override;
  void reset_exchanges() override {
    if constexpr (requires(const Math& m) { m.reset_exchanges(); }) math_.reset_exchanges();
  }
  const Math& math() const { return math_; }

 private:
  std::string name_;
  Math math_;
  Matrix run_backward(const Matrix& dy, const Context& ctx, const Stash& stash,
                      WeightGradQueue* deferred);

  std::vector<Param> params_;
};

using Embedding = MathLayer<EmbeddingMath>;
using TransformerBlock = MathLayer<TransformerBlockMath>;
using LmHead = MathLayer<LmHeadMath>;
using MlpBlock = MathLayer<MlpBlockMath>;
using ClassifierHead = MathLayer<ClassifierHeadMath>;

extern template class MathLayer<EmbeddingMath>;
extern template class MathLayer<TransformerBlockMath>;
extern template class MathLayer<LmHeadMath>;
extern template class MathLayer<MlpBlockMath>;
extern template class MathLayer<ClassifierHeadMath>;

}  // namespace pipescope::exec
