#pragma once
// A transformer cut into the shards of T tensor-parallel ranks
// (exec/compute/tensor_layers.h), and back. Every shard is a slice of the whole model's
// own values (build_transformer with the same seed), so rank r's layers, put
// together with the other ranks', are exactly the whole model: T = 1 and T > 1
// start from the same parameters.

#include <cstdint>
#include <memory>
#include <vector>

#include "costmodels/model.h"
#include "exec/compute/group_link.h"
#include "exec/compute/layer.h"
#include "exec/compute/tensor_layers.h"

namespace pipescope::exec {

// Rank r's shard of a whole parameter value under `rule`, for T ranks
// (padding the split axis with zeros up to T equal parts of each segment).
Matrix shard_value(const Matrix& whole, const ShardRule& rule, int T, int r);
// The whole value from the ranks' shards (shards[r] is rank r's): the split
// axis put back together without its padding; a whole parameter is rank 0's.
// Throws std::invalid_argument when the shards do not fit `rows` x `cols`.
Matrix unshard_value(const std::vector<const Matrix*>& shards, const ShardRule& rule, Index rows,
                     Index cols);

// How each parameter of a shard layer splits (shard_rules of its math); throws
// std::invalid_argument for a layer that is not a shard.
std::vector<ShardRule> shard_rules_of(const Layer& layer);

// The whole transformer's layer `i` (of build_transformer's `count`) as the
// dense shard of `rank` (exec/compute/tensor_layers.h), its values sliced
// from `whole`'s; a block attends round `ring`. Not for a mixture's blocks
// (exec/expert_shard.h builds those).
std::unique_ptr<Layer> shard_layer(const TransformerParams& p, Layer& whole, std::size_t i,
                                   std::size_t count, const TensorRank& rank,
                                   const ContextRing& ring = {});

// One layer's exchange among C context-parallel shares, its share not yet
// set: a ring (or with `by_heads` a group trading heads) of C threads, or of
// the processes of `link`; none for C = 1.
ContextRing context_ring(int C, bool by_heads, const std::shared_ptr<GroupLink>& link = nullptr);
// The same for the profiler: a ring (or group) of one that plays share
// C - 1 with its own keys and values (build_tensor_rank_alone).
ContextRing context_ring_alone(int C, bool by_heads);
// Throws std::invalid_argument unless C >= 1 and 2C divides seq_len.
void require_context_shares(const TransformerParams& params, int C);

// The transformer of `params` split over T ranks: one LayerList per rank, the
// layers of each in the whole model's order and names, each layer's T shards
// sharing one TensorGroup. Throws std::invalid_argument for what
// build_transformer refuses, for a mixture of experts (the executor splits
// those over expert ranks alone, exec/expert_shard.h) and unless T divides
// heads, kv_heads and d_ff.
std::vector<LayerList> build_tensor_ranks(const TransformerParams& params, std::uint64_t seed,
                                          int T);

// The same under context parallelism over C shares of each sequence: T x C
// lists, rank c T + t holding share c's tensor rank t (each block attending
// round the ring of the C ranks of its t, exec/compute/ring_attention.h), the
// shares' copies of a parameter alike. With a `link` (T = 1) the shares are
// processes (exec/compute/group_link.h): every block's ring is this process's
// rank of the link's (the other shares' lists are built too, for their
// shapes, and never run). `by_heads`: the all-to-all form instead of the ring
// (exec/compute/heads_attention.h), the C of each t one group trading
// sequence for heads, which C must divide. Throws std::invalid_argument as
// build_tensor_ranks does, unless 2C divides seq_len, for a link beside T > 1
// or of another size than C, and by heads unless C divides each rank's heads
// and key-value heads.
std::vector<LayerList> build_context_ranks(const TransformerParams& params, std::uint64_t seed,
                                           int T, int C,
                                           const std::shared_ptr<GroupLink>& link = nullptr,
                                           bool by_heads = false);

// Rank 0's layers alone, their all-reduces returning at once (a group of one):
// what one rank computes, for the profiler to time. Under context parallelism
// (C > 1) the last share's (C - 1; every share's work is alike), its ring of
// one passing each step its own keys and values as another share's: each
// step's work, not its exchange (`by_heads`: a group of one that gives its
// rows back as every share's).
LayerList build_tensor_rank_alone(const TransformerParams& params, std::uint64_t seed, int T,
                                  int C = 1, bool by_heads = false);

// Every parameter's whole value from the ranks' layers (ranks[r] is rank r's
// list, all cut alike), layer by layer in each layer's parameter order.
std::vector<Matrix> unshard_params(const std::vector<const LayerList*>& ranks);

}  // namespace pipescope::exec
