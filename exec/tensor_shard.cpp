#include "exec/tensor_shard.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/models.h"

namespace pipescope::exec {

namespace {

using Axis = ShardRule::Axis;

Index part_of(Index len, int T) {
  return (len + T - 1) / T;
}

// `n` columns (or rows) of m from `start` along the rule's axis.
auto span(Matrix& m, Axis axis, Index start, Index n) {
  return axis == Axis::kColumns ? m.block(0, start, m.rows(), n) : m.block(start, 0, n, m.cols());
}
auto span(const Matrix& m, Axis axis, Index start, Index n) {
  return axis == Axis::kColumns ? m.block(0, start, m.rows(), n) : m.block(start, 0, n, m.cols());
}

Index extent(const Matrix& m, Axis axis) {
  return axis == Axis::kColumns ? m.cols() : m.rows();
}

// Calls f(whole offset, shard offset, length) for each piece of rank r's share.
template <class F>
void for_each_piece(const ShardRule& rule, int T, int r, F&& f) {
  Index whole_at = 0, shard_at = 0;
  for (const Index len : rule.segments) {
    const Index part = part_of(len, T);
    const Index begin = std::min(len, part * r);
    const Index end = std::min(len, part * (r + 1));
    f(whole_at + begin, shard_at, end - begin);
    whole_at += len;
    shard_at += part;
  }
}

Index shard_extent(const ShardRule& rule, int T) {
  Index n = 0;
  for (const Index len : rule.segments) n += part_of(len, T);
  return n;
}

void require_dense(const TransformerParams& params) {
  if (params.moe.enabled()) {
    throw std::invalid_argument(
        "the executor runs mixtures of experts without tensor parallelism (T=1; "
        "exec/expert_shard.h splits them over expert ranks and shares of each sequence)");
  }
}

}  // namespace

std::unique_ptr<Layer> shard_layer(const TransformerParams& p, Layer& whole, std::size_t i,
                                   std::size_t count, const TensorRank& rank,
                                   const ContextRing& ring) {
  const Index f = p.d_ff == 0 ? 4 * p.d_model : p.d_ff;
  auto slice = [&](const std::vector<ShardRule>& r) {
    std::vector<Matrix> values;
    const std::vector<Param*> params = whole.params();
    for (std::size_t k = 0; k < params.size(); ++k) {
      values.push_back(shard_value(params[k]->value, r[k], rank.ranks, rank.rank));
    }
    return values;
  };
  if (i == 0) {
    VocabEmbeddingMath m(p.vocab, p.seq_len, p.d_model, p.learned_positions, rank);
    return std::make_unique<VocabEmbedding>(whole.name(), m, slice(m.shard_rules()));
  }
  if (i + 1 == count) {
    VocabHeadMath m(p.d_model, p.vocab, rank);
    return std::make_unique<VocabHead>(whole.name(), m, slice(m.shard_rules()));
  }
  TensorBlockMath m(p.d_model, p.heads, p.kv_heads, f, rank, ring);
  return std::make_unique<TensorBlock>(whole.name(), m, slice(m.shard_rules()));
}

ContextRing context_ring(int C, bool by_heads, const std::shared_ptr<GroupLink>& link) {
  ContextRing r;
  if (C == 1) return r;
  if (by_heads) {
    r.heads = link ? std::make_shared<TensorGroup>(link) : std::make_shared<TensorGroup>(C);
  } else {
    r.ring = link ? std::make_shared<RingExchange>(link) : std::make_shared<RingExchange>(C);
  }
  return r;
}

ContextRing context_ring_alone(int C, bool by_heads) {
  // A ring of one plays every share's block with its own: the work of each
  // step, not its exchange. The last share's: after the first step every
  // share computes half a block (ring_detail::visible), so any share's work
  // is the others'. Trading heads, a group of one takes back its own rows as
  // every share's.
  ContextRing ring{nullptr, {C - 1, C}, nullptr};
  if (C > 1 && by_heads) ring.heads = std::make_shared<TensorGroup>(1);
  if (C > 1 && !by_heads) ring.ring = std::make_shared<RingExchange>(1);
  return ring;
}

void require_context_shares(const TransformerParams& params, int C) {
  if (C < 1) throw std::invalid_argument("context parallelism needs C >= 1");
  if (C > 1 && params.seq_len % (2 * C) != 0) {
    throw std::invalid_argument("C=" + std::to_string(C) + ": 2C chunks do not divide seq_len " +
                                std::to_string(params.seq_len));
  }
}

Matrix shard_value(const Matrix& whole, const ShardRule& rule, int T, int r) {
  if (rule.axis == Axis::kWhole) return whole;
  Matrix out = rule.axis == Axis::kColumns ? Matrix::Zero(whole.rows(), shard_extent(rule, T))
                                           : Matrix::Zero(shard_extent(rule, T), whole.cols());
  for_each_piece(rule, T, r, [&](Index from, Index to, Index n) {
    span(out, rule.axis, to, n) = span(whole, rule.axis, from, n);
  });
  return out;
}

Matrix unshard_value(const std::vector<const Matrix*>& shards, const ShardRule& rule, Index rows,
                     Index cols) {
  if (shards.empty()) throw std::invalid_argument("no shards to put together");
  const int T = static_cast<int>(shards.size());
  Matrix out(rows, cols);
  if (rule.axis == Axis::kWhole) {
    if (shards[0]->rows() != rows || shards[0]->cols() != cols) {
      throw std::invalid_argument("a whole parameter's copy is not (" + std::to_string(rows) +
                                  ", " + std::to_string(cols) + ")");
    }
    return *shards[0];
  }
  Index whole_extent = 0;
  for (const Index len : rule.segments) whole_extent += len;
  if (whole_extent != extent(out, rule.axis)) {
    throw std::invalid_argument("the shards' segments do not make the whole parameter");
  }
  for (int r = 0; r < T; ++r) {
    const Matrix& s = *shards[static_cast<std::size_t>(r)];
    const Axis other = rule.axis == Axis::kColumns ? Axis::kRows : Axis::kColumns;
    if (extent(s, rule.axis) != shard_extent(rule, T) || extent(s, other) != extent(out, other)) {
      throw std::invalid_argument("rank " + std::to_string(r) + "'s shard does not fit");
    }
    for_each_piece(rule, T, r, [&](Index to, Index from, Index n) {
      span(out, rule.axis, to, n) = span(s, rule.axis, from, n);
    });
  }
  return out;
}

std::vector<ShardRule> shard_rules_of(const Layer& layer) {
  if (const auto* e = dynamic_cast<const VocabEmbedding*>(&layer)) return e->math().shard_rules();
  if (const auto* b = dynamic_cast<const TensorBlock*>(&layer)) return b->math().shard_rules();
  if (const auto* h = dynamic_cast<const VocabHead*>(&layer)) return h->math().shard_rules();
  throw std::invalid_argument("layer '" + layer.name() + "' is not a tensor-parallel shard");
}

std::vector<LayerList> build_tensor_ranks(const TransformerParams& params, std::uint64_t seed,
                                          int T) {
  return build_context_ranks(params, seed, T, 1);
}

std::vector<LayerList> build_context_ranks(const TransformerParams& params, std::uint64_t seed,
                                           int T, int C, const std::shared_ptr<GroupLink>& link,
                                           bool by_heads) {
  require_context_shares(params, C);
  require_dense(params);
  if (link && (T != 1 || link->ranks() != C)) {
    throw std::invalid_argument("C=" + std::to_string(C) + " shares over a link of " +
                                std::to_string(link->ranks()) + " processes" +
                                (T != 1 ? " beside T=" + std::to_string(T) : std::string()));
  }
  LayerList whole = build_transformer(params, seed);
  std::vector<LayerList> ranks(static_cast<std::size_t>(T) * static_cast<std::size_t>(C));
  for (std::size_t i = 0; i < whole.size(); ++i) {
    // A ring (or a group trading heads) for each tensor rank, over the C
    // shares; a tensor group for each share.
    std::vector<ContextRing> rings;
    for (int t = 0; t < T; ++t) rings.push_back(context_ring(C, by_heads, link));
    for (int c = 0; c < C; ++c) {
      const auto group = std::make_shared<TensorGroup>(T);
      for (int t = 0; t < T; ++t) {
        ContextRing ring = rings[static_cast<std::size_t>(t)];
        ring.share = {c, C};
        ranks[static_cast<std::size_t>(c * T + t)].push_back(
            shard_layer(params, *whole[i], i, whole.size(), TensorRank(group, t, T), ring));
      }
    }
  }
  return ranks;
}

LayerList build_tensor_rank_alone(const TransformerParams& params, std::uint64_t seed, int T, int C,
                                  bool by_heads) {
  require_dense(params);
  LayerList whole = build_transformer(params, seed);
  LayerList out;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const ContextRing ring = context_ring_alone(C, by_heads);
    out.push_back(shard_layer(params, *whole[i], i, whole.size(),
                              TensorRank(std::make_shared<TensorGroup>(1), 0, T), ring));
  }
  return out;
}

namespace {

// The whole shape of a parameter whose shard is `shard`: the rule's segments
// along its split axis.
std::pair<Index, Index> whole_shape(const Matrix& shard, const ShardRule& rule) {
  Index total = 0;
  for (const Index len : rule.segments) total += len;
  return {rule.axis == Axis::kRows ? total : shard.rows(),
          rule.axis == Axis::kColumns ? total : shard.cols()};
}

}  // namespace

std::vector<Matrix> unshard_params(const std::vector<const LayerList*>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("no ranks to put together");
  std::vector<Matrix> out;
  for (std::size_t l = 0; l < ranks[0]->size(); ++l) {
    const std::vector<ShardRule> rules = shard_rules_of(*(*ranks[0])[l]);
    for (std::size_t k = 0; k < rules.size(); ++k) {
      std::vector<const Matrix*> shards;
      for (const LayerList* rank : ranks) shards.push_back(&(*rank)[l]->params()[k]->value);
      const auto [rows, cols] = whole_shape(*shards[0], rules[k]);
      out.push_back(unshard_value(shards, rules[k], rows, cols));
    }
  }
  return out;
}

}  // namespace pipescope::exec
