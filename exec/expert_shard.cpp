#include "exec/expert_shard.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/moe_layers.h"
#include "exec/models.h"
#include "exec/tensor_shard.h"

namespace pipescope::exec {

namespace {

// Layer `whole` (build_transformer's i-th of `count`) as rank `rank`'s of
// share `ring`: a copy, or for a mixture its rank's share of the routed
// experts (the parameters ParamShape::expert marks, in expert order); under
// context parallelism (a ring) the dense layers are shares too.
std::unique_ptr<Layer> rank_layer(const TransformerParams& p, Layer& whole, std::size_t i,
                                  std::size_t count, const TensorRank& rank,
                                  const ContextRing& ring) {
  const auto* block = dynamic_cast<const MoeBlock*>(&whole);
  const std::vector<Param*> params = whole.params();
  std::vector<Matrix> values;
  if (block == nullptr && (ring.ring || ring.heads)) {
    return shard_layer(p, whole, i, count, TensorRank(std::make_shared<TensorGroup>(1), 0, 1),
                       ring);
  }
  if (block == nullptr) {
    for (const Param* param : params) values.push_back(param->value);
    if (const auto* dense = dynamic_cast<const TransformerBlock*>(&whole)) {
      return std::make_unique<TransformerBlock>(whole.name(), dense->math(), std::move(values));
    }
    if (const auto* e = dynamic_cast<const Embedding*>(&whole)) {
      return std::make_unique<Embedding>(whole.name(), e->math(), std::move(values));
    }
    const auto& head = dynamic_cast<const LmHead&>(whole);
    return std::make_unique<LmHead>(whole.name(), head.math(), std::move(values));
  }
  const MoeBlockMath& m = block->math();
  MoeBlockMath mine(m.d_model(), m.heads(), m.kv_heads(), m.moe(), rank, ring);
  const std::size_t per_rank = 4 * static_cast<std::size_t>(mine.local_experts());
  std::size_t expert = 0;  // expert parameters seen
  for (const Param* param : params) {
    if (!param->expert) {
      values.push_back(param->value);
    } else if (expert++ / per_rank == static_cast<std::size_t>(rank.rank)) {
      values.push_back(param->value);
    }
  }
  return std::make_unique<MoeBlock>(whole.name(), mine, std::move(values));
}

void require_mixture(const TransformerParams& params, int E) {
  if (E < 1) throw std::invalid_argument("expert parallelism needs E >= 1");
  if (E > 1 && !params.moe.enabled()) {
    throw std::invalid_argument("E=" + std::to_string(E) +
                                ": expert parallelism spreads a mixture's experts; the model has "
                                "none");
  }
}

}  // namespace

SubLinks sub_links(const std::shared_ptr<GroupLink>& link, int E, int C) {
  if (!link) return {};
  if (E == 1) return {link, nullptr};
  if (C == 1) return {nullptr, link};
  const int e = link->rank() / C, c = link->rank() % C;
  std::shared_ptr<GroupLink> shares = link->split(e, c);
  return {std::move(shares), link->split(c, e)};
}

std::vector<LayerList> build_expert_ranks(const TransformerParams& params, std::uint64_t seed,
                                          int E, const std::shared_ptr<GroupLink>& link, int C,
                                          bool by_heads) {
  require_mixture(params, E);
  require_context_shares(params, C);
  if (link && link->ranks() != E * C) {
    throw std::invalid_argument("E=" + std::to_string(E) + " x C=" + std::to_string(C) +
                                " ranks over a link of " + std::to_string(link->ranks()) +
                                " processes");
  }
  // As processes, this one's rank e C + c meets its expert rank's shares
  // round the ring and its share's expert ranks in the mixtures.
  const SubLinks sub = sub_links(link, E, C);
  LayerList whole = build_transformer(params, seed);
  const auto e_ranks = static_cast<std::size_t>(E), c_shares = static_cast<std::size_t>(C);
  std::vector<LayerList> ranks(e_ranks * c_shares);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    // A ring for each expert rank, over its C shares; the experts' group of
    // each share, over the E expert ranks.
    std::vector<ContextRing> rings;
    for (int e = 0; e < E; ++e) rings.push_back(context_ring(C, by_heads, sub.shares));
    for (int c = 0; c < C; ++c) {
      const auto group = sub.experts ? std::make_shared<TensorGroup>(sub.experts)
                                     : std::make_shared<TensorGroup>(E);
      for (int e = 0; e < E; ++e) {
        ContextRing ring = rings[static_cast<std::size_t>(e)];
        ring.share = {c, C};
        ranks[static_cast<std::size_t>(e * C + c)].push_back(
            rank_layer(params, *whole[i], i, whole.size(), TensorRank(group, e, E), ring));
      }
    }
  }
  return ranks;
}

LayerList build_expert_rank_alone(const TransformerParams& params, std::uint64_t seed, int E, int C,
                                  bool by_heads) {
  require_mixture(params, E);
  require_context_shares(params, C);
  LayerList whole = build_transformer(params, seed);
  LayerList out;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    out.push_back(rank_layer(params, *whole[i], i, whole.size(),
                             TensorRank(std::make_shared<TensorGroup>(1), 0, E),
                             context_ring_alone(C, by_heads)));
  }
  return out;
}

std::vector<Matrix> whole_expert_params(const std::vector<const LayerList*>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("no ranks to put together");
  std::vector<Matrix> out;
  for (std::size_t l = 0; l < ranks[0]->size(); ++l) {
    bool experts_done = false;
    for (const Param* p : (*ranks[0])[l]->params()) {
      if (!p->expert) {
        out.push_back(p->value);
      } else if (!experts_done) {  // the experts come last, rank by rank
        for (const LayerList* rank : ranks) {
          for (const Param* q : (*rank)[l]->params()) {
            if (q->expert) out.push_back(q->value);
          }
        }
        experts_done = true;
      }
    }
  }
  return out;
}

}  // namespace pipescope::exec
