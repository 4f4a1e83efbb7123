#pragma once
// Causal self-attention under context parallelism by all-to-alls of heads
// (DeepSpeed-Ulysses, Jacobs et al. 2023; megatron-core's --cp-comm-type a2a
// as Transformer Engine runs it): each of C ranks holds a share of every
// sequence, chunks c and 2C - 1 - c of 2C (Context::position), for all of its
// heads. An all-to-all among the C trades that for the whole sequence of
// heads / C of them (rank d takes the d-th C-th of the query heads and of the
// key-value heads), the attention runs over whole sequences as on one device,
// and a second all-to-all brings each rank its rows of every head back. The
// backward trades the output's gradient the same way, and the queries', keys'
// and values' gradients back. As in Transformer Engine 2.8 and later (and
// the model) the queries, the keys and the values go as three all-to-alls,
// and their gradients too: four each way.

#include <utility>
#include <vector>

#include "exec/compute/kernels.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_group.h"

namespace pipescope::exec {

namespace heads_detail {

// The columns of head group d of C in a (rows, (h + 2 d_kv)) [Q | K | V]
// matrix of shape `sh`, or of an (rows, h) output when `outputs`.
struct HeadColumns {
  Index q_at, q_width, kv_width, k_at, v_at;
};
inline HeadColumns head_columns(const AttentionShape& sh, int d, int C) {
  const Index dh = sh.head_dim, hq = sh.heads / C * dh, hkv = sh.kv_heads / C * dh;
  return {d * hq, hq, hkv, sh.width() + d * hkv, sh.width() + sh.kv_width() + d * hkv};
}

// Which of Q, K and V (columns of a [Q | K | V] matrix).
enum class Part { kQ, kK, kV };

// The columns of `part` that head group d of C holds: at, width.
inline std::pair<Index, Index> part_columns(const AttentionShape& sh, Part part, int d, int C) {
  const HeadColumns c = head_columns(sh, d, C);
  if (part == Part::kQ) return {c.q_at, c.q_width};
  return {part == Part::kK ? c.k_at : c.v_at, c.kv_width};
}

// Trades `part` of this share's rows of `m` for the whole sequences of its
// head group's: one all-to-all among the C. Returns (b x C s, width).
template <typename T>
Mat<T> trade_to_heads(const Mat<T>& m, const AttentionShape& sh, Part part, int me, int C,
                      TensorGroup& group);

// The inverse: the whole sequences of this rank's head group (b x C s, width)
// traded for this share's rows of every group's, laid into `out`'s columns of
// `part`.
template <typename T>
void trade_to_rows(const Mat<T>& whole, const AttentionShape& sh, Part part, int me, int C,
                   TensorGroup& group, Mat<T>& out);

// Shares' rows (parts[c]: share c's b x s rows) laid out as whole sequences
// (b x C s rows, in position order), and back.
template <typename T>
Mat<T> to_sequences(const std::vector<Mat<T>>& parts, Index batch, Index s) {
  const int C = static_cast<int>(parts.size());
  Mat<T> out(batch * s * C, parts.front().cols());
  for (int c = 0; c < C; ++c) {
    for (Index i = 0; i < batch; ++i) {
      for (Index t = 0; t < s; ++t) {
        out.row(i * s * C + share_position(t, s, c, C)) =
            parts[static_cast<std::size_t>(c)].row(i * s + t);
      }
    }
  }
  return out;
}
template <typename T>
std::vector<Mat<T>> to_shares(const Mat<T>& whole, Index batch, Index s, int C) {
  std::vector<Mat<T>> out(static_cast<std::size_t>(C), Mat<T>(batch * s, whole.cols()));
  for (int c = 0; c < C; ++c) {
    for (Index i = 0; i < batch; ++i) {
      for (Index t = 0; t < s; ++t) {
        out[static_cast<std::size_t>(c)].row(i * s + t) =
            whole.row(i * s * C + share_position(t, s, c, C));
      }
    }
  }
  return out;
}

template <typename T>
Mat<T> trade_to_heads(const Mat<T>& m, const AttentionShape& sh, Part part, int me, int C,
                      TensorGroup& group) {
  std::vector<Mat<T>> parts;
  for (int d = 0; d < C; ++d) {
    const auto [at, width] = part_columns(sh, part, d, C);
    parts.push_back(m.middleCols(at, width));
  }
  group.all_to_all(me, parts);
  return to_sequences(parts, sh.batch, sh.seq);
}

template <typename T>
void trade_to_rows(const Mat<T>& whole, const AttentionShape& sh, Part part, int me, int C,
                   TensorGroup& group, Mat<T>& out) {
  std::vector<Mat<T>> back = to_shares(whole, sh.batch, sh.seq, C);
  group.all_to_all(me, back);
  for (int d = 0; d < C; ++d) {
    const auto [at, width] = part_columns(sh, part, d, C);
    out.middleCols(at, width) = back[static_cast<std::size_t>(d)];
  }
}

// The shape of the attention a rank runs after the trade: whole sequences of
// its heads / C heads.
inline AttentionShape traded(const AttentionShape& sh, int C) {
  AttentionShape w = sh;
  w.seq = sh.seq * C;
  w.heads = sh.heads / C;
  w.kv_heads = sh.kv_heads / C;
  return w;
}

}  // namespace heads_detail

// qkv is this rank's (b*s, h + 2 d_kv), [Q | K | V] per token, s its share's
// rows of each sequence; `sh` its shape (this share's seq, the rank's heads).
// `group` holds the C shares (rank `share.rank`; a group of one plays the
// others with its own rows: the work, not the exchange). Returns the
// attention's output (b*s, h); `gathered` gets the whole sequences of its
// head group's Q, K and V and `probs` their attention's probabilities, for
// the backward.
template <typename T>
Mat<T> heads_attention_forward(const Mat<T>& qkv, const AttentionShape& sh, int rank, int C,
                               TensorGroup& group, Mat<T>& gathered, Mat<T>& probs) {
  using namespace heads_detail;
  const int me = group.ranks() == 1 ? 0 : rank;
  const Mat<T> q = trade_to_heads(qkv, sh, Part::kQ, me, C, group);
  const Mat<T> k = trade_to_heads(qkv, sh, Part::kK, me, C, group);
  const Mat<T> v = trade_to_heads(qkv, sh, Part::kV, me, C, group);
  gathered.resize(q.rows(), q.cols() + k.cols() + v.cols());
  gathered << q, k, v;
  const Mat<T> out = attention_forward(gathered, traded(sh, C), probs);
  Mat<T> mine(qkv.rows(), sh.width());
  trade_to_rows(out, sh, Part::kQ, me, C, group, mine);  // the output's columns are the Q's
  return mine;
}

// dout is (b*s, h); gathered and probs the forward's. Returns dqkv (b*s, h +
// 2 d_kv) for this rank's rows.
template <typename T>
Mat<T> heads_attention_backward(const Mat<T>& dout, const Mat<T>& gathered, const Mat<T>& probs,
                                const AttentionShape& sh, int rank, int C, TensorGroup& group) {
  using namespace heads_detail;
  const int me = group.ranks() == 1 ? 0 : rank;
  const AttentionShape w = traded(sh, C);
  const Mat<T> dgathered =
      attention_backward(trade_to_heads(dout, sh, Part::kQ, me, C, group), gathered, probs, w);
  Mat<T> dqkv(dout.rows(), sh.width() + 2 * sh.kv_width());
  const Index hq = w.width(), hkv = w.kv_width();
  trade_to_rows(Mat<T>(dgathered.leftCols(hq)), sh, Part::kQ, me, C, group, dqkv);
  trade_to_rows(Mat<T>(dgathered.middleCols(hq, hkv)), sh, Part::kK, me, C, group, dqkv);
  trade_to_rows(Mat<T>(dgathered.rightCols(hkv)), sh, Part::kV, me, C, group, dqkv);
  return dqkv;
}

}  // namespace pipescope::exec
