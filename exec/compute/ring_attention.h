#pragma once
// Causal self-attention under context parallelism (Liu et al. 2023, "Ring
// Attention"; Megatron-LM's context parallelism as Transformer Engine runs it):
// each of C ranks holds a share of every sequence, chunks c and 2C - 1 - c of
// 2C (Context::position), and its queries attend to every key of the
// sequence at or before them. The keys and values travel round the ring: at
// step k rank c holds rank c - k's, and merges the scores of its queries
// against them into a running softmax (the row's maximum and sum so far, as
// FlashAttention does within a device), so no rank ever holds more than one
// share of keys. The backward travels the ring again with the keys' and
// values' gradients beside them, which are home after a last step.
//
// The kernels take the rank's end of the ring, `port` (RingExchange::Port,
// exec/compute/ring_exchange.h): port.post(channel, m) passes m on to the next
// rank without waiting for it, port.take(channel, m) sets m to the previous
// rank's. A rank posts its block before computing on it, so the next rank's
// copy is there when it wants it (the overlap of the frameworks' rings); the
// backward passes the keys' and values' gradients on a second channel once
// they are summed. A step computes only the rows of its block that can see
// each other (ring_detail::visible: half a block after the first step, as
// Transformer Engine's kernels do), masked by position within them.

#include <cmath>
#include <limits>

#include "exec/compute/kernels.h"
#include "exec/compute/layer.h"

namespace pipescope::exec {

// Where the ring is: this rank's share of each sequence and the shares' count.
struct RingShare {
  int rank = 0;
  int ranks = 1;
  // The position in the whole sequence of row t of share `of`'s `seq` rows
  // (share_position).
  Index position(int of, Index t, Index seq) const { return share_position(t, seq, of, ranks); }
};

namespace ring_detail {

// The rows of a step's block that can see each other (Transformer Engine's
// causal load balance): at step 0 the share's queries against its own keys,
// causally masked; then all of its queries against the first half of an
// earlier share's keys (that share's chunk `from`: its chunk 2C - 1 - from
// comes after every query here), or the second half of its queries (its chunk
// 2C - 1 - rank) against all of a later share's keys (chunk `rank` comes
// before both of those chunks). Every step after the first is half a block's
// work on every rank, so the shares keep pace.
struct Visible {
  Index q_at = 0, q_rows = 0;  // query rows of the share
  Index k_at = 0, k_rows = 0;  // key rows of the block held
};
inline Visible visible(Index s, int rank, int from) {
  const Index half = s / 2;
  if (from == rank) return {0, s, 0, s};
  if (from < rank) return {0, s, 0, half};
  return {half, s - half, 0, s};
}

// The scores of query head j of sequence i (its rows `vis.q_*` of qkv)
// against the block's key head g (its rows `vis.k_*`), masked: -inf where
// the key (of share `from`) comes after the query (of share `share.rank`).
template <typename T>
Mat<T> masked_scores(const Mat<T>& qkv, const Mat<T>& kv, const AttentionShape& sh,
                     const RingShare& share, int from, const Visible& vis, Index i, Index j,
                     Index g) {
  const Index s = sh.seq, dh = sh.head_dim;
  Mat<T> scores(vis.q_rows, vis.k_rows);
  scores.noalias() = qkv.block(i * s + vis.q_at, j * dh, vis.q_rows, dh) *
                     kv.block(i * s + vis.k_at, g * dh, vis.k_rows, dh).transpose();
  scores *= T(1) / std::sqrt(static_cast<T>(dh));
  if (from != share.rank) return scores;  // the visible rows see each other whole
  for (Index t = 0; t < vis.q_rows; ++t) {
    const Index query = share.position(share.rank, vis.q_at + t, s);
    for (Index u = 0; u < vis.k_rows; ++u) {
      if (share.position(from, vis.k_at + u, s) > query) {
        scores(t, u) = -std::numeric_limits<T>::infinity();
      }
    }
  }
  return scores;
}

}  // namespace ring_detail

// qkv is this rank's (b*s, h + 2 d_kv), [Q | K | V] per token, s its share's
// rows of each sequence (even). Returns the attention's output (b*s, h); lse
// (b*a*s, 1) gets each query row's log-sum-exp of its scores, for the
// backward.
inline constexpr int kKeysChannel = 0;
inline constexpr int kKeyGradientsChannel = 1;

template <typename T, class Port>
Mat<T> ring_attention_forward(const Mat<T>& qkv, const AttentionShape& sh, const RingShare& share,
                              const Port& port, Mat<T>& lse) {
  const Index s = sh.seq, dh = sh.head_dim, h = sh.width(), dkv = sh.kv_width();
  const Index group = sh.heads / sh.kv_heads;
  const T none = -std::numeric_limits<T>::infinity();
  Mat<T> out = Mat<T>::Zero(sh.batch * s, h);
  Mat<T> row_max = Mat<T>::Constant(sh.batch * sh.heads * s, 1, none);
  Mat<T> row_sum = Mat<T>::Zero(sh.batch * sh.heads * s, 1);
  Mat<T> kv = qkv.rightCols(2 * dkv);  // [K | V] of the share held
  for (int k = 0; k < share.ranks; ++k) {
    const int from = (share.rank - k + share.ranks) % share.ranks;
    const bool more = k + 1 < share.ranks;
    if (more) port.post(kKeysChannel, kv);
    const ring_detail::Visible vis = ring_detail::visible(s, share.rank, from);
    for (Index i = 0; i < sh.batch; ++i) {
      for (Index j = 0; j < sh.heads; ++j) {
        const Index g = j / group, row = (i * sh.heads + j) * s + vis.q_at;
        const Mat<T> scores = ring_detail::masked_scores(qkv, kv, sh, share, from, vis, i, j, g);
        const auto v = kv.block(i * s + vis.k_at, dkv + g * dh, vis.k_rows, dh);
        for (Index t = 0; t < vis.q_rows; ++t) {
          const T block_max = scores.row(t).maxCoeff();
          if (block_max == none) continue;  // no key of this block is visible
          const T before = row_max(row + t, 0);
          const T now = std::max(before, block_max);
          const T rescale = before == none ? T(0) : std::exp(before - now);
          const Mat<T> p = (scores.row(t).array() - now).exp().matrix();
          row_sum(row + t, 0) = row_sum(row + t, 0) * rescale + p.sum();
          const Index r = i * s + vis.q_at + t;
          out.block(r, j * dh, 1, dh) = out.block(r, j * dh, 1, dh) * rescale + p * v;
          row_max(row + t, 0) = now;
        }
      }
    }
    if (more) port.take(kKeysChannel, kv);
  }
  lse.resize(row_max.rows(), 1);
  for (Index i = 0; i < sh.batch; ++i) {
    for (Index j = 0; j < sh.heads; ++j) {
      for (Index t = 0; t < s; ++t) {
        const Index r = (i * sh.heads + j) * s + t;
        out.block(i * s + t, j * dh, 1, dh) /= row_sum(r, 0);
        lse(r, 0) = row_max(r, 0) + std::log(row_sum(r, 0));
      }
    }
  }
  return out;
}

// dout is (b*s, h); qkv, out and lse the forward's. Returns dqkv (b*s, h +
// 2 d_kv): the queries' gradients computed here, the keys' and values'
// summed over every rank's queries. Those travel one step behind their block:
// at step k a rank computes its part of the gradients of the block it holds,
// then takes that block's sum so far from the previous rank (which posted it
// at its step k - 1, while this rank computed), adds its part and passes it
// on; after the last step each block's sum comes home.
template <typename T, class Port>
Mat<T> ring_attention_backward(const Mat<T>& dout, const Mat<T>& qkv, const Mat<T>& out,
                               const Mat<T>& lse, const AttentionShape& sh, const RingShare& share,
                               const Port& port) {
  const Index s = sh.seq, dh = sh.head_dim, h = sh.width(), dkv = sh.kv_width();
  const Index group = sh.heads / sh.kv_heads;
  const T scale = T(1) / std::sqrt(static_cast<T>(dh));
  Mat<T> dq = Mat<T>::Zero(sh.batch * s, h);
  Mat<T> kv = qkv.rightCols(2 * dkv);
  Mat<T> part(sh.batch * s, 2 * dkv);  // this rank's part of the held block's gradients
  Mat<T> sum;                          // a block's gradients summed so far
  for (int k = 0; k < share.ranks; ++k) {
    const int from = (share.rank - k + share.ranks) % share.ranks;
    const bool more = k + 1 < share.ranks;
    if (more) port.post(kKeysChannel, kv);
    part.setZero();
    const ring_detail::Visible vis = ring_detail::visible(s, share.rank, from);
    const Index qa = vis.q_at, qn = vis.q_rows, ka = vis.k_at, kn = vis.k_rows;
    for (Index i = 0; i < sh.batch; ++i) {
      for (Index j = 0; j < sh.heads; ++j) {
        const Index g = j / group, row = (i * sh.heads + j) * s + qa;
        const Mat<T> scores = ring_detail::masked_scores(qkv, kv, sh, share, from, vis, i, j, g);
        // P = exp(S - lse): the forward's probabilities of this block's keys.
        const Mat<T> p =
            (scores.array() - lse.block(row, 0, qn, 1).replicate(1, kn).array()).exp().matrix();
        const auto q = qkv.block(i * s + qa, j * dh, qn, dh);
        const auto key = kv.block(i * s + ka, g * dh, kn, dh);
        const auto v = kv.block(i * s + ka, dkv + g * dh, kn, dh);
        const auto dout_head = dout.block(i * s + qa, j * dh, qn, dh);
        // D = rowsum(dO * O), the same for every block.
        const Mat<T> d =
            dout_head.cwiseProduct(out.block(i * s + qa, j * dh, qn, dh)).rowwise().sum();
        part.block(i * s + ka, dkv + g * dh, kn, dh).noalias() += p.transpose() * dout_head;
        const Mat<T> dp = dout_head * v.transpose();
        const Mat<T> ds = p.cwiseProduct(dp - d.replicate(1, kn)) * scale;
        dq.block(i * s + qa, j * dh, qn, dh).noalias() += ds * key;
        part.block(i * s + ka, g * dh, kn, dh).noalias() += ds.transpose() * q;
      }
    }
    if (k > 0) {
      port.take(kKeyGradientsChannel, sum);
      part += sum;
    }
    if (share.ranks > 1) port.post(kKeyGradientsChannel, part);
    if (more) port.take(kKeysChannel, kv);
  }
  if (share.ranks > 1) port.take(kKeyGradientsChannel, part);  // this share's own, home
  Mat<T> dqkv(qkv.rows(), qkv.cols());
  dqkv.leftCols(h) = dq;
  dqkv.rightCols(2 * dkv) = part;
  return dqkv;
}

}  // namespace pipescope::exec
