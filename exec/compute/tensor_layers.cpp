#include "exec/compute/tensor_layers.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/heads_attention.h"
#include "exec/compute/layer_math.h"

namespace pipescope::exec {

namespace {

Index ceil_div(Index a, Index b) {
  return (a + b - 1) / b;
}

void require_divides(Index T, Index n, const char* what) {
  if (n % T != 0) {
    throw std::invalid_argument(str(T) + " tensor-parallel ranks do not divide " + what + " " +
                                str(n));
  }
}

// `whole`'s parameter shapes with each split one cut to a rank's share.
std::vector<ParamShape> shard_shapes(std::vector<ParamShape> whole,
                                     const std::vector<ShardRule>& rules, Index T) {
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const ShardRule& rule = rules[i];
    if (rule.axis == ShardRule::Axis::kWhole) continue;
    Index part = 0;
    for (const Index len : rule.segments) part += ceil_div(len, T);
    (rule.axis == ShardRule::Axis::kColumns ? whole[i].cols : whole[i].rows) = part;
  }
  return whole;
}

const ShardRule kWhole{};
ShardRule columns(std::vector<Index> segments) {
  return {ShardRule::Axis::kColumns, std::move(segments)};
}
ShardRule rows(std::vector<Index> segments) {
  return {ShardRule::Axis::kRows, std::move(segments)};
}

}  // namespace

TensorRank::TensorRank(std::shared_ptr<TensorGroup> g, int r, int n)
    : group(std::move(g)), rank(r), ranks(n) {
  if (!group || n < 1 || r < 0 || r >= n || (group->ranks() != n && group->ranks() != 1)) {
    throw std::invalid_argument("tensor rank " + std::to_string(r) + " of " + std::to_string(n) +
                                " needs a group of " + std::to_string(n) + " ranks or of one");
  }
}

// ---------------------------------------------------------------- embedding

VocabEmbeddingMath::VocabEmbeddingMath(Index vocab, Index seq_len, Index d_model,
                                       bool learned_positions, TensorRank rank)
    : whole_(vocab, seq_len, d_model, learned_positions),
      rank_(std::move(rank)),
      rows_(ceil_div(vocab, rank_.ranks)) {}

std::vector<ShardRule> VocabEmbeddingMath::shard_rules() const {
  std::vector<ShardRule> rules{rows({whole_.vocab()})};
  if (whole_.learned_positions()) rules.push_back(kWhole);
  return rules;
}

std::vector<ParamShape> VocabEmbeddingMath::param_shapes() const {
  return shard_shapes(whole_.param_shapes(), shard_rules(), rank_.ranks);
}

template <typename T>
Mat<T> VocabEmbeddingMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                                   std::vector<Mat<T>>& stash) const {
  check_input(x, ctx, 1, "embed");
  whole_.check_context(ctx);
  const Index first = rows_ * rank_.rank;
  Mat<T> out = Mat<T>::Zero(x.rows(), whole_.d_model());
  for (Index r = 0; r < x.rows(); ++r) {
    const Index local = whole_.token_id(static_cast<double>(x(r, 0))) - first;
    if (local >= 0 && local < rows_) out.row(r) = w[0]->row(local);
  }
  rank_.all_reduce(out);
  whole_.add_positions(w, ctx, out);
  stash = {x};
  return out;
}

template <typename T>
Mat<T> VocabEmbeddingMath::backward(const Values<T>& /*w*/, const Grads<T>& dw, const Mat<T>& dy,
                                    const Context& ctx, const std::vector<Mat<T>>& stash) const {
  const Mat<T>& ids = stash.at(0);
  Mat<T>* positions = whole_.learned_positions() ? dw[1] : nullptr;
  const Index first = rows_ * rank_.rank, rows = rows_;
  dw.add(dy, [&ids, table = dw[0], positions, ctx, first, rows](const Mat<T>& d) {
    for (Index r = 0; r < d.rows(); ++r) {
      const Index local = static_cast<Index>(ids(r, 0)) - first;
      if (local >= 0 && local < rows) table->row(local) += d.row(r);
      if (positions != nullptr) positions->row(ctx.position(r % ctx.seq)) += d.row(r);
    }
  });
  return Mat<T>();
}

// ---------------------------------------------------------------- block

TensorBlockMath::TensorBlockMath(Index d_model, Index heads, Index kv_heads, Index d_ff,
                                 TensorRank rank, ContextRing ring)
    : whole_(d_model, heads, kv_heads, d_ff),
      rank_(std::move(rank)),
      ring_(std::move(ring)),
      heads_(heads),
      kv_heads_(kv_heads == 0 ? heads : kv_heads) {
  require_divides(rank_.ranks, heads_, "heads");
  require_divides(rank_.ranks, kv_heads_, "kv_heads");
  // Under the all-to-all form each share takes a C-th of the rank's heads.
  const Index C = ring_.share.ranks;
  if (ring_.heads && ((heads_ / rank_.ranks) % C != 0 || (kv_heads_ / rank_.ranks) % C != 0)) {
    throw std::invalid_argument(str(C) + " shares trading sequence for heads do not divide the " +
                                str(heads_ / rank_.ranks) + " heads and " +
                                str(kv_heads_ / rank_.ranks) + " key-value heads of a rank");
  }
  require_divides(rank_.ranks, d_ff, "d_ff");
}

std::vector<ShardRule> TensorBlockMath::shard_rules() const {
  const Index h = whole_.d_model(), d_kv = h / heads_ * kv_heads_, f = whole_.d_ff();
  const ShardRule qkv = columns({h, d_kv, d_kv});  // each rank: its heads' Q, K and V
  return {kWhole, kWhole, qkv,          qkv,          rows({h}), kWhole,
          kWhole, kWhole, columns({f}), columns({f}), rows({f}), kWhole};
}

std::vector<ParamShape> TensorBlockMath::param_shapes() const {
  return shard_shapes(whole_.param_shapes(), shard_rules(), rank_.ranks);
}

AttentionShape TensorBlockMath::local_attention(const Context& ctx) const {
  AttentionShape sh = whole_.attention(ctx);
  sh.heads /= rank_.ranks;
  sh.kv_heads /= rank_.ranks;
  return sh;
}

template <typename T>
Mat<T> TensorBlockMath::attend(const Mat<T>& qkv, const Context& ctx,
                               std::vector<Mat<T>>& st) const {
  const RingShare& share = ring_.share;
  const bool split = ring_.ring || ring_.heads;
  const int shares = split ? share.ranks : 1;
  if (ctx.shares != shares || (split && ctx.share != share.rank)) {
    throw std::invalid_argument("transformer block: a micro-batch of share " + str(ctx.share) +
                                " of " + str(ctx.shares) + " of each sequence reached rank " +
                                str(share.rank) + " of a context-parallel ring of " + str(shares));
  }
  if (ring_.heads) {
    return heads_attention_forward(qkv, local_attention(ctx), share.rank, share.ranks, *ring_.heads,
                                   st[kHeadsQkv], st[kProbs]);
  }
  if (!ring_.ring) return attention_forward(qkv, local_attention(ctx), st[kProbs]);
  return ring_attention_forward(qkv, local_attention(ctx), share, ring_.port(), st[kProbs]);
}

template <typename T>
Mat<T> TensorBlockMath::attend_backward(const Mat<T>& dattn, const Context& ctx,
                                        const std::vector<Mat<T>>& st) const {
  if (ring_.heads) {
    return heads_attention_backward(dattn, st[kHeadsQkv], st[kProbs], local_attention(ctx),
                                    ring_.share.rank, ring_.share.ranks, *ring_.heads);
  }
  if (!ring_.ring) return attention_backward(dattn, st[kQkv], st[kProbs], local_attention(ctx));
  return ring_attention_backward(dattn, st[kQkv], st[kAttn], st[kProbs], local_attention(ctx),
                                 ring_.share, ring_.port());
}

template <typename T>
Mat<T> TensorBlockMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                                std::vector<Mat<T>>& st) const {
  st.assign(kBlockStashSize, Mat<T>());
  forward_attention(w, x, ctx, st);
  st[kLn2Out] = layernorm_forward(st[kX2], *w[kLn2Gain], *w[kLn2Bias], st[kLn2Stats]);
  st[kFc1Out] = linear_forward(st[kLn2Out], *w[kFc1Weight], *w[kFc1Bias]);
  st[kGeluOut] = gelu_forward(st[kFc1Out]);
  Mat<T> mlp_out = st[kGeluOut] * *w[kFc2Weight];
  rank_.all_reduce(mlp_out);
  mlp_out.rowwise() += w[kFc2Bias]->row(0);
  return st[kX2] + mlp_out;
}

template <typename T>
Mat<T> TensorBlockMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                                 const Context& ctx, const std::vector<Mat<T>>& st) const {
  Mat<T> dx2 = dy;
  linear_params(dw, dy, st[kGeluOut], kFc2Weight, kFc2Bias);
  const Mat<T> dgelu = linear_backward_input(dy, *w[kFc2Weight]);
  const Mat<T> dfc1 = gelu_backward(dgelu, st[kFc1Out]);
  linear_params(dw, dfc1, st[kLn2Out], kFc1Weight, kFc1Bias);
  // Column-split: each rank's columns give a partial input gradient.
  Mat<T> dln2 = linear_backward_input(dfc1, *w[kFc1Weight]);
  rank_.all_reduce(dln2);
  layernorm_params(dw, dln2, st[kX2], st[kLn2Stats], kLn2Gain, kLn2Bias);
  dx2 += layernorm_backward_input(dln2, st[kX2], st[kLn2Stats], *w[kLn2Gain]);
  return backward_attention(w, dw, dx2, ctx, st);
}

template <typename T>
Mat<T> TensorBlockMath::forward_attention(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                                          std::vector<Mat<T>>& st) const {
  check_input(x, ctx, whole_.d_model(), "transformer block");
  st[kX] = x;
  st[kLn1Out] = layernorm_forward(x, *w[kLn1Gain], *w[kLn1Bias], st[kLn1Stats]);
  st[kQkv] = linear_forward(st[kLn1Out], *w[kQkvWeight], *w[kQkvBias]);
  st[kAttn] = attend(st[kQkv], ctx, st);
  if (ring_.heads) st[kQkv] = Mat<T>();  // the backward reads the traded copy alone
  // Row-split: each rank's heads give a partial product; the bias once, after the sum.
  Mat<T> attn_out = st[kAttn] * *w[kProjWeight];
  rank_.all_reduce(attn_out);
  attn_out.rowwise() += w[kProjBias]->row(0);
  st[kX2] = x + attn_out;
  return st[kX2];
}

template <typename T>
Mat<T> TensorBlockMath::backward_attention(const Values<T>& w, const Grads<T>& dw,
                                           const Mat<T>& dx2, const Context& ctx,
                                           const std::vector<Mat<T>>& st) const {
  linear_params(dw, dx2, st[kAttn], kProjWeight, kProjBias);
  const Mat<T> dattn = linear_backward_input(dx2, *w[kProjWeight]);
  const Mat<T> dqkv = attend_backward(dattn, ctx, st);
  linear_params(dw, dqkv, st[kLn1Out], kQkvWeight, kQkvBias);
  Mat<T> dln1 = linear_backward_input(dqkv, *w[kQkvWeight]);
  rank_.all_reduce(dln1);
  layernorm_params(dw, dln1, st[kX], st[kLn1Stats], kLn1Gain, kLn1Bias);
  return dx2 + layernorm_backward_input(dln1, st[kX], st[kLn1Stats], *w[kLn1Gain]);
}

// ---------------------------------------------------------------- head

VocabHeadMath::VocabHeadMath(Index d_model, Index vocab, TensorRank rank)
    : whole_(d_model, vocab), rank_(std::move(rank)), rows_(ceil_div(vocab, rank_.ranks)) {}

Index VocabHeadMath::real() const {
  return std::max<Index>(0, std::min(rows_, whole_.vocab() - first()));
}

std::vector<ShardRule> VocabHeadMath::shard_rules() const {
  return {kWhole, kWhole, columns({whole_.vocab()})};
}

std::vector<ParamShape> VocabHeadMath::param_shapes() const {
  return shard_shapes(whole_.param_shapes(), shard_rules(), rank_.ranks);
}

// Stash: input, LayerNorm stats, LayerNorm output, the rank's softmax columns.
template <typename T>
Mat<T> VocabHeadMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                              std::vector<Mat<T>>& st) const {
  check_input(x, ctx, whole_.d_model(), "head");
  check_targets(ctx.targets, x.rows(), whole_.vocab());
  const Index n = x.rows(), k = real(), first = this->first();
  st.assign(4, Mat<T>());
  st[0] = x;
  st[2] = layernorm_forward(x, *w[0], *w[1], st[1]);
  const Mat<T> logits = st[2] * w[2]->leftCols(k);
  // The softmax over the whole vocabulary from the ranks' parts: the maximum,
  // the sum of exponentials and the target's logit, each all-reduced.
  Mat<T> max = Mat<T>::Constant(n, 1, -std::numeric_limits<T>::infinity());
  if (k > 0) max = logits.rowwise().maxCoeff();
  rank_.all_reduce(max, TensorGroup::Reduce::kMax);
  Mat<T>& probs = st[3];
  probs = (logits - max.replicate(1, k)).array().exp().matrix();
  Mat<T> sum = probs.rowwise().sum();
  rank_.all_reduce(sum);
  Mat<T> target = Mat<T>::Zero(n, 1);
  for (Index r = 0; r < n; ++r) {
    const Index local = (*ctx.targets)[static_cast<std::size_t>(r)] - first;
    if (local >= 0 && local < k) target(r, 0) = logits(r, local);
  }
  rank_.all_reduce(target);
  double loss = 0.0;
  for (Index r = 0; r < n; ++r) {
    probs.row(r) /= sum(r, 0);
    loss += static_cast<double>(std::log(sum(r, 0)) + max(r, 0) - target(r, 0));
  }
  return Mat<T>::Constant(1, 1, static_cast<T>(loss * ctx.loss_scale));
}

template <typename T>
Mat<T> VocabHeadMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                               const Context& ctx, const std::vector<Mat<T>>& st) const {
  const auto scale = static_cast<T>(ctx.loss_scale * static_cast<double>(dy(0, 0)));
  const Index k = real(), first = this->first();
  Mat<T> dlogits = st[3];
  for (Index r = 0; r < dlogits.rows(); ++r) {
    const Index local = (*ctx.targets)[static_cast<std::size_t>(r)] - first;
    if (local >= 0 && local < k) dlogits(r, local) -= T(1);
  }
  dlogits *= scale;
  // The padding columns get no gradient: they are never scored.
  dw.add(dlogits, [&x = st[2], dproj = dw[2], k](const Mat<T>& d) {
    dproj->leftCols(k).noalias() += x.transpose() * d;
  });
  Mat<T> dln = Mat<T>::Zero(dlogits.rows(), whole_.d_model());
  if (k > 0) dln.noalias() = dlogits * w[2]->leftCols(k).transpose();
  rank_.all_reduce(dln);
  layernorm_params(dw, dln, st[0], st[1], 0, 1);
  return layernorm_backward_input(dln, st[0], st[1], *w[0]);
}

#define PIPESCOPE_INSTANTIATE_SHARD(Math)                                                   \
  template Mat<float> Math::forward<float>(const Values<float>&, const Mat<float>&,         \
                                           const Context&, std::vector<Mat<float>>&) const; \
  template Mat<float> Math::backward<float>(const Values<float>&, const Grads<float>&,      \
                                            const Mat<float>&, const Context&,              \
                                            const std::vector<Mat<float>>&) const;

PIPESCOPE_INSTANTIATE_SHARD(VocabEmbeddingMath)
PIPESCOPE_INSTANTIATE_SHARD(TensorBlockMath)
PIPESCOPE_INSTANTIATE_SHARD(VocabHeadMath)

#define PIPESCOPE_INSTANTIATE_ATTENTION_HALF(T)                                             \
  template Mat<T> TensorBlockMath::forward_attention<T>(                                    \
      const Values<T>&, const Mat<T>&, const Context&, std::vector<Mat<T>>&) const;         \
  template Mat<T> TensorBlockMath::backward_attention<T>(const Values<T>&, const Grads<T>&, \
                                                         const Mat<T>&, const Context&,     \
                                                         const std::vector<Mat<T>>&) const;

PIPESCOPE_INSTANTIATE_ATTENTION_HALF(float)
PIPESCOPE_INSTANTIATE_ATTENTION_HALF(double)

}  // namespace pipescope::exec
