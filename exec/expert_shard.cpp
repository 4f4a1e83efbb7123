#include "exec/expert_shard.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "exec/compute/moe_layers.h"
#include "exec/models.h"

namespace pipescope::exec {

namespace {

// Layer `whole` as rank `rank`'s: a copy, or for a mixture its rank's share of
// the routed experts (the parameters ParamShape::expert marks, in expert order).
std::unique_ptr<Layer> rank_layer(Layer& whole, const TensorRank& rank) {
  const auto* block = dynamic_cast<const MoeBlock*>(&whole);
  const std::vector<Param*> params = whole.params();
  std::vector<Matrix> values;
  if (block == nullptr) {
    for (const Param* p : params) values.push_back(p->value);
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
  MoeBlockMath mine(m.d_model(), m.heads(), m.kv_heads(), m.moe(), rank);
  const std::size_t per_rank = 4 * static_cast<std::size_t>(mine.local_experts());
  std::size_t expert = 0;  // expert parameters seen
  for (const Param* p : params) {
    if (!p->expert) {
      values.push_back(p->value);
    } else if (expert++ / per_rank == static_cast<std::size_t>(rank.rank)) {
      values.push_back(p->value);
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

std::vector<LayerList> build_expert_ranks(const TransformerParams& params, std::uint64_t seed,
                                          int E, const std::shared_ptr<GroupLink>& link) {
  require_mixture(params, E);
  if (link && link->ranks() != E) {
    throw std::invalid_argument("E=" + std::to_string(E) + " expert ranks over a link of " +
                                std::to_string(link->ranks()) + " processes");
  }
  LayerList whole = build_transformer(params, seed);
  std::vector<LayerList> ranks(static_cast<std::size_t>(E));
  for (auto& layer : whole) {
    const auto group =
        link ? std::make_shared<TensorGroup>(link) : std::make_shared<TensorGroup>(E);
    for (int r = 0; r < E; ++r) {
      ranks[static_cast<std::size_t>(r)].push_back(rank_layer(*layer, TensorRank(group, r, E)));
    }
  }
  return ranks;
}

LayerList build_expert_rank_alone(const TransformerParams& params, std::uint64_t seed, int E) {
  require_mixture(params, E);
  LayerList whole = build_transformer(params, seed);
  LayerList out;
  for (auto& layer : whole) {
    out.push_back(rank_layer(*layer, TensorRank(std::make_shared<TensorGroup>(1), 0, E)));
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
