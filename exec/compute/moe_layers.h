#pragma once
// A transformer block whose MLP is a mixture of experts (costmodels/
// model_families.h, MoeParams; docs/models.md, "Mixture of experts"), as
// megatron-core computes it with its all-to-all dispatcher:
//
//   x2 = x + Wo attn(LN1(x)) + bo              (the dense block's attention half)
//   u = LN2(x2); scores = u Wr                   (the router, h x experts, no bias)
//   each token's top_k experts by score, weighted by the softmax of their
//   scores alone (megatron-core's default: top-k, then softmax);
//   out = x2 + sum_j g_j E_j(u) [+ S(u)]        (E_j, S: x W1 + b1, GeLU, W2 + b2)
//
// with S the shared expert every token passes through (shared_d_ff > 0).
//
// Under expert parallelism the block is one of E ranks, data-parallel replicas
// with micro-batches of their own, each holding experts / E of the routed
// experts (rank r: r L .. r L + L - 1, L = experts / E) and sharing the block's
// TensorGroup (exec/compute/tensor_group.h): the forward sends each token's
// copy to the rank of each of its experts and brings the outputs back (two
// all-to-alls), the backward the same with the gradients (two). The other
// parameters are alike on every rank: their gradients are summed over the E
// ranks before each optimizer step (the runtime's, exec/runtime.h); an
// expert's are its rank's alone (ParamShape::expert).
//
// A group of one with E > 1 (the profiler's) computes every part it would
// send as if it came back from another rank, each row with its own expert of
// the same local index: a balanced rank's work, without its exchanges.
//
// Under context parallelism as well (E x C ranks, rank e C + c) the block is
// share c of each sequence of expert rank e's samples: its attention half
// passes the keys and values round the ring of expert rank e's C shares (or
// trades heads among them) as a dense block's (exec/compute/tensor_layers.h),
// and its tokens go to the experts of the E ranks of share c. Routing is per
// token, so a share's tokens need nothing from the other shares'. An
// expert's gradients are then summed over the C shares of its rank, the
// others over all E C ranks (the runtime's).

#include <optional>
#include <vector>

#include "costmodels/units.h"
#include "exec/compute/layers.h"
#include "exec/compute/tensor_layers.h"

namespace pipescope::exec {

// What a thread's mixtures gave their experts, call by call in order (a
// forward's mixtures first to last, a backward's last to first): the rows
// this rank's experts received and the wall time they took over them
// (ExpertScope installs one on the thread).
struct ExpertTally {
  struct Call {
    bool backward = false;
    Index rows = 0;
    SimTime wall = 0;  // ns
  };
  std::vector<Call> calls;
};

// Installs `tally` as the calling thread's for its lifetime (RAII).
class ExpertScope {
 public:
  explicit ExpertScope(ExpertTally& tally);
  ~ExpertScope();
  ExpertScope(const ExpertScope&) = delete;
  ExpertScope& operator=(const ExpertScope&) = delete;

 private:
  ExpertTally* previous_;
};

struct MoeShape {
  Index experts = 1;
  Index top_k = 1;
  Index d_ff = 1;         // each routed expert's width
  Index shared_d_ff = 0;  // the shared expert's width, 0 without one
};

class MoeBlockMath {
 public:
  // `experts`: the block's place among the E expert-parallel ranks (a group
  // of E, or of one). Throws std::invalid_argument as TransformerBlockMath
  // does, and unless 1 <= top_k <= experts, d_ff > 0, shared_d_ff >= 0 and E
  // divides experts. `ring`: the block's place among the C shares of
  // context parallelism (none: whole sequences), checked as
  // TensorBlockMath checks it.
  MoeBlockMath(Index d_model, Index heads, Index kv_heads, MoeShape moe, TensorRank experts,
               ContextRing ring = {});
  // The attention half's and the second LayerNorm's (the dense block's
  // first eight), "router.weight", the shared expert's "shared.fc1.weight" ..
  // "shared.fc2.bias" when there is one, then for each of the rank's experts
  // g "expert<g>.fc1.weight", ".fc1.bias", ".fc2.weight", ".fc2.bias".
  std::vector<ParamShape> param_shapes() const;
  const MoeShape& moe() const { return moe_; }
  Index d_model() const { return whole_.d_model(); }
  Index heads() const { return whole_.heads(); }
  Index kv_heads() const { return whole_.kv_heads(); }
  Index local_experts() const { return moe_.experts / rank_.ranks; }
  int expert_rank() const { return rank_.rank; }
  int expert_ranks() const { return rank_.ranks; }
  // Empties the ring's mailboxes (Layer::reset_exchanges).
  void reset_exchanges() const {
    if (context_) context_->reset_exchanges();
  }
  // x and out are (b*s, h).
  template <typename T>
  Mat<T> forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                 std::vector<Mat<T>>& stash) const;
  template <typename T>
  Mat<T> backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy, const Context& ctx,
                  const std::vector<Mat<T>>& stash) const;

 private:
  template <typename T>
  void route(const Values<T>& w, std::vector<Mat<T>>& st) const;
  // The rows that reach this rank's experts (u's copies forward, their
  // outputs' gradients backward) through them: each local expert's rows
  // gathered, computed, put back in the order they came.
  template <typename T>
  Mat<T> experts_forward(const Values<T>& w, const Mat<T>& received, std::vector<Mat<T>>& st) const;
  template <typename T>
  Mat<T> experts_backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& d,
                          const std::vector<Mat<T>>& st) const;
  // Sends each row of `rows` (n top_k of them, token by token, choice by
  // choice) to the rank of its expert (`route`'s) and returns what comes back
  // in the same order, once each rank has passed the rows it received, in
  // the senders' order, through `compute`.
  // `backward` says which pass the call is, for the thread's ExpertTally.
  template <typename T, class Compute>
  Mat<T> exchange(const Mat<T>& rows, const Mat<T>& route, bool backward, Compute&& compute) const;
  std::size_t expert_param(Index local, int which) const;  // which: 0..3, fc1 w/b, fc2 w/b

  TransformerBlockMath whole_;  // the attention half and the checks
  // The attention half of a share of each sequence (context parallelism).
  std::optional<TensorBlockMath> context_;
  MoeShape moe_;
  TensorRank rank_;
};

using MoeBlock = MathLayer<MoeBlockMath>;
extern template class MathLayer<MoeBlockMath>;

}  // namespace pipescope::exec
