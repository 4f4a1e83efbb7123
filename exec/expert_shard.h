#pragma once
// A mixture-of-experts transformer over the E ranks of expert parallelism
// (exec/compute/moe_layers.h), and back. Every rank's layers are the whole
// model's (build_transformer with the same seed) but for its mixtures'
// routed experts, experts / E of them: E = 1 and E > 1 start from the same
// parameters.

#include <cstdint>
#include <memory>
#include <vector>

#include "costmodels/model.h"
#include "exec/compute/group_link.h"
#include "exec/compute/layer.h"

namespace pipescope::exec {

// A device's E x C ranks as processes of one link (rank e C + c): the link of
// this process's expert rank's C shares and that of its share's E expert
// ranks, each split from `link` (every rank calls this at once), or `link`
// itself where the other is 1; none without a link or where C (E) is 1.
struct SubLinks {
  std::shared_ptr<GroupLink> shares;
  std::shared_ptr<GroupLink> experts;
};
SubLinks sub_links(const std::shared_ptr<GroupLink>& link, int E, int C);

// One LayerList per rank, each layer in the whole model's order and names;
// each mixture's E blocks share one TensorGroup, rank r holding experts
// r L .. r L + L - 1 (L = experts / E). With a `link` the ranks are processes
// (exec/compute/group_link.h): the groups are linked ones, and only the
// link's rank of the lists is to be run here.
// Under context parallelism too (C > 1): E x C lists, rank e C + c holding
// share c of expert rank e's sequences, every block attending round the ring
// of its expert rank's C shares (`by_heads`: trading heads among them, as
// build_context_ranks), each mixture's tokens going to the E ranks of its
// share (exec/compute/moe_layers.h); with a link of E x C processes the
// rings and mixtures meet over its sub_links.
// Throws std::invalid_argument for what build_transformer refuses, unless
// the model has a mixture whose experts E divides (E > 1) and 2C divides
// seq_len, and for a link of another size than E x C.
std::vector<LayerList> build_expert_ranks(const TransformerParams& params, std::uint64_t seed,
                                          int E, const std::shared_ptr<GroupLink>& link = nullptr,
                                          int C = 1, bool by_heads = false);

// Rank 0's layers alone, its all-to-alls returning at once (a group of one):
// what a rank with a balanced share of the routed tokens computes, for the
// profiler to time; under context parallelism its ring of one playing the
// last share (build_tensor_rank_alone).
LayerList build_expert_rank_alone(const TransformerParams& params, std::uint64_t seed, int E,
                                  int C = 1, bool by_heads = false);

// Every parameter's whole value from the ranks' layers (ranks[r] is rank r's
// list): layer by layer, rank 0's copy of a parameter every rank holds and
// each rank's experts in rank order, in the whole model's parameter order.
std::vector<Matrix> whole_expert_params(const std::vector<const LayerList*>& ranks);

}  // namespace pipescope::exec
