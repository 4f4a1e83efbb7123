#include "exec/compute/moe_layers.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/layer_math.h"

namespace pipescope::exec {

namespace {

thread_local ExpertTally* current_expert_tally = nullptr;

// Stash order after the dense block's (layer_math.h: kX .. kLn2Out, and
// kHeadsQkv when the attention half trades heads).
enum MoeStash : std::size_t {
  kRoute = kBlockStashSize,  // (n, 2 top_k): each token's experts, then their weights
  kExpertOut,                // (n top_k, h): each copy's expert output, token by token
  kReceivedExpert,           // (R, 1): the local expert of each row this rank received
  kSharedFc1,
  kSharedGelu,
  kExpertStash,  // then per local expert: its rows' input, fc1 output, GeLU output
};

constexpr std::size_t kRouter = kLn2Bias + 1;
constexpr std::size_t kShared = kRouter + 1;  // shared.fc1.weight .. shared.fc2.bias

// Row indices of `local` (R, 1) per local expert, in order.
template <typename T>
std::vector<std::vector<Index>> rows_by_expert(const Mat<T>& local, Index experts) {
  std::vector<std::vector<Index>> rows(static_cast<std::size_t>(experts));
  for (Index r = 0; r < local.rows(); ++r) {
    rows[static_cast<std::size_t>(local(r, 0))].push_back(r);
  }
  return rows;
}

template <typename T>
Mat<T> gather(const Mat<T>& m, const std::vector<Index>& rows) {
  Mat<T> out(static_cast<Index>(rows.size()), m.cols());
  for (std::size_t i = 0; i < rows.size(); ++i) out.row(static_cast<Index>(i)) = m.row(rows[i]);
  return out;
}

template <typename T>
void scatter(Mat<T>& out, const std::vector<Index>& rows, const Mat<T>& m) {
  for (std::size_t i = 0; i < rows.size(); ++i) out.row(rows[i]) = m.row(static_cast<Index>(i));
}

}  // namespace

MoeBlockMath::MoeBlockMath(Index d_model, Index heads, Index kv_heads, MoeShape moe,
                           TensorRank experts, ContextRing ring)
    : whole_(d_model, heads, kv_heads, moe.d_ff), moe_(moe), rank_(std::move(experts)) {
  if (ring.ring || ring.heads) {
    context_.emplace(d_model, heads, kv_heads, moe.d_ff,
                     TensorRank(std::make_shared<TensorGroup>(1), 0, 1), std::move(ring));
  }
  if (moe.experts < 1 || moe.top_k < 1 || moe.top_k > moe.experts) {
    throw std::invalid_argument("a mixture of " + str(moe.experts) + " experts cannot route " +
                                str(moe.top_k) + " a token (1 <= top_k <= experts)");
  }
  if (moe.shared_d_ff < 0) throw std::invalid_argument("shared_d_ff must not be negative");
  if (moe.experts % rank_.ranks != 0) {
    throw std::invalid_argument(std::to_string(rank_.ranks) +
                                " expert-parallel ranks do not divide " + str(moe.experts) +
                                " experts");
  }
}

std::vector<ParamShape> MoeBlockMath::param_shapes() const {
  const Index h = whole_.d_model();
  std::vector<ParamShape> s = whole_.param_shapes();
  s.resize(kRouter);
  s.push_back({"router.weight", h, moe_.experts, Init::kNormal});
  const auto mlp = [&](const std::string& name, Index f, bool expert) {
    s.push_back({name + ".fc1.weight", h, f, Init::kNormal, expert});
    s.push_back({name + ".fc1.bias", 1, f, Init::kZero, expert});
    s.push_back({name + ".fc2.weight", f, h, Init::kNormal, expert});
    s.push_back({name + ".fc2.bias", 1, h, Init::kZero, expert});
  };
  if (moe_.shared_d_ff > 0) mlp("shared", moe_.shared_d_ff, false);
  const Index first = local_experts() * rank_.rank;
  for (Index j = 0; j < local_experts(); ++j) mlp("expert" + str(first + j), moe_.d_ff, true);
  return s;
}

std::size_t MoeBlockMath::expert_param(Index local, int which) const {
  const std::size_t base = kShared + (moe_.shared_d_ff > 0 ? 4 : 0);
  return base + 4 * static_cast<std::size_t>(local) + static_cast<std::size_t>(which);
}

// Each token's top_k experts by score (the lower index first among equal
// scores) and the softmax of their scores.
template <typename T>
void MoeBlockMath::route(const Values<T>& w, std::vector<Mat<T>>& st) const {
  const Mat<T> scores = st[kLn2Out] * *w[kRouter];
  const Index n = scores.rows(), k = moe_.top_k;
  Mat<T> r(n, 2 * k);
  std::vector<Index> order(static_cast<std::size_t>(moe_.experts));
  for (Index i = 0; i < n; ++i) {
    std::iota(order.begin(), order.end(), Index{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](Index a, Index b) {
      return scores(i, a) > scores(i, b) || (scores(i, a) == scores(i, b) && a < b);
    });
    const T top = scores(i, order[0]);
    T sum = 0;
    for (Index j = 0; j < k; ++j) {
      const auto e = order[static_cast<std::size_t>(j)];
      r(i, j) = static_cast<T>(e);
      r(i, k + j) = std::exp(scores(i, e) - top);
      sum += r(i, k + j);
    }
    r.row(i).tail(k) /= sum;
  }
  st[kRoute] = std::move(r);
}

ExpertScope::ExpertScope(ExpertTally& tally) : previous_(current_expert_tally) {
  current_expert_tally = &tally;
}

ExpertScope::~ExpertScope() {
  current_expert_tally = previous_;
}

template <typename T, class Compute>
Mat<T> MoeBlockMath::exchange(const Mat<T>& rows, const Mat<T>& route, bool backward,
                              Compute&& compute) const {
  const Index k = moe_.top_k, L = local_experts();
  const auto dest = [&](Index row) {
    return static_cast<std::size_t>(static_cast<Index>(route(row / k, row % k)) / L);
  };
  std::vector<Mat<T>> parts(static_cast<std::size_t>(rank_.ranks));
  std::vector<Index> at(parts.size(), 0);
  for (Index r = 0; r < rows.rows(); ++r) ++at[dest(r)];
  for (std::size_t d = 0; d < parts.size(); ++d) parts[d].resize(at[d], rows.cols());
  std::fill(at.begin(), at.end(), 0);
  for (Index r = 0; r < rows.rows(); ++r) parts[dest(r)].row(at[dest(r)]++) = rows.row(r);
  rank_.all_to_all(parts);

  Index total = 0;
  for (const Mat<T>& p : parts) total += p.rows();
  // (Empty parts, and an empty whole, are never sliced: Eigen offsets their
  // null data.)
  Mat<T> received(total, rows.cols());
  total = 0;
  for (const Mat<T>& p : parts) {
    if (p.rows() > 0) received.middleRows(total, p.rows()) = p;
    total += p.rows();
  }
  const auto start = std::chrono::steady_clock::now();
  const Mat<T> results = compute(received);
  if (ExpertTally* tally = current_expert_tally) {
    const auto wall = std::chrono::steady_clock::now() - start;
    tally->calls.push_back({backward, received.rows(),
                            std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count()});
  }
  total = 0;
  for (Mat<T>& p : parts) {  // back to each sender, as many rows as it sent
    const Index n = p.rows();
    if (n > 0) {
      p = results.middleRows(total, n);
    } else {
      p.resize(0, results.cols());
    }
    total += n;
  }
  rank_.all_to_all(parts);

  Mat<T> out(rows.rows(), results.cols());
  std::fill(at.begin(), at.end(), 0);
  for (Index r = 0; r < rows.rows(); ++r) out.row(r) = parts[dest(r)].row(at[dest(r)]++);
  return out;
}

template <typename T>
Mat<T> MoeBlockMath::experts_forward(const Values<T>& w, const Mat<T>& received,
                                     std::vector<Mat<T>>& st) const {
  const auto rows = rows_by_expert(st[kReceivedExpert], local_experts());
  Mat<T> out(received.rows(), whole_.d_model());
  for (Index j = 0; j < local_experts(); ++j) {
    const std::vector<Index>& mine = rows[static_cast<std::size_t>(j)];
    if (mine.empty()) continue;
    const std::size_t at = kExpertStash + 3 * static_cast<std::size_t>(j);
    st[at] = gather(received, mine);
    st[at + 1] = linear_forward(st[at], *w[expert_param(j, 0)], *w[expert_param(j, 1)]);
    st[at + 2] = gelu_forward(st[at + 1]);
    scatter(out, mine, linear_forward(st[at + 2], *w[expert_param(j, 2)], *w[expert_param(j, 3)]));
  }
  return out;
}

template <typename T>
Mat<T> MoeBlockMath::experts_backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& d,
                                      const std::vector<Mat<T>>& st) const {
  const auto rows = rows_by_expert(st[kReceivedExpert], local_experts());
  Mat<T> out(d.rows(), whole_.d_model());
  for (Index j = 0; j < local_experts(); ++j) {
    const std::vector<Index>& mine = rows[static_cast<std::size_t>(j)];
    if (mine.empty()) continue;
    const std::size_t at = kExpertStash + 3 * static_cast<std::size_t>(j);
    const Mat<T> dout = gather(d, mine);
    linear_params(dw, dout, st[at + 2], expert_param(j, 2), expert_param(j, 3));
    const Mat<T> dfc1 =
        gelu_backward(linear_backward_input(dout, *w[expert_param(j, 2)]), st[at + 1]);
    linear_params(dw, dfc1, st[at], expert_param(j, 0), expert_param(j, 1));
    scatter(out, mine, linear_backward_input(dfc1, *w[expert_param(j, 0)]));
  }
  return out;
}

template <typename T>
Mat<T> MoeBlockMath::forward(const Values<T>& w, const Mat<T>& x, const Context& ctx,
                             std::vector<Mat<T>>& st) const {
  st.assign(kExpertStash + 3 * static_cast<std::size_t>(local_experts()), Mat<T>());
  if (context_) {
    context_->forward_attention(w, x, ctx, st);
  } else {
    whole_.forward_attention(w, x, ctx, st);
  }
  st[kLn2Out] = layernorm_forward(st[kX2], *w[kLn2Gain], *w[kLn2Bias], st[kLn2Stats]);
  route(w, st);
  const Mat<T>& u = st[kLn2Out];
  const Index n = u.rows(), h = u.cols(), k = moe_.top_k;
  // Each token's copies, the first column its expert's index on its rank.
  Mat<T> copies(n * k, h + 1);
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < k; ++j) {
      const auto e = static_cast<Index>(st[kRoute](i, j));
      copies(i * k + j, 0) = static_cast<T>(e % local_experts());
      copies.row(i * k + j).tail(h) = u.row(i);
    }
  }
  st[kExpertOut] = exchange(copies, st[kRoute], false, [&](const Mat<T>& received) {
    if (received.rows() == 0) {  // no copy for this rank's experts
      st[kReceivedExpert].resize(0, 1);
      return experts_forward(w, Mat<T>(0, h), st);
    }
    st[kReceivedExpert] = received.col(0);
    return experts_forward(w, Mat<T>(received.rightCols(h)), st);
  });
  Mat<T> out = st[kX2];
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < k; ++j)
      out.row(i) += st[kRoute](i, k + j) * st[kExpertOut].row(i * k + j);
  }
  if (moe_.shared_d_ff > 0) {
    st[kSharedFc1] = linear_forward(u, *w[kShared], *w[kShared + 1]);
    st[kSharedGelu] = gelu_forward(st[kSharedFc1]);
    out += linear_forward(st[kSharedGelu], *w[kShared + 2], *w[kShared + 3]);
  }
  return out;
}

template <typename T>
Mat<T> MoeBlockMath::backward(const Values<T>& w, const Grads<T>& dw, const Mat<T>& dy,
                              const Context& ctx, const std::vector<Mat<T>>& st) const {
  const Mat<T>& u = st[kLn2Out];
  const Mat<T>& route = st[kRoute];
  const Index n = u.rows(), k = moe_.top_k;
  Mat<T> du = Mat<T>::Zero(n, u.cols());
  if (moe_.shared_d_ff > 0) {
    linear_params(dw, dy, st[kSharedGelu], kShared + 2, kShared + 3);
    const Mat<T> dfc1 = gelu_backward(linear_backward_input(dy, *w[kShared + 2]), st[kSharedFc1]);
    linear_params(dw, dfc1, u, kShared, kShared + 1);
    du += linear_backward_input(dfc1, *w[kShared]);
  }
  // out_i += sum_j g_j y_j: dy_j = g_j dy_i to the experts; dg_j = dy_i . y_j,
  // through the softmax over the chosen scores: ds_j = g_j (dg_j - sum_l g_l dg_l).
  Mat<T> dcopies(n * k, u.cols());
  Mat<T> dscores = Mat<T>::Zero(n, moe_.experts);
  std::vector<T> dg(static_cast<std::size_t>(k));
  for (Index i = 0; i < n; ++i) {
    T mean = 0;
    for (Index j = 0; j < k; ++j) {
      const T g = route(i, k + j);
      dg[static_cast<std::size_t>(j)] = dy.row(i).dot(st[kExpertOut].row(i * k + j));
      mean += g * dg[static_cast<std::size_t>(j)];
      dcopies.row(i * k + j) = g * dy.row(i);
    }
    for (Index j = 0; j < k; ++j) {
      dscores(i, static_cast<Index>(route(i, j))) =
          route(i, k + j) * (dg[static_cast<std::size_t>(j)] - mean);
    }
  }
  linear_params(dw, dscores, u, kRouter, std::nullopt);
  du += linear_backward_input(dscores, *w[kRouter]);
  const Mat<T> dinputs = exchange(dcopies, route, true, [&](const Mat<T>& received) {
    return experts_backward(w, dw, received, st);
  });
  for (Index i = 0; i < n; ++i) {
    for (Index j = 0; j < k; ++j) du.row(i) += dinputs.row(i * k + j);
  }
  layernorm_params(dw, du, st[kX2], st[kLn2Stats], kLn2Gain, kLn2Bias);
  const Mat<T> dx2 = dy + layernorm_backward_input(du, st[kX2], st[kLn2Stats], *w[kLn2Gain]);
  if (context_) return context_->backward_attention(w, dw, dx2, ctx, st);
  return whole_.backward_attention(w, dw, dx2, ctx, st);
}

template Mat<float> MoeBlockMath::forward<float>(const Values<float>&, const Mat<float>&,
                                                 const Context&, std::vector<Mat<float>>&) const;
template Mat<double> MoeBlockMath::forward<double>(const Values<double>&, const Mat<double>&,
                                                   const Context&, std::vector<Mat<double>>&) const;
template Mat<float> MoeBlockMath::backward<float>(const Values<float>&, const Grads<float>&,
                                                  const Mat<float>&, const Context&,
                                                  const std::vector<Mat<float>>&) const;
template Mat<double> MoeBlockMath::backward<double>(const Values<double>&, const Grads<double>&,
                                                    const Mat<double>&, const Context&,
                                                    const std::vector<Mat<double>>&) const;

}  // namespace pipescope::exec
