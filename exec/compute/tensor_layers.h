#pragma once
// The transformer's layers split over the T ranks of a tensor-parallel group, as
// Megatron-LM splits them (Shoeybi et al. 2019) and the simulator models them
// (docs/models.md, tensor parallelism): one rank's shard of each layer, whose T
// shards share a TensorGroup (exec/compute/tensor_group.h) and sum their partial
// results with its all-reduce.
//
// - Block: the QKV projection split by columns (the rank's a/T query heads and
//   kv/T key/value heads), attention on those heads, the output projection
//   split by rows; the MLP's first linear by columns, its second by rows. The
//   forward all-reduces after each row-split product (2 all-reduces), the
//   backward the input gradient of each column-split product (2). Layer norms,
//   and the biases added after a row-split product, are whole on every rank.
// - Embedding: the token table split by vocabulary rows (ceil(V/T) a rank, the
//   last padded with zero rows no id reaches); a rank looks up the ids it holds,
//   zero for the others, and the group all-reduces the sum (1 all-reduce); the
//   position table is whole on every rank, added after it.
// - Head: the final layer norm whole; the projection split by vocabulary
//   columns (padded likewise, the padding never scored); the cross-entropy
//   all-reduces each token's maximum logit, its sum of exponentials and its
//   target's logit (3 all-reduces forward), the backward the input gradient (1).
//
// A whole parameter gets the same gradient on every rank: it is computed from
// the same all-reduced values, bit for bit (the group reduces in rank order on
// every rank), so the ranks' optimizers keep its copies identical without
// further communication. The shards run in float.

#include <memory>
#include <vector>

#include "exec/compute/layers.h"
#include "exec/compute/ring_attention.h"
#include "exec/compute/ring_exchange.h"
#include "exec/compute/tensor_group.h"

namespace pipescope::exec {

// A shard's rank in its group. The group may be a group of one (the profiler's,
// timing one rank's compute): the all-reduces then return the rank's partial.
struct TensorRank {
  std::shared_ptr<TensorGroup> group;
  int rank = 0;
  int ranks = 1;  // T: how the layer is split, whatever the group's size

  // Throws std::invalid_argument unless 0 <= rank < ranks and the group has
  // `ranks` ranks or one.
  TensorRank(std::shared_ptr<TensorGroup> group, int rank, int ranks);
  template <typename T>
  void all_reduce(Mat<T>& m, TensorGroup::Reduce op = TensorGroup::Reduce::kSum) const {
    group->all_reduce(group->ranks() == 1 ? 0 : rank, m, op);
  }
  template <typename T>
  void all_to_all(std::vector<Mat<T>>& parts) const {
    group->all_to_all(group->ranks() == 1 ? 0 : rank, parts);
  }
};

// How a whole parameter maps onto the ranks' shards: whole on each, or split
// along its columns or rows. The split axis is a run of segments (QKV's Q, K
// and V), each cut into T equal parts, padded up to a multiple of T with zeros
// (the vocabulary); rank r holds the r-th part of every segment, side by side.
struct ShardRule {
  enum class Axis { kWhole, kColumns, kRows };
  Axis axis = Axis::kWhole;
  std::vector<Index> segments;
};

// A block's place in its context-parallel ring (exec/compute/ring_attention.h):
// the C ranks that hold shares of the same sequences at the same tensor rank
// share one ring, round which the keys and values pass; or, under the
// all-to-all form, one group that trades sequence for heads
// (exec/compute/heads_attention.h). Without either the block attends within
// its rows alone.
struct ContextRing {
  std::shared_ptr<RingExchange> ring;
  RingShare share;
  std::shared_ptr<TensorGroup> heads;  // the all-to-all form's, instead of the ring
  // The share's end of the ring; a ring of one (the profiler's) is rank 0's,
  // whatever share it plays.
  RingExchange::Port port() const { return ring->port(ring->ranks() == 1 ? 0 : share.rank); }
};

class VocabEmbeddingMath {
 public:
  VocabEmbeddingMath(Index vocab, Index seq_len, Index d_model, bool learned_positions,
                     TensorRank rank);
  std::vector<ParamShape> param_shapes() const;
  std::vector<ShardRule> shard_rules() const;
  // x is (b*s, 1) token ids as floats, out is (b*s, h), whole on every rank.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  EmbeddingMath whole_;  // checks, sizes and the sinusoid table
  TensorRank rank_;
  Index rows_;  // token rows a rank holds, ceil(V / T)
};

class TensorBlockMath {
 public:
  // Throws std::invalid_argument as TransformerBlockMath does, and unless T
  // divides heads, kv_heads and d_ff. Under context parallelism its attention
  // runs round `ring` (and a micro-batch's Context must be the ring's share).
  TensorBlockMath(Index d_model, Index heads, Index kv_heads, Index d_ff, TensorRank rank,
                  ContextRing ring = {});
  std::vector<ParamShape> param_shapes() const;
  std::vector<ShardRule> shard_rules() const;
  // x and out are (b*s, h), whole on every rank.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;
  // The attention half, which a mixture-of-experts block under context
  // parallelism shares (exec/compute/moe_layers.h), as
  // TransformerBlockMath's: x2 kept with its inputs in stash[kX .. kX2]
  // (kHeadsQkv too when trading heads; the stash sized by the caller), and
  // its backward from the whole gradient reaching x2, returning dx.
  template <typename T>
  Mat<T> forward_attention(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                           std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward_attention(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dx2,
                            const Context& ctx, const std::vector<Mat<T>>& stash) const;
  // Empties the ring's mailboxes (Layer::reset_exchanges).
  void reset_exchanges() const {
    if (ring_.ring) ring_.ring->reset();
  }

 private:
  AttentionShape local_attention(const Context& ctx) const;  // the rank's heads
  // The attention's output for the rank's heads (stash[kProbs] its backward's
  // state), and its backward: within the rows, or round the ring.
  template <typename T>
  Mat<T> attend(const Mat<T>& qkv, const Context& ctx, std::vector<Mat<T>>& st) const;
  template <typename T>
  Mat<T> attend_backward(const Mat<T>& dattn, const Context& ctx,
                         const std::vector<Mat<T>>& st) const;

  TransformerBlockMath whole_;
  TensorRank rank_;
  ContextRing ring_;
  Index heads_, kv_heads_;  // whole
};

class VocabHeadMath {
 public:
  VocabHeadMath(Index d_model, Index vocab, TensorRank rank);
  std::vector<ParamShape> param_shapes() const;
  std::vector<ShardRule> shard_rules() const;
  // x is (b*s, h), out is (1, 1): the loss, the same on every rank.
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  Index first() const { return rows_ * rank_.rank; }  // the rank's first vocabulary column
  Index real() const;  // of its rows_ columns, those inside the vocabulary

  LmHeadMath whole_;
  TensorRank rank_;
  Index rows_;  // vocabulary columns a rank holds, ceil(V / T)
};

using VocabEmbedding = MathLayer<VocabEmbeddingMath>;
using TensorBlock = MathLayer<TensorBlockMath>;
using VocabHead = MathLayer<VocabHeadMath>;

extern template class MathLayer<VocabEmbeddingMath>;
extern template class MathLayer<TensorBlockMath>;
extern template class MathLayer<VocabHeadMath>;

}  // namespace pipescope::exec
